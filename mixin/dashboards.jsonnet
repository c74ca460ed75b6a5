// jsonnet -J dashboards -J alerts -m dashboards/generated dashboards/dashboards.jsonnet
// The four virtcap dashboards, linked to each other by their `virtcap` tag.
local g = import 'lib/grafana.libsonnet';
local config = (import 'mixin.libsonnet')._config;

local s = config.selector;
local h = '%s, hypervisor=~"$hypervisor"' % s;
local t = g.target;
local cpus = 'short';
local bytes = 'bytes';

local hypervisorVariable = g.queryVariable('hypervisor', 'Hypervisor', 'label_values(hypervisor_up{%s}, hypervisor)' % s);
local flavorVariable = g.queryVariable('flavor', 'Flavor', 'label_values(hypervisor_schedulable_instances{%s}, flavor)' % s);

local resourceOverTime(resource, unit, measured=true) = g.timeseries(
  '%s: limit, used%s' % [resource, if measured then ' and actual usage' else ''],
  'Fleet totals for %s: the limit ((total - reserved) x allocation ratio), what domains and claims use on the hypervisors that have a limit%s, and the physical total.' % [
    resource,
    if measured then ', what the hosts really use (where it is measured)' else '',
  ],
  unit,
  [
    t('resource:hypervisor_resource_limit:sum{resource="%s"}' % resource, 'limit'),
    t('resource:hypervisor_resource_used:sum{resource="%s"}' % resource, 'used'),
    t('resource:hypervisor_resource_total:sum{resource="%s"}' % resource, 'physical total'),
  ] + (if measured then [t('resource:hypervisor_resource_actual_usage:sum{resource="%s"}' % resource, 'actual usage')] else []),
  width=12,
);

local allocatedByState(resource, unit) = g.timeseries(
  '%s allocated by domain state' % resource,
  'What the domains of the selected hypervisors are allocated, stacked by state, with pending claims. Shut off domains hold their allocation unless count_inactive_domains is false.',
  unit,
  [
    t('sum by (state) (hypervisor_resource_allocated{%s, resource="%s"})' % [h, resource], '{{state}}'),
    t('sum(hypervisor_resource_claimed{%s, resource="%s"})' % [h, resource], 'claimed'),
  ],
  width=8,
  stack=true,
);

// The sum-based bound of the loss of the largest hypervisor, next to the simulated evacuations.
local failoverShortfall(what, unit, matcher) = g.timeseries(
  'Sum-based shortfall without the largest hypervisor: %s' % what,
  'For comparison with the simulated evacuations: per resource, used - (limit - the largest limit) over the fleet (resource:hypervisor_failover_shortfall:sum), where two or more hypervisors offer the resource. Above 0 the sums say the fleet cannot lose its largest hypervisor; below 0 it is the margin. The sums ignore that a domain lands whole on one host (fragmentation, NUMA cells, devices, the other resources it needs), so an evacuation can fail while this is below 0; and they count an overcommitted hypervisor\'s negative free against the others, so it can be above 0 while every evacuation succeeds.',
  unit,
  [t('resource:hypervisor_failover_shortfall:sum{%s}' % matcher, '{{resource}}')],
  width=8,
);

local fleet = g.dashboard(
  'virtcap-fleet',
  'virtcap / Fleet capacity',
  'How full is the fleet, where does the next VM fit, is it overcommitted past its policy, and can it lose a hypervisor?',
  [
    g.stat('Hypervisors up', 'Hypervisors whose last audit succeeded.', 'short', [t(':hypervisor_up:sum')], thresholds=[{ color: 'green', value: null }]),
    g.stat('Hypervisors down', 'Hypervisors virtcap cannot audit (HypervisorAuditFailing).', 'short', [t(':hypervisor_up:count - :hypervisor_up:sum')], thresholds=g.usedSteps(1, 1)),
    g.stat(
      'Hypervisors with stale data',
      'Hypervisors whose last successful audit is older than %ds (HypervisorAuditStale).' % config.auditStaleSeconds,
      'short',
      [t('count(time() - hypervisor_audit_timestamp_seconds{%s} > %d) or vector(0)' % [s, config.auditStaleSeconds])],
      thresholds=g.usedSteps(1, 1),
    ),
    g.stat(
      'virtcap alerts',
      'virtcap alerts pending or firing now (see the table below).',
      'short',
      [t('count(ALERTS{alertname=~"Hypervisor.*|Virtcap.*"}) or vector(0)')],
      thresholds=g.usedSteps(1, 5),
    ),
    resourceOverTime('vcpu', cpus),
    resourceOverTime('memory', bytes),
    resourceOverTime('disk', bytes),
    // nothing measures how busy dedicated CPUs are
    resourceOverTime('pcpu', cpus, measured=false),
    g.bargauge(
      'Utilization (used / limit)',
      'Share of the allocation limit in use, fleet-wide per resource. Above 100% the fleet is allocated beyond its policy.',
      'percentunit',
      [t('resource:hypervisor_resource_utilization:ratio', '{{resource}}')],
      thresholds=g.usedSteps(config.nearlyExhaustedRatio, 1),
      max=1.2,
    ),
    g.timeseries(
      'Effective overcommit against the configured ratio',
      'used / (total - reserved) per resource, next to the average configured allocation ratio: the first approaching the second means the policy is nearly used up.',
      'short',
      [
        t('resource:hypervisor_resource_effective_overcommit:ratio', '{{resource}} effective'),
        t('avg by (resource) (hypervisor_resource_allocation_ratio{%s})' % s, '{{resource}} configured'),
      ],
    ),
    g.table(
      'Hypervisors by free capacity',
      'Every hypervisor with what is still free per resource, fewest free vCPUs first. Red: allocated beyond the policy; orange: nearly exhausted.',
      'short',
      [
        t('hypervisor_resource_free{%s, resource="vcpu"}' % s, instant=true, format='table'),
        t('hypervisor_resource_free{%s, resource="memory"}' % s, instant=true, format='table'),
        t('hypervisor_resource_free{%s, resource="disk"}' % s, instant=true, format='table'),
        t('hypervisor_resource:hypervisor_resource_utilization:ratio{%s, resource="memory"}' % s, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', cpus, g.freeSteps(0, 4), 'free vCPUs'),
        g.column('Value #B', bytes, g.freeSteps(0, 8 * 1024 * 1024 * 1024), 'free memory'),
        g.column('Value #C', bytes, g.freeSteps(0, 50 * 1024 * 1024 * 1024), 'free disk'),
        g.column('Value #D', 'percentunit', g.usedSteps(config.nearlyExhaustedRatio, 1), 'memory utilization'),
      ],
      sortBy='free vCPUs',
      organize={ excludeByName: { Time: true, job: true, instance: true, resource: true, unit: true, __name__: true } },
      height=10,
    ),
    g.table(
      'virtcap alerts',
      'virtcap alerts pending or firing now, from Prometheus ALERTS series; see alerts/RUNBOOK.md for each.',
      'short',
      [t('ALERTS{alertname=~"Hypervisor.*|Virtcap.*"}', instant=true, format='table')],
      organize={ excludeByName: { Time: true, Value: true, __name__: true, job: true, instance: true } },
    ),
    g.row('Failure tolerance'),
    g.stat(
      'Host failures tolerated',
      'How many hypervisors the fleet can lose together, those with the most allocated memory first, every domain of theirs re-homed on the others through the simulated Nova scheduler (virtcap_fleet_host_failures_tolerated), and the bound virtcap counts up to (virtcap_fleet_host_failures_bound): at the bound, at least that many. 0 (red): the hypervisor with the most allocated memory cannot fail without leaving domains without a host. With several exporters, the fewest of their fleets and the smallest bound.',
      'short',
      [
        t('min(virtcap_fleet_host_failures_tolerated{%s})' % s, 'tolerated'),
        t('min(virtcap_fleet_host_failures_bound{%s})' % s, 'bound'),
      ],
      height=8,
      thresholds=[{ color: 'red', value: null }, { color: 'green', value: 1 }],
      overrides=[g.fixedColor('B', 'blue')],
    ),
    g.stat(
      'Hypervisors that cannot be evacuated',
      'Hypervisors whose domains would not all find a host on the others if it failed (hypervisor_evacuation_feasible is 0: HypervisorFleetCannotTolerateHostFailure).',
      'short',
      [t('count(hypervisor_evacuation_feasible{%s} == 0) or vector(0)' % s)],
      height=8,
      thresholds=g.usedSteps(1, 1),
    ),
    g.table(
      'Evacuation per hypervisor',
      'For every hypervisor with a fresh audit (a down one too, until its data is stale): whether each domain it holds (those its policy counts) would find a host on the other hypervisors that are up, scheduled one by one, largest first, through the simulated Nova scheduler; and how many would not. Those that cannot be evacuated first. `virtcap place --ignore-host <hypervisor>` shows why a flavor finds no host (alerts/RUNBOOK.md).',
      'short',
      [
        t('hypervisor_evacuation_feasible{%s}' % s, instant=true, format='table'),
        t('hypervisor_evacuation_unplaced_domains{%s}' % s, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', 'short', g.freeSteps(1, 1), 'evacuation feasible', g.valueTexts({ '0': 'no', '1': 'yes' })),
        g.column('Value #B', 'short', g.usedSteps(1, 1), 'domains without a host'),
      ],
      sortBy='evacuation feasible',
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
      width=12,
    ),
    g.timeseries(
      'Failure tolerance over time',
      'The host failures the fleet tolerates (the fewest, with several exporters), the hypervisors that cannot be evacuated, and their domains that would find no host, over time.',
      'short',
      [
        t('min(virtcap_fleet_host_failures_tolerated{%s})' % s, 'host failures tolerated'),
        t('count(hypervisor_evacuation_feasible{%s} == 0) or vector(0)' % s, 'hypervisors that cannot be evacuated'),
        t('sum(hypervisor_evacuation_unplaced_domains{%s})' % s, 'domains without a host'),
      ],
      width=8,
    ),
    failoverShortfall('CPUs and other counts', 'short', 'unit!="bytes"'),
    failoverShortfall('memory and disk', bytes, 'unit="bytes"'),
    g.row('Device and hugepage headroom'),
    g.timeseries(
      'Free hugepages by page size',
      'Hugepages of each size (in bytes) that guests can still get, all NUMA cells of the fleet together, as Nova counts them (total - reserved - used). A guest takes its pages from one cell: a large fleet total can still leave a flavor without a cell that fits (HypervisorHugepagesExhausted, and the flavors limited by NUMA below).',
      'short',
      [t('page_size_bytes:hypervisor_numa_cell_hugepages_free:sum', '{{page_size_bytes}}-byte pages')],
      width=8,
    ),
    g.bargauge(
      'Free passthrough devices per PCI alias',
      'Devices a flavor asking for the PCI alias could still be given, fleet-wide, for the aliases the fleet has devices of; NUMA affinity aside. Red below %d (HypervisorPciDeviceHeadroomLow).' % config.pciDeviceHeadroomMinimum,
      'short',
      [t('alias:hypervisor_pci_alias_devices_free:sum and alias:hypervisor_pci_alias_devices:sum > 0', '{{alias}}')],
      width=8,
      thresholds=g.freeSteps(config.pciDeviceHeadroomMinimum, 2 * config.pciDeviceHeadroomMinimum),
    ),
    g.bargauge(
      'Free VGPUs per mediated device type',
      'VGPUs still free, fleet-wide, per mediated device type with VGPU inventory. Red below %d (HypervisorVgpuHeadroomLow).' % config.vgpuHeadroomMinimum,
      'short',
      [t('mdev_type:hypervisor_gpu_vgpus_free:sum and mdev_type:hypervisor_gpu_vgpus:sum > 0', '{{mdev_type}}')],
      width=8,
      thresholds=g.freeSteps(config.vgpuHeadroomMinimum, 2 * config.vgpuHeadroomMinimum),
    ),
    g.table(
      'Flavors limited by NUMA cells or devices',
      'For each flavor, on how many hypervisors its NUMA fit (numa: cells, pinned CPUs, hugepages) or its PCI devices (pci) let fewer instances fit than the whole-host amounts would (hypervisor_flavor_placement_limited, 1 there).',
      'short',
      [t('sum by (flavor, constraint) (hypervisor_flavor_placement_limited{%s})' % s, instant=true, format='table')],
      overrides=[g.column('Value', 'short', display='hypervisors')],
      organize={ excludeByName: { Time: true } },
    ),
  ],
);

local hypervisor = g.dashboard(
  'virtcap-hypervisor',
  'virtcap / Hypervisor detail',
  'Every resource of the selected hypervisors: total, reserved, limit, used by domain state, claimed, free, and what the host really uses; whether their domains would find a host if they were lost; their NUMA cells, hugepages and passthrough devices.',
  [
    g.table(
      'Resources',
      'Per hypervisor and resource, in cpus or bytes: total, reserved, the limit (total - reserved) x ratio, used (allocated + claimed), claimed and free. Free is negative beyond the policy.',
      'short',
      [
        t('hypervisor_resource_total{%s}' % h, instant=true, format='table'),
        t('hypervisor_resource_reserved{%s}' % h, instant=true, format='table'),
        t('hypervisor_resource_limit{%s}' % h, instant=true, format='table'),
        t('hypervisor_resource_used{%s}' % h, instant=true, format='table'),
        t('hypervisor_resource_claimed{%s}' % h, instant=true, format='table'),
        t('hypervisor_resource_free{%s}' % h, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', 'short', display='total'),
        g.column('Value #B', 'short', display='reserved'),
        g.column('Value #C', 'short', display='limit'),
        g.column('Value #D', 'short', display='used'),
        g.column('Value #E', 'short', display='claimed'),
        g.column('Value #F', 'short', g.freeSteps(0, 1), 'free'),
      ],
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
      height=10,
    ),
    allocatedByState('vcpu', cpus),
    allocatedByState('memory', bytes),
    allocatedByState('disk', bytes),
    g.timeseries(
      'Memory: actual usage against allocation',
      'What the host really uses (MemTotal - free - buffers - cached) against what its domains are allocated and its physical total: the gap is the overcommit risk.',
      bytes,
      [
        t('hypervisor_resource_actual_usage{%s, resource="memory"}' % h, '{{hypervisor}} actual'),
        t('hypervisor_resource_used{%s, resource="memory"}' % h, '{{hypervisor}} allocated'),
        t('hypervisor_resource_total{%s, resource="memory"}' % h, '{{hypervisor}} physical'),
      ],
    ),
    g.timeseries(
      'vCPU: busy host CPUs against allocation',
      'Host CPUs really busy against the vCPUs allocated and the vCPU limit. Busy CPUs are absent where the driver measures no host CPU time (libvirt\'s test driver, so the demo).',
      cpus,
      [
        t('hypervisor_resource_actual_usage{%s, resource="vcpu"}' % h, '{{hypervisor}} busy'),
        t('hypervisor_resource_used{%s, resource="vcpu"}' % h, '{{hypervisor}} allocated'),
        t('hypervisor_resource_limit{%s, resource="vcpu"}' % h, '{{hypervisor}} limit'),
      ],
    ),
    g.timeseries(
      'Domains by state',
      'Defined domains of the selected hypervisors by state.',
      'short',
      [t('sum by (state) (hypervisor_domains{%s})' % h, '{{state}}')],
      width=8,
      stack=true,
    ),
    g.timeseries(
      'Audit duration',
      'How long the last successful audit took.',
      's',
      [t('hypervisor_audit_duration_seconds{%s}' % h, '{{hypervisor}}')],
      width=8,
    ),
    g.timeseries(
      'Data age',
      'Seconds since the last successful audit: it stays below the audit interval while audits succeed.',
      's',
      [t('time() - hypervisor_audit_timestamp_seconds{%s}' % h, '{{hypervisor}}')],
      width=8,
    ),
    g.stateTimeline(
      'If lost: domains that would find no host',
      'Over time, for each selected hypervisor, how many of its domains would find no host on the other hypervisors that are up were it lost, each scheduled in turn, largest first, through the simulated Nova scheduler (hypervisor_evacuation_unplaced_domains; HypervisorFleetCannotTolerateHostFailure). "all re-homed": its evacuation is feasible. No lane: down and stale, or not computed yet.',
      'short',
      [t('hypervisor_evacuation_unplaced_domains{%s}' % h, '{{hypervisor}}')],
      thresholds=g.usedSteps(1, 1),
      mappings=g.valueTexts({ '0': 'all re-homed' }),
    ),
    g.table(
      'Hypervisor',
      'Identity of the selected hypervisors (hypervisor_info) and whether their last audit succeeded.',
      'short',
      [
        t('hypervisor_info{%s}' % h, instant=true, format='table'),
        t('hypervisor_up{%s}' % h, instant=true, format='table'),
      ],
      overrides=[g.column('Value #B', 'short', g.freeSteps(1, 1), 'up')],
      organize={ excludeByName: { Time: true, 'Value #A': true, job: true, instance: true, __name__: true } },
    ),
    g.row('NUMA cells and devices'),
    g.timeseries(
      'Dedicated CPUs per NUMA cell: used and limit',
      'Per NUMA cell, the dedicated CPUs (cpu_dedicated_set) pinned guests hold against the cell\'s limit, as Nova\'s NUMA accounting counts them; without CPU sets Nova counts every CPU of the cell as dedicated too.',
      cpus,
      [
        t('hypervisor_numa_cell_used{%s, resource="pcpu"}' % h, '{{hypervisor}} cell {{cell}} used'),
        t('hypervisor_numa_cell_limit{%s, resource="pcpu"}' % h, '{{hypervisor}} cell {{cell}} limit'),
      ],
    ),
    g.timeseries(
      'Memory per NUMA cell: used and limit',
      'Per NUMA cell, the memory of guests with a NUMA placement against the cell\'s limit (memory x ram allocation ratio). Guests without a NUMA topology use no cell memory in Nova\'s count.',
      bytes,
      [
        t('hypervisor_numa_cell_used{%s, resource="memory"}' % h, '{{hypervisor}} cell {{cell}} used'),
        t('hypervisor_numa_cell_limit{%s, resource="memory"}' % h, '{{hypervisor}} cell {{cell}} limit'),
      ],
    ),
    g.table(
      'Hugepages per NUMA cell and size',
      'Hugepages per cell and page size (in bytes), in pages: total, reserved for the host (reserved_huge_pages), held by guests, free as Nova counts them (total - reserved - used; red when none, HypervisorHugepagesExhausted) and free as the kernel reports them. Kernel free below Nova\'s: something beside the counted domains holds pages.',
      'short',
      [
        t('hypervisor_numa_cell_hugepages{%s}' % h, instant=true, format='table'),
        t('hypervisor_numa_cell_hugepages_reserved{%s}' % h, instant=true, format='table'),
        t('hypervisor_numa_cell_hugepages_used{%s}' % h, instant=true, format='table'),
        t('hypervisor_numa_cell_hugepages_free{%s}' % h, instant=true, format='table'),
        t('hypervisor_numa_cell_hugepages_kernel_free{%s}' % h, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', 'short', display='total'),
        g.column('Value #B', 'short', display='reserved'),
        g.column('Value #C', 'short', display='used'),
        g.column('Value #D', 'short', g.freeSteps(1, 1), 'free (Nova)'),
        g.column('Value #E', 'short', display='free (kernel)'),
      ],
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
    ),
    g.table(
      'PCI device pools',
      'Passthrough devices per pool, as Nova pools them (same vendor and product ids, device type, NUMA node, physical network), and how many no domain holds.',
      'short',
      [
        t('hypervisor_pci_pool_devices{%s}' % h, instant=true, format='table'),
        t('hypervisor_pci_pool_devices_free{%s}' % h, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', 'short', display='devices'),
        g.column('Value #B', 'short', g.freeSteps(1, 1), 'free'),
      ],
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
      width=12,
    ),
    g.table(
      'VGPUs per GPU',
      'Per physical GPU (its PCI address) and enabled mediated device type: its VGPU inventory, the VGPUs domains hold and those still free.',
      'short',
      [
        t('hypervisor_gpu_vgpus{%s}' % h, instant=true, format='table'),
        t('hypervisor_gpu_vgpus_used{%s}' % h, instant=true, format='table'),
        t('hypervisor_gpu_vgpus_free{%s}' % h, instant=true, format='table'),
      ],
      overrides=[
        g.column('Value #A', 'short', display='VGPUs'),
        g.column('Value #B', 'short', display='used'),
        g.column('Value #C', 'short', g.freeSteps(1, 1), 'free'),
      ],
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
      width=12,
    ),
  ],
  [hypervisorVariable],
);

local flavors = g.dashboard(
  'virtcap-flavors',
  'virtcap / Flavor headroom',
  'Where does the next VM fit: how many more instances of each flavor fit, where, and what limits them.',
  [
    g.bargauge(
      'More instances that fit, fleet-wide',
      'Per flavor, how many more instances fit in the whole fleet (each hypervisor counted alone: an instance never spans hosts).',
      'short',
      [t('flavor:hypervisor_schedulable_instances:sum{flavor=~"$flavor"}', '{{flavor}}')],
      thresholds=g.freeSteps(config.flavorHeadroomMinimum, 2 * config.flavorHeadroomMinimum),
    ),
    g.timeseries(
      'Fleet headroom over time',
      'More instances that fit fleet-wide, per flavor: a falling line is capacity being used up.',
      'short',
      [t('flavor:hypervisor_schedulable_instances:sum{flavor=~"$flavor"}', '{{flavor}}')],
    ),
    g.table(
      'Per hypervisor',
      'How many more instances of each flavor fit on each hypervisor.',
      'short',
      [t('hypervisor_schedulable_instances{%s, flavor=~"$flavor"}' % h, instant=true, format='table')],
      overrides=[g.column('Value', 'short', g.freeSteps(1, 2), 'fit')],
      organize={ excludeByName: { Time: true, job: true, instance: true, __name__: true } },
      width=12,
      height=10,
    ),
    g.table(
      'What limits each flavor',
      'For each flavor, on how many hypervisors each resource is the one that runs out first (hypervisor_flavor_bottleneck).',
      'short',
      [t('count by (flavor, resource) (hypervisor_flavor_bottleneck{%s, flavor=~"$flavor"})' % h, instant=true, format='table')],
      overrides=[g.column('Value', 'short', display='hypervisors')],
      organize={ excludeByName: { Time: true } },
      width=12,
      height=10,
    ),
  ],
  [hypervisorVariable, flavorVariable],
);

local exporter = g.dashboard(
  'virtcap-exporter',
  'virtcap / Exporter health',
  'Is virtcap itself healthy: scrapes, audits, failures, claims and versions.',
  [
    g.stat('Exporters up', 'virtcap processes Prometheus scrapes successfully.', 'short', [t('sum(up{%s})' % s)], thresholds=[{ color: 'green', value: null }]),
    g.stat('Scrape duration', 'How long Prometheus takes to scrape virtcap (the slowest exporter).', 's', [t('max(scrape_duration_seconds{%s})' % s)]),
    g.stat('Samples per scrape', 'Series virtcap exposes (the largest exporter).', 'short', [t('max(scrape_samples_scraped{%s})' % s)]),
    g.stat('Pending claims', 'Claims held and not yet reconciled, fleet-wide.', 'short', [t('sum(virtcap_claims_pending{%s})' % s)]),
    g.timeseries(
      'Audits by outcome',
      'Finished audits per second by outcome: failures and timeouts name hypervisors virtcap cannot read.',
      'ops',
      [t('sum by (outcome) (rate(virtcap_audits_total{%s}[$__rate_interval]))' % s, '{{outcome}}')],
    ),
    g.timeseries(
      'Audit failures by hypervisor',
      'Failed or timed-out audits per second, per hypervisor.',
      'ops',
      [t('sum by (hypervisor) (rate(virtcap_audits_total{%s, outcome!="success"}[$__rate_interval]))' % s, '{{hypervisor}}')],
    ),
    g.timeseries(
      'Audit durations',
      'Duration of the last successful audit of each hypervisor: close to audit.timeout means trouble ahead.',
      's',
      [t('hypervisor_audit_duration_seconds{%s}' % s, '{{hypervisor}}')],
    ),
    g.timeseries(
      'Claims by outcome',
      'Claims per second: created, rejected (did not fit), reconciled (their domain appeared), expired, deleted.',
      'ops',
      [t('sum by (outcome) (rate(virtcap_claims_total{%s}[$__rate_interval]))' % s, '{{outcome}}')],
    ),
    g.timeseries(
      'Scrape duration',
      'How long each Prometheus scrape of virtcap takes.',
      's',
      [t('scrape_duration_seconds{%s}' % s, '{{instance}}')],
    ),
    g.table(
      'Versions',
      'virtcap versions running (virtcap_build_info).',
      'short',
      [t('virtcap_build_info{%s}' % s, instant=true, format='table')],
      organize={ excludeByName: { Time: true, Value: true, __name__: true, job: true } },
      width=12,
    ),
  ],
);

{
  'virtcap-fleet.json': fleet,
  'virtcap-hypervisor.json': hypervisor,
  'virtcap-flavors.json': flavors,
  'virtcap-exporter.json': exporter,
}
