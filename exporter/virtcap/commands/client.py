"""The one HTTP client to a running exporter, for `virtcap place --url`, `virtcap claim` and
`virtcap maintenance`: which exporter and as whom (`--url`, `--user` with the password from
$VIRTCAP_PASSWORD, `--ca-file`), and what its answers and failures mean for the exit code."""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

PASSWORD_VARIABLE = "VIRTCAP_PASSWORD"
DEFAULT_URL = "http://localhost:10463"
EXIT_REFUSED = 1


class ExporterRefusedError(Exception):
    """The exporter answered with an HTTP error: its status and body, as sent."""

    def __init__(self, url: str, status: int, text: str) -> None:
        super().__init__(f"{url}: HTTP {status}")
        self.url = url
        self.status = status
        self.text = text


class ExporterUnreachableError(Exception):
    """No answer from the exporter: refused connection, TLS failure, timeout, a dropped reply."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True)
class Exporter:
    """A running exporter, and the credentials and CA to talk to it with."""

    url: str
    user: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Exporter:
        return cls(args.url, args.user, args.ca_file)

    def endpoint(self, path: str) -> str:
        return self.url.rstrip("/") + path

    def send(self, method: str, url: str, body: dict[str, Any] | None, timeout: float) -> bytes:
        """The answer's body; raises ExporterRefusedError or ExporterUnreachableError."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.user:
            password = os.environ.get(PASSWORD_VARIABLE, "")
            credentials = base64.b64encode(f"{self.user}:{password}".encode()).decode()
            headers["Authorization"] = "Basic " + credentials
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                answer: bytes = response.read()
                return answer
        except urllib.error.HTTPError as error:
            raise ExporterRefusedError(url, error.code, error.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as error:
            raise ExporterUnreachableError(self.url, getattr(error, "reason", error)) from None


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Which exporter, and as whom: `--url`, `--user` (the password from $VIRTCAP_PASSWORD) and
    `--ca-file`."""
    parser.add_argument("--url", default=DEFAULT_URL, help="the exporter (default: %(default)s)")
    parser.add_argument("--user", help=f"basic auth user; the password is read from ${PASSWORD_VARIABLE}")
    parser.add_argument("--ca-file", help="CA certificate to verify an HTTPS exporter with")


def add_answer_source(parser: argparse.ArgumentParser, path: str, method: str = "POST") -> None:
    """Where a dry run's answer comes from, and how it is shown: one audit of a fleet
    (`--config`, `--demo`) or a running exporter (`--url`, its API's `path`, as `--user` with
    `--ca-file`); `--format`."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--config",
        metavar="FILE",
        help="audit the fleet of this configuration once (default: the local qemu:///system)",
    )
    source.add_argument("--demo", action="store_true", help="audit the bundled demo fleet once")
    source.add_argument("--url", help=f"ask a running exporter instead ({method} {path})")
    parser.add_argument(
        "--user", help=f"with --url: basic auth user; the password is read from ${PASSWORD_VARIABLE}"
    )
    parser.add_argument("--ca-file", help="with --url: CA certificate to verify an HTTPS exporter with")
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )


def call_api(args: argparse.Namespace, method: str, url: str, body: dict[str, Any] | None = None) -> int:
    """Send the request with `add_server_arguments`' credentials and CA; print the JSON answer
    (to stderr when refused). Exit 0 on success, 1 when refused or unreachable."""
    try:
        answer = Exporter.from_args(args).send(method, url, body, timeout=30)
    except ExporterRefusedError as error:
        try:
            print(json.dumps(json.loads(error.text), indent=2), file=sys.stderr)
        except json.JSONDecodeError:
            print(f"virtcap: {method} {url}: HTTP {error.status}: {error.text.strip()}", file=sys.stderr)
        return EXIT_REFUSED
    except ExporterUnreachableError as error:
        print(f"virtcap: cannot reach {error.url}: {error.reason}", file=sys.stderr)
        return EXIT_REFUSED
    if not answer.strip():
        return 0
    try:
        document = json.loads(answer)
    except (json.JSONDecodeError, UnicodeDecodeError):
        # not virtcap at that URL (a proxy's page, another service): say so rather than crash
        shown = answer[:200].decode(errors="replace").strip()
        print(f"virtcap: {method} {url}: the answer is not JSON: {shown!r}", file=sys.stderr)
        return EXIT_REFUSED
    print(json.dumps(document, indent=2))
    return 0
