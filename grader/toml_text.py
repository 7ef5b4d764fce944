"""TOML text to a dict, with a one-line SpecError for anything that is not valid TOML."""
from __future__ import annotations

import sys

from .errors import SpecError

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
