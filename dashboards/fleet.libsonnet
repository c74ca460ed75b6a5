// The fleet: how full it is, where the next VM fits, whether it is overcommitted past its policy, and
// whether it can lose a hypervisor.
local g = import '../mixin/lib/grafana.libsonnet';
local common = import 'common.libsonnet';

local fleetDashboard(config) =
  local c = common(config);
  local t = g.target;
  local s = c.s;
  local f = c.f;
  local cpus = 'short';
  local bytes = 'bytes';
  // hypervisors any exporter reporting them finds cannot be evacuated
  local evacuationInfeasible = 'count by (%s) (%s) or vector(0)' % [c.fleetLabel, c.once('hypervisor_evacuation_feasible{%(s)s} == 0' % c)];

  local resourceOverTime(resource, unit, measured=true) = g.timeseries(
    '%s: limit, used%s' % [resource, if measured then ' and actual usage' else ''],
    'Fleet totals for %s: the limit ((total - reserved) x allocation ratio), what domains and claims use on the hypervisors that have a limit%s, and the physical total.' % [
      resource,
      if measured then ', what the hosts really use (where it is measured)' else '',
    ],
    unit,
    [
      t('resource:hypervisor_resource_limit:sum{%s, resource="%s"}' % [f, resource], 'limit'),
      t('resource:hypervisor_resource_used:sum{%s, resource="%s"}' % [f, resource], 'used'),
      t('resource:hypervisor_resource_size:sum{%s, resource="%s"}' % [f, resource], 'physical total'),
    ] + (if measured then [t('resource:hypervisor_resource_actual_usage:sum{%s, resource="%s"}' % [f, resource], 'actual usage')] else []),
    width=12,
  );

  local failoverShortfall(what, unit, matcher) = g.timeseries(
    'Sum-based shortfall without the largest hypervisor: %s' % what,
    'For comparison with the simulated evacuations: per resource, used - (limit - the largest limit) over the fleet (resource:hypervisor_failover_shortfall:sum), where two or more hypervisors offer the resource. Above 0 the sums say the fleet cannot lose its largest hypervisor; below 0 it is the margin. The sums ignore that a domain lands whole on one host (fragmentation, NUMA cells, devices, the other resources it needs), so an evacuation can fail while this is below 0; and they count an overcommitted hypervisor\'s negative free against the others, so it can be above 0 while every evacuation succeeds.',
    unit,
    [t('resource:hypervisor_failover_shortfall:sum{%s, %s}' % [f, matcher], '{{resource}}')],
    width=8,
  );

  // the hypervisors with the most of `resource` stranded, a row per cause (the resource whose
  // exhaustion strands it: hypervisor_resource_stranded_by), with the amount
  local strandedTable(resource, unit) = g.table(
    'Most stranded %s, by cause' % (if resource == 'vcpu' then 'vCPUs' else resource),
    'The 10 hypervisors with the most %s stranded (hypervisor_resource_stranded), one row per resource whose exhaustion strands it (cause, from hypervisor_resource_stranded_by).' % resource,
    unit,
    [t('%s\n  * on (%s, hypervisor, resource) group_left ()\n  topk by (%s) (10, %s > 0)' % [
      c.once('hypervisor_resource_stranded_by{%s, resource="%s"}' % [s, resource], ['resource', 'cause']),
      c.fleetLabel,
      c.fleetLabel,
      c.once('hypervisor_resource_stranded{%s, resource="%s"}' % [s, resource], ['resource']),
    ], instant=true, format='table')],
    overrides=[g.column('Value', unit, display='stranded %s' % resource)],
    sortBy='stranded %s' % resource,
    organize={ excludeByName: c.hidden { resource: true } },
    width=12,
  );

  c.dashboard(
    'virtcap-fleet',
    'virtcap / Fleet capacity',
    'How full is the fleet, where does the next VM fit, is it overcommitted past its policy, and can it lose a hypervisor?',
    [
      g.stat('Hypervisors up', 'Hypervisors whose last audit succeeded.', 'short', [t(':hypervisor_up:sum{%(f)s}' % c)], width=5, thresholds=[{ color: 'green', value: null }]),
      g.stat('Hypervisors down', 'Hypervisors virtcap cannot audit (HypervisorAuditFailing, which leaves out those in maintenance).', 'short', [t(':hypervisor_up:count{%(f)s} - :hypervisor_up:sum{%(f)s}' % c)], width=5, thresholds=g.usedSteps(1, 1)),
      g.stat(
        'Hypervisors in maintenance',
        'Hypervisors in maintenance (configuration or API): still audited, their allocations shown, but they offer nothing and are left out of the fleet\'s capacity, the group figures and the host-failure alerts.',
        'short',
        [t(':hypervisor_maintenance:sum{%(f)s}' % c)],
        width=4,
        thresholds=[{ color: 'green', value: null }, { color: 'blue', value: 1 }],
      ),
      g.stat(
        'Hypervisors with stale data',
        'Hypervisors whose last successful audit is older than %ds (HypervisorAuditStale).' % config.auditStaleSeconds,
        'short',
        [t('count by (%s) (%s) or vector(0)' % [c.fleetLabel, c.once('time() - hypervisor_audit_timestamp_seconds{%(s)s} > %(auditStaleSeconds)d' % c)])],
        width=5,
        thresholds=g.usedSteps(1, 1),
      ),
      g.stat(
        'virtcap alerts',
        'virtcap alerts pending or firing now (see the table below).',
        'short',
        [t('count by (%(fleetLabel)s) (ALERTS{%(f)s, alertname=~"Hypervisor.*|Virtcap.*"}) or vector(0)' % c)],
        width=5,
        thresholds=g.usedSteps(1, 5),
      ),
      resourceOverTime('vcpu', cpus),
      resourceOverTime('memory', bytes),
      resourceOverTime('disk', bytes),
      // nothing measures how busy dedicated CPUs are
      resourceOverTime('pcpu', cpus, measured=false),
      g.bargauge(
        'Utilization (used / limit)',
        'Share of the allocation limit in use, fleet-wide per resource, of the hypervisors in service (those in maintenance left out). Above 100% the fleet is allocated beyond its policy.',
        'percentunit',
        [t('resource:hypervisor_resource_utilization:ratio{%(f)s}' % c, '{{resource}}')],
        thresholds=g.usedSteps(config.nearlyExhaustedRatio, 1),
        max=1.2,
      ),
      g.timeseries(
        'Effective overcommit against the configured ratio',
        'used / (total - reserved) per resource, next to the average configured allocation ratio: the first approaching the second means the policy is nearly used up.',
        'short',
        [
          t('resource:hypervisor_resource_effective_overcommit:ratio{%(f)s}' % c, '{{resource}} effective'),
          t('avg by (%s, resource) (%s)' % [c.fleetLabel, c.once('hypervisor_resource_allocation_ratio{%(s)s}' % c, ['resource'])], '{{resource}} configured'),
        ],
      ),
      g.table(
        'Hypervisors by free capacity',
        'Every hypervisor with what is still free per resource, fewest free vCPUs first, and whether it is in maintenance (then it offers nothing, whatever is free). Red: allocated beyond the policy; orange: nearly exhausted.',
        'short',
        [
          t('hypervisor_resource_free{%s, resource="vcpu"}' % s, instant=true, format='table'),
          t('hypervisor_resource_free{%s, resource="memory"}' % s, instant=true, format='table'),
          t('hypervisor_resource_free{%s, resource="disk"}' % s, instant=true, format='table'),
          t('hypervisor_resource:hypervisor_resource_utilization:ratio{%s, resource="memory"}' % s, instant=true, format='table'),
          t('hypervisor_maintenance{%s}' % s, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', cpus, g.freeSteps(0, 4), 'free vCPUs'),
          g.column('Value #B', bytes, g.freeSteps(0, 8 * 1024 * 1024 * 1024), 'free memory'),
          g.column('Value #C', bytes, g.freeSteps(0, 50 * 1024 * 1024 * 1024), 'free disk'),
          g.column('Value #D', 'percentunit', g.usedSteps(config.nearlyExhaustedRatio, 1), 'memory utilization'),
          g.column('Value #E', 'short', display='maintenance', mappings=g.valueTexts({ '0': 'in service', '1': 'maintenance' })),
        ],
        sortBy='free vCPUs',
        organize={ excludeByName: c.hidden { resource: true, unit: true } },
        height=10,
      ),
      g.table(
        'virtcap alerts',
        'virtcap alerts pending or firing now, from Prometheus ALERTS series; see docs/runbook.md for each.',
        'short',
        [t('ALERTS{%(f)s, alertname=~"Hypervisor.*|Virtcap.*"}' % c, instant=true, format='table')],
        organize={ excludeByName: c.hidden { Value: true } },
      ),
      g.table(
        'Time remaining per flavor',
        'Per flavor, how long until no more instance fits in the fleet at the trend of the last %(w)s (fleet_flavor:hypervisor_schedulable_instances:runway_seconds: the instances that fit now over how fast they have been falling), shortest first; "not falling" where the trend is flat or rising. Red below %(warning)s: HypervisorFlavorRunwayShort. The flavor headroom dashboard has it per availability zone; `virtcap plan runway` over a longer window, with a band.' % { w: config.runwayWindow, warning: config.runwayWarning },
        's',
        [t(c.runwayOrNotFalling('fleet_flavor:hypervisor_schedulable_instances:runway_seconds{%(f)s}' % c, 'flavor:hypervisor_schedulable_instances:sum{%(f)s}' % c, ['flavor']), instant=true, format='table')],
        overrides=[c.runwayColumn('Value')],
        sortBy='time remaining',
        organize={ excludeByName: c.hidden },
      ),
      g.row('Failure tolerance'),
      g.stat(
        'Host failures tolerated',
        'How many hypervisors the fleet can lose together, those with the most allocated memory first, every domain of theirs re-homed on the others through the simulated Nova scheduler (virtcap_fleet_host_failures_tolerated), and the bound virtcap counts up to (virtcap_fleet_host_failures_bound): at the bound, at least that many. 0 (red): the hypervisor with the most allocated memory cannot fail without leaving domains without a host. With several exporters, the fewest of their fleets and the smallest bound; with shards, each shard computes it for its own hypervisors, re-homed within the shard (virtcap_shard_ordinal), so this is the weakest shard.',
        'short',
        [
          t('min by (%(fleetLabel)s) (virtcap_fleet_host_failures_tolerated{%(s)s})' % c, 'tolerated'),
          t('min by (%(fleetLabel)s) (virtcap_fleet_host_failures_bound{%(s)s})' % c, 'bound'),
        ],
        height=8,
        thresholds=[{ color: 'red', value: null }, { color: 'green', value: 1 }],
        overrides=[g.fixedColor('B', 'blue')],
      ),
      g.stat(
        'Hypervisors that cannot be evacuated',
        'Hypervisors whose domains would not all find a host on the others if it failed (hypervisor_evacuation_feasible is 0: HypervisorFleetCannotTolerateHostFailure).',
        'short',
        [t(evacuationInfeasible)],
        height=8,
        thresholds=g.usedSteps(1, 1),
      ),
      g.table(
        'Evacuation per hypervisor',
        'For every hypervisor with a fresh audit (a down one too, until its data is stale): whether each domain it holds (those its policy counts) would find a host on the other hypervisors that are up, scheduled one by one, largest first, through the simulated Nova scheduler; and how many would not. Those that cannot be evacuated first. `virtcap place --ignore-host <hypervisor>` shows why a flavor finds no host (docs/runbook.md).',
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
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      g.timeseries(
        'Failure tolerance over time',
        'The host failures the fleet tolerates (the fewest, with several exporters), the hypervisors that cannot be evacuated, and their domains that would find no host, over time.',
        'short',
        [
          t('min by (%(fleetLabel)s) (virtcap_fleet_host_failures_tolerated{%(s)s})' % c, 'host failures tolerated'),
          t(evacuationInfeasible, 'hypervisors that cannot be evacuated'),
          t('sum by (%s) (%s)' % [c.fleetLabel, c.once('hypervisor_evacuation_unplaced_domains{%(s)s}' % c)], 'domains without a host'),
        ],
        width=8,
      ),
      failoverShortfall('CPUs and other counts', 'short', 'unit!="bytes"'),
      failoverShortfall('memory and disk', bytes, 'unit="bytes"'),
      g.row('Stranded capacity'),
      g.timeseries(
        'Stranded CPUs',
        'CPUs free on the hypervisors in service that no packing of the fleet\'s flavors (configured and discovered) could use, because another resource of the same hypervisor runs out first (resource:hypervisor_resource_stranded:sum), as of the exporter\'s last packing computation.',
        cpus,
        [t('resource:hypervisor_resource_stranded:sum{%(f)s, unit!="bytes"}' % c, '{{resource}}')],
        width=8,
      ),
      g.timeseries(
        'Stranded memory and disk',
        'Memory and disk free on the hypervisors in service that no packing of the fleet\'s flavors could use (resource:hypervisor_resource_stranded:sum).',
        bytes,
        [t('resource:hypervisor_resource_stranded:sum{%(f)s, unit="bytes"}' % c, '{{resource}}')],
        width=8,
      ),
      g.timeseries(
        'Share of the free capacity stranded',
        'Per resource, stranded / free of the hypervisors in service that report it, a negative free (an overcommitted host) counted as none (resource:hypervisor_resource_stranded_of_free:ratio). Above %g%% for memory or vCPUs for an hour: HypervisorStrandedCapacityHigh.' % (100 * config.strandedShareWarning),
        'percentunit',
        [t('resource:hypervisor_resource_stranded_of_free:ratio{%(f)s}' % c, '{{resource}}')],
        width=8,
      ),
      strandedTable('memory', bytes),
      strandedTable('vcpu', cpus),
      g.bargauge(
        'Share of the free capacity stranded, per group of the kind',
        'Per group of the selected kind: stranded / free memory and vCPUs of its members in service (group_resource:hypervisor_resource_stranded_of_free:ratio). A hypervisor in two groups of the kind counts in both.',
        'percentunit',
        [t('group_resource:hypervisor_resource_stranded_of_free:ratio{%(f)s, kind="$kind", resource=~"vcpu|memory"}' % c, '{{group}} {{resource}}')],
        thresholds=g.usedSteps(config.strandedShareWarning / 2, config.strandedShareWarning),
        max=1,
        width=24,
      ),
      g.row('Compaction'),
      g.timeseries(
        'Compaction: the fewest hypervisors that could hold every domain',
        'Borg\'s cluster compaction with Nova\'s rules: the fewest hypervisors up and not in maintenance that could hold every counted domain, each in its availability zone and fitting under the scheduler\'s filters, NUMA cells and devices (:virtcap_fleet_compaction_hypervisors:sum); its proven lower bound (the optimum lies between the two); and the hypervisors up and in service it is taken from. With shards, the sums of the shards\' own.',
        'short',
        [
          t(':virtcap_fleet_compaction_hypervisors:sum{%(f)s}' % c, 'compaction'),
          t(':virtcap_fleet_compaction_lower_bound:sum{%(f)s}' % c, 'lower bound'),
          t(':hypervisor_up_in_service:count{%(f)s}' % c, 'up, in service'),
        ],
        width=12,
      ),
      g.stat(
        'Hypervisors freeable',
        'Hypervisors up and in service minus the compaction: how many the fleet\'s domains could leave empty (:virtcap_fleet_hypervisors_freeable:sum). `virtcap plan consolidate` shows the moves that would empty them.',
        'short',
        [t(':virtcap_fleet_hypervisors_freeable:sum{%(f)s}' % c)],
        height=8,
        thresholds=[{ color: 'green', value: null }, { color: 'blue', value: 1 }],
      ),
      g.stat(
        'Compaction gap to its lower bound',
        'Compaction minus its proven lower bound: 0 when the compaction is the optimum; above, the solver\'s time limit left it unproven by at most that many hypervisors.',
        'short',
        [t(':virtcap_fleet_compaction_hypervisors:sum{%(f)s} - :virtcap_fleet_compaction_lower_bound:sum{%(f)s}' % c)],
        height=8,
        thresholds=g.usedSteps(1, 2),
      ),
      g.table(
        'Compaction per group of the kind',
        'Per group of the selected kind: the fewest of its hypervisors that could hold its domains (group:hypervisor_group_compaction_hypervisors:sum), and its members up and in service (group:hypervisor_up_in_service:count).',
        'short',
        [
          t('group:hypervisor_group_compaction_hypervisors:sum{%(f)s, kind="$kind"}' % c, instant=true, format='table'),
          t('group:hypervisor_up_in_service:count{%(f)s, kind="$kind"}' % c, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'short', display='compaction'),
          g.column('Value #B', 'short', display='up, in service'),
        ],
        organize={ excludeByName: c.hidden },
      ),
      g.row('Device and hugepage headroom'),
      g.timeseries(
        'Free hugepages by page size',
        'Hugepages of each size (in bytes) that guests can still get, all NUMA cells of the fleet together, as Nova counts them (total - reserved - used). A guest takes its pages from one cell: a large fleet total can still leave a flavor without a cell that fits (HypervisorHugepagesExhausted, and the flavors limited by NUMA below).',
        'short',
        [t('page_size_bytes:hypervisor_numa_cell_hugepages_free:sum{%(f)s}' % c, '{{page_size_bytes}}-byte pages')],
        width=8,
      ),
      g.bargauge(
        'Free passthrough devices per PCI alias',
        'Devices a flavor asking for the PCI alias could still be given, fleet-wide, for the aliases the fleet has devices of; NUMA affinity aside. Red below %d (HypervisorPciDeviceHeadroomLow).' % config.pciDeviceHeadroomMinimum,
        'short',
        [t('alias:hypervisor_pci_alias_devices_free:sum{%(f)s} and alias:hypervisor_pci_alias_devices:sum{%(f)s} > 0' % c, '{{alias}}')],
        width=8,
        thresholds=g.freeSteps(config.pciDeviceHeadroomMinimum, 2 * config.pciDeviceHeadroomMinimum),
      ),
      g.bargauge(
        'Free VGPUs per mediated device type',
        'VGPUs still free, fleet-wide, per mediated device type with VGPU inventory. Red below %d (HypervisorVgpuHeadroomLow).' % config.vgpuHeadroomMinimum,
        'short',
        [t('mdev_type:hypervisor_gpu_vgpus_free:sum{%(f)s} and mdev_type:hypervisor_gpu_vgpus:sum{%(f)s} > 0' % c, '{{mdev_type}}')],
        width=8,
        thresholds=g.freeSteps(config.vgpuHeadroomMinimum, 2 * config.vgpuHeadroomMinimum),
      ),
      g.table(
        'Flavors limited by NUMA cells or devices',
        'For each flavor, on how many hypervisors its NUMA fit (numa: cells, pinned CPUs, hugepages) or its PCI devices (pci) let fewer instances fit than the whole-host amounts would (hypervisor_flavor_placement_limited, 1 there).',
        'short',
        [t('sum by (%s, flavor, constraint) (%s)' % [c.fleetLabel, c.once('hypervisor_flavor_placement_limited{%(s)s}' % c, ['flavor', 'constraint'])], instant=true, format='table')],
        overrides=[g.column('Value', 'short', display='hypervisors')],
        organize={ excludeByName: { Time: true, [c.fleetLabel]: true } },
      ),
      g.row('Groups'),
      g.bargauge(
        'Utilization per group of the kind',
        'Per group of the selected kind and resource: used / limit of its members in service (group_resource:hypervisor_resource_utilization:ratio). A hypervisor in two groups of the kind (two aggregates) counts in both; the groups of such a kind do not add up to the fleet.',
        'percentunit',
        [t('group_resource:hypervisor_resource_utilization:ratio{%(f)s, kind="$kind"}' % c, '{{group}} {{resource}}')],
        thresholds=g.usedSteps(config.nearlyExhaustedRatio, 1),
        max=1.2,
      ),
      g.bargauge(
        'Hypervisors that cannot be evacuated, per group of the kind',
        'Per group of the selected kind: its members in service whose domains would not all find a host if they failed (group:hypervisor_evacuation_infeasible:count; HypervisorGroupCannotTolerateHostFailure where the group has two or more in service).',
        'short',
        [t('group:hypervisor_evacuation_infeasible:count{%(f)s, kind="$kind"} or group:hypervisor_up:count{%(f)s, kind="$kind"} * 0' % c, '{{group}}')],
        thresholds=g.usedSteps(1, 1),
      ),
      g.timeseries(
        'Free memory per group of the kind',
        'Memory still free in each group of the selected kind, of its members in service (group_resource:hypervisor_resource_free:sum).',
        bytes,
        [t('group_resource:hypervisor_resource_free:sum{%(f)s, kind="$kind", resource="memory"}' % c, '{{group}}')],
        width=8,
      ),
      g.timeseries(
        'Free vCPUs per group of the kind',
        'vCPUs still free in each group of the selected kind, of its members in service (group_resource:hypervisor_resource_free:sum).',
        cpus,
        [t('group_resource:hypervisor_resource_free:sum{%(f)s, kind="$kind", resource="vcpu"}' % c, '{{group}}')],
        width=8,
      ),
      g.timeseries(
        'Sum-based memory shortfall per group without its largest member',
        'Per group of the selected kind with two or more members in service offering memory: used - (limit - the largest limit) (group_resource:hypervisor_failover_shortfall:sum). Above 0 the sums say the group cannot lose its largest member. Per availability zone that is the scheduler\'s question (an evacuation stays in its zone); per aggregate or rack a planning figure.',
        bytes,
        [t('group_resource:hypervisor_failover_shortfall:sum{%(f)s, kind="$kind", resource="memory"}' % c, '{{group}}')],
        width=8,
      ),
      g.table(
        'Groups of the kind',
        'Per group of the selected kind: its members audited successfully, all its members, and those in maintenance.',
        'short',
        [
          t('group:hypervisor_up:sum{%(f)s, kind="$kind"}' % c, instant=true, format='table'),
          t('group:hypervisor_up:count{%(f)s, kind="$kind"}' % c, instant=true, format='table'),
          t('group:hypervisor_maintenance:sum{%(f)s, kind="$kind"}' % c, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'short', display='up'),
          g.column('Value #B', 'short', display='members'),
          g.column('Value #C', 'short', display='in maintenance'),
        ],
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      g.table(
        'Members of the group',
        'The hypervisors of the selected group (hypervisor_group_info), whether their last audit succeeded and whether they are in maintenance.',
        'short',
        [
          t(c.members, instant=true, format='table'),
          t(c.inGroup(c.once('hypervisor_up{%(s)s}' % c)), instant=true, format='table'),
          t(c.inGroup(c.once('hypervisor_maintenance{%(s)s}' % c)), instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #B', 'short', g.freeSteps(1, 1), 'up'),
          g.column('Value #C', 'short', display='maintenance', mappings=g.valueTexts({ '0': 'in service', '1': 'maintenance' })),
        ],
        organize={ excludeByName: c.hidden { 'Value #A': true } },
        width=12,
      ),
      g.row('Projects'),
      g.bargauge(
        'Top projects by allocated memory',
        'Memory allocated to the counted domains of the largest projects, fleet-wide (project:hypervisor_project_allocated:sum): the owner is Nova\'s metadata, else the configured ownership element; `unknown` has none, `other` sums the projects beyond each exporter\'s exposition.top_projects.',
        bytes,
        [t('topk by (%(fleetLabel)s) (10, project:hypervisor_project_allocated:sum{%(f)s, resource="memory"})' % c, '{{project_name}}')],
        width=8,
      ),
      g.bargauge(
        'Top projects by allocated CPUs',
        'vCPUs and dedicated CPUs allocated to the counted domains of the largest projects, fleet-wide.',
        cpus,
        [t('topk by (%(fleetLabel)s) (10, sum by (%(fleetLabel)s, project_id, project_name) (project:hypervisor_project_allocated:sum{%(f)s, resource=~"vcpu|pcpu"}))' % c, '{{project_name}}')],
        width=8,
      ),
      g.bargauge(
        'Top projects in the group',
        'Memory allocated to the counted domains of the largest projects on the members of the selected group (in maintenance or not).',
        bytes,
        [t('topk by (%(fleetLabel)s) (10, sum by (%(fleetLabel)s, project_id, project_name) (%(joined)s))' % c { joined: c.inGroup(c.once('hypervisor_project_allocated{%(s)s, resource="memory"}' % c, ['project_id', 'project_name', 'resource', 'unit'])) }, '{{project_name}}')],
        width=8,
      ),
      g.table(
        'Projects: share of the memory limit',
        'Per project, the memory its counted domains are allocated against the fleet\'s memory limit in service (hypervisors in maintenance left out of the limit, not of the projects), and its domains.',
        'percentunit',
        [
          t('project:hypervisor_project_allocated:sum{%(f)s, resource="memory"} / on (%(fleetLabel)s) group_left () resource:hypervisor_resource_limit:sum{%(f)s, resource="memory"}' % c, instant=true, format='table'),
          t('project:hypervisor_project_domains:sum{%(f)s}' % c, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'percentunit', display='share of the memory limit'),
          g.column('Value #B', 'short', display='domains'),
        ],
        sortBy='share of the memory limit',
        organize={ excludeByName: c.hidden { resource: true, unit: true } },
      ),
      g.row('Reclaimable capacity'),
      g.bargauge(
        'Reclaimable memory by reason',
        'Memory allocated to domains shut off for longer than reclaim.shutoff_after (shutoff) or running below reclaim.idle_cpu_below of their vCPUs for reclaim.idle_for (idle), fleet-wide, each hypervisor once (hypervisor_reclaimable; see docs/reclaim.md).',
        bytes,
        [t('sum by (%(fleetLabel)s, reason) (%(once)s)' % c { once: c.once('hypervisor_reclaimable{%(s)s, resource="memory"}' % c, ['resource', 'unit', 'reason']) }, '{{reason}}')],
        width=8,
      ),
      g.bargauge(
        'Reclaimable CPUs by reason',
        'vCPUs and dedicated CPUs allocated to shut-off and idle domains, fleet-wide, each hypervisor once.',
        cpus,
        [t('sum by (%(fleetLabel)s, reason) (%(once)s)' % c { once: c.once('hypervisor_reclaimable{%(s)s, resource=~"vcpu|pcpu"}' % c, ['resource', 'unit', 'reason']) }, '{{reason}}')],
        width=8,
      ),
      g.bargauge(
        'Top projects by reclaimable memory',
        'Memory of the shut-off and idle domains of the largest projects (hypervisor_project_reclaimable: the projects of exposition.top_projects, the rest as `other`), fleet-wide, each hypervisor once. `virtcap plan reclaim` lists the domains.',
        bytes,
        [t('topk by (%(fleetLabel)s) (10, sum by (%(fleetLabel)s, project_id, project_name) (%(once)s))' % c { once: c.once('hypervisor_project_reclaimable{%(s)s, resource="memory"}' % c, ['project_id', 'project_name', 'resource', 'unit', 'reason']) }, '{{project_name}}')],
        width=8,
      ),
      g.row('CPU contention and shared storage'),
      g.bargauge(
        'Most contended hypervisors',
        'The hypervisors whose running vCPUs spent the largest share of their time over the last %s waiting for a physical CPU (their steal time; hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio). Red above %g%% (HypervisorCPUContention). Empty where no hypervisor reports vCPU delays (libvirt\'s test driver, which most of the demo runs on; libvirt before 7.2).' % [config.cpuContentionWindow, 100 * config.cpuContentionRatio],
        'percentunit',
        [t('topk by (%(fleetLabel)s) (10, hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio{%(f)s})' % c, '{{hypervisor}}')],
        thresholds=g.usedSteps(config.cpuContentionRatio / 2, config.cpuContentionRatio),
        width=8,
      ),
      g.timeseries(
        'Shared storage over time',
        'All shared storage pools of the fleet together, each counted once however many hypervisors see it: capacity, what their volumes were promised (provisioned) and what is physically used.',
        bytes,
        [
          t(':hypervisor_storage_pool_capacity_bytes:sum{%(f)s}' % c, 'capacity'),
          t(':hypervisor_storage_pool_provisioned_bytes:sum{%(f)s}' % c, 'provisioned'),
          t(':hypervisor_storage_pool_used_bytes:sum{%(f)s}' % c, 'used'),
        ],
        width=16,
      ),
      g.table(
        'Shared storage pools',
        'Each shared storage pool (NFS, Ceph RBD...) once: where it is, how many hypervisors see it, its capacity, what its volumes were promised (provisioned), what is used, and the thin-provisioning ratio (provisioned / capacity; red above %g, HypervisorStoragePoolOverProvisioned).' % config.storagePoolProvisionedRatio,
        bytes,
        [
          t('max by (%(fleetLabel)s, pool, type, servers, path) (hypervisor_storage_pool_source_info{%(s)s})' % c, instant=true, format='table'),
          t('pool:hypervisor_storage_pool_hypervisors:count{%(f)s}' % c, instant=true, format='table'),
          t('pool:hypervisor_storage_pool_capacity_bytes:max{%(f)s}' % c, instant=true, format='table'),
          t('pool:hypervisor_storage_pool_provisioned_bytes:max{%(f)s}' % c, instant=true, format='table'),
          t('pool:hypervisor_storage_pool_used_bytes:max{%(f)s}' % c, instant=true, format='table'),
          t('pool:hypervisor_storage_pool_provisioned_ratio:max{%(f)s}' % c, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #B', 'short', display='hypervisors'),
          g.column('Value #C', bytes, display='capacity'),
          g.column('Value #D', bytes, display='provisioned'),
          g.column('Value #E', bytes, display='used'),
          g.column('Value #F', 'percentunit', g.usedSteps(config.storagePoolProvisionedRatio * 0.8, config.storagePoolProvisionedRatio), 'provisioned / capacity'),
        ],
        organize={ excludeByName: c.hidden { 'Value #A': true } },
      ),
    ],
    [c.kindVariable, c.groupVariable],
  );

{
  grafanaDashboards+:: {
    'virtcap-fleet.json': fleetDashboard($._config),
  },
}
