"""The HTTP contract (virtcap.contract) sits below the service layer: it imports neither aiohttp nor
the web server nor anything above the claims, so that the dry run (service/dryrun.py) and the
capacity report (exposition) can use it; and nothing below it imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import virtcap

PACKAGE = Path(virtcap.__file__).parent

BELOW_THE_CONTRACT = ("claims", "fleet", "audit", "config", "model", "units")
"""The layers the contract may import, as the layers contract orders them (top to bottom)."""
ABOVE_THE_CONTRACT = ("commands", "web", "exposition", "service")


def imported_modules(path: Path) -> set[str]:
    """Every module the file imports by absolute name, and every name it imports from one."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _modules(*packages: str) -> list[Path]:
    paths: list[Path] = []
    for name in packages:
        package = PACKAGE / name
        paths.extend(sorted(package.rglob("*.py")) if package.is_dir() else [PACKAGE / f"{name}.py"])
    return [path for path in paths if path.is_file()]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "virtcap" and len(parts) > 1 else None


def test_the_contract_imports_neither_aiohttp_nor_a_layer_above_it() -> None:
    offenders = sorted(
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in _modules("contract")
        for module in imported_modules(path)
        if module.split(".")[0] == "aiohttp" or _layer(module) in ABOVE_THE_CONTRACT
    )
    assert offenders == []


def test_the_contract_imports_only_itself_and_the_layers_below() -> None:
    layers = {
        _layer(module) for path in _modules("contract") for module in imported_modules(path) if _layer(module)
    }
    assert layers - {"contract", "__version__", *BELOW_THE_CONTRACT} == set()


def test_nothing_below_the_contract_imports_it() -> None:
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in _modules(*BELOW_THE_CONTRACT)
        if any(_layer(module) == "contract" for module in imported_modules(path))
    )
    assert offenders == []


def test_the_service_layer_does_not_import_the_web_server() -> None:
    offenders = sorted(
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in _modules("service")
        for module in imported_modules(path)
        if module.split(".")[0] == "aiohttp" or _layer(module) in ("web", "commands")
    )
    assert offenders == []
