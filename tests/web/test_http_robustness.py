"""Hostile HTTP against a real `virtcap serve`: every endpoint answers, never a 5xx, never a hang.

Requests are written on raw sockets, byte for byte, so that bodies can be split, chunked, stalled
or framed wrongly and headers can be anything; every socket has a timeout. The server logs at
debug level, and after each test its log holds no traceback and no error: a malformed request is
one line at debug level.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re
import socket
import string
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.claims_client import WRITER, write_config
from tests.support.serving import Server, running_server, wait_for
from virtcap.contract.bodies import BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES
from virtcap.contract.openapi import openapi_document
from virtcap.web.middleware import MAX_REQUEST_BYTES

TIMEOUT = 10.0
"""No answer within this many seconds is a hang."""
AT_ONCE = 2.0
"""An answer that needs nothing more from the client comes within this many seconds."""
AUTH = b"Authorization: Basic " + base64.b64encode(f"{WRITER[0]}:{WRITER[1]}".encode()) + b"\r\n"
CLAIM = b'{"hypervisor": "big", "memory": "1MiB", "ttl": "1h"}'
PATHS = [
    "/",
    "/metrics",
    "/probe",
    "/-/healthy",
    "/-/ready",
    "/api/v1/claims",
    "/api/v1/claims/{id}",
    "/api/v1/capacity",
    "/api/v1/placements",
    "/api/v1/plans/consolidation",
    "/api/v1/plans/scenarios",
    "/api/v1/reclaimable",
    "/api/v1/placement/drift",
    "/api/v1/openapi.json",
    "/api/v1/maintenance",
    "/api/v1/hypervisors/{id}/maintenance",
]
MAY_BE_UNAVAILABLE = {"/-/healthy", "/-/ready"}
"""The only paths where a 503 is an answer (a dead component, not ready yet), for this server:
its claims database accepts writes, so the claims API has no reason to say 503."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def read_reply(stream: BinaryIO, method: bytes = b"GET") -> Reply:
    """One HTTP/1.1 response, skipping interim 1xx ones (100 Continue)."""
    while True:
        status_line = stream.readline(65537)
        if not status_line:
            raise ConnectionError("the server closed the connection without an answer")
        status = int(status_line.split(b" ", 2)[1])
        headers: dict[str, str] = {}
        while (line := stream.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if status >= 200:
            break
    if method == b"HEAD" or status in (204, 304):
        return Reply(status, headers, b"")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int(stream.readline(1024).split(b";")[0], 16):
            body += stream.read(size)
            stream.readline(1024)
        stream.readline(1024)
        return Reply(status, headers, body)
    if "content-length" in headers:
        return Reply(status, headers, stream.read(int(headers["content-length"])))
    return Reply(status, headers, stream.read())


def exchange(
    address: tuple[str, int],
    parts: Sequence[bytes],
    pause: float = 0.0,
    replies: int = 1,
    method: bytes = b"GET",
    timeout: float = TIMEOUT,
) -> list[Reply]:
    """Write `parts` with `pause` between them, then read `replies` answers."""
    with socket.create_connection(address, timeout=timeout) as sock, sock.makefile("rb") as stream:
        for index, part in enumerate(parts):
            if index and pause:
                time.sleep(pause)
            sock.sendall(part)
        return [read_reply(stream, method) for _ in range(replies)]


def post_head(length: int | None = None, chunked: bool = False, auth: bool = True) -> bytes:
    head = b"POST /api/v1/claims HTTP/1.1\r\nHost: virtcap\r\nContent-Type: application/json\r\n"
    if auth:
        head += AUTH
    if length is not None:
        head += b"Content-Length: %d\r\n" % length
    if chunked:
        head += b"Transfer-Encoding: chunked\r\n"
    return head + b"\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("robustness")
    args = ["--config", str(write_config(directory)), "--log.level", "debug"]
    with running_server(args, directory) as running:
        yield running


def log_records(text: str) -> list[dict[str, str]]:
    """The server's logfmt lines as key=value pairs (values in quotes as JSON strings)."""
    records = []
    for line in text.splitlines():
        assert line.startswith("ts="), f"not one record a line: {line[:300]}"
        fields = {}
        for match in LOGFMT_FIELD.finditer(line):
            raw = match["value"]
            fields[match["key"]] = json.loads(raw) if raw.startswith('"') else raw
        records.append(fields)
    return records


LOGFMT_FIELD = re.compile(r'(?P<key>[^ =]+)=(?P<value>"(?:[^"\\]|\\.)*"|[^ ]*)')


def log_after(server: Server, start: int) -> list[dict[str, str]]:
    """The records logged since `start` (an offset in the log), once the server has logged a
    request made after everything before: what those logged is in."""
    mark = uuid.uuid4().hex
    status, _ = server.get(f"/-/healthy?log-mark={mark}")
    assert status == 200
    wait_for(lambda: mark in server.log_text()[start:], 10, what="the mark in the log")
    text = server.log_text()[start:]
    # whole lines only: the server may be writing the next record as the file is read
    return log_records(text[: text.rfind("\n") + 1])


@pytest.fixture(autouse=True)
def no_traceback_logged(server: Server) -> Iterator[None]:
    start = len(server.log_text())
    yield
    for record in log_after(server, start):
        assert record["level"] in {"debug", "info"}, record
        assert "Traceback" not in " ".join(record.values()), record


@pytest.fixture(scope="module")
def address(server: Server) -> tuple[str, int]:
    parsed = urllib.parse.urlsplit(server.base_url)
    assert parsed.hostname is not None and parsed.port is not None
    return parsed.hostname, parsed.port


def assert_healthy(address: tuple[str, int]) -> None:
    [reply] = exchange(address, [b"GET /-/healthy HTTP/1.1\r\nHost: virtcap\r\nConnection: close\r\n\r\n"])
    assert reply.status == 200, reply


def error_of(reply: Reply) -> str:
    document = reply.json()
    assert isinstance(document, dict) and isinstance(document["error"], str), reply
    return document["error"]


# --- bodies that arrive in pieces -------------------------------------------------------------


def test_a_body_in_two_writes_is_read_whole(address: tuple[str, int]) -> None:
    # the handler read what had arrived: the first piece alone, "not JSON"
    [reply] = exchange(address, [post_head(len(CLAIM)) + CLAIM[:9], CLAIM[9:]], pause=0.3)
    assert reply.status == 201, reply


def test_a_chunked_body_is_read_whole(address: tuple[str, int]) -> None:
    [reply] = exchange(
        address, [post_head(chunked=True) + chunk(CLAIM[:9]), chunk(CLAIM[9:]) + chunk(b"")], pause=0.3
    )
    assert reply.status == 201, reply
    one_byte_chunks = b"".join(chunk(CLAIM[i : i + 1]) for i in range(len(CLAIM))) + chunk(b"")
    [reply] = exchange(address, [post_head(chunked=True) + one_byte_chunks])
    assert reply.status == 201, reply


def test_a_body_over_the_limit_gets_413(address: tuple[str, int]) -> None:
    owner = b"x" * 1024
    over = [chunk(b'{"hypervisor": "big", "memory": 1, "owner": "')]
    over += [chunk(owner)] * (MAX_BODY_BYTES // len(owner) + 1) + [chunk(b'"}') + chunk(b"")]
    [reply] = exchange(address, [post_head(chunked=True), *over])
    assert reply.status == 413, reply
    assert "larger than" in error_of(reply)
    # a declared length over the limit is answered at once, without waiting for the body
    started = time.monotonic()
    [reply] = exchange(address, [post_head(10**9)])
    assert reply.status == 413, reply
    assert time.monotonic() - started < BODY_TIMEOUT_SECONDS


def test_a_stalled_body_gets_an_answer_and_nothing_else_waits(address: tuple[str, int]) -> None:
    # All at once: each waits out its bound, and meanwhile the server answers everyone else.
    stalls = {
        "half a body": [post_head(len(CLAIM)) + CLAIM[:9]],
        "headers only": [post_head(len(CLAIM))],
        "one chunk": [post_head(chunked=True) + chunk(CLAIM[:9])],
    }

    def stall(parts: list[bytes]) -> tuple[Reply, float]:
        started = time.monotonic()
        [reply] = exchange(address, parts, timeout=BODY_TIMEOUT_SECONDS + TIMEOUT)
        return reply, time.monotonic() - started

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(stalls)) as pool:
        futures = {name: pool.submit(stall, parts) for name, parts in stalls.items()}
        time.sleep(0.5)
        assert_healthy(address)
        for name in stalls:
            reply, waited = futures[name].result()
            assert reply.status == 408, (name, reply)
            assert "did not arrive" in error_of(reply)
            assert BODY_TIMEOUT_SECONDS - 0.5 < waited < BODY_TIMEOUT_SECONDS + 2, (name, waited)


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(post_head(len(CLAIM), auth=False), id="headers only"),
        pytest.param(post_head(len(CLAIM), auth=False) + CLAIM[:9], id="half a body"),
        pytest.param(post_head(chunked=True, auth=False), id="chunked, headers only"),
        pytest.param(post_head(chunked=True, auth=False) + chunk(CLAIM[:9]), id="one chunk"),
        pytest.param(
            post_head(chunked=True, auth=False)[:-2] + b"Authorization: Basic eDp5\r\n\r\n",  # x:y
            id="wrong password",
        ),
    ],
)
def test_a_refused_request_is_answered_before_its_body(address: tuple[str, int], head: bytes) -> None:
    # Authentication comes before the body: a client whose body stalls hears 401 at once.
    [reply] = exchange(address, [head], timeout=AT_ONCE)
    assert reply.status == 401, reply


def test_a_refused_request_sees_its_answer_whole_body_sent_or_not(address: tuple[str, int]) -> None:
    # The server answers before it reads the body, and reads the rest after: the client that goes
    # on sending sees the 401, not a reset, and the connection serves its next request.
    body = b"x" * (MAX_REQUEST_BYTES * 4)
    head = post_head(len(body), auth=False)
    then = b"GET /-/healthy HTTP/1.1\r\nHost: virtcap\r\nConnection: close\r\n\r\n"
    replies = exchange(address, [head + body + then], replies=2)
    assert [reply.status for reply in replies] == [401, 200], replies


# --- request lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "parts",
    [
        pytest.param([b"GET /\r\n"], id="HTTP/0.9"),
        pytest.param([b"GET /metrics\n"], id="HTTP/0.9, bare LF"),
        pytest.param([b"GE", b"T /api/v1/claims\r\n"], id="HTTP/0.9 in two writes"),
        pytest.param([b"POST /api/v1/claims\r\n"], id="HTTP/0.9 POST"),
        pytest.param([b"GET / HTTP/0.9\r\n"], id="version 0.9"),
        pytest.param([b"GET / HTTP/2.0\r\n\r\n"], id="version 2.0"),
    ],
)
def test_a_request_line_that_is_not_http1_is_refused_at_once(
    address: tuple[str, int], parts: list[bytes]
) -> None:
    # aiohttp took `GET /` for the start of a head and waited for the rest of it
    with socket.create_connection(address, timeout=AT_ONCE) as sock, sock.makefile("rb") as stream:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.1)
        reply = read_reply(stream)
        assert reply.status == 400, reply
        assert stream.read() == b""  # and the connection is closed


def test_a_malformed_request_is_one_line_at_debug_level(server: Server, address: tuple[str, int]) -> None:
    start = len(server.log_text())
    [reply] = exchange(address, [post_head(chunked=True) + b"zz\r\n" + CLAIM + b"\r\n0\r\n\r\n"])
    assert reply.status == 400, reply
    [reply] = exchange(address, [b"GET /\r\n"], timeout=AT_ONCE)
    assert reply.status == 400, reply
    malformed = [record for record in log_after(server, start) if record["msg"] == "malformed request"]
    assert len(malformed) == 2, malformed
    assert all(record["level"] == "debug" and record["error"] for record in malformed), malformed


# --- framing and headers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"X-Big: " + b"a" * 100_000 + b"\r\n", id="one 100 kB header"),
        pytest.param(b"".join(b"X-H%d: v\r\n" % i for i in range(500)), id="500 headers"),
        pytest.param(b"Cookie: " + b"c=" + b"b" * 9000 + b"\r\n", id="a cookie past the field limit"),
    ],
)
def test_huge_headers_get_4xx_not_a_reset(address: tuple[str, int], head: bytes) -> None:
    [reply] = exchange(address, [b"GET /metrics HTTP/1.1\r\nHost: virtcap\r\n" + head + b"\r\n"])
    assert 400 <= reply.status < 500, reply
    [reply] = exchange(address, [b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: virtcap\r\n\r\n"])
    assert 400 <= reply.status < 500, reply
    assert_healthy(address)


@pytest.mark.parametrize(
    "target",
    [
        *(f"GET {path.replace('{id}', 'none')}" for path in PATHS),
        "GET /nowhere",  # 404
        "PUT /metrics",  # 405
    ],
)
def test_an_expect_header_that_is_not_utf8_gets_417(address: tuple[str, int], target: str) -> None:
    # aiohttp's own Expect handler repeats the value in its 417, and cannot encode it: a 500
    request = target.encode() + b" HTTP/1.1\r\nHost: virtcap\r\nExpect: \x80\xff\r\nConnection: close\r\n\r\n"
    [reply] = exchange(address, [request])
    assert reply.status == 417, reply


def test_pipelined_requests_are_answered_in_order(address: tuple[str, int]) -> None:
    requests = (
        b"GET /-/healthy HTTP/1.1\r\nHost: virtcap\r\n\r\n"
        + post_head(len(CLAIM))
        + CLAIM
        + b"GET /api/v1/claims/none HTTP/1.1\r\nHost: virtcap\r\n\r\n"
        + post_head(chunked=True)
        + chunk(CLAIM)
        + chunk(b"")
        + b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: virtcap\r\nConnection: close\r\n\r\n"
    )
    replies = exchange(address, [requests], replies=5)
    assert [reply.status for reply in replies] == [200, 201, 404, 201, 200], replies
    # the same, cut in the middle of the second body
    cut = requests.index(CLAIM) + 5
    replies = exchange(address, [requests[:cut], requests[cut:]], pause=0.3, replies=5)
    assert [reply.status for reply in replies] == [200, 201, 404, 201, 200], replies


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(post_head()[:-2] + b"Content-Length: abc\r\n\r\n" + CLAIM, id="length not a number"),
        pytest.param(post_head()[:-2] + b"Content-Length: -1\r\n\r\n" + CLAIM, id="negative length"),
        pytest.param(
            post_head(len(CLAIM))[:-2] + b"Content-Length: 3\r\n\r\n" + CLAIM, id="two different lengths"
        ),
        pytest.param(
            post_head(len(CLAIM), chunked=True) + chunk(CLAIM) + chunk(b""), id="length and chunked"
        ),
        pytest.param(post_head(chunked=True) + b"zz\r\n" + CLAIM + b"\r\n0\r\n\r\n", id="chunk size not hex"),
        pytest.param(
            post_head(chunked=True) + b"5\r\n" + CLAIM + b"\r\n0\r\n\r\n", id="chunk longer than its size"
        ),
        pytest.param(post_head()[:-2] + b"Transfer-Encoding: gzip\r\n\r\n" + CLAIM, id="unknown coding"),
        pytest.param(
            post_head(len(CLAIM))[:-2] + b"Content-Encoding: gzip\r\n\r\n" + CLAIM, id="not gzip at all"
        ),
    ],
)
def test_bogus_framing_gets_4xx(address: tuple[str, int], request_bytes: bytes) -> None:
    [reply] = exchange(address, [request_bytes])
    assert 400 <= reply.status < 500, reply
    assert_healthy(address)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"hypervisor": "big\xff\xfe", "vcpu": 1}', id="invalid UTF-8"),
        pytest.param(b'{"hypervisor": "big", "vcpu": 1, "ttl": NaN}', id="NaN"),
        pytest.param(b'{"hypervisor": "big", "vcpu": 1, "ttl": -Infinity}', id="-Infinity"),
        pytest.param(b'{"hypervisor": "big", "vcpu": 1, "ttl": 1e999}', id="a float that overflows"),
        pytest.param(b'{"hypervisor": "big", "vcpu": 1, "ttl": 1' + b"0" * 400 + b"}", id="400-digit ttl"),
        pytest.param(b'{"hypervisor": "big", "memory": 1' + b"0" * 5000 + b"}", id="5000-digit size"),
        pytest.param(b'{"hypervisor": "big", "memory": 18446744073709551616}', id="2^64 bytes"),
        pytest.param(b'{"hypervisor": "big", "disk": "9999999999999TiB"}', id="a size past 2^63"),
        pytest.param(b"[" * 5000, id="5000 nested arrays"),
        pytest.param(b'{"a":' * 2500 + b"1" + b"}" * 2500, id="2500 nested objects"),
        pytest.param(b'{"hypervisor": "big", "vcpu": 1}' * 2, id="two documents"),
        pytest.param(b"", id="empty"),
    ],
)
def test_hostile_json_gets_400(address: tuple[str, int], body: bytes) -> None:
    [reply] = exchange(address, [post_head(len(body)) + body])
    assert reply.status == 400, reply
    assert error_of(reply)


# --- generated requests ---------------------------------------------------------------------------

visible = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
latin1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")
path_suffixes = st.sampled_from(["", "/", "//", "/..", "/%2e%2e", "%2F", "%00", "%ff", "%", ";x", "/x"])
query_values = st.text(max_size=20).map(lambda text: urllib.parse.quote(text, safe="")) | st.text(
    alphabet=visible.filter(lambda c: c not in "#"), max_size=20
)
queries = st.lists(
    st.tuples(
        st.sampled_from(["target", "name", "", "target[]"]) | st.text(visible, max_size=5), query_values
    ),
    max_size=3,
).map(lambda pairs: "&".join(f"{key}={value}" for key, value in pairs))
header_names = st.sampled_from(
    [
        "Accept",
        "Accept-Encoding",
        "Content-Type",
        "Content-Encoding",
        "Expect",
        "Range",
        "Cookie",
        "If-None-Match",
        "Origin",
        "X-Forwarded-For",
        "Upgrade",
    ]
) | st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=12).filter(
    lambda name: name.lower() not in {"content-length", "transfer-encoding", "connection", "authorization"}
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
claim_like = st.dictionaries(
    st.sampled_from(["hypervisor", "vcpu", "pcpu", "memory", "disk", "ttl", "domain_uuid", "owner"]),
    st.sampled_from(["big", "any", "small", "1GiB", "5m", 1, 0, -1, 2**63]) | json_values,
    max_size=6,
).map(lambda document: json.dumps(document).encode())
placement_like = st.dictionaries(
    st.sampled_from(["flavor", "count", "ignore_hosts", "force_hosts", "anti_affinity"]),
    st.sampled_from(["m1.small", "big", 1, 0, 1001, 2**63, ["big"], {"vcpu": 1, "memory": "1GiB"}, True])
    | json_values,
    max_size=5,
).map(lambda document: json.dumps(document).encode())
constants = st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"[" * 2000, b"\xff\xfe"])
bodies = (
    st.binary(max_size=200)
    | claim_like
    | placement_like
    | json_values.map(lambda v: json.dumps(v).encode())
    | constants
)


@st.composite
def http_requests(draw: st.DrawFn) -> tuple[bytes, bytes, str]:
    """The method, the request bytes, and the endpoint they are aimed at."""
    method = draw(
        st.sampled_from(["GET", "POST", "DELETE", "HEAD", "PUT", "PATCH", "OPTIONS"])
        | st.text(alphabet=string.ascii_uppercase, min_size=1, max_size=8)
    ).encode()
    endpoint = draw(st.sampled_from(PATHS))
    claim_id = draw(st.uuids().map(str) | st.text(visible, min_size=1, max_size=30))
    path = endpoint.replace("{id}", urllib.parse.quote(claim_id, safe="")) + draw(path_suffixes)
    query = draw(queries)
    target = (path + ("?" + query if query else "")).encode()
    headers = draw(st.dictionaries(header_names, st.text(latin1, max_size=60), max_size=5))
    body = draw(bodies) if draw(st.booleans()) else b""
    head = b"%s %s HTTP/1.1\r\nHost: virtcap\r\n" % (method, target)
    for name, value in headers.items():
        head += name.encode() + b": " + value.encode("latin-1") + b"\r\n"
    if draw(st.booleans()):
        head += AUTH
    if body or method in (b"POST", b"PUT", b"PATCH"):
        head += b"Content-Length: %d\r\n" % len(body)
    return method, head + b"Connection: close\r\n\r\n" + body, endpoint


@settings(max_examples=600, deadline=None)
@given(request=http_requests())
def test_no_request_makes_a_server_error_or_a_hang(
    address: tuple[str, int], request: tuple[bytes, bytes, str]
) -> None:
    method, raw, endpoint = request
    [reply] = exchange(address, [raw], method=method)
    if reply.status == 503:
        assert endpoint in MAY_BE_UNAVAILABLE, (raw[:300], reply)
    else:
        assert reply.status < 500, (raw[:300], reply)


credentials = (
    st.tuples(st.text(max_size=10), st.text(max_size=100))
    .map(lambda pair: ":".join(pair).encode())
    .map(lambda text: b"Basic " + base64.b64encode(text))
)
# bcrypt takes at most 72 bytes of password; the rest, as bytes that are not UTF-8
long_or_binary = st.binary(max_size=120).map(
    lambda raw: b"Basic " + base64.b64encode(WRITER[0].encode() + b":" + raw)
)
broken = st.text(latin1, max_size=80).map(lambda text: ("Basic " + text).encode("latin-1")) | st.binary(
    max_size=60
).filter(lambda raw: b"\r" not in raw and b"\n" not in raw and b"\0" not in raw)


@settings(max_examples=200, deadline=None)
@given(
    authorization=credentials | long_or_binary | broken,
    target=st.sampled_from(
        [b"GET /metrics", b"POST /api/v1/claims", b"DELETE /api/v1/claims/none", b"GET /api/v1/claims"]
    ),
)
def test_no_authorization_header_makes_a_server_error(
    address: tuple[str, int], authorization: bytes, target: bytes
) -> None:
    raw = target + b" HTTP/1.1\r\nHost: virtcap\r\nAuthorization: " + authorization + b"\r\n"
    if target.startswith(b"POST"):
        raw += b"Content-Length: %d\r\n" % len(CLAIM) + b"Connection: close\r\n\r\n" + CLAIM
    else:
        raw += b"Connection: close\r\n\r\n"
    [reply] = exchange(address, [raw])
    assert reply.status < 500, (raw, reply)


def test_the_body_bound_is_short_enough_to_wait_out() -> None:
    # The stalled-body tests wait it out; a longer bound would only hold sockets longer.
    assert 1 <= BODY_TIMEOUT_SECONDS <= 10


def test_every_endpoint_is_covered() -> None:
    served_here = {
        path.replace("/claims/{id}", "/claims/{claim_id}").replace("/hypervisors/{id}", "/hypervisors/{name}")
        for path in PATHS
    }
    assert set(openapi_document()["paths"]) <= served_here
