local joins = import '../../mixin/lib/joins.libsonnet';

// Fleet totals and ratios per resource, the sum-based bound of the loss of the largest hypervisor,
// and the same ratios per hypervisor. The fleet figures are of the hypervisors in service: one in
// maintenance offers nothing, so its capacity (and what its domains use) is left out, and it is
// neither the largest hypervisor the fleet can lose nor one more to count on; the per-hypervisor
// ratios describe the host, in maintenance or not. Every aggregation keeps the fleet label (config.libsonnet):
// the totals of two fleets federated into one Prometheus stay two totals; and counts each hypervisor
// once, however many exporters report it (joins.once: the two replicas of an HA pair). The rules
// after the sums read them, so they stay in this one group, evaluated in order.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-resources.rules',
        rules: [
          {
            record: 'resource:hypervisor_resource_%s:sum' % quantity,
            expr: 'sum by (%(fleetLabel)s, resource, unit) %(series)s' % $._config {
              series: joins.inService(
                $._config,
                joins.once(
                  $._config,
                  // Used only where there is a limit: a resource whose total is unknown (disk
                  // without its storage found) still exports used, and counting it would inflate
                  // every comparison with the limit and total sums (utilization, overcommit, N+1).
                  if quantity == 'used'
                  then 'hypervisor_resource_used{%(selector)s} and hypervisor_resource_limit{%(selector)s}' % $._config
                  else 'hypervisor_resource_%s{%s}' % [quantity, $._config.selector],
                  ['resource', 'unit'],
                  if quantity == 'free' then 'min' else 'max',
                ),
              ),
            },
          }
          for quantity in ['size', 'reserved', 'limit', 'used', 'free', 'claimed', 'actual_usage']
        ] + [
          {
            record: 'resource:hypervisor_resource_limit:max',
            expr: 'max by (%s, resource, unit) %s' % [$._config.fleetLabel, joins.inService($._config, 'hypervisor_resource_limit{%(selector)s}' % $._config)],
          },
          {
            // hypervisors that offer the resource at all: the N+1 test is meaningless below two
            record: 'resource:hypervisor_resource_offered:count',
            expr: 'count by (%s, resource, unit) %s' % [
              $._config.fleetLabel,
              joins.inService($._config, joins.once($._config, 'hypervisor_resource_limit{%(selector)s} > 0' % $._config, ['resource', 'unit'])),
            ],
          },
          {
            // The sum-based bound of the loss of one host (kubernetes-mixin's KubeCPUOvercommit):
            // used - (limit - the largest limit), per fleet and resource, where two or more
            // hypervisors offer it. Above 0 the sums say the fleet cannot lose its largest
            // hypervisor; below 0 it is the margin. Kept to compare with the simulated evacuations,
            // which the alert uses: the sums ignore that a domain lands whole on one host
            // (fragmentation, NUMA, devices) and count an overcommitted host's negative free
            // against the others.
            record: 'resource:hypervisor_failover_shortfall:sum',
            expr: |||
              (
                resource:hypervisor_resource_used:sum
                  - (resource:hypervisor_resource_limit:sum - resource:hypervisor_resource_limit:max)
              )
              and resource:hypervisor_resource_offered:count > 1
            |||,
          },
          {
            record: 'resource:hypervisor_resource_utilization:ratio',
            expr: 'resource:hypervisor_resource_used:sum / resource:hypervisor_resource_limit:sum',
          },
          {
            record: 'resource:hypervisor_resource_effective_overcommit:ratio',
            expr: |||
              resource:hypervisor_resource_used:sum
                / (resource:hypervisor_resource_size:sum - resource:hypervisor_resource_reserved:sum)
            |||,
          },
          {
            record: 'hypervisor_resource:hypervisor_resource_utilization:ratio',
            expr: 'hypervisor_resource_used{%(selector)s} / hypervisor_resource_limit{%(selector)s}' % $._config,
          },
          {
            record: 'hypervisor_resource:hypervisor_resource_effective_overcommit:ratio',
            expr: |||
              hypervisor_resource_used{%(selector)s}
                / (hypervisor_resource_size{%(selector)s} - hypervisor_resource_reserved{%(selector)s})
            ||| % $._config,
          },
        ],
      },
    ],
  },
}
