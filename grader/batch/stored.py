"""What a batch keeps in OUTDIR of each submission: its result.json and report.html, written
atomically, and the key that says whether a stored result is still up to date (so a run that
is started again resumes where the last one stopped).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from grader import __version__
from grader.atomic_write import write_json
from grader.batch.tasks import reason
from grader.course.spec import Assignment
from grader.grade import not_graded
from grader.intake.discover import Submission
from grader.intake.notebook import SubmissionError, read_submission
from grader.report.html import write_html
from grader.report.view import problem_line, stopped_at_timeout
from grader.result import GradeResult, ResultFormatError
from grader.settings import SETTINGS, settings_from, Settings


def batch_key(content: bytes, assignment, settings: Settings) -> str:
    """What a stored result depends on: the submission's bytes, the spec's content and its
    support modules' and fixed_data files', every setting that shapes a result (see Setting.shapes_result) and the
    grader's version."""
    shaping = {s.name: getattr(settings, s.name) for s in SETTINGS if s.shapes_result}
    parts = {"submission": hashlib.sha256(content).hexdigest(), "spec": assignment.raw, "settings": shaping,
             "version": __version__}
    if assignment.support is not None:   # the course's modules, which the spec only names
        parts["support"] = [(f.module_path, hashlib.sha256(f.data).hexdigest()) for f in assignment.support.files]
    if assignment.sheet_files:   # the course's own sheet data, which the spec only names
        parts["sheets"] = [(f.shipped_as, hashlib.sha256(f.data).hexdigest()) for f in assignment.sheet_files]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def planned_key(s: Submission, assignment, explicit_for) -> str:
    """The submission's resume key; raises when it cannot even be read."""
    if s.problem:
        raise SubmissionError(s.problem)
    content = read_submission(s.path, s.found_as)
    return batch_key(content, assignment, settings_from(explicit_for(s, content), assignment.limits))


@dataclass
class Output:
    """OUTDIR and how a submission's row gets into it."""
    outdir: Path
    assignment: Assignment
    seed: int
    staff: bool

    def error_row(self, s: Submission, why: str) -> dict:
        return not_graded(s.name, self.assignment, self.seed, "unreadable", "SubmissionError", why).to_json()

    def stored(self, s: Submission, key: str) -> dict | None:
        """The stored result, if it is up to date; an error is never, so it is graded again."""
        try:
            data = json.loads((self.outdir / s.folder / "result.json").read_text(encoding="utf-8"))
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

    def keep(self, s: Submission, data: dict, key: str) -> dict:
        """Write a submission's result.json and report.html (rendered here, not on the worker)
        and return its row (summary_row). When they cannot be written, the row is the error
        saying why, on disk if that at least can be written."""
        # graded_at: when this grading was done, which Moodle's worksheet needs (grader/batch/lms_gradebooks.py).
        row = dict(data, student=s.student, batch_key=key, graded_at=time.time())
        try:
            self._write(s, row)
        except Exception as exc:  # noqa: BLE001 - one submission's report never stops the batch
            row = dict(self.error_row(s, f"the result could not be written: {reason(exc)}"), student=s.student,
                       batch_key=key)
            try:
                self._write(s, row)
            except Exception:  # noqa: BLE001 - the row still reaches grades.csv and the summary
                pass
        return summary_row(row)

    def _write(self, s: Submission, row: dict) -> None:
        folder = self.outdir / s.folder
        write_json(folder / "result.json", row)
        write_html(GradeResult.from_json(row), folder / "report.html", staff=self.staff)


def summary_row(row: dict) -> dict:
    """What a batch keeps of a submission's result until grades.csv and the class summary are
    written: everything but the checks' messages and figures and the errors' tracebacks, which
    are in its result.json. Kept whole, a class's worth of them made the grader's memory grow
    with the size of the batch. What the summary says of its errors is taken first, from all of them."""
    result = GradeResult.from_json(row)
    return {**row, "problem": problem_line(result), "timed_out": stopped_at_timeout(result),
            "checks": [dict(c, message="", figures=[]) for c in row.get("checks", [])],
            "errors": [{k: e.get(k) for k in ("cell", "kind", "ename", "evalue")} for e in row.get("errors", [])[:1]]}


def record_override(path: Path, override: dict | None) -> None:
    """The staff's override beside the grading in a result.json (which keeps its own score),
    or none: an override taken out of the file is taken out of the result too."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or data.get("override") == override:
        return
    if override is None:
        data.pop("override", None)
    else:
        data["override"] = override
    write_json(path, data)
