"""The model's tests are pure: no libvirtd, no PostgreSQL, no Prometheus, no process of any kind.

A test here that asks for a daemon's fixture is refused at collection, and one that starts a
process (a daemon, `virtcap serve`, promtool) fails at once: `pytest tests/model` stays a run of
seconds that needs nothing installed but the package. Such a test belongs to another folder."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

HERE = Path(__file__).parent
DAEMON_FIXTURES = frozenset({"libvirtd", "postgres", "claims_url"})
"""The fixtures of tests/conftest.py that start a daemon (or need one started)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in item.path.parents:
            continue
        wanted = DAEMON_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if wanted or item.get_closest_marker("libvirtd") is not None:
            raise pytest.UsageError(
                f"{item.nodeid} asks for {sorted(wanted) or 'libvirtd'}: tests/model is pure,"
                " move the test to the folder of the layer it needs"
            )


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every process the standard library starts goes through subprocess.Popen (asyncio's too)."""

    def refuse(self: subprocess.Popen[Any], args: Any, *more: Any, **options: Any) -> NoReturn:
        raise AssertionError(f"a model test started a process ({args!r}): tests/model is pure")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield
