"""The one error a Placement round raises (audit/placement.py's reader), apart from the reader
itself: the service handles it without importing keystoneauth1 and requests, which only a
process that reads Placement needs (a tenth of a second of every `virtcap` command's start)."""

from __future__ import annotations


class PlacementError(Exception):
    """Placement could not be read this round; the message is one line, without a secret.
    `requests`: those the round made (the one that failed included)."""

    requests: int = 0


__all__ = ["PlacementError"]
