"""The short terminal summary: score, then each check not passed with its message."""
from __future__ import annotations

import textwrap

from .result import GradeResult

MARKS = {"passed": "ok", "failed": "FAIL", "error": "ERROR", "info": "info"}


def summary(result: GradeResult, staff: bool = False) -> str:
    lines = [f"{result.submission}: {result.score:g} / {result.max_score:g} points "
             f"({result.assignment}, seed {result.seed}, {result.status})"]
    width = max((len(c.name) for c in result.checks), default=10)
    for c in result.checks:
        lines.append(f"  {MARKS[c.status]:<5} {c.name:<{width}} {c.points:g}/{c.max_points:g}")
        if c.status != "passed":
            message = "hidden check: details are shown after grading" if c.hidden and not staff else c.message
            if c.diagnosis and c.lost_points and not (c.hidden and not staff):
                lines.append(f"        diagnosis: {c.diagnosis}")
            lines.extend(textwrap.wrap(message, 100, initial_indent=" " * 8, subsequent_indent=" " * 8))
    for name, info in result.functions.items():
        if info.get("globals"):
            shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
            lines.append(f"  note: {name} reads notebook globals ({shown}); it may break on other shapes")
    for e in result.errors:
        where = f"cell {e['cell']}" if e["cell"] >= 0 else "grader"
        lines.append(f"  {where}: {e['ename']}: {e['evalue']}"[:200])
    iso = result.isolation
    if iso.get("level") == "partial":
        lines.append(f"  isolation: partial (missing: {', '.join(iso['missing'])})")
    if iso.get("background_processes_stopped"):
        lines.append(f"  note: {iso['background_processes_stopped']} background process(es) the notebook started "
                     "were stopped before its functions were called")
    if iso.get("leftover_processes_killed"):
        lines.append(f"  note: {iso['leftover_processes_killed']} process(es) left running by the notebook were killed")
    for f in result.policy.get("findings", []):
        what = "tries to import the grader" if f.get("kind") == "grader_import" else "imports forbidden library"
        lines.append(f"  policy: {what} {f['module']} ({f['source']})")
    return "\n".join(lines)
