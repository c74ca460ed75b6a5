// The packing answers (recording/packing.libsonnet), per fleet. Stranded capacity alerts on the
// fleet's share, not a hypervisor's: one host with a little memory free and no vCPU left has all
// of it stranded, which HypervisorResourceNearlyExhausted already says of its vCPUs; the question
// "we have terabytes free but nothing fits" is the fleet's, and its answer (rebalance, add hosts
// of another shape, change a flavor) too. The dashboard names the hypervisors.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-packing',
        rules: [
          alert(
            $._config,
            'HypervisorStrandedCapacityHigh',
            'strandedCapacity',
            'resource:hypervisor_resource_stranded_of_free:ratio{resource=~"vcpu|memory"} > %(strandedShareWarning)g' % $._config,
            'Much of the fleet\'s free capacity is stranded: no flavor can use it.',
            '{{ $value | humanizePercentage }} of the free {{ $labels.resource }} of the hypervisors in service is stranded (more than %g%%): no packing of the fleet\'s flavors can use it, because another resource of the same hypervisors runs out first (hypervisor_resource_stranded_by names it).' % (100 * $._config.strandedShareWarning),
          ),
          alert(
            $._config,
            'HypervisorFlavorSellableExhausted',
            'flavorSellable',
            // The value: the instances that still fit, the failover reserve. Not while a shard's
            // fleet tolerates fewer failures than its reserve: then nothing is sellable, and
            // HypervisorFleetCannotTolerateHostFailure says why. Discovered flavors are left out as
            // HypervisorFlavorHeadroomLow leaves them (flavorHeadroomDiscovered).
            (
              |||
                flavor:hypervisor_schedulable_instances:sum > 0
                  and on (%(fleetLabel)s, flavor) flavor:virtcap_flavor_sellable_instances:sum == 0
                  unless on (%(fleetLabel)s) (
                    min by (%(fleetLabel)s) (
                      virtcap_fleet_host_failures_tolerated{%(selector)s}
                        - on (%(fleetLabel)s, job, instance) virtcap_failover_reserve_host_failures{%(selector)s}
                    ) < 0
                  )
              ||| + (
                if $._config.flavorHeadroomDiscovered then '' else |||
                  unless on (%(fleetLabel)s, flavor) (
                    virtcap_flavor_info{%(selector)s, source="discovered"}
                      unless on (%(fleetLabel)s, flavor) virtcap_flavor_info{%(selector)s, source="configured"}
                  )
                |||
              )
            ) % $._config,
            'No more instances of a flavor can be sold: what is free is the failover reserve.',
            '{{ $value }} more instances of flavor {{ $labels.flavor }} still fit, but placing any of them would leave the fleet unable to re-home every domain after the host failures it reserves for (scheduler.failure_tolerance.reserve_host_failures).',
          ),
        ],
      },
    ],
  },
}
