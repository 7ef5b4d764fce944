"""The LMS platforms the grader runs inside, as facts with no grading behind them: each one's
name, folders and results file. The command line reads them without importing the grading
(grader/cli.py); grader/lms/entrypoints.py adds how each one's results are written. A new
platform is one entry here and its renderer there.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Place:
    name: str
    default_root: str        # the platform's folder when --root is not given
    submission_folder: str   # under the root: where the student's files are
    spec_folder: str         # under the root: where the staff's spec and support files are
    # Whether a fault of the machine (grader.errors.MachineFault) may still be written as a
    # result: only where the platform's format says "not graded" without costing the student
    # anything. Elsewhere no results file is written, so the platform shows the job as failed
    # and the staff regrade it once the machine is mended.
    fault_as_result: bool = False

    def results_path(self, root: Path) -> Path:
        return root / "results" / "results.json"


# PrairieLearn's `gradable: false`: "no points will be awarded or lost, and the student will not
# be penalized an attempt" (docs/externalGrading.md).
PLACES = {p.name: p for p in (Place("gradescope", "/autograder", "submission", "source"),
                              Place("prairielearn", "/grade", "student", "tests", fault_as_result=True))}
