"""The filters: virtcap's scheduler (`schedule`) against Nova's own filter classes, host by host.

Each case is a generated host and a request of one to four instances of a generated flavor. The
hosts are test_numa.py's (1 to 4 cells, SMT or not, CPU sets, huge pages reserved and used,
pinned and shared usage, sometimes an offline CPU), each with PCI devices (none, or NICs and GPUs
on a cell or none, some held) and the aliases of every NUMA policy; the flavors are test_numa.py's
(valid NUMA requests and some Nova refuses, about half asking for devices), without image
properties (virtcap's request reads the flavor's extra specs only). A host's last heartbeat is
recent, or older than `service_down_time` (virtcap: a hypervisor down, or up with a stale audit),
and a request asks now and then for anti-affinity among its instances.

virtcap schedules the request on the host alone (`schedule` with `anti_affinity`); its Placement
classes are left roomy (the request asks for 1 MiB of memory, the host has plenty), so that
Placement never answers and the filters do. The oracle's `filters` op gives Nova's scheduler
HostState the same host (the libvirt driver's NUMA cells with the usage, the PCI tracker's pools)
and runs ComputeFilter, NUMATopologyFilter, PciPassthroughFilter and
ServerGroupAntiAffinityFilter (`host_passes`) on it for each instance in turn, consuming each
one that passes as Nova's scheduler does (`_consume_selected_host`: NUMA usage, PCI pools, the
host's instances). Compared: how many instances pass in a row, and for the one that does not,
that virtcap names the first of the filters Nova's refuse, in virtcap's documented order
(ComputeFilter, NUMATopologyFilter, PciPassthroughFilter, ServerGroupAntiAffinityFilter: Nova
runs them all and each answers on its own, virtcap reports the first). A flavor Nova refuses
outright must be one virtcap refuses too.

Nova's scheduler leaves in the request spec the topology it fitted for an instance (its page
size chosen), and filters the next instances of the request with it; so does virtcap's
`schedule`. The generated requests are compared with the oracle's `scheduler` answer; where it
differs from Nova's answer with each instance's own topology (the oracle's `fresh`, as
nova-compute fits each instance: a few requests per seed, with `hw:mem_page_size` large or any)
the request is counted, so that the comparison is seen to reach such requests, and a known one
is checked by hand below.

What this does not compare: a disabled compute service (virtcap has no such state; ComputeFilter
is compared on the heartbeat only), `max_server_per_host` and members of the group placed by
earlier requests (virtcap's anti-affinity is among the instances of one request), the Placement
step, the weighers (test_weights.py) and the filters' reasons' wording.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from tests.conformance.test_numa import (
    ALIASES,
    PCI_SPECS,
    VIRTCAP_ALIASES,
    generated_flavor,
    generated_host,
    generated_pci,
    generated_usage,
    virtcap_cells,
    with_usage,
)
from tests.conformance.upstream import GIB, MIB, Oracle, agree, generator
from tests.support.factories import host as host_facts
from virtcap.model.facts import PciDevice
from virtcap.model.host_fit import CellsAndDevices, Demand, within_host
from virtcap.model.numa.request import NumaSpecError
from virtcap.model.pci import PciDeviceSpec, device_pools
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    ANTI_AFFINITY,
    COMPUTE,
    NUMA_TOPOLOGY,
    PCI_PASSTHROUGH,
    HostState,
    host_state,
    schedule,
)

HOSTS = 200
REQUESTS_PER_HOST = 3
ORDER = (COMPUTE, NUMA_TOPOLOGY, PCI_PASSTHROUGH, ANTI_AFFINITY)
"""virtcap's documented order of the filters compared (`FILTERS` in virtcap.model.scheduler.filters)."""
SERVICE_DOWN_TIME = 60
"""Nova's default `service_down_time`: a heartbeat older than this is a service down."""
ROOMY = host_state("h", host_facts(cpus=512, memory=8192 * GIB, disk=100_000 * GIB), HostPolicy()).capacity
"""Every host's Placement classes: the request's 1 MiB of memory always fits them."""


NO_DEVICES_NOW_AND_THEN = (0, 1, 1, 2, 3, 4)
"""Buses of devices on a generated host: test_numa.py's, or none at all."""


def heartbeat(rng: random.Random) -> tuple[float, bool, bool]:
    """The last heartbeat's age in seconds, and virtcap's (up, stale) for it: never near the
    boundary, which the time between generating and asking would blur."""
    kind = rng.random()
    if kind < 0.8:
        return rng.choice((0.0, 5.0, 30.0, 50.0)), True, False
    if kind < 0.9:
        return rng.choice((120.0, 600.0)), True, True  # up when asked last, but long ago
    return rng.choice((120.0, 3600.0)), False, False


def virtcap_state(question: dict[str, Any], up: bool, stale: bool) -> HostState:
    """The host as virtcap's scheduler sees it: the cells and pools of the question, roomy classes."""
    pci = question["pci"]
    devices = [
        PciDevice(d["address"], d["vendor_id"], d["product_id"], d["numa_node"], d["dev_type"])
        for d in pci["devices"]
    ]
    pools = device_pools(devices, [PciDeviceSpec.from_entry(entry) for entry in pci["specs"]], pci["held"])
    cells = with_usage(virtcap_cells(question), question["usage"])
    ratios = question["ratios"]
    layout = CellsAndDevices(cells, pools, VIRTCAP_ALIASES, ratios["cpu"], ratios["ram"])
    return HostState("h", replace(ROOMY, within=layout), up=up, stale=stale)


Asked = tuple[dict[str, Any], bool, bool]
"""A request as the oracle takes it, and virtcap's (up, stale) of its heartbeat."""


def _compare(
    question: dict[str, Any],
    asked: Asked,
    upstream: dict[str, Any],
    mismatches: list[str],
    kinds: dict[str, int],
    carried: list[str],
) -> None:
    request, up, stale = asked
    where = (
        f"host { {k: question[k] for k in ('cells', 'online', 'cpu_shared_set', 'cpu_dedicated_set')} } "
        f"reserved {question['reserved_huge_pages']} usage {question['usage']} ratios {question['ratios']} "
        f"pci {question['pci']['devices']} held {question['pci']['held']}, request {request}:"
    )
    flavor_specs = request["extra_specs"]
    try:
        within = within_host(request["vcpus"], request["memory_mb"] * MIB, flavor_specs)
    except NumaSpecError as error:
        kinds["refused flavor"] += 1
        if "error" not in upstream:
            mismatches.append(f"{where} virtcap refuses the flavor ({error}), Nova schedules it: {upstream}")
        return
    if "error" in upstream:
        mismatches.append(f"{where} Nova refuses the flavor ({upstream['error']}), virtcap accepts it")
        return
    kinds["request"] += 1
    result = schedule(
        [virtcap_state(question, up, stale)],
        Demand({Resource.MEMORY: MIB}, within),
        request["count"],
        anti_affinity=request["anti_affinity"],
    )
    fresh, scheduler = upstream["fresh"], upstream["scheduler"]
    refusing = scheduler["refused"]
    nova_first = min(refusing, key=ORDER.index) if refusing else None
    rejection = result.rejections.get("h") if not result.placed else None
    ours = rejection.filter if rejection is not None else None
    kinds["refused"] += nova_first is not None
    kinds["several refuse"] += len(refusing) > 1
    kinds["after one placed"] += scheduler["placed"] > 0 and nova_first is not None
    for name in ORDER:
        kinds[name] += nova_first == name
    if (result.fitted, ours) != (scheduler["placed"], nova_first):
        reasons = rejection.reasons if rejection is not None else ()
        mismatches.append(
            f"{where} virtcap passes {result.fitted} then {ours} {reasons}, "
            f"Nova's scheduler passes {scheduler['placed']} then {refusing or 'none'}"
        )
    if scheduler != fresh:
        kinds["carried topology"] += 1
        carried.append(f"{where} Nova's scheduler passes {scheduler}, with fresh topologies {fresh}")


def test_filter_answers_agree_with_novas_filters(oracle: Oracle) -> None:
    rng = generator("filters")
    questions: list[dict[str, Any]] = []
    cases: list[list[Asked]] = []
    for _ in range(HOSTS):
        host = generated_host(rng)
        usage = generated_usage(rng, virtcap_cells(host)) if rng.random() < 0.6 else {}
        asked: list[Asked] = []
        for _ in range(REQUESTS_PER_HOST):
            flavor = generated_flavor(rng, rng.random() < 0.5)
            if rng.random() < 0.25:  # no NUMA topology: devices alone, or nothing within the host
                alias = flavor["extra_specs"].get("pci_passthrough:alias")
                flavor["extra_specs"] = {"pci_passthrough:alias": alias} if alias else {}
            age, up, stale = heartbeat(rng)
            request = {
                "vcpus": flavor["vcpus"],
                "memory_mb": flavor["memory_mb"],
                "extra_specs": flavor["extra_specs"],
                "count": rng.choice((1, 1, 2, 2, 3, 4)),
                "anti_affinity": rng.random() < 0.35,
                "heartbeat_age": age,
            }
            asked.append((request, up, stale))
        questions.append(
            {
                "op": "filters",
                **host,
                "usage": usage,
                "ratios": {"cpu": rng.choice((1.0, 2.0, 4.0, 16.0)), "ram": rng.choice((1.0, 1.0, 1.5))},
                "pci": generated_pci(rng, len(host["cells"]), NO_DEVICES_NOW_AND_THEN),
                "requests": [request for request, _up, _stale in asked],
            }
        )
        cases.append(asked)
    answers = oracle.ask(questions)
    mismatches: list[str] = []
    carried: list[str] = []
    kinds = dict.fromkeys(
        ("request", "refused flavor", "refused", "several refuse", "after one placed", *ORDER), 0
    )
    kinds["carried topology"] = 0
    for question, asked, answer in zip(questions, cases, answers, strict=True):
        for one, upstream in zip(asked, answer["requests"], strict=True):
            _compare(question, one, upstream, mismatches, kinds, carried)
    agree("filter answers", mismatches, kinds["request"] + kinds["refused flavor"])
    # The generator must reach each filter's refusal, requests that pass, several filters refusing
    # at once and refusals after an instance was consumed.
    assert all(v for k, v in kinds.items() if k != "carried topology"), kinds
    assert kinds["refused"] < kinds["request"], kinds
    print(f"compared with Nova: {kinds}")
    for line in carried[:3]:
        print(f"carried topology: {line}")


CARRIED_HOST: dict[str, Any] = {
    "cells": [
        {
            "id": 0,
            "cpus": [0, 1],
            "siblings": [],
            "memory_kib": 4 * 1024**2,
            "pages": [
                {"size": 4, "total": 512 * 1024},
                {"size": 2048, "total": 512},
                {"size": 1048576, "total": 1},
            ],
            "socket": 0,
        }
    ],
    "online": [0, 1],
    "cpu_shared_set": None,
    "cpu_dedicated_set": None,
    "reserved_huge_pages": [],
    "usage": {},
    "ratios": {"cpu": 1.0, "ram": 1.0},
    "pci": {"devices": [], "specs": list(PCI_SPECS), "held": [], "aliases": list(ALIASES)},
}
"""One cell with a single free 1 GiB page and 1 GiB of 2 MiB pages."""


def test_the_instances_of_a_request_are_filtered_with_the_topology_fitted_before(oracle: Oracle) -> None:
    """Two instances of 1 GiB in large pages: the first takes the 1 GiB page, the second fits
    in 2 MiB pages on its own (Nova's `fresh` answer), but Nova's scheduler asks 1 GiB pages again
    for it (`scheduler`), and refuses it: so does virtcap."""
    extra_specs = {"hw:mem_page_size": "large"}
    request = {"vcpus": 1, "memory_mb": 1024, "extra_specs": extra_specs, "count": 2, "anti_affinity": False,
               "heartbeat_age": 0.0}  # fmt: skip
    (answer,) = oracle.ask([{"op": "filters", **CARRIED_HOST, "requests": [request]}])
    (upstream,) = answer["requests"]
    assert upstream["fresh"] == {"placed": 2, "refused": []}
    assert upstream["scheduler"] == {"placed": 1, "refused": [NUMA_TOPOLOGY]}
    within = within_host(1, 1024 * MIB, extra_specs)
    result = schedule([virtcap_state(CARRIED_HOST, True, False)], Demand({Resource.MEMORY: MIB}, within), 2)
    rejection = result.rejections.get("h") if not result.placed else None
    ours = (result.fitted, [rejection.filter] if rejection is not None else [])
    assert ours == (upstream["scheduler"]["placed"], upstream["scheduler"]["refused"])
