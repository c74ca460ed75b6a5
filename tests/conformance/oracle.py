"""The upstream oracle: answers questions with Nova's and Placement's own code.

Run with the python of the upstream virtualenv (scripts/upstream-venv.sh), never the project's: it
imports `nova` and `placement`, which virtcap must not depend on. It reads one JSON request per
line on stdin and writes one JSON answer per line on stdout, in order, until stdin closes; a line
holding a JSON list is a batch, answered by a list. Nothing of upstream is copied here: every
answer comes from calling it.

Requests (`op`):

- `cpu_spec` {spec}: `nova.virt.hardware.parse_cpu_spec(spec)`, and what nova-compute makes of the
  same text as `[compute] cpu_shared_set` (`get_cpu_shared_set`: unset, a set, or refused).
- `placement` {inventory, usage, request, attempts}: a resource provider in a real Placement (its
  WSGI application, in-process, on in-memory SQLite). Each class of `inventory` (total, reserved,
  min_unit, max_unit, step_size, allocation_ratio; a field left out takes Placement's default) is
  posted on its own, so that Placement accepts or refuses each; the CUSTOM_* classes named
  anywhere in the question are created first, as Nova's report client creates them. The capacity
  Placement reports for the accepted ones is read from the provider summaries of
  GET /allocation_candidates while the provider is empty. `usage` (a list of allocations, one
  consumer each) is then written as existing allocations (under a roomy inventory, which is then
  put back: the way a host ends up over its policy when a ratio is lowered after the fact), the
  inventories are read back as Placement holds them (its defaults filled in), and `request` is
  allocated up to `attempts` times in a row, each to a new consumer, until Placement refuses one.
  With `request_groups` ({suffix: resources}, "" for the unsuffixed group; `request` is then their
  sum, the allocation that lands on the one provider), `grouped_candidate` also says whether
  GET /allocation_candidates finds the provider for the groups, as Nova's scheduler asks.
- `flavor` {vcpus, memory_mb, root_gb, ephemeral_gb, swap, extra_specs, is_bfv, image_properties}:
  the resources Nova's scheduler asks Placement for: `resources_from_flavor_and_bfv`, or with image
  properties `ResourceRequest.from_request_spec` of a request spec carrying that image.
- `nova_domain` {the same}: that, and the `<nova:instance>` metadata nova-compute writes into the
  guest's definition for it (`LibvirtDriver._get_guest_config_meta`).
- `inventory` {uri, instances_path, filesystem_bytes, options}: the inventory Nova's libvirt
  driver reports for a host (`update_provider_tree`), under the given nova.conf options, or its
  refusal of the configuration.

- `pci` {devices, specs, held, aliases, requests}: PCI passthrough on one host: which devices each
  `[pci] device_spec` entry matches, the tracker's pools of the free ones, and the PCI passthrough
  filter's `support_requests` for flavors' `pci_passthrough:alias` (see `pci` below).

- `numa` {cells, online, cpu_shared_set, cpu_dedicated_set, reserved_huge_pages, usage, ratios,
  flavors, limit, pci}: a host's NUMA cells as the libvirt driver builds them, and per flavor
  Nova's NUMA topology for it, where it fits and how many fit in a row, with their PCI devices
  for flavors asking for some (see `numa` below).

- `numa_guests` {the `numa` op's host, guests, flavors}: the guests placed on the host one after
  another as nova-compute places them, with the definition Nova's libvirt driver writes for each
  (see oracle_guests.py), then the flavors as the `numa` op answers them.

- `weights` {hosts, multipliers, lists}: Nova's weighing of host states (`HostWeightHandler`'s
  `get_weighed_objects` with the RAM, CPU and disk weighers, in that order, under
  `[filter_scheduler] ram_weight_multiplier`, `cpu_weight_multiplier`, `disk_weight_multiplier`):
  each host {name, free_ram_mb, vcpus_total, vcpus_used, cpu_allocation_ratio, free_disk_mb} is a
  scheduler HostState with those attributes and no aggregates, given in the order listed; the
  answer is the hosts as Nova sorts them, with their weights. And `nova.weights.normalize` of
  each of `lists` {values, minval, maxval}.

- `filters` {the `numa` op's host, pci, requests}: Nova's ComputeFilter, NUMATopologyFilter,
  PciPassthroughFilter and ServerGroupAntiAffinityFilter on that host, instance after instance
  (see oracle_filters.py).

Any other failure is answered as {"oracle_error": ...}, which fails the test that asked.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
import uuid
import warnings
from typing import Any
from unittest import mock

PROTOCOL_OUT = sys.stdout
# Whatever upstream prints (deprecation notices, log lines) must not reach the protocol stream.
sys.stdout = sys.stderr
warnings.simplefilter("ignore")
logging.basicConfig(level=logging.CRITICAL, stream=sys.stderr)

from nova import exception as nova_exception  # noqa: E402
from nova import objects as nova_objects  # noqa: E402
from nova.conf import CONF as NOVA_CONF  # noqa: E402
from nova.scheduler import utils as scheduler_utils  # noqa: E402
from nova.virt import hardware  # noqa: E402
from oslo_config import cfg  # noqa: E402
from placement import conf as placement_conf  # noqa: E402
from placement import db_api as placement_db  # noqa: E402
from placement import deploy as placement_deploy  # noqa: E402
from webob import Request  # noqa: E402

nova_objects.register_all()
NOVA_CONF([], project="nova", default_config_files=[], default_config_dirs=[])

# The newest microversion of Placement 16.0.0; pinned so that the requests below keep their meaning.
MICROVERSION = "1.39"
PROJECT = str(uuid.uuid4())
USER = str(uuid.uuid4())


def cpu_spec(request: dict[str, Any]) -> dict[str, Any]:
    spec = request["spec"]
    answer: dict[str, Any] = {}
    try:
        answer["parse"] = {"cpus": sorted(hardware.parse_cpu_spec(spec))}
    except nova_exception.Invalid as error:
        answer["parse"] = {"error": str(error)}
    NOVA_CONF.set_override("cpu_shared_set", spec, group="compute")
    try:
        cpus = hardware.get_cpu_shared_set()
        answer["config"] = {"unset": True} if cpus is None else {"cpus": sorted(cpus)}
    except nova_exception.Invalid as error:
        answer["config"] = {"error": str(error)}
    finally:
        NOVA_CONF.clear_override("cpu_shared_set", group="compute")
    return answer


class Placement:
    """A real Placement service in this process: its WSGI pipeline on in-memory SQLite."""

    def __init__(self) -> None:
        conf = cfg.ConfigOpts()
        placement_conf.register_opts(conf)
        conf.set_override("connection", "sqlite://", group="placement_database")
        conf.set_override("sync_on_startup", True, group="placement_database")
        conf.set_override("auth_strategy", "noauth2", group="api")
        conf([], project="placement", default_config_files=[], default_config_dirs=[])
        placement_db.configure(conf)
        self.app = placement_deploy.loadapp(conf)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        request = Request.blank(path, method=method)
        request.headers["x-auth-token"] = "admin"
        request.headers["OpenStack-API-Version"] = f"placement {MICROVERSION}"
        request.headers["Accept"] = "application/json"
        if body is not None:
            request.body = json.dumps(body).encode()
            request.content_type = "application/json"
        response = request.get_response(self.app)
        text = response.body.decode()
        return response.status_code, json.loads(text) if text else None

    def summaries(self, provider: str, resources: dict[str, int]) -> dict[str, Any] | None:
        """The provider's summary in GET /allocation_candidates, or None when it is no candidate."""
        wanted = ",".join(f"{name}:{amount}" for name, amount in sorted(resources.items()))
        status, body = self.call("GET", f"/allocation_candidates?resources={wanted}&in_tree={provider}")
        assert status == 200, body
        if not body["allocation_requests"]:
            return None
        summary: dict[str, Any] = body["provider_summaries"][provider]["resources"]
        return summary

    def grouped_candidate(self, provider: str, groups: dict[str, dict[str, int]]) -> bool:
        """Whether GET /allocation_candidates finds the provider for request groups as Nova's
        scheduler asks for them: `resources` for the unsuffixed group, `resources<suffix>` for
        each granular one (group_policy none), every group held to this provider."""
        query = []
        for suffix, resources in sorted(groups.items()):
            wanted = ",".join(f"{name}:{amount}" for name, amount in sorted(resources.items()) if amount)
            if wanted:
                query += [f"resources{suffix}={wanted}", f"in_tree{suffix}={provider}"]
        if any(suffix for suffix in groups):
            query.append("group_policy=none")
        status, body = self.call("GET", f"/allocation_candidates?{'&'.join(query)}")
        assert status == 200, body
        return bool(body["allocation_requests"])

    def allocation(self, provider: str, resources: dict[str, int]) -> dict[str, Any]:
        return {
            "allocations": {provider: {"resources": resources}},
            "project_id": PROJECT,
            "user_id": USER,
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }

    def ensure_custom_classes(self, names: set[str]) -> None:
        """Creates the CUSTOM_* classes (idempotent), as Nova's report client does before it
        reports an inventory of one: a class must exist before any provider has it."""
        for name in sorted(names):
            if name.startswith("CUSTOM_"):
                status, body = self.call("PUT", f"/resource_classes/{name}")
                assert status in (201, 204), body

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        provider = Provider(self)
        inventory: dict[str, dict[str, Any]] = request["inventory"]
        self.ensure_custom_classes(
            {*inventory, *request.get("request", {}), *(n for a in request.get("usage", []) for n in a)}
        )
        statuses: dict[str, int] = {}
        errors: dict[str, str] = {}
        for name, fields in sorted(inventory.items()):
            status, answer = provider.add_inventory(name, fields)
            statuses[name] = status
            if status >= 300:
                errors[name] = _detail(answer)
        accepted = {name: inventory[name] for name, status in statuses.items() if status < 300}

        # Capacity as Placement reports it, read while the provider is empty. A summary lists
        # every class of the provider; a class offers a candidate when its capacity is at least 1
        # and 1 unit meets its constraints: where min_unit or step_size rule out 1, capacity is
        # read under a copy of the inventory without them (capacity depends only on total,
        # reserved and allocation_ratio), and the real inventory is then put back.
        relaxed = {
            name: fields | {"min_unit": 1, "step_size": 1}
            for name, fields in accepted.items()
            if fields.get("min_unit", 1) != 1 or fields.get("step_size", 1) != 1
        }
        if relaxed:
            provider.put_inventories(accepted | relaxed)
        capacity: dict[str, int] | None = None
        for name in sorted(accepted):
            summary = self.summaries(provider.uuid, {name: 1})
            if summary is not None:
                capacity = {cls: int(values["capacity"]) for cls, values in summary.items()}
                break
        if capacity is None:  # no class has room for a single unit: every capacity is below 1
            capacity = dict.fromkeys(accepted, 0)
        if relaxed:
            provider.put_inventories(accepted)

        usage: list[dict[str, int]] = request.get("usage", [])
        load_error = provider.load(accepted, usage) if any(any(a.values()) for a in usage) else None
        status, answer = self.call("GET", f"/resource_providers/{provider.uuid}/usages")
        assert status == 200, answer
        usages = {name: int(amount) for name, amount in answer["usages"].items()}
        status, answer = self.call("GET", f"/resource_providers/{provider.uuid}/inventories")
        assert status == 200, answer
        held: dict[str, Any] = answer["inventories"]

        result: dict[str, Any] = {
            "inventory_status": statuses,
            "inventory_errors": errors,
            "capacity": capacity,
            "usages": usages,
            "inventories": held,
            "load_error": load_error,
        }
        wanted = {name: amount for name, amount in request.get("request", {}).items() if amount}
        if wanted:
            result["candidate"] = self.summaries(provider.uuid, wanted) is not None
            if request.get("request_groups"):
                result["grouped_candidate"] = self.grouped_candidate(provider.uuid, request["request_groups"])
            count, refusal = 0, None
            while count < int(request.get("attempts", 1)):
                body = self.allocation(provider.uuid, wanted)
                status, answer = self.call("PUT", f"/allocations/{uuid.uuid4()}", body)
                if status != 204:
                    refusal = {"status": status, "detail": _detail(answer), **_refusal(_detail(answer))}
                    break
                count += 1
            result["accepted"] = count
            result["refusal"] = refusal
        return result


class Provider:
    """One resource provider, and its generation as Placement last returned it."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.uuid = str(uuid.uuid4())
        status, body = placement.call("POST", "/resource_providers", {"name": self.uuid, "uuid": self.uuid})
        assert status == 200, body
        self.generation = int(body["generation"])

    def add_inventory(self, name: str, fields: dict[str, Any]) -> tuple[int, Any]:
        body = {"resource_class": name, "resource_provider_generation": self.generation} | fields
        status, answer = self.placement.call("POST", f"/resource_providers/{self.uuid}/inventories", body)
        if status < 300:
            self.generation = int(answer["resource_provider_generation"])
        return status, answer

    def put_inventories(self, inventories: dict[str, Any]) -> None:
        body = {"resource_provider_generation": self.generation, "inventories": inventories}
        status, answer = self.placement.call("PUT", f"/resource_providers/{self.uuid}/inventories", body)
        assert status == 200, answer
        self.generation = int(answer["resource_provider_generation"])

    def load(self, accepted: dict[str, dict[str, Any]], usage: list[dict[str, int]]) -> str | None:
        """Writes existing allocations (one consumer each) under a roomy inventory, then puts the
        real one back: the way a host ends up over its policy when a ratio is lowered afterwards.
        Returns why they could not be written, if so."""
        sums: dict[str, int] = {}
        for allocation in usage:
            for name, amount in allocation.items():
                sums[name] = sums.get(name, 0) + amount
        missing = sorted(name for name, amount in sums.items() if amount and name not in accepted)
        if missing:
            return f"no inventory of {', '.join(missing)} to hold the existing allocations"
        roomy = {
            name: fields
            | {"reserved": 0, "min_unit": 1, "step_size": 1, "allocation_ratio": 1.0}
            | dict.fromkeys(("total", "max_unit"), max(fields["total"], sums.get(name, 0), 1))
            for name, fields in accepted.items()
        }
        self.put_inventories(roomy)
        body = {
            str(uuid.uuid4()): self.placement.allocation(
                self.uuid, {k: v for k, v in allocation.items() if v}
            )
            for allocation in usage
            if any(allocation.values())
        }
        status, answer = self.placement.call("POST", "/allocations", body)
        error = None if status == 204 else f"{status}: {_detail(answer)}"
        self.read_generation()  # allocations bump it
        self.put_inventories(accepted)
        return error

    def read_generation(self) -> None:
        status, body = self.placement.call("GET", f"/resource_providers/{self.uuid}")
        assert status == 200, body
        self.generation = int(body["generation"])


REFUSALS = {
    "would exceed the capacity": "capacity",
    "would violate inventory constraints": "constraints",
    "invalid.": "no inventory",
}


def _refusal(detail: str) -> dict[str, str | None]:
    """Which class Placement names in a refusal, and why: its capacity, its constraints
    (min_unit, max_unit, step_size) or no inventory of it."""
    named = re.search(r"(?:allocation for|Inventory for) '([A-Z0-9_, ]+)'", detail)
    kind = next((kind for text, kind in REFUSALS.items() if text in detail), None)
    return {"class": named.group(1) if named else None, "kind": kind}


def _detail(answer: Any) -> str:
    """The explanation Placement gives, without the generic first paragraph of webob's errors."""
    try:
        details = [str(error.get("detail", error)) for error in answer["errors"]]
    except (TypeError, KeyError, AttributeError):
        details = [str(answer)]
    return "; ".join(" ".join(detail.split("\n\n")[-1].split())[:400] for detail in details)


def flavor_fields(request: dict[str, Any]) -> dict[str, Any]:
    """One flavor for both the scheduler's request and the metadata nova-compute writes: the two
    must describe the same instance."""
    return {
        "name": "conformance",
        "flavorid": "conformance",
        "vcpus": request["vcpus"],
        "memory_mb": request["memory_mb"],
        "root_gb": request["root_gb"],
        "ephemeral_gb": request["ephemeral_gb"],
        "swap": request["swap"],
        "extra_specs": request.get("extra_specs", {}),
    }


def flavor(request: dict[str, Any]) -> dict[str, Any]:
    flavor = nova_objects.Flavor(**flavor_fields(request))
    is_bfv = bool(request.get("is_bfv", False))
    image = request.get("image_properties")
    try:
        if image is None:
            resources = scheduler_utils.resources_from_flavor_and_bfv(flavor, is_bfv)
        else:
            meta = nova_objects.ImageMeta.from_dict({"properties": image})
            spec = nova_objects.RequestSpec(flavor=flavor, image=meta, is_bfv=is_bfv)
            resources = scheduler_utils.ResourceRequest.from_request_spec(spec).merged_resources()
    except nova_exception.NovaException as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"resources": {name: int(amount) for name, amount in sorted(resources.items())}}


NOVA_OPTIONS = {
    "cpu_allocation_ratio": None,
    "ram_allocation_ratio": None,
    "disk_allocation_ratio": None,
    "reserved_host_cpus": None,
    "reserved_host_memory_mb": None,
    "reserved_host_disk_mb": None,
    "cpu_shared_set": "compute",
    "cpu_dedicated_set": "compute",
}
"""The options an `inventory` question may set, and their groups."""


def inventory(request: dict[str, Any]) -> dict[str, Any]:
    """What nova-compute's libvirt driver reports to Placement for a host: its start-up check of
    the CPU sets (`_check_cpu_set_configuration`, the `config` stage) and then
    `update_provider_tree` (the `inventory` stage), connected read-only to `uri` (a libvirt test
    driver node file), with instance disks in `instances_path`.

    The provider already reports PCPU when a dedicated set is configured: otherwise Nova would
    look in its database for instances to reshape from VCPU, as it does on the first start after
    an upgrade to Train.

    `filesystem_bytes` is the size of the filesystem holding `instances_path`, which Nova reads
    with statvfs (libvirt_utils.get_fs_info): the oracle answers that one call with it, so that
    any size can be tested. A libvirt `dir` pool's capacity is the same statvfs figure of its
    directory, which is what virtcap reads."""
    # Nova's libvirt driver needs libvirt-python: imported when first asked.
    from nova.virt.libvirt import utils as libvirt_utils  # noqa: PLC0415

    size = int(request["filesystem_bytes"])

    def filesystem(path: str) -> dict[str, int]:
        assert path == request["instances_path"], path
        return {"total": size, "free": size, "used": 0}

    with mock.patch.object(libvirt_utils, "get_fs_info", filesystem):
        return _inventory(request)


def _inventory(request: dict[str, Any]) -> dict[str, Any]:
    from nova.compute import provider_tree  # noqa: PLC0415
    from nova.virt import fake  # noqa: PLC0415
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    options: dict[str, Any] = request.get("options", {})
    overrides = [
        ("connection_uri", request["uri"], "libvirt"),
        ("instances_path", request["instances_path"], None),
    ]
    overrides += [(name, value, NOVA_OPTIONS[name]) for name, value in options.items() if value is not None]
    for name, value, group in overrides:
        NOVA_CONF.set_override(name, value, group=group)
    try:
        driver = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), read_only=True)
        try:
            driver._check_cpu_set_configuration()
        except nova_exception.NovaException as error:
            return {"error": f"{type(error).__name__}: {error}", "stage": "config"}
        tree = provider_tree.ProviderTree()
        tree.new_root("conformance", str(uuid.uuid4()))
        if options.get("cpu_dedicated_set"):
            tree.update_inventory(
                "conformance", {"PCPU": {"total": 1, "reserved": 0, "allocation_ratio": 1.0}}
            )
        try:
            driver.update_provider_tree(tree, "conformance")
        except nova_exception.NovaException as error:
            return {"error": f"{type(error).__name__}: {error}", "stage": "inventory"}
        return {"inventory": tree.data("conformance").inventory}
    finally:
        for name, _value, group in overrides:
            NOVA_CONF.clear_override(name, group=group)


def nova_domain(request: dict[str, Any]) -> dict[str, Any]:
    """The `<nova:instance>` metadata nova-compute writes into a guest's definition (by the
    driver's `_get_guest_config_meta`) and the resources its scheduler asks Placement for."""
    from nova.virt import driver as virt_driver  # noqa: PLC0415
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    resources = flavor(request)
    image = request.get("image_properties") or {}
    image_id = str(uuid.uuid4())
    metadata = virt_driver.InstanceDriverMetadata(
        root_type="volume" if request.get("is_bfv") else "image",
        root_id="" if request.get("is_bfv") else image_id,
        instance_meta=virt_driver.NovaInstanceMeta(
            name=request.get("name", "conformance"), uuid=str(uuid.uuid4())
        ),
        owner=virt_driver.OwnerMeta(userid=USER, username="alice", projectid=PROJECT, projectname="demo"),
        image=virt_driver.ImageMeta(
            id=image_id,
            name="image",
            container_format="bare",
            disk_format="qcow2",
            min_disk=0,
            min_ram=0,
            properties=nova_objects.ImageMetaProps.from_dict(image).to_dict(),
        ),
        flavor=virt_driver.FlavorMeta(**flavor_fields(request)),
        network_info=[],
    )
    config = libvirt_driver.LibvirtDriver._get_guest_config_meta(None, metadata)
    return {**resources, "metadata": config.to_xml()}


def pci(request: dict[str, Any]) -> dict[str, Any]:
    """PCI passthrough on one host, as nova-compute's PCI tracker and the scheduler's filter see it.

    `devices` are the dicts the libvirt driver reports (address, vendor_id, product_id, numa_node,
    dev_type, parent_addr); `specs` the `[pci] device_spec` entries; `held` the addresses domains
    hold; `aliases` the `[pci] alias` entries; `requests` flavors' `pci_passthrough:alias` values.
    Nova asks the host's sysfs whether an address names an SR-IOV physical function: here, it is
    one when a device of type-PF has that address. Answers: per spec, the addresses
    `PciDeviceSpec.match` accepts (or its refusal); per device, the index of the spec
    `Whitelist.device_assignable` picks; the pools of `PciDeviceStats` in their order (with the
    addresses of their devices), built as the tracker builds them (the allowed devices as
    `PciDevice` objects in its device tree, the held ones claimed and allocated, the available
    ones added); and per request, `support_requests` of the requests Nova makes of the aliases.
    """
    import copy  # noqa: PLC0415

    from nova.pci import (  # noqa: PLC0415
        devspec,
        manager,
        whitelist,
    )
    from nova.pci import request as pci_request  # noqa: PLC0415
    from nova.pci import stats as pci_stats  # noqa: PLC0415

    devices: list[dict[str, Any]] = request["devices"]
    pfs = {device["address"] for device in devices if device["dev_type"] == "type-PF"}

    def is_pf(domain: str, bus: str, slot: str, function: str) -> bool:
        return f"{domain}:{bus}:{slot}.{function}" in pfs

    with mock.patch("nova.pci.utils.is_physical_function", is_pf):
        answer: dict[str, Any] = {"matches": []}
        for entry in request["specs"]:
            try:
                spec = devspec.PciDeviceSpec(copy.deepcopy(entry))
            except nova_exception.NovaException as error:
                answer["matches"].append({"error": f"{type(error).__name__}: {error}"})
                continue
            answer["matches"].append(
                {"addresses": [d["address"] for d in devices if spec.match(copy.deepcopy(d))]}
            )
        if any("error" in match for match in answer["matches"]):
            return answer
        allowed = whitelist.Whitelist([json.dumps(entry) for entry in request["specs"]])
        assignable: dict[str, int] = {}
        objects_: list[Any] = []
        for device in devices:
            chosen = allowed.device_assignable(copy.deepcopy(device))
            if chosen is None:
                continue
            assignable[device["address"]] = allowed.specs.index(chosen)
            objects_.append(nova_objects.PciDevice.create(None, copy.deepcopy(device)))
        answer["assignable"] = assignable
        manager.PciDevTracker._build_device_tree(objects_)
        for device in objects_:
            if device.address in request["held"]:
                instance = {"uuid": str(uuid.uuid4())}
                device.claim(instance["uuid"])
                device.allocate(instance)
        stats = pci_stats.PciDeviceStats(None, dev_filter=allowed)
        for device in objects_:
            if device.status == "available":
                stats.add_device(device)
        answer["pools"] = [
            {
                **{k: v for k, v in pool.items() if k != "devices"},
                "devices": [d.address for d in pool["devices"]],
            }
            for pool in stats.pools
        ]
        NOVA_CONF.set_override("alias", [json.dumps(alias) for alias in request["aliases"]], group="pci")
        pci_request.get_alias_from_config.cache_clear()
        try:
            answer["support"] = {
                extra_spec: stats.support_requests(
                    pci_request._translate_alias_to_requests(extra_spec), provider_mapping=None
                )
                for extra_spec in request["requests"]
            }
        finally:
            NOVA_CONF.clear_override("alias", group="pci")
            pci_request.get_alias_from_config.cache_clear()
        return answer


def _numa_host(request: dict[str, Any]) -> Any:
    """The host's NUMATopology from the libvirt driver's own `_get_host_numa_topology`, given the
    capabilities' `<topology>` written from the question's cells, the online CPUs and the CPU
    sets and reserved_huge_pages as nova.conf options; then the question's usage put on it."""
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    host = libvirt_driver.LibvirtDriver._get_host_numa_topology(_numa_driver(request))
    for cell in host.cells:
        usage = request.get("usage", {}).get(str(cell.id), {})
        cell.pinned_cpus = set(usage.get("pinned", []))
        cell.cpu_usage = usage.get("cpu_usage", 0)
        cell.memory_usage = usage.get("memory_usage", 0)
        for pages in cell.mempages:
            pages.used = usage.get("pages_used", {}).get(str(pages.size_kb), 0)
    return host


def _numa_driver(request: dict[str, Any]) -> Any:
    """What the libvirt driver's host methods read of `self`: the host's capabilities (the
    question's cells), its online CPUs, the reserved hugepages of nova.conf, NUMA support."""
    from types import SimpleNamespace  # noqa: PLC0415

    from nova.conf import neutron as neutron_conf  # noqa: PLC0415
    from nova.virt.libvirt import config as libvirt_config  # noqa: PLC0415
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    neutron_conf.register_dynamic_opts(NOVA_CONF)  # as the libvirt driver does when it starts
    cells_xml = []
    for cell in request["cells"]:
        core_of = {cpu: core for core in cell["siblings"] for cpu in core}
        cpus = "".join(
            f"<cpu id='{cpu}' socket_id='{cell.get('socket', 0)}' core_id='{min(core_of.get(cpu, [cpu]))}' "
            f"siblings='{','.join(str(c) for c in sorted(core_of.get(cpu, [cpu])))}'/>"
            for cpu in sorted(cell["cpus"])
        )
        pages = "".join(
            f"<pages unit='KiB' size='{page['size']}'>{page['total']}</pages>" for page in cell["pages"]
        )
        cells_xml.append(
            f"<cell id='{cell['id']}'><memory unit='KiB'>{cell['memory_kib']}</memory>{pages}"
            f"<cpus num='{len(cell['cpus'])}'>{cpus}</cpus></cell>"
        )
    topology = libvirt_config.LibvirtConfigCapsNUMATopology()
    topology.parse_str(f"<topology><cells num='{len(cells_xml)}'>{''.join(cells_xml)}</cells></topology>")
    online = set(request["online"])
    driver = SimpleNamespace(
        _has_numa_support=lambda: True,
        _host=SimpleNamespace(
            get_capabilities=lambda: SimpleNamespace(host=SimpleNamespace(topology=topology)),
            get_online_cpus=lambda: set(online),
        ),
        _reserved_hugepages=hardware.numa_get_reserved_huge_pages(),
    )
    driver._get_vcpu_available = lambda: libvirt_driver.LibvirtDriver._get_vcpu_available(driver)
    driver._get_pcpu_available = lambda: libvirt_driver.LibvirtDriver._get_pcpu_available(driver)
    return driver


def _numa_pci_stats(question: dict[str, Any]) -> Any:
    """PciDeviceStats of the free allowed devices, built as the `pci` op builds them."""
    import copy  # noqa: PLC0415

    from nova.pci import manager, whitelist  # noqa: PLC0415
    from nova.pci import stats as pci_stats  # noqa: PLC0415

    allowed = whitelist.Whitelist([json.dumps(entry) for entry in question["specs"]])
    devices = []
    for device in question["devices"]:
        if allowed.device_assignable(copy.deepcopy(device)) is not None:
            devices.append(nova_objects.PciDevice.create(None, copy.deepcopy(device)))
    manager.PciDevTracker._build_device_tree(devices)
    stats = pci_stats.PciDeviceStats(None, dev_filter=allowed)
    for device in devices:
        if device.address in question["held"]:
            instance = {"uuid": str(uuid.uuid4())}
            device.claim(instance["uuid"])
            device.allocate(instance)
        if device.status == "available":
            stats.add_device(device)
    return stats


def _cell_json(cell: Any) -> dict[str, Any]:
    return {
        "id": cell.id,
        "cpuset": sorted(cell.cpuset),
        "pcpuset": sorted(cell.pcpuset),
        "pagesize": cell.pagesize,
        "memory": cell.memory,
    }


def numa(request: dict[str, Any]) -> dict[str, Any]:
    """NUMA placement on one host, by Nova's own functions.

    The host's cells come from the libvirt driver (`_host` above) under `cpu_shared_set`,
    `cpu_dedicated_set` and `reserved_huge_pages` (nova.conf's), with `usage` per cell (pinned
    CPUs, cpu_usage, memory_usage, pages used per size) put on them. Per flavor {vcpus,
    memory_mb, extra_specs, image_properties}: `numa_get_constraints` (the topology's cells, or
    the class of Nova's refusal), `numa_fit_instance_to_host` under NUMATopologyLimits of
    `ratios` (the host cell, page size and pinning of each guest cell, or no fit), with `pci`
    {devices, specs, held, aliases} the host's PciDeviceStats and the flavor's
    `pci_passthrough:alias` requests; and `count`: how many fit in a row, each fitted with a
    fresh topology (and the same PciDeviceStats, no PCI request) and added by
    `numa_usage_from_instance_numa`, at most `limit`, or where Nova raised in between; with PCI
    requests also `pci_count`, the same with the requests and their devices taken.
    """
    from nova.pci import request as pci_request  # noqa: PLC0415

    overrides = [
        ("cpu_shared_set", request.get("cpu_shared_set"), "compute"),
        ("cpu_dedicated_set", request.get("cpu_dedicated_set"), "compute"),
        ("reserved_huge_pages", request.get("reserved_huge_pages") or None, None),
    ]
    for name, value, group in overrides:
        NOVA_CONF.set_override(name, value, group=group)
    pci = request.get("pci")
    if pci:
        NOVA_CONF.set_override("alias", [json.dumps(alias) for alias in pci["aliases"]], group="pci")
        pci_request.get_alias_from_config.cache_clear()
    try:
        try:
            host = _numa_host(request)
        except nova_exception.NovaException as error:
            return {"error": f"{type(error).__name__}: {error}"}
        answer: dict[str, Any] = {
            "host": [
                {
                    "id": cell.id,
                    "cpuset": sorted(cell.cpuset),
                    "pcpuset": sorted(cell.pcpuset),
                    "siblings": [sorted(core) for core in cell.siblings],
                    "memory": cell.memory,
                    "mempages": [[p.size_kb, p.total, p.reserved, p.used] for p in cell.mempages],
                }
                for cell in host.cells
            ],
            "flavors": [],
        }
        stats = _numa_pci_stats(pci) if pci else None
        limits = nova_objects.NUMATopologyLimits(
            cpu_allocation_ratio=request["ratios"]["cpu"], ram_allocation_ratio=request["ratios"]["ram"]
        )
        for question in request["flavors"]:
            answer["flavors"].append(_numa_flavor(question, host, limits, stats, request["limit"]))
        return answer
    finally:
        for name, _value, group in overrides:
            NOVA_CONF.clear_override(name, group=group)
        if pci:
            NOVA_CONF.clear_override("alias", group="pci")
            pci_request.get_alias_from_config.cache_clear()


def _numa_flavor(question: dict[str, Any], host: Any, limits: Any, stats: Any, limit: int) -> dict[str, Any]:
    from nova.pci import request as pci_request  # noqa: PLC0415

    extra_specs = question.get("extra_specs", {})
    flavor_object = nova_objects.Flavor(
        name="conformance",
        vcpus=question["vcpus"],
        memory_mb=question["memory_mb"],
        extra_specs=extra_specs,
    )
    image = nova_objects.ImageMeta.from_dict(
        {"name": "image", "properties": question.get("image_properties", {})}
    )

    def topology() -> Any:
        return hardware.numa_get_constraints(flavor_object, image)

    try:
        wanted = topology()
    except (nova_exception.NovaException, ValueError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    if wanted is None:
        return {"topology": None}
    answer: dict[str, Any] = {
        "topology": {
            "cells": [_cell_json(cell) for cell in wanted.cells],
            "cpu_policy": wanted.cells[0].cpu_policy,
            "cpu_thread_policy": wanted.cells[0].cpu_thread_policy,
            "emulator_threads_policy": wanted.emulator_threads_policy,
        }
    }
    requests = None
    if stats is not None and extra_specs.get("pci_passthrough:alias"):
        requests = pci_request._translate_alias_to_requests(
            extra_specs["pci_passthrough:alias"],
            hardware.get_pci_numa_policy_constraint(flavor_object, image),
        )
    fitted = hardware.numa_fit_instance_to_host(host, wanted, None, limits, requests, stats)
    answer["fit"] = None
    if fitted is not None:
        answer["fit"] = {
            "cells": [cell.id for cell in fitted.cells],
            "pagesizes": [cell.pagesize for cell in fitted.cells],
            "pinning": {
                str(vcpu): cpu for cell in fitted.cells for vcpu, cpu in (cell.cpu_pinning or {}).items()
            },
            "reserved": sorted(set().union(*((cell.cpuset_reserved or set()) for cell in fitted.cells))),
        }
    count, current, answer["count_error"] = 0, host, None
    while count < limit:
        placed = hardware.numa_fit_instance_to_host(current, topology(), None, limits, None, stats)
        if placed is None:
            break
        try:
            current = hardware.numa_usage_from_instance_numa(current, placed)
        except nova_exception.NovaException as error:
            answer["count_error"] = type(error).__name__
            break
        count += 1
    answer["count"] = count
    if requests:
        answer["pci_count"] = _numa_pci_count(host, topology, limits, stats, requests, limit)
    return answer


def _numa_pci_count(host: Any, topology: Any, limits: Any, stats: Any, requests: Any, limit: int) -> int:
    """How many instances asking for PCI devices fit in a row, as the scheduler's host state
    consumes them: the NUMA fit with the requests, its usage added, the devices taken from the
    pools near the chosen cells (`PciDeviceStats.apply_requests`)."""
    import copy  # noqa: PLC0415

    count, current, pools = 0, host, copy.deepcopy(stats)
    while count < limit:
        placed = hardware.numa_fit_instance_to_host(current, topology(), None, limits, requests, pools)
        if placed is None:
            break
        try:
            current = hardware.numa_usage_from_instance_numa(current, placed)
            pools.apply_requests(requests, None, placed.cells)
        except nova_exception.NovaException:
            break
        count += 1
    return count


def weights(request: dict[str, Any]) -> dict[str, Any]:
    from nova import weights as nova_weights  # noqa: PLC0415
    from nova.scheduler import host_manager  # noqa: PLC0415
    from nova.scheduler import weights as host_weights  # noqa: PLC0415
    from nova.scheduler.weights import cpu, disk, ram  # noqa: PLC0415

    multipliers = request.get("multipliers", {})
    options = {
        "ram_weight_multiplier": multipliers.get("ram", 1.0),
        "cpu_weight_multiplier": multipliers.get("cpu", 1.0),
        "disk_weight_multiplier": multipliers.get("disk", 1.0),
    }
    for name, value in options.items():
        NOVA_CONF.set_override(name, value, group="filter_scheduler")
    try:
        states = []
        for described in request.get("hosts", []):
            state = host_manager.HostState(described["name"], described["name"], None)
            for key in ("free_ram_mb", "vcpus_total", "vcpus_used", "cpu_allocation_ratio", "free_disk_mb"):
                setattr(state, key, described[key])
            states.append(state)
        weighers = [ram.RAMWeigher(), cpu.CPUWeigher(), disk.DiskWeigher()]
        weighed = host_weights.HostWeightHandler().get_weighed_objects(weighers, states, None)
        normalized = [
            [float(v) for v in nova_weights.normalize(item["values"], item.get("minval"), item.get("maxval"))]
            for item in request.get("lists", [])
        ]
        return {
            "weighed": [{"host": item.obj.host, "weight": float(item.weight)} for item in weighed],
            "normalized": normalized,
        }
    finally:
        for name in options:
            NOVA_CONF.clear_override(name, group="filter_scheduler")


def main() -> None:
    placement: Placement | None = None

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal placement
        op = request.get("op")
        try:
            if op == "cpu_spec":
                return cpu_spec(request)
            if op == "placement":
                placement = placement or Placement()
                return placement.run(request)
            if op == "flavor":
                return flavor(request)
            if op == "inventory":
                return inventory(request)
            if op == "nova_domain":
                return nova_domain(request)
            if op == "pci":
                return pci(request)
            if op == "numa":
                return numa(request)
            if op == "vgpu":
                # beside this script, which runs as a script: its folder is on the path
                reply: dict[str, Any] = importlib.import_module("oracle_vgpu").vgpu(request)
                return reply
            if op == "numa_guests":
                guests: dict[str, Any] = importlib.import_module("oracle_guests").numa_guests(
                    request, sys.modules[__name__]
                )
                return guests
            if op == "weights":
                return weights(request)
            if op == "filters":
                found: dict[str, Any] = importlib.import_module("oracle_filters").filters(
                    request, sys.modules[__name__]
                )
                return found
            if op == "ping":
                return {"pong": True}
        except Exception as error:  # reported to the test, which fails with it
            return {"oracle_error": f"{type(error).__name__}: {error}"}
        return {"oracle_error": f"unknown op {op!r}"}

    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        reply = [answer(item) for item in message] if isinstance(message, list) else answer(message)
        PROTOCOL_OUT.write(json.dumps(reply) + "\n")
        PROTOCOL_OUT.flush()


if __name__ == "__main__":
    main()
