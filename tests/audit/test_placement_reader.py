"""The Placement reader (audit/placement.py) against a real Placement 16 over HTTP (tests/support/
placement_server.py), filled through its own API; with a real Keystone's tokens where
scripts/keystone-venv.sh has installed one."""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.keystone_server import READER_USER, Keystone, keystone_venv, running_keystone
from tests.support.placement_loader import PROJECT_ID, PlacementLoader, nova_inventories
from tests.support.placement_server import (
    MisbehavingProxy,
    Misbehaviour,
    PlacementServer,
    ServerTls,
    running_placement,
)
from tests.support.serving import free_port
from tests.support.tls import make_ca, make_cert
from virtcap.audit.placement import PlacementRead, PlacementReader
from virtcap.audit.placement_error import PlacementError
from virtcap.config.placement import PlacementAuth, PlacementSection
from virtcap.model.placement_drift import MIGRATION, Consumer, ProviderInventory

pytestmark = pytest.mark.upstream

TIMEOUT = 1.0
MARGIN = 5.0
"""A failing round returns within its timeout and this (no hang); never a measure of speed."""
OTHER_PROJECT = "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5"


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    with running_placement(tmp_path_factory.mktemp("placement")) as server:
        yield server


def reader(endpoint: str, timeout: float = TIMEOUT, **options: Any) -> PlacementReader:
    return PlacementReader(PlacementSection(endpoint=endpoint, timeout=timeout), **options)


def unique(name: str) -> str:
    """Names of one test's providers: the module's tests share a Placement."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def inventory(fields: dict[str, Any]) -> ProviderInventory:
    return ProviderInventory(**fields)


def test_trees_read_back_what_was_planted(placement: PlacementServer) -> None:
    hv1, hv2 = unique("hv1"), unique("hv2")
    vgpu = f"{hv1}_pci_0000_84_00_0"
    instance, moving, migration, leaked = (str(uuid.uuid4()) for _ in range(4))
    hv1_inventories = nova_inventories(16, 65536, 500)
    hv2_inventories = nova_inventories(8, 32768, 200, cpu_allocation_ratio=2.0)
    loader = PlacementLoader(placement.base_url)
    providers = loader.load(
        {
            "providers": [
                {
                    "name": hv1,
                    "inventories": hv1_inventories,
                    "children": [{"name": vgpu, "inventories": {"VGPU": {"total": 4, "max_unit": 4}}}],
                },
                {"name": hv2, "inventories": hv2_inventories},
            ],
            "consumers": [
                {"uuid": instance, "allocations": {hv1: {"VCPU": 2, "MEMORY_MB": 2048}, vgpu: {"VGPU": 1}}},
                {"uuid": leaked, "allocations": {hv2: {"VCPU": 1, "MEMORY_MB": 512}}},
            ],
        }
    )
    amounts = {"VCPU": 4, "MEMORY_MB": 4096}
    loader.migrate(moving, migration, source=hv1, destination=hv2, amounts=amounts, project_id=OTHER_PROJECT)

    by_uuid = providers[hv2].upper()  # `placement_provider` as a UUID, in any spelling
    read = reader(placement.base_url).read_trees(
        {"one": hv1, "two": by_uuid, "three": unique("hv3")}, describe={migration, leaked}
    )

    assert read.trees["three"] is None
    one, two = read.trees["one"], read.trees["two"]
    assert one is not None and two is not None
    assert (one.root_uuid, one.root_name, two.root_uuid, two.root_name) == (
        providers[hv1],
        hv1,
        providers[hv2],
        hv2,
    )
    assert one.root == {name: inventory(fields) for name, fields in hv1_inventories.items()}
    assert one.nested == {vgpu: {"VGPU": ProviderInventory(total=4, max_unit=4)}}
    assert two.root == {name: inventory(fields) for name, fields in hv2_inventories.items()}
    assert two.nested == {}
    # the instance's allocations summed over its tree: the root's and the vGPU provider's
    assert one.consumers == {
        instance: Consumer(instance, {"VCPU": 2, "MEMORY_MB": 2048, "VGPU": 1}),
        migration: Consumer(migration, amounts, MIGRATION, OTHER_PROJECT),
    }
    assert two.consumers == {
        moving: Consumer(moving, amounts),
        leaked: Consumer(leaked, {"VCPU": 1, "MEMORY_MB": 512}, "INSTANCE", PROJECT_ID),
    }
    assert read.providers == 3
    assert read.requests == {"providers": 1, "inventories": 3, "allocations": 3, "consumer": 2}


def test_a_callable_chooses_the_consumers_described_within_the_bound(placement: PlacementServer) -> None:
    host = unique("hv")
    consumers = sorted(str(uuid.uuid4()) for _ in range(5))
    loader = PlacementLoader(placement.base_url)
    loader.load(
        {
            "providers": [{"name": host, "inventories": nova_inventories(8, 16384, 100)}],
            "consumers": [{"uuid": c, "allocations": {host: {"VCPU": 1}}} for c in consumers],
        }
    )
    asked: list[tuple[str, str]] = []

    def without_domain(hypervisor: str, consumer: str) -> bool:
        asked.append((hypervisor, consumer))
        return consumer != consumers[0]

    placement_reader = reader(placement.base_url, max_described=3)
    first = placement_reader.read_trees({"h": host}, describe=without_domain)
    assert sorted(asked) == [("h", consumer) for consumer in consumers]
    assert (first.requests["consumer"], first.undescribed) == (3, 1)
    second = placement_reader.read_trees({"h": host}, describe=without_domain)
    # those described are remembered while they hold allocations: the last one's turn now
    assert (second.requests["consumer"], second.undescribed) == (1, 0)
    tree = second.trees["h"]
    assert tree is not None
    assert [tree.consumers[c].consumer_type for c in consumers] == [None] + ["INSTANCE"] * 4


def test_at_most_three_requests_per_provider_on_a_fleet(placement: PlacementServer) -> None:
    loader = PlacementLoader(placement.base_url)
    hosts = [unique(f"fleet{index}") for index in range(20)]
    consumers = {host: [str(uuid.uuid4()) for _ in range(5)] for host in hosts}
    loader.load(
        {
            "providers": [
                {"name": host, "inventories": nova_inventories(64, 262144, 1000)} for host in hosts
            ],
            "consumers": [
                {"uuid": consumer, "allocations": {host: {"VCPU": 2, "MEMORY_MB": 4096}}}
                for host in hosts
                for consumer in consumers[host]
            ],
        }
    )
    leaked = {consumers[host][0] for host in hosts[::2]}  # one consumer without a domain on half
    placement_reader = reader(placement.base_url)
    rounds: list[PlacementRead] = [
        placement_reader.read_trees({host: host for host in hosts}, describe=leaked) for _ in range(2)
    ]

    for read in rounds:
        assert read.providers == 20
        assert read.total_requests <= 3 * read.providers
        assert {host: set(tree.consumers) for host, tree in read.trees.items() if tree} == {
            host: set(consumers[host]) for host in hosts
        }
    assert rounds[0].requests == {"providers": 1, "inventories": 20, "allocations": 20, "consumer": 10}
    assert rounds[1].requests["consumer"] == 0
    assert all(duration >= 0 for duration in rounds[0].seconds.values())


def test_a_tree_is_kept_while_its_answers_stay_and_made_again_when_one_changes(
    placement: PlacementServer,
) -> None:
    """The trees of a round whose answers are Placement's last ones again are the same objects
    (nothing parsed nor summed again); an allocation on a nested provider, a described consumer
    and a changed inventory each make their tree again, with the change."""
    steady, changing = unique("steady"), unique("changing")
    vgpu = f"{changing}_pci_0000_84_00_0"
    first, later = str(uuid.uuid4()), str(uuid.uuid4())
    loader = PlacementLoader(placement.base_url)
    loader.load(
        {
            "providers": [
                {"name": steady, "inventories": nova_inventories(8, 16384, 100)},
                {
                    "name": changing,
                    "inventories": nova_inventories(8, 16384, 100),
                    "children": [{"name": vgpu, "inventories": {"VGPU": {"total": 4, "max_unit": 4}}}],
                },
            ],
            "consumers": [{"uuid": first, "allocations": {steady: {"VCPU": 1}, changing: {"VCPU": 1}}}],
        }
    )
    placement_reader = reader(placement.base_url)
    hypervisors = {steady: steady, changing: changing}

    def trees(describe: frozenset[str] = frozenset()) -> tuple[Any, Any]:
        read = placement_reader.read_trees(hypervisors, describe=describe)
        return read.trees[steady], read.trees[changing]

    kept, before = trees()
    assert trees() == (kept, before) and trees()[0] is kept and trees()[1] is before
    loader.allocate(later, {vgpu: {"VGPU": 1}})
    again, after = trees()
    assert again is kept and after is not before
    assert after is not None and after.consumers[later] == Consumer(later, {"VGPU": 1})
    described = trees(frozenset({later}))[1]
    assert described is not None and described.consumers[later].consumer_type == "INSTANCE"
    assert trees()[1] is described  # described once, remembered
    loader.set_inventory_fields(changing, "VCPU", reserved=2)
    reserved = trees()[1]
    assert reserved is not described and reserved is not None and reserved.root["VCPU"].reserved == 2
    assert reserved.consumers == described.consumers


def failing_round(
    placement_reader: PlacementReader, hypervisors: dict[str, str], timeout: float = TIMEOUT
) -> PlacementError:
    started = time.monotonic()
    with pytest.raises(PlacementError) as raised:
        placement_reader.read_trees(hypervisors)
    assert time.monotonic() - started < timeout + MARGIN
    message = str(raised.value)
    assert "\n" not in message and raised.value.__cause__ is None
    return raised.value


def test_a_hung_placement_fails_the_round_within_its_timeout(placement: PlacementServer) -> None:
    host = unique("hung")
    PlacementLoader(placement.base_url).load({"providers": [{"name": host}]})
    placement_reader = reader(placement.base_url)
    placement.hang()
    try:
        failing_round(placement_reader, {host: host})
    finally:
        placement.resume()
    tree = placement_reader.read_trees({host: host}).trees[host]
    assert tree is not None and tree.root_name == host


def test_a_placement_down_fails_the_round(tmp_path: Path) -> None:
    with running_placement(tmp_path) as server:
        placement_reader = reader(server.base_url)
        server.kill()
        failing_round(placement_reader, {"hv": "hv"})


def test_a_placement_over_https_is_read_through_the_ca_file_and_refused_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Placement whose certificate a private CA signed: read with `placement.ca_file`; without
    it the round fails, saying to check it (the bundle requests trusts does not hold that CA); and
    a CA file that does not exist is named."""
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):  # requests' bundle, whatever the machine set
        monkeypatch.delenv(variable, raising=False)
    pki = tmp_path / "pki"
    pki.mkdir()
    make_ca(pki, "ca")
    make_cert(pki, "placement", "ca", san="IP:127.0.0.1")
    tls = ServerTls(pki, "placement")
    with running_placement(tmp_path / "placement", tls=tls) as server:
        assert server.base_url.startswith("https://")
        host = unique("tls")
        PlacementLoader(server.base_url, context=tls.client_context()).load(
            {"providers": [{"name": host, "inventories": nova_inventories(8, 16384, 100)}]}
        )

        section = PlacementSection(endpoint=server.base_url, timeout=TIMEOUT, ca_file=str(tls.ca))
        tree = PlacementReader(section).read_trees({host: host}).trees[host]
        assert tree is not None and tree.root_name == host
        assert tree.root["VCPU"].total == 8

        untrusted = failing_round(reader(server.base_url), {host: host})
        assert "placement.ca_file" in str(untrusted)
        missing = str(pki / "missing.crt")
        absent = PlacementSection(endpoint=server.base_url, timeout=TIMEOUT, ca_file=missing)
        assert missing in str(failing_round(PlacementReader(absent), {host: host}))


class _ForwardProxy(MisbehavingProxy):
    """An HTTP forward proxy to Placement (requests with absolute URIs): what it carried, with
    the credentials it was given."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.carried: list[str] = []
        self.credentials: set[str | None] = set()

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        target = urllib.parse.urlsplit(path)
        if not target.scheme:
            return 400, [("Content-Type", "text/plain")], b"expected an absolute URI\n"
        self.carried.append(target.path)
        given = [value for name, value in headers.items() if name.lower() == "proxy-authorization"]
        self.credentials.add(given[0] if given else None)
        kept = {name: value for name, value in headers.items() if name.lower() != "proxy-authorization"}
        query = f"?{target.query}" if target.query else ""
        return self.forward(method, target.path + query, kept, body)


def test_the_environments_proxy_settings_are_followed(
    placement: PlacementServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests' rules for the environment: `http_proxy` carries the requests (with the
    credentials its URL gives), a proxy that refuses connections fails the round, and `no_proxy`
    naming Placement's host bypasses it."""
    host = unique("proxied")
    PlacementLoader(placement.base_url).load({"providers": [{"name": host}]})
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    proxy = _ForwardProxy(placement.base_url)
    with proxy:
        port = proxy.base_url.rsplit(":", maxsplit=1)[1]
        monkeypatch.setenv("http_proxy", f"http://virtcap:pr%40xy@127.0.0.1:{port}")
        tree = reader(placement.base_url).read_trees({host: host}).trees[host]
    assert tree is not None and tree.root_name == host
    assert "/resource_providers" in proxy.carried
    assert f"/resource_providers/{tree.root_uuid}/allocations" in proxy.carried
    assert proxy.credentials == {"Basic " + base64.b64encode(b"virtcap:pr@xy").decode()}
    refusing = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("http_proxy", refusing)
    failing_round(reader(placement.base_url), {host: host})
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    placement_reader = reader(placement.base_url)
    for _ in range(2):  # the second round with the pool the first one chose
        tree = placement_reader.read_trees({host: host}).trees[host]
        assert tree is not None and tree.root_name == host


class WrongShapes(MisbehavingProxy):
    """Placement's answers with one part replaced by JSON of another shape."""

    shape: tuple[str, object] = ("", None)

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        status, kept, answer = super().answer(method, path, headers, body)
        suffix, replacement = self.shape
        if suffix and path.split("?", maxsplit=1)[0].endswith(suffix):
            answer = json.dumps(replacement).encode()
        return status, kept, answer


@pytest.mark.parametrize(
    "shape",
    [
        ("/resource_providers", {"resource_providers": {"uuid": "not a list"}}),
        ("/resource_providers", [1, 2]),
        ("/inventories", {"inventories": {"VCPU": {"total": "sixteen"}}}),
        ("/allocations", {"allocations": {"c": {"VCPU": 1}}}),
    ],
)
def test_answers_of_another_shape_fail_the_round(
    placement: PlacementServer, shape: tuple[str, object]
) -> None:
    host = unique("shape")
    PlacementLoader(placement.base_url).load(
        {"providers": [{"name": host, "inventories": nova_inventories(4, 4096, 10)}]}
    )
    proxy = WrongShapes(placement.base_url)
    proxy.shape = shape
    with proxy:
        failing_round(reader(proxy.base_url), {host: host})


def test_errors_and_html_fail_the_round_and_it_recovers(placement: PlacementServer) -> None:
    host = unique("proxied")
    PlacementLoader(placement.base_url).load({"providers": [{"name": host}]})
    with MisbehavingProxy(placement.base_url) as proxy:
        placement_reader = reader(proxy.base_url)
        for misbehaviour in (Misbehaviour.SERVER_ERROR, Misbehaviour.HTML):
            proxy.misbehaviour = misbehaviour
            failing_round(placement_reader, {host: host})
        proxy.misbehaviour = Misbehaviour.FORWARD
        assert placement_reader.read_trees({host: host}).trees[host] is not None


def test_an_unreadable_secret_names_its_key_and_not_its_value(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    section = PlacementSection(
        endpoint="http://127.0.0.1:1",
        auth=PlacementAuth(
            type="password",
            auth_url="http://127.0.0.1:1/v3",
            username="u",
            project_name="p",
            password_file=str(missing),
        ),
    )
    with pytest.raises(PlacementError, match=r"placement\.auth\.password_file"):
        PlacementReader(section)


# Keystone: the password, application credential and token paths, the catalog, a refused role


@pytest.fixture(scope="module")
def keystone_placement(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Keystone, PlacementServer]]:
    venv = keystone_venv()
    if venv is None:
        pytest.skip("no Keystone virtualenv: scripts/keystone-venv.sh (make keystone-venv) installs it")
    directory = tmp_path_factory.mktemp("keystone")
    with (
        running_keystone(directory / "keystone", venv) as keystone,
        running_placement(directory / "placement", keystone) as server,
    ):
        keystone.register_placement(server.base_url)
        token = keystone.issue_token(*READER_USER)
        PlacementLoader(server.base_url, token=token).load(
            {"providers": [{"name": "kv1", "inventories": nova_inventories(4, 8192, 50)}]}
        )
        yield keystone, server


KEYSTONE_TIMEOUT = 10.0
"""Each request to Placement waits for Keystone to validate its token (no cache)."""


def keystone_reader(keystone: Keystone, endpoint: str | None, **auth: Any) -> PlacementReader:
    section = PlacementSection(
        endpoint=endpoint,
        interface="public",
        region_name="RegionOne",
        timeout=KEYSTONE_TIMEOUT,
        auth=PlacementAuth(auth_url=keystone.auth_url, **auth),
    )
    return PlacementReader(section)


def test_keystone_password_application_credential_and_token_read_trees(
    keystone_placement: tuple[Keystone, PlacementServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keystone, server = keystone_placement
    user, password = READER_USER
    (tmp_path / "password").write_text(password + "\n")
    credential, secret = keystone.application_credential(user, password)
    monkeypatch.setenv("VIRTCAP_TEST_AC_SECRET", secret)
    token = keystone.issue_token(user, password)
    (tmp_path / "token").write_text(token + "\n")
    readers: dict[str, dict[str, Any]] = {
        "password": dict(
            type="password", username=user, project_name="service", password_file=str(tmp_path / "password")
        ),
        "application_credential": dict(
            type="application_credential",
            application_credential_id=credential,
            application_credential_secret_env="VIRTCAP_TEST_AC_SECRET",
        ),
        "token": dict(type="token", project_name="service", token_file=str(tmp_path / "token")),
    }
    caplog.set_level(logging.DEBUG)
    for kind, auth in readers.items():
        # the catalog's placement endpoint for the password, the configured one for the others
        endpoint = None if kind == "password" else server.base_url
        tree = keystone_reader(keystone, endpoint, **auth).read_trees({"kv1": "kv1"}).trees["kv1"]
        assert tree is not None and tree.root["VCPU"].total == 4, kind
    assert any(record.name.startswith("keystoneauth") for record in caplog.records)
    for value in (password, secret, token):
        assert value not in caplog.text


def test_keystone_refusals_fail_the_round_plainly_without_the_secret(
    keystone_placement: tuple[Keystone, PlacementServer], tmp_path: Path
) -> None:
    keystone, server = keystone_placement
    wrong = f"wrong-{uuid.uuid4()}"
    (tmp_path / "wrong").write_text(wrong)
    refused = failing_round(
        keystone_reader(
            keystone,
            server.base_url,
            type="password",
            username=READER_USER[0],
            project_name="service",
            password_file=str(tmp_path / "wrong"),
        ),
        {"kv1": "kv1"},
        KEYSTONE_TIMEOUT,
    )
    assert wrong not in str(refused)
    auditor = f"auditor-{uuid.uuid4().hex[:8]}"
    keystone.add_user(auditor, "auditor-secret", role="reader")
    (tmp_path / "auditor").write_text("auditor-secret")
    forbidden = failing_round(
        keystone_reader(
            keystone,
            server.base_url,
            type="password",
            username=auditor,
            project_name="service",
            password_file=str(tmp_path / "auditor"),
        ),
        {"kv1": "kv1"},
        KEYSTONE_TIMEOUT,
    )
    assert "403" in str(forbidden) and "service role" in str(forbidden)
    assert "auditor-secret" not in str(forbidden)
    noauth = failing_round(reader(server.base_url), {"kv1": "kv1"})
    assert "401" in str(noauth)


class _TokenWitness(MisbehavingProxy):
    """Forwards, keeping the tokens the requests carried, in the order first seen."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.tokens: list[str] = []

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        token = next((value for name, value in headers.items() if name.lower() == "x-auth-token"), "")
        if token not in self.tokens:
            self.tokens.append(token)
        return super().answer(method, path, headers, body)


def test_a_revoked_token_is_renewed_and_the_request_retried(
    keystone_placement: tuple[Keystone, PlacementServer], tmp_path: Path
) -> None:
    """Placement answers 401 to a token Keystone revoked since the last round: the reader gets a
    new one from its credentials and the round goes on, as keystoneauth1's session would."""
    keystone, server = keystone_placement
    user, password = READER_USER
    (tmp_path / "password").write_text(password)
    witness = _TokenWitness(server.base_url)
    with witness:
        placement_reader = keystone_reader(
            keystone,
            witness.base_url,
            type="password",
            username=user,
            project_name="service",
            password_file=str(tmp_path / "password"),
        )
        assert placement_reader.read_trees({"kv1": "kv1"}).trees["kv1"] is not None
        assert len(witness.tokens) == 1
        keystone.revoke_token(witness.tokens[0])
        tree = placement_reader.read_trees({"kv1": "kv1"}).trees["kv1"]
    assert tree is not None and tree.root["VCPU"].total == 4
    assert len(witness.tokens) == 2


class _DeletingAfterTheList(MisbehavingProxy):
    """Forwards; once Placement has listed its providers, deletes some of them before the list
    reaches the reader: as if a compute node and a GPU were removed while a round runs."""

    def __init__(self, upstream: str, loader: PlacementLoader, doomed: list[str]) -> None:
        super().__init__(upstream)
        self.loader, self.doomed = loader, doomed

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        answered = super().answer(method, path, headers, body)
        if method == "GET" and path.split("?", maxsplit=1)[0] == "/resource_providers":
            while self.doomed:
                self.loader.call(
                    "DELETE",
                    f"/resource_providers/{self.loader.provider_uuid(self.doomed.pop())}",
                    expect=(204,),
                )
        return answered


def test_providers_deleted_during_a_round_are_left_out(placement: PlacementServer) -> None:
    stays, goes = unique("stays"), unique("goes")
    loader = PlacementLoader(placement.base_url)
    loader.load(
        {
            "providers": [
                {
                    "name": stays,
                    "inventories": nova_inventories(4, 8192, 100),
                    "children": [{"name": f"{stays}-gpu", "inventories": {"VGPU": {"total": 4}}}],
                },
                {"name": goes, "inventories": nova_inventories(4, 8192, 100)},
            ]
        }
    )
    with _DeletingAfterTheList(placement.base_url, loader, [goes, f"{stays}-gpu"]) as proxy:
        read = reader(proxy.base_url).read_trees({stays: stays, goes: goes})
    kept = read.trees[stays]
    assert kept is not None and kept.nested == {} and kept.root["VCPU"].total == 4
    assert read.trees[goes] is None
