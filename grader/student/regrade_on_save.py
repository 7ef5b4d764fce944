"""`grader check --watch`: grade again each time the file is saved and print only what changed.

The file is polled (no extra dependency, and it works on every file system); a save is a new
modification time, size or content. What changed is read from the two results' views, so a
watching student sees no more of a hidden check than a single check shows.
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable

from grader.report.printable import printable, printable_data
from grader.report.view import ResultView, shown
from grader.result import GradeResult

POLL_SECONDS = 0.5


def fingerprint(path: Path) -> tuple | None:
    """What tells one saved version from the next; None while the file is missing."""
    try:
        stat = path.stat()
        return stat.st_mtime_ns, stat.st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _points(before: float, after: float) -> str:
    delta = after - before
    return f" ({'+' if delta > 0 else ''}{shown(delta)})" if delta else ""


def changes(old: ResultView, new: ResultView) -> list[str]:
    """What differs between two gradings of the same file, one line each: the score, each
    check whose status or points changed, each function whose likely mistake changed, and
    errors that appeared or went away. Every text from the notebook is made printable, and an
    error's message kept to its line."""
    old, new = printable_data(old), printable_data(new)
    lines = [f"score {shown(old.score)} -> {shown(new.score)} / {shown(new.max_score)}{_points(old.score, new.score)}"
             if old.score != new.score or old.max_score != new.max_score else f"score {shown(new.score)} / "
             f"{shown(new.max_score)} (unchanged)"]
    before = {c.name: c for c in old.checks}
    for c in new.checks:
        was = before.get(c.name)
        if was is None:
            lines.append(f"  {c.name}: new, {c.status} {shown(c.points)}/{shown(c.max_points)}")
        elif (was.status, was.points) != (c.status, c.points):
            lines.append(f"  {c.name}: {was.status} -> {c.status}{_points(was.points, c.points)}")
    mistakes = {fn.name: fn.main_mistake for fn in old.by_function}
    for fn in new.by_function:
        if mistakes.get(fn.name) != fn.main_mistake:
            said_before = mistakes.get(fn.name) or "none"
            lines.append(f"  {fn.name}: likely mistake {said_before} -> {fn.main_mistake or 'none'}")
    said = {(e.cell, printable(e.ename, one_line=True), printable(e.evalue, one_line=True)) for e in old.errors}
    now = {(e.cell, printable(e.ename, one_line=True), printable(e.evalue, one_line=True)) for e in new.errors}
    lines += [f"  new problem: cell {c + 1 if c >= 0 else '?'}: {n}: {v}"[:200] for c, n, v in sorted(now - said)]
    lines += [f"  fixed: cell {c + 1 if c >= 0 else '?'}: {n}" for c, n, _ in sorted(said - now)]
    return lines


def watch(path: Path, grade_once: Callable[[], GradeResult | None], full: Callable[[GradeResult], str],
          view: Callable[[GradeResult], ResultView], say: Callable[[str], None],
          stop: Callable[[], bool] = lambda: False, poll: float = POLL_SECONDS) -> None:
    """Grade `path` now and after each save until `stop()`: the first time in full (`full` of
    the result), then only the changes between the results' views. `grade_once` returns None
    when this version could not be graded (it says why)."""
    seen = fingerprint(path)
    last = grade_once()
    if last is not None:
        say(full(last))
    say(f"watching {printable(path.name)}; save it to grade again (Ctrl-C stops)")
    while not stop():
        time.sleep(poll)
        current = fingerprint(path)
        if current is None or current == seen:
            continue
        seen = current
        result = grade_once()
        if result is None:
            continue
        stamp = time.strftime("%H:%M:%S")
        say(f"{stamp} {printable(path.name)} saved: " + "\n".join(changes(view(last), view(result)) if last is not None
                                                         else [full(result)]))
        last = result
