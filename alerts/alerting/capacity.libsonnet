// Each hypervisor against its allocation-ratio policy and its physical memory, and its forecast.
// Each alert is one per hypervisor (and resource), whatever the number of exporters reporting it
// (the replicas of an HA pair): the condition is tested on each exporter's series and fires if any
// of them meets it, with the largest value (joins.once); its labels are the fleet, the hypervisor
// and the family's own, never a target's job or instance. What a host holds
// (overcommit, memory pressure) still matters in maintenance, its guests still run there; a host in
// maintenance takes nothing new, so its being nearly exhausted does not.
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-capacity',
        rules: [
          alert(
            $._config,
            'HypervisorResourceOvercommitted',
            'overcommitted',
            joins.once($._config, 'hypervisor_resource_used{%(selector)s} / hypervisor_resource_limit{%(selector)s} > 1' % $._config, ['resource', 'unit']),
            'A hypervisor is allocated beyond its allocation-ratio policy.',
            '{{ $labels.hypervisor }} has allocated (with pending claims) {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit, (total - reserved) x allocation ratio.',
          ),
          alert(
            $._config,
            'HypervisorResourceNearlyExhausted',
            'nearlyExhausted',
            joins.inService($._config, joins.once($._config, |||
              (hypervisor_resource_used{%(selector)s} / hypervisor_resource_limit{%(selector)s}) > %(nearlyExhaustedRatio)g
                and hypervisor_resource_used{%(selector)s} <= hypervisor_resource_limit{%(selector)s}
            ||| % $._config, ['resource', 'unit'])),
            'A hypervisor has almost none of a resource left to allocate.',
            '{{ $labels.hypervisor }} has allocated {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit.',
          ),
          alert(
            $._config,
            'HypervisorMemoryPressure',
            'memoryPressure',
            joins.once($._config, |||
              hypervisor_resource_actual_usage{%(selector)s, resource="memory"}
                / hypervisor_resource_size{%(selector)s, resource="memory"} > %(memoryPressureRatio)g
            ||| % $._config, ['resource', 'unit']),
            'A hypervisor is running out of physical memory.',
            '{{ $labels.hypervisor }} really uses {{ $value | humanizePercentage }} of its physical memory: its guests may be swapped or killed.',
          ),
          alert(
            $._config,
            'HypervisorCapacityExhaustionForecast',
            'forecast',
            joins.once($._config, |||
              (hypervisor_resource_free{%(selector)s} / hypervisor_resource_limit{%(selector)s}) < %(forecastFreeRatio)g
                and hypervisor_resource_free{%(selector)s} > 0
                and predict_linear(hypervisor_resource_free{%(selector)s}[%(forecastWindow)s], %(forecastHorizonSeconds)s) < 0
            ||| % $._config, ['resource', 'unit']),
            'A hypervisor is forecast to run out of a resource.',
            '{{ $labels.hypervisor }} has {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit free and, at the rate of the last %s, will have none left within %dd.' % [$._config.forecastWindow, $._config.forecastHorizonSeconds / 86400],
          ),
          alert(
            $._config,
            'HypervisorInventoryRefused',
            'inventoryRefused',
            joins.once($._config, 'hypervisor_resource_inventory_refused{%(selector)s} == 1' % $._config, ['resource']),
            'A hypervisor offers none of a resource: Placement would refuse its inventory.',
            '{{ $labels.hypervisor }} offers no {{ $labels.resource }}: its configuration names CPUs that are not online, or reserves more than it has. virtcap reports the reason among its problems.',
          ),
        ],
      },
    ],
  },
}
