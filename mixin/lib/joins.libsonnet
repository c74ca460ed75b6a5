// The deduplication and the joins the rules, alerts and dashboards share. A hypervisor is its
// fleet label and its name: two exporters may report it (the replicas of an HA pair scraped as two
// targets of the job, or anywhere a scrape gives the same hypervisor twice), so every aggregation
// across hypervisors first takes one series per hypervisor (`once`), and every join matches on the
// fleet and the hypervisor, never on the target's job and instance. Two fleets with a
// `compute-01` each still never meet: the fleet label tells them apart.
local multiline(expr) = std.length(std.findSubstr('\n', std.rstripChars(expr, '\n'))) > 0;
// `expr` without its last newline, each line indented by two spaces
local indented(expr) = std.join('\n', ['  ' + line for line in std.split(std.rstripChars(expr, '\n'), '\n')]);

{
  // The labels that identify one hypervisor, whichever target reports it.
  hypervisorLabels(config):: [config.fleetLabel, 'hypervisor'],
  onHypervisor(config):: 'on (%s)' % std.join(', ', self.hypervisorLabels(config)),

  // One series per hypervisor and value of `labels` (the family's own labels: resource, unit,
  // flavor...) of `series`, however many exporters report it: the worse of their values. The
  // replicas of an HA pair audit the same hypervisors and share their claims, so their values
  // agree but for an audit or a claim that one has seen and the other not yet: the largest
  // (`max`) of what is used, the smallest (`min`, onceFree) of what is free, so that used and free
  // still add up to the limit; and an alert's condition, tested on each exporter's series first,
  // fires if any of them meets it. `by`, not `without (instance)`: labels of the replicas' own
  // targets (a pod, a replica name) must not keep them apart either. A condition of several lines
  // stays on several lines (and ends with a newline, as a block).
  once(config, series, labels=[], aggregation='max')::
    local by = std.join(', ', self.hypervisorLabels(config) + labels);
    if multiline(series)
    then '%s by (%s) (\n%s\n)\n' % [aggregation, by, indented(series)]
    else '%s by (%s) (%s)' % [aggregation, by, series],
  onceFree(config, series, labels=[]):: self.once(config, series, labels, 'min'),

  // `expr` without the hypervisors in maintenance (hypervisor_maintenance 1, from any exporter).
  // An exporter without maintenance (no such series) leaves everything in.
  inService(config, expr)::
    local maintenance = '%s hypervisor_maintenance{%s} == 1' % [self.onHypervisor(config), config.selector];
    if multiline(expr)
    then '(\n%s\n  unless %s\n)\n' % [indented(expr), maintenance]
    else '(%s unless %s)' % [expr, maintenance],

  // The memberships of hypervisors in groups, once each (kind, group), optionally of one kind.
  memberships(config, kinds=null)::
    self.once(config, 'hypervisor_group_info{%s%s}' % [config.selector, if kinds == null then '' else ', kind="%s"' % kinds], ['kind', 'group']),

  // One series per (hypervisor, kind, group) membership, with the value of `perHypervisor`, which
  // must have at most one series per hypervisor (take it `once`): the membership series is the
  // "many" side, so a hypervisor in two aggregates is counted once in each. `keep` are the labels
  // of `perHypervisor` to carry over (resource, unit).
  perMembership(config, perHypervisor, keep=[], kinds=null)::
    '%s * %s group_left (%s) %s' % [
      self.memberships(config, kinds),
      self.onHypervisor(config),
      std.join(', ', keep),
      perHypervisor,
    ],

  // A figure each exporter computes for its whole shard (virtcap_fleet_*, virtcap_flavor_*, the
  // group figures of the packing), once per shard and then added up over the fleet's shards: the
  // replicas of an HA pair serve one shard (virtcap_shard_ordinal) and report the same figure, so
  // `aggregation` (the worse of the two: max of what is needed, min of what is left) takes one;
  // an unsharded fleet is one shard, 0. `labels` are the family's own (flavor, kind, group).
  perShard(config, series, labels=[], aggregation='max')::
    local own = std.join('', [', ' + label for label in labels]);
    'sum by (%(fleet)s%(own)s) (\n  %(aggregation)s by (%(fleet)s, shard%(own)s) (\n    %(series)s\n      * on (%(fleet)s, job, instance) group_left (shard)\n      count_values by (%(fleet)s, job, instance) ("shard", virtcap_shard_ordinal{%(selector)s})\n  )\n)\n' % {
      fleet: config.fleetLabel,
      own: own,
      aggregation: aggregation,
      series: series,
      selector: config.selector,
    },

  // `perHypervisorMany` (several series per hypervisor, once each: flavors, projects) with the kind
  // and group of its hypervisor, for one kind whose groups never overlap
  // (config.exclusiveGroupKinds): a hypervisor is in one group of it. The rules record one
  // expression per kind, so that a kind whose groups do overlap after all (a host listed in two
  // racks) fails its own rule only.
  perExclusiveGroup(config, perHypervisorMany, kind)::
    '%s * %s group_left (kind, group) %s' % [
      perHypervisorMany,
      self.onHypervisor(config),
      self.memberships(config, kind),
    ],
}
