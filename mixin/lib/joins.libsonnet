// The joins the rules and alerts share. Every `on (...)` names the fleet label, and the target's
// job and instance: the membership and maintenance series come from the target that exports the
// hypervisor's other series, so two virtcap replicas of one fleet never meet in a join (which would
// make it many-to-many) and two fleets with a `compute-01` each never do either.
{
  // The labels that identify one hypervisor's series of one target.
  onHypervisor(config):: 'on (%(fleetLabel)s, job, instance, hypervisor)' % config,

  // `expr` without the hypervisors in maintenance (hypervisor_maintenance 1). An exporter without
  // maintenance (no such series) leaves everything in.
  inService(config, expr)::
    '(%s unless %s hypervisor_maintenance{%s} == 1)' % [expr, self.onHypervisor(config), config.selector],

  // One series per (hypervisor, kind, group) membership, with the value of `perHypervisor`, which
  // must have at most one series per hypervisor: the membership series is the "many" side, so a
  // hypervisor in two aggregates is counted once in each. `keep` are the labels of `perHypervisor`
  // to carry over (resource, unit).
  perMembership(config, perHypervisor, keep=[], kinds=null)::
    'hypervisor_group_info{%s%s} * %s group_left (%s) %s' % [
      config.selector,
      if kinds == null then '' else ', kind="%s"' % kinds,
      self.onHypervisor(config),
      std.join(', ', keep),
      perHypervisor,
    ],

  // `perHypervisorMany` (several series per hypervisor: flavors, projects) with the kind and group
  // of its hypervisor, for one kind whose groups never overlap (config.exclusiveGroupKinds): a
  // hypervisor is in one group of it. The rules record one expression per kind, so that a kind
  // whose groups do overlap after all (a host listed in two racks) fails its own rule only.
  perExclusiveGroup(config, perHypervisorMany, kind)::
    '%s * %s group_left (kind, group) hypervisor_group_info{%s, kind="%s"}' % [
      perHypervisorMany,
      self.onHypervisor(config),
      config.selector,
      kind,
    ],
}
