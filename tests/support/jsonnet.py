"""Jsonnet for the mixin: go-jsonnet (the reference implementation, PyPI's gojsonnet) in process,
for the tests and for `make generate` (`python -m tests.support.jsonnet`, the options of the
`jsonnet` command the project uses: -S, -m, --tla-code).

Debian's jsonnet is the C++ implementation, which took 5 to 20 s of CPU for each rendering of the
rules or the dashboards (the suite renders them a dozen times, with other settings); go-jsonnet
renders each in about a second, byte for byte the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import _gojsonnet  # type: ignore[import-not-found]  # go-jsonnet's binding has no type hints

JsonnetError = RuntimeError
"""What the binding raises for a program that fails (a syntax error, `error`): its message is
jsonnet's, with the program's own error text in it."""


def evaluate(source: Path, tla_codes: Mapping[str, str] | None = None) -> str:
    """`source` evaluated (its top-level function called with `tla_codes`, each a Jsonnet
    expression), as the JSON text the `jsonnet` command prints."""
    rendered: str = _gojsonnet.evaluate_file(str(source), tla_codes=dict(tla_codes or {}))
    return rendered


def evaluate_snippet(code: str, library_paths: Sequence[Path] = ()) -> str:
    """Jsonnet `code` evaluated (`jsonnet -e`, imports found in `library_paths` as with -J)."""
    rendered: str = _gojsonnet.evaluate_snippet(
        "<snippet>", code, jpathdir=[str(path) for path in library_paths]
    )
    return rendered


def as_string(source: Path, tla_codes: Mapping[str, str] | None = None) -> str:
    """`jsonnet -S`: the string the program evaluates to, as the command writes it."""
    value = json.loads(evaluate(source, tla_codes))
    if not isinstance(value, str):
        raise JsonnetError(f"{source}: -S needs a program that evaluates to a string")
    return value + "\n"


def as_files(directory: Path, source: Path, tla_codes: Mapping[str, str] | None = None) -> list[Path]:
    """`jsonnet -m directory`: one file per field of the object the program evaluates to, each
    written as the command writes a program's JSON; the files written."""
    call = _call(source, tla_codes)
    names = json.loads(evaluate_snippet(f"std.objectFields({call})"))
    written = []
    for name in names:
        path = directory / name
        path.write_text(evaluate_snippet(f"{call}[{json.dumps(name)}]"))
        written.append(path)
    return written


def _call(source: Path, tla_codes: Mapping[str, str] | None) -> str:
    """The expression `source` evaluates to with these top-level arguments."""
    imported = f"(import {json.dumps(str(source.resolve()))})"
    if not tla_codes:
        return f"(local program = {imported}; if std.isFunction(program) then program() else program)"
    arguments = ", ".join(f"{name}=({code})" for name, code in tla_codes.items())
    return f"{imported}({arguments})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.jsonnet", description=__doc__)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-S", "--string", action="store_true", help="write the string, not JSON")
    output.add_argument("-m", "--multi", type=Path, metavar="DIR", help="one file per field, in DIR")
    parser.add_argument("--tla-code", action="append", default=[], metavar="NAME=CODE")
    parser.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    tla_codes = dict(argument.split("=", 1) for argument in args.tla_code)
    try:
        if args.multi is not None:
            for path in as_files(args.multi, args.source, tla_codes):
                print(path)
        elif args.string:
            sys.stdout.write(as_string(args.source, tla_codes))
        else:
            sys.stdout.write(evaluate(args.source, tla_codes))
    except JsonnetError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
