"""TOML text to a dict, with a one-line SpecError for anything that is not valid TOML."""
from __future__ import annotations

import sys

from grader.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def load_toml(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid TOML (nested too deeply)") from None


# Writing: the specs the grader proposes (`grader spec infer`). Only what a spec holds: text,
# booleans, numbers, lists, tables inline, tables and arrays of tables (with tables inside).

def _key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) and key.isascii() else _string(key)


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'


def _value(value, indent: int = 0) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        items = [_value(v) for v in value]
        if any(isinstance(v, dict) for v in value) and len(items) > 1:
            return "[" + (",\n" + " " * (indent + 1)).join(items) + "]"
        return "[" + ", ".join(items) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _table_body(table: dict, prefix: str, lines: list[str], depth: int = 0) -> None:
    """Keys as `key = value`; a table (at the top and one level down: `[functions.convention]`)
    as a section, and a top-level list of tables as an array of tables; deeper ones inline, but
    a convention's class table, which is a section as courses write it
    (`[functions.convention.class]`)."""
    def section(value, key: str = "") -> bool:
        return isinstance(value, dict) and (depth <= 1 or depth == 2 and key == "class")

    def table_array(value) -> bool:
        return depth == 0 and isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    for key, value in table.items():
        if not section(value, key) and not table_array(value):
            lines.append(f"{_key(key)} = {_value(value, len(_key(key)) + 3)}")
    for key, value in table.items():
        name = f"{prefix}{_key(key)}"
        if section(value, key):
            lines.extend(["", f"[{name}]"])
            _table_body(value, f"{name}.", lines, depth + 1)
        elif table_array(value):
            for item in value:
                lines.extend(["", f"[[{name}]]"])
                _table_body(item, f"{name}.", lines, depth + 1)


def dumps(document: dict, comment: str = "") -> str:
    """TOML text for `document`: keys first, then its tables; `comment` as its first lines."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    _table_body(document, "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"
