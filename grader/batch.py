"""Grade many submissions into an output folder: one result.json and report.html each, and
grades.csv over all of them. A submission that cannot be read still gets a row."""
from __future__ import annotations

import csv
import io
import sys
import time
from pathlib import Path

from .grade import grade_path
from .loader import SubmissionError
from .report_html import write_html
from .result import GradeResult

SUFFIXES = (".ipynb", ".py")


def collect(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file()
                                and ".ipynb_checkpoints" not in p.parts))
        elif path.exists():
            found.append(path)
        else:
            raise SubmissionError(f"no such file or folder: {path}")
    return found


def unique_ids(paths: list[Path]) -> dict[Path, str]:
    ids, seen = {}, {}
    for path in paths:
        stem = path.stem
        seen[stem] = seen.get(stem, 0) + 1
        ids[path] = stem if seen[stem] == 1 else f"{stem}-{seen[stem]}"
    return ids


def unreadable(path: Path, assignment: str, seed: int, why: str) -> GradeResult:
    result = GradeResult(submission=path.name, assignment=assignment, seed=seed, status="error")
    result.errors.append({"cell": -1, "kind": "unreadable", "ename": "SubmissionError", "evalue": why,
                          "traceback": "", "source": ""})
    return result


def write_csv(rows: list[tuple[str, GradeResult]], path: Path) -> None:
    names = []
    for _, r in rows:
        names.extend(c.name for c in r.checks if c.name not in names)
    buffer = io.StringIO()
    out = csv.writer(buffer)
    out.writerow(["submission", "student", "score", "max_score", "status", *names])
    for student, r in rows:
        points = {c.name: c.points for c in r.checks}
        out.writerow([r.submission, student, f"{r.score:g}", f"{r.max_score:g}", r.status,
                      *(f"{points[n]:g}" if n in points else "" for n in names)])
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(buffer.getvalue())
    tmp.replace(path)


def grade_all(paths: list[Path], outdir: Path, assignment_for, settings_for, settings, stream=sys.stderr) -> list:
    """`settings` are the command line's; `settings_for(assignment)` adds a spec's limits."""
    submissions = collect(paths)
    ids = unique_ids(submissions)
    outdir.mkdir(parents=True, exist_ok=True)
    rows, started = [], time.monotonic()
    for done, path in enumerate(submissions, 1):
        try:
            assignment = assignment_for(path)
            result = grade_path(path, assignment, settings_for(assignment))
        except SubmissionError as exc:
            result = unreadable(path, settings.assignment or "?", settings.seed, str(exc))
        folder = outdir / ids[path]
        result.write_json(folder / "result.json")
        write_html(result, folder / "report.html", staff=settings.staff)
        rows.append((ids[path], result))
        rate = done / max(time.monotonic() - started, 1e-9)
        eta = (len(submissions) - done) / rate
        print(f"[{done}/{len(submissions)}] {path.name}: {result.score:g}/{result.max_score:g} {result.status}"
              f"  ({rate:.2f}/s, ETA {eta:.0f} s)", file=stream, flush=True)
    write_csv(rows, outdir / "grades.csv")
    return rows
