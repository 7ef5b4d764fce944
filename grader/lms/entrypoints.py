"""LMS entrypoints: Gradescope's autograder layout and PrairieLearn's external grader.

Whatever happens (no notebook, garbage, a dead kernel, a fault in the grader), a valid
results file is written, by the grader's own process, after the student's code has finished.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Set as AbstractSet
from pathlib import Path

from grader.atomic_write import write_json
from grader.grade import grade_path, not_graded
from grader.intake.discover import resolved
from grader.errors import MachineFault
from grader.intake.notebook import SubmissionError
from grader.lms.platforms import PLACES, Place
from grader.report.html import write_html
from grader.result import ErrorKind, ErrorRecord, GradeResult
from grader.course.spec import Assignment, SpecError, load_assignment, staff_assignment
from grader.report.view import CheckView, FunctionView, ResultView, result_view, shown, where

SUFFIXES = (".ipynb", ".py")


class Platform:
    """A platform's place (its folders and results file: grader/lms/platforms.py) and how its
    results are written (render)."""
    place: Place

    def render(self, result: GradeResult, problem: str, seconds: float, assignment: Assignment | None) -> dict:
        raise NotImplementedError


class Gradescope(Platform):
    place = PLACES["gradescope"]

    def render(self, result: GradeResult, problem: str, seconds: float, assignment: Assignment | None) -> dict:
        hidden_as = assignment.hidden_visibility if assignment else "after_published"
        view = students_view(result)
        tests = [self.test(c, hidden_as) for c in view.checks]
        if problem:
            tests.append({"name": "grader error", "score": 0, "max_score": 0, "status": "failed",
                          "output": problem, "output_format": "text", "visibility": "hidden"})
        return {"score": view.score, "execution_time": int(round(seconds)),
                "output": summary_html(view, problem), "output_format": "html",
                "stdout_visibility": "hidden", "tests": tests}

    @staticmethod
    def test(c: CheckView, hidden_as: str) -> dict:
        test = {"name": c.name, "score": c.points, "max_score": c.max_points,
                "status": "passed" if c.status == "passed" else "failed",
                "output": feedback(c), "output_format": "text",
                "visibility": hidden_as if c.hidden else "visible"}
        if c.status == "info":   # no status: Gradescope shows a 0-point test as neither
            del test["status"]
        return test


class PrairieLearn(Platform):
    place = PLACES["prairielearn"]

    def render(self, result: GradeResult, problem: str, seconds: float, assignment: Assignment | None) -> dict:
        view = students_view(result)
        tests = [{"name": c.name, "description": c.title, "points": c.points, "max_points": c.max_points,
                  "message": feedback(c), "output": ""} for c in view.checks]
        if problem:
            tests.append({"name": "grader error", "description": "why the submission was not graded", "points": 0,
                          "max_points": 0, "message": problem, "output": ""})
        gradable = not problem
        score = (view.score / view.max_score) if view.max_score else 0.0
        return {"gradable": bool(gradable), "score": min(max(score, 0.0), 1.0),
                "message": summary_line(view, problem), "output": summary_text(view, problem),
                "tests": tests}


PLATFORMS: dict[str, Platform] = {p.place.name: p for p in (Gradescope(), PrairieLearn())}


def find_submission(folder: Path, course_files: AbstractSet[str] = frozenset()) -> Path:
    """The one notebook (or .py file) the student submitted. Submissions from GitHub or
    Bitbucket keep their symbolic links: a link to a file inside the submission counts as that
    file, a link out of it (to the course's solution, say) is never followed, and linked
    folders are not entered. A file named like one of the course's support modules
    (`course_files`: activation.py) is the course's, uploaded with the student's package: never
    the submission, and never run (the kernel imports the course's own copy)."""
    if not folder.is_dir():
        raise SubmissionError(f"the submission folder {folder} does not exist")
    root = Path(os.path.realpath(folder))
    found: dict[Path, Path] = {}   # the file to read -> the name the student gave it
    outside = []
    for here, subfolders, files in os.walk(root):   # followlinks=False
        subfolders[:] = sorted(d for d in subfolders if d != ".ipynb_checkpoints")
        for name in sorted(files):
            path = Path(here) / name
            if path.suffix not in SUFFIXES or name.startswith(".") or name in course_files:
                continue
            real, problem = resolved(path, root)
            if problem:
                outside.append(problem)
            else:
                found.setdefault(real, path)
    if not found and outside:
        raise SubmissionError(outside[0])
    candidates = sorted(found.items(), key=lambda item: item[1])
    notebooks = [c for c in candidates if c[0].suffix == ".ipynb"]
    if len(notebooks) == 1 or len(candidates) == 1:
        return (notebooks or candidates)[0][0]
    if not candidates:
        raise SubmissionError("no notebook (.ipynb) or Python file (.py) was found in the submission")
    names = ", ".join(str(shown.relative_to(root)) for _, shown in candidates[:6])
    raise SubmissionError(f"several candidate files were submitted ({names}); submit exactly one notebook")


def choose_assignment(requested: str | None, root: Path, platform: Platform):
    """The staff's choice: --assignment, else assignment.toml among the course's files, else
    rows. The submission has no say (see spec.staff_assignment)."""
    if requested:
        return load_assignment(requested)
    course_spec = root / platform.place.spec_folder / "assignment.toml"
    if course_spec.is_file():
        return load_assignment(str(course_spec))
    return staff_assignment(None)


def students_view(result: GradeResult) -> ResultView:
    """Both platforms show their results file to students, so it is made from their view."""
    return result_view(result, staff=False)


def feedback(c: CheckView) -> str:
    """One check's feedback, as both platforms show it."""
    if c.status == "info":
        return f"Informational, no points. {c.text}"
    return (f"Likely mistake: {c.likely_mistake}. " if c.likely_mistake else "") + c.text


def summary_line(view: ResultView, problem: str) -> str:
    if problem:
        return f"Not graded: {problem}"
    return f"Score {shown(view.score)} / {shown(view.max_score)} ({view.status})."


def lost(fn: FunctionView) -> list[CheckView]:
    """A function's checks that lost points and whose details the student may see."""
    return [c for c in fn.checks if c.lost_points and not c.withheld]


def hidden_loss(fn: FunctionView) -> str:
    """How many points the function's hidden checks did not earn, which their withheld
    details cannot say, or ""."""
    missed = sum(c.max_points - c.points for c in fn.checks if c.withheld)
    return f"Hidden checks: {shown(missed)} of their points not earned." if missed else ""


def summary_text(view: ResultView, problem: str) -> str:
    lines = [summary_line(view, problem)]
    if problem:
        return "\n".join(lines)
    for fn in view.by_function:
        lines.append(f"{fn.name}: {shown(fn.points)} / {shown(fn.max_points)}"
                     + (f", likely mistake: {fn.main_mistake}" if fn.main_mistake else ""))
        if fn.defining_cell:
            lines.append(f"  Its defining cell failed: {fn.defining_cell}")
        advice = next((c.advice for c in fn.checks if c.advice and c.diagnosis == fn.main_mistake), "")
        if advice:
            lines.append(f"  {advice}")
        lines += [f"  - {c.kind}: {c.message}" for c in lost(fn)]
        lines += [f"  {hidden_loss(fn)}"] if hidden_loss(fn) else []
        if fn.smallest_failing:
            lines.append(f"  Smallest failing case ({fn.smallest_failing['case']}), to paste into a cell:")
            lines += [f"    {line}".rstrip() for line in fn.smallest_failing["code"].splitlines()]
    lines += [f"- {where(e)}: {e.ename}: {e.evalue}" for e in view.errors if e.cell >= 0]
    return "\n".join(lines)


def summary_html(view: ResultView, problem: str) -> str:
    """Gradescope's text above the tests: students cannot open other files there, so everything
    they need to fix the work is here, grouped by function."""
    from html import escape
    if problem:
        return f"<p><b>Not graded.</b> {escape(problem)}</p>"
    seed = "" if view.seed is None else f"seed {view.seed}, "
    parts = [f"<p><b>Score {shown(view.score)} / {shown(view.max_score)}</b> ({seed}"
             f"isolation {escape(view.isolation.get('level', 'none'))}).</p>"]
    for fn in view.by_function:
        parts.append(f"<h3>{escape(fn.name)}: {shown(fn.points)} / {shown(fn.max_points)}</h3>")
        if fn.defining_cell:
            parts.append(f"<p><b>Its defining cell failed:</b> {escape(fn.defining_cell)}</p>")
        if fn.main_mistake:
            advice = next((c.advice for c in fn.checks if c.advice and c.diagnosis == fn.main_mistake), "")
            parts.append(f"<p><b>Likely mistake: {escape(fn.main_mistake)}.</b> {escape(advice)}</p>")
        items = "".join(f"<li><code>{escape(c.kind)}</code> ({shown(c.points)} / {shown(c.max_points)}): "
                        f"{escape(c.message)}</li>" for c in lost(fn))
        parts.append(f"<ul>{items}</ul>" if items else ("<p>All checks passed.</p>" if fn.passed else ""))
        if hidden_loss(fn):
            parts.append(f"<p>{hidden_loss(fn)}</p>")
        if fn.smallest_failing:
            parts.append(f"<p>Smallest failing case ({escape(fn.smallest_failing['case'])}), to paste into a "
                         f"cell:</p><pre><code>{escape(fn.smallest_failing['code'])}</code></pre>")
    errors = "".join(f"<li>{escape(where(e))}: {escape(e.ename)}: {escape(e.evalue)}</li>"
                     for e in view.errors if e.cell >= 0)
    if errors:
        parts.append(f"<h3>Errors while running the notebook</h3><ul>{errors}</ul>")
    return "".join(parts)


def write_results(path: Path, data: dict) -> None:
    """World-readable in a folder only root may write to: the student's user cannot replace it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o755)
    write_json(path, data, mode=0o644)


def run(platform_name: str, root: Path, requested: str | None, settings_for) -> dict:
    """Grade the submission under root and write the platform's results file; returns it.
    `settings_for(assignment)` gives the settings with that assignment's limits applied."""
    platform = PLATFORMS[platform_name]
    started = time.monotonic()
    result, problem, assignment, submission = None, "", None, None
    kind: ErrorKind = "unreadable"
    fault: MachineFault | None = None
    try:
        spec_error = None
        try:
            assignment = choose_assignment(requested, root, platform)
        except SpecError as exc:
            spec_error = exc   # raised once the submission is found, so that its result names it
        course_files = assignment.support.file_names() if assignment and assignment.support else set()
        try:
            submission = find_submission(root / platform.place.submission_folder, course_files)
        except SubmissionError as exc:
            problem = str(exc)
        if spec_error is not None:
            raise spec_error
        if submission is not None and assignment is not None:   # else a SpecError was raised above
            result = grade_path(submission, assignment, settings_for(assignment))
            # The seed goes to the grading job's log, which only the staff read (students see no
            # seed but the public one): `grader check --seed N` replays this grading.
            print(f"grading seed: {result.seed}", file=sys.stderr, flush=True)
            write_html(result, root / "results" / "report.html")
    except SubmissionError as exc:
        problem = str(exc)
    except SpecError as exc:
        problem, kind = str(exc), "grader_error"
    except MachineFault as exc:
        # Never a student's 0: Gradescope gets no results file (the job fails, the staff see
        # the cause in its log and regrade); PrairieLearn gets `gradable: false`.
        if not platform.place.fault_as_result:
            raise
        problem, kind, fault = f"the grading machine could not run the notebook: {exc}", "grader_error", exc
    except Exception as exc:  # noqa: BLE001 - whatever failed, a valid results file is still written
        problem, kind = f"unexpected error in the grader: {type(exc).__name__}: {exc}", "grader_error"
        # The details go to the platform's log of the grading job, which only the staff read.
        traceback.print_exc(limit=5, file=sys.stderr)
    if result is None:
        seed = settings_for(assignment).seed if assignment else 0
        result = not_graded(submission.name if submission else "(no submission)", assignment or str(requested or "?"),
                            seed, kind, "SubmissionError" if kind == "unreadable" else "GraderError", problem)
    elif problem:
        result.errors.append(ErrorRecord(-1, kind, "GraderError", problem))
    data = platform.render(result, why_not_graded(result), time.monotonic() - started, assignment)
    write_results(platform.place.results_path(root), data)
    if fault is not None:
        raise fault   # written as not gradable; the command still ends with the machine's exit code
    return data


def why_not_graded(result: GradeResult) -> str:
    """The reasons the submission was not (fully) graded, one line each, or ""."""
    return "; ".join(e.evalue.splitlines()[0] for e in result.errors if e.not_graded and e.evalue)
