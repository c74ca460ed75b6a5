// Shared storage pools (NFS, Ceph RBD...), each once per fleet: `max by (fleet, pool)` first, since
// two virtcap replicas of one fleet (or shards whose hypervisors see the same pool) export the same
// pool with different job or instance labels; then the fleet's totals. How many hypervisors see a
// pool is counted from the memberships, each hypervisor once: a shard's
// hypervisor_storage_pool_hypervisors counts only its own hypervisors, and the largest of the
// shards' counts would be too few.
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
          for quantity in ['capacity_bytes', 'used_bytes', 'provisioned_bytes', 'provisioned_ratio']
        ] + [
          {
            record: 'pool:hypervisor_storage_pool_hypervisors:count',
            expr: 'count by (%(fleetLabel)s, pool) (count by (%(fleetLabel)s, pool, hypervisor) (hypervisor_storage_pool_info{%(selector)s}))' % c,
          },
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
