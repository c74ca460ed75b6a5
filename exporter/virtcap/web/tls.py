"""TLS as a web config asks for it, where Go's names meet Python's ssl module and OpenSSL.

Apart from the file's schema because this is where the ssl module's limits are worked around, each
for a reason a reader of the schema need not carry: OpenSSL loads keys from files only (inline PEM
goes through an in-memory file, never a disk), would prompt for an encrypted key's password (and
hang a reload), sets one curve only, and keeps the first context's verification mode and protocol
versions when one is switched mid-handshake (hence a listening context that hands every new
connection to the newest good one). The client SAN check is here too: it reads the peer's verified
certificate, which only the TLS layer can vouch for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import ssl
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from aiohttp import web

from virtcap.config import ConfigError
from virtcap.web.webconfig_schema import Curve, TLSServerConfig

VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
"""Go's client_auth_type as a verify mode; the two that require a certificate without verifying it
have none, since Python's ssl module cannot do that (the file is refused at load)."""
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
OPENSSL_CIPHERS: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
"""None: a TLS 1.3 suite, which neither Go nor OpenSSL lets a cipher list restrict."""

OPENSSL_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}


class _EncryptedKeyError(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal, and a reload would hang on it.
    raise _EncryptedKeyError


def server_context(tls: TLSServerConfig, contents: Mapping[str, bytes], source: str) -> ssl.SSLContext:
    """The context `tls` describes, from the PEM `contents` read for it (cert, key, client_ca); a
    ConfigError naming the key of `source` at fault when OpenSSL will not take them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    where = f"{source}: tls_server_config"
    with warnings.catch_warnings():
        # TLS 1.0 and 1.1 are deprecated in Python too; the file asks for them explicitly.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = TLS_VERSIONS[tls.min_version]
        context.maximum_version = TLS_VERSIONS[tls.max_version]
    cert_key = "cert" if tls.cert else "cert_file"
    key_key = "key" if tls.key else "key_file"
    try:
        with _pem_file(contents["cert"]) as cert, _pem_file(contents["key"]) as key:
            context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKeyError:
        raise ConfigError(f"{where}.{key_key}: the key is encrypted; expected an unencrypted key") from None
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"{where}.{cert_key}/{key_key}: cannot load the certificate and key: {_reason(error)}"
        ) from None
    auth = tls.client_auth()
    context.verify_mode = VERIFY_MODES[auth]
    if context.verify_mode != ssl.CERT_NONE:
        ca_key = "client_ca" if tls.client_ca else "client_ca_file"
        try:
            context.load_verify_locations(cadata=contents["client_ca"].decode("ascii"))
        except (ValueError, ssl.SSLError) as error:
            raise ConfigError(f"{where}.{ca_key}: cannot load the client CA: {_reason(error)}") from None
    suites = [name for suite in tls.cipher_suites or [] if (name := OPENSSL_CIPHERS[suite])]
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError as error:
            raise ConfigError(
                f"{where}.cipher_suites: this OpenSSL offers none of them: {_reason(error)}"
            ) from None
    elif tls.cipher_suites:
        # Only TLS 1.3 suites listed: as in Go, TLS 1.2 then has no suite to offer.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        _prefer_curve(context, tls.curve_preferences, where)
    return context


def _prefer_curve(context: ssl.SSLContext, preferences: list[Curve], where: str) -> None:
    """The most preferred curve that this Python can set. Python's ssl module sets one curve only,
    and some builds (Debian 12's Python 3.11.2) cannot set X25519 through it although OpenSSL
    offers it: the next listed curve is taken then, and the file is refused only when none can."""
    reasons = []
    for curve in preferences:
        try:
            context.set_ecdh_curve(OPENSSL_CURVES[curve])
        except (ValueError, ssl.SSLError) as error:
            reasons.append(f"{curve}: {_reason(error)}")
            continue
        return
    raise ConfigError(f"{where}.curve_preferences: none can be offered here ({'; '.join(reasons)})")


def _reason(error: Exception) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return error.reason.lower().replace("_", " ")
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


@contextlib.contextmanager
def _pem_file(data: bytes) -> Iterator[str]:
    """A path to `data` for OpenSSL, which loads certificates and keys from files only: an
    in-memory file where Linux has them, so that an inline key never touches a disk."""
    if hasattr(os, "memfd_create"):
        descriptor = os.memfd_create("virtcap-pem", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            yield f"/proc/self/fd/{descriptor}"
        finally:
            os.close(descriptor)
        return
    with tempfile.TemporaryDirectory(prefix="virtcap-pem-") as directory:
        path = Path(directory) / "pem"
        path.write_bytes(data)
        path.chmod(0o600)
        yield str(path)


class ReloadingContext(ssl.SSLContext):
    """The context the listening socket is given once. It never sets up a connection itself: each
    new connection is set up by the newest good context instead, so that every setting (the
    certificate, the client CA, verification, protocol versions, ciphers) follows the file.

    A context switched in an sni_callback would not do: OpenSSL then takes the new certificate and
    CA store but keeps the verification mode and protocol versions of the first context.
    """

    newest: Callable[[], ssl.SSLContext]
    """The context in force now, which sets up each new connection."""

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.newest().wrap_bio(incoming, outgoing, server_side, server_hostname, session)

    def wrap_socket(  # noqa: PLR0917  (ssl.SSLContext.wrap_socket's parameters, positional as there)
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self.newest().wrap_socket(
            sock, server_side, do_handshake_on_connect, suppress_ragged_eofs, server_hostname, session
        )


def peer_has_san(request: web.Request, allowed: frozenset[str]) -> bool:
    """Whether the client's verified certificate carries an allowed SAN: a DNS name, e-mail
    address, IP address or URI written as Go writes them, compared exactly as exporter-toolkit does."""
    transport = request.transport
    ssl_object = None if transport is None else transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return False
    certificate = ssl_object.getpeercert()
    if not certificate:
        return False
    for kind, value in _subject_alt_names(certificate):
        if kind == "IP Address":
            try:
                written = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        elif kind in ("DNS", "email", "URI"):
            written = value
        else:
            continue
        if written in allowed:
            return True
    return False


def _subject_alt_names(certificate: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    entries = certificate.get("subjectAltName", ())
    if isinstance(entries, tuple):
        for entry in entries:
            if isinstance(entry, tuple) and len(entry) == 2:  # noqa: PLR2004  (a (type, value) pair)
                yield str(entry[0]), str(entry[1])
