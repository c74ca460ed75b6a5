"""Writes the demo fleet's node files: `python -m virtcap.demo.generate [DIR]`.

Each host is shaped to show one thing an operator must see (see demo.yaml for which). The files
are committed; a test fails when this script would write them differently.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

from virtcap.demo import DEMO_DIR
from virtcap.demo.fleetgen import (
    BLOCKED,
    CRASHED,
    PAUSED,
    PMSUSPENDED,
    RUNNING,
    SHUTDOWN,
    SHUTOFF,
    FlavorSpec,
    HostSpec,
    random_domain,
    write_fleet,
)

# The test driver gives every storage pool 100 GiB whatever the node file says, so the demo's
# flavors have small root disks and most instances boot from network volumes.
SMALL = FlavorSpec("m1.small", 1, 2048, 10)
MEDIUM = FlavorSpec("m1.medium", 2, 4096, 10)
LARGE = FlavorSpec("m1.large", 4, 8192, 20)
XLARGE = FlavorSpec("m1.xlarge", 8, 16384, 20)
RAM_LARGE = FlavorSpec("r1.large", 4, 32768, 10, ephemeral_gib=2, swap_mib=1024)


def _states(rng: random.Random, count: int, shutoff: int, paused: int, other: int) -> list[int]:
    running = count - shutoff - paused - other
    others = [CRASHED, PMSUSPENDED, SHUTDOWN]
    states = [RUNNING] * (running - running // 10) + [BLOCKED] * (running // 10)
    states += [SHUTOFF] * shutoff + [PAUSED] * paused + [others[i % 3] for i in range(other)]
    rng.shuffle(states)
    return states


def _host(  # noqa: PLR0917  (its callers are a table of hosts, one row each)
    name: str,
    cpus: int,
    memory_gib: int,
    pool_gib: int,
    states: list[int],
    flavors: tuple[FlavorSpec, ...],
    rng: random.Random,
    nova_share: float,
    local_share: float,
) -> HostSpec:
    domains = [
        random_domain(rng, name, i, state, nova_share=nova_share, local_share=local_share, flavors=flavors)
        for i, state in enumerate(states)
    ]
    used = min(sum(d.disks[0].capacity_gib for d in domains) * 3 // 10, pool_gib)
    return HostSpec(name, cpus, memory_gib, pool_gib, used, domains=domains)


def demo_hosts() -> list[HostSpec]:
    rng = random.Random(20261121)
    hosts = [
        # Healthy general-purpose host: comfortably inside every limit.
        _host("compute-01", 32, 256, 4000, _states(rng, 60, 8, 2, 2), (SMALL, SMALL, MEDIUM), rng, 0.6, 0.08),
        # vCPU allocations past the 4.0 policy: the overcommit alert's host.
        _host("compute-02", 16, 192, 3000, _states(rng, 40, 4, 1, 1), (SMALL, MEDIUM, MEDIUM), rng, 0.5, 0.1),
        # Big host, many stopped instances that still hold their allocation.
        _host("compute-04", 64, 768, 8000, _states(rng, 200, 60, 5, 5), (SMALL,), rng, 0.3, 0.035),
    ]
    hosts.append(_memory_bound_host(rng))
    hosts.append(_pinned_host(rng))
    hosts.append(_edge_host(rng))
    return sorted(hosts, key=lambda host: host.name)


def _memory_bound_host(rng: random.Random) -> HostSpec:
    """Memory ratio 1.5 (Nova's pre-2023 default), allocated to ~94% of its limit, guests'
    balloons near the physical memory: the nearly-exhausted and memory-pressure alerts' host."""
    name = "compute-03"
    flavors = [LARGE] * 16 + [XLARGE] * 2
    flavors += [SMALL] * (24 - len(flavors))
    states = _states(rng, len(flavors), 2, 0, 0)
    domains = []
    for index, (flavor, state) in enumerate(zip(flavors, states, strict=True)):
        base = random_domain(rng, name, index, state, nova_share=1.0, local_share=0.2, flavors=(flavor,))
        balloon = base.memory_mib if state == SHUTOFF else base.memory_mib * 76 // 100
        domains.append(replace(base, current_memory_mib=balloon))
    return HostSpec(name, 48, 128, 6000, 900, domains=domains)


def _pinned_host(rng: random.Random) -> HostSpec:
    """Dedicated CPUs (cpu_dedicated_set) with two pinned guests, and stopped instances that
    do not count (count_inactive_domains: false). The test driver reports CPUs 0, 2 and 4
    online, so the sets in demo.yaml are small."""
    name = "compute-05"
    domains = []
    for index, cpu in enumerate((2,)):
        base = random_domain(rng, name, index, RUNNING, nova_share=1.0, local_share=1.0, flavors=(SMALL,))
        # Nova pins the guests of a flavor with hw:cpu_policy=dedicated, and writes that extra spec
        dedicated = replace(SMALL, extra_specs=(("hw:cpu_policy", "dedicated"),))
        domains.append(replace(base, pins=(cpu,), flavor=dedicated if base.flavor is not None else None))
    states = [RUNNING] * 3 + [SHUTOFF] * 17
    for index, state in enumerate(states, start=len(domains)):
        domains.append(
            random_domain(rng, name, index, state, nova_share=0.0, local_share=0.1, flavors=(SMALL,))
        )
    return HostSpec(name, 16, 64, 2000, 200, domains=domains)


WINDOWS_EVERY = 5
"""One guest in five on the edge node runs Windows."""


def _edge_host(rng: random.Random) -> HostSpec:
    """An OpenStack edge node: every instance carries Nova metadata, roots on Ceph (network
    disks, still accounted by flavor), some guests backed by hugepages, and Windows guests whose
    flavor takes one of the host's licences (a custom class, CUSTOM_WINDOWS_LICENCE)."""
    name = "compute-06"
    domains = []
    for index, state in enumerate(_states(rng, 30, 3, 1, 0)):
        base = random_domain(
            rng, name, index, state, nova_share=1.0, local_share=0.0, flavors=(SMALL, MEDIUM, RAM_LARGE)
        )
        if index % WINDOWS_EVERY == 1 and base.flavor is not None:
            licensed = replace(base.flavor, extra_specs=(("resources:CUSTOM_WINDOWS_LICENCE", "1"),))
            base = replace(base, flavor=licensed)
        domains.append(replace(base, hugepages=index % 7 == 0))
    return HostSpec(name, 24, 448, 1000, 100, domains=domains)


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else DEMO_DIR
    for path in write_fleet(demo_hosts(), directory).values():
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
