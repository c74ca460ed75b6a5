// Allocations and domains per project (hypervisor_project_allocated, hypervisor_project_domains:
// the exporter's largest projects, the rest as project_id="other", the unowned as "unknown"), per
// fleet, and per group of the kinds whose groups never overlap (a project's allocations on several
// hypervisors per hypervisor: a many-to-many join for overlapping aggregates; the dashboard shows
// one group at a time instead). Hypervisors in maintenance are in: their domains still hold what
// they hold. Each hypervisor once, however many exporters report it (joins.once).
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-projects.rules',
        local c = $._config,
        local allocated = joins.once(c, 'hypervisor_project_allocated{%(selector)s}' % c, ['project_id', 'project_name', 'resource', 'unit']),
        rules: [
          {
            record: 'project:hypervisor_project_allocated:sum',
            expr: 'sum by (%s, project_id, project_name, resource, unit) (%s)' % [c.fleetLabel, allocated],
          },
          {
            record: 'project:hypervisor_project_domains:sum',
            expr: 'sum by (%s, project_id, project_name) (%s)' % [
              c.fleetLabel,
              joins.once(c, 'hypervisor_project_domains{%(selector)s}' % c, ['project_id', 'project_name']),
            ],
          },
        ] + [
          {
            record: 'group_project:hypervisor_project_allocated:sum',
            expr: 'sum by (%s, kind, group, project_id, project_name, resource, unit) (\n  %s\n)\n' % [
              c.fleetLabel,
              joins.perExclusiveGroup(c, allocated, kind),
            ],
            // the kind's own rule (promtool wants rules of one name told apart by their labels)
            labels: { kind: kind },
          }
          for kind in c.exclusiveGroupKinds
        ],
      },
    ],
  },
}
