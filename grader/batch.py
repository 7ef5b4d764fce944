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

import hashlib
import itertools
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, cluster, forked_kernels, overrides as staff_overrides
from .exports import CANVAS_FILE, canvas_left_out, write_exports
from .files import write_json
from .gradebook import class_rows, write_grades_csv
from .grade import grade_path, not_graded
from .inputs import Submission, collect
from .errors import MachineFault
from .loader import SubmissionError, one_line, read_submission
from .printable import printable
from .report_html import write_html, write_summary
from .result import GradeResult
from .sandbox import Sandbox, run_id
from .settings import SETTINGS, settings_from
from .similarity import fingerprint, similar_pairs
from .seeds import run_secret, submission_seed
from .spec import Assignment, SpecError, builtin_names, load_assignment, parse, spec_text, staff_assignment
from .view import problem_line, stopped_at_timeout
from .watchdog import temporary_folder

UNPACKED = ".submissions"   # where archives are extracted, inside OUTDIR


@dataclass
class BatchReport:
    graded: int = 0
    skipped: int = 0
    duplicates: list = field(default_factory=list)
    similar: list = field(default_factory=list)
    exports: list = field(default_factory=list)   # the gradebook files written for an LMS


def batch_key(content: bytes, assignment, settings) -> str:
    """What a stored result depends on: the submission's bytes, the spec's content and its
    support modules', every setting that shapes a result (see Setting.shapes_result) and the
    grader's version."""
    shaping = {s.name: getattr(settings, s.name) for s in SETTINGS if s.shapes_result}
    parts = {"submission": hashlib.sha256(content).hexdigest(), "spec": assignment.raw, "settings": shaping,
             "version": __version__}
    if assignment.support is not None:   # the course's modules, which the spec only names
        parts["support"] = [(f.module_path, hashlib.sha256(f.data).hexdigest()) for f in assignment.support.files]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def reason(exc: BaseException) -> str:
    """One line for an error row; the grader's own errors are already worded for users."""
    return one_line(exc, typed=not isinstance(exc, (SubmissionError, SpecError)))


def spec_for_task(explicit: dict) -> tuple | None:
    """How a worker, which has the grader but not this machine's files, finds the assignment:
    a built-in name, or the TOML text of a course's spec file with its support modules as read.
    An unusable --assignment stops the batch here, with a one-line SpecError, before any
    submission is graded."""
    requested = explicit.get("assignment")
    if not requested:
        return None
    assignment = load_assignment(requested)
    if requested in builtin_names():
        return ("builtin", requested)
    return ("toml", spec_text(Path(requested)), requested, assignment.support)


def grade_task(name: str, content: bytes, spec: tuple | None, explicit: dict) -> dict:
    """Grade one submission from its bytes, anywhere: in a local worker process or on a Dask
    worker. Returns the result as JSON-ready data; the caller writes the files."""
    with temporary_folder(f"grader-task-{run_id()}-") as folder:
        path = Path(folder) / Path(name).name
        path.write_bytes(content)
        # Checked before the batch started (spec_for_task), so it loads here too.
        assignment = parse(spec[1], spec[2], support=spec[3]) if spec and spec[0] == "toml" else \
            staff_assignment(spec and spec[1])
        try:
            result = grade_path(path, assignment, settings_from(explicit, assignment.limits))
        except SubmissionError as exc:
            result = not_graded(path.name, assignment, settings_from(explicit).seed, "unreadable", "SubmissionError",
                                reason(exc))
    return result.to_json()


def grade_alone(*task) -> dict:
    """grade_task in a worker process of its own, so that losing this worker is this
    submission's own doing."""
    # Started from a thread: a plain fork would copy locks other threads hold (an import in
    # progress in the main thread hung a worker forever), so the worker comes from a clean
    # fork server instead. It still dies with the grader: the server exits when the grader does.
    with local_pool(1, multiprocessing.get_context("forkserver")) as pool:
        return pool.submit(grade_task, *task).result()


def _dask_wait(futures):
    from distributed import wait as dask_wait
    return dask_wait(futures, return_when="FIRST_COMPLETED")


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
        return data if fresh else None

    def keep(self, s: Submission, data: dict, key: str) -> dict:
        """Write a submission's result.json and report.html (rendered here, not on the worker)
        and return its row (summary_row). When they cannot be written, the row is the error
        saying why, on disk if that at least can be written."""
        # graded_at: when this grading was done, which Moodle's worksheet needs (grader/exports.py).
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
    return {**row, "problem": problem_line(row), "timed_out": stopped_at_timeout(row),
            "checks": [dict(c, message="", figures=[]) for c in row.get("checks", [])],
            "errors": [{k: e.get(k) for k in ("cell", "kind", "ename", "evalue")} for e in row.get("errors", [])[:1]]}


class Progress:
    """done/total, rate and ETA on one line (a terminal) or one line per submission."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream, self.done, self.started = total, stream, 0, time.monotonic()
        self.live = hasattr(stream, "isatty") and stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate else 0
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{rate:.2f}/s ETA {eta:.0f} s  {printable(label, one_line=True)}")
        print(("\r" + line[:120].ljust(120)) if self.live else line, end="" if self.live else "\n",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.live:
            print(file=self.stream, flush=True)


def local_pool(workers: int, context=None):
    """Worker processes that die with the grader, so a killed batch leaves nothing running,
    and carry its run id, so their submissions' processes and folders are known as this run's."""
    run_id()
    return ProcessPoolExecutor(max_workers=workers, initializer=start_worker, mp_context=context)


def start_worker() -> None:
    """A local worker dies with the grader and, like `grader` itself (grader/cli.py), keeps
    libraries' warnings off the TA's terminal, which it shares."""
    Sandbox.die_with_parent()
    warnings.simplefilter("ignore")


def dask_pool(scheduler: str, settings):
    """An executor on an existing Dask cluster (distributed's Client is one), over TLS with the
    cluster's certificates where they are given (grader/cluster.py)."""
    try:
        from distributed import Client
    except ImportError:
        raise SubmissionError("--scheduler needs Dask: pip install '.[dask]' from the grader's folder") from None
    try:
        return Client(scheduler, timeout=settings.connect_timeout, security=cluster.security(settings))
    except (OSError, ValueError, TypeError) as exc:   # unreachable, refused, or a certificate that does not fit
        raise SubmissionError(f"cannot reach the Dask scheduler at {scheduler}: {one_line(exc)}") from None


def planned_key(s: Submission, assignment, explicit_for) -> str:
    """The submission's resume key; raises when it cannot even be read."""
    if s.problem:
        raise SubmissionError(s.problem)
    content = read_submission(s.path, s.found_as)
    return batch_key(content, assignment, settings_from(explicit_for(s, content), assignment.limits))


def graded(todo: list, spec, explicit_for, output: Output, workers: int | None, scheduler: str | None,
           settings):
    """(submission, key, result data) for each (submission, key) in todo, as they finish.

    A worker lost from the local pool (killed, out of memory) breaks the whole pool, and the
    pool cannot tell whose doing it was: every submission it had not finished is graded again
    in a worker of its own, and only a submission that loses that worker too gets the loss as
    its result."""
    width = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    pool = dask_pool(scheduler, settings) if scheduler else local_pool(width)
    with pool, ThreadPoolExecutor(width) as alone:
        pending = {}    # future -> (submission, key, the executor it runs on)
        finished = []   # (submission, key, data) ready to hand out

        def submit(s, key, executor, function):
            try:
                content = read_submission(s.path, s.found_as)
                pending[executor.submit(function, s.name, content, spec, explicit_for(s, content))] = \
                    (s, key, executor)
            except BrokenProcessPool:
                submit(s, key, alone, grade_alone)
            except Exception as exc:  # noqa: BLE001 - e.g. the file vanished since it was found
                finished.append((s, key, output.error_row(s, f"grading failed: {reason(exc)}")))

        waiting = iter(todo)

        def refill():
            # A few tasks ahead of the workers, not the whole batch: each task holds its
            # notebook's bytes until a worker takes it, so the grader's memory stays flat in
            # the size of the batch.
            for s, key in itertools.islice(waiting, max(0, 2 * width - len(pending))):
                submit(s, key, pool, grade_task)

        refill()
        while pending or finished:
            if pending:
                done, _ = _dask_wait(list(pending)) if scheduler else wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    s, key, executor = pending.pop(future)
                    try:
                        finished.append((s, key, future.result()))
                    except MachineFault:
                        # This machine cannot grade: the batch stops, and what is not graded yet
                        # is not started, so nothing is stored for it and the next run grades it.
                        yield from finished
                        for queued in pending:
                            queued.cancel()
                        raise
                    except BrokenProcessPool:
                        if executor is pool:
                            submit(s, key, alone, grade_alone)
                        else:
                            finished.append((s, key, output.error_row(
                                s, "grading failed: its worker process was lost twice (killed, or out of memory)")))
                    except Exception as exc:  # noqa: BLE001 - a failed task still yields a row
                        finished.append((s, key, output.error_row(s, f"grading failed: {reason(exc)}")))
            yield from finished
            finished.clear()
            refill()


def grade_all(paths: list[Path], outdir: Path, explicit: dict, workers: int | None = None, force: bool = False,
              scheduler: str | None = None, stream=sys.stderr) -> BatchReport:
    if scheduler:   # refused before anything is written or unpacked
        scheduler = cluster.checked_address(scheduler, settings_from(explicit))
    outdir.mkdir(parents=True, exist_ok=True)
    spec = spec_for_task(explicit)
    support = spec[3] if spec and spec[0] == "toml" else None
    submissions, duplicates = collect(paths, outdir / UNPACKED, support.file_names() if support else frozenset())
    if not submissions:
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
    output = Output(outdir, assignment, explicit.get("seed", 0), settings.staff)
    rows: dict[str, dict] = {}   # folder -> the submission's row in grades.csv and the summary
    todo = []
    for s in submissions:
        try:
            key = planned_key(s, assignment, explicit_for)
        except Exception as exc:  # noqa: BLE001 - unreadable or unzippable
            rows[s.folder] = output.keep(s, output.error_row(s, reason(exc)), "")
            report.graded += 1
            continue
        previous = None if force else output.stored(s, key)
        if previous:
            rows[s.folder] = summary_row(previous)
            report.skipped += 1
        else:
            todo.append((s, key))
    progress = Progress(len(todo), stream)
    if todo and not scheduler and forked_kernels.worth_starting(settings):
        forked_kernels.server()   # one for the whole batch: started before the workers, which share it
    if todo:
        for s, key, data in graded(todo, spec, explicit_for, output, workers, scheduler, settings):
            row = rows[s.folder] = output.keep(s, data, key)
            report.graded += 1
            progress.step(f"{s.name}: {row['score']:g}/{row['max_score']:g} {row['status']}")
    progress.close()
    report.similar = similar_pairs(fingerprints(submissions, rows, output))
    functions = [f.name for f in assignment.functions]
    students, decisions = class_rows(submissions, rows, functions, {o["student"]: o for o in overrides})
    for student in students:
        record_override(outdir / student.folder / "result.json", student.override)
        for folder in student.others:
            record_override(outdir / folder / "result.json", None)
    write_grades_csv(students, functions, outdir / "grades.csv")
    report.exports = write_exports(students, outdir, lms_column(outdir, settings.lms_assignment, assignment),
                                   assignment_max(assignment))
    for student in students:   # said, so that no one drops out of the LMS's gradebook unnoticed
        why = canvas_left_out(student) if student.lms == "canvas" else ""
        if why:
            print(f"{CANVAS_FILE} leaves out {student.student}: {why}", file=stream)
    people = {s.folder: {"student": s.student, "name": s.identity.name if s.identity else "",
                         "submission": s.name, "counts": decisions[s.folder][0]} for s in submissions}
    header = {"assignment": assignment.title or assignment.name, "version": __version__,
              "seed": explicit.get("seed", "secret, one per submission (in its result.json)"),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write_summary(students, rows, people, report.similar, outdir / "summary.html", header)
    return report


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


def seeded(explicit: dict, outdir: Path):
    """The settings of a submission given its bytes. A seed the staff give replays a run: every
    submission gets it. Otherwise the batch's secret (kept in OUTDIR) gives every submission a
    seed of its own, which other bytes change (grader/seeds.py)."""
    if "seed" in explicit:
        return lambda s, content: explicit
    secret = run_secret(outdir)
    return lambda s, content: dict(explicit, seed=submission_seed(secret, s.folder, content))


def fingerprints(submissions: list[Submission], rows: dict, output: Output) -> list[tuple[str, dict]]:
    """(folder, fingerprint) per submission; one whose source defeats the fingerprint (too
    deeply nested to parse, say) becomes an error row instead."""
    found = []
    for s in submissions:
        try:
            found.append((s.folder, fingerprint(s.path, graded_names(rows[s.folder]))))
        except Exception as exc:  # noqa: BLE001 - one submission's source never stops the batch
            rows[s.folder] = output.keep(s, output.error_row(s, f"similarity check failed: {reason(exc)}"), "")
    return found


def graded_names(result: dict) -> set[str]:
    return {info.get("name", fn) for fn, info in result.get("functions", {}).items()} | set(result.get("functions", {}))
