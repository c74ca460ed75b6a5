"""The documentation holds together: every document a docstring, a comment or a page names is in the
repository, every page of docs/ is in the site's nav, and the README stays short (the rest is in
docs/, built by `mkdocs build --strict` in `make lint`)."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.support.files import ROOT

DOCS = ROOT / "docs"
README_MAX_LINES = 300

SKIPPED_DIRS = {"site", "build", "dist", "node_modules", "__pycache__"}
"""Build outputs and caches; hidden folders (.git, .venv...) are skipped too."""
COMMENTED_SUFFIXES = {".toml", ".yml", ".yaml", ".sh", ".jsonnet", ".libsonnet", ".cfg", ".ini"}
"""Files whose comments may name a document (not their values: generated rule files carry URLs)."""
COMMENTED_NAMES = {"Makefile", "Dockerfile"}

OWN_URL = re.compile(r"https?://github\.com/virtcap/virtcap/(?:blob|tree)/[^/\s]+/([^\s)'\"`#>]+)")
ANY_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
LINK = re.compile(r"\]\(([^)\s]+)\)")
DOCUMENT = re.compile(r"(?<![\w./-])([\w./-]*\w\.md)\b")

MOVED_INTO_DOCS = {
    "ACCOUNTING.md": "docs/accounting.md",
    "SCHEDULING.md": "docs/scheduling.md",
}
"""Documents cited before the documentation moved into docs/, and where their rules are now."""


def text_files() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(
            name
            for name in subfolders
            if not name.startswith(".") and name not in SKIPPED_DIRS and not name.endswith(".egg-info")
        )
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix in {".py", ".md"} | COMMENTED_SUFFIXES or name in COMMENTED_NAMES:
                yield path


COMMENT = re.compile(r"(?<![:\w])(?:#|//)(.*)$")
"""A `#` or `//` comment, not the `//` of a URL."""


def python_docstrings_and_comments(text: str) -> str:
    """Docstrings (and the other strings standing alone as statements: attribute docstrings) and
    comments: what a module says to its reader, not the strings its code works with."""
    found = [
        node.value.value
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    found += [token.string for token in tokens if token.type == tokenize.COMMENT]
    return "\n".join(found)


def searched_text(path: Path) -> str:
    """What of a file may name a document: a whole page, a Python module's docstrings and comments,
    the comments of anything else."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".md":
        return text
    if path.suffix == ".py":
        return python_docstrings_and_comments(text)
    return "\n".join(found.group(1) for line in text.splitlines() if (found := COMMENT.search(line)))


def repository_names() -> set[str]:
    return {path.name for path in text_files()}


def exists(name: str, named_in: Path, names: set[str]) -> bool:
    name = name.split("#", 1)[0]
    if not name:
        return True  # an anchor in the same page: mkdocs checks those
    candidates = (ROOT / name, named_in.parent / name, DOCS / name)
    return any(candidate.exists() for candidate in candidates) or ("/" not in name and name in names)


def named_documents(path: Path) -> Iterator[str]:
    text = searched_text(path)
    yield from OWN_URL.findall(text)
    text = ANY_URL.sub(" ", text)
    if path.suffix == ".md":
        for target in LINK.findall(text):
            if not target.startswith(("#", "mailto:")):
                yield target
    yield from DOCUMENT.findall(text)


def missing_documents() -> list[str]:
    names = repository_names()
    missing = []
    for path in text_files():
        for name in named_documents(path):
            if not exists(name, path, names):
                where = path.relative_to(ROOT)
                moved = MOVED_INTO_DOCS.get(Path(name.split("#", 1)[0]).name)
                hint = f": its content is in {moved}; cite that instead" if moved else ""
                missing.append(f"{where} names {name}, which is not in the repository{hint}")
    return sorted(set(missing))


def test_every_named_document_is_in_the_repository() -> None:
    missing = missing_documents()
    assert not missing, "\n".join(missing)


def test_the_check_sees_a_missing_document(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("See [the rules](nowhere.md) and ACCOUNTING.md.\n", encoding="utf-8")
    assert sorted(named_documents(page)) == ["ACCOUNTING.md", "nowhere.md", "nowhere.md"]
    assert not exists("nowhere.md", page, repository_names())
    assert exists("docs/accounting.md", page, repository_names())
    assert exists("runbook.md#virtcapexporterdown", page, repository_names())


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(entries: object) -> Iterator[str]:
        if isinstance(entries, str):
            yield entries
        elif isinstance(entries, list):
            for entry in entries:
                yield from pages(entry)
        elif isinstance(entries, dict):
            for value in entries.values():
                yield from pages(value)

    listed = list(pages(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is listed twice"
    assert set(listed) == {path.name for path in DOCS.glob("*.md")}


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, at most {README_MAX_LINES}: move the detail into a page of docs/"
    )
