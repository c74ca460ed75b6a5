"""TLS, mutual TLS and basic auth from an exporter-toolkit web config, with real certificates."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from tests.serving import running_server


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip


def make_cert(directory: Path, name: str, ca: str, san: str | None = None) -> None:
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", cwd=directory)  # fmt: skip
    extensions = directory / f"{name}.ext"
    extensions.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", "-extfile", extensions.name,
            cwd=directory)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    make_ca(directory, "ca")
    make_ca(directory, "rogue-ca")
    make_cert(directory, "server", "ca", san="IP:127.0.0.1")
    make_cert(directory, "client", "ca")
    make_cert(directory, "rogue-client", "rogue-ca")
    return directory


def client_context(pki: Path, certificate: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if certificate is not None:
        context.load_cert_chain(pki / f"{certificate}.crt", pki / f"{certificate}.key")
    return context


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_tls(pki: Path, tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {pki}/server.crt, key_file: {pki}/server.key}}\n")
    context = client_context(pki)
    with running_server(["--demo", "--web.config.file", str(web)], tmp_path, ssl_context=context) as server:
        status, body = server.get("/metrics")
        assert status == 200 and b"hypervisor_up" in body
        plain = server.base_url.replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib_get(plain + "/metrics", None)


def test_mutual_tls(pki: Path, tmp_path: Path) -> None:
    # relative paths are relative to the web config file
    (tmp_path / "certs").symlink_to(pki)
    web = tmp_path / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        "  cert_file: certs/server.crt\n  key_file: certs/server.key\n  client_ca_file: certs/ca.crt\n"
    )
    with running_server(
        ["--demo", "--web.config.file", str(web)], tmp_path, ssl_context=client_context(pki, "client")
    ) as server:
        assert server.get("/metrics")[0] == 200
        for refused in (client_context(pki), client_context(pki, "rogue-client")):
            with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
                urllib_get(server.base_url + "/metrics", refused)


def test_basic_auth(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode().replace("$2b$", "$2y$", 1)
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    good = basic("prometheus", "s3cret")
    with running_server(["--demo", "--web.config.file", str(web)], tmp_path, headers=good) as server:
        for path in ("/metrics", "/probe?target=compute-01", "/", "/-/healthy"):
            assert server.get(path, headers=good)[0] == 200, path
            assert server.get(path)[0] == 401, path
            assert server.get(path, headers=basic("prometheus", "wrong"))[0] == 401, path
            assert server.get(path, headers=basic("nobody", "s3cret"))[0] == 401, path
            assert server.get(path, headers={"Authorization": "Basic !!!"})[0] == 401, path
            assert server.get(path, headers={"Authorization": "Bearer x"})[0] == 401, path


def urllib_get(url: str, context: ssl.SSLContext | None) -> int:
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        status: int = response.status
        return status


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("basic_auth_users: {alice: plaintext}", "expected a bcrypt hash"),
        ("tls_server_config: {cert_file: /nonexistent.crt, key_file: /nonexistent.key}", "cannot load"),
        ("tls_server_config: {cert_file: a.crt}", "tls_server_config.key_file: required key is missing"),
        ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: Sometimes}", "expected one of"),
        ("tls_config: {}", "unknown key 'tls_config'; expected one of: tls_server_config, basic_auth_users"),
        ("basic_auth_users: [", "invalid YAML"),
    ],
)
def test_a_bad_web_config_is_a_clear_startup_error(tmp_path: Path, content: str, message: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(content)
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "serve", "--demo", "--web.config.file", str(web)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert f"virtcap: configuration error: {web}" in result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
