"""NUMA placement as Nova accounts for it, one module per part. Pure: no libvirt, no
configuration file. The semantics are Nova 34's (nova.virt.hardware numa_get_constraints,
numa_fit_instance_to_host, numa_usage_from_instance_numa; nova.objects.numa; the libvirt driver's
_get_host_numa_topology), restated here and compared with upstream by
tests/conformance/test_numa.py.

- `request`: the NUMA topology a flavor (and image) asks for, or why Nova refuses it;
- `cells`: the host's cells as Nova's resource tracker holds them, with the usage of the domains
  already there;
- `fitting`: whether and where a guest's cells fit the host's (page sizes, CPU pinning, PCI
  affinity), and the topology a fit leaves for the request's next instance;
- `usage`: what a fitted instance adds to the cells, and how many instances fit one after another.
"""
