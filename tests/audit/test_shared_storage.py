"""Shared storage pools: read from each hypervisor's pool definitions, matched by their source, and
exposed once per pool however many hypervisors see it."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from tests.support.factories import host
from tests.support.serving import Samples, parse_samples, series, value
from virtcap.audit.capture import capture_host
from virtcap.audit.capture_format import Answer, CaptureDocument, encode_capture
from virtcap.audit.connection import open_read_only
from virtcap.audit.libvirt_api import StoragePoolInfo
from virtcap.audit.storage_pools import PoolSource, shared_pool_source
from virtcap.config import parse_config
from virtcap.exposition.families import render, views
from virtcap.exposition.fragments import FragmentCache
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import HostFacts, SharedPoolFacts
from virtcap.model.storage import shared_pools
from virtcap.service.oneshot import audit_fleet_once

GIB = 1024**3
TIB = 1024**4

NFS = """<pool type='netfs'><name>{name}</name>
  <source><host name='{server}'/><dir path='{export}'/><format type='nfs'/></source>
  <target><path>/var/lib/nova/instances</path></target></pool>"""
RBD = """<pool type='rbd'><name>{name}</name>
  <source><name>{ceph_pool}</name>{monitors}
    <auth type='ceph' username='nova'><secret uuid='x'/></auth></source>
</pool>"""
ISCSI = """<pool type='iscsi'><name>san</name>
  <source><host name='portal'/><device path='iqn.2013-06.com.example:lun1'/></source>
  <target><path>/dev/disk/by-path</path></target></pool>"""
GLUSTER = """<pool type='gluster'><name>g</name>
  <source><name>gv0</name><host name='g1'/><dir path='/vms'/></source></pool>"""
DIR = "<pool type='dir'><name>default</name><target><path>/var/lib/libvirt/images</path></target></pool>"


def rbd(name: str, ceph_pool: str, *monitors: str) -> str:
    """Monitors as `host` or `host:port`."""
    hosts = "".join(
        f"<host name='{host}' port='{port or 6789}'/>"
        for host, _, port in (m.partition(":") for m in monitors)
    )
    return RBD.format(name=name, ceph_pool=ceph_pool, monitors=hosts)


@pytest.mark.parametrize(
    ("xml", "source"),
    [
        (NFS.format(name="i", server="NFS1.example.com", export="/export/vms/"),
         PoolSource("netfs", ("nfs1.example.com",), "/export/vms")),
        (rbd("vms", "volumes", "10.0.0.2:3300", "10.0.0.1", "10.0.0.2:6789"),
         PoolSource("rbd", ("10.0.0.1", "10.0.0.2"), "volumes")),
        (ISCSI, PoolSource("iscsi", ("portal",), "iqn.2013-06.com.example:lun1")),
        (GLUSTER, PoolSource("gluster", ("g1",), "gv0/vms")),
        (DIR, None),
        ("<pool type='netfs'><name>bare</name><source/><target><path>/mnt</path></target></pool>", None),
    ],
)  # fmt: skip
def test_a_pool_is_told_by_its_type_servers_and_path(xml: str, source: PoolSource | None) -> None:
    assert shared_pool_source(xml) == source


def seen(name: str, pool: str, kind: str, hosts: tuple[str, ...], path: str, **sizes: int) -> SharedPoolFacts:
    return SharedPoolFacts(
        name=pool,
        type=kind,
        hosts=hosts,
        path=path,
        capacity_bytes=sizes.get("capacity", 10 * TIB),
        used_bytes=sizes.get("used", 1 * TIB),
        provisioned_bytes=sizes.get("provisioned", 15 * TIB),
        volumes=sizes.get("volumes", 30),
    )


def fleet(**pools: tuple[SharedPoolFacts, ...]) -> dict[str, HostFacts]:
    return {name: replace(host(), shared_pools=seen_there) for name, seen_there in pools.items()}


def test_two_hypervisors_on_one_export_see_one_pool_under_their_own_names() -> None:
    nfs = ("netfs", ("nfs1",), "/export/vms")
    (pool,) = shared_pools(fleet(a=(seen("a", "instances", *nfs),), b=(seen("b", "nova", *nfs),)))
    assert pool.key == "netfs://nfs1/export/vms"
    assert pool.members == (("a", "instances"), ("b", "nova"))
    assert (pool.capacity_bytes, pool.used_bytes, pool.provisioned_bytes) == (10 * TIB, 1 * TIB, 15 * TIB)
    assert pool.provisioned_ratio == 1.5


def test_another_export_or_server_is_another_pool() -> None:
    pools = shared_pools(
        fleet(
            a=(seen("a", "p", "netfs", ("nfs1",), "/export/vms"),),
            b=(seen("b", "p", "netfs", ("nfs1",), "/export/other"),),
            c=(seen("c", "p", "netfs", ("nfs2",), "/export/vms"),),
        )
    )
    assert [(p.key, p.members) for p in pools] == [
        ("netfs://nfs1/export/other", (("b", "p"),)),
        ("netfs://nfs1/export/vms", (("a", "p"),)),
        ("netfs://nfs2/export/vms", (("c", "p"),)),
    ]


def test_ceph_clients_listing_different_monitors_of_one_cluster_see_one_pool() -> None:
    """a and c share no monitor, but each shares one with b: one cluster. d's cluster is another."""
    pools = shared_pools(
        fleet(
            a=(seen("a", "rbd", "rbd", ("mon1", "mon2"), "volumes"),),
            b=(seen("b", "ceph", "rbd", ("mon2", "mon3"), "volumes"),),
            c=(seen("c", "rbd", "rbd", ("mon3",), "volumes"),),
            d=(seen("d", "rbd", "rbd", ("other-mon",), "volumes"),),
        )
    )
    assert [(p.key, p.servers, len(p.members)) for p in pools] == [
        ("rbd://mon1/volumes", ("mon1", "mon2", "mon3"), 3),
        ("rbd://other-mon/volumes", ("other-mon",), 1),
    ]


def test_sizes_come_from_the_latest_audit_and_a_pool_of_no_capacity_has_no_ratio() -> None:
    nfs = ("netfs", ("nfs1",), "/e")
    facts = fleet(a=(seen("a", "p", *nfs, used=1 * GIB),), b=(seen("b", "p", *nfs, used=2 * GIB),))
    facts["a"] = replace(facts["a"], audited_at=20.0)
    facts["b"] = replace(facts["b"], audited_at=10.0)
    (pool,) = shared_pools(facts)
    assert (pool.used_bytes, pool.sizes_from) == (1 * GIB, "a")
    facts["b"] = replace(facts["b"], audited_at=20.0)  # the same instant: the first by name
    assert shared_pools(facts)[0].sizes_from == "a"
    (empty,) = shared_pools(fleet(a=(seen("a", "p", *nfs, capacity=0),)))
    assert empty.provisioned_ratio is None


def test_hypervisors_without_shared_pools_show_none() -> None:
    assert shared_pools(fleet(a=(), b=())) == ()


# Through libvirt's test driver: hosts defined by node files, audited and rendered.

VOLUME = "<volume type='file'><name>{name}</name><capacity unit='GiB'>{gib}</capacity></volume>"


def netfs_pool(name: str, server: str, export: str, volumes: dict[str, int]) -> str:
    pool_uuid = uuid.uuid5(uuid.NAMESPACE_URL, name + server + export)
    return (
        f"<pool type='netfs'><name>{name}</name><uuid>{pool_uuid}</uuid>"
        f"<source><host name='{server}'/><dir path='{export}'/><format type='nfs'/></source>"
        f"<target><path>/mnt/{name}</path></target>"
        + "".join(VOLUME.format(name=volume, gib=gib) for volume, gib in volumes.items())
        + "</pool>"
    )


def node_file(directory: Path, name: str, *pools: str) -> str:
    path = directory / f"{name}.xml"
    path.write_text(
        "<node><cpu><mhz>2000</mhz><model>x86_64</model><active>4</active><nodes>1</nodes><sockets>1</sockets>"
        "<cores>4</cores><threads>1</threads></cpu><memory>8388608</memory>" + "".join(pools) + "</node>"
    )
    return f"test://{path}"


def rendered(directory: Path, hosts: dict[str, str]) -> Samples:
    config = parse_config(
        "hypervisors:\n" + "".join(f'  - {{name: {name}, uri: "{uri}"}}\n' for name, uri in hosts.items()),
        "inline",
    )
    store = SnapshotStore()
    store.track(list(hosts))
    for snapshot in asyncio.run(audit_fleet_once(config, cpu_window=0.0)):
        assert snapshot.up, snapshot.error
        store.record(snapshot, "success")
    fleet = views(store, time.time(), 600)
    body = render(fleet, {})
    assert FragmentCache().render(fleet, {}) == body
    return parse_samples(body.decode())


SHARED = {"vm-1.qcow2": 100, "vm-2.qcow2": 50}


def test_two_test_driver_hosts_on_one_export_give_one_pool(tmp_path: Path) -> None:
    a = node_file(tmp_path, "a", netfs_pool("instances", "nfs1", "/export/vms", SHARED))
    b = node_file(tmp_path, "b", netfs_pool("nova", "nfs1", "/export/vms/", SHARED))
    samples = rendered(tmp_path, {"a": a, "b": b})
    key = "netfs://nfs1/export/vms"
    assert series(samples, "hypervisor_storage_pool_info") == {
        frozenset({("hypervisor", "a"), ("pool", key), ("name", "instances")}): 1.0,
        frozenset({("hypervisor", "b"), ("pool", key), ("name", "nova")}): 1.0,
    }
    assert series(samples, "hypervisor_storage_pool_source_info") == {
        frozenset({("pool", key), ("type", "netfs"), ("servers", "nfs1"), ("path", "/export/vms")}): 1.0
    }
    assert value(samples, "hypervisor_storage_pool_hypervisors", pool=key) == 2
    capacity = value(samples, "hypervisor_storage_pool_capacity_bytes", pool=key)
    assert capacity is not None and capacity > 0
    assert value(samples, "hypervisor_storage_pool_provisioned_bytes", pool=key) == 150 * GIB
    assert value(samples, "hypervisor_storage_pool_provisioned_ratio", pool=key) == 150 * GIB / capacity
    assert value(samples, "hypervisor_storage_pool_volumes", pool=key) == 2
    assert len(series(samples, "hypervisor_storage_pool_capacity_bytes")) == 1


def test_another_export_is_another_pool_and_a_local_pool_none(tmp_path: Path) -> None:
    a = node_file(tmp_path, "a", netfs_pool("instances", "nfs1", "/export/vms", SHARED))
    b = node_file(
        tmp_path,
        "b",
        netfs_pool("instances", "nfs1", "/export/other", {"x.qcow2": 10}),
        "<pool type='dir'><name>default</name><target><path>/var/lib/libvirt/images</path></target></pool>",
    )
    samples = rendered(tmp_path, {"a": a, "b": b})
    assert {dict(labels)["pool"] for labels in series(samples, "hypervisor_storage_pool_capacity_bytes")} == {
        "netfs://nfs1/export/vms",
        "netfs://nfs1/export/other",
    }
    assert (
        value(samples, "hypervisor_storage_pool_provisioned_bytes", pool="netfs://nfs1/export/other")
        == 10 * GIB
    )
    assert value(samples, "hypervisor_storage_pool_hypervisors", pool="netfs://nfs1/export/vms") == 1


def ceph_capture(document: CaptureDocument, pool_name: str, monitors: tuple[str, ...]) -> bytes:
    """The captured host with its pool `placeholder` turned into a Ceph pool `pool_name` of 1 TiB
    on `monitors`, as another hypervisor of the same cluster would have it."""
    pools = document.storage_pools
    ceph = {
        "name": pool_name,
        "xml": Answer[str](value=rbd(pool_name, "volumes", *monitors)),
        "info": Answer[StoragePoolInfo](
            value=(libvirt.VIR_STORAGE_POOL_RUNNING, TIB, 100 * GIB, TIB - 100 * GIB)
        ),
    }

    def renamed(answer: Answer[list[str]]) -> Answer[list[str]]:
        return Answer[list[str]](
            value=[pool_name if name == "placeholder" else name for name in answer.get()]
        )

    storage = pools.model_copy(
        update={
            "pools": [p.model_copy(update=ceph) if p.name == "placeholder" else p for p in pools.pools],
            "listed": renamed(pools.listed),
            "active": renamed(pools.active),
        }
    )
    return encode_capture(document.model_copy(update={"storage_pools": storage}))


def test_ceph_pools_replayed_from_captures_are_one_pool_across_monitor_lists(tmp_path: Path) -> None:
    placeholder = (
        "<pool type='dir'><name>placeholder</name><target><path>/p</path></target>"
        + VOLUME.format(name="a.img", gib=100)
        + VOLUME.format(name="b.img", gib=200)
        + "</pool>"
    )
    live = node_file(tmp_path, "live", placeholder)
    conn = open_read_only(live)
    try:
        document = capture_host(conn, live)
    finally:
        conn.close()
    uris = {}
    for name, pool_name, monitors in (
        ("a", "ceph", ("MON2", "mon1:6789")),
        ("b", "vms", ("mon3", "mon2:3300")),
    ):
        path = tmp_path / f"{name}.json"
        path.write_bytes(ceph_capture(document, pool_name, monitors))
        uris[name] = f"replay://{path}"
    samples = rendered(tmp_path, uris)
    key = "rbd://mon1/volumes"
    assert series(samples, "hypervisor_storage_pool_info") == {
        frozenset({("hypervisor", "a"), ("pool", key), ("name", "ceph")}): 1.0,
        frozenset({("hypervisor", "b"), ("pool", key), ("name", "vms")}): 1.0,
    }
    assert series(samples, "hypervisor_storage_pool_source_info") == {
        frozenset({("pool", key), ("type", "rbd"), ("servers", "mon1,mon2,mon3"), ("path", "volumes")}): 1.0
    }
    assert value(samples, "hypervisor_storage_pool_capacity_bytes", pool=key) == TIB
    assert value(samples, "hypervisor_storage_pool_used_bytes", pool=key) == 100 * GIB
    assert value(samples, "hypervisor_storage_pool_provisioned_bytes", pool=key) == 300 * GIB
    assert value(samples, "hypervisor_storage_pool_provisioned_ratio", pool=key) == 300 / 1024
