"""The oracle's `numa_guests` op, kept in its own module: oracle.py's dispatcher imports it by name
when asked (it runs as a script from this directory, in the upstream virtualenv) and passes
itself, whose `_numa_host`, `_numa_driver`, `_numa_flavor` and `nova_domain` build the host, the
driver's view of it, the flavors' answers and a guest's metadata as the other ops do.

- `numa_guests` {cells, online, cpu_shared_set, cpu_dedicated_set, reserved_huge_pages, ratios,
  guests, flavors, limit}: the host as the `numa` op builds it (without usage), then each guest
  {vcpus, memory_mb, extra_specs, image_properties} in turn as nova-compute places it: its
  topology (`numa_get_constraints`), fitted (`numa_fit_instance_to_host` under the ratios' limits)
  and added to the host (`numa_usage_from_instance_numa`). For each placed guest the parts of the
  definition the libvirt driver writes for the fitted topology: `<cputune>`, `<numatune>` and the
  guest cells `<numa>` (`_get_guest_numa_config`), `<memoryBacking>`
  (`_get_guest_memory_backing_config`, or none), and the `<nova:instance>` metadata; a guest that
  does not fit is null. Then `host`, the cells with every guest's usage, and per flavor what the
  `numa` op answers on them. Nothing of upstream is copied: every answer comes from calling it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def numa_guests(request: dict[str, Any], oracle: ModuleType) -> dict[str, Any]:
    from nova import objects  # noqa: PLC0415
    from nova.conf import CONF  # noqa: PLC0415
    from nova.virt import hardware  # noqa: PLC0415

    overrides = [
        ("cpu_shared_set", request.get("cpu_shared_set"), "compute"),
        ("cpu_dedicated_set", request.get("cpu_dedicated_set"), "compute"),
        ("reserved_huge_pages", request.get("reserved_huge_pages") or None, None),
    ]
    for name, value, group in overrides:
        CONF.set_override(name, value, group=group)
    try:
        host = oracle._numa_host(request)
        driver = _driver(request, oracle)
        limits = objects.NUMATopologyLimits(
            cpu_allocation_ratio=request["ratios"]["cpu"], ram_allocation_ratio=request["ratios"]["ram"]
        )
        guests: list[dict[str, Any] | None] = []
        for asked in request["guests"]:
            flavor = objects.Flavor(
                name="conformance",
                vcpus=asked["vcpus"],
                memory_mb=asked["memory_mb"],
                extra_specs=asked.get("extra_specs", {}),
            )
            image = objects.ImageMeta.from_dict(
                {"name": "image", "properties": asked.get("image_properties", {})}
            )
            wanted = hardware.numa_get_constraints(flavor, image)
            fitted = hardware.numa_fit_instance_to_host(host, wanted, None, limits)
            if fitted is None:
                guests.append(None)
                continue
            host = hardware.numa_usage_from_instance_numa(host, fitted)
            guests.append(_definition(driver, fitted, flavor, image, asked, oracle))
        return {
            "host": [
                {
                    "id": cell.id,
                    "cpuset": sorted(cell.cpuset),
                    "pcpuset": sorted(cell.pcpuset),
                    "siblings": [sorted(core) for core in cell.siblings],
                    "memory": cell.memory,
                    "mempages": [[p.size_kb, p.total, p.reserved, p.used] for p in cell.mempages],
                    "cpu_usage": cell.cpu_usage,
                    "memory_usage": cell.memory_usage,
                    "pinned_cpus": sorted(cell.pinned_cpus),
                }
                for cell in host.cells
            ],
            "guests": guests,
            "flavors": [
                oracle._numa_flavor(question, host, limits, None, request["limit"])
                for question in request["flavors"]
            ],
        }
    finally:
        for name, _value, group in overrides:
            CONF.clear_override(name, group=group)


def _driver(request: dict[str, Any], oracle: ModuleType) -> Any:
    """A LibvirtDriver without its connection: its methods read the host the question describes
    (`_numa_driver`'s capabilities, online CPUs and reserved hugepages)."""
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    described = oracle._numa_driver(request)
    driver = libvirt_driver.LibvirtDriver.__new__(libvirt_driver.LibvirtDriver)
    driver._host = described._host
    driver._reserved_hugepages = described._reserved_hugepages
    driver._has_numa_support = lambda: True
    return driver


def _definition(
    driver: Any, fitted: Any, flavor: Any, image: Any, asked: dict[str, Any], oracle: ModuleType
) -> dict[str, Any]:
    numa = driver._get_guest_numa_config(fitted, flavor, image)
    backing = driver._get_guest_memory_backing_config(fitted, numa.numatune, flavor, image)
    return {
        "cells": [cell.id for cell in fitted.cells],
        "pagesizes": [cell.pagesize for cell in fitted.cells],
        "cputune": numa.cputune.to_xml() if numa.cputune is not None else None,
        "numatune": numa.numatune.to_xml() if numa.numatune is not None else None,
        "numa": numa.numaconfig.to_xml() if numa.numaconfig is not None else None,
        "memory_backing": backing.to_xml() if backing is not None else None,
        "metadata": oracle.nova_domain(
            {"root_gb": 1, "ephemeral_gb": 0, "swap": 0, **asked, "name": "guest"}
        )["metadata"],
    }
