"""Basic authentication against bcrypt hashes: hostile headers, timing, the bcrypt pool's bound."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from pathlib import Path
from statistics import median

import bcrypt
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from virtcap.config import ConfigError, load_config
from virtcap.config.bcrypt_hash import check_bcrypt_hash
from virtcap.web import auth

FAST_HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))
FAST_AUTH = auth.BasicAuth({"alice": FAST_HASH})


def basic(user: bytes | str, password: bytes | str) -> str:
    raw = (user.encode() if isinstance(user, str) else user) + b":"
    raw += password.encode() if isinstance(password, str) else password
    return "Basic " + base64.b64encode(raw).decode()


def allows(header: str | None) -> bool:
    return asyncio.run(FAST_AUTH.allows(header))


@pytest.mark.parametrize(
    "header",
    [
        basic("alice", "x" * 73),  # bcrypt raises beyond 72 bytes
        basic("alice", "s3cret" + "x" * 100),  # right prefix: no truncation lets it in either
        "Basic \u00e9\u00e9\u00e9\u00e9",  # non-ASCII: base64 raises ValueError, not binascii.Error
        "Basic \udce9\udce9",  # undecodable header bytes, as aiohttp hands them over
        "Basic !!!",
        "Basic YWxpY2U=",  # no colon
        basic(b"\xff\xfe", "s3cret"),  # a user name that is not UTF-8
        "Basic",
        "",
        "Bearer x",
    ],
)
def test_a_hostile_header_is_a_refusal(header: str) -> None:
    assert allows(header) is False


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(max_size=200).map(lambda text: "Basic " + text),
        st.binary(max_size=200).map(lambda raw: "Basic " + base64.b64encode(raw).decode()),
        st.tuples(st.sampled_from([b"alice", b"nobody"]), st.binary(max_size=120)).map(
            lambda pair: basic(pair[0], pair[1])
        ),
    )
)
def test_any_header_is_answered_with_a_verdict_never_an_exception(header: str) -> None:
    assert allows(header) is (header == basic("alice", "s3cret"))


def test_the_right_password_passes_and_the_scheme_is_case_insensitive() -> None:
    assert allows(basic("alice", "s3cret"))
    assert allows("basic " + basic("alice", "s3cret").split(" ", 1)[1])


class RecordingPool(auth.BcryptPool):
    """A real bcrypt pool that also notes which hash each check ran against."""

    def __init__(self) -> None:
        super().__init__(threads=1, max_pending=8)
        self.checked: list[bytes] = []

    def start(self, password: bytes, hashed: bytes) -> asyncio.Future[bool]:
        self.checked.append(hashed)
        return super().start(password, hashed)


def _cost(hashed: bytes) -> int:
    return int(hashed.split(b"$")[2])


@pytest.mark.parametrize("costs", [(10,), (4, 10, 10), (12, 4)])
def test_unknown_users_cost_one_bcrypt_check_at_the_users_cost(costs: tuple[int, ...]) -> None:
    """What makes an unknown user take as long as a known one (no timing measured here: that is a
    benchmark's business): each new password of an unknown user runs exactly one real bcrypt
    check, against a hash of the users' most common cost (the highest of equals), that refuses."""
    users = {f"user{n}": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=cost)) for n, cost in enumerate(costs)}
    pool = RecordingPool()
    basic_auth = auth.BasicAuth(users, pool=pool)
    typical = max(set(costs), key=lambda cost: (costs.count(cost), cost))

    async def refused(user: str, password: str) -> bool:
        return not await basic_auth.allows(basic(user, password))

    async def attempts() -> list[bool]:
        return [await refused(f"nobody-{n}", f"wrong-{n}") for n in range(3)] + [
            await refused("user0", "wrong-0")
        ]

    assert all(asyncio.run(attempts()))
    unknown, known = pool.checked[:3], pool.checked[3:]
    assert len(unknown) == 3 and all(_cost(hashed) == typical for hashed in unknown)
    assert all(hashed not in users.values() for hashed in unknown)
    assert known == [users["user0"]]


@pytest.mark.parametrize(
    "hashed",
    [
        bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode(),
        bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1),  # htpasswd
        bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4, prefix=b"2a")).decode(),
        "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG",  # exporter-toolkit's docs
    ],
    # named by prefix and cost, not by the random salts: every pytest-xdist worker collects the
    # same test ids
    ids=lambda hashed: hashed[:6],
)
def test_usable_bcrypt_hashes_pass_the_check(hashed: str) -> None:
    check_bcrypt_hash(hashed)


GOOD = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"


@pytest.mark.parametrize(
    ("hashed", "why"),
    [
        ("hunter2", "not a password"),
        (GOOD[:-1], "this one is 59 characters"),
        (GOOD + "x", "this one is 61 characters"),
        (GOOD[:20] + "!" + GOOD[21:], "other characters"),
        (GOOD.replace("$10$", "$03$"), "cost 03 is not between 04 and 31"),
        (GOOD.replace("$10$", "$32$"), "cost 32 is not between 04 and 31"),
        (GOOD.replace("$10$", "$99$"), "cost 99"),
        (GOOD.replace("$2y$", "$2x$"), "other characters"),
        ("$2y$10$" + "a" * 53, "not valid bcrypt base64"),  # a salt whose last character has stray bits
    ],
)
def test_unusable_bcrypt_hashes_are_refused_with_a_reason(hashed: str, why: str) -> None:
    with pytest.raises(ValueError, match="expected a bcrypt hash") as raised:
        check_bcrypt_hash(hashed)
    assert why in str(raised.value)


def test_a_flood_of_wrong_passwords_leaves_the_default_executor_free() -> None:
    # asyncio.to_thread stands for the renderer of /metrics. 24 checks outnumber the default
    # executor's threads on a small machine; bcrypt at cost 12 takes a quarter of a second or more.
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=12))})

    async def render_delay(attempt: int) -> float:
        flood = [
            asyncio.create_task(basic_auth.allows(basic("alice", f"wrong-{attempt}-{n}"))) for n in range(24)
        ]
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        await asyncio.to_thread(time.sleep, 0)
        delay = time.perf_counter() - started
        for task in flood:
            task.cancel()
        await asyncio.gather(*flood, return_exceptions=True)
        return delay

    async def delays() -> list[float]:
        return [await render_delay(attempt) for attempt in range(3)]

    assert median(asyncio.run(delays())) < 0.25


def test_checks_beyond_the_bound_are_answered_503_and_a_cached_scraper_still_passes() -> None:
    pool = auth.BcryptPool(threads=1, max_pending=4)
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))}, pool=pool)

    async def flood() -> tuple[list[web.Response | None], float, int]:
        assert await basic_auth.refusal(basic("alice", "right")) is None  # verified once, then cached
        tasks = [asyncio.create_task(basic_auth.refusal(basic("alice", f"wrong-{n}"))) for n in range(20)]
        await asyncio.sleep(0.01)
        peak = pool.pending
        started = time.perf_counter()
        assert await basic_auth.refusal(basic("alice", "right")) is None
        cached = time.perf_counter() - started
        return await asyncio.gather(*tasks), cached, peak

    answers, cached, peak = asyncio.run(flood())
    assert peak <= 4
    assert cached < 0.05
    statuses = Counter(answer.status for answer in answers if answer is not None)
    assert statuses == {401: 4, 503: 16}
    busy = next(answer for answer in answers if answer is not None and answer.status == 503)
    assert busy.headers["Retry-After"] == "1"
    assert pool.pending == 0
    assert basic_auth.checks_under_way == 0  # nothing is kept of the wrong passwords but their checks


def test_a_request_that_gives_up_frees_its_place_in_the_queue() -> None:
    pool = auth.BcryptPool(threads=1, max_pending=3)
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))}, pool=pool)

    async def give_up() -> int:
        tasks = [asyncio.create_task(basic_auth.allows(basic("alice", f"wrong-{n}"))) for n in range(3)]
        await asyncio.sleep(0.01)
        for task in tasks[1:]:  # still waiting for the one thread
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return pool.pending

    assert asyncio.run(give_up()) == 0


def test_the_same_credentials_sent_at_once_are_checked_once() -> None:
    # A batch from one client: the requests wait for the one check under way, and waiting takes
    # no place in the bound (one place here), so none is turned away as busy.
    pool = auth.BcryptPool(threads=1, max_pending=1)
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))}, pool=pool)

    async def batch(password: str) -> list[auth.Verdict]:
        return await asyncio.gather(*(basic_auth.verdict(basic("alice", password)) for _ in range(50)))

    assert asyncio.run(batch("right")) == [auth.Verdict.ALLOWED] * 50
    assert asyncio.run(batch("wrong")) == [auth.Verdict.REFUSED] * 50
    assert basic_auth.checks_under_way == 0
    assert pool.pending == 0


def test_requests_waiting_for_a_check_get_its_verdict_when_the_first_one_gives_up() -> None:
    pool = auth.BcryptPool(threads=1, max_pending=1)
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))}, pool=pool)

    async def scenario() -> tuple[list[auth.Verdict], bool]:
        first = asyncio.create_task(basic_auth.verdict(basic("alice", "right")))
        await asyncio.sleep(0.01)  # its check has begun
        waiting = [asyncio.create_task(basic_auth.verdict(basic("alice", "right"))) for _ in range(5)]
        await asyncio.sleep(0.01)
        first.cancel()
        verdicts = await asyncio.gather(*waiting)
        await asyncio.gather(first, return_exceptions=True)
        return verdicts, first.cancelled()

    verdicts, cancelled = asyncio.run(scenario())
    assert cancelled
    assert verdicts == [auth.Verdict.ALLOWED] * 5
    assert basic_auth.checks_under_way == 0


def test_a_check_nobody_waits_for_any_more_is_dropped() -> None:
    pool = auth.BcryptPool(threads=1, max_pending=2)
    basic_auth = auth.BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10))}, pool=pool)

    async def give_up() -> tuple[auth.Verdict, int]:
        busy = asyncio.create_task(basic_auth.verdict(basic("alice", "wrong-1")))  # holds the thread
        await asyncio.sleep(0.01)
        queued = [asyncio.create_task(basic_auth.verdict(basic("alice", "wrong-2"))) for _ in range(3)]
        await asyncio.sleep(0.01)
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        return await busy, pool.pending

    verdict, pending = asyncio.run(give_up())
    assert verdict is auth.Verdict.REFUSED
    assert pending == 0
    assert basic_auth.checks_under_way == 0


def test_new_users_replace_the_old_ones_and_their_cached_credentials() -> None:
    basic_auth = auth.BasicAuth({"alice": FAST_HASH})

    async def scenario() -> tuple[bool, bool, bool]:
        before = await basic_auth.allows(basic("alice", "s3cret"))
        basic_auth.replace_users({"bob": bcrypt.hashpw(b"other", bcrypt.gensalt(rounds=4))})
        return (
            before,
            await basic_auth.allows(basic("alice", "s3cret")),
            await basic_auth.allows(basic("bob", "other")),
        )

    assert asyncio.run(scenario()) == (True, False, True)


@pytest.mark.parametrize("hashed", [GOOD[:-1], GOOD.replace("$10$", "$99$"), "$2y$10$" + "a" * 53])
def test_an_unusable_writer_hash_is_a_configuration_error(tmp_path: Path, hashed: str) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text(f"claims:\n  writers: {{alice: '{hashed}'}}\n")
    with pytest.raises(ConfigError, match=r"claims\.writers\.alice: expected a bcrypt hash"):
        load_config(path)
