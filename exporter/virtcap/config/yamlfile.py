"""YAML configuration files read safely, in bounded time and memory.

yaml.safe_load alone refuses arbitrary objects but not size: aliases let a 1 KiB file stand
for a billion values (the "billion laughs"), deep nesting makes PyYAML recurse past the
interpreter's limit and libyaml's parser slow down quadratically, and a file may be any size
or not text at all. Here every bound is checked while the document is composed, before
anything expensive happens:

- the file is at most MAX_FILE_BYTES, and no more than that is ever read;
- it is UTF-8 text with a single YAML document;
- values nest at most MAX_DEPTH deep and no scalar is longer than MAX_SCALAR_CHARS;
- the document holds at most MAX_VALUES values, each alias counted as a full copy of what it
  refers to, since that is what validating and printing the result would cost; an alias may
  not refer to a value that contains it;
- no mapping gives a key twice (YAML would keep the last one silently).

Every problem is a ConfigError of one line, `source[:line:column]: [key: ]what was expected`.
ConfigError lives here, below the rest of virtcap.config, so that any module reading YAML (the fleet
configuration, the web configuration) can use this one without an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeAlias, cast

import yaml
from yaml.constructor import SafeConstructor
from yaml.error import Mark, MarkedYAMLError
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError
from yaml.resolver import Resolver

from virtcap.units import brief_repr

MAX_FILE_BYTES = 1024 * 1024
"""1 MiB: a thousand hypervisors with a few keys each take about 100 KiB."""
MAX_VALUES = 100_000
"""Values in a document, aliases expanded: scalars, lists and mappings, keys included. A
hypervisor with a few keys of its own is 10 to 15 values: several thousand fit."""
MAX_DEPTH = 64
"""Nesting of lists and mappings; a configuration needs about five levels."""
MAX_SCALAR_CHARS = 4096
"""The longest single value or key: PATH_MAX, the longest path Linux accepts."""

_KEY_CHARS = 40
_PATH_CHARS = 120
_PROBLEM_CHARS = 200

# libyaml scans and parses in C, several times faster than PyYAML's Python parser; both give
# the same events, which _Composer below turns into nodes under the bounds. A document libyaml
# refuses is read again by PyYAML's parser (a second reading, slower, for a refused file only),
# whose diagnosis is the one reported: libyaml's refusals change with its version (0.2.6, in
# PyYAML 6.0.4's wheels, refuses 1000 levels of nesting while it scans ahead, before the composer
# has seen the 65th level), the Python parser's do not.
_FAST_LOADER: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)

_MERGE_TAGS = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})
"""`<<` and `=` keys, which SafeConstructor folds into the mapping rather than keeping as keys."""


class _Position(Protocol):
    """A mark of PyYAML's Python parser or of libyaml's (types-PyYAML has one class for each)."""

    @property
    def index(self) -> int: ...


class ConfigError(Exception):
    """A configuration problem, worded for the operator: `file: key: what was expected`."""


def load_yaml_file(path: Path | str, max_bytes: int = MAX_FILE_BYTES) -> object:
    """The YAML document in `path` (None when empty), or ConfigError `{path}: ...` in one line.

    Files larger than `max_bytes` are refused after reading at most `max_bytes + 1` bytes, so
    /dev/zero or a growing log cannot exhaust memory.
    """
    try:
        with open(path, "rb") as stream:
            data = stream.read(max_bytes + 1)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise ConfigError(
            f"{path}: the file is larger than {_bytes(max_bytes)}; "
            f"expected a configuration file of at most {max_bytes} bytes"
        )
    return load_yaml_bytes(data, str(path), max_bytes)


def load_yaml_bytes(data: bytes, source: str, max_bytes: int = MAX_FILE_BYTES) -> object:
    """The YAML document in UTF-8 `data`, read by the caller within `max_bytes`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise ConfigError(
            f"{source}:{line}:{column}: not UTF-8 text: byte 0x{data[error.start]:02x} cannot start "
            "or continue a character; expected a UTF-8 encoded YAML file"
        ) from None
    return load_yaml_text(text, source, max_chars=max_bytes)


def load_yaml_text(text: str, source: str, max_chars: int = MAX_FILE_BYTES) -> object:
    """The YAML document in `text` (None when empty), or ConfigError `{source}...: ...` in one line."""
    if len(text) > max_chars:
        raise ConfigError(f"{source}: the text is longer than {max_chars} characters; expected at most that")
    try:
        composer = _composed(text, source)
        if composer.root is None:
            return None
        return _Constructor(text, source, composer.paths).construct_document(composer.root)
    except ReaderError as error:  # PyYAML's reader: a position in characters
        line, column = _position(text, error.position)
        code = error.character if isinstance(error.character, int) else ord(str(error.character)[:1] or "?")
        reason = _one_line(str(error.reason))
        raise ConfigError(
            f"{source}:{line}:{column}: invalid YAML: unacceptable character #x{code:04x}: {reason}"
        ) from None
    except MarkedYAMLError as error:
        where = _where(text, error.problem_mark or error.context_mark)
        problem = _one_line(str(error.problem or error.context or "unreadable"))
        raise ConfigError(f"{source}{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: invalid YAML: {_one_line(str(error))}") from None


def _composed(text: str, source: str) -> _Composer:
    """The document composed under the bounds: by libyaml when it reads it, else by PyYAML's parser,
    whose error (or bound passed) is then the one raised."""
    if _FAST_LOADER is not None:
        composer = _Composer(text, source)
        try:
            composer.compose(yaml.parse(text, Loader=_FAST_LOADER))
        # UnicodeEncodeError: libyaml reads UTF-8, which a str with lone surrogates cannot be.
        except (yaml.YAMLError, UnicodeEncodeError):
            pass
        else:
            return composer
    composer = _Composer(text, source)
    composer.compose(yaml.parse(text, Loader=yaml.SafeLoader))
    return composer


_KeyPath: TypeAlias = "tuple[_KeyPath, Node | int] | None"
"""Where a node is, as (where its parent is, its key node or index), spelled out only for messages."""


@dataclass
class _Open:
    """A list or mapping whose end has not been read yet."""

    node: SequenceNode | MappingNode
    path: _KeyPath
    anchor: str | None
    size: int = 1
    key: Node | None = None
    """In a mapping: the key read, whose value comes next."""


@dataclass
class _Composer:
    """PyYAML's Composer, made iterative and bounded: it keeps the key path of every node."""

    text: str
    source: str
    resolver: Resolver = field(default_factory=Resolver)
    paths: dict[int, _KeyPath] = field(default_factory=dict)
    """id(node) to its key path, for messages about values that construct badly."""
    anchors: dict[str, tuple[Node, int]] = field(default_factory=dict)
    """Completed anchored nodes and their sizes, aliases expanded."""
    open_anchors: set[str] = field(default_factory=set)
    stack: list[_Open] = field(default_factory=list)
    total: int = 0
    root: Node | None = None

    def compose(self, events: Iterator[Event]) -> Node | None:
        documents = 0
        for event in events:
            if isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise self._error(
                        event.start_mark, None, "expected a single document, found a second one"
                    )
            elif isinstance(event, AliasEvent):
                self._alias(event)
            elif isinstance(event, ScalarEvent):
                self._scalar(event)
            elif isinstance(event, CollectionStartEvent):
                self._open(event)
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                self._close(event.end_mark)
        return self.root

    def _alias(self, event: AliasEvent) -> None:
        anchor = event.anchor or ""
        path = self._child_path()
        if anchor in self.open_anchors:
            raise self._error(
                event.start_mark, path, f"the alias *{_key(anchor)} refers to a value that contains it"
            )
        if anchor not in self.anchors:
            raise self._error(event.start_mark, path, f"found undefined alias *{_key(anchor)}")
        node, size = self.anchors[anchor]
        self._count(size, event.start_mark, path)
        self._attach(node, size)

    def _scalar(self, event: ScalarEvent) -> None:
        path = self._child_path()
        if len(event.value) > MAX_SCALAR_CHARS:
            raise self._error(
                event.start_mark,
                path,
                f"a value of {len(event.value)} characters; expected at most {MAX_SCALAR_CHARS}",
            )
        self._count(1, event.start_mark, path)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self._resolve(ScalarNode, event.value, event.implicit)
        node = ScalarNode(tag, event.value, _mark(event.start_mark), None, event.style)
        self._anchor(event, node, path)
        self._attach(node, 1)

    def _open(self, event: CollectionStartEvent) -> None:
        path = self._child_path()
        if len(self.stack) >= MAX_DEPTH:
            problem = f"values nest more than {MAX_DEPTH} levels deep; expected at most that"
            raise self._error(event.start_mark, path, problem)
        self._count(1, event.start_mark, path)
        tag = event.tag
        node: SequenceNode | MappingNode
        if isinstance(event, SequenceStartEvent):
            if tag is None or tag == "!":
                tag = self._resolve(SequenceNode, None, event.implicit)
            node = SequenceNode(tag, [], _mark(event.start_mark), None, flow_style=event.flow_style)
        else:
            assert isinstance(event, MappingStartEvent)
            if tag is None or tag == "!":
                tag = self._resolve(MappingNode, None, event.implicit)
            node = MappingNode(tag, [], _mark(event.start_mark), None, flow_style=event.flow_style)
        self._anchor(event, node, path)
        if event.anchor is not None:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Open(node, path, event.anchor))

    def _close(self, end_mark: _Position | None) -> None:
        frame = self.stack.pop()
        frame.node.end_mark = _mark(end_mark)
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (frame.node, frame.size)
        self._attach(frame.node, frame.size)

    def _resolve(self, kind: type[Node], value: str | None, implicit: object) -> str:
        tag: str = self.resolver.resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def _anchor(self, event: NodeEvent, node: Node, path: _KeyPath) -> None:
        self.paths[id(node)] = path
        if event.anchor is None:
            return
        if event.anchor in self.anchors or event.anchor in self.open_anchors:
            raise self._error(event.start_mark, path, f"found duplicate anchor &{_key(event.anchor)}")
        if isinstance(node, ScalarNode):
            self.anchors[event.anchor] = (node, 1)

    def _attach(self, node: Node, size: int) -> None:
        if not self.stack:
            self.root = node
            return
        parent = self.stack[-1]
        parent.size += size
        if isinstance(parent.node, SequenceNode):
            parent.node.value.append(node)
        elif parent.key is None:
            parent.key = node
        else:
            parent.node.value.append((parent.key, node))
            parent.key = None

    def _count(self, size: int, mark: _Position | None, path: _KeyPath) -> None:
        self.total += size
        if self.total > MAX_VALUES:
            raise self._error(
                mark,
                path,
                f"the document holds more than {MAX_VALUES} values (each alias counted as a copy of "
                f"what it refers to); expected at most {MAX_VALUES}",
            )

    def _child_path(self) -> _KeyPath:
        """Where the node about to be read is."""
        if not self.stack:
            return None
        parent = self.stack[-1]
        if isinstance(parent.node, SequenceNode):
            return (parent.path, len(parent.node.value))
        if parent.key is None:
            return parent.path  # a key: named by the mapping it belongs to
        return (parent.path, parent.key)

    def _error(self, mark: _Position | None, path: _KeyPath, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}{_where(self.text, mark)}: {_shown_path(path)}{problem}")


class _Constructor(SafeConstructor):
    """SafeConstructor whose stray Python errors (a date such as 2024-13-01 raises ValueError)
    become configuration errors naming their key, and which refuses a key given twice."""

    def __init__(self, text: str, source: str, paths: dict[int, _KeyPath]) -> None:
        super().__init__()
        self._text = text
        self._source = source
        self._paths = paths
        self._flattened: set[int] = set()

    def flatten_mapping(self, node: MappingNode) -> None:
        # The first call on a mapping sees its own keys only: merging (`<<: *defaults`) then adds
        # the merged ones to node.value, which its own keys rightly override.
        if id(node) not in self._flattened:
            self._flattened.add(id(node))
            self._refuse_duplicate_keys(node)
        super().flatten_mapping(node)

    def _refuse_duplicate_keys(self, node: MappingNode) -> None:
        """Keys compared as constructed, as the dict would: `vcpu` and "vcpu", `yes` and `true`."""
        seen: dict[object, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag in _MERGE_TAGS:
                continue
            key = self.construct_object(key_node)
            try:
                first = seen.get(key)
            except TypeError:  # unhashable: SafeConstructor refuses it, with its mark
                continue
            if first is None:
                seen[key] = key_node
                continue
            # An alias stands for its anchor's node, marks included: both are then the anchor's.
            first_line, first_column = _position(self._text, first.start_mark.index)
            line, column = _position(self._text, key_node.start_mark.index)
            if first is key_node:
                where = f"once as written on line {line}, once more by an alias of it"
            elif first_line != line:
                where = f"first on line {first_line}, again on line {line}"
            else:
                where = f"first at column {first_column}, again at column {column} of line {line}"
            shown = _key(key_node.value) if isinstance(key_node, ScalarNode) else "(a complex key)"
            raise ConfigError(
                f"{self._source}:{line}:{column}: {_shown_path(self._paths.get(id(node)))}"
                f"duplicate key {shown}: {where}; expected each key once"
            )

    def construct_object(self, node: Node, deep: bool = False) -> object:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, ArithmeticError) as error:
            where = _where(self._text, node.start_mark)
            key = _shown_path(self._paths.get(id(node)))
            raise ConfigError(
                f"{self._source}{where}: {key}cannot read this value: {_one_line(str(error))}"
            ) from None


def _mark(mark: _Position | None) -> Mark | None:
    """Nodes keep the marks of whichever parser made them; only line and column are read."""
    return cast(Mark | None, mark)


def _key(text: object) -> str:
    """A key or anchor as it can stand in a message: plain when plain, else a short repr."""
    if isinstance(text, str) and text.isprintable() and 0 < len(text) <= _KEY_CHARS and " " not in text:
        return text
    return brief_repr(text, _KEY_CHARS)


def _shown_path(path: _KeyPath) -> str:
    """`key.path[0].of.a.node: `, or nothing at the top; deep ones keep their start and end."""
    parts: list[str] = []
    while path is not None:
        path, part = path
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            name = _key(part.value) if isinstance(part, ScalarNode) else "(a complex key)"
            parts.append(f".{name}" if path is not None else name)
    text = "".join(reversed(parts))
    if len(text) > _PATH_CHARS:
        half = _PATH_CHARS // 2 - 2
        text = f"{text[:half]}...{text[-half:]}"
    return f"{text}: " if text else ""


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _PROBLEM_CHARS else line[: _PROBLEM_CHARS - 3] + "..."


def _where(text: str, mark: _Position | None) -> str:
    """`:line:column` of a mark, found from its character index: libyaml's own line and column
    point past the end of a text without a final newline."""
    if mark is None:
        return ""
    line, column = _position(text, mark.index)
    return f":{line}:{column}"


def _position(text: str, position: int) -> tuple[int, int]:
    position = min(position, len(text))
    line = text.count("\n", 0, position) + 1
    return line, position - (text.rfind("\n", 0, position) + 1) + 1


def _bytes(count: int) -> str:
    mib, rest = divmod(count, 1024 * 1024)
    return f"{mib} MiB" if not rest else f"{count} bytes"
