// Hypervisors in maintenance (hypervisor_maintenance_start_timestamp_seconds): one left out of
// service with no end for longer than planned. A maintenance with an end (`until`) ends by itself
// in the exporter.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

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
            // How long it has lasted counts from its start, which the exporter keeps (across its
            // own restarts too): a gap in the series (the exporter down for a while) does not start
            // the week again. The short `for` only rides out a scrape or two. One alert per
            // hypervisor, whatever the number of exporters reporting it (joins.once).
            joins.once($._config, |||
              time() - hypervisor_maintenance_start_timestamp_seconds{%(selector)s} > %(maintenanceOverdueSeconds)d
                unless on (%(fleetLabel)s, job, instance, hypervisor) hypervisor_maintenance_end_timestamp_seconds{%(selector)s}
            ||| % $._config),
            'A hypervisor has been in maintenance for long, with no end set.',
            '{{ $labels.hypervisor }} has been in maintenance for {{ $value | humanizeDuration }} with no end set: its capacity is missing from the fleet.',
          ),
        ],
      },
    ],
  },
}
