"""The oracle, started once per test session: importing Nova and migrating Placement's schema is
the slow part; every test then sends its questions in batches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.upstream import Oracle, running_oracle


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Oracle]:
    with running_oracle(tmp_path_factory.mktemp("oracle") / "oracle.log") as running:
        yield running
