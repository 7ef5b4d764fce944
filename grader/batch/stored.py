"""What a batch writes into OUTDIR of each submission: its result.json and report.html, written
atomically, and later the staff's override beside it. Whether a stored result may be kept is
grader/batch/resume.py's; what the class files read of it is grader/batch/gradebook.py's.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.atomic_write import write_json
from grader.batch.tasks import reason
from grader.intake.discover import Submission
from grader.report.html import write_html
from grader.result import GradeResult


@dataclass
class Output:
    """OUTDIR, and how a submission's result gets into it."""
    outdir: Path
    staff: bool
    error_row: Callable[[Submission, str], dict]   # the result data of a submission not graded, and why

    def keep(self, s: Submission, data: dict, key: str) -> dict:
        """Write a submission's result.json and report.html (rendered here, not on the worker)
        and return the row written. When they cannot be written, the row is the error saying
        why, on disk if that at least can be written."""
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
        return row

    def _write(self, s: Submission, row: dict) -> None:
        folder = self.outdir / s.folder
        write_json(folder / "result.json", row)
        write_html(GradeResult.from_json(row), folder / "report.html", staff=self.staff)


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
