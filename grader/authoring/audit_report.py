"""`grader audit`'s findings as a table in the terminal and as an HTML page (for the staff)."""
from __future__ import annotations

from pathlib import Path

from grader.authoring.audit import BEYOND_MISTAKES, Audit, FunctionAudit, Graded, informational
from grader.atomic_write import write_atomically
from grader.report.printable import printable
from grader.report.view import shown

FLOAT64_NOTE = ("Each mistake is computed in float64 on every case as it is: float32, integer, Fortran-ordered "
                "and non-contiguous inputs change what a student's code is given, not what these computations "
                "do. The dtypes and memory_layout checks compare a function's answer on such inputs with its own "
                "answer on plain ones, so they catch no known mistake here, by design.")


def _score(g: Graded) -> str:
    return f"{shown(g.points)} / {shown(g.max_points)}"


def check_label(fn: FunctionAudit, kind: str) -> str:
    """A check's name as the tables show it, saying when it is informational or hidden."""
    notes = [w for w, on in (("info", informational(fn, kind)), ("hidden", kind in fn.hidden)) if on]
    return kind + (f" ({', '.join(notes)})" if notes else "")


def remark(g: Graded) -> str:
    """What stands out about a mistake's grading, in a few words, or ""."""
    if not g.differs:
        return "computes the reference's values on every case here"
    if g.raised == "every":
        return "its code raises on every case: the shapes do not fit this mistake"
    if g.non_answer:
        return f"scored as a non-answer: {g.non_answer}"
    if g.slips_through:
        seen = " (only informational checks say so)" if g.caught_by else ", and no check says anything"
        return f"full marks, though it computes something else where points are at stake{seen}"
    if g.full_marks:
        return "full marks by design: no check with points counts how it differs (overflow is numerical_stability's)"
    if g.points <= 0:
        return "0 points"
    notes = ["its code raises on some cases, whose shapes do not fit this mistake"] if g.raised else []
    if g.named and g.named != g.title:
        notes.append(f"named as: {g.named}")
    return "; ".join(notes)


def _function_text(fn: FunctionAudit) -> list[str]:
    name = printable(fn.name)
    ref = fn.reference
    lines = [f"{name}: {shown(sum(fn.checks.values()))} points; the reference earns {_score(ref)}"
             + ("" if ref.full_marks else f" (it fails {', '.join(ref.caught_by)}): THE SPEC IS WRONG")]
    if not fn.mistakes:
        lines.append("  no known mistake applies to its convention")
        return lines
    width = max(len(m.label) for m in fn.mistakes)
    points = max(len("points"), *(len(_score(m)) for m in fn.mistakes))
    lines.append(f"  {'mistake':<{width}}  {'points':>{points}}  caught by")
    for m in fn.mistakes:
        caught = ", ".join(check_label(fn, k) for k in m.caught_by) or "-"
        note = remark(m)
        lines.append(f"  {m.label:<{width}}  {_score(m):>{points}}  {caught}" + (f"  [{note}]" if note else ""))
    lines.append("  checks that catch no mistake: "
                 + (", ".join(check_label(fn, k) for k in fn.silent_checks) or "none"))
    if fn.beyond_mistakes:
        lines.append("  not measured (no known mistake is about " + "; ".join(
            f"{BEYOND_MISTAKES[k]}: {k}" for k in fn.beyond_mistakes) + ")")
    lines.append("  mistakes at full marks (the spec lets them through): "
                 + (", ".join(m.label for m in fn.let_through) or "none"))
    if fn.full_marks_by_design:
        lines.append("  at full marks by design (no check with points counts how they differ): "
                     + ", ".join(m.label for m in fn.full_marks_by_design))
    lines.append("  non-answers (the non-answer rule): " + ", ".join(f"{n.title} {_score(n)}" for n in fn.non_answers))
    lines.append(f"  mistakes at or below a non-answer's {shown(fn.non_answer_points)} points: "
                 + (", ".join(m.label for m in fn.as_non_answers) or "none"))
    return lines


def text(audit: Audit) -> str:
    count = sum(len(f.mistakes) for f in audit.functions)
    what = "known mistakes and pairs of them" if audit.pairs else "known mistakes"
    title = f" ({printable(audit.title)})" if audit.title else ""
    lines = [f"Audit of {printable(audit.assignment)}{title}, seed {audit.seed}: {count} {what} across "
             f"{len(audit.functions)} function(s), each graded as a notebook making only that mistake would be.",
             FLOAT64_NOTE, ""]
    for fn in audit.functions:
        lines += _function_text(fn) + [""]
    lines.append(verdict(audit))
    return "\n".join(lines)


def verdict(audit: Audit) -> str:
    """The closing line: whether the spec is fit to release, and if not, why."""
    problems = [f"the reference loses points in {', '.join(printable(f.name) for f in audit.reference_failures)}"] \
        if audit.reference_failures else []
    problems += [f"{printable(name)}: {m.label} earns full marks" for name, m in audit.slipping_through]
    problems += [f"{printable(name)}: a non-answer ({n.title}) earns {_score(n)}" for name, n in audit.paid_non_answers]
    if problems:
        return "The spec has a problem: " + "; ".join(problems) + "."
    return ("The reference earns every point, every mistake that computes something else where points are "
            "at stake loses some, and non-answers earn nothing.")


def render_html(audit: Audit) -> str:
    from grader.report.html import _environment
    return _environment().get_template("audit.html.j2").render(
        a=audit, note=FLOAT64_NOTE, verdict=verdict(audit), label=check_label, remark=remark, score=_score,
        beyond=BEYOND_MISTAKES, informational=informational)


def write_html(audit: Audit, path: Path) -> None:
    write_atomically(path, render_html(audit))
