"""Read a submission file into a current-format notebook, or say in one line why not."""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import warnings
from pathlib import Path

import nbformat

from grader.errors import SubmissionError
from grader.intake.own_cells import without_grader_lines
from grader.notebook_nodes import code_cell, notebook

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
    return notebook([code_cell(p.strip("\n")) for p in parts])


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
        with warnings.catch_warnings():
            # A cell without an id, or with another cell's, makes nbformat print three lines on
            # stderr; it gives the cell a new id itself, and ids mean nothing to grading.
            warnings.simplefilter("ignore", nbformat.warnings.MissingIDFieldWarning)
            warnings.simplefilter("ignore", nbformat.warnings.DuplicateCellId)
            # nbformat.reads less its validation against the format's schema, whose verdict
            # it only logs: nothing of grading rests on it, the grader reads every cell's
            # fields itself, and compiling the schema was a twentieth of a `grader check`.
            # (Upgrading an older format still validates, as nbformat's upgrade does.)
            nb = nbformat.convert(nbformat.reader.reads(text), 4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds for malformed files
        raise SubmissionError(f"{name} is not a notebook nbformat can read: {str(exc).splitlines()[0][:200]}") from None
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell.source = "".join(cell.source)
    return nb


def link_outside(name: str) -> str:
    return f"{name} is a symbolic link to a file outside the submission"


def read_submission(path: Path, found_as: tuple[int, int] | None = None) -> bytes:
    """The file's bytes, never through a symbolic link: a link inside a submission was
    resolved, within it, when the submission was found (grader/intake/discover.py, grader/lms/entrypoints.py), so
    a link here leaves the submission (a student's own, or one put in the file's place since).
    The opened file itself must be a regular file within the size limit (open, then fstat:
    nothing can be swapped in between), and nothing else is read; with `found_as`, it must be
    the file found then (its device and inode), not one reached since through a folder on the
    way that became a link."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC   # O_NONBLOCK: a FIFO never blocks the grader
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise SubmissionError(f"no such file: {path}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SubmissionError(link_outside(path.name)) from None
        raise SubmissionError(f"{path.name} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"not a file: {path}")
        if found_as is not None and (info.st_dev, info.st_ino) != tuple(found_as):
            raise SubmissionError(f"{path.name} was replaced by another file after it was found")
        if info.st_size > MAX_SUBMISSION_BYTES:
            raise SubmissionError(f"{path.name} is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")
        data = file.read(MAX_SUBMISSION_BYTES + 1)
    if len(data) > MAX_SUBMISSION_BYTES:   # it grew after the check
        raise SubmissionError(f"{path.name} is larger than {MAX_SUBMISSION_BYTES // 2**20} MiB")
    return data


def load_submission(path: Path):
    path = Path(path)
    try:
        text = read_submission(path).decode("utf-8")
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
    """The student's code, cell by cell: the grader's own check lines (grader/intake/own_cells.py) are
    never read as the student's (no static finding, no similarity, no signature)."""
    return [(i, without_grader_lines(c.source)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
