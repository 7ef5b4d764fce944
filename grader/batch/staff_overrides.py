"""Staff overrides: a CSV of (student, score or points, reason) given to `grader grade
--overrides`, kept in OUTDIR so every later run of the same folder applies it again.

    student,score,reason        the student's score becomes `score`
    student,points,reason       `points` (may be negative) are added to the grader's score

`student` is the student's id or name (as the LMS export gives it, whatever its case).
Checked whole before any grading starts: a missing column, an unknown student (with the
closest ids and names), a name two students share (with their ids), a number that is not one
or a score outside 0..maximum is a one-line error naming the line.
"""
from __future__ import annotations

import csv
import difflib
import json
import math
import time
from pathlib import Path

from grader.errors import SubmissionError
from grader.atomic_write import write_json

STORED = "overrides.json"   # in OUTDIR: the overrides in force, re-applied by every run
MAX_ROWS = 100_000


def parse(path: Path) -> list[dict]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SubmissionError(f"cannot read the overrides file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SubmissionError(f"the overrides file {path} is not UTF-8 text") from None
    reader = csv.DictReader(text.splitlines())
    columns = {c.strip().lower() for c in (reader.fieldnames or [])}
    kinds = columns & {"score", "points"}
    if "student" not in columns or "reason" not in columns or len(kinds) != 1:
        raise SubmissionError(f"{Path(path).name}: the overrides file needs the columns student, reason and "
                              "either score (the new score) or points (added to the grader's score)")
    kind = kinds.pop()
    found, seen = [], set()
    for number, raw in enumerate(reader, start=2):
        if number > MAX_ROWS:
            raise SubmissionError(f"{Path(path).name}: more than {MAX_ROWS} overrides")
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items() if isinstance(v, str)}
        where = f"{Path(path).name}, line {number}"
        student, reason = row.get("student", ""), row.get("reason", "")
        if not student:
            raise SubmissionError(f"{where}: no student id")
        if not reason:
            raise SubmissionError(f"{where}: give a reason for the override of {student}")
        try:
            value = float(row.get(kind, ""))
        except ValueError:
            raise SubmissionError(f"{where}: {kind} {row.get(kind, '')!r} is not a number") from None
        if not math.isfinite(value):
            raise SubmissionError(f"{where}: {kind} must be a finite number")
        if student in seen:
            raise SubmissionError(f"{where}: a second override for {student}")
        seen.add(student)
        found.append({"student": student, kind: value, "reason": reason[:500], "file": Path(path).name,
                      "given_at": time.time()})
    return found


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def who(given: str, names: dict[str, str]) -> str:
    """The student id an override names, by id or by name (any case); a SubmissionError when
    the name is unknown (with the closest ids and names) or two students share it (with
    their ids)."""
    if given in names:
        return given
    same = sorted(student for student, name in names.items() if name and _folded(name) == _folded(given))
    if len(same) == 1:
        return same[0]
    if same:
        raise SubmissionError(f"override for {given}: {len(same)} students have that name (ids {', '.join(same)}); "
                              "name the student by id")
    label = {}   # an id or a folded name -> how the error shows that student
    for student, name in names.items():
        # Names come from students' LMS profiles: nothing in them may steer the TA's terminal.
        shown = "".join(c if c.isprintable() else "?" for c in (f"{name} ({student})" if name else student))
        label[student] = shown
        if name:
            label.setdefault(_folded(name), shown)
    closest = dict.fromkeys(label[c] for c in difflib.get_close_matches(_folded(given), list(label), n=3, cutoff=0.5))
    hint = f"; closest: {', '.join(closest)}" if closest else ""
    raise SubmissionError(f"override for {given}: no student of that id or name in this batch{hint}")


def check(overrides: list[dict], names: dict[str, str], max_score: float) -> list[dict]:
    """Every override names one student of this batch (`names`: id -> name, or "") and a score
    the assignment allows; returns them with each student given by id."""
    resolved, seen = [], set()
    for o in overrides:
        student = who(o["student"], names)
        if student in seen:
            raise SubmissionError(f"override for {o['student']}: a second override for student {student}")
        seen.add(student)
        if "score" in o and not 0 <= o["score"] <= max_score:
            raise SubmissionError(f"override for {o['student']}: score {o['score']:g} is outside 0 to {max_score:g}")
        resolved.append(dict(o, student=student))
    return resolved


def in_force(outdir: Path, given: Path | None) -> list[dict]:
    """The overrides given now (kept for later runs), else those a previous run kept."""
    stored = Path(outdir) / STORED
    if given is not None:
        return parse(given)
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def keep(outdir: Path, overrides: list[dict]) -> None:
    write_json(Path(outdir) / STORED, overrides)


def applied(override: dict, graded_score: float, max_score: float) -> dict:
    """The override as the gradebook and result.json record it."""
    if "score" in override:
        score, how = override["score"], f"score set to {override['score']:g}"
    else:
        score = min(max(graded_score + override["points"], 0.0), max_score)
        how = f"{override['points']:+g} points"
    return {"score": round(score, 6), "graded_score": graded_score, "change": how, "reason": override["reason"],
            "file": override["file"], "given_at": override.get("given_at")}
