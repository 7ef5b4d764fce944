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
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .grade import grade_path
from .inputs import Submission, collect
from .loader import SubmissionError
from .report_html import write_html, write_summary
from .result import GradeResult
from .settings import settings_from
from .spec import SpecError, assignment_for_submission


@dataclass
class BatchReport:
    graded: int = 0
    skipped: int = 0
    duplicates: list = field(default_factory=list)


def batch_key(submission: Submission, assignment, seed: int) -> str:
    spec = json.dumps(assignment.raw, sort_keys=True, default=str)
    parts = [hashlib.sha256(submission.path.read_bytes()).hexdigest(), hashlib.sha256(spec.encode()).hexdigest(),
             __version__, str(seed)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def unreadable(submission: Submission, seed: int, why: str) -> GradeResult:
    result = GradeResult(submission=submission.path.name, assignment="?", seed=seed, status="error")
    result.errors.append({"cell": -1, "kind": "unreadable", "ename": "SubmissionError", "evalue": why,
                          "traceback": "", "source": ""})
    return result


def grade_one(submission: Submission, folder: Path, explicit: dict, key: str) -> dict:
    """In a worker process: grade, write result.json and report.html, return the row data."""
    try:
        assignment = assignment_for_submission(submission.path, explicit.get("assignment"))
        settings = settings_from(explicit, assignment.limits)
        result = grade_path(submission.path, assignment, settings)
    except (SubmissionError, SpecError) as exc:
        settings = settings_from(explicit)
        result = unreadable(submission, settings.seed, str(exc))
    data = result.to_json()
    data["student"] = submission.student
    data["batch_key"] = key
    write_json(folder / "result.json", data)
    write_html(result, folder / "report.html", staff=settings.staff)
    return data


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False))
    tmp.replace(path)


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buffer.getvalue())
    tmp.replace(path)


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


def grade_all(paths: list[Path], outdir: Path, explicit: dict, workers: int | None = None, force: bool = False,
              stream=sys.stderr) -> BatchReport:
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
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(grade_one, s, outdir / s.folder, explicit, key): s for s, key in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                s = pending.pop(future)
                try:
                    data = future.result()
                    label = f"{s.path.name}: {data['score']:g}/{data['max_score']:g} {data['status']}"
                except Exception as exc:  # noqa: BLE001 - a lost worker still yields a row
                    data = unreadable(s, seed, f"grading failed: {type(exc).__name__}: {exc}").to_json()
                    data.update(student=s.student, batch_key="")
                    write_json(outdir / s.folder / "result.json", data)
                    label = f"{s.path.name}: error"
                report.graded += 1
                progress.step(label)
    progress.close()
    results = []
    for s in submissions:
        try:
            results.append(json.loads((outdir / s.folder / "result.json").read_text()))
        except (OSError, ValueError):
            continue
    write_csv(results, outdir / "grades.csv")
    write_summary(results, [s.folder for s in submissions], duplicates, outdir / "summary.html")
    return report
