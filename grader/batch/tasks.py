"""One submission graded as a task: from its bytes, in a local worker process or on a Dask
worker that has the grader but not this machine's files; the caller writes what it returns.
"""
from __future__ import annotations

from pathlib import Path

from grader.course.spec import Assignment, builtin_names, load_assignment, parse, spec_text, staff_assignment
from grader.errors import SpecError
from grader.grade import grade_path, not_graded
from grader.intake.notebook import SubmissionError, one_line
from grader.sandbox.isolation import run_id
from grader.result import GradeResult
from grader.sandbox.reaper import temporary_folder
from grader.settings import settings_from


def reason(exc: BaseException) -> str:
    """One line for an error row; the grader's own errors are already worded for users."""
    return one_line(exc, typed=not isinstance(exc, (SubmissionError, SpecError)))


def spec_for_task(explicit: dict) -> tuple | None:
    """How a worker, which has the grader but not this machine's files, finds the assignment:
    a built-in name, or the TOML text of a course's spec file with its support modules and its
    fixed_data files as read.
    An unusable --assignment stops the batch here, with a one-line SpecError, before any
    submission is graded."""
    requested = explicit.get("assignment")
    if not requested:
        return None
    assignment = load_assignment(requested)
    if requested in builtin_names():
        return ("builtin", requested)
    return ("toml", spec_text(Path(requested)), requested, assignment.support,
            {f.shipped_as: f.data for f in assignment.sheet_files})


def unreadable(name: str, assignment: Assignment, seed: int, why: str) -> GradeResult:
    """The result of a submission that could not be read or graded, and why (one line)."""
    return not_graded(name, assignment, seed, "unreadable", "SubmissionError", why)


def grade_task(name: str, content: bytes, spec: tuple | None, explicit: dict) -> dict:
    """Grade one submission from its bytes, anywhere: in a local worker process or on a Dask
    worker. Returns the result as JSON-ready data; the caller writes the files."""
    with temporary_folder(f"grader-task-{run_id()}-") as folder:
        path = Path(folder) / Path(name).name
        path.write_bytes(content)
        # Checked before the batch started (spec_for_task), so it loads here too.
        if spec and spec[0] == "toml":
            assignment = parse(spec[1], spec[2], support=spec[3], sheet_files=spec[4])
        else:
            assignment = staff_assignment(spec[1] if spec else None)
        try:
            result = grade_path(path, assignment, settings_from(explicit, assignment.limits))
        except SubmissionError as exc:
            result = unreadable(path.name, assignment, settings_from(explicit).seed, reason(exc))
    return result.to_json()
