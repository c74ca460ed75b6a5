// Every resource of the selected hypervisors, their NUMA cells, hugepages and devices, and their
// Placement reconciliation.
local g = import '../mixin/lib/grafana.libsonnet';
local common = import 'common.libsonnet';

local hypervisorDashboard(config) =
  local c = common(config);
  local t = g.target;
  local h = c.h;
  local fleetLabel = c.fleetLabel;
  local cpus = 'short';
  local bytes = 'bytes';

  local allocatedByState(resource, unit) = g.timeseries(
    '%s allocated by domain state' % resource,
    'What the domains of the selected hypervisors are allocated, stacked by state, with pending claims. Shut off domains hold their allocation unless count_inactive_domains is false.',
    unit,
    [
      t('sum by (%s, state) (%s)' % [fleetLabel, c.once('hypervisor_resource_allocated{%s, resource="%s"}' % [h, resource], ['resource', 'unit', 'state'])], '{{state}}'),
      t('sum by (%s) (%s)' % [fleetLabel, c.once('hypervisor_resource_claimed{%s, resource="%s"}' % [h, resource], ['resource', 'unit'])], 'claimed'),
    ],
    width=8,
    stack=true,
  );

  c.dashboard(
    'virtcap-hypervisor',
    'virtcap / Hypervisor detail',
    'Every resource of the selected hypervisors: total, reserved, limit, used by domain state, claimed, free, and what the host really uses; whether their domains would find a host if they were lost; their NUMA cells, hugepages and passthrough devices; and, where Placement is read, how its allocations and inventories drift from them.',
    [
      g.table(
        'Resources',
        'Per hypervisor and resource, in cpus or bytes: total, reserved, the limit (total - reserved) x ratio, used (allocated + claimed), claimed and free. Free is negative beyond the policy.',
        'short',
        [
          t('hypervisor_resource_size{%s}' % h, instant=true, format='table'),
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
        organize={ excludeByName: c.hidden },
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
          t('hypervisor_resource_size{%s, resource="memory"}' % h, '{{hypervisor}} physical'),
        ],
      ),
      g.timeseries(
        'vCPU: busy host CPUs against allocation',
        'Host CPUs really busy against the vCPUs allocated and the vCPU limit. Busy CPUs are absent where the driver measures no host CPU time (libvirt\'s test driver, which most of the demo runs on: its replayed hosts have them).',
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
        [t('sum by (%s, state) (%s)' % [fleetLabel, c.once('hypervisor_domains{%(h)s}' % c, ['state'])], '{{state}}')],
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
        'Identity of the selected hypervisors (hypervisor_info), whether their last audit succeeded, and whether they are in maintenance (then they offer nothing: no flavor fits, the scheduler refuses them, and they are left out of the fleet\'s capacity) and until when (empty: until lifted).',
        'short',
        [
          t('hypervisor_info{%s}' % h, instant=true, format='table'),
          t('hypervisor_up{%s}' % h, instant=true, format='table'),
          t('hypervisor_maintenance{%s}' % h, instant=true, format='table'),
          t('hypervisor_maintenance_end_timestamp_seconds{%s} * 1000' % h, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #B', 'short', g.freeSteps(1, 1), 'up'),
          g.column('Value #C', 'short', display='maintenance', mappings=g.valueTexts({ '0': 'in service', '1': 'maintenance' })),
          g.column('Value #D', 'dateTimeAsIso', display='maintenance ends'),
        ],
        organize={ excludeByName: c.hidden { 'Value #A': true } },
        width=16,
      ),
      g.table(
        'Host groups',
        'The groups the selected hypervisors are in (hypervisor_group_info): availability zone, aggregates, rack, or any kind the configuration names.',
        'short',
        [t('hypervisor_group_info{%s}' % h, instant=true, format='table')],
        organize={ excludeByName: c.hidden { Value: true } },
        width=8,
      ),
      g.row('CPU contention'),
      g.timeseries(
        'vCPU wait per running vCPU',
        'Share of time the running vCPUs of each selected hypervisor waited, runnable, for a physical CPU (their steal time): the rate of hypervisor_vcpu_wait_seconds_total over the vCPUs and dedicated CPUs of its running domains. Above %g%% for 15 minutes: HypervisorCPUContention. No line: the hypervisor does not report vCPU delays (libvirt\'s test driver, on which most of the demo runs; libvirt before 7.2). One line per hypervisor, however many exporters report it.' % (100 * config.cpuContentionRatio),
        'percentunit',
        [t('max by (%(fleetLabel)s, hypervisor) (rate(hypervisor_vcpu_wait_seconds_total{%(h)s}[$__rate_interval])) / (sum by (%(fleetLabel)s, hypervisor) (max by (%(fleetLabel)s, hypervisor, resource, state) (hypervisor_resource_allocated{%(h)s, resource=~"vcpu|pcpu", state="running"})) > 0)' % c, '{{hypervisor}}')],
      ),
      g.timeseries(
        'vCPUs waiting for a CPU',
        'How many of the guests\' vCPUs were waiting for a physical CPU, on average (the rate of hypervisor_vcpu_wait_seconds_total), per selected hypervisor, however many exporters report it. No line: the hypervisor does not report vCPU delays.',
        'short',
        [t('max by (%(fleetLabel)s, hypervisor) (rate(hypervisor_vcpu_wait_seconds_total{%(h)s}[$__rate_interval]))' % c, '{{hypervisor}}')],
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
        organize={ excludeByName: c.hidden },
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
        organize={ excludeByName: c.hidden },
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
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      // Placement reconciliation (`placement:`): empty where it is not configured. The per-hypervisor
      // families are absent while Placement is unreadable, never stale: a gap in the lines, not a 0.
      g.row('Placement reconciliation'),
      g.stat(
        'Placement read',
        'Per exporter: up while its last reading of Placement succeeded; down while Placement is unreadable (down, too slow, refusing virtcap or answering garbage), and the per-hypervisor panels below are empty (VirtcapPlacementDown). No value: the exporter has no `placement:`.',
        'short',
        [t('min by (%(fleetLabel)s, instance) (virtcap_placement_up{%(s)s})' % c, '{{instance}}')],
        thresholds=[{ color: 'red', value: null }, { color: 'green', value: 1 }],
      ) + { fieldConfig+: { defaults+: { mappings: g.valueTexts({ '0': 'down', '1': 'up' }) } } },
      g.stat(
        'Placement data age',
        'Per exporter: seconds since its last successful reading of Placement, which the panels below are as of. It stays below placement.interval (by default the audit interval) while readings succeed.',
        's',
        [t('max by (%(fleetLabel)s, instance) (time() - virtcap_placement_last_success_timestamp_seconds{%(s)s})' % c, '{{instance}}')],
      ),
      g.stat(
        'Hypervisors without a provider',
        'Per exporter: audited hypervisors no resource provider in Placement matched, by their hostname or placement_provider: nova-compute does not run there, or their provider has another name (set placement_provider). They are not reconciled.',
        'short',
        [t('max by (%(fleetLabel)s, instance) (virtcap_placement_unmatched_hypervisors{%(s)s})' % c, '{{instance}}')],
        thresholds=g.usedSteps(1, 1),
      ),
      g.stat(
        'Placement read duration',
        'Per exporter: how long its last reading of Placement took, its requests and the comparison; close to placement.interval, readings fall behind.',
        's',
        [t('max by (%(fleetLabel)s, instance) (virtcap_placement_read_duration_seconds{%(s)s})' % c, '{{instance}}')],
      ),
      g.timeseries(
        'Orphaned consumers',
        'Consumers holding allocations on the Placement providers of each selected hypervisor with no domain of theirs running there, migrations in progress left out: leaked allocations the scheduler counts as used (HypervisorPlacementOrphanedAllocations: `nova-manage placement audit --verbose`, then `--delete`).',
        'short',
        [t(c.once('hypervisor_placement_orphaned_consumers{%(h)s}' % c), '{{hypervisor}}')],
        width=8,
      ),
      g.timeseries(
        'Unallocated domains',
        'Nova instances running on each selected hypervisor with no allocation on its Placement providers, the source side of a live migration left out: Placement believes their capacity free (HypervisorPlacementUnallocatedDomains: `nova-manage placement heal_allocations`).',
        'short',
        [t(c.once('hypervisor_placement_unallocated_domains{%(h)s}' % c), '{{hypervisor}}')],
        width=8,
      ),
      g.timeseries(
        'Mismatched allocations',
        'Instances on each selected hypervisor whose allocation differs from what their flavor and extra specs ask: a resize to confirm or revert, a flavor edited in place.',
        'short',
        [t(c.once('hypervisor_placement_mismatched_allocations{%(h)s}' % c), '{{hypervisor}}')],
        width=8,
      ),
      g.table(
        'Orphaned and unallocated allocation',
        'Per selected hypervisor and class (in cpus or bytes), where not 0: what the orphaned consumers hold in Placement though nothing of theirs runs there, and what the unallocated instances\' flavors ask though Placement holds nothing for them.',
        'short',
        [
          t(c.once('hypervisor_placement_orphaned_allocation{%(h)s} != 0' % c, ['resource', 'unit']), instant=true, format='table'),
          t(c.once('hypervisor_placement_unallocated_allocation{%(h)s} != 0' % c, ['resource', 'unit']), instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'short', display='orphaned'),
          g.column('Value #B', 'short', display='unallocated'),
        ],
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      g.table(
        'Usage drift per class',
        'Per selected hypervisor and class (in cpus or bytes), where not 0: Placement\'s usage on its providers minus what its counted domains are allocated, virtcap\'s own claims left out. Positive: Placement counts more than runs (orphaned allocations); negative: less (unallocated instances); the sum of the drifts above, seen from the totals.',
        'short',
        [t(c.once('hypervisor_placement_usage_drift{%(h)s} != 0' % c, ['resource', 'unit']), instant=true, format='table')],
        overrides=[g.column('Value', 'short', display='Placement - virtcap')],
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      g.table(
        'Placement inventory drift',
        'Per selected hypervisor, class and inventory field, where not 0: Placement\'s value minus the one nova-compute would report for the audited host and its configuration (bytes for memory and disk, a plain ratio for allocation_ratio). A stale or misconfigured nova-compute, or hardware changed under it (HypervisorPlacementInventoryDrift: restart nova-compute, or align its reserved_host_* and allocation ratios with virtcap\'s configuration).',
        'short',
        [t(c.once('hypervisor_placement_inventory_drift{%(h)s} != 0' % c, ['resource', 'field']), instant=true, format='table')],
        overrides=[g.column('Value', 'short', display='Placement - Nova')],
        organize={ excludeByName: c.hidden },
      ),
    ],
    [c.hypervisorVariable],
  );

{
  grafanaDashboards+:: {
    'virtcap-hypervisor.json': hypervisorDashboard($._config),
  },
}
