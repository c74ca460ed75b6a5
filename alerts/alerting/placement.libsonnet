// Placement reconciliation (virtcap's `placement:`): what Placement holds for each hypervisor
// against what is running there and what nova-compute would report. virtcap never writes to
// Placement: each alert names the command that fixes it (docs/runbook.md).
//
// The per-hypervisor families vanish while Placement is unreadable rather than go stale, and exist
// only where `placement:` is configured. So each drift alert reads the last value within
// placementGapWindow (`last_over_time`: staleness markers are not samples): absent series alone
// never fire it, an outage of Placement or a restart of virtcap shorter than the window neither
// resolves nor restarts it, and a value read as 0 resolves it at once. A hypervisor in maintenance
// is left out: evacuating it leaves its instances' allocations on it until nova-compute starts
// there again. One alert per hypervisor, whatever the number of exporters reading Placement for it
// (joins.once); the Placement reading itself is per exporter.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    local config = $._config,
    local lastRead(family) = 'last_over_time(%s{%s}[%s])' % [family, config.selector, config.placementGapWindow],
    groups+: [
      {
        name: 'virtcap-placement',
        rules: [
          alert(
            config,
            'HypervisorPlacementOrphanedAllocations',
            'placementOrphaned',
            joins.inService(config, joins.once(config, '%s > 0' % lastRead('hypervisor_placement_orphaned_consumers'))),
            'Placement holds allocations on a hypervisor for consumers that do not run there.',
            '{{ $value }} consumers hold allocations on the Placement providers of {{ $labels.hypervisor }} (fleet {{ $labels.%(fleetLabel)s }}) with no domain of theirs on it, migrations in progress left out: leaked allocations the scheduler counts as used.' % config,
          ),
          alert(
            config,
            'HypervisorPlacementUnallocatedDomains',
            'placementUnallocated',
            joins.inService(config, joins.once(config, '%s > 0' % lastRead('hypervisor_placement_unallocated_domains'))),
            'Nova instances run on a hypervisor without an allocation in Placement.',
            '{{ $value }} Nova instances run on {{ $labels.hypervisor }} (fleet {{ $labels.%(fleetLabel)s }}) with no allocation on its Placement providers: the scheduler believes their capacity free and will overfill the hypervisor.' % config,
          ),
          alert(
            config,
            'HypervisorPlacementInventoryDrift',
            'placementInventoryDrift',
            joins.inService(config, 'count by (%s) (%s)' % [
              std.join(', ', joins.hypervisorLabels(config)),
              joins.once(config, '%s != 0' % lastRead('hypervisor_placement_inventory_drift'), ['resource', 'field']),
            ]),
            "Placement's inventory of a hypervisor differs from what nova-compute would report.",
            '{{ $value }} inventory fields of {{ $labels.hypervisor }} (fleet {{ $labels.%(fleetLabel)s }}) in Placement (total, reserved, allocation_ratio or max_unit of a class) differ from what nova-compute would report for the audited host and its configuration: the scheduler places by the wrong capacity. The hypervisor dashboard\'s Placement inventory drift table names them.' % config,
          ),
          alert(
            config,
            'VirtcapPlacementDown',
            'placementDown',
            |||
              virtcap_placement_up{%(selector)s} == 0
            ||| % config,
            'virtcap cannot read Placement: the Placement drift of its hypervisors is unknown.',
            'virtcap at {{ $labels.instance }} (fleet {{ $labels.%(fleetLabel)s }}) cannot read Placement (down, too slow, refusing virtcap or answering garbage): the Placement families of its hypervisors are absent, and the Placement drift alerts resolve once their last reading is older than %(placementGapWindow)s.' % config,
          ),
        ],
      },
    ],
  },
}
