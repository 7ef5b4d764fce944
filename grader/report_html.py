"""The self-contained HTML feedback report (jinja2; no scripts, fonts or fetches)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import jinja2

from .result import GradeResult


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FunctionLoader(
        lambda name: resources.files("grader.templates").joinpath(name).read_text()),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.do"])
    env.filters["heat"] = heat_colour
    return env


def heat_colour(value: float) -> str:
    """White for 0 to deep blue for 1; out-of-range values are clipped; missing ones grey."""
    if value is None:
        return "rgb(200,200,200)"
    v = min(max(float(value), 0.0), 1.0)
    r, g, b = (int(255 - v * (255 - c)) for c in (33, 102, 172))
    return f"rgb({r},{g},{b})"


def render(result: GradeResult, staff: bool = False) -> str:
    return _environment().get_template("report.html.j2").render(r=result, staff=staff)


def write_html(result: GradeResult, path: Path, staff: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(result, staff), encoding="utf-8")
    tmp.replace(path)
