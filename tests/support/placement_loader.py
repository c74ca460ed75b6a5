"""Filling a real Placement (tests/support/placement_server.py) through its own REST API, as Nova
would: root providers named after hypervisors, nested providers under them, inventories, and
allocations per consumer, including a migration's.

Everything is plain dicts, so that a test can plant drift on purpose: a leaked allocation (a
consumer no domain matches), a missing one, a resized one, a wrong `reserved`, a stale `total`, a
migration in progress. Requests go one by one with the generations Placement last returned, and
any refusal fails loudly with Placement's own explanation.

A fleet:

    {"providers": [{"name": "hv1", "inventories": {"VCPU": {"total": 16, "allocation_ratio": 4.0}},
                    "children": [{"name": "hv1_pci_0000_84_00_0",
                                  "inventories": {"VGPU": {"total": 4, "max_unit": 4}}}]}],
     "consumers": [{"uuid": "...", "allocations": {"hv1": {"VCPU": 2},
                                                     "hv1_pci_0000_84_00_0": {"VGPU": 1}}}]}

Providers are named in allocations by name or UUID. Nova 34 creates nested providers for vGPUs
(`<hypervisor>_<pci address>` with VGPU), PCI devices in Placement and memory-encryption contexts;
it creates none for NUMA cells, but a test can plant one the same way (a child with its classes).
"""

from __future__ import annotations

import ssl
import uuid as uuid_module
from dataclasses import dataclass, field
from typing import Any

from tests.support.placement_server import NOAUTH_TOKEN, PlacementHarnessError, json_request

PROJECT_ID = "6f70656e737461636b2070726f6a6563"
USER_ID = "6f70656e737461636b20757365722020"

Inventory = dict[str, Any]
"""A class's fields: total (required), reserved, min_unit, max_unit, step_size, allocation_ratio."""
Amounts = dict[str, int]
"""Amounts per resource class: {"VCPU": 2, "MEMORY_MB": 2048}."""


def nova_inventories(
    vcpus: int,
    memory_mb: int,
    disk_gb: int,
    *,
    cpu_allocation_ratio: float = 4.0,
    ram_allocation_ratio: float = 1.0,
    disk_allocation_ratio: float = 1.0,
    reserved_host_memory_mb: int = 512,
    reserved_host_cpus: int = 0,
    reserved_host_disk_gb: int = 0,
) -> dict[str, Inventory]:
    """A compute node's inventories as nova-compute reports them for these totals: Nova's
    initial allocation ratios and host reservations by default, a whole host as `max_unit`."""

    def one(total: int, reserved: int, ratio: float) -> Inventory:
        return {
            "total": total,
            "reserved": reserved,
            "min_unit": 1,
            "max_unit": total,
            "step_size": 1,
            "allocation_ratio": ratio,
        }

    return {
        "VCPU": one(vcpus, reserved_host_cpus, cpu_allocation_ratio),
        "MEMORY_MB": one(memory_mb, reserved_host_memory_mb, ram_allocation_ratio),
        "DISK_GB": one(disk_gb, reserved_host_disk_gb, disk_allocation_ratio),
    }


@dataclass
class PlacementLoader:
    """A client for the tests' writes (and a few reads) to one Placement."""

    base_url: str
    token: str = NOAUTH_TOKEN
    providers: dict[str, str] = field(default_factory=dict)
    """Provider UUIDs by name, of the providers created here."""
    context: ssl.SSLContext | None = None
    """Over HTTPS: what trusts the server's certificate."""

    def call(self, method: str, path: str, body: object = None, expect: tuple[int, ...] = (200,)) -> Any:
        status, answer = json_request(self.base_url, method, path, body, self.token, self.context)
        if status not in expect:
            raise PlacementHarnessError(f"Placement answered {status} to {method} {path}: {answer}")
        return answer

    def provider_uuid(self, name_or_uuid: str) -> str:
        return self.providers.get(name_or_uuid, name_or_uuid)

    def create_provider(self, name: str, uuid: str | None = None, parent: str | None = None) -> str:
        """A provider, a root unless `parent` (name or UUID) is given; its UUID."""
        body: dict[str, Any] = {"name": name, "uuid": uuid or str(uuid_module.uuid4())}
        if parent is not None:
            body["parent_provider_uuid"] = self.provider_uuid(parent)
        created = self.call("POST", "/resource_providers", body)
        self.providers[name] = created["uuid"]
        return str(created["uuid"])

    def generation(self, provider: str) -> int:
        answer = self.call("GET", f"/resource_providers/{self.provider_uuid(provider)}")
        return int(answer["generation"])

    def ensure_resource_classes(self, classes: object) -> None:
        for name in classes:  # type: ignore[attr-defined]
            if str(name).startswith("CUSTOM_"):
                self.call("PUT", f"/resource_classes/{name}", expect=(201, 204))

    def set_inventories(self, provider: str, inventories: dict[str, Inventory]) -> None:
        """Replaces all of a provider's inventories (fields left out take Placement's defaults)."""
        self.ensure_resource_classes(inventories)
        uuid = self.provider_uuid(provider)
        body = {"resource_provider_generation": self.generation(uuid), "inventories": inventories}
        self.call("PUT", f"/resource_providers/{uuid}/inventories", body)

    def set_inventory_fields(self, provider: str, resource_class: str, **fields: Any) -> None:
        """Changes some fields of one class's inventory (a wrong `reserved`, a stale `total`)."""
        uuid = self.provider_uuid(provider)
        current = self.call("GET", f"/resource_providers/{uuid}/inventories/{resource_class}")
        body = {**current, **fields}
        self.call("PUT", f"/resource_providers/{uuid}/inventories/{resource_class}", body)

    def consumer_generation(self, consumer: str) -> int | None:
        """None for a consumer Placement does not know (or holds nothing for)."""
        answer = self.call("GET", f"/allocations/{consumer}")
        generation = answer.get("consumer_generation")
        return None if generation is None else int(generation)

    def _allocation_body(
        self,
        consumer: str,
        allocations: dict[str, Amounts],
        project_id: str,
        user_id: str,
        consumer_type: str,
    ) -> dict[str, Any]:
        return {
            "allocations": {
                self.provider_uuid(provider): {"resources": amounts}
                for provider, amounts in allocations.items()
            },
            "project_id": project_id,
            "user_id": user_id,
            "consumer_generation": self.consumer_generation(consumer),
            "consumer_type": consumer_type,
        }

    def allocate(
        self,
        consumer: str,
        allocations: dict[str, Amounts],
        *,
        project_id: str = PROJECT_ID,
        user_id: str = USER_ID,
        consumer_type: str = "INSTANCE",
    ) -> None:
        """Replaces a consumer's allocations: {provider name or UUID: {class: amount}}."""
        body = self._allocation_body(consumer, allocations, project_id, user_id, consumer_type)
        self.call("PUT", f"/allocations/{consumer}", body, expect=(204,))

    def delete_allocations(self, consumer: str) -> None:
        self.call("DELETE", f"/allocations/{consumer}", expect=(204,))

    def migrate(
        self,
        instance: str,
        migration: str,
        source: str,
        destination: str,
        amounts: Amounts,
        *,
        project_id: str = PROJECT_ID,
        user_id: str = USER_ID,
    ) -> None:
        """A migration in progress as Nova records it: the migration's UUID holds the instance's
        allocation on the source, the instance's own is on the destination, both written at once."""
        body = {
            migration: self._allocation_body(migration, {source: amounts}, project_id, user_id, "MIGRATION"),
            instance: self._allocation_body(
                instance, {destination: amounts}, project_id, user_id, "INSTANCE"
            ),
        }
        self.call("POST", "/allocations", body, expect=(204,))

    def load(self, fleet: dict[str, Any]) -> dict[str, str]:
        """Creates a fleet's providers (roots, then their children), their inventories, and its
        consumers' allocations; the UUIDs of the providers by name."""
        for provider in fleet.get("providers", []):
            self._load_provider(provider, parent=None)
        for consumer in fleet.get("consumers", []):
            self.allocate(
                consumer["uuid"],
                consumer["allocations"],
                project_id=consumer.get("project_id", PROJECT_ID),
                user_id=consumer.get("user_id", USER_ID),
                consumer_type=consumer.get("consumer_type", "INSTANCE"),
            )
        return dict(self.providers)

    def _load_provider(self, provider: dict[str, Any], parent: str | None) -> None:
        uuid = self.create_provider(provider["name"], provider.get("uuid"), parent)
        if provider.get("inventories"):
            self.set_inventories(uuid, provider["inventories"])
        for child in provider.get("children", []):
            self._load_provider(child, parent=uuid)

    def usages(self, provider: str) -> Amounts:
        answer = self.call("GET", f"/resource_providers/{self.provider_uuid(provider)}/usages")
        return {name: int(amount) for name, amount in answer["usages"].items()}

    def provider_allocations(self, provider: str) -> dict[str, Amounts]:
        """The consumers holding allocations on a provider, with their amounts."""
        answer = self.call("GET", f"/resource_providers/{self.provider_uuid(provider)}/allocations")
        return {
            consumer: {name: int(amount) for name, amount in held["resources"].items()}
            for consumer, held in answer["allocations"].items()
        }
