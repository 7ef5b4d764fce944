"""The files about the whole class that a batch writes into OUTDIR once every submission has a
result: grades.csv, the gradebooks an LMS imports, and the class summary, with the staff's
overrides recorded beside the gradings they change.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from grader import __version__
from grader.atomic_write import write_json
from grader.batch.gradebook import class_rows, write_grades_csv
from grader.batch.stored import record_override
from grader.course.spec import Assignment
from grader.intake.discover import Submission
from grader.batch.lms_gradebooks import write_exports
from grader.report.html import write_summary


def write_class_files(outdir: Path, submissions: list[Submission], rows: dict, assignment: Assignment,
                      overrides: list[dict], settings, similar: list, seed: int | None, stream) -> list:
    """Write them; returns the gradebook files written for an LMS."""
    functions = [f.name for f in assignment.functions]
    students, decisions = class_rows(submissions, rows, functions, {o["student"]: o for o in overrides})
    for student in students:
        record_override(outdir / student.folder / "result.json", student.override)
        for folder in student.others:
            record_override(outdir / folder / "result.json", None)
    write_grades_csv(students, functions, outdir / "grades.csv")
    exports = write_exports(students, outdir, lms_column(outdir, settings.lms_assignment, assignment),
                            assignment_max(assignment))
    for book in exports:   # said, so that no one drops out of the LMS's gradebook unnoticed
        for student in students:
            why = book.left_out(student) if student.lms == book.lms else ""
            if why:
                print(f"{book.file} leaves out {student.student}: {why}", file=stream)
    people = {s.folder: {"student": s.student, "name": s.identity.name if s.identity else "",
                         "submission": s.name, "counts": decisions[s.folder][0]} for s in submissions}
    header = {"assignment": assignment.title or assignment.name, "version": __version__,
              "seed": "secret, one per submission (in its result.json)" if seed is None else seed,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write_summary(students, rows, people, similar, outdir / "summary.html", header)
    return [book.file for book in exports]


LMS_COLUMN = "lms_assignment.json"   # in OUTDIR: the gradebook column given once, for later runs


def lms_column(outdir: Path, given: str | None, assignment: Assignment) -> str:
    """The assignment's column in the LMS gradebook: --lms-assignment, kept in OUTDIR so that a
    later run (to apply overrides, say) writes the same column; else the assignment's title."""
    stored = outdir / LMS_COLUMN
    if given:
        write_json(stored, {"lms_assignment": given})
        return given
    try:
        kept = json.loads(stored.read_text(encoding="utf-8")).get("lms_assignment")
    except (OSError, ValueError, AttributeError):
        kept = None
    return kept if isinstance(kept, str) and kept else assignment.title or assignment.name


def assignment_max(assignment: Assignment) -> float:
    return float(sum(sum(f.points.values()) for f in assignment.functions))
