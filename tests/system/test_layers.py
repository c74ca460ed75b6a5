"""The package's layers, as pyproject.toml's import-linter contract draws them, and no import cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = next(parent for parent in Path(__file__).resolve().parents if (parent / "pyproject.toml").is_file())


def test_the_layers_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_imports_itself_through_others() -> None:
    # With the imports under `if TYPE_CHECKING:`, which would otherwise hide a cycle.
    graph = grimp.build_graph("virtcap", exclude_type_checking_imports=False, cache_dir=None)
    imports_back = sorted(
        f"{importer} -> {imported}"
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if graph.chain_exists(importer=imported, imported=importer)
    )
    assert imports_back == []


def test_loading_a_configuration_does_not_import_the_web_server() -> None:
    # In a fresh interpreter: this one has imported aiohttp long since, for other tests.
    probe = "import sys, virtcap.config; print(sorted(m for m in sys.modules if m.startswith('aiohttp')))"
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert imported.strip() == "[]"
