"""The self-contained HTML feedback report (jinja2; no scripts, fonts or fetches)."""
from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import jinja2

from grader.atomic_write import write_atomically
from grader.report.heatmap_words import heatmaps_in_words
from grader.result import GradeResult
from grader.report.view import ANSI, result_view, shown, where


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: it keeps each template compiled, so a batch worker compiles
    the report once, not once per submission (the templates are the package's own and do not
    change while it runs)."""
    env = jinja2.Environment(loader=jinja2.FunctionLoader(
        lambda name: resources.files("grader.templates").joinpath(name).read_text()),
        autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["heat"] = heat_colour
    env.filters["heat_text"] = heat_text_colour
    env.filters["in_words"] = heatmaps_in_words
    env.filters["where"] = where
    env.filters["plain"] = lambda text: ANSI.sub("", str(text))
    env.filters["timing"] = timing_text
    env.filters["points"] = shown
    return env


def timing_text(timing: dict) -> str:
    """The timing as a sentence: how long running the notebook and calling its functions took,
    and which of its cells were the grader's own, left out."""
    parts = []
    if "execution" in timing:
        parts.append(f"ran the notebook in {timing['execution']:.1f} s")
    if "probing" in timing:
        parts.append(f"called its functions in {timing['probing']:.1f} s")
    if "output_characters" in timing:
        parts.append(f"read {timing['output_characters']:,} characters of its output")
    if timing.get("grader_cells"):
        cells = ", ".join(str(cell + 1) for cell in timing["grader_cells"])
        plural = "s" if len(timing["grader_cells"]) > 1 else ""
        parts.append(f"left out cell{plural} {cells}: the grader's own %load_ext grader / %grade "
                     f"cell{plural}, which grading does not run")
    return ("The grader " + ", ".join(parts) + "." if parts else "")


def _heat_rgb(value: float | None) -> tuple[int, int, int]:
    if value is None:
        return (200, 200, 200)
    v = min(max(float(value), 0.0), 1.0)
    r, g, b = (int(255 - v * (255 - c)) for c in (33, 102, 172))
    return (r, g, b)


def heat_colour(value: float | None) -> str:
    """White for 0 to deep blue for 1; out-of-range values are clipped; missing ones grey."""
    return "rgb({},{},{})".format(*_heat_rgb(value))


def _luminance(rgb: tuple[int, int, int]) -> float:
    """WCAG 2.1's relative luminance of an sRGB colour."""
    linear = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def heat_text_colour(value: float | None) -> str:
    """Black or white, whichever reads better on the cell's colour: one of them always has
    the 4.5:1 contrast WCAG AA asks of small text."""
    background = _luminance(_heat_rgb(value))
    return "#000" if (background + 0.05) / 0.05 >= 1.05 / (background + 0.05) else "#fff"


def render(result: GradeResult, staff: bool = False) -> str:
    """The report as a student (or with `staff` the teaching staff) may see it."""
    return _environment().get_template("report.html.j2").render(r=result_view(result, staff))


def write_html(result: GradeResult, path: Path, staff: bool = False) -> None:
    write_atomically(path, render(result, staff))


def histogram(percentages: list[float], bins: int = 10) -> list[dict]:
    counts = [0] * bins
    for p in percentages:
        counts[min(max(int(p / (100 / bins)), 0), bins - 1)] += 1
    return [{"low": i * 100 // bins, "high": (i + 1) * 100 // bins, "count": c} for i, c in enumerate(counts)]


def class_summary(students: list, rows: dict[str, dict], people: dict[str, dict], similar: list,
                  header: dict) -> dict:
    """What the class summary shows, from one row per student (grader/batch/gradebook.py) and the
    staff's view of each result: every figure is counted per student, from the file that counts."""
    from collections import Counter
    views = {s.folder: result_view(GradeResult.from_json(rows[s.folder]), staff=True) for s in students}
    scored = [s for s in students if s.final_score is not None and s.max_score]
    functions: dict[str, dict] = {}
    mistakes: Counter = Counter()
    who: dict[tuple, list] = {}
    for s in students:
        if s.status == "error":
            continue
        for fn in views[s.folder].by_function:
            entry = functions.setdefault(fn.name, {"name": fn.name, "passed": 0, "count": 0, "points": 0.0,
                                                   "max_points": fn.max_points})
            entry["count"] += 1
            entry["passed"] += fn.passed
            entry["points"] += fn.points
            for mistake, _, informational in fn.mistakes:
                if not informational:
                    mistakes[(fn.name, mistake)] += 1
                    who.setdefault((fn.name, mistake), []).append(s)
    status = Counter(s.status for s in students)
    return {
        "header": header, "students": students, "people": people, "similar": similar,
        "counts": {"students": len(students), "submissions": len(rows), "graded": status["graded"],
                   "errors": status["error"], "timeouts": sum(1 for s in students if s.timed_out),
                   "duplicates": sum(1 for s in students if s.others),
                   "overrides": sum(1 for s in students if s.override),
                   "late": sum(1 for s in students if s.late)},
        "bins": histogram([100 * s.final_score / s.max_score for s in scored]),
        "mean": sum(100 * s.final_score / s.max_score for s in scored) / len(scored) if scored else 0.0,
        "functions": [dict(f, rate=100 * f["passed"] / f["count"], mean=f["points"] / f["count"])
                      for f in functions.values()],
        "mistakes": [{"function": fn, "mistake": m, "count": n, "students": who[(fn, m)]}
                     for (fn, m), n in mistakes.most_common(15)],
        "main": {s.folder: "; ".join(f"{f['name']}: {f['mistake']}" for f in s.functions if f["mistake"])
                 for s in students},
        "problems": [s for s in students if s.status != "graded" or s.timed_out or s.problem],
    }


def write_summary(students: list, rows: dict[str, dict], people: dict[str, dict], similar: list, path: Path,
                  header: dict) -> None:
    """The class dashboard, for the staff alone (every student's score is on it)."""
    page = _environment().get_template("summary.html.j2").render(
        **class_summary(students, rows, people, similar, header))
    write_atomically(path, page)
