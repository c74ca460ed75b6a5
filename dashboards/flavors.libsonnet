// How many more instances of each flavor fit, where, and what limits them.
local g = import '../mixin/lib/grafana.libsonnet';
local common = import 'common.libsonnet';

local flavorsDashboard(config) =
  local c = common(config);
  local t = g.target;
  local h = c.h;

  c.dashboard(
    'virtcap-flavors',
    'virtcap / Flavor headroom',
    'Where does the next VM fit: how many more instances of each flavor fit, where, and what limits them.',
    [
      g.bargauge(
        'More instances that fit, fleet-wide',
        'Per flavor, how many more instances fit in the whole fleet (each hypervisor counted alone: an instance never spans hosts; those in maintenance offer none).',
        'short',
        [t('flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}}')],
        thresholds=g.freeSteps(config.flavorHeadroomMinimum, 2 * config.flavorHeadroomMinimum),
      ),
      g.bargauge(
        'Sellable instances, fleet-wide',
        'Per flavor, how many more instances can still be placed through the simulated scheduler, one by one, with the fleet still able to re-home every domain after the host failures it reserves for (scheduler.failure_tolerance.reserve_host_failures; flavor:virtcap_flavor_sellable_instances:sum), as of the exporter\'s last packing computation. Beside the instances that fit: the difference is the failover reserve. 0 while instances still fit: HypervisorFlavorSellableExhausted.',
        'short',
        [t('flavor:virtcap_flavor_sellable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}}')],
        thresholds=g.freeSteps(1, config.flavorHeadroomMinimum),
      ),
      g.timeseries(
        'Fleet headroom over time',
        'More instances that fit fleet-wide, per flavor, and those of them that can be sold keeping the failover reserve: a falling line is capacity being used up.',
        'short',
        [
          t('flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}} fit'),
          t('flavor:virtcap_flavor_sellable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}} sellable'),
        ],
      ),
      g.table(
        'Time remaining, fleet-wide',
        'Per flavor: the instances that fit fleet-wide now, their trend per day over the last %(w)s (the least-squares slope, PromQL\'s deriv), and the runway, how long until none fits at that trend (fleet_flavor:hypervisor_schedulable_instances:runway_seconds); "not falling" where the trend is flat or rising. Red below %(warning)s (HypervisorFlavorRunwayShort, for the configured flavors). `virtcap plan runway` gives it over a longer window, with a band.' % { w: config.runwayWindow, warning: config.runwayWarning },
        'short',
        [
          t('flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, instant=true, format='table'),
          t('deriv(flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}[%(runwayWindow)s]) * 86400' % c, instant=true, format='table'),
          t(c.runwayOrNotFalling('fleet_flavor:hypervisor_schedulable_instances:runway_seconds{%(f)s, flavor=~"$flavor"}' % c, 'flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, ['flavor']), instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'short', display='fit now'),
          g.column('Value #B', 'short', display='trend per day'),
          c.runwayColumn('Value #C'),
        ],
        sortBy='time remaining',
        organize={ excludeByName: c.hidden },
        width=12,
      ),
      g.table(
        'Per availability zone: fit and sellable',
        'Per availability zone and flavor: the instances that fit on its members in service (group_flavor:hypervisor_schedulable_instances:sum) and those that can be sold keeping the zone able to re-home its domains after the reserved host failures, failover staying in the zone (group_flavor:hypervisor_group_flavor_sellable_instances:sum).',
        'short',
        [
          t('group_flavor:hypervisor_schedulable_instances:sum{%(f)s, kind="availability_zone", flavor=~"$flavor"}' % c, instant=true, format='table'),
          t('group_flavor:hypervisor_group_flavor_sellable_instances:sum{%(f)s, kind="availability_zone", flavor=~"$flavor"}' % c, instant=true, format='table'),
        ],
        overrides=[
          g.column('Value #A', 'short', g.freeSteps(1, 2), 'fit'),
          g.column('Value #B', 'short', g.freeSteps(1, 2), 'sellable'),
          g.column('group', 'short', display='availability zone'),
        ],
        organize={ excludeByName: c.hidden { kind: true } },
        width=12,
      ),
      g.table(
        'Time remaining per availability zone',
        'Per availability zone and flavor: how long until no more instance fits on its members in service at the trend of the last %(w)s (group_flavor:hypervisor_schedulable_instances:runway_seconds, also recorded per rack); "not falling" where the trend is flat or rising. A zone runs out before the fleet does: an instance never leaves its zone.' % { w: config.runwayWindow },
        's',
        [
          t(c.runwayOrNotFalling('group_flavor:hypervisor_schedulable_instances:runway_seconds{%(f)s, kind="availability_zone", flavor=~"$flavor"}' % c, 'group_flavor:hypervisor_schedulable_instances:sum{%(f)s, kind="availability_zone", flavor=~"$flavor"}' % c, ['kind', 'group', 'flavor']), instant=true, format='table'),
        ],
        overrides=[
          c.runwayColumn('Value'),
          g.column('group', 'short', display='availability zone'),
        ],
        sortBy='time remaining',
        organize={ excludeByName: c.hidden { kind: true } },
        width=12,
      ),
      g.table(
        'Per hypervisor',
        'How many more instances of each flavor fit on each hypervisor.',
        'short',
        [t('hypervisor_schedulable_instances{%s, flavor=~"$flavor"}' % h, instant=true, format='table')],
        overrides=[g.column('Value', 'short', g.freeSteps(1, 2), 'fit')],
        organize={ excludeByName: c.hidden },
        width=12,
        height=10,
      ),
      g.table(
        'What limits each flavor',
        'For each flavor, on how many hypervisors each resource is the one that runs out first (hypervisor_flavor_bottleneck).',
        'short',
        [t('count by (%s, flavor, resource) (%s)' % [c.fleetLabel, c.once('hypervisor_flavor_bottleneck{%(h)s, flavor=~"$flavor"}' % c, ['flavor', 'resource'])], instant=true, format='table')],
        overrides=[g.column('Value', 'short', display='hypervisors')],
        organize={ excludeByName: { Time: true, [c.fleetLabel]: true } },
        width=12,
        height=10,
      ),
      g.row('Groups and discovered flavors'),
      g.bargauge(
        'More instances that fit in the group',
        'Per flavor, how many more instances fit on the members of the selected group (kind and group variables), each counted alone; members in maintenance offer none. For availability zones and racks the same figure is recorded as group_flavor:hypervisor_schedulable_instances:sum.',
        'short',
        [t('sum by (%(fleetLabel)s, flavor) (%(joined)s)' % c { joined: c.inGroup(c.onceFree('hypervisor_schedulable_instances{%(s)s, flavor=~"$flavor"}' % c, ['flavor'])) }, '{{flavor}}')],
        thresholds=g.freeSteps(1, config.flavorHeadroomMinimum),
      ),
      g.table(
        'Flavors in use, not configured',
        'Flavors virtcap discovered in the Nova metadata of existing domains and the configuration does not define (virtcap_flavor_info{source="discovered"}), with how many more instances fit fleet-wide. Their headroom is reported, but HypervisorFlavorHeadroomLow watches only the configured flavors (unless the mixin\'s flavorHeadroomDiscovered is true): add one to virtcap\'s flavors to watch it.',
        'short',
        [t('flavor:hypervisor_schedulable_instances:sum{%(f)s} and on (%(fleetLabel)s, flavor) (virtcap_flavor_info{%(s)s, source="discovered"} unless on (%(fleetLabel)s, flavor) virtcap_flavor_info{%(s)s, source="configured"})' % c, instant=true, format='table')],
        overrides=[g.column('Value', 'short', g.freeSteps(1, config.flavorHeadroomMinimum), 'fit fleet-wide')],
        organize={ excludeByName: { Time: true, [c.fleetLabel]: true } },
      ),
    ],
    [c.hypervisorVariable, c.flavorVariable, c.kindVariable, c.groupVariable],
  );

{
  grafanaDashboards+:: {
    'virtcap-flavors.json': flavorsDashboard($._config),
  },
}
