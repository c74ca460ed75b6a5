// What the next instance can still get, per fleet: instances of each flavor, hugepages of each
// size, passthrough devices of each PCI alias, VGPUs of each mediated device type.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-headroom.rules',
        rules: [
          {
            record: 'flavor:hypervisor_schedulable_instances:sum',
            expr: 'sum by (%(fleetLabel)s, flavor) (hypervisor_schedulable_instances{%(selector)s})' % $._config,
          },
          {
            // Nova's free hugepages (total - reserved - used) of each size, all cells of the fleet
            record: 'page_size_bytes:hypervisor_numa_cell_hugepages_free:sum',
            expr: 'sum by (%(fleetLabel)s, page_size_bytes) (hypervisor_numa_cell_hugepages_free{%(selector)s})' % $._config,
          },
        ] + [
          {
            record: 'alias:hypervisor_pci_alias_devices%s:sum' % quantity,
            expr: 'sum by (%(fleetLabel)s, alias) (hypervisor_pci_alias_devices%(quantity)s{%(selector)s})' % $._config { quantity: quantity },
          }
          for quantity in ['', '_free']
        ] + [
          {
            record: 'mdev_type:hypervisor_gpu_vgpus%s:sum' % quantity,
            expr: 'sum by (%(fleetLabel)s, mdev_type) (hypervisor_gpu_vgpus%(quantity)s{%(selector)s})' % $._config { quantity: quantity },
          }
          for quantity in ['', '_free']
        ],
      },
    ],
  },
}
