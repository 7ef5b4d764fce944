"""The self-contained HTML feedback report (jinja2; no scripts, fonts or fetches)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from .files import write_atomically
from .result import GradeResult
from .view import ANSI, result_view, where


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FunctionLoader(
        lambda name: resources.files("grader.templates").joinpath(name).read_text()),
        autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["heat"] = heat_colour
    env.filters["where"] = where
    env.filters["plain"] = lambda text: ANSI.sub("", str(text))
    env.filters["timing"] = timing_text
    return env


def timing_text(timing: dict) -> str:
    """The timing as a sentence: how long running the notebook and calling its functions took."""
    parts = []
    if "execution" in timing:
        parts.append(f"ran the notebook in {timing['execution']:.1f} s")
    if "probing" in timing:
        parts.append(f"called its functions in {timing['probing']:.1f} s")
    if "output_characters" in timing:
        parts.append(f"read {timing['output_characters']:,} characters of its output")
    return ("The grader " + ", ".join(parts) + "." if parts else "")


def heat_colour(value: float) -> str:
    """White for 0 to deep blue for 1; out-of-range values are clipped; missing ones grey."""
    if value is None:
        return "rgb(200,200,200)"
    v = min(max(float(value), 0.0), 1.0)
    r, g, b = (int(255 - v * (255 - c)) for c in (33, 102, 172))
    return f"rgb({r},{g},{b})"


def render(result: GradeResult, staff: bool = False) -> str:
    """The report as a student (or with `staff` the teaching staff) may see it."""
    return _environment().get_template("report.html.j2").render(r=result_view(result, staff))


def write_html(result: GradeResult, path: Path, staff: bool = False) -> None:
    write_atomically(path, render(result, staff))


def histogram(percentages: list[float], bins: int = 10) -> list[dict]:
    counts = [0] * bins
    for p in percentages:
        counts[min(int(p / (100 / bins)), bins - 1)] += 1
    return [{"low": i * 100 // bins, "high": (i + 1) * 100 // bins, "count": c} for i, c in enumerate(counts)]


def write_summary(results: list[dict], folders: list[str], duplicates: list, similar: list, path: Path) -> None:
    """The class dashboard: score histogram, pass rate per check, common diagnoses, failures."""
    from collections import Counter
    rows = [dict(r, folder=f) for r, f in zip(results, folders)]
    # Every student's scores are on this page: it is only ever for the staff, who see all.
    views = [result_view(GradeResult.from_json(r), staff=True) for r in results]
    percentages = [100 * r["score"] / r["max_score"] for r in rows if r.get("max_score")]
    checks: dict[str, list[int]] = {}
    for view in views:
        for c in view.checks:
            if c.status != "info":   # informational checks have no pass rate
                checks.setdefault(c.name, []).append(c.status == "passed")
    pass_rates = [{"name": n, "rate": 100 * sum(v) / len(v), "count": len(v)} for n, v in checks.items()]
    diagnoses = Counter((c.function, c.likely_mistake) for view in views for c in view.failures if c.likely_mistake)
    page = _environment().get_template("summary.html.j2").render(
        rows=rows, bins=histogram(percentages), pass_rates=pass_rates, diagnoses=diagnoses.most_common(12),
        failures=[r for r in rows if r["status"] != "graded"], duplicates=duplicates, similar=similar,
        mean=sum(percentages) / len(percentages) if percentages else 0.0)
    write_atomically(path, page)
