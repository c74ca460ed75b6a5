"""TLS, mutual TLS and basic auth from an exporter-toolkit web config, with real certificates.

The `virtcap serve` tests run the real process; the others serve an aiohttp application with the
web config's own objects (WebConfigSource: context, middleware, headers) over real TLS.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web

from tests.support.serving import running_server, wait_for
from tests.support.tls import client_context, make_ca, make_cert
from virtcap.web.access import WebConfigSource
from virtcap.web.auth import BcryptPool
from virtcap.web.webconfig import load_web_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    make_ca(directory, "ca")
    make_ca(directory, "rogue-ca")
    make_cert(directory, "server", "ca", san="IP:127.0.0.1")
    make_cert(directory, "renewed-server", "ca", san="IP:127.0.0.1")
    make_cert(directory, "client", "ca")
    make_cert(directory, "named-client", "ca", san="DNS:scraper.example.net,IP:10.0.0.7")
    make_cert(directory, "rogue-client", "rogue-ca")
    return directory


def serve_args(web_file: Path) -> list[str]:
    return ["--demo", "--web.config.file", str(web_file)]


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def serial_of(pki: Path, name: str) -> str:
    result = subprocess.run(
        ["openssl", "x509", "-noout", "-serial", "-in", str(pki / f"{name}.crt")],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip().partition("=")[2].upper()


def served_serial(port: int, context: ssl.SSLContext) -> str:
    """The serial number of the certificate a new connection is served."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        certificate = tls.getpeercert()
    assert certificate is not None
    return str(certificate["serialNumber"]).upper()


def raw_status(port: int, authorization: bytes) -> int:
    """The status of a plain GET / whose Authorization header is sent as these exact bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "
            + authorization
            + b"\r\n\r\n"
        )
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def test_tls(pki: Path, tmp_path: Path) -> None:
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}\n")
    context = client_context(pki)
    with running_server(serve_args(web_file), tmp_path, ssl_context=context) as server:
        status, body = server.get("/metrics")
        assert status == 200 and b"hypervisor_up" in body
        plain = server.base_url.replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib_get(plain + "/metrics", None)


def test_mutual_tls(pki: Path, tmp_path: Path) -> None:
    # relative paths are relative to the web config file
    (tmp_path / "certs").symlink_to(pki)
    web_file = tmp_path / "web.yml"
    web_file.write_text(
        "tls_server_config:\n"
        "  cert_file: certs/server.crt\n  key_file: certs/server.key\n  client_ca_file: certs/ca.crt\n"
    )
    with running_server(serve_args(web_file), tmp_path, ssl_context=client_context(pki, "client")) as server:
        assert server.get("/metrics")[0] == 200
        for refused in (client_context(pki), client_context(pki, "rogue-client")):
            with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
                urllib_get(server.base_url + "/metrics", refused)


def test_request_client_cert_accepts_any_client_as_exporter_toolkit_does(pki: Path, tmp_path: Path) -> None:
    # Go asks for a certificate and verifies none: with or without one, valid or not, a client
    # gets in. Python could only ask by verifying, which refused the rogue certificate.
    web_file = tmp_path / "web.yml"
    web_file.write_text(
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key,"
        " client_auth_type: RequestClientCert}\n"
    )
    with running_server(serve_args(web_file), tmp_path, ssl_context=client_context(pki)) as server:
        for certificate in (None, "client", "rogue-client"):
            assert urllib_get(server.base_url + "/metrics", client_context(pki, certificate)) == 200


def test_basic_auth(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode().replace("$2b$", "$2y$", 1)
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    good = basic("prometheus", "s3cret")
    with running_server(serve_args(web_file), tmp_path, headers=good) as server:
        for path in ("/metrics", "/probe?target=compute-01", "/", "/-/healthy"):
            assert server.get(path, headers=good)[0] == 200, path
            assert server.get(path)[0] == 401, path
            assert server.get(path, headers=basic("prometheus", "wrong"))[0] == 401, path
            assert server.get(path, headers=basic("nobody", "s3cret"))[0] == 401, path
            assert server.get(path, headers={"Authorization": "Basic !!!"})[0] == 401, path
            assert server.get(path, headers={"Authorization": "Bearer x"})[0] == 401, path
        port = int(server.base_url.rpartition(":")[2])
        hostile = [
            b"Basic " + base64.b64encode(b"prometheus:" + b"s3cret" * 13),  # 78 bytes: bcrypt raises
            b"Basic \xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",  # UTF-8, not ASCII: base64 raises
            b"Basic \xe9\xe9\xe9\xe9",  # not even UTF-8
            b"Basic " + base64.b64encode(b"\xff\xfe:s3cret"),
            b"Basic cHJvbWV0aGV1cw",  # no padding, no colon
        ]
        for header in hostile:
            assert raw_status(port, header) == 401, header
        assert "Traceback" not in server.log_text()


def urllib_get(url: str, context: ssl.SSLContext | None) -> int:
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        status: int = response.status
        return status


HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"
TLS = "tls_server_config: {cert_file: /nonexistent.crt, key_file: /nonexistent.key"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("basic_auth_users: {alice: plaintext}", "basic_auth_users.alice: expected a bcrypt hash"),
        (f"basic_auth_users: {{alice: '{HASH[:-1]}'}}", "basic_auth_users.alice: expected a bcrypt hash"),
        (f"basic_auth_users: {{alice: '{HASH.replace('$10$', '$99$')}'}}", "its cost 99 is not between"),
        ("basic_auth_users: {alice: '$2y$10$" + "a" * 53 + "'}", "basic_auth_users.alice: expected a bcrypt"),
        ("basic_auth_users: {alice: '$2y$10$garbage'}", "basic_auth_users.alice: expected a bcrypt hash"),
        (f"{TLS}}}", "cannot read /nonexistent.crt"),
        ("tls_server_config: {cert_file: a.crt}", "tls_server_config.key_file: required key is missing"),
        (f"{TLS}, client_auth_type: Sometimes}}", "expected one of"),
        (f"{TLS}, client_auth_type: RequireAnyClientCert}}", "RequireAnyClientCert (a client certificate"),
        (f"{TLS}, client_auth_type: RequireClientCert}}", "expected one of: NoClientCert, RequestClientCert"),
        (f"{TLS}, client_auth_type: VerifyClientCertIfGiven}}", "needs client_ca_file"),
        (f"{TLS}, client_allowed_sans: [a]}}", "client_allowed_sans: needs a verified client certificate"),
        (f"{TLS}, cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]}}", "tls_server_config.cipher_suites[0]"),
        (f"{TLS}, min_version: TLS13, max_version: TLS12}}", "min_version: TLS13 is above max_version"),
        (f"{TLS}, min_version: SSL3}}", "tls_server_config.min_version: expected one of: 'TLS10'"),
        (f"{TLS}, curve_preferences: [X448]}}", "tls_server_config.curve_preferences[0]: expected one of"),
        ("http_server_config: {headers: {Server: virtcap}}", "headers.Server: cannot be configured"),
        ("http_server_config: {headers: {X-Frame-Options: allow}}", "expected one of: deny, sameorigin"),
        ("rate_limit: {interval: soon}", "rate_limit.interval: expected a duration"),
        (
            "tls_config: {}",
            "unknown key 'tls_config'; expected one of: "
            "tls_server_config, http_server_config, rate_limit, basic_auth_users",
        ),
        ("basic_auth_users: [", "invalid YAML"),
    ],
)
def test_a_bad_web_config_is_a_clear_startup_error(tmp_path: Path, content: str, message: str) -> None:
    web_file = tmp_path / "web.yml"
    web_file.write_text(content)
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "serve", "--demo", "--web.config.file", str(web_file)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"virtcap: configuration error: {web_file}")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_exporter_toolkit_settings_are_accepted_and_applied(pki: Path, tmp_path: Path) -> None:
    # A file exporter-toolkit takes as it is; here the TLS versions are what can be seen from outside.
    web_file = tmp_path / "web.yml"
    web_file.write_text(
        f"""
tls_server_config:
  cert_file: {pki}/server.crt
  key_file: {pki}/server.key
  client_ca_file: {pki}/ca.crt
  client_auth_type: VerifyClientCertIfGiven
  min_version: TLS13
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]
  prefer_server_cipher_suites: false
  curve_preferences: [X25519, CurveP256]
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    X-XSS-Protection: 1
    Strict-Transport-Security: max-age=31536000; includeSubDomains
    Content-Security-Policy: "default-src 'self'"
rate_limit:
  interval: 0
  burst: 0
"""
    )
    context = client_context(pki)
    with running_server(serve_args(web_file), tmp_path, ssl_context=context) as server:
        assert server.get("/metrics")[0] == 200
        tls12 = client_context(pki)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib_get(server.base_url + "/metrics", tls12)


def write_atomically(path: Path, text: str) -> None:
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def test_serve_follows_the_web_config_without_a_restart(pki: Path, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("server.crt", "server.key"):
        shutil.copy(pki / name, certs / name)
    web_file = tmp_path / "web.yml"
    web_file.write_text(
        "tls_server_config: {cert_file: certs/server.crt, key_file: certs/server.key}\n"
        "http_server_config: {headers: {X-Content-Type-Options: nosniff}}\n"
    )
    context = client_context(pki)
    with running_server(serve_args(web_file), tmp_path, ssl_context=context) as server:
        port = int(server.base_url.rpartition(":")[2])
        assert served_serial(port, context) == serial_of(pki, "server")
        request = urllib.request.Request(server.base_url + "/-/healthy")
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            assert response.headers["X-Content-Type-Options"] == "nosniff"
        write_atomically(certs / "server.key", (pki / "renewed-server.key").read_text())
        write_atomically(certs / "server.crt", (pki / "renewed-server.crt").read_text())
        renewed = serial_of(pki, "renewed-server")
        wait_for(lambda: served_serial(port, context) == renewed, 10, what="the renewed certificate")
        assert server.process.poll() is None


# In-process: the web config's objects in front of a small aiohttp application.


@contextlib.asynccontextmanager
async def serving(
    source: WebConfigSource, readers_skip: Callable[[web.Request], bool] | None = None
) -> AsyncIterator[int]:
    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello\n")

    middleware = source.middleware(readers_skip) if readers_skip else source.middleware()
    app = web.Application(middlewares=[middleware])
    app.on_response_prepare.append(source.add_headers)
    app.router.add_get("/", hello)
    app.router.add_post("/claims", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=source.ssl_context)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def fetch(
    port: int,
    context: ssl.SSLContext | None,
    path: str = "/",
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str]]:
    """One request on a new connection (a new TLS handshake each time)."""
    scheme = "https" if context is not None else "http"
    connector = aiohttp.TCPConnector(ssl=context if context is not None else False, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.request(method, f"{scheme}://127.0.0.1:{port}{path}", headers=headers) as response,
    ):
        await response.read()
        return response.status, dict(response.headers)


REFUSED_HANDSHAKE = (aiohttp.ClientError, ssl.SSLError, ConnectionError)


def test_a_rotated_certificate_and_a_new_client_policy_apply_to_the_next_connection(
    pki: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("server.crt", "server.key"):
        shutil.copy(pki / name, tmp_path / name)
    web_file = tmp_path / "web.yml"
    web_file.write_text("tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    source = WebConfigSource(web_file, check_interval=0)
    anonymous, with_certificate = client_context(pki), client_context(pki, "client")

    async def scenario() -> None:
        async with serving(source) as port:
            serial = await asyncio.to_thread(served_serial, port, anonymous)
            assert serial == serial_of(pki, "server")

            write_atomically(tmp_path / "server.key", (pki / "renewed-server.key").read_text())
            write_atomically(tmp_path / "server.crt", (pki / "renewed-server.crt").read_text())
            renewed = serial_of(pki, "renewed-server")
            assert await asyncio.to_thread(served_serial, port, anonymous) == renewed

            # A broken rotation (a key that is not PEM) is logged and the last good one stays.
            with caplog.at_level(logging.ERROR, logger="virtcap.web.webconfig"):
                write_atomically(tmp_path / "server.key", "not a key\n")
                assert await asyncio.to_thread(served_serial, port, anonymous) == renewed
                assert (await fetch(port, anonymous))[0] == 200
            assert [r.getMessage() for r in caplog.records].count(
                "web configuration not reloaded; the last good one stays"
            ) == 1
            write_atomically(tmp_path / "server.key", (pki / "renewed-server.key").read_text())

            # Verification mode comes with the new file too (an SNI context switch would keep
            # the first context's mode and let the anonymous client in).
            web_file.write_text(
                "tls_server_config: {cert_file: server.crt, key_file: server.key,"
                f" client_ca_file: {pki}/ca.crt}}\n"
            )
            assert (await fetch(port, with_certificate))[0] == 200
            with pytest.raises(REFUSED_HANDSHAKE):
                await fetch(port, anonymous)

    asyncio.run(scenario())


def test_users_headers_client_sans_and_rate_limit_follow_the_file(pki: Path, tmp_path: Path) -> None:
    alice = bcrypt.hashpw(b"alice-pw", bcrypt.gensalt(rounds=4)).decode()
    bob = bcrypt.hashpw(b"bob-pw", bcrypt.gensalt(rounds=4)).decode()
    tls = (
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key,"
        f" client_ca_file: {pki}/ca.crt, client_allowed_sans: [scraper.example.net, 10.0.0.9]}}\n"
    )
    headers = "http_server_config: {headers: {X-Frame-Options: deny, Content-Security-Policy: ''}}\n"
    web_file = tmp_path / "web.yml"
    web_file.write_text(tls + headers + f"basic_auth_users: {{alice: '{alice}'}}\n")
    source = WebConfigSource(web_file, check_interval=0)
    named, unnamed = client_context(pki, "named-client"), client_context(pki, "client")

    async def scenario() -> None:
        async with serving(source, readers_skip=lambda request: request.method == "POST") as port:
            status, answer = await fetch(port, named, headers=basic("alice", "alice-pw"))
            assert status == 200 and answer["X-Frame-Options"] == "deny"
            assert "Content-Security-Policy" not in answer  # blank: unset
            status, answer = await fetch(port, named)
            assert status == 401 and answer["X-Frame-Options"] == "deny"
            status, answer = await fetch(port, named, path="/nowhere", headers=basic("alice", "alice-pw"))
            assert status == 404 and answer["X-Frame-Options"] == "deny"
            assert (await fetch(port, named, method="POST", path="/claims"))[0] == 200  # exempted
            # The certificate is valid but names none of the allowed SANs.
            assert (await fetch(port, unnamed, headers=basic("alice", "alice-pw")))[0] == 403

            web_file.write_text(
                tls
                + "http_server_config: {headers: {X-Content-Type-Options: nosniff}}\n"
                + f"basic_auth_users: {{bob: '{bob}'}}\n"
                + "rate_limit: {interval: 1h, burst: 2}\n"
            )
            status, answer = await fetch(port, named, headers=basic("bob", "bob-pw"))
            assert status == 200 and answer["X-Content-Type-Options"] == "nosniff"
            assert "X-Frame-Options" not in answer
            assert (await fetch(port, named, headers=basic("alice", "alice-pw")))[0] == 401
            assert (await fetch(port, named, headers=basic("bob", "bob-pw")))[0] == 429

    asyncio.run(scenario())


def test_cipher_suites_and_curves_restrict_tls12_handshakes(pki: Path, tmp_path: Path) -> None:
    web_file = tmp_path / "web.yml"
    web_file.write_text(
        f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key,"
        " max_version: TLS12, cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384],"
        " curve_preferences: [CurveP384]}\n"
    )
    context = load_web_config(web_file).ssl_context
    assert context is not None

    def client(cipher: str, curve: str) -> ssl.SSLContext:
        tls12 = client_context(pki)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        tls12.set_ciphers(cipher)
        tls12.set_ecdh_curve(curve)
        return tls12

    async def handshake(port: int, client_context: ssl.SSLContext) -> str:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context)
        cipher = writer.get_extra_info("cipher")[0]
        writer.close()
        return str(cipher)

    async def scenario() -> None:
        server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            assert await handshake(port, client("ECDHE-RSA-AES256-GCM-SHA384", "secp384r1")) == (
                "ECDHE-RSA-AES256-GCM-SHA384"
            )
            for cipher, curve in (
                ("ECDHE-RSA-AES128-GCM-SHA256", "secp384r1"),  # a suite the file does not list
                ("ECDHE-RSA-AES256-GCM-SHA384", "prime256v1"),  # a curve the file does not list
            ):
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    await handshake(port, client(cipher, curve))
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_flood_of_wrong_passwords_is_answered_503_with_retry_after(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users: {{alice: '{hashed}'}}\n")
    source = WebConfigSource(web_file, bcrypt_pool=BcryptPool(threads=1, max_pending=2))

    async def scenario() -> list[tuple[int, dict[str, str]]]:
        async with serving(source) as port:
            started = time.monotonic()
            answers = await asyncio.gather(
                *(fetch(port, None, headers=basic("alice", f"wrong-{n}")) for n in range(30))
            )
            assert time.monotonic() - started < 30
            return answers

    answers = asyncio.run(scenario())
    statuses = {status for status, _ in answers}
    assert statuses == {401, 503}
    assert all(headers["Retry-After"] == "1" for status, headers in answers if status == 503)
