"""What a Nova instance consumes: virtcap's reading of a guest Nova defined, against the
resources Nova's scheduler asks Placement for.

For each generated flavor (with extra specs), image properties and root type, the oracle writes
the `<nova:instance>` metadata as nova-compute does (`LibvirtDriver._get_guest_config_meta`) and
computes the request (`ResourceRequest.from_request_spec`, the scheduler's translation of a request
spec). The guest goes into a test-driver host with that metadata, pinned, floating or backed by
hugepages as Nova would define it; virtcap audits the host and its used VCPU, PCPU, MEMORY_MB and
DISK_GB must be Nova's request, class by class. Each kind of flavor is its own test, so that each
part of issue 13's difference 5 is guarded on its own.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.nodes import GuestSpec, write_node
from tests.conformance.upstream import GIB, PLACEMENT_CLASS, UNIT, Oracle, agree, generator
from virtcap.config import parse_config
from virtcap.model.capacity import host_capacity
from virtcap.service.oneshot import audit_hypervisor_blocking
from virtcap.units import format_cpu_set

SHARED = (0,)
DEDICATED = (2, 4)
"""The host's CPU sets, of its online CPUs (0, 2 and 4 on the test driver)."""
HOST_CONFIG = {"cpu_shared_set": "0", "cpu_dedicated_set": "2,4", "disk": {"pool": "default"}}


@dataclass(frozen=True)
class Instance:
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    swap: int
    extra_specs: dict[str, str] = field(default_factory=dict)
    image_properties: dict[str, str] = field(default_factory=dict)
    is_bfv: bool = False
    dedicated_vcpus: frozenset[int] = frozenset()
    """The vCPUs Nova pins to dedicated host CPUs (all of them for the dedicated policy)."""

    def question(self) -> dict[str, Any]:
        return {
            "op": "nova_domain",
            "vcpus": self.vcpus,
            "memory_mb": self.memory_mb,
            "root_gb": self.root_gb,
            "ephemeral_gb": self.ephemeral_gb,
            "swap": self.swap,
            "extra_specs": self.extra_specs,
            "image_properties": self.image_properties,
            "is_bfv": self.is_bfv,
        }

    def guest(self, metadata: str) -> GuestSpec:
        """The guest as Nova defines it: vCPUs with a CPU policy pinned one to one (dedicated
        ones in the dedicated set, the others of a mixed guest in the shared set), others
        floating over the shared set; hugepages for an explicit page size."""
        pins = None
        if self.dedicated_vcpus:
            pins = tuple(
                DEDICATED[i % len(DEDICATED)] if i in self.dedicated_vcpus else SHARED[i % len(SHARED)]
                for i in range(self.vcpus)
            )
        return GuestSpec(
            name="instance-00000001",
            vcpus=self.vcpus,
            memory_mib=self.memory_mb,
            metadata=metadata,
            pins=pins,
            floating=None if pins else format_cpu_set(frozenset(SHARED)),
            hugepages=self.extra_specs.get("hw:mem_page_size", "small") not in ("small", "any"),
        )


def _base(rng: random.Random, **changes: Any) -> Instance:
    values: dict[str, Any] = {
        "vcpus": rng.randint(1, 8),
        "memory_mb": rng.choice((512, 2048, rng.randint(256, 65536))),
        "root_gb": rng.choice((0, 10, 20, rng.randint(1, 500))),
        "ephemeral_gb": rng.choice((0, 0, rng.randint(1, 100))),
        "swap": rng.choice((0, 0, 1024, 4096)),
    }
    values.update(changes)
    return Instance(**values)


def _dedicated(rng: random.Random) -> Instance:
    vcpus = rng.randint(1, 8)
    return _base(
        rng, vcpus=vcpus, extra_specs={"hw:cpu_policy": "dedicated"}, dedicated_vcpus=frozenset(range(vcpus))
    )


def _mixed(rng: random.Random) -> Instance:
    vcpus = rng.randint(2, 8)
    dedicated = frozenset(rng.sample(range(vcpus), rng.randint(1, vcpus - 1)))
    shared = sorted(set(range(vcpus)) - dedicated)
    # Nova reads the mask either way: the dedicated vCPUs, or all of them but the shared ones
    mask = format_cpu_set(dedicated)
    if rng.random() < 0.5:
        mask = ",".join([f"0-{vcpus - 1}", *(f"^{cpu}" for cpu in shared)])
    specs = {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": mask}
    return _base(rng, vcpus=vcpus, extra_specs=specs, dedicated_vcpus=dedicated)


def _isolated(rng: random.Random) -> Instance:
    instance = _dedicated(rng)
    specs = {**instance.extra_specs, "hw:emulator_threads_policy": "isolate"}
    return Instance(**{**instance.__dict__, "extra_specs": specs})


def _overridden(rng: random.Random) -> Instance:
    instance = _base(rng, root_gb=rng.randint(1, 100))
    specs = {
        "resources:VCPU": str(instance.vcpus + rng.randint(1, 4)),
        "resources:MEMORY_MB": str(instance.memory_mb + rng.randint(1, 4096)),
        "resources:DISK_GB": rng.choice(("0", str(instance.root_gb + 7))),
    }
    keys = rng.sample(sorted(specs), rng.randint(1, 3))
    return Instance(**{**instance.__dict__, "extra_specs": {key: specs[key] for key in keys}})


def _realtime(rng: random.Random) -> Instance:
    """A mixed instance whose dedicated vCPUs are its realtime ones: `^n` masks on the flavor or
    the image (the image's wins), with or without emulator-thread isolation."""
    vcpus = rng.randint(2, 8)
    shared = frozenset(rng.sample(range(vcpus), rng.randint(1, vcpus - 1)))
    mask = ",".join(f"^{cpu}" for cpu in sorted(shared))
    specs = {"hw:cpu_policy": "mixed", "hw:cpu_realtime": rng.choice(("yes", "true", "1"))}
    image: dict[str, str] = {}
    if rng.random() < 0.5:
        image["hw_cpu_realtime_mask"] = mask
        specs["hw:cpu_realtime_mask"] = "^0"  # the image's mask wins
    else:
        specs["hw:cpu_realtime_mask"] = mask
    if rng.random() < 0.5:
        specs["hw:emulator_threads_policy"] = "isolate"
    dedicated = frozenset(range(vcpus)) - shared
    return _base(rng, vcpus=vcpus, extra_specs=specs, image_properties=image, dedicated_vcpus=dedicated)


def _policy_and_groups(rng: random.Random) -> Instance:
    """A CPU policy beside granular groups that also ask for CPUs (a suffix Nova's API does not
    check: `resources_x:`): the policy replaces the unsuffixed group's amounts only."""
    instance = _dedicated(rng) if rng.random() < 0.5 else _mixed(rng)
    cpu_class = rng.choice(("VCPU", "PCPU"))
    specs = {
        **instance.extra_specs,
        f"resources_{rng.choice(('x', 'accel'))}:{cpu_class}": str(rng.randint(1, 3)),
    }
    if rng.random() < 0.5:
        specs["resources:MEMORY_MB"] = str(instance.memory_mb + rng.randint(1, 512))
    return Instance(**{**instance.__dict__, "extra_specs": specs})


KINDS: dict[str, Callable[[random.Random], Instance]] = {
    "flavor": lambda rng: _base(rng, swap=rng.choice((0, 512, 1024, 1536, 2048, 4097, rng.randint(1, 9000)))),
    "boot-from-volume": lambda rng: _base(rng, root_gb=rng.randint(1, 200), is_bfv=True),
    "hugepages": lambda rng: _base(
        rng, extra_specs={"hw:mem_page_size": rng.choice(("large", "2MB", "1GB"))}
    ),
    "dedicated": _dedicated,
    "image-dedicated": lambda rng: Instance(
        **{**_dedicated(rng).__dict__, "extra_specs": {}, "image_properties": {"hw_cpu_policy": "dedicated"}}
    ),
    "mixed": _mixed,
    "emulator-threads-isolate": _isolated,
    "resources-extra-specs": _overridden,
    "custom-classes": lambda rng: _base(rng, extra_specs=_custom_specs(rng)),
    "realtime-mixed": _realtime,
    "policy-and-groups": _policy_and_groups,
}


def _custom_specs(rng: random.Random) -> dict[str, str]:
    """Custom classes in the unsuffixed group and in granular groups (`resources1:`,
    `resources_accel:`), which add up on one provider."""
    specs = {"resources:CUSTOM_FPGA": str(rng.randint(0, 4))}
    if rng.random() < 0.7:
        specs[f"resources{rng.choice(('1', '_accel', '2'))}:CUSTOM_FPGA"] = str(rng.randint(1, 3))
    if rng.random() < 0.7:
        specs["resources1:CUSTOM_NVME_DISK"] = str(rng.randint(1, 8))
    return specs


def _used(directory: Path, guest: GuestSpec) -> dict[str, float]:
    """What virtcap's audit says the host's domains use, per Placement class, in its units."""
    uri = write_node(directory / "host.xml", 256 * 1024 * 1024, 1000 * GIB, (guest,))
    config = json.dumps({"hypervisors": [{"name": "h", "uri": uri, **HOST_CONFIG}]})
    hypervisor = parse_config(config, "conformance").hypervisors[0]
    facts = audit_hypervisor_blocking(hypervisor, cpu_window=0.0)
    assert len(facts.domains) == 1, facts.problems
    capacity = host_capacity(facts, hypervisor.policy)
    used: dict[str, float] = {}
    for resource, rc in capacity.resources.items():
        if resource in PLACEMENT_CLASS:
            name, unit = PLACEMENT_CLASS[resource], UNIT[resource]
        else:  # a custom class: a plain count, labelled by its name in lower case
            assert resource.unit == "integer", resource
            name, unit = resource.label.upper(), 1
        used[name] = rc.used // unit if rc.used % unit == 0 else rc.used / unit
    return used


@pytest.mark.parametrize("kind", KINDS)
def test_nova_instances_use_what_nova_allocates(oracle: Oracle, tmp_path: Path, kind: str) -> None:
    rng = generator(f"instance-{kind}")
    instances = [KINDS[kind](rng) for _ in range(8)]
    answers = oracle.ask([instance.question() for instance in instances])
    mismatches = []
    compared = 0
    for index, (instance, answer) in enumerate(zip(instances, answers, strict=True)):
        assert "error" not in answer, f"Nova refuses {instance}: {answer['error']}"
        directory = tmp_path / str(index)
        directory.mkdir()
        used = _used(directory, instance.guest(answer["metadata"]))
        nova: dict[str, int] = answer["resources"]
        classes = sorted({*PLACEMENT_CLASS.values(), *nova, *used})
        compared += len(classes)
        for name in classes:
            if used.get(name, 0) != nova.get(name, 0):
                mismatches.append(
                    f"{name}: virtcap {used.get(name, 0)}, Nova {nova.get(name, 0)}; {instance}"
                )
    agree(f"{kind} amounts", mismatches, compared)
