// A flavor whose runway (rules/runway.libsonnet) is shorter than _config.runwayWarning: at the trend
// of the last _config.runwayWindow, no more instance of it will fit in the fleet within that time.
// For the configured flavors by default, as HypervisorFlavorHeadroomLow.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local durations = import '../../mixin/lib/durations.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-runway',
        local c = $._config { runwayWarningSeconds: durations.seconds($._config.runwayWarning) },
        rules: [
          alert(
            c,
            'HypervisorFlavorRunwayShort',
            'runway',
            (
              if c.flavorHeadroomDiscovered then |||
                fleet_flavor:hypervisor_schedulable_instances:runway_seconds < %(runwayWarningSeconds)d
              ||| else |||
                fleet_flavor:hypervisor_schedulable_instances:runway_seconds < %(runwayWarningSeconds)d
                  unless on (%(fleetLabel)s, flavor) (
                    virtcap_flavor_info{%(selector)s, source="discovered"}
                      unless on (%(fleetLabel)s, flavor) virtcap_flavor_info{%(selector)s, source="configured"}
                  )
              |||
            ) % c,
            'A flavor is trending to no more instances fitting in the fleet soon.',
            'At the trend of the last %s, no more instance of flavor {{ $labels.flavor }} will fit in the whole fleet in {{ $value | humanizeDuration }}.' % c.runwayWindow,
          ),
        ],
      },
    ],
  },
}
