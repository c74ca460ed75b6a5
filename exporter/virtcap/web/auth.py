"""HTTP basic authentication against bcrypt hashes, as exporter-toolkit's web config does it.

- Any `Authorization` header is a plain refusal (401), never an error: not Basic, not ASCII, not
  base64, no colon, or a password over bcrypt's 72 bytes (refused outright, as Go's bcrypt does;
  the refusal says nothing about the user, so it needs no bcrypt to hide anything).
- An unknown user costs the same bcrypt check as a known one (against a dummy hash of the
  configured cost), so that response times do not tell which user names exist.
- bcrypt runs in a small pool of its own (`BcryptPool`), never in asyncio's default executor that
  renders /metrics. The pool bounds the checks running and waiting; beyond that bound a check is
  answered 503 with Retry-After at once instead of queueing without limit (503, not 429: the
  server is saturated, and the flood need not come from the client that is turned away).
- Verified credentials are remembered (as a digest) so that a scraper pays for bcrypt once; only
  successes enter that cache, so a flood of wrong passwords cannot evict a scraper's entry, and a
  cached scraper is never turned away by the flood. Failures are remembered in a small cache of
  their own, so that a client retrying the same wrong password costs no more bcrypt.
- Credentials already being checked are not checked again (single flight): a batch of requests
  sent at once with the same credentials waits for the one check and takes its verdict, and the
  waiting requests take no place in the pool's bound. The check belongs to no request: it goes on
  while any request still waits for it, whichever gave up, and is dropped when none does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import concurrent.futures
import dataclasses
import enum
import functools
import hashlib
import threading
from collections import Counter
from collections.abc import Mapping

import bcrypt
from aiohttp import web

from virtcap.config.bcrypt_hash import BCRYPT_HASH, MAX_COST, MIN_COST

MAX_PASSWORD_BYTES = 72
_VERIFIED_CACHE_LIMIT = 1024
_REFUSED_CACHE_LIMIT = 256
BCRYPT_THREADS = 2
BCRYPT_MAX_PENDING = 32
"""Checks running or waiting for a bcrypt thread: at cost 10 (70 ms) the last one waits about a
second, about the scrape timeout a new scraper would otherwise have run into."""
RETRY_AFTER_SECONDS = 1
_DEFAULT_COST = 10
"""The cost of the dummy hash that unknown users are checked against when no user has a hash."""


class BcryptBusyError(Exception):
    """Too many bcrypt checks are running or waiting: answer 503 rather than queue."""


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # hashes are checked at load; a refusal still beats an error
        return False


class BcryptPool:
    """bcrypt's own threads, apart from the default executor that renders /metrics."""

    def __init__(self, threads: int = BCRYPT_THREADS, max_pending: int = BCRYPT_MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="virtcap-bcrypt")
        self._lock = threading.Lock()
        self._pending = 0

    @property
    def pending(self) -> int:
        return self._pending

    async def check(self, password: bytes, hashed: bytes) -> bool:
        return await self.start(password, hashed)

    def start(self, password: bytes, hashed: bytes) -> asyncio.Future[bool]:
        """The check, under way; BcryptBusyError at once when the bound is reached.

        Cancelling the future drops the check if no thread has taken it up yet.
        """
        with self._lock:
            if self._pending >= self.max_pending:
                raise BcryptBusyError
            self._pending += 1
        try:
            future = self._executor.submit(_checkpw, password, hashed)
        except BaseException:
            self._finished(None)
            raise
        # Counted until the thread is done with it, not until the request gives up waiting: a
        # cancelled request must not make room for more work than the threads can do.
        future.add_done_callback(self._finished)
        return asyncio.wrap_future(future)

    def _finished(self, _future: concurrent.futures.Future[bool] | None) -> None:
        with self._lock:
            self._pending -= 1


_shared_pool: BcryptPool | None = None


def shared_bcrypt_pool() -> BcryptPool:
    """One pool for the whole process: readers and writers share its bound."""
    global _shared_pool  # noqa: PLW0603
    if _shared_pool is None:
        _shared_pool = BcryptPool()
    return _shared_pool


class Verdict(enum.Enum):
    ALLOWED = "allowed"
    REFUSED = "refused"
    BUSY = "busy"


def parse_basic_credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) as sent, or None for anything that is not Basic credentials."""
    # aiohttp hands over non-ASCII header bytes as text; base64 would raise ValueError on them.
    if header is None or not header.isascii():
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None


def _cache_key(user: bytes, password: bytes, hashed: bytes) -> bytes:
    digest = hashlib.sha256()
    for part in (user, password, hashed):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


def _dummy_hash(cost: int) -> bytes:
    """A well-formed hash that no password matches, checked at the same cost as the real ones."""
    salt = bcrypt.gensalt(rounds=cost)
    tail = bcrypt.hashpw(b"", bcrypt.gensalt(rounds=MIN_COST))[29:]
    return salt + tail


def _typical_cost(users: Mapping[str, bytes]) -> int:
    """The most common cost (the highest of equals): unknown users then take as long as most."""
    costs = [
        int(match[1])
        for hashed in users.values()
        if (match := BCRYPT_HASH.fullmatch(hashed.decode("ascii", "replace")))
        and MIN_COST <= int(match[1]) <= MAX_COST
    ]
    counts = Counter(costs or [_DEFAULT_COST])
    return max(counts, key=lambda cost: (counts[cost], cost))


@dataclasses.dataclass(eq=False)
class _Check:
    """One bcrypt check under way, and how many requests wait for its verdict."""

    matches: asyncio.Future[bool]
    waiting: int = 0


class BasicAuth:
    """Who may pass: user name to bcrypt hash. No users: nobody passes."""

    def __init__(
        self, users: Mapping[str, bytes], realm: str = "virtcap", pool: BcryptPool | None = None
    ) -> None:
        self.realm = realm
        self._pool = pool
        self._verified: set[bytes] = set()
        self._refused: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._checking: dict[bytes, _Check] = {}
        """The checks under way by credential digest: an entry lasts as long as its check."""
        self._users: dict[str, bytes] = {}
        self._generation = 0
        self._dummy: bytes | None = None
        self.replace_users(users)

    @property
    def checks_under_way(self) -> int:
        return len(self._checking)

    def replace_users(self, users: Mapping[str, bytes]) -> None:
        """New users (a reloaded configuration); unchanged users keep their cached credentials."""
        users = dict(users)
        if users == self._users:
            return
        self._users = users
        self._generation += 1  # a check under way for the old users must not fill the new caches
        self._dummy = _dummy_hash(_typical_cost(users)) if users else None
        # Entries of removed users or old hashes could never match again: drop what they hold.
        self._verified.clear()
        self._refused.clear()

    async def verdict(self, header: str | None) -> Verdict:
        credentials = parse_basic_credentials(header)
        if credentials is None or self._dummy is None:
            return Verdict.REFUSED
        user, password = credentials
        if len(password) > MAX_PASSWORD_BYTES:
            return Verdict.REFUSED
        try:
            hashed = self._users.get(user.decode("utf-8"))
        except UnicodeDecodeError:
            hashed = None
        known = hashed is not None
        checked = hashed if hashed is not None else self._dummy
        key = _cache_key(user, password, checked)
        if known and key in self._verified:
            return Verdict.ALLOWED
        if key in self._refused:
            self._refused.move_to_end(key)
            return Verdict.REFUSED
        check = self._checking.get(key)
        if check is None or check.matches.cancelled():
            pool = self._pool if self._pool is not None else shared_bcrypt_pool()
            try:
                check = _Check(pool.start(password, checked))
            except BcryptBusyError:
                return Verdict.BUSY
            self._checking[key] = check
            check.matches.add_done_callback(
                functools.partial(self._remember, key, check, known, self._generation)
            )
        matches = await _wait_for(check)
        if matches is None:
            return Verdict.BUSY
        return Verdict.ALLOWED if matches and known else Verdict.REFUSED

    def _remember(
        self, key: bytes, check: _Check, known: bool, generation: int, _done: asyncio.Future[bool]
    ) -> None:
        """The verdict of a finished check, into the caches, whether or not anyone still waits."""
        if self._checking.get(key) is check:
            del self._checking[key]
        if check.matches.cancelled() or check.matches.exception() is not None:
            return
        if generation != self._generation:
            return
        if check.matches.result() and known:
            if len(self._verified) >= _VERIFIED_CACHE_LIMIT:
                self._verified.clear()
            self._verified.add(key)
            return
        self._refused[key] = None
        if len(self._refused) > _REFUSED_CACHE_LIMIT:
            self._refused.popitem(last=False)

    async def allows(self, header: str | None) -> bool:
        return await self.verdict(header) is Verdict.ALLOWED

    async def refusal(self, header: str | None) -> web.Response | None:
        """None when the credentials pass; otherwise the answer to send: 401, or 503 when busy."""
        verdict = await self.verdict(header)
        if verdict is Verdict.ALLOWED:
            return None
        if verdict is Verdict.BUSY:
            return web.Response(
                status=503,
                text="Too many password checks at once; retry shortly\n",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        return unauthorized(self.realm)


async def _wait_for(check: _Check) -> bool | None:
    """The check's verdict; None when the check itself was cancelled (its pool shut down).

    The check is shielded: a request that gives up does not take the verdict from the others.
    """
    check.waiting += 1
    try:
        return await asyncio.shield(check.matches)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return None
    except Exception:  # a check that broke is a refusal, not an error (it is not remembered)
        return False
    finally:
        check.waiting -= 1
        if not check.waiting:
            check.matches.cancel()  # nobody waits any more: dropped unless a thread has begun it


def unauthorized(realm: str) -> web.Response:
    return web.Response(
        status=401, text="Unauthorized\n", headers={"WWW-Authenticate": f'Basic realm="{realm}"'}
    )
