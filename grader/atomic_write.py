"""Writing output files atomically: a reader (or a grader killed half-way) never sees half a file."""
from __future__ import annotations

import json
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)


def write_json(path: Path, data: dict | list, mode: int | None = None) -> None:
    write_atomically(path, json.dumps(data, indent=2, allow_nan=False), mode)
