"""The command line is the top layer: nothing else in the package imports `virtcap.commands`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import virtcap

PACKAGE = Path(virtcap.__file__).parent
ENTRY_POINTS = {PACKAGE / "__main__.py"}


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def imports_commands(path: Path) -> bool:
    return any(name.split(".")[:2] == ["virtcap", "commands"] for name in imported_modules(path))


def test_nothing_below_the_commands_imports_them() -> None:
    commands = PACKAGE / "commands"
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if commands not in path.parents and path not in ENTRY_POINTS and imports_commands(path)
    )
    assert offenders == []


def test_the_commands_module_exists_for_each_subcommand() -> None:
    from virtcap.commands.main import build_parser  # noqa: PLC0415  (the test's subject)

    parser = build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    assert isinstance(subparsers.choices, dict)
    assert list(subparsers.choices) == ["audit", "serve", "capture", "place", "plan", "claim", "maintenance"]
    for name in subparsers.choices:
        assert (PACKAGE / "commands" / f"{name}.py").is_file()


def test_the_commands_start_without_the_clients_of_services_they_may_not_use() -> None:
    """psycopg (shared claims) and keystoneauth1 with requests (Placement) are imported where they
    are used: every `virtcap` process imported them at its start, a fifth of its imports."""
    probe = (
        "import sys, virtcap.commands.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in sys.argv[1:]))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe, "psycopg", "keystoneauth1", "requests"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "[]"


def test_a_command_line_imports_the_module_of_the_subcommand_it_names_alone() -> None:
    """`virtcap claim ...` does not import the web server nor the audits: most of a short
    command's CPU was the imports of every other subcommand (aiohttp's server for `serve`)."""
    probe = (
        "import sys, contextlib\n"
        "from virtcap.commands.main import main\n"
        "with contextlib.redirect_stdout(None), contextlib.suppress(SystemExit):\n"
        "    main([sys.argv[1], '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('virtcap.commands.') or m == 'aiohttp.web'))"
    )
    for name in ("claim", "maintenance", "capture", "serve"):
        found = subprocess.run(
            [sys.executable, "-c", probe, name], capture_output=True, text=True, check=True
        )
        modules = set(ast.literal_eval(found.stdout.strip()))
        subcommands = {module for module in modules if module.count(".") == 2} - {
            "virtcap.commands.main",
            "virtcap.commands.arguments",
            "virtcap.commands.client",
        }
        assert subcommands == {f"virtcap.commands.{name}"}, (name, sorted(modules))
        assert ("aiohttp.web" in modules) == (name == "serve"), name
