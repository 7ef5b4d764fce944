"""The class as a gradebook sees it: one row per student, from one row per submission.

The one home of the duplicate rule (which of a student's files counts), of the per-function
points and main mistake a gradebook shows (from the staff's view, grader/report/view.py), of staff
overrides applied to the score, and of the CSV cell guard. grades.csv, the LMS exports and the
class summary are all made from these rows.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.atomic_write import write_atomically
from grader.intake.discover import Submission
from grader.batch.staff_overrides import applied
from grader.result import GradeResult
from grader.report.view import problem_line, result_view, stopped_at_timeout, student_feedback_line


def summary_row(row: dict) -> dict:
    """What a batch keeps of a submission's result until grades.csv and the class summary are
    written: everything but the checks' messages and figures and the errors' tracebacks, which
    are in its result.json. Kept whole, a class's worth of them made the grader's memory grow
    with the size of the batch. What the summary says of its errors is taken first, from all of them."""
    result = GradeResult.from_json(row)
    return {**row, "problem": problem_line(result), "timed_out": stopped_at_timeout(result),
            "checks": [dict(c, message="", figures=[]) for c in row.get("checks", [])],
            "errors": [{k: e.get(k) for k in ("cell", "kind", "ename", "evalue")} for e in row.get("errors", [])[:1]]}


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection); file
# and student names come from students, so such a cell is written with a leading quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(text) -> str:
    text = "" if text is None else str(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


@dataclass
class StudentRow:
    """One student's line in every gradebook the batch writes."""
    student: str
    name: str
    lms: str
    assignment: str
    status: str
    score: float              # the grader's score of the file that counts
    max_score: float
    functions: list           # [{"name", "points", "max_points", "mistake"}] in the assignment's order
    submission: str           # the file that counts
    folder: str               # its folder in the output, where result.json and report.html are
    duplicate_note: str = ""  # which of the student's files counted and why, when there were several
    override: dict | None = None   # {"score", "graded_score", "reason", "file", ...} (grader/batch/staff_overrides.py)
    others: list = field(default_factory=list)   # the folders of the student's files that do not count
    feedback: str = ""         # what the student may read of the grading (grader/report/view.py)
    graded_at: float | None = None   # when the file that counts was graded (seconds since the epoch)
    late: bool = False         # the LMS marked the file that counts late (grader/intake/discover.py, Identity.late)
    problem: str = ""          # one line: why it was not graded, or which cell was stopped (summary_row)
    timed_out: bool = False    # a cell was stopped at its timeout, or the notebook ran out of time

    @property
    def final_score(self) -> float | None:
        """What the gradebook gets: the override's score, else the grader's; None for a
        submission that could not be graded (the gradebook cell is left for the staff)."""
        if self.override is not None:
            return self.override["score"]
        return None if self.status == "error" else self.score


def _newness(s: Submission) -> tuple:
    """Later files compare larger: Canvas's attachment id where the name carries one, then the
    file's modification time (an archive member's own date), then its name. Canvas's download
    holds only each student's latest attempt, so a student's several Canvas files are files of
    that attempt; its ids are database keys that grow, so the larger id is the file Canvas
    stored last."""
    try:
        modified = os.stat(s.path).st_mtime
    except OSError:
        modified = 0.0
    attachment = s.identity.attachment if s.identity and s.identity.attachment is not None else -1
    return attachment, modified, s.source


def counted(submissions: list[Submission]) -> dict[str, tuple[bool, str]]:
    """folder -> (whether it counts, the note saying so) for the submissions of one student id:
    the latest counts (see _newness); the staff can change that with an override."""
    if len(submissions) == 1:
        return {submissions[0].folder: (True, "")}
    ordered = sorted(submissions, key=_newness, reverse=True)
    winner = ordered[0]
    by = "Canvas attachment id" if winner.identity and winner.identity.attachment is not None else "file date"
    others = ", ".join(s.name for s in ordered[1:])
    notes = {winner.folder: (True, f"counted: {winner.name}, the latest of {len(ordered)} files "
                                   f"(by {by}); not counted: {others}")}
    for s in ordered[1:]:
        notes[s.folder] = (False, f"not counted: {winner.name} counts instead, the latest of {len(ordered)} "
                                  f"files (by {by})")
    return notes


def function_columns(row: dict, names: list[str]) -> list[dict]:
    """Per function of the assignment, its points and main mistake (the staff see every check),
    or, where no mistake is named, why it earned nothing: a 0 always says why."""
    view = result_view(GradeResult.from_json(row), staff=True)
    found = {fn.name: fn for fn in view.by_function}
    return [{"name": n, "points": found[n].points if n in found else 0.0,
             "max_points": found[n].max_points if n in found else 0.0,
             "mistake": (found[n].main_mistake or found[n].nothing_earned or "") if n in found else ""}
            for n in names]


def class_rows(submissions: list[Submission], rows: dict[str, dict], functions: list[str],
               overrides: dict | None = None) -> tuple[list[StudentRow], dict[str, tuple[bool, str]]]:
    """(one row per student, with the file that counts; folder -> (counts, note) for every
    submission). `overrides` maps a student id to the staff's override (grader/batch/staff_overrides.py),
    applied to the score of the file that counts."""
    by_student: dict[str, list[Submission]] = {}
    for s in submissions:
        by_student.setdefault(s.student, []).append(s)
    decisions: dict[str, tuple[bool, str]] = {}
    students = []
    for student, theirs in by_student.items():
        decided = counted(theirs)
        decisions.update(decided)
        chosen = next(s for s in theirs if decided[s.folder][0])
        row = rows[chosen.folder]
        identity = chosen.identity
        staff = (overrides or {}).get(student)
        students.append(StudentRow(
            student=student, name=identity.name if identity else "", lms=identity.lms if identity else "",
            assignment=row.get("assignment", ""), status=row.get("status", "error"), score=row.get("score", 0.0),
            max_score=row.get("max_score", 0.0), functions=function_columns(row, functions), submission=chosen.name,
            folder=chosen.folder, duplicate_note=decided[chosen.folder][1],
            override=applied(staff, row.get("score", 0.0), row.get("max_score", 0.0)) if staff else None,
            others=[s.folder for s in theirs if s is not chosen],
            feedback=student_feedback_line(GradeResult.from_json(row)), graded_at=row.get("graded_at"),
            late=bool(identity and identity.late), problem=row.get("problem", ""),
            timed_out=bool(row.get("timed_out"))))
    return students, decisions


def write_grades_csv(students: list[StudentRow], functions: list[str], path: Path) -> None:
    """grades.csv: one row per student who counts; per-check detail stays in each result.json."""
    buffer = io.StringIO()
    out = csv.writer(buffer)
    out.writerow(["student", "name", "assignment", "score", "max_score", "status", "late",
                  *(f"{n} {what}" for n in functions for what in ("points", "mistake")),
                  "graded_score", "override", "submission", "duplicates"])
    for s in students:
        per_function = [v for f in s.functions for v in (number(f["points"]), cell(f["mistake"]))]
        override = f"{number(s.override['score'])}: {s.override['reason']}" if s.override else ""
        out.writerow([cell(s.student), cell(s.name), cell(s.assignment), number(s.final_score),
                      number(s.max_score), s.status, "yes" if s.late else "", *per_function, number(s.score),
                      cell(override), cell(s.submission), cell(s.duplicate_note)])
    write_atomically(path, buffer.getvalue())
