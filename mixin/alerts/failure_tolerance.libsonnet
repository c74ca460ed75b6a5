// Whether the fleet can lose a hypervisor, from the exporter's simulated evacuations.
local alert = (import '../lib/alerts.libsonnet').alert;

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
            |||
              hypervisor_evacuation_unplaced_domains{%(selector)s}
                and hypervisor_evacuation_feasible{%(selector)s} == 0
                and on (%(fleetLabel)s, job, instance) (count by (%(fleetLabel)s, job, instance) (hypervisor_up{%(selector)s}) > 1)
            ||| % $._config,
            'The fleet could not re-home the domains of a hypervisor if it failed.',
            'If {{ $labels.hypervisor }} failed, {{ $value | humanize }} of its domains would find no host on the other hypervisors that are up (each scheduled in turn, largest first, through the simulated Nova scheduler).',
          ),
        ],
      },
    ],
  },
}
