// Whether virtcap can see the hypervisors, and Prometheus virtcap. A hypervisor in maintenance
// may well be down (rebooted, reinstalled): its audit failing or going stale is expected.
local alert = (import '../lib/alerts.libsonnet').alert;

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-exporter',
        rules: [
          alert(
            $._config,
            'HypervisorAuditFailing',
            'auditFailing',
            |||
              hypervisor_up{%(selector)s} == 0
                unless on (%(fleetLabel)s, job, instance, hypervisor) hypervisor_maintenance{%(selector)s} == 1
            ||| % $._config,
            'virtcap cannot audit a hypervisor.',
            'virtcap has not been able to audit {{ $labels.hypervisor }} (instance {{ $labels.instance }}): its capacity is unknown.',
          ),
          alert(
            $._config,
            'HypervisorAuditStale',
            'auditStale',
            |||
              time() - hypervisor_audit_timestamp_seconds{%(selector)s} > %(auditStaleSeconds)s
                unless on (%(fleetLabel)s, job, instance, hypervisor) hypervisor_maintenance{%(selector)s} == 1
            ||| % $._config,
            'The capacity data of a hypervisor is old.',
            'The last successful audit of {{ $labels.hypervisor }} was {{ $value | humanizeDuration }} ago.',
          ),
          alert(
            $._config,
            'VirtcapExporterDown',
            'exporterDown',
            |||
              up{%(selector)s} == 0
            ||| % $._config,
            'Prometheus cannot scrape virtcap.',
            'Prometheus has failed to scrape virtcap at {{ $labels.instance }}: the capacity of its hypervisors is not monitored.',
          ),
        ],
      },
    ],
  },
}
