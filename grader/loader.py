"""Read a submission file into a current-format notebook, or say in one line why not."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

from .errors import SubmissionError

CELL_MARKER = re.compile(r"^# ?%%.*$", re.MULTILINE)
MAX_SUBMISSION_BYTES = 50 * 1024 * 1024
# Code the kernel would have to compile and run: a real solution is a few kilobytes, and a
# notebook of megabytes of code only costs grading time (5 MB of code took 29 s).
MAX_CODE_CHARACTERS = 1_000_000


def one_line(exc: BaseException, typed: bool = True, limit: int = 300) -> str:
    """An exception as one line of a report: the first line of its message, after its type
    unless told otherwise (for errors already worded for users)."""
    lines = str(exc).strip().splitlines()
    text = lines[0][:limit] if lines else ""
    return f"{type(exc).__name__}: {text}" if typed and text else text or type(exc).__name__


def notebook_from_python(source: str):
    """A .py file becomes one cell, or one cell per '# %%' block when it uses them."""
    parts = [p for p in CELL_MARKER.split(source) if p.strip()] or [source]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(p.strip("\n")) for p in parts])


def notebook_from_json(text: str, name: str):
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"{name} is not a notebook: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise SubmissionError(f"{name} is not a notebook: its JSON is nested too deeply") from None
    if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
        raise SubmissionError(f"{name} is not a notebook: it has no cells")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds for malformed files
        raise SubmissionError(f"{name} is not a notebook nbformat can read: {str(exc).splitlines()[0][:200]}") from None
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell.source = "".join(cell.source)
    return nb


def check_size(path: Path) -> None:
    """Before anything reads the file whole: it exists, is a file, and is not too large."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"no such file: {path}")
    if not path.is_file():
        raise SubmissionError(f"not a file: {path}")
    if path.stat().st_size > MAX_SUBMISSION_BYTES:
        raise SubmissionError(f"{path.name} is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")


def load_submission(path: Path):
    path = Path(path)
    check_size(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SubmissionError(f"{path.name} is not text (not UTF-8)") from None
    if path.suffix == ".py":
        nb = notebook_from_python(text)
    elif path.suffix == ".ipynb":
        nb = notebook_from_json(text, path.name)
    else:
        raise SubmissionError(f"{path.name}: expected a .ipynb notebook or a .py file")
    code = sum(len(source) for _, source in code_cells(nb))
    if code > MAX_CODE_CHARACTERS:
        raise SubmissionError(f"{path.name} has {code:,} characters of code; the limit is {MAX_CODE_CHARACTERS:,}")
    for cell in nb.cells:   # the grader never reads the saved outputs
        if cell.cell_type == "code":
            cell.outputs = []
    return nb


def code_cells(nb) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
