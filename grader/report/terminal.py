"""The terminal summary, as its reader (a student, or with --staff the staff) may see it.

Grouped by function: the function's points, its likely mistake and what that mistake means
(said once, however many checks it failed), then one line per check with what that check saw.
Then what went wrong in the notebook's cells, with the cell's number and its failing line, and
a closing summary: the score, the likely mistakes and what to look at first.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import textwrap

from grader.report.printable import printable_data
from grader.result import ErrorRecord, GradeResult
from grader.report.view import ANSI, CheckView, FunctionView, result_view, shown, where

MARKS = {"passed": "ok", "failed": "FAIL", "error": "ERROR", "info": "info"}
COLOURS = {"passed": "32", "failed": "31", "error": "31", "info": "36", "bold": "1", "dim": "2"}
MAX_WIDTH = 110


def use_colour(stream=sys.stdout) -> bool:
    """Colour on a terminal only, and never when NO_COLOR is set (https://no-color.org)."""
    return hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")


def plural(count: float, word: str) -> str:
    return f"{shown(count)} {word}" if count == 1 else f"{shown(count)} {word}s"


class _Writer:
    def __init__(self, colour: bool, width: int):
        self.colour, self.width = colour, width
        self.lines: list[str] = []

    def paint(self, text: str, style: str) -> str:
        return f"\x1b[{COLOURS[style]}m{text}\x1b[0m" if self.colour else text

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def wrapped(self, text: str, indent: int, first: str = "") -> None:
        """`first` (already laid out, maybe coloured) then `text`, wrapped under `indent` spaces."""
        visible = len(ANSI.sub("", first))
        room = max(self.width - max(indent, visible), 30)
        parts = textwrap.wrap(text, room) or [""]
        self.lines.append(first + " " * max(indent - visible, 0) + parts[0])
        self.lines.extend(" " * indent + p for p in parts[1:])


def _check_line(out: _Writer, c: CheckView, width: int) -> None:
    mark = out.paint(f"{MARKS[c.status]:<5}", c.status)
    earned = f"{shown(c.points)}/{shown(c.max_points)}"
    head = f"    {mark} {c.kind:<{width}} {earned}" + " " * max(1, 6 - len(earned))
    if c.status == "passed":
        out.line(head.rstrip())
    else:
        out.wrapped(c.message, 4 + 6 + width + 7, head)


def _not_said_yet(advice: str, said: list) -> str:
    """A pair of mistakes' advice without the part one of them already said above (the pair's
    advice is its mistakes' advice, one after the other)."""
    for _, earlier in said:
        if earlier and earlier in advice and earlier != advice:
            advice = advice.replace(earlier, "", 1).strip()
    return advice


def _function(out: _Writer, fn: FunctionView, advised: dict) -> None:
    verdict = "all checks passed" if fn.passed else f"likely mistake: {fn.main_mistake}" if fn.main_mistake else ""
    out.line(out.paint(f"{fn.name}: {shown(fn.points)} / {plural(fn.max_points, 'point')}", "bold")
             + (f"  {verdict}" if verdict else ""))
    if fn.defining_cell:
        out.wrapped(fn.defining_cell, 4, "    Its defining cell failed: ")
    if fn.renamed:
        out.wrapped(fn.renamed, 4, "    ")
    # Each mistake's meaning once: here for the function it first appears in, later a pointer back.
    for c in fn.checks:
        if not c.advice or c.withheld or (c.diagnosis, c.advice) in advised.get(fn.name, ()) \
                or fn.repeats_a_likely_mistake(c):
            continue
        earlier = next((name for name, seen in advised.items() if (c.diagnosis, c.advice) in seen), None)
        advised.setdefault(fn.name, []).append((c.diagnosis, c.advice))
        label = f"{c.diagnosis}: " if c.status == "info" or c.diagnosis != fn.main_mistake else ""
        if earlier:
            out.wrapped(f"{label}the same mistake as in {earlier}, explained above.", 4, "    ")
        else:
            out.wrapped(label + _not_said_yet(c.advice, advised[fn.name][:-1]), 4, "    ")
    width = max((len(c.kind) for c in fn.checks), default=10)
    for c in fn.checks:
        _check_line(out, c, width)
    if fn.smallest_failing:
        out.line(f"    Smallest failing case ({fn.smallest_failing['case']}), to paste into a cell:")
        out.lines.extend((" " * 8 + line).rstrip() for line in fn.smallest_failing["code"].splitlines())


def _errors(out: _Writer, errors: list[ErrorRecord]) -> None:
    if not errors:
        return
    out.line()
    out.line(out.paint("Problems while running the notebook", "bold"))
    for e in errors:
        out.wrapped(f"{e.ename}: {e.evalue}"[:400], 6, f"  {where(e)}: ")


def _notes(out: _Writer, view) -> list[str]:
    notes = []
    for name, info in view.functions.items():
        if info.get("globals"):
            shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
            notes.append(f"note: {name} reads notebook globals ({shown}); it may break on other shapes")
    iso = view.isolation
    if iso.get("level") == "partial":
        notes.append(f"isolation: partial (missing: {', '.join(iso['missing'])})")
    if iso.get("background_processes_stopped"):
        notes.append(f"note: {plural(iso['background_processes_stopped'], 'background process')} the notebook "
                     "started were stopped before its functions were called")
    if iso.get("leftover_processes_killed"):
        notes.append(f"note: {plural(iso['leftover_processes_killed'], 'process')} left running by the notebook "
                     "were killed")
    if view.policy_note:
        notes.append(view.policy_note)
    for f in view.policy.get("findings", []):
        what = "tries to import the grader" if f.get("kind") == "grader_import" else "imports forbidden library"
        notes.append(f"policy: {what} {f['module']} ({f['source']})")
    return notes


def _closing(out: _Writer, view, functions: list[FunctionView]) -> None:
    out.line()
    out.line(out.paint(f"Score: {shown(view.score)} / {plural(view.max_score, 'point')}", "bold") + f" ({view.status})")
    mistakes = view.likely_mistakes
    if mistakes:
        out.wrapped("; ".join(f"{fn}: {m}" for fn, m in mistakes), 17, "Likely mistakes: ")
    first = next((fn for fn in functions if not fn.passed), None)
    if view.status != "graded":
        out.line("Look first at: the problems above, which stopped the grading.")
    elif first is not None:
        lost = first.max_points - first.points
        why = f"{first.main_mistake}, " if first.main_mistake else \
            "its defining cell failed, " if first.defining_cell else ""
        out.wrapped(f"{first.name} ({why}{plural(lost, 'point')} lost); the functions after it may depend "
                    "on it.", 15, "Look first at: ")
    elif view.score >= view.max_score:
        out.line("Every graded check passed.")


def summary(result: GradeResult, staff: bool = False, colour: bool = False, width: int | None = None) -> str:
    # The only thing read below; every text in it made printable before the colours are added.
    # A traceback is read only for the failing line it marks, past IPython's own colour codes:
    # those are dropped (never obeyed) first, or the escapes would hide the marker.
    view = result_view(result, staff)
    errors = [dataclasses.replace(e, traceback=ANSI.sub("", e.traceback)) for e in view.errors]
    view = printable_data(dataclasses.replace(view, errors=errors))
    width = width or min(shutil.get_terminal_size((100, 24)).columns, MAX_WIDTH)
    out = _Writer(colour, width)
    out.line(out.paint(f"{view.submission}: {shown(view.score)} / {plural(view.max_score, 'point')}", "bold")
             + f" ({view.assignment}{'' if view.seed is None else f', seed {view.seed}'}, {view.status})")
    functions = view.by_function
    advised: dict = {}
    for fn in functions:
        out.line()
        _function(out, fn, advised)
    _errors(out, view.errors)
    notes = _notes(out, view)
    if notes:
        out.line()
        for note in notes:
            out.wrapped(note, 4, "  ")
    _closing(out, view, functions)
    return "\n".join(out.lines)
