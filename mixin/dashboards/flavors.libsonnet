// How many more instances of each flavor fit, where, and what limits them.
local g = import '../lib/grafana.libsonnet';
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
        'Per flavor, how many more instances fit in the whole fleet (each hypervisor counted alone: an instance never spans hosts).',
        'short',
        [t('flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}}')],
        thresholds=g.freeSteps(config.flavorHeadroomMinimum, 2 * config.flavorHeadroomMinimum),
      ),
      g.timeseries(
        'Fleet headroom over time',
        'More instances that fit fleet-wide, per flavor: a falling line is capacity being used up.',
        'short',
        [t('flavor:hypervisor_schedulable_instances:sum{%(f)s, flavor=~"$flavor"}' % c, '{{flavor}}')],
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
        [t('count by (%(fleetLabel)s, flavor, resource) (hypervisor_flavor_bottleneck{%(h)s, flavor=~"$flavor"})' % c, instant=true, format='table')],
        overrides=[g.column('Value', 'short', display='hypervisors')],
        organize={ excludeByName: { Time: true, [c.fleetLabel]: true } },
        width=12,
        height=10,
      ),
    ],
    [c.hypervisorVariable, c.flavorVariable],
  );

{
  grafanaDashboards+:: {
    'virtcap-flavors.json': flavorsDashboard($._config),
  },
}
