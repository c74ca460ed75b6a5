"""jsonnet's std.manifestYamlDoc (indent_array_in_object=true, quote_keys=false), byte for byte, in
Python: the mixin's entry files render their document as JSON (`--tla-code manifest=false`) in a
tenth of the time jsonnet takes to write it as YAML, and the tests render the mixin often. That the
two agree is tested on the committed rule files, which `make generate` writes with jsonnet's own."""

from __future__ import annotations

import json
from typing import Any


def manifest_yaml_doc(document: Any) -> str:
    return _value(document, "")


def _value(value: Any, indent: str) -> str:
    if isinstance(value, list):
        return _array(value, indent)
    if isinstance(value, dict):
        return _object(value, indent)
    return _scalar(value, indent)


def _array(items: list[Any], indent: str) -> str:
    if not items:
        return "[]"
    parts = []
    for item in items:
        if isinstance(item, list) and item:
            parts.append(f"-\n{indent}  " + _array(item, indent + "  "))
        else:
            parts.append("- " + _value(item, indent + "  "))
    return f"\n{indent}".join(parts)


def _object(fields: dict[str, Any], indent: str) -> str:
    if not fields:
        return "{}"
    parts = []
    for key in sorted(fields):  # jsonnet writes an object's fields sorted
        value = fields[key]
        if isinstance(value, list | dict) and value:
            # arrays indented under their key (indent_array_in_object), as objects are
            parts.append(f"{key}:\n{indent}  " + _value(value, indent + "  "))
        else:
            parts.append(f"{key}: " + _value(value, indent))
    return f"\n{indent}".join(parts)


def _scalar(value: Any, indent: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if value == "":
        return '""'
    if value.endswith("\n"):  # a block, its lines indented under the key
        return f"\n{indent}  ".join(["|", *value.split("\n")[:-1]])
    return json.dumps(value, ensure_ascii=False)
