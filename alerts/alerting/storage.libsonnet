// Shared storage pools, each once per fleet (rules/storage.libsonnet).
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-storage',
        rules: [
          alert(
            $._config,
            'HypervisorStoragePoolOverProvisioned',
            'storagePoolOverProvisioned',
            |||
              pool:hypervisor_storage_pool_provisioned_ratio:max > %(storagePoolProvisionedRatio)g
            ||| % $._config,
            "A shared storage pool's volumes were promised more than it holds.",
            'Volumes of shared storage pool {{ $labels.pool }} add up to {{ $value | humanizePercentage }} of its capacity, above %g%%: thin provisioning can run the pool out of space before its volumes are full.' % (100 * $._config.storagePoolProvisionedRatio),
          ),
        ],
      },
    ],
  },
}
