"""A database URL as logs, pages and errors show it (claims/backends.py, claims/postgres.py)."""

from __future__ import annotations

import contextlib
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def redact(url: str) -> str:
    """The URL without any password, for logs, pages and errors: user, host, port, database and
    the parameters that are no secret."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.hostname and ":" in parts.hostname:
        netloc = f"[{parts.hostname}]"
    with contextlib.suppress(ValueError):
        if parts.port is not None:
            netloc += f":{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    query = urlencode(
        [(key, value) for key, value in parse_qsl(parts.query) if "password" not in key.lower()]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


__all__ = ["redact"]
