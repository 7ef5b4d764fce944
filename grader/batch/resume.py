"""Whether a batch started again may skip a submission: the key a stored result depends on, and
the stored result itself when that key still fits (so a run that was stopped resumes where it
stopped, and a changed submission, spec, setting or grader is graded again).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grader import __version__
from grader.course.spec import Assignment
from grader.intake.discover import Submission
from grader.intake.notebook import SubmissionError, read_submission
from grader.result import GradeResult, ResultFormatError
from grader.settings import SETTINGS, settings_from, Settings


def batch_key(content: bytes, assignment: Assignment, settings: Settings) -> str:
    """What a stored result depends on: the submission's bytes, the spec's content and its
    support modules' and fixed_data files', every setting that shapes a result (see
    Setting.shapes_result) and the grader's version."""
    shaping = {s.name: getattr(settings, s.name) for s in SETTINGS if s.shapes_result}
    parts = {"submission": hashlib.sha256(content).hexdigest(), "spec": assignment.raw, "settings": shaping,
             "version": __version__}
    if assignment.support is not None:   # the course's modules, which the spec only names
        parts["support"] = [(f.module_path, hashlib.sha256(f.data).hexdigest()) for f in assignment.support.files]
    if assignment.sheet_files:   # the course's own sheet data, which the spec only names
        parts["sheets"] = [(f.shipped_as, hashlib.sha256(f.data).hexdigest()) for f in assignment.sheet_files]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def planned_key(s: Submission, assignment: Assignment, explicit_for) -> str:
    """The submission's resume key; raises when it cannot even be read."""
    if s.problem:
        raise SubmissionError(s.problem)
    content = read_submission(s.path, s.found_as)
    return batch_key(content, assignment, settings_from(explicit_for(s, content), assignment.limits))


def up_to_date(outdir: Path, s: Submission, key: str) -> dict | None:
    """The submission's stored result, if it was made under this key; an error never is, so
    it is graded again."""
    try:
        data = json.loads((outdir / s.folder / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fresh = isinstance(data, dict) and data.get("batch_key") == key and data.get("status") != "error"
    if not fresh:
        return None
    try:   # one written by an older grader, or damaged, is graded again like a stale one
        GradeResult.from_json(data)
    except ResultFormatError:
        return None
    return data
