// Per host group (hypervisor_group_info{kind, group}: an availability zone, an aggregate, a rack):
// the fleet's figures within each group, keeping `kind` and `group`. A hypervisor in two aggregates
// counts once in each (so never add up the groups of a kind that overlaps: the fleet rules count it
// once), however many exporters report it (joins.once). The capacity figures are of the hypervisors
// in service, as the fleet's.
//
// PromQL joins many series to one, never many to many: the membership series is the "many" side
// and the hypervisor's value the "one", so resources are joined one at a time
// (_config.groupResources), and what a hypervisor has many of, flavors, are grouped only for the
// kinds whose groups never overlap (_config.exclusiveGroupKinds).
local joins = import '../../mixin/lib/joins.libsonnet';
local runway = import '../../mixin/lib/runway.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-groups.rules',
        local c = $._config,
        local byGroup = '%s, kind, group' % c.fleetLabel,
        // per group and resource, of the hypervisors in service: `aggregation` of `series`
        local perGroupResource(aggregation, series, once='max') =
          '%s by (%s, resource, unit) (\n  %s\n)\n' % [
            aggregation,
            byGroup,
            std.join('\n  or ', [
              joins.perMembership(c, joins.inService(c, joins.once(c, series % { selector: c.selector, resource: resource }, ['resource', 'unit'], aggregation=once)), ['resource', 'unit'])
              for resource in c.groupResources
            ]),
          ],
        rules: [
          {
            record: 'group_resource:hypervisor_resource_%s:sum' % quantity,
            expr: perGroupResource(
              'sum',
              // used only where there is a limit, as the fleet rule
              if quantity == 'used'
              then '(hypervisor_resource_used{%(selector)s, resource="%(resource)s"} and hypervisor_resource_limit{%(selector)s, resource="%(resource)s"})'
              else 'hypervisor_resource_%s{%%(selector)s, resource="%%(resource)s"}' % quantity,
              once=if quantity == 'free' then 'min' else 'max',
            ),
          }
          for quantity in ['size', 'reserved', 'limit', 'used', 'free', 'claimed']
        ] + [
          {
            record: 'group_resource:hypervisor_resource_limit:max',
            expr: perGroupResource('max', 'hypervisor_resource_limit{%(selector)s, resource="%(resource)s"}'),
          },
          {
            // members that offer the resource: the N+1 test is meaningless below two
            record: 'group_resource:hypervisor_resource_offered:count',
            expr: perGroupResource('count', '(hypervisor_resource_limit{%(selector)s, resource="%(resource)s"} > 0)'),
          },
          {
            // The sum-based bound of the loss of the group's largest member, as the fleet's. Per
            // availability zone it is the question the scheduler asks (an evacuation stays in its
            // zone); per aggregate or rack a planning figure (Nova may re-home outside them).
            record: 'group_resource:hypervisor_failover_shortfall:sum',
            expr: |||
              (
                group_resource:hypervisor_resource_used:sum
                  - (group_resource:hypervisor_resource_limit:sum - group_resource:hypervisor_resource_limit:max)
              )
              and group_resource:hypervisor_resource_offered:count > 1
            |||,
          },
          {
            record: 'group_resource:hypervisor_resource_utilization:ratio',
            expr: 'group_resource:hypervisor_resource_used:sum / group_resource:hypervisor_resource_limit:sum',
          },
        ] + [
          {
            // how many more instances of each flavor fit in the group (exclusive kinds only, one
            // rule per kind)
            record: 'group_flavor:hypervisor_schedulable_instances:sum',
            expr: 'sum by (%s, flavor) (\n  %s\n)\n' % [
              byGroup,
              joins.perExclusiveGroup(c, joins.inService(c, joins.onceFree(c, 'hypervisor_schedulable_instances{%(selector)s}' % c, ['flavor'])), kind),
            ],
            // the kind's own rule (promtool wants rules of one name told apart by their labels)
            labels: { kind: kind },
          }
          for kind in c.exclusiveGroupKinds
        ] + [
          {
            // seconds until none fits in the group, at the trend of _config.runwayWindow (every
            // exclusive kind's groups at once: the sums carry their kind)
            record: 'group_flavor:hypervisor_schedulable_instances:runway_seconds',
            expr: runway.seconds(c, 'group_flavor:hypervisor_schedulable_instances:sum'),
          },
        ] + [
          {
            record: 'group:hypervisor_%s:%s' % [name, aggregation],
            expr: '%s by (%s) (\n  %s\n)\n' % [aggregation, byGroup, joins.perMembership(c, series)],
          }
          for rule in [
            // members audited successfully, and all members (up or not, in maintenance or not)
            ['up', 'sum', joins.once(c, 'hypervisor_up{%(selector)s}' % c)],
            ['up', 'count', joins.once(c, 'hypervisor_up{%(selector)s}' % c)],
            ['maintenance', 'sum', joins.once(c, 'hypervisor_maintenance{%(selector)s}' % c)],
            // members in service: those the host-failure alert needs two of
            ['in_service', 'count', joins.inService(c, joins.once(c, 'hypervisor_up{%(selector)s}' % c))],
            // members in service whose domains would not all find a host if they failed (by the
            // simulation of any exporter that reports them)
            ['evacuation_infeasible', 'count', joins.inService(c, joins.once(c, 'hypervisor_evacuation_feasible{%(selector)s} == 0' % c))],
          ]
          for name in [rule[0]]
          for aggregation in [rule[1]]
          for series in [rule[2]]
        ],
      },
    ],
  },
}
