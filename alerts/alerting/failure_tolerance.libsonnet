// Whether the fleet, and each host group, can lose a hypervisor, from the exporter's simulated
// evacuations. A hypervisor in maintenance is left out: the exporter already leaves it out of the
// targets of every evacuation; its own stays computed (can it be drained?) but is no failure to
// plan for, and it is no host to count on in the "more than one" guard.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-failure-tolerance',
        rules: [
          alert(
            $._config,
            'HypervisorFleetCannotTolerateHostFailure',
            'fleetHostFailure',
            // The exporter's simulation: the hypervisor's domains, largest first, through the
            // simulated Nova scheduler onto the other hypervisors that are up. The value is how
            // many found no host. A fleet of one hypervisor is never told it cannot lose it; the
            // hypervisors a simulation covers are those one exporter audits (job, instance) in one
            // fleet: two federated fleets may well have exporters of the same job and instance.
            // One alert per hypervisor however many exporters simulate it (an HA pair's replicas),
            // with the most domains any of them found no host for.
            joins.once($._config, |||
              hypervisor_evacuation_unplaced_domains{%(selector)s}
                and hypervisor_evacuation_feasible{%(selector)s} == 0
                unless on (%(fleetLabel)s, hypervisor) hypervisor_maintenance{%(selector)s} == 1
                and on (%(fleetLabel)s, job, instance) (count by (%(fleetLabel)s, job, instance) %(inService)s > 1)
            ||| % $._config { inService: joins.inService($._config, 'hypervisor_up{%(selector)s}' % $._config) }),
            'The fleet could not re-home the domains of a hypervisor if it failed.',
            'If {{ $labels.hypervisor }} failed, {{ $value | humanize }} of its domains would find no host on the other hypervisors that are up (each scheduled in turn, largest first, through the simulated Nova scheduler).',
          ),
          alert(
            $._config,
            'HypervisorGroupCannotTolerateHostFailure',
            'groupHostFailure',
            // Per group (rules/groups.libsonnet): its members in service that cannot be evacuated,
            // where the group has two or more in service. For an availability zone this is the
            // scheduler's own question (an evacuation stays in its zone); for an aggregate or a
            // rack it says where the hypervisors that cannot be evacuated are.
            |||
              group:hypervisor_evacuation_infeasible:count
                and on (%(fleetLabel)s, kind, group) group:hypervisor_in_service:count > 1
            ||| % $._config,
            'A host group has hypervisors whose domains could not all be re-homed if they failed.',
            '{{ $value | humanize }} hypervisor(s) of {{ $labels.kind }} {{ $labels.group }} could not be evacuated: some of their domains would find no host through the simulated Nova scheduler (an evacuation stays within its availability zone).',
          ),
        ],
      },
    ],
  },
}
