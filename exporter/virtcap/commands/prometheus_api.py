"""A small reader of Prometheus's HTTP API for `virtcap plan runway`: range queries
(`/api/v1/query_range`) and what their failures mean. The standard library's HTTP client: one
command, a few requests, nothing to keep open."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

MAX_POINTS = 11_000
"""Prometheus refuses a range query of more points per series than this."""


class PrometheusUnreachableError(Exception):
    """No answer: refused connection, unknown host, TLS failure, timeout."""


class PrometheusAnswerError(Exception):
    """An answer, but not a Prometheus API success: an HTTP error, another service's page, or
    Prometheus's own error (its message is kept)."""


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query's matrix: its labels and its samples (seconds, value)."""

    labels: dict[str, str]
    times: list[float]
    values: list[float]


@dataclass(frozen=True)
class Prometheus:
    url: str
    timeout: float = 120.0

    def query_range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """The matrix of `query` from `start` to `end` (seconds since the epoch) every `step`."""
        if (end - start) / step + 1 > MAX_POINTS:
            raise ValueError(
                f"{(end - start) / step + 1:.0f} points per series, above Prometheus's {MAX_POINTS}"
            )
        parameters = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = self._get("/api/v1/query_range", parameters)
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusAnswerError(f"{self.url}: a range query answered without a matrix")
        series = []
        for entry in data.get("result", []):
            try:
                labels = {str(k): str(v) for k, v in entry["metric"].items()}
                samples = entry.get("values", [])
                series.append(
                    RangeSeries(labels, [float(t) for t, _ in samples], [float(v) for _, v in samples])
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                raise PrometheusAnswerError(
                    f"{self.url}: a series of the matrix is not label and samples"
                ) from None
        return series

    def _get(self, path: str, parameters: dict[str, str]) -> Any:
        url = self.url.rstrip("/") + path + "?" + urllib.parse.urlencode(parameters)
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as error:
            # Prometheus answers a bad query with 400 and its error in JSON; others with their page
            body = error.read()
            message = _error_of(body) or f"HTTP {error.code}"
            raise PrometheusAnswerError(f"{self.url}: {message}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise PrometheusUnreachableError(
                f"cannot reach {self.url}: {getattr(error, 'reason', error)}"
            ) from None
        try:
            document = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            shown = body[:80].decode(errors="replace").strip()
            raise PrometheusAnswerError(f"{self.url}: not a Prometheus API answer: {shown!r}") from None
        if not isinstance(document, dict) or document.get("status") != "success" or "data" not in document:
            message = _error_of(body) or "no status success and data"
            raise PrometheusAnswerError(f"{self.url}: not a Prometheus API answer: {message}")
        return document["data"]


def _error_of(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return f"{document.get('errorType', 'error')}: {document['error']}"
    return None
