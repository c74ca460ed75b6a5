local joins = import '../../mixin/lib/joins.libsonnet';
local runway = import '../../mixin/lib/runway.libsonnet';

// What the next instance can still get, per fleet: instances of each flavor, hugepages of each
// size, passthrough devices of each PCI alias, VGPUs of each mediated device type; on the
// hypervisors in service (the exporter already reports no instance fitting on one in maintenance:
// leaving it out keeps the sums right with an older exporter too); each hypervisor once, however
// many exporters report it (joins.once).
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'virtcap-headroom.rules',
        rules: [
          {
            record: 'flavor:hypervisor_schedulable_instances:sum',
            expr: 'sum by (%s, flavor) %s' % [$._config.fleetLabel, joins.inService($._config, joins.onceFree($._config, 'hypervisor_schedulable_instances{%(selector)s}' % $._config, ['flavor']))],
          },
          {
            // seconds until none fits, fleet-wide, at the trend of _config.runwayWindow
            record: 'fleet_flavor:hypervisor_schedulable_instances:runway_seconds',
            expr: runway.seconds($._config, 'flavor:hypervisor_schedulable_instances:sum'),
          },
          {
            // Nova's free hugepages (total - reserved - used) of each size, all cells of the fleet
            record: 'page_size_bytes:hypervisor_numa_cell_hugepages_free:sum',
            expr: 'sum by (%s, page_size_bytes) %s' % [$._config.fleetLabel, joins.inService($._config, joins.onceFree($._config, 'hypervisor_numa_cell_hugepages_free{%(selector)s}' % $._config, ['cell', 'page_size_bytes']))],
          },
        ] + [
          {
            record: 'alias:hypervisor_pci_alias_devices%s:sum' % quantity,
            expr: 'sum by (%s, alias) %s' % [$._config.fleetLabel, joins.inService($._config, joins.once($._config, 'hypervisor_pci_alias_devices%s{%s}' % [quantity, $._config.selector], ['alias'], if quantity == '_free' then 'min' else 'max'))],
          }
          for quantity in ['', '_free']
        ] + [
          {
            record: 'mdev_type:hypervisor_gpu_vgpus%s:sum' % quantity,
            expr: 'sum by (%s, mdev_type) %s' % [$._config.fleetLabel, joins.inService($._config, joins.once($._config, 'hypervisor_gpu_vgpus%s{%s}' % [quantity, $._config.selector], ['gpu', 'mdev_type'], if quantity == '_free' then 'min' else 'max'))],
          }
          for quantity in ['', '_free']
        ],
      },
    ],
  },
}
