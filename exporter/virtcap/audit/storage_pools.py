"""Where a shared storage pool's data lives, from its XML definition (pure).

A pool of a network or shared type names, in its `<source>`, the servers that hold its data and
what it is on them. Hypervisors that share a pool give it names of their own, but the same
source: that is what tells that two of them see one pool (virtcap.model.storage).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

SHARED_POOL_TYPES = frozenset({"netfs", "iscsi", "iscsi-direct", "rbd", "gluster", "sheepdog", "vstorage"})
"""Storage pools whose volumes live on the network or on storage shared between hosts."""


@dataclass(frozen=True, slots=True)
class PoolSource:
    type: str
    hosts: tuple[str, ...]
    """Sorted, lower case; ports left out (a Ceph monitor answers on 3300 and 6789 alike)."""
    path: str


def pool_type(xml: str) -> str:
    """The pool's type attribute (`dir`, `netfs`, `rbd`...), empty where the XML has none."""
    return ET.fromstring(xml).get("type", "")


def shared_pool_source(xml: str) -> PoolSource | None:
    """The source of a pool of a shared type; None for a local pool (dir, logical, disk...) or one
    whose source names nothing to tell it by. ET.ParseError for XML that does not parse."""
    root = ET.fromstring(xml)
    kind = root.get("type", "")
    if kind not in SHARED_POOL_TYPES:
        return None
    source = root.find("source")
    if source is None:
        return None
    hosts = tuple(
        sorted(
            {name.strip().strip("[]").lower() for host in source.iter("host") if (name := host.get("name"))}
        )
    )
    name = (source.findtext("name") or "").strip()
    directory = _directory(source)
    device = next((path for d in source.iter("device") if (path := (d.get("path") or "").strip())), "")
    if kind == "netfs":
        path = directory
    elif kind == "gluster":  # a volume, and a directory within it
        path = name + ("" if directory in ("", "/") else directory)
    elif kind in ("iscsi", "iscsi-direct"):
        path = device
    else:  # rbd (the Ceph pool), sheepdog, vstorage
        path = name or directory or device
    if not hosts and not path:
        return None
    return PoolSource(kind, hosts, path)


def _directory(source: ET.Element) -> str:
    found = source.find("dir")
    path = ("" if found is None else found.get("path") or "").strip()
    stripped = path.rstrip("/")
    return stripped or path[:1]  # "/export/" and "/export" are one export; "/" stays "/"
