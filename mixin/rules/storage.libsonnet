// Shared storage pools (NFS, Ceph RBD...), each once per fleet: `max by (fleet, pool)` first, since
// two virtcap replicas of one fleet (or shards whose hypervisors see the same pool) export the same
// pool with different job or instance labels; then the fleet's totals.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-storage.rules',
        local c = $._config,
        rules: [
          {
            record: 'pool:hypervisor_storage_pool_%s:max' % quantity,
            expr: 'max by (%(fleetLabel)s, pool) (hypervisor_storage_pool_%(quantity)s{%(selector)s})' % c { quantity: quantity },
          }
          for quantity in ['capacity_bytes', 'used_bytes', 'provisioned_bytes', 'provisioned_ratio', 'hypervisors']
        ] + [
          {
            record: ':hypervisor_storage_pool_%s:sum' % quantity,
            expr: 'sum by (%s) (pool:hypervisor_storage_pool_%s:max)' % [c.fleetLabel, quantity],
          }
          for quantity in ['capacity_bytes', 'used_bytes', 'provisioned_bytes']
        ],
      },
    ],
  },
}
