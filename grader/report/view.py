"""What a reader may see of a result: the one place that decides it.

The terminal summary, the HTML report, the JSON `grader check` writes and the Gradescope and
PrairieLearn results are all rendered from a ResultView, never from the checks themselves,
so no rendering can show a student what another withholds. A hidden check shows a student
its name, title, status and points; its message, diagnosis and figures (which on the
randomized inputs give the hidden cases away) are withheld, and so is everything made from
them: the "Likely mistakes", the lists of checks not passed; so are the details of any check
that came from a hidden check's case (a guard: checks never share such cases), or from a visible
case with a hidden case's label and shapes (SHAPED_AS_HIDDEN_MARK). A student sees
no seed but the public one: a grading seed would tell the inputs of the grading. The staff see
everything.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from grader.report.printable import printable
from grader.result import (ANSI, HIDDEN_CASE_MARK, SHAPED_AS_HIDDEN_MARK, CheckResult, CheckStatus, DefiningCellFailure,
                           ErrorRecord, FunctionInfo, GradeResult, Isolation, Policy, SmallestCase, Status, Timing,
                           cell_number)
from grader.settings import PUBLIC_SEED

HIDDEN_NOTE = "Hidden check: its details are not shown to students."
SHAPED_AS_HIDDEN_NOTE = ("Its details are not shown to students: they are about a case with the label and shapes "
                         "of a hidden check's case.")


@dataclass(frozen=True)
class CheckView:
    # The fields of CheckResult, in its order, so that the staff's JSON is the result itself.
    name: str
    function: str
    kind: str
    title: str
    status: CheckStatus
    points: float
    max_points: float
    message: str             # HIDDEN_NOTE or SHAPED_AS_HIDDEN_NOTE when withheld
    diagnosis: str | None    # None when withheld
    hidden: bool             # what the spec says; Gradescope's visibility follows it
    figures: list[dict]      # empty when withheld
    advice: str              # empty when withheld
    withheld: bool           # this reader may not see the message, diagnosis, figures and advice

    @property
    def lost_points(self) -> bool:
        return self.status in ("failed", "error")

    @property
    def text(self) -> str:
        """The message and the advice: the whole feedback of a check shown on its own."""
        return f"{self.message} {self.advice}" if self.advice else self.message

    @property
    def likely_mistake(self) -> str | None:
        """The diagnosis, as a mistake to fix: an informational (0-point) check names none,
        since it did not fail."""
        return self.diagnosis if self.lost_points else None


@dataclass(frozen=True)
class FunctionView:
    """One graded function's part of a result, as its reader may see it: the sum of its checks'
    points (informational checks carry none) and its main mistake, the first its reader may see."""
    name: str
    points: float
    max_points: float
    checks: tuple[CheckView, ...]
    # The smallest input it fails on, as a cell ({"case", "code"}); only beside a failure its
    # reader may see (grader/judging/smallest.py).
    smallest_failing: SmallestCase | None = None
    # Why it was not graded when the cell that defines it failed ("cell 5, line 6: SyntaxError:
    # ..."): said here once, each of its checks saying only that its defining cell failed.
    defining_cell: str | None = None
    # When it is not defined but a definition named like it is: "did you mean ...?", said here
    # once (renamed_hint), its checks each saying only that it is not implemented.
    renamed: str | None = None
    # Why it earned nothing when no mistake says so (not graded, not implemented, ...): what the
    # staff's files give as its reason (nothing_earned).
    nothing_earned: str | None = None

    @property
    def passed(self) -> bool:
        return not any(c.lost_points for c in self.checks)

    @property
    def mistakes(self) -> list[tuple[str, str, bool]]:
        """(mistake, what it means, informational) once each, in check order, as far as its
        reader may see them: a 0-point check's finding too, marked as such."""
        found: list[tuple[str, str, bool]] = []
        for c in self.checks:
            if c.diagnosis and not c.withheld and (c.lost_points or c.status == "info") \
                    and not self.repeats_a_likely_mistake(c):
                entry = (c.diagnosis, c.advice, c.status == "info")
                if entry[:2] not in [f[:2] for f in found]:
                    found.append(entry)
        return found

    def repeats_a_likely_mistake(self, check: CheckView) -> bool:
        """An informational check's finding that a likely mistake of this function already says:
        the same mistake, or one of the pair it names (a pair's advice is its two mistakes'
        advice, one after the other). Said once, as the likely mistake, not again as "also
        noticed"."""
        if check.status != "info" or not check.diagnosis:
            return False
        return any(c.diagnosis == check.diagnosis or (check.advice and check.advice in c.advice)
                   for c in self.checks if c.lost_points and c.diagnosis and not c.withheld)

    @property
    def figure_check(self) -> CheckView | None:
        """The check whose heatmaps show the function's mistake: the first with figures that
        lost points, else the first informational one with figures."""
        with_figures = [c for c in self.checks if c.figures]
        return next((c for c in with_figures if c.lost_points), None) or \
            next((c for c in with_figures if c.status == "info"), None)

    @property
    def main_mistake(self) -> str | None:
        return next((c.likely_mistake for c in self.checks
                     if c.likely_mistake and not c.withheld), None)


@dataclass(frozen=True)
class ResultView:
    """A GradeResult as one reader may see it: the same fields, the checks replaced by views."""
    staff: bool
    submission: str
    assignment: str
    seed: int | None         # None when withheld: only the public seed is shown to students
    status: Status
    score: float
    max_score: float
    checks: tuple[CheckView, ...]
    errors: list[ErrorRecord]
    policy: Policy
    functions: dict[str, FunctionInfo]
    timing: Timing
    isolation: Isolation
    grader_version: str
    metadata_assignment: str | None

    @property
    def policy_note(self) -> str | None:
        """What a partial policy gives up, for every reader, once there are libraries to forbid."""
        if self.policy.get("level") != "partial" or not self.policy.get("forbidden"):
            return None
        return ("Policy: partial. Forbidden libraries were looked for in the notebook and in what its kernel "
                "reported, not removed from the kernel; a submission can hide its use of one.")

    @property
    def failures(self) -> list[CheckView]:
        """The checks to list as not passed: those that lost points and whose details this
        reader may see. A withheld check stays out, since even its name there would tell a
        student, before the course publishes it, that a hidden case failed."""
        return [c for c in self.checks if c.lost_points and not c.withheld]

    @property
    def likely_mistakes(self) -> list[tuple[str, str]]:
        """(function, mistake) once each, in check order, from the failures this reader sees."""
        found = []
        for c in self.failures:
            if c.likely_mistake and (c.function, c.likely_mistake) not in found:
                found.append((c.function, c.likely_mistake))
        return found

    @property
    def by_function(self) -> list[FunctionView]:
        """The checks grouped by the function they grade, in check order."""
        names = list(dict.fromkeys(c.function for c in self.checks))
        grouped = [tuple(c for c in self.checks if c.function == n) for n in names]
        def smallest(name, checks):
            shown = any(c.lost_points and not c.withheld for c in checks)
            info = self.functions.get(name)
            return info.get("smallest_failing") if info and shown else None
        def failed_cell(name):
            info = self.functions.get(name)
            failure = info.get("defining_cell_failed") if info else None
            return cell_failure(failure) if failure else None
        def renamed(name):
            info = self.functions.get(name)
            similar = info.get("similar_names") if info else None
            return renamed_hint(name, similar, self.staff) if similar else None
        views = [FunctionView(n, sum(c.points for c in g), sum(c.max_points for c in g), g, smallest(n, g),
                              failed_cell(n), renamed(n))
                 for n, g in zip(names, grouped)]
        return [replace(v, nothing_earned=nothing_earned(v, self.functions.get(v.name))) for v in views]

    def to_json(self) -> dict:
        """The result's JSON contract; for the staff, exactly GradeResult.to_json()."""
        data = {f.name: getattr(self, f.name) for f in fields(GradeResult)}
        data["checks"] = [{f.name: getattr(c, f.name) for f in fields(CheckResult)} for c in self.checks]
        data["errors"] = [e.to_json() for e in self.errors]
        return data


def nothing_earned(fn: FunctionView, info: FunctionInfo | None) -> str | None:
    """Why a function earned none of its points, when no likely mistake says it: its defining
    cell failed, it is not defined (and what it may have been renamed to), it is still the
    template's placeholder, or it does not compute attention yet. None when it earned points,
    when a mistake is named, or when its result does not say."""
    if fn.points or not fn.max_points or fn.main_mistake or not info:
        return None
    if fn.defining_cell:
        return f"not graded, its defining cell failed: {fn.defining_cell}"
    if not info.get("found"):
        return "not implemented: not defined" + (f"; {fn.renamed}" if fn.renamed else "")
    if info.get("stub"):
        return "not implemented: still the template's placeholder"
    if info.get("non_answer"):
        return "does not compute attention yet"
    return None


def renamed_hint(name: str, similar: list[str], staff: bool) -> str:
    """What to say once of a function the notebook does not define when definitions named like
    it do (result.functions[name]["similar_names"]): to a student, rename; to the staff also how
    to grade it as named, through the spec's `aliases`, which the grader never assumes."""
    named = " or ".join(f"`{other}`" for other in similar)
    hint = f"Did you mean {named}? Only a definition named `{name}` is graded: rename yours to `{name}`."
    if staff:
        aliases = ", ".join(f'"{alias}"' for alias in similar)
        hint += (f" Staff: to grade it under its own name, add aliases = [{aliases}] to `{name}`'s table in the "
                 "spec (docs/specs.md).")
    return hint


def shows_case_marked(check: CheckResult, mark: str) -> bool:
    """The check's message, advice or figures come from a case whose label carries `mark`."""
    return any(mark in str(text) for text in
               (check.message, check.advice, *(f.get("case", "") for f in check.figures)))


def withheld_note(check: CheckResult) -> str | None:
    """What a student reads in place of the check's details, or None when they may read them."""
    if check.hidden or shows_case_marked(check, HIDDEN_CASE_MARK):
        return HIDDEN_NOTE
    if shows_case_marked(check, SHAPED_AS_HIDDEN_MARK):
        return SHAPED_AS_HIDDEN_NOTE
    return None


def check_view(check: CheckResult, staff: bool) -> CheckView:
    note = None if staff else withheld_note(check)
    shared = {f.name: getattr(check, f.name) for f in fields(CheckResult)}
    if note:
        shared.update(message=note, diagnosis=None, figures=[], advice="")
    return CheckView(**shared, withheld=note is not None)


def result_view(result: GradeResult, staff: bool = False) -> ResultView:
    """What may be shown of `result`: to a student, or with `staff` to the teaching staff."""
    shared = {f.name: getattr(result, f.name) for f in fields(GradeResult) if f.name != "checks"}
    shared["seed"] = result.seed if staff or result.seed == PUBLIC_SEED else None
    return ResultView(staff=staff, checks=tuple(check_view(c, staff) for c in result.checks), **shared)


def shown(points: float) -> str:
    """Points as a person reads them, in every report, summary and message: to two decimals at
    most (a share of 6 of 11 gradients is 1.64, not 1.63636). The gradebooks' files keep the
    score itself (grader/batch/gradebook.py)."""
    return f"{round(points, 2):g}"


def student_feedback_line(result: GradeResult | dict) -> str:
    """One line a student may read about a result (a GradeResult, or its JSON as result.json
    and a batch's rows hold it), for feedback an LMS shows beside the grade: the score, the
    likely mistakes of the student view and the functions whose defining cell failed, or why
    it was not graded. Nothing a hidden check
    found, and no seed."""
    if isinstance(result, dict):
        result = GradeResult.from_json(result)
    view = result_view(result, staff=False)
    if view.status == "error":
        why = next((e.evalue for e in view.errors if e.not_graded), "")
        return f"Not graded: {why.strip().splitlines()[0]}" if why.strip() else "Not graded."
    mistakes = "; ".join(f"{fn}: {mistake}" for fn, mistake in view.likely_mistakes)
    status = " (the notebook ran out of time)" if view.status == "timeout" else ""
    failed_cells = "".join(f" {fn.name} was not graded, its defining cell failed: {fn.defining_cell}."
                           for fn in view.by_function if fn.defining_cell)
    likely = f" Likely mistakes: {mistakes}." if mistakes else ""
    return f"Autograded {shown(view.score)} / {shown(view.max_score)}{status}.{likely}{failed_cells}"


def failing_line(error: ErrorRecord) -> str:
    """The line of the cell that raised, from IPython's traceback (its "---->" marker), else
    the cell's first line."""
    for line in ANSI.sub("", error.traceback).splitlines():
        marker = re.match(r"\s*-+>\s*\d+\s(.*)", line)
        if marker and marker.group(1).strip():
            return marker.group(1).strip()
    return next((s.strip() for s in error.source.splitlines() if s.strip()), "")


def where(error: ErrorRecord) -> str:
    """Where an error happened, as a student finds it: the cell's number (cell_number) and
    its failing line; or the grader's own code."""
    if error.cell < 0:
        return "grader"
    line = failing_line(error)
    return f"cell {cell_number(error.cell)}" + (f" ({line[:60]})" if line else "")


def cell_failure(failure: DefiningCellFailure) -> str:
    """A failed defining cell (result.functions[name]["defining_cell_failed"]) in one line:
    "cell 5, line 6: SyntaxError: invalid syntax"."""
    line = f", line {failure['line']}" if failure.get("line") else ""
    return f"cell {cell_number(failure['cell'])}{line}: {failure['ename']}: {failure['evalue']}"


# A cell's error kinds that mean it was stopped at its time limit: interrupted (timeout),
# killed when it ignored the interrupt (unresponsive), or never run because the notebook's
# own time ran out (deadline). Set by the grader's kernel client and runner, never by the kernel.
STOPPED_AT_TIMEOUT = ("timeout", "unresponsive", "deadline")
PROBLEM_CHARS = 200


def stopped_at_timeout(result: GradeResult) -> bool:
    """A cell of the notebook was stopped at its timeout, or the notebook ran out of time,
    whether or not the submission was otherwise graded."""
    return result.status == "timeout" or any(e.kind in STOPPED_AT_TIMEOUT and e.cell >= 0 for e in result.errors)


def failed_definitions(result: GradeResult) -> dict[str, list[str]]:
    """The failed cells that left graded functions undefined ("cell 5, line 6: SyntaxError:
    ..."), each with the functions it left undefined."""
    failed: dict[str, list[str]] = {}
    for name, info in result.functions.items():
        if info.get("defining_cell_failed"):
            failed.setdefault(cell_failure(info["defining_cell_failed"]), []).append(name)
    return failed


def problem_line(result: GradeResult) -> str:
    """One line for the staff's class summary: why the file was not graded, which cell was
    stopped at its timeout, or which cell failed and left graded functions undefined; "" when
    nothing went wrong that way. Names the cell, so a message a
    student's code raised reads as that cell's, never as the grader's."""
    errors = result.errors
    if result.status == "error":
        chosen = (next((e for e in errors if e.not_graded), None)
                  or next((e for e in errors if e.kernel_lost or e.kind == "kernel_died"), None)
                  or next(iter(errors), None))
        if chosen is None:
            return "not graded"
        text = chosen.evalue if chosen.not_graded else f"{where(chosen)}: {chosen.ename}: {chosen.evalue}"
    elif stopped_at_timeout(result):
        chosen = next((e for e in errors if e.kind in STOPPED_AT_TIMEOUT), None)
        text = f"{where(chosen)}: {chosen.evalue}" if chosen else "the notebook ran out of time"
    elif failed := failed_definitions(result):
        text = "; ".join(f"{cell}: {' and '.join(names)} not graded" for cell, names in failed.items())
    else:
        return ""
    line = next((part for part in ANSI.sub("", str(text)).splitlines() if part.strip()), "").strip()
    return printable(line[:PROBLEM_CHARS] + ("…" if len(line) > PROBLEM_CHARS else ""), one_line=True)
