// What the dashboards share: the selectors of their queries, with the fleet and hypervisor
// variables, and the variables themselves. A dashboard shows one fleet at a time (as
// kubernetes-mixin's show one cluster): its totals are that fleet's, never several summed. Every
// query that adds up or counts hypervisors takes each once, however many exporters report it
// (`once`: the two replicas of an HA pair), as the rules do.
local g = import '../mixin/lib/grafana.libsonnet';
local joins = import '../mixin/lib/joins.libsonnet';
local durations = import '../mixin/lib/durations.libsonnet';

function(config) config {
  // a recording rule's series: its aggregation kept only the fleet label of the target's labels
  f: '%(fleetLabel)s="$fleet"' % config,
  // virtcap's own series, of the selected fleet
  s: '%(selector)s, %(f)s' % self,
  // ... of the selected hypervisors
  h: '%(s)s, hypervisor=~"$hypervisor"' % self,

  fleetVariable:: g.queryVariable('fleet', 'Fleet', 'label_values(hypervisor_up{%(selector)s}, %(fleetLabel)s)' % config, multi=false),
  hypervisorVariable:: g.queryVariable('hypervisor', 'Hypervisor', 'label_values(hypervisor_up{%(s)s}, hypervisor)' % self),
  flavorVariable:: g.queryVariable('flavor', 'Flavor', 'label_values(hypervisor_schedulable_instances{%(s)s}, flavor)' % self),
  // One host group at a time (kind, then group): a hypervisor is in at most one group of the
  // selection, so the panels may join hypervisor_group_info{kind="$kind", group="$group"} to series
  // of several per hypervisor (flavors, projects), which overlapping groups would make many-to-many.
  kindVariable:: g.queryVariable('kind', 'Group kind', 'label_values(hypervisor_group_info{%(s)s}, kind)' % self, multi=false),
  groupVariable:: g.queryVariable('group', 'Group', 'label_values(hypervisor_group_info{%(s)s, kind="$kind"}, group)' % self, multi=false),
  // one series per hypervisor (and `labels`) of `series`: the largest, or the smallest (onceFree)
  // of what is free, of the exporters that report it
  once(series, labels=[]):: joins.once(config, series, labels),
  onceFree(series, labels=[]):: joins.onceFree(config, series, labels),
  // the membership series of the selected group, once each, and the join onto it of a series of
  // at most one per hypervisor (taken `once`)
  members: self.once('hypervisor_group_info{%(s)s, kind="$kind", group="$group"}' % self, ['kind', 'group']),
  inGroup(series):: '%s * %s group_left () %s' % [series, joins.onHypervisor(config), self.members],

  // The runway of a recorded sum of schedulable instances (`runway`: its runway rule, `sum`: the
  // sum), as a table column: where the trend is flat or rising the rule has no series, and the
  // sum times NaN stands in for it so that the flavor still has its row ("not falling").
  runwayOrNotFalling(runway, sum, labels):: '%s or on (%s) %s * NaN' % [runway, std.join(', ', [config.fleetLabel] + labels), sum],
  runwayColumn(name, display='time remaining'):: g.column(
    name,
    's',
    g.freeSteps(durations.seconds(config.runwayWarning), 2 * durations.seconds(config.runwayWarning)),
    display,
    g.nanText('not falling'),
  ),

  // Table columns that say nothing on a dashboard of one fleet.
  hidden:: { Time: true, job: true, instance: true, __name__: true, [config.fleetLabel]: true },

  dashboard(uid, title, description, panels, variables=[]):: g.dashboard(
    uid,
    title,
    description,
    panels,
    [self.fleetVariable] + variables,
    tag=config.dashboardTag,
    datasourceUID=config.datasourceUID,
  ),
}
