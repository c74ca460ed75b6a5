"""Pydantic's validation errors rewritten as one line per problem: `source: key: what was expected`.

Pydantic's own messages are multi-line, name internal types and may echo inputs of any size;
an operator reading a refused file (or a client reading a refused claim) needs the key and the
expectation, of bounded length. Nothing here knows a particular schema: the allowed keys and
bounds are read from whichever root model was validated, so the fleet configuration, the web
configuration and the claims API's bodies all explain their errors the same way.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from virtcap.units import brief_repr

__all__ = ["MAX_PROBLEMS_SHOWN", "clip", "explain_validation_error"]

MAX_PROBLEMS_SHOWN = 20
_EXPLANATION_CHARS = 300
_LINE_CHARS = 299
"""A problem's whole line, file and key included: under 300 characters, however many keys a
section allows (an unknown key lists them all)."""
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:@$-]{1,40}")


def explain_validation_error(error: ValidationError, source: str, root: type[BaseModel]) -> str:
    """One line per problem: `file: key: what was expected`, each of bounded length.

    Past MAX_PROBLEMS_SHOWN problems, one last line says how many more there are. A model whose
    keys are not plain keys may name them with a `KEY_NOUN` class variable ("unknown resource").
    """
    problems = error.errors(include_url=False)
    lines = [
        clip(f"{source}: {_location(e['loc'])}: {clip(_explain(e, root))}", _LINE_CHARS)
        for e in problems[:MAX_PROBLEMS_SHOWN]
    ]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"{source}: and {len(problems) - MAX_PROBLEMS_SHOWN} more problems")
    return "\n".join(lines)


def clip(text: str, limit: int = _EXPLANATION_CHARS) -> str:
    """A message part cut to `limit` characters, newlines included, so one problem stays one line."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if _PLAIN_KEY.fullmatch(part) else brief_repr(part, 40)
            text += f".{name}" if text else name
    return clip(text or "(top level)", 120)


def _explain(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind = error["type"]
    given = brief_repr(error.get("input"))
    context = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = _model_at(root, error["loc"][:-1])
        allowed = ", ".join(parent.model_fields)
        noun = getattr(parent, "KEY_NOUN", "key")
        return f"unknown {noun} {brief_repr(error['loc'][-1], 40)}; expected one of: {allowed}"
    if kind == "invalid_key":
        return f"expected keys that are strings, got {given}"
    if kind == "missing":
        return "required key is missing"
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        limit = context.get("gt", context.get("ge"))
        return f"expected a number {bound} {_number(limit)}, got {given}"
    if kind in ("less_than_equal", "finite_number", "int_parsing_size"):
        # Infinity, NaN and numbers too large to parse all break the key's ceiling: say which.
        ceiling = context.get("le", _ceiling(root, error["loc"]))
        if ceiling is not None:
            return f"expected a number at most {_number(ceiling)}, got {given}"
        return f"expected a finite number, got {given}"
    if kind in ("float_parsing", "float_type"):
        return f"expected a number, got {given}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"expected a whole number, got {given}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {given}"
    if kind in ("string_type", "string_too_short"):
        return f"expected a non-empty string, got {given}"
    if kind == "string_too_long":
        return f"expected at most {context.get('max_length')} characters, got {given}"
    if kind == "string_pattern_mismatch":
        return f"expected a name of letters, digits and . _ - : @, got {given}"
    if kind in ("list_type",):
        return f"expected a list, got {given}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {given}"
    if kind == "literal_error":
        return f"expected one of: {context.get('expected', '')}, got {given}"
    if kind == "value_error":
        return str(context.get("error", error["msg"]))
    return str(error["msg"])


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _ceiling(root: type[BaseModel], loc: tuple[int | str, ...]) -> object:
    """The `le` bound of the field at a location, if it has one."""
    names = [part for part in loc if isinstance(part, str)]
    if not names or names[-1] not in (model := _model_at(root, tuple(names[:-1]))).model_fields:
        return None
    for constraint in model.model_fields[names[-1]].metadata:
        if getattr(constraint, "le", None) is not None:
            return constraint.le
    return None


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The section model at a location, or BaseModel itself (no fields) where there is none."""
    model = root
    for part in loc:
        if isinstance(part, int):
            continue
        nested = _section_type(model.model_fields[part].annotation) if part in model.model_fields else None
        if nested is None:
            return BaseModel
        model = nested
    return model


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for argument in typing.get_args(annotation):
            found = _section_type(argument)
            if found is not None:
                return found
    return None
