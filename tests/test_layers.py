"""The package's layers, as pyproject.toml's import-linter contract draws them."""

from __future__ import annotations

import subprocess
import sys


def test_loading_a_configuration_does_not_import_the_web_server() -> None:
    # In a fresh interpreter: this one has imported aiohttp long since, for other tests.
    probe = "import sys, virtcap.config; print(sorted(m for m in sys.modules if m.startswith('aiohttp')))"
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert imported.strip() == "[]"
