// CPU contention: guests' vCPUs waiting for a physical CPU (rules/contention.libsonnet). A
// hypervisor that does not report the wait (libvirt's test driver, libvirt before 7.2) has no
// series and never fires. It fires in maintenance too: the guests still there still wait. One alert
// per hypervisor, whatever the number of exporters reporting it (the replicas of an HA pair).
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-contention',
        rules: [
          alert(
            $._config,
            'HypervisorCPUContention',
            'cpuContention',
            joins.once($._config, 'hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio > %(cpuContentionRatio)g' % $._config),
            "Guests' vCPUs wait for a physical CPU on a hypervisor.",
            'The running vCPUs of {{ $labels.hypervisor }} spent {{ $value | humanizePercentage }} of their time waiting for a physical CPU over the last %s (their steal time), above %g%%: the host is CPU overcommitted beyond what its guests can absorb.' % [$._config.cpuContentionWindow, 100 * $._config.cpuContentionRatio],
          ),
        ],
      },
    ],
  },
}
