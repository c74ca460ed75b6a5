// Domains by state, hypervisors up (in maintenance or not) and in maintenance, per fleet, each
// hypervisor once however many exporters report it (joins.once).
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-fleet.rules',
        rules: [
          {
            record: 'state:hypervisor_domains:sum',
            expr: 'sum by (%s, state) (%s)' % [$._config.fleetLabel, joins.once($._config, 'hypervisor_domains{%(selector)s}' % $._config, ['state'])],
          },
          {
            record: ':hypervisor_up:sum',
            expr: 'sum by (%s) (%s)' % [$._config.fleetLabel, joins.once($._config, 'hypervisor_up{%(selector)s}' % $._config)],
          },
          {
            record: ':hypervisor_up:count',
            expr: 'count by (%s) (%s)' % [$._config.fleetLabel, joins.once($._config, 'hypervisor_up{%(selector)s}' % $._config)],
          },
          {
            record: ':hypervisor_maintenance:sum',
            expr: 'sum by (%s) (%s)' % [$._config.fleetLabel, joins.once($._config, 'hypervisor_maintenance{%(selector)s}' % $._config)],
          },
        ],
      },
    ],
  },
}
