"""The harness of the Placement reader's tests: a real Placement over HTTP, filled through its
own API, made to misbehave. The Keystone in front of it is proved by the reader's tests
(tests/audit/test_placement_reader.py: its tokens read trees, a reader role and noauth2's token
are refused, the catalog names Placement), which start one Keystone for all of them."""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.placement_loader import PlacementLoader, nova_inventories
from tests.support.placement_server import (
    MisbehavingProxy,
    Misbehaviour,
    PlacementServer,
    json_request,
    running_placement,
)
from tests.support.serving import wait_for

INSTANCE = str(uuid.uuid4())
MIGRATION = str(uuid.uuid4())
LEAKED = str(uuid.uuid4())
VGPU_PROVIDER = "hv1_pci_0000_84_00_0"


pytestmark = pytest.mark.upstream


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    with running_placement(tmp_path_factory.mktemp("placement")) as server:
        yield server


def raw_get(url: str, timeout: float = 10.0) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"X-Auth-Token": "admin"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get_content_type(), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get_content_type(), error.read()


def test_the_loader_plants_providers_inventories_allocations_and_a_migration(
    placement: PlacementServer,
) -> None:
    loader = PlacementLoader(placement.base_url)
    vgpu = {"VGPU": {"total": 4, "max_unit": 4}}
    providers = loader.load(
        {
            "providers": [
                {
                    "name": "hv1",
                    "inventories": nova_inventories(16, 65536, 500),
                    "children": [{"name": VGPU_PROVIDER, "inventories": vgpu}],
                },
                {"name": "hv2", "inventories": nova_inventories(8, 32768, 200, cpu_allocation_ratio=2.0)},
            ],
            "consumers": [
                {"uuid": LEAKED, "allocations": {"hv2": {"VCPU": 1, "MEMORY_MB": 512}}},
            ],
        }
    )
    loader.migrate(
        INSTANCE, MIGRATION, source="hv1", destination="hv2", amounts={"VCPU": 2, "MEMORY_MB": 2048}
    )
    loader.allocate(INSTANCE, {"hv2": {"VCPU": 2, "MEMORY_MB": 2048}, VGPU_PROVIDER: {"VGPU": 1}})
    loader.set_inventory_fields("hv2", "MEMORY_MB", reserved=4096)  # a wrong reserved, planted

    _, tree = json_request(placement.base_url, "GET", f"/resource_providers?in_tree={providers['hv1']}")
    parents = {provider["name"]: provider["parent_provider_uuid"] for provider in tree["resource_providers"]}
    assert parents == {"hv1": None, VGPU_PROVIDER: providers["hv1"]}
    _, inventories = json_request(
        placement.base_url, "GET", f"/resource_providers/{providers['hv2']}/inventories"
    )
    assert inventories["inventories"]["VCPU"]["allocation_ratio"] == 2.0
    assert inventories["inventories"]["MEMORY_MB"]["reserved"] == 4096
    assert loader.provider_allocations("hv1") == {MIGRATION: {"VCPU": 2, "MEMORY_MB": 2048}}
    assert loader.provider_allocations("hv2") == {
        INSTANCE: {"VCPU": 2, "MEMORY_MB": 2048},
        LEAKED: {"VCPU": 1, "MEMORY_MB": 512},
    }
    assert loader.usages(VGPU_PROVIDER) == {"VGPU": 1}
    _, migration = json_request(placement.base_url, "GET", f"/allocations/{MIGRATION}")
    assert migration["consumer_type"] == "MIGRATION"


def test_the_proxy_forwards_then_answers_500_or_html_then_forwards_again(placement: PlacementServer) -> None:
    with MisbehavingProxy(placement.base_url) as proxy:
        status, kind, _ = raw_get(proxy.base_url + "/resource_providers")
        assert (status, kind) == (200, "application/json")
        proxy.misbehaviour = Misbehaviour.SERVER_ERROR
        assert raw_get(proxy.base_url + "/resource_providers")[:2] == (500, "text/html")
        proxy.misbehaviour = Misbehaviour.HTML
        assert raw_get(proxy.base_url + "/resource_providers")[:2] == (200, "text/html")
        proxy.misbehaviour = Misbehaviour.FORWARD
        assert json_request(proxy.base_url, "GET", "/resource_providers")[0] == 200


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_placement_hangs_resumes_is_killed_and_leaves_no_process(tmp_path: Path) -> None:
    with running_placement(tmp_path) as server:
        server.hang()
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            raw_get(server.base_url + "/", timeout=1.0)
        server.resume()
        assert raw_get(server.base_url + "/")[0] == 200
        server.kill()
        with pytest.raises(urllib.error.URLError):
            raw_get(server.base_url + "/")
        server.kill()  # a second time does nothing
    with running_placement(tmp_path / "again") as server:
        pgid = server.process.pid
        server.hang()  # the context's end kills a hung group too
    wait_for(lambda: not group_alive(pgid), timeout=20, what="Placement's processes gone")
    assert server.process.returncode == -signal.SIGKILL
