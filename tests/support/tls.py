"""Real certificates for TLS tests, made with openssl, and a client context that trusts them."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path


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


def client_context(pki: Path, certificate: str | None = None) -> ssl.SSLContext:
    """Trusts the CA `ca` of this folder; presents `certificate` when one is named."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if certificate is not None:
        context.load_cert_chain(pki / f"{certificate}.crt", pki / f"{certificate}.key")
    return context
