"""HTTP basic authentication against bcrypt hashes, as exporter-toolkit's web config does it."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib

import bcrypt

_VERIFIED_CACHE_LIMIT = 1024


class BasicAuth:
    """bcrypt is slow by design: checks run in a thread, and verified credentials are remembered
    (as a digest) so that a scraper pays for bcrypt once, not on every scrape."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._verified: set[bytes] = set()

    async def allows(self, header: str | None) -> bool:
        if header is None or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed))).digest()
        if key in self._verified:
            return True
        if not await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed):
            return False
        if len(self._verified) >= _VERIFIED_CACHE_LIMIT:
            self._verified.clear()
        self._verified.add(key)
        return True
