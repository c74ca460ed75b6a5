// Each hypervisor against its allocation-ratio policy and its physical memory, and its forecast.
// No aggregation: every series keeps its labels, the fleet label among them. What a host holds
// (overcommit, memory pressure) still matters in maintenance, its guests still run there; a host in
// maintenance takes nothing new, so its being nearly exhausted does not.
local alert = (import '../lib/alerts.libsonnet').alert;

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
            |||
              hypervisor_resource_used{%(selector)s} / hypervisor_resource_limit{%(selector)s} > 1
            ||| % $._config,
            'A hypervisor is allocated beyond its allocation-ratio policy.',
            '{{ $labels.hypervisor }} has allocated (with pending claims) {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit, (total - reserved) x allocation ratio.',
          ),
          alert(
            $._config,
            'HypervisorResourceNearlyExhausted',
            'nearlyExhausted',
            |||
              (hypervisor_resource_used{%(selector)s} / hypervisor_resource_limit{%(selector)s}) > %(nearlyExhaustedRatio)g
                and hypervisor_resource_used{%(selector)s} <= hypervisor_resource_limit{%(selector)s}
                unless on (%(fleetLabel)s, job, instance, hypervisor) hypervisor_maintenance{%(selector)s} == 1
            ||| % $._config,
            'A hypervisor has almost none of a resource left to allocate.',
            '{{ $labels.hypervisor }} has allocated {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit.',
          ),
          alert(
            $._config,
            'HypervisorMemoryPressure',
            'memoryPressure',
            |||
              hypervisor_resource_actual_usage{%(selector)s, resource="memory"}
                / hypervisor_resource_size{%(selector)s, resource="memory"} > %(memoryPressureRatio)g
            ||| % $._config,
            'A hypervisor is running out of physical memory.',
            '{{ $labels.hypervisor }} really uses {{ $value | humanizePercentage }} of its physical memory: its guests may be swapped or killed.',
          ),
          alert(
            $._config,
            'HypervisorCapacityExhaustionForecast',
            'forecast',
            |||
              (hypervisor_resource_free{%(selector)s} / hypervisor_resource_limit{%(selector)s}) < %(forecastFreeRatio)g
                and hypervisor_resource_free{%(selector)s} > 0
                and predict_linear(hypervisor_resource_free{%(selector)s}[%(forecastWindow)s], %(forecastHorizonSeconds)s) < 0
            ||| % $._config,
            'A hypervisor is forecast to run out of a resource.',
            '{{ $labels.hypervisor }} has {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit free and, at the rate of the last %s, will have none left within %dd.' % [$._config.forecastWindow, $._config.forecastHorizonSeconds / 86400],
          ),
          alert(
            $._config,
            'HypervisorInventoryRefused',
            'inventoryRefused',
            |||
              hypervisor_resource_inventory_refused{%(selector)s} == 1
            ||| % $._config,
            'A hypervisor offers none of a resource: Placement would refuse its inventory.',
            '{{ $labels.hypervisor }} offers no {{ $labels.resource }}: its configuration names CPUs that are not online, or reserves more than it has. virtcap reports the reason among its problems.',
          ),
        ],
      },
    ],
  },
}
