"""The oracle's `filters` op, kept in its own module: oracle.py's dispatcher imports it by name when
asked (it runs as a script from this directory, in the upstream virtualenv) and passes itself, whose
`_numa_host` and `_numa_pci_stats` build the host as the `numa` op builds it.

- `filters` {cells, online, cpu_shared_set, cpu_dedicated_set, reserved_huge_pages, usage, ratios,
  pci {devices, specs, held, aliases}, requests}: one host and, per request {vcpus, memory_mb,
  extra_specs, count, anti_affinity, heartbeat_age}, what Nova's own filter classes answer as the
  request's instances are scheduled on it one after another. Each request starts from the host as
  given: a scheduler HostState with the libvirt driver's NUMA topology (with the usage), the
  PciDeviceStats of its free allowed devices, the ratios, one allocation candidate, and as its
  service a dict whose last heartbeat is `heartbeat_age` seconds old. The request spec carries
  the flavor, the instance topology of `numa_get_constraints`, the PCI requests of
  `get_pci_requests_from_flavor` (under `get_pci_numa_policy_constraint`), and with
  `anti_affinity` an anti-affinity server group whose members are the request's instances. Per
  instance, in turn, every filter's `host_passes` (ComputeFilter, NUMATopologyFilter,
  PciPassthroughFilter, ServerGroupAntiAffinityFilter, in that order); when all pass, the
  scheduler's `_consume_selected_host` consumes the instance. That consumption leaves in the
  request spec the topology fitted for the instance (its page size chosen, its CPUs pinned), which
  the next instances of the request are then filtered with, as in Nova's scheduler; `fresh` is the
  same with each instance's own topology from `numa_get_constraints` (as nova-compute fits each
  instance). The answer per request, under `scheduler` and `fresh`: `placed`, how many passed in
  a row, and `refused`, the filters that refused the next one (none when all `count` passed); or
  the class and text of Nova's refusal of the flavor. Nothing of upstream is copied: every answer
  comes from calling it.
"""

from __future__ import annotations

import copy
import datetime
import json
import uuid
from types import ModuleType
from typing import Any


def filters(request: dict[str, Any], oracle: ModuleType) -> dict[str, Any]:
    from nova.conf import CONF  # noqa: PLC0415
    from nova.pci import request as pci_request  # noqa: PLC0415

    overrides = [
        ("cpu_shared_set", request.get("cpu_shared_set"), "compute"),
        ("cpu_dedicated_set", request.get("cpu_dedicated_set"), "compute"),
        ("reserved_huge_pages", request.get("reserved_huge_pages") or None, None),
        ("alias", [json.dumps(alias) for alias in request["pci"]["aliases"]], "pci"),
    ]
    for name, value, group in overrides:
        CONF.set_override(name, value, group=group)
    pci_request.get_alias_from_config.cache_clear()
    try:
        return {"requests": [_request(request, asked, oracle) for asked in request["requests"]]}
    finally:
        for name, _value, group in overrides:
            CONF.clear_override(name, group=group)
        pci_request.get_alias_from_config.cache_clear()


def _host_state(request: dict[str, Any], heartbeat_age: float, oracle: ModuleType) -> Any:
    from nova.scheduler import host_manager  # noqa: PLC0415

    state = host_manager.HostState("h", "h", None)
    state.numa_topology = oracle._numa_host(request)
    state.pci_stats = oracle._numa_pci_stats(request["pci"])
    state.cpu_allocation_ratio = request["ratios"]["cpu"]
    state.ram_allocation_ratio = request["ratios"]["ram"]
    state.free_ram_mb = state.free_disk_mb = 10**9
    state.vcpus_total = 10**6
    state.allocation_candidates = [{"mappings": {}}]
    seen = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=heartbeat_age)
    state.service = {"disabled": False, "created_at": seen, "last_seen_up": seen}
    return state


def _request(request: dict[str, Any], asked: dict[str, Any], oracle: ModuleType) -> dict[str, Any]:
    from nova import exception as nova_exception  # noqa: PLC0415
    from nova import objects  # noqa: PLC0415
    from nova.pci import request as pci_request  # noqa: PLC0415
    from nova.virt import hardware  # noqa: PLC0415

    flavor = objects.Flavor(
        name="conformance",
        vcpus=asked["vcpus"],
        memory_mb=asked["memory_mb"],
        root_gb=0,
        ephemeral_gb=0,
        swap=0,
        extra_specs=asked["extra_specs"],
    )
    image = objects.ImageMeta.from_dict({"name": "image", "properties": {}})
    try:
        hardware.numa_get_constraints(flavor, image)  # refuses the flavor, if so
        pci_requests = pci_request.get_pci_requests_from_flavor(
            flavor, affinity_policy=hardware.get_pci_numa_policy_constraint(flavor, image)
        )
    except (nova_exception.NovaException, ValueError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {
        mode: _instances(request, asked, oracle, flavor, image, pci_requests, fresh=mode == "fresh")
        for mode in ("scheduler", "fresh")
    }


def _instances(
    request: dict[str, Any],
    asked: dict[str, Any],
    oracle: ModuleType,
    flavor: Any,
    image: Any,
    pci_requests: Any,
    *,
    fresh: bool,
) -> dict[str, Any]:
    from nova import objects  # noqa: PLC0415
    from nova.scheduler import manager  # noqa: PLC0415
    from nova.scheduler.filters import (  # noqa: PLC0415
        affinity_filter,
        compute_filter,
        numa_topology_filter,
        pci_passthrough_filter,
    )
    from nova.virt import hardware  # noqa: PLC0415

    instances = [str(uuid.uuid4()) for _ in range(asked["count"])]
    group = None
    if asked["anti_affinity"]:
        group = objects.InstanceGroup(
            uuid=str(uuid.uuid4()), policy="anti-affinity", rules={}, members=list(instances), hosts=[]
        )
    spec = objects.RequestSpec(
        flavor=flavor,
        image=image,
        numa_topology=hardware.numa_get_constraints(flavor, image),
        pci_requests=copy.deepcopy(pci_requests),
        instance_group=group,
        num_instances=asked["count"],
        scheduler_hints={},
    )
    state = _host_state(request, asked["heartbeat_age"], oracle)
    chain = [
        ("ComputeFilter", compute_filter.ComputeFilter()),
        ("NUMATopologyFilter", numa_topology_filter.NUMATopologyFilter()),
        ("PciPassthroughFilter", pci_passthrough_filter.PciPassthroughFilter()),
        ("ServerGroupAntiAffinityFilter", affinity_filter.ServerGroupAntiAffinityFilter()),
    ]
    for placed, instance in enumerate(instances):
        spec.instance_uuid = instance
        if fresh:
            spec.numa_topology = hardware.numa_get_constraints(flavor, image)
        refused = [name for name, host_filter in chain if not host_filter.host_passes(state, spec)]
        if refused:
            return {"placed": placed, "refused": refused}
        manager.SchedulerManager._consume_selected_host(state, spec, instance)
    return {"placed": len(instances), "refused": []}
