// Hypervisors in maintenance (hypervisor_maintenance): one left out of service with no end for
// longer than planned. A maintenance with an end (`until`) ends by itself in the exporter.
local alert = (import '../lib/alerts.libsonnet').alert;
local joins = import '../lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-maintenance',
        rules: [
          alert(
            $._config,
            'HypervisorMaintenanceOverdue',
            'maintenanceOverdue',
            // How long it has lasted is the `for`: the exporter exports no start time. Prometheus
            // keeps a `for` across its own restarts (up to --rules.alert.for-outage-tolerance); a
            // gap in the series (the exporter down for a while) starts it again. One alert per
            // hypervisor, whatever the number of exporters reporting it (joins.once).
            joins.once($._config, |||
              hypervisor_maintenance{%(selector)s} == 1
                unless on (%(fleetLabel)s, job, instance, hypervisor) hypervisor_maintenance_end_timestamp_seconds{%(selector)s}
            ||| % $._config),
            'A hypervisor has been in maintenance for long, with no end set.',
            '{{ $labels.hypervisor }} has been in maintenance for more than %s with no end set: its capacity is missing from the fleet.' % $._config['for'].maintenanceOverdue,
          ),
        ],
      },
    ],
  },
}
