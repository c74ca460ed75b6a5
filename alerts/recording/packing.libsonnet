// The packing answers (issue 27), as of the exporter's last packing computation: capacity stranded
// on each hypervisor (free, but no packing of the fleet's flavors can use it, another resource of
// the host running out first), per fleet and per group, and its share of what is free; the
// compaction (the fewest hypervisors that could hold every domain) and the instances of each
// flavor that can still be sold keeping the failover reserve.
//
// Stranded capacity is per hypervisor: each once however many exporters report it (joins.once,
// the larger), of the hypervisors in service (the exporter reports it for those only; leaving the
// others out keeps an older exporter's series right too). Its share is of the free amount of the
// same hypervisors, what is negative (an overcommitted host) counted as none: a fleet's free
// memory net of an overcommitted host would make the share larger than what is stranded.
//
// The compaction and sellable figures are each exporter's, for its shard: once per shard (an HA
// pair's replicas serve one) and added up over the shards (joins.perShard). Each shard re-homes
// within itself, so a sharded fleet's figures are the sums of its shards' own.
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-packing.rules',
        local c = $._config,
        local byGroup = '%s, kind, group' % c.fleetLabel,
        local stranded(resource=null) = joins.inService(c, joins.once(
          c,
          'hypervisor_resource_stranded{%s%s}' % [c.selector, if resource == null then '' else ', resource="%s"' % resource],
          ['resource', 'unit'],
        )),
        // the free amount of the hypervisors that report stranded capacity, none below 0
        local strandable(resource=null) = '(\n  clamp_min(%s, 0)\n    and %s\n)' % [
          joins.onceFree(c, 'hypervisor_resource_free{%s%s}' % [c.selector, if resource == null then '' else ', resource="%s"' % resource], ['resource', 'unit']),
          'on (%s, resource, unit) %s' % [std.join(', ', joins.hypervisorLabels(c)), stranded(resource)],
        ],
        local perGroup(series) = 'sum by (%s, resource, unit) (\n  %s\n)\n' % [
          byGroup,
          std.join('\n  or ', [joins.perMembership(c, series(resource), ['resource', 'unit']) for resource in c.groupResources]),
        ],
        rules: [
          {
            record: 'resource:hypervisor_resource_stranded:sum',
            expr: 'sum by (%s, resource, unit) %s' % [c.fleetLabel, stranded()],
          },
          {
            // 0 where nothing is stranded; no series where nothing is free
            record: 'resource:hypervisor_resource_stranded_of_free:ratio',
            expr: |||
              resource:hypervisor_resource_stranded:sum
                / on (%s, resource, unit) (sum by (%s, resource, unit) %s > 0)
            ||| % [c.fleetLabel, c.fleetLabel, strandable()],
          },
          {
            // each configured group kind, the resources of _config.groupResources (one at a time:
            // a membership joins one series per hypervisor)
            record: 'group_resource:hypervisor_resource_stranded:sum',
            expr: perGroup(stranded),
          },
          {
            record: 'group_resource:hypervisor_resource_stranded_of_free:ratio',
            expr: 'group_resource:hypervisor_resource_stranded:sum\n  / on (%s, resource, unit) (\n%s  > 0\n)\n' % [byGroup, perGroup(strandable)],
          },
          {
            // what the compaction is compared with: the hypervisors it may use
            record: ':hypervisor_up_in_service:count',
            expr: 'count by (%s) %s' % [c.fleetLabel, joins.inService(c, joins.once(c, 'hypervisor_up{%(selector)s} == 1' % c))],
          },
          {
            record: 'group:hypervisor_up_in_service:count',
            expr: 'count by (%s) (\n  %s\n)\n' % [byGroup, joins.perMembership(c, joins.inService(c, joins.once(c, 'hypervisor_up{%(selector)s} == 1' % c)))],
          },
        ] + [
          {
            record: rule[0],
            expr: joins.perShard(c, '%s{%s}' % [rule[1], c.selector], rule[2], rule[3]),
          }
          for rule in [
            // the larger of what is needed, the smaller of what is left
            [':virtcap_fleet_compaction_hypervisors:sum', 'virtcap_fleet_compaction_hypervisors', [], 'max'],
            [':virtcap_fleet_compaction_lower_bound:sum', 'virtcap_fleet_compaction_lower_bound', [], 'max'],
            [':virtcap_fleet_hypervisors_freeable:sum', 'virtcap_fleet_hypervisors_freeable', [], 'min'],
            ['group:hypervisor_group_compaction_hypervisors:sum', 'hypervisor_group_compaction_hypervisors', ['kind', 'group'], 'max'],
            ['flavor:virtcap_flavor_sellable_instances:sum', 'virtcap_flavor_sellable_instances', ['flavor'], 'min'],
            ['group_flavor:hypervisor_group_flavor_sellable_instances:sum', 'hypervisor_group_flavor_sellable_instances', ['kind', 'group', 'flavor'], 'min'],
          ]
        ],
      },
    ],
  },
}
