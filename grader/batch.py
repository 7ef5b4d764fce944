"""Grade many submissions into an output folder, in parallel and resumably.

Per submission: OUTDIR/<student>/result.json (as `grader check --json`) and report.html,
written atomically by the worker that graded it. Over all of them: grades.csv and
summary.html, rebuilt from every result.json at the end. A submission whose content,
assignment spec, seed and grader version are unchanged is skipped unless --force.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .files import write_atomically, write_json
from .grade import grade_path
from .inputs import Submission, collect
from .loader import SubmissionError
from .report_html import write_html, write_summary
from .result import GradeResult
from .sandbox import Sandbox
from .settings import settings_from
from .similarity import fingerprint, similar_pairs
from .spec import SpecError, assignment_for_submission, builtin_names, parse


@dataclass
class BatchReport:
    graded: int = 0
    skipped: int = 0
    duplicates: list = field(default_factory=list)
    similar: list = field(default_factory=list)


def batch_key(submission: Submission, assignment, seed: int) -> str:
    spec = json.dumps(assignment.raw, sort_keys=True, default=str)
    parts = [hashlib.sha256(submission.path.read_bytes()).hexdigest(), hashlib.sha256(spec.encode()).hexdigest(),
             __version__, str(seed)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def unreadable(name: str, seed: int, why: str) -> GradeResult:
    result = GradeResult(submission=name, assignment="?", seed=seed, status="error")
    result.errors.append({"cell": -1, "kind": "unreadable", "ename": "SubmissionError", "evalue": why,
                          "traceback": "", "source": ""})
    return result


def spec_for_task(explicit: dict) -> tuple | None:
    """How a worker, which has the grader but not this machine's files, finds the assignment:
    a built-in name, or the TOML text of a course's spec file."""
    requested = explicit.get("assignment")
    if not requested or requested in builtin_names():
        return ("builtin", requested) if requested else None
    path = Path(requested)
    if not path.is_file():
        raise SpecError(f"no such assignment spec file: {path}")
    return ("toml", path.read_text(encoding="utf-8"), str(path))


def grade_task(name: str, content: bytes, spec: tuple | None, explicit: dict) -> dict:
    """Grade one submission from its bytes, anywhere: in a local worker process or on a Dask
    worker. Returns the result as JSON-ready data; the caller writes the files."""
    with tempfile.TemporaryDirectory(prefix="grader-task-") as folder:
        path = Path(folder) / Path(name).name
        path.write_bytes(content)
        try:
            if spec and spec[0] == "toml":
                assignment = parse(spec[1], spec[2])
            else:
                assignment = assignment_for_submission(path, spec[1] if spec else None)
            result = grade_path(path, assignment, settings_from(explicit, assignment.limits))
        except (SubmissionError, SpecError) as exc:
            result = unreadable(path.name, settings_from(explicit).seed, str(exc))
    return result.to_json()


def _dask_wait(futures):
    from distributed import wait as dask_wait
    return dask_wait(futures, return_when="FIRST_COMPLETED")


def store(folder: Path, data: dict, submission: Submission, key: str, staff: bool) -> None:
    """Write a submission's result.json and report.html (rendered here, not on the worker)."""
    data = dict(data, student=submission.student, batch_key=key)
    write_json(folder / "result.json", data)
    write_html(GradeResult.from_json(data), folder / "report.html", staff=staff)


def up_to_date(folder: Path, key: str) -> bool:
    try:
        return json.loads((folder / "result.json").read_text()).get("batch_key") == key
    except (OSError, ValueError):
        return False


def write_csv(results: list[dict], path: Path) -> None:
    names = []
    for r in results:
        names.extend(c["name"] for c in r["checks"] if c["name"] not in names)
    buffer = io.StringIO()
    out = csv.writer(buffer)
    out.writerow(["submission", "student", "score", "max_score", "status", *names])
    for r in results:
        points = {c["name"]: c["points"] for c in r["checks"]}
        out.writerow([r["submission"], r["student"], f"{r['score']:g}", f"{r['max_score']:g}", r["status"],
                      *(f"{points[n]:g}" if n in points else "" for n in names)])
    write_atomically(path, buffer.getvalue())


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
                f"{rate:.2f}/s ETA {eta:.0f} s  {label}")
        print(("\r" + line[:120].ljust(120)) if self.live else line, end="" if self.live else "\n",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.live:
            print(file=self.stream, flush=True)


def local_pool(workers: int):
    """Worker processes that die with the grader, so a killed batch leaves nothing running."""
    return ProcessPoolExecutor(max_workers=workers, initializer=Sandbox.die_with_parent)


def dask_pool(scheduler: str):
    """An executor on an existing Dask cluster (distributed's Client is one)."""
    try:
        from distributed import Client
    except ImportError:
        raise SubmissionError("--scheduler needs Dask: pip install 'attention-grader[dask]'") from None
    try:
        return Client(scheduler, timeout=30)
    except OSError as exc:
        raise SubmissionError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None


def grade_all(paths: list[Path], outdir: Path, explicit: dict, workers: int | None = None, force: bool = False,
              scheduler: str | None = None, stream=sys.stderr) -> BatchReport:
    outdir.mkdir(parents=True, exist_ok=True)
    submissions, duplicates = collect(paths, outdir / ".submissions")
    report = BatchReport(duplicates=duplicates)
    for student, files in duplicates:
        print(f"duplicate student id {student}: {', '.join(files)} (graded separately)", file=stream)
    seed = settings_from(explicit).seed
    todo = []
    for s in submissions:
        try:
            key = batch_key(s, assignment_for_submission(s.path, explicit.get("assignment")), seed)
        except (SubmissionError, SpecError):
            key = hashlib.sha256(s.path.read_bytes()).hexdigest()
        if not force and up_to_date(outdir / s.folder, key):
            report.skipped += 1
        else:
            todo.append((s, key))
    progress = Progress(len(todo), stream)
    spec = spec_for_task(explicit)
    pool = dask_pool(scheduler) if scheduler else local_pool(max(1, min(workers or os.cpu_count() or 1,
                                                                         len(todo) or 1)))
    with pool:
        pending = {pool.submit(grade_task, s.path.name, s.path.read_bytes(), spec, explicit): (s, key)
                   for s, key in todo}
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED) if not scheduler else \
                _dask_wait(list(pending))
            for future in done:
                s, key = pending.pop(future)
                try:
                    data = future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker still yields a row
                    data = unreadable(s.path.name, seed, f"grading failed: {type(exc).__name__}: {exc}").to_json()
                store(outdir / s.folder, data, s, key, settings_from(explicit).staff)
                report.graded += 1
                progress.step(f"{s.path.name}: {data['score']:g}/{data['max_score']:g} {data['status']}")
    progress.close()
    results = []
    for s in submissions:
        try:
            results.append(json.loads((outdir / s.folder / "result.json").read_text()))
        except (OSError, ValueError):
            continue
    write_csv(results, outdir / "grades.csv")
    report.similar = similar_pairs([(s.folder, fingerprint(s.path, graded_names(r)))
                                    for s, r in zip(submissions, results)])
    write_summary(results, [s.folder for s in submissions], duplicates, report.similar, outdir / "summary.html")
    return report


def graded_names(result: dict) -> set[str]:
    return {info.get("name", fn) for fn, info in result.get("functions", {}).items()} | set(result.get("functions", {}))
