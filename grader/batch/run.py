"""Grade many submissions into an output folder, in parallel and resumably.

Per submission: OUTDIR/<student>-<hash>/result.json (as `grader check --json`) and report.html,
written atomically. Over all of them: grades.csv and summary.html. Whatever goes wrong with
one submission (an unreadable file or archive, an unusable spec, a lost worker, a report that
cannot be written) becomes that submission's error row, and the batch goes on; a fault of the
machine (its kernels cannot start, MachineFault) stops the batch instead, with nothing stored
for the submissions it did not grade. A submission
whose content, spec, result-shaping settings and grader version are unchanged is skipped
unless --force, or unless its stored result is an error.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.batch import dask_cluster as cluster
from grader.batch import staff_overrides
from grader.batch.class_files import assignment_max, write_class_files
from grader.batch.pool import graded
from grader.batch.progress import Progress
from grader.batch.similarity import fingerprint, similar_pairs
from grader.batch.gradebook import summary_row
from grader.batch.resume import planned_key, up_to_date
from grader.batch.stored import Output
from grader.batch.tasks import reason, spec_for_task, unreadable
from grader.course.spec import Assignment, staff_assignment
from grader.intake.discover import Submission, collect
from grader.intake.notebook import SubmissionError
from grader.judging.seeds import run_secret, submission_seed
from grader.kernel import forked as forked_kernels
from grader.report.printable import printable
from grader.report.view import shown
from grader.settings import settings_from

UNPACKED = ".submissions"   # where archives are extracted, inside OUTDIR


@dataclass
class BatchReport:
    graded: int = 0
    skipped: int = 0
    duplicates: list = field(default_factory=list)
    similar: list = field(default_factory=list)
    exports: list = field(default_factory=list)   # the gradebook files written for an LMS


def grade_all(paths: list[Path], outdir: Path, explicit: dict, workers: int | None = None, force: bool = False,
              scheduler: str | None = None, stream=sys.stderr) -> BatchReport:
    if scheduler:   # refused before anything is written or unpacked
        scheduler = cluster.checked_address(scheduler, settings_from(explicit))
    outdir.mkdir(parents=True, exist_ok=True)
    spec = spec_for_task(explicit)
    support = spec[3] if spec and spec[0] == "toml" else None
    submissions, duplicates = collect(paths, outdir / UNPACKED, support.file_names() if support else frozenset())
    if all(s.nothing_gradable for s in submissions):   # no file to grade, only uploads saying so
        raise SubmissionError(f"nothing to grade in {', '.join(str(p) for p in paths)}: no notebook (.ipynb), "
                              ".py file or zip archive holding one")
    report = BatchReport(duplicates=duplicates)
    explicit_for = seeded(explicit, outdir)
    assignment = staff_assignment(explicit.get("assignment"))   # the same for every submission
    settings = settings_from(explicit)
    # Checked whole before any grading, so a typo in the overrides costs no time.
    overrides = staff_overrides.in_force(outdir, settings.overrides)
    names = {s.student: s.identity.name if s.identity else "" for s in submissions}
    overrides = staff_overrides.check(overrides, names, assignment_max(assignment))
    if settings.overrides is not None:
        staff_overrides.keep(outdir, overrides)
    for student, files in duplicates:
        print(printable(f"duplicate student id {student}: {', '.join(files)} (each graded; the latest counts, "
                        "see grades.csv)", one_line=True), file=stream)
    # An error row drew no inputs: it records the staff's seed, if any, else 0.
    rows = Rows(Output(outdir, settings.staff, error_rows(assignment, explicit.get("seed", 0))))
    todo = []
    for s in submissions:
        try:
            key = planned_key(s, assignment, explicit_for)
        except Exception as exc:  # noqa: BLE001 - unreadable or unzippable
            rows.not_graded(s, reason(exc))
            report.graded += 1
            continue
        previous = None if force else up_to_date(outdir, s, key)
        if previous:
            rows[s.folder] = summary_row(previous)
            report.skipped += 1
        else:
            todo.append((s, key))
    progress = Progress(len(todo), stream)
    if todo and not scheduler and forked_kernels.worth_starting(settings):
        forked_kernels.server()   # one for the whole batch: started before the workers, which share it
    found: dict[str, dict | str | None] = {}   # folder -> fingerprint; None: it failed, an error row says why
    if todo:
        for s, key, data in graded(todo, spec, explicit_for, workers, scheduler, settings):
            row = rows.keep(s, data, key)
            report.graded += 1
            progress.step(f"{s.name}: {shown(row['score'])}/{shown(row['max_score'])} {row['status']}")
            # Taken while the workers grade the rest: after the last result it would be the
            # batch's tail, with one core idle.
            add_fingerprint(found, s, rows)
    progress.close()
    for s in submissions:
        if s.folder not in found:
            add_fingerprint(found, s, rows)
    report.similar = similar_pairs([(s.folder, fp) for s in submissions if (fp := found[s.folder]) is not None])
    report.exports = write_class_files(outdir, submissions, rows, assignment, overrides, settings,
                                      report.similar, explicit.get("seed"), stream)
    return report


class Rows(dict):
    """folder -> the submission's row in grades.csv and the summary (summary_row), each kept
    in OUTDIR on its way in."""

    def __init__(self, output: Output):
        super().__init__()
        self.output = output

    def keep(self, s: Submission, data: dict | str, key: str) -> dict:
        """The result data graded for s (or why it could not be: a str) written and kept."""
        if isinstance(data, str):
            data = self.output.error_row(s, data)
        row = self[s.folder] = summary_row(self.output.keep(s, data, key))
        return row

    def not_graded(self, s: Submission, why: str) -> dict:
        """s kept as an error row under no key, so that the next run grades it again."""
        return self.keep(s, why, "")


def error_rows(assignment: Assignment, seed: int):
    """The result data of a submission that could not be graded, and why."""
    return lambda s, why: unreadable(s.name, assignment, seed, why).to_json()


def seeded(explicit: dict, outdir: Path):
    """The settings of a submission given its bytes. A seed the staff give replays a run: every
    submission gets it. Otherwise the batch's secret (kept in OUTDIR) gives every submission a
    seed of its own, which other bytes change (grader/judging/seeds.py)."""
    if "seed" in explicit:
        return lambda s, content: explicit
    secret = run_secret(outdir)
    return lambda s, content: dict(explicit, seed=submission_seed(secret, s.folder, content))


def add_fingerprint(found: dict[str, dict | str | None], s: Submission, rows: Rows) -> None:
    """The submission's fingerprint into `found`; one whose source defeats the fingerprint (too
    deeply nested to parse, say) becomes an error row instead, and None in `found`, so that it
    is neither tried again nor compared."""
    try:
        found[s.folder] = fingerprint(s.path, graded_names(rows[s.folder]))
    except Exception as exc:  # noqa: BLE001 - one submission's source never stops the batch
        found[s.folder] = None
        rows.not_graded(s, f"similarity check failed: {reason(exc)}")


def graded_names(result: dict) -> set[str]:
    return {info.get("name", fn) for fn, info in result.get("functions", {}).items()} | set(result.get("functions", {}))
