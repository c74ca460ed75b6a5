// The virtcap monitoring mixin: recording rules and alerts for overcommit and headroom.
// Import it and override _config to fit your fleet:
//   (import 'mixin.libsonnet') + { _config+:: { selector: 'job="libvirt-capacity"' } }
{
  _config+:: {
    // Which series are virtcap's.
    selector: 'job="virtcap"',
    // A hypervisor is nearly exhausted above this share of its limit (used / limit).
    nearlyExhaustedRatio: 0.90,
    // The host really uses this share of its memory: the danger of memory overcommit.
    memoryPressureRatio: 0.95,
    // Fewer schedulable instances of a flavor in the whole fleet than this is low headroom.
    flavorHeadroomMinimum: 5,
    // Fewer free passthrough devices of a PCI alias than this, in the whole fleet, is low headroom.
    pciDeviceHeadroomMinimum: 2,
    // Fewer free VGPUs of a mediated device type than this, in the whole fleet, is low headroom.
    vgpuHeadroomMinimum: 4,
    // Forecast: free capacity below this share of the limit and trending to 0 within the horizon.
    forecastFreeRatio: 0.20,
    forecastWindow: '6h',
    forecastHorizonSeconds: 7 * 24 * 3600,
    // An audit older than this is stale (keep it above a few audit intervals).
    auditStaleSeconds: 600,
    // How long each condition must hold before the alert fires.
    'for': {
      overcommitted: '15m',
      nearlyExhausted: '30m',
      memoryPressure: '10m',
      fleetHostFailure: '30m',
      flavorHeadroom: '30m',
      hugepagesExhausted: '30m',
      pciDeviceHeadroom: '30m',
      vgpuHeadroom: '30m',
      forecast: '1h',
      auditFailing: '10m',
      auditStale: '10m',
      inventoryRefused: '10m',
      exporterDown: '5m',
    },
    severity: {
      overcommitted: 'warning',
      nearlyExhausted: 'warning',
      memoryPressure: 'critical',
      fleetHostFailure: 'warning',
      flavorHeadroom: 'warning',
      hugepagesExhausted: 'warning',
      pciDeviceHeadroom: 'warning',
      vgpuHeadroom: 'warning',
      forecast: 'warning',
      auditFailing: 'warning',
      auditStale: 'warning',
      inventoryRefused: 'warning',
      exporterDown: 'critical',
    },
    runbookURL: 'https://github.com/virtcap/virtcap/blob/main/alerts/RUNBOOK.md',
  },

  local config = self._config,
  local runbook(alert) = '%s#%s' % [config.runbookURL, std.asciiLower(alert)],
  local alert(name, key, expr, summary, description, labels={}) = {
    alert: name,
    expr: expr,
    'for': config['for'][key],
    labels: { severity: config.severity[key] } + labels,
    annotations: {
      summary: summary,
      description: description,
      runbook_url: runbook(name),
    },
  },

  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap.rules',
        rules: [
          {
            record: 'resource:hypervisor_resource_%s:sum' % quantity,
            expr: 'sum by (resource, unit) (%s)' % (
              // Used only where there is a limit: a resource whose total is unknown (disk without
              // its storage found) still exports used, and counting it would inflate every
              // comparison with the limit and total sums (utilization, overcommit, N+1).
              if quantity == 'used'
              then 'hypervisor_resource_used{%(s)s} and hypervisor_resource_limit{%(s)s}' % { s: config.selector }
              else 'hypervisor_resource_%s{%s}' % [quantity, config.selector]
            ),
          }
          for quantity in ['total', 'reserved', 'limit', 'used', 'free', 'claimed', 'actual_usage']
        ] + [
          {
            record: 'resource:hypervisor_resource_limit:max',
            expr: 'max by (resource, unit) (hypervisor_resource_limit{%s})' % config.selector,
          },
          {
            // hypervisors that offer the resource at all: the N+1 test is meaningless below two
            record: 'resource:hypervisor_resource_offered:count',
            expr: 'count by (resource, unit) (hypervisor_resource_limit{%s} > 0)' % config.selector,
          },
          {
            // The sum-based bound of the loss of one host (kubernetes-mixin's KubeCPUOvercommit):
            // used - (limit - the largest limit), per resource, where two or more hypervisors offer
            // it. Above 0 the sums say the fleet cannot lose its largest hypervisor; below 0 it is
            // the margin. Kept to compare with the simulated evacuations, which the alert uses:
            // the sums ignore that a domain lands whole on one host (fragmentation, NUMA, devices)
            // and count an overcommitted host's negative free against the others.
            record: 'resource:hypervisor_failover_shortfall:sum',
            expr: |||
              (
                resource:hypervisor_resource_used:sum
                  - (resource:hypervisor_resource_limit:sum - resource:hypervisor_resource_limit:max)
              )
              and resource:hypervisor_resource_offered:count > 1
            |||,
          },
          {
            record: 'resource:hypervisor_resource_utilization:ratio',
            expr: 'resource:hypervisor_resource_used:sum / resource:hypervisor_resource_limit:sum',
          },
          {
            record: 'resource:hypervisor_resource_effective_overcommit:ratio',
            expr: |||
              resource:hypervisor_resource_used:sum
                / (resource:hypervisor_resource_total:sum - resource:hypervisor_resource_reserved:sum)
            |||,
          },
          {
            record: 'hypervisor_resource:hypervisor_resource_utilization:ratio',
            expr: 'hypervisor_resource_used{%(s)s} / hypervisor_resource_limit{%(s)s}' % { s: config.selector },
          },
          {
            record: 'hypervisor_resource:hypervisor_resource_effective_overcommit:ratio',
            expr: |||
              hypervisor_resource_used{%(s)s}
                / (hypervisor_resource_total{%(s)s} - hypervisor_resource_reserved{%(s)s})
            ||| % { s: config.selector },
          },
          {
            record: 'flavor:hypervisor_schedulable_instances:sum',
            expr: 'sum by (flavor) (hypervisor_schedulable_instances{%s})' % config.selector,
          },
          {
            // Nova's free hugepages (total - reserved - used) of each size, all cells of the fleet
            record: 'page_size_bytes:hypervisor_numa_cell_hugepages_free:sum',
            expr: 'sum by (page_size_bytes) (hypervisor_numa_cell_hugepages_free{%s})' % config.selector,
          },
        ] + [
          {
            record: 'alias:hypervisor_pci_alias_devices%s:sum' % quantity,
            expr: 'sum by (alias) (hypervisor_pci_alias_devices%s{%s})' % [quantity, config.selector],
          }
          for quantity in ['', '_free']
        ] + [
          {
            record: 'mdev_type:hypervisor_gpu_vgpus%s:sum' % quantity,
            expr: 'sum by (mdev_type) (hypervisor_gpu_vgpus%s{%s})' % [quantity, config.selector],
          }
          for quantity in ['', '_free']
        ] + [
          {
            record: 'state:hypervisor_domains:sum',
            expr: 'sum by (state) (hypervisor_domains{%s})' % config.selector,
          },
          {
            record: ':hypervisor_up:sum',
            expr: 'sum(hypervisor_up{%s})' % config.selector,
          },
          {
            record: ':hypervisor_up:count',
            expr: 'count(hypervisor_up{%s})' % config.selector,
          },
        ],
      },
    ],
  },

  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap.alerts',
        rules: [
          alert(
            'HypervisorResourceOvercommitted',
            'overcommitted',
            |||
              hypervisor_resource_used{%(s)s} / hypervisor_resource_limit{%(s)s} > 1
            ||| % { s: config.selector },
            'A hypervisor is allocated beyond its allocation-ratio policy.',
            '{{ $labels.hypervisor }} has allocated (with pending claims) {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit, (total - reserved) x allocation ratio.',
          ),
          alert(
            'HypervisorResourceNearlyExhausted',
            'nearlyExhausted',
            |||
              (hypervisor_resource_used{%(s)s} / hypervisor_resource_limit{%(s)s}) > %(r)g
                and hypervisor_resource_used{%(s)s} <= hypervisor_resource_limit{%(s)s}
            ||| % { s: config.selector, r: config.nearlyExhaustedRatio },
            'A hypervisor has almost none of a resource left to allocate.',
            '{{ $labels.hypervisor }} has allocated {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit.',
          ),
          alert(
            'HypervisorMemoryPressure',
            'memoryPressure',
            |||
              hypervisor_resource_actual_usage{%(s)s, resource="memory"}
                / hypervisor_resource_total{%(s)s, resource="memory"} > %(r)g
            ||| % { s: config.selector, r: config.memoryPressureRatio },
            'A hypervisor is running out of physical memory.',
            '{{ $labels.hypervisor }} really uses {{ $value | humanizePercentage }} of its physical memory: its guests may be swapped or killed.',
          ),
          alert(
            'HypervisorFleetCannotTolerateHostFailure',
            'fleetHostFailure',
            // The exporter's simulation: the hypervisor's domains, largest first, through the
            // simulated Nova scheduler onto the other hypervisors that are up. The value is how
            // many found no host. A fleet of one hypervisor is never told it cannot lose it.
            |||
              hypervisor_evacuation_unplaced_domains{%(s)s}
                and hypervisor_evacuation_feasible{%(s)s} == 0
                and on (job, instance) (count by (job, instance) (hypervisor_up{%(s)s}) > 1)
            ||| % { s: config.selector },
            'The fleet could not re-home the domains of a hypervisor if it failed.',
            'If {{ $labels.hypervisor }} failed, {{ $value | humanize }} of its domains would find no host on the other hypervisors that are up (each scheduled in turn, largest first, through the simulated Nova scheduler).',
          ),
          alert(
            'HypervisorFlavorHeadroomLow',
            'flavorHeadroom',
            |||
              flavor:hypervisor_schedulable_instances:sum < %(n)s
            ||| % { n: config.flavorHeadroomMinimum },
            'Few more instances of a flavor fit in the fleet.',
            'Only {{ $value }} more instances of flavor {{ $labels.flavor }} fit in the whole fleet.',
          ),
          alert(
            'HypervisorHugepagesExhausted',
            'hugepagesExhausted',
            // the value: the pages of the size the cell offers guests (beyond the reserved ones)
            |||
              (hypervisor_numa_cell_hugepages{%(s)s} - hypervisor_numa_cell_hugepages_reserved{%(s)s}) > 0
                and hypervisor_numa_cell_hugepages_free{%(s)s} <= 0
            ||| % { s: config.selector },
            'A NUMA cell has no hugepages of a size left for guests.',
            'Cell {{ $labels.cell }} of {{ $labels.hypervisor }} has no {{ $labels.page_size_bytes | humanize1024 }}B hugepage free of the {{ $value | humanize }} it offers guests beyond the reserved ones, as Nova counts them: no guest backed by pages of that size fits in the cell.',
          ),
          alert(
            'HypervisorPciDeviceHeadroomLow',
            'pciDeviceHeadroom',
            |||
              alias:hypervisor_pci_alias_devices_free:sum < %(n)s
                and alias:hypervisor_pci_alias_devices:sum > 0
            ||| % { n: config.pciDeviceHeadroomMinimum },
            'Few passthrough devices of a PCI alias are free in the fleet.',
            'Free devices of PCI alias {{ $labels.alias }} left in the whole fleet: {{ $value | humanize }}, fewer than %d. Instances of flavors asking for the alias will soon fail to schedule.' % config.pciDeviceHeadroomMinimum,
          ),
          alert(
            'HypervisorVgpuHeadroomLow',
            'vgpuHeadroom',
            |||
              mdev_type:hypervisor_gpu_vgpus_free:sum < %(n)s
                and mdev_type:hypervisor_gpu_vgpus:sum > 0
            ||| % { n: config.vgpuHeadroomMinimum },
            'Few VGPUs of a mediated device type are free in the fleet.',
            'Free VGPUs of mediated device type {{ $labels.mdev_type }} left in the whole fleet: {{ $value | humanize }}, fewer than %d. Instances of flavors asking for VGPUs of that type will soon fail to schedule.' % config.vgpuHeadroomMinimum,
          ),
          alert(
            'HypervisorCapacityExhaustionForecast',
            'forecast',
            |||
              (hypervisor_resource_free{%(s)s} / hypervisor_resource_limit{%(s)s}) < %(r)g
                and hypervisor_resource_free{%(s)s} > 0
                and predict_linear(hypervisor_resource_free{%(s)s}[%(w)s], %(h)s) < 0
            ||| % {
              s: config.selector,
              r: config.forecastFreeRatio,
              w: config.forecastWindow,
              h: config.forecastHorizonSeconds,
            },
            'A hypervisor is forecast to run out of a resource.',
            '{{ $labels.hypervisor }} has {{ $value | humanizePercentage }} of its {{ $labels.resource }} limit free and, at the rate of the last %s, will have none left within %s.' % [config.forecastWindow, '%dd' % (config.forecastHorizonSeconds / 86400)],
          ),
          alert(
            'HypervisorAuditFailing',
            'auditFailing',
            |||
              hypervisor_up{%(s)s} == 0
            ||| % { s: config.selector },
            'virtcap cannot audit a hypervisor.',
            'virtcap has not been able to audit {{ $labels.hypervisor }} (instance {{ $labels.instance }}): its capacity is unknown.',
          ),
          alert(
            'HypervisorAuditStale',
            'auditStale',
            |||
              time() - hypervisor_audit_timestamp_seconds{%(s)s} > %(t)s
            ||| % { s: config.selector, t: config.auditStaleSeconds },
            'The capacity data of a hypervisor is old.',
            'The last successful audit of {{ $labels.hypervisor }} was {{ $value | humanizeDuration }} ago.',
          ),
          alert(
            'HypervisorInventoryRefused',
            'inventoryRefused',
            |||
              hypervisor_resource_inventory_refused{%(s)s} == 1
            ||| % { s: config.selector },
            'A hypervisor offers none of a resource: Placement would refuse its inventory.',
            '{{ $labels.hypervisor }} offers no {{ $labels.resource }}: its configuration names CPUs that are not online, or reserves more than it has. virtcap reports the reason among its problems.',
          ),
          alert(
            'VirtcapExporterDown',
            'exporterDown',
            |||
              up{%(s)s} == 0
            ||| % { s: config.selector },
            'Prometheus cannot scrape virtcap.',
            'Prometheus has failed to scrape virtcap at {{ $labels.instance }}: the capacity of its hypervisors is not monitored.',
          ),
        ],
      },
    ],
  },
}
