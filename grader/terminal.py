"""The short terminal summary: score, then each check not passed with its message, as the
reader (a student, or with --staff the staff) may see it."""
from __future__ import annotations

import textwrap

from .result import GradeResult
from .view import result_view

MARKS = {"passed": "ok", "failed": "FAIL", "error": "ERROR", "info": "info"}


def summary(result: GradeResult, staff: bool = False) -> str:
    view = result_view(result, staff)   # the only thing read below
    lines = [f"{view.submission}: {view.score:g} / {view.max_score:g} points "
             f"({view.assignment}, seed {view.seed}, {view.status})"]
    width = max((len(c.name) for c in view.checks), default=10)
    for c in view.checks:
        lines.append(f"  {MARKS[c.status]:<5} {c.name:<{width}} {c.points:g}/{c.max_points:g}")
        if c.status != "passed":
            if c.likely_mistake:
                lines.append(f"        diagnosis: {c.likely_mistake}")
            lines.extend(textwrap.wrap(c.message, 100, initial_indent=" " * 8, subsequent_indent=" " * 8))
    for name, info in view.functions.items():
        if info.get("globals"):
            shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
            lines.append(f"  note: {name} reads notebook globals ({shown}); it may break on other shapes")
    for e in view.errors:
        where = f"cell {e['cell']}" if e["cell"] >= 0 else "grader"
        lines.append(f"  {where}: {e['ename']}: {e['evalue']}"[:200])
    iso = view.isolation
    if iso.get("level") == "partial":
        lines.append(f"  isolation: partial (missing: {', '.join(iso['missing'])})")
    if iso.get("background_processes_stopped"):
        lines.append(f"  note: {iso['background_processes_stopped']} background process(es) the notebook started "
                     "were stopped before its functions were called")
    if iso.get("leftover_processes_killed"):
        lines.append(f"  note: {iso['leftover_processes_killed']} process(es) left running by the notebook were killed")
    if view.policy_note:
        lines.append(f"  {view.policy_note}")
    for f in view.policy.get("findings", []):
        what = "tries to import the grader" if f.get("kind") == "grader_import" else "imports forbidden library"
        lines.append(f"  policy: {what} {f['module']} ({f['source']})")
    return "\n".join(lines)
