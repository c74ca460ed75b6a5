"""GET requests to Placement over urllib3, with keystoneauth1 doing what it is for: the token and
the endpoint (the Keystone catalog's, or the configured one).

A round makes about two requests per provider, 2,000 for 1,000 hypervisors. Through
keystoneauth1's session and requests, each cost 0.85 ms of CPU here, urllib3's pool 0.32 ms
(docs/performance.md): the rest was the two libraries preparing, logging and merging settings for
every request. So keystoneauth1 is asked once a round for the endpoint and the token headers
(re-authenticating when the token is about to expire), and again after Placement answers 401, as
its own session would (the plugin invalidated, the request retried once); the requests go
through one urllib3 pool per proxy, with requests' own rules for the environment's proxies
(`*_proxy`, `no_proxy`) and CA bundle (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE), looked up once a
round rather than at every request.

Anything that goes wrong raises `PlacementError` with a one-line message without a secret, the
urllib3 or keystoneauth1 exception it replaces not chained to it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

import requests.utils
import urllib3
from keystoneauth1 import adapter, plugin, session
from keystoneauth1 import exceptions as ksa
from urllib3 import exceptions as u3

from virtcap.audit.placement_error import PlacementError
from virtcap.config.placement import PlacementSection

MICROVERSION = "1.39"
"""Placement 16's newest; `consumer_type` (1.38) is what tells a migration record apart."""
USER_AGENT = "virtcap"
_MESSAGE_CHARS = 300

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Answer:
    """Placement's answer to one GET."""

    status: int
    content_type: str
    """Without its parameters (`application/json`), "" when none was given."""
    body: bytes


@dataclass(frozen=True, slots=True)
class _Target:
    """Where this round's requests go, and with what."""

    endpoint: str
    headers: dict[str, str]
    pool: urllib3.PoolManager


class PlacementHttp:
    """Placement's endpoint and token from keystoneauth1, its answers through urllib3 (`get`).

    `begin` is called at the start of each round, `get` from any of the round's threads."""

    def __init__(
        self, section: PlacementSection, auth: plugin.BaseAuthPlugin, *, where: str, concurrency: int
    ) -> None:
        self._timeout = float(section.timeout)
        self._where = where
        self._ca_file = section.ca_file
        self._concurrency = max(1, concurrency)
        self._session = session.Session(
            auth=auth,
            verify=section.ca_file if section.ca_file is not None else True,
            timeout=self._timeout,
            user_agent=USER_AGENT,
        )
        self._adapter = adapter.Adapter(
            self._session,
            service_type="placement",
            interface=section.interface,
            region_name=section.region_name,
            endpoint_override=section.endpoint,
        )
        self._pools: dict[tuple[str | None, bool], urllib3.PoolManager] = {}
        """Per proxy (None: none) and whether Placement is reached over TLS, a pool of connections."""
        self._lock = threading.Lock()
        self._target: _Target | None = None

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.clear()
            self._pools.clear()
        self._session.session.close()

    def begin(self) -> None:
        """This round's endpoint and token (keystoneauth1 authenticates where it must)."""
        endpoint = self._keystone("/resource_providers", self._adapter.get_endpoint)
        if not endpoint:
            raise PlacementError(_NO_ENDPOINT)
        headers = self._auth_headers("/resource_providers")
        with self._lock:
            self._target = _Target(endpoint.rstrip("/"), headers, self._pool(endpoint))

    def get(self, path: str) -> Answer:
        """One GET of a path under the endpoint; a 401 retried once with a new token where the
        plugin can get one (not `auth: none`'s static token)."""
        target = self._target
        if target is None:
            raise ValueError("expected begin() first")
        answer = self._send(target, path)
        if answer.status != HTTPStatus.UNAUTHORIZED:
            return answer
        with self._lock:
            if self._target is target:  # the first of the round's threads refused this token
                if not self._keystone(path, self._session.invalidate):
                    return answer  # a static token: nothing to renew
                self._target = _Target(target.endpoint, self._auth_headers(path), target.pool)
            renewed = self._target
        if renewed is None or renewed is target:
            return answer
        return self._send(renewed, path)

    def _send(self, target: _Target, path: str) -> Answer:
        try:
            response = target.pool.request(
                "GET",
                target.endpoint + path,
                headers=target.headers,
                timeout=urllib3.Timeout(connect=self._timeout, read=self._timeout),
                retries=False,
            )
        except u3.HTTPError as error:
            raise PlacementError(self._failure(path, error)) from None
        kind = response.headers.get("Content-Type", "").split(";")[0].strip()
        return Answer(response.status, kind, response.data)

    def _auth_headers(self, path: str) -> dict[str, str]:
        found = self._keystone(path, self._session.get_auth_headers) or {}
        return {
            **found,
            "OpenStack-API-Version": f"placement {MICROVERSION}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **urllib3.make_headers(accept_encoding=True),
        }

    def _keystone(self, path: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except ksa.ClientException as error:
            raise PlacementError(self._keystone_failure(path, error)) from None

    def _pool(self, endpoint: str) -> urllib3.PoolManager:
        """The pool for the endpoint: through the proxy requests would choose from the
        environment (none where `no_proxy` names the host), verifying TLS with the CA file, or
        requests' CA bundle."""
        proxies = requests.utils.get_environ_proxies(endpoint)
        proxy: str | None = requests.utils.select_proxy(endpoint, proxies)
        secure = endpoint.lower().startswith("https:")
        key = (proxy, secure)
        found = self._pools.get(key)
        if found is not None:
            return found
        tls: dict[str, Any] = {}
        if secure:
            bundle = self._ca_bundle()
            where = "ca_cert_dir" if os.path.isdir(bundle) else "ca_certs"
            tls = {"cert_reqs": "CERT_REQUIRED", where: bundle}
        if proxy is None:
            pool = urllib3.PoolManager(num_pools=4, maxsize=self._concurrency, **tls)
        else:
            url = requests.utils.prepend_scheme_if_needed(proxy, "http")
            if not url.lower().startswith(("http:", "https:")):
                raise PlacementError(
                    f"the environment's proxy for {self._where} is {_without_credentials(url)}:"
                    " only HTTP and HTTPS proxies are supported (or name Placement's host in no_proxy)"
                )
            user, password = requests.utils.get_auth_from_url(url)
            proxy_headers = urllib3.make_headers(proxy_basic_auth=f"{user}:{password}") if user else None
            pool = urllib3.ProxyManager(
                url, num_pools=4, maxsize=self._concurrency, proxy_headers=proxy_headers, **tls
            )
        self._pools[key] = pool
        return pool

    def _ca_bundle(self) -> str:
        """requests' choice: the configured file, else REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE, else
        certifi's bundle."""
        if self._ca_file is not None:
            if not os.path.exists(self._ca_file):
                raise PlacementError(f"placement.ca_file: {self._ca_file} does not exist")
            return self._ca_file
        environment = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        return environment or requests.utils.DEFAULT_CA_BUNDLE_PATH

    def _failure(self, path: str, error: u3.HTTPError) -> str:
        # urllib3's NewConnectionError is a ConnectTimeoutError: the refusals first
        if isinstance(error, u3.ProxyError):
            reason = os_reason(error) or "refused"
            return f"GET {path}: cannot connect through the environment's proxy ({reason})"
        if isinstance(error, u3.SSLError):
            return f"GET {path}: TLS failed ({os_reason(error) or 'certificate'}): check placement.ca_file"
        if isinstance(error, u3.NewConnectionError | u3.ProtocolError):
            return f"GET {path}: cannot connect to {self._where} ({os_reason(error) or 'unreachable'})"
        if isinstance(error, u3.TimeoutError):
            return f"GET {path}: no answer within {self._timeout:g} s from {self._where}"
        return f"GET {path}: {type(error).__name__}: {first_line(error)}"

    def _keystone_failure(self, path: str, error: ksa.ClientException) -> str:
        if isinstance(error, ksa.ConnectTimeout):
            return f"GET {path}: no answer within {self._timeout:g} s from {self._where}"
        if isinstance(error, ksa.SSLError):
            return f"GET {path}: TLS failed ({os_reason(error) or 'certificate'}): check placement.ca_file"
        if isinstance(error, ksa.ConnectionError):
            return f"GET {path}: cannot connect to {self._where} ({os_reason(error) or 'unreachable'})"
        if isinstance(error, ksa.Unauthorized):
            return "Keystone refused virtcap's credentials (401): check placement.auth"
        if isinstance(error, ksa.EndpointNotFound | ksa.EmptyCatalog):
            return _NO_ENDPOINT
        if isinstance(error, ksa.HttpError):
            return f"Keystone answered {error.http_status} while authenticating: {first_line(error)}"
        return f"GET {path}: {type(error).__name__}: {first_line(error)}"


_NO_ENDPOINT = (
    "the Keystone catalog has no placement endpoint for this interface and region:"
    " check placement.interface and placement.region_name, or set placement.endpoint"
)


def _without_credentials(url: str) -> str:
    parsed = urllib3.util.parse_url(url)
    return parsed._replace(auth=None).url if parsed.auth else url


def os_reason(error: BaseException) -> str | None:
    """The operating system's reason (`Connection refused`) somewhere behind a wrapped error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        for argument in current.args:
            if isinstance(argument, OSError) and argument.strerror:
                return argument.strerror
        current = current.__cause__ or current.__context__
    return None


def first_line(value: object) -> str:
    text = str(value).strip().splitlines()
    line = text[0] if text else type(value).__name__
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."
