// Domains by state, hypervisors up (in maintenance or not) and in maintenance, per fleet.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-fleet.rules',
        rules: [
          {
            record: 'state:hypervisor_domains:sum',
            expr: 'sum by (%(fleetLabel)s, state) (hypervisor_domains{%(selector)s})' % $._config,
          },
          {
            record: ':hypervisor_up:sum',
            expr: 'sum by (%(fleetLabel)s) (hypervisor_up{%(selector)s})' % $._config,
          },
          {
            record: ':hypervisor_up:count',
            expr: 'count by (%(fleetLabel)s) (hypervisor_up{%(selector)s})' % $._config,
          },
          {
            record: ':hypervisor_maintenance:sum',
            expr: 'sum by (%(fleetLabel)s) (hypervisor_maintenance{%(selector)s})' % $._config,
          },
        ],
      },
    ],
  },
}
