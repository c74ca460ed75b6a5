// What is left for the next instance, fleet-wide (per fleet, from the recording rules of
// rules/headroom.libsonnet, which leave the hypervisors in maintenance out) or per NUMA cell (of
// the hypervisors in service: nothing new is placed on one in maintenance).
local alert = (import '../../mixin/lib/alerts.libsonnet').alert;
local joins = import '../../mixin/lib/joins.libsonnet';

{
  prometheusAlerts+:: {
    groups+: [
      {
        name: 'virtcap-headroom',
        rules: [
          alert(
            $._config,
            'HypervisorFlavorHeadroomLow',
            'flavorHeadroom',
            // The flavors of the configuration, by default: those virtcap discovered in the Nova
            // metadata of existing domains (virtcap_flavor_info{source="discovered"}, which no
            // exporter of the fleet configures) are left out unless flavorHeadroomDiscovered. Left
            // out, not selected: an exporter too old to export virtcap_flavor_info has every
            // flavor alerted on, as before.
            (
              if $._config.flavorHeadroomDiscovered then |||
                flavor:hypervisor_schedulable_instances:sum < %(flavorHeadroomMinimum)s
              ||| else |||
                flavor:hypervisor_schedulable_instances:sum < %(flavorHeadroomMinimum)s
                  unless on (%(fleetLabel)s, flavor) (
                    virtcap_flavor_info{%(selector)s, source="discovered"}
                      unless on (%(fleetLabel)s, flavor) virtcap_flavor_info{%(selector)s, source="configured"}
                  )
              |||
            ) % $._config,
            'Few more instances of a flavor fit in the fleet.',
            'Only {{ $value }} more instances of flavor {{ $labels.flavor }} fit in the whole fleet.',
          ),
          alert(
            $._config,
            'HypervisorHugepagesExhausted',
            'hugepagesExhausted',
            // the value: the pages of the size the cell offers guests (beyond the reserved ones);
            // one alert per cell however many exporters report its hypervisor
            joins.inService($._config, joins.once($._config, |||
              (hypervisor_numa_cell_hugepages{%(selector)s} - hypervisor_numa_cell_hugepages_reserved{%(selector)s}) > 0
                and hypervisor_numa_cell_hugepages_free{%(selector)s} <= 0
            ||| % $._config, ['cell', 'page_size_bytes'])),
            'A NUMA cell has no hugepages of a size left for guests.',
            'Cell {{ $labels.cell }} of {{ $labels.hypervisor }} has no {{ $labels.page_size_bytes | humanize1024 }}B hugepage free of the {{ $value | humanize }} it offers guests beyond the reserved ones, as Nova counts them: no guest backed by pages of that size fits in the cell.',
          ),
          alert(
            $._config,
            'HypervisorPciDeviceHeadroomLow',
            'pciDeviceHeadroom',
            |||
              alias:hypervisor_pci_alias_devices_free:sum < %(pciDeviceHeadroomMinimum)s
                and alias:hypervisor_pci_alias_devices:sum > 0
            ||| % $._config,
            'Few passthrough devices of a PCI alias are free in the fleet.',
            'Free devices of PCI alias {{ $labels.alias }} left in the whole fleet: {{ $value | humanize }}, fewer than %d. Instances of flavors asking for the alias will soon fail to schedule.' % $._config.pciDeviceHeadroomMinimum,
          ),
          alert(
            $._config,
            'HypervisorVgpuHeadroomLow',
            'vgpuHeadroom',
            |||
              mdev_type:hypervisor_gpu_vgpus_free:sum < %(vgpuHeadroomMinimum)s
                and mdev_type:hypervisor_gpu_vgpus:sum > 0
            ||| % $._config,
            'Few VGPUs of a mediated device type are free in the fleet.',
            'Free VGPUs of mediated device type {{ $labels.mdev_type }} left in the whole fleet: {{ $value | humanize }}, fewer than %d. Instances of flavors asking for VGPUs of that type will soon fail to schedule.' % $._config.vgpuHeadroomMinimum,
          ),
        ],
      },
    ],
  },
}
