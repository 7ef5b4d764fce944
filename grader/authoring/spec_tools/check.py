"""`grader spec check SPEC [SOLUTION]`: a spec read against its schema, and the staff's solution
graded with it, which must earn every point."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.result import GradeResult
from grader.settings import settings_from
from grader.course.spec import Assignment, load_assignment


@dataclass
class Checked:
    assignment: Assignment
    result: GradeResult | None = None   # the solution graded, when one was given


def check_spec(spec: str, solution: Path | None = None, explicit: dict | None = None) -> Checked:
    """Raises SpecError (one line) for a spec that cannot be read; with a solution, grades it
    with the spec's own limits (the command line's `explicit` settings win)."""
    assignment = load_assignment(spec)
    if solution is None:
        return Checked(assignment)
    from grader.grade import grade_path   # the grading modules, only when there is something to grade
    return Checked(assignment, grade_path(solution, assignment, settings_from(explicit or {}, assignment.limits)))
