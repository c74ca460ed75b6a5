// CPU contention: how long the guests' vCPUs waited, runnable, for a physical CPU
// (hypervisor_vcpu_wait_seconds_total, where the hypervisor reports it), per running vCPU: the
// guests' steal time, which does not depend on the size of the host (per physical CPU, a large
// host would hide one starved guest). Running vCPUs: what the running domains are allocated, vcpu
// and pcpu (a dedicated CPU's delay is in the counter too). The rate and the running vCPUs are of
// each exporter (a counter of one process); the ratio is recorded once per hypervisor, however many
// exporters report it (the two replicas of an HA pair): the exporter's job and instance are kept
// where one exporter does, the largest of their ratios (without them) where several do.
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-contention.rules',
        local c = $._config,
        local perHypervisor = '%(fleetLabel)s, job, instance, hypervisor' % c,
        local perExporterRatio = '(hypervisor:hypervisor_vcpu_wait_seconds:rate / (hypervisor:hypervisor_vcpus_running:sum > 0))',
        rules: [
          {
            // vCPUs waiting for a CPU, on average over the window
            record: 'hypervisor:hypervisor_vcpu_wait_seconds:rate',
            expr: 'sum by (%s) (rate(hypervisor_vcpu_wait_seconds_total{%s}[%s]))' % [perHypervisor, c.selector, c.cpuContentionWindow],
          },
          {
            record: 'hypervisor:hypervisor_vcpus_running:sum',
            expr: 'sum by (%s) (hypervisor_resource_allocated{%s, resource=~"vcpu|pcpu", state="running"})' % [perHypervisor, c.selector],
          },
          {
            // the share of time the average running vCPU waited; no series without running vCPUs
            // (guests that all stopped during the window: no division by zero)
            record: 'hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio',
            expr: |||
              %(ratio)s
                unless %(on)s (count by (%(identity)s) (%(ratio)s) > 1)
              or
              %(once)s
                and %(on)s (count by (%(identity)s) (%(ratio)s) > 1)
            ||| % {
              ratio: perExporterRatio,
              on: joins.onHypervisor(c),
              identity: std.join(', ', joins.hypervisorLabels(c)),
              once: joins.once(c, perExporterRatio),
            },
          },
          {
            // per group: the group's waiting vCPUs over its running vCPUs, of the members that
            // report the wait
            record: 'group:hypervisor_vcpu_wait_per_running_vcpu:ratio',
            expr: |||
              sum by (%(fleetLabel)s, kind, group) (%(wait)s)
                / (sum by (%(fleetLabel)s, kind, group) (%(running)s) > 0)
            ||| % c {
              wait: joins.perMembership(c, joins.once(c, 'hypervisor:hypervisor_vcpu_wait_seconds:rate')),
              running: joins.perMembership(c, joins.once(c, 'hypervisor:hypervisor_vcpus_running:sum and hypervisor:hypervisor_vcpu_wait_seconds:rate')),
            },
          },
        ],
      },
    ],
  },
}
