// Allocations and domains per project (hypervisor_project_allocated, hypervisor_project_domains:
// the exporter's largest projects, the rest as project_id="other", the unowned as "unknown"), per
// fleet, and per group of the kinds whose groups never overlap (a project's allocations on several
// hypervisors per hypervisor: a many-to-many join for overlapping aggregates; the dashboard shows
// one group at a time instead). Hypervisors in maintenance are in: their domains still hold what
// they hold.
local joins = import '../lib/joins.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-projects.rules',
        local c = $._config,
        rules: [
          {
            record: 'project:hypervisor_project_allocated:sum',
            expr: 'sum by (%(fleetLabel)s, project_id, project_name, resource, unit) (hypervisor_project_allocated{%(selector)s})' % c,
          },
          {
            record: 'project:hypervisor_project_domains:sum',
            expr: 'sum by (%(fleetLabel)s, project_id, project_name) (hypervisor_project_domains{%(selector)s})' % c,
          },
        ] + [
          {
            record: 'group_project:hypervisor_project_allocated:sum',
            expr: 'sum by (%s, kind, group, project_id, project_name, resource, unit) (\n  %s\n)\n' % [
              c.fleetLabel,
              joins.perExclusiveGroup(c, 'hypervisor_project_allocated{%(selector)s}' % c, kind),
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
