"""Checking a notebook from inside it: `%load_ext grader` then `%grade`, or
`import grader; grader.check()`, in Jupyter, JupyterLab or VS Code.

It never grades in the student's own kernel, whose state is whatever the student made it:
it finds the notebook file this kernel belongs to, runs `grader check` on the saved file in a
separate process (sandboxed as every check is), and shows the report in the notebook. It
saves nothing itself, so it says which saved version it graded.
"""
from __future__ import annotations

import html
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.report.printable import printable
from grader.report.view import shown

TIMEOUT = 900   # seconds for the whole check, beyond the grader's own limits
NOT_FOUND = ("cannot tell which notebook this kernel belongs to; pass its file name, "
             "e.g. %grade my_notebook.ipynb or grader.check(\"my_notebook.ipynb\")")


class CheckError(Exception):
    """Why a check could not run, in one line."""


def _user_namespace() -> dict:
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def notebook_path(path: str | os.PathLike | None = None, namespace: dict | None = None,
                  environ=None, cwd: Path | None = None) -> Path:
    """The notebook to grade: `path` if given; else the file the front end says this kernel
    belongs to (VS Code's `__vsc_ipynb_file__`, Jupyter Server's `JPY_SESSION_NAME`, which
    ipykernel also gives as `__session__`); else the only notebook in the working folder."""
    namespace = _user_namespace() if namespace is None else namespace
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else Path(cwd)
    if path is not None:
        found = cwd / Path(path).expanduser()
        if not found.is_file():
            raise CheckError(f"no such file: {path}")
        return found
    told = [namespace.get("__vsc_ipynb_file__"), environ.get("JPY_SESSION_NAME"), namespace.get("__session__")]
    for name in (str(t) for t in told if t):
        candidate = Path(name).expanduser()
        # Jupyter Server gives the path relative to its own root, which may not be this folder:
        # the kernel starts in the notebook's folder, so its file name there is the fallback.
        for option in (candidate, cwd / candidate, cwd / candidate.name):
            if option.suffix == ".ipynb" and option.is_file():
                return option
    notebooks = sorted(p for p in cwd.glob("*.ipynb") if p.is_file())
    if len(notebooks) == 1:
        return notebooks[0]
    raise CheckError(NOT_FOUND)


def run_check(path: Path, assignment: str | None = None) -> tuple[dict, str, str]:
    """(the result as JSON, the terminal summary, the HTML report) of `grader check` on the
    saved file, run in a process of its own."""
    with tempfile.TemporaryDirectory(prefix="grader-check-") as folder:
        result_path, report_path = Path(folder) / "result.json", Path(folder) / "report.html"
        command = [sys.executable, "-m", "grader.cli", "check", str(Path(path).resolve()), "--json", str(result_path),
                   "--html", str(report_path)]
        if assignment:
            # A course's spec is named from the notebook's folder; the check runs in another one.
            command += ["--assignment", str(Path(assignment).resolve()) if assignment.endswith(".toml") else assignment]
        # `python -m` puts its working folder first on the import path: in the notebook's folder,
        # a grader.py there (a course's helper, a %%writefile) would run instead of the grader.
        # The check runs in its own empty folder, and where Python has it (3.11), with the safe path.
        environment = dict(os.environ, NO_COLOR="1", PYTHONSAFEPATH="1")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=environment,
                                  stdin=subprocess.DEVNULL, cwd=folder)
        except subprocess.TimeoutExpired:
            raise CheckError(f"the check did not finish within {TIMEOUT} s") from None
        if done.returncode not in (0, 1) or not result_path.is_file():
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise CheckError(why.removeprefix("grader: error: "))
        return json.loads(result_path.read_text()), done.stdout, report_path.read_text()


class Report:
    """The check's outcome as a notebook shows it: the report in a frame of its own (its
    styles stay out of the notebook's page), or the terminal summary where there is no HTML."""

    def __init__(self, result: dict, summary: str, page: str, note: str):
        self.result, self.summary, self.page, self.note = result, summary, page, note

    def _repr_mimebundle_(self, include=None, exclude=None):
        frame = (f'<p>{html.escape(self.note)}</p><iframe sandbox="" title="grader report" '
                 f'style="width: 100%; height: 52rem; border: 1px solid #ddd" '
                 f'srcdoc="{html.escape(self.page, quote=True)}"></iframe>')
        return {"text/plain": f"{self.note}\n\n{self.summary}", "text/html": frame}


def saved_note(path: Path) -> str:
    saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    return (f"Graded {printable(path.name)} as last saved, at {saved}; changes not saved since are not graded "
            "(save first, then check again).")


class CheckedResult(dict):
    """The result as `grader check --json` writes it, a dict as it always was, whose repr is one
    line: `grader.check()` as a cell's last line has it echoed under the report it shows, where
    the whole result would print as hundreds of lines."""

    def __repr__(self) -> str:
        score, max_score = self.get("score"), self.get("max_score")
        points = f"{shown(score)} / {shown(max_score)}" if isinstance(score, (int, float)) and \
            isinstance(max_score, (int, float)) else "?"
        return (f"<grader result of {printable(self.get('submission', '?'), one_line=True)}: {points} points, "
                f"{printable(self.get('status', '?'), one_line=True)}; the report is shown above, "
                "the whole result is this dict>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        # IPython echoes a cell's value through its own printer, which would print a dict whole.
        printer.text(repr(self))


def check(path: str | os.PathLike | None = None, assignment: str | None = None,
          show: bool = True) -> CheckedResult | None:
    """Grade the saved notebook in a separate process and show its report here; returns the
    result (as `grader check --json` writes it, a dict whose repr is one line), or None when the
    check could not run."""
    try:
        notebook = notebook_path(path)
        result, summary, page = run_check(notebook, assignment)
    except CheckError as exc:
        print(f"grader: {printable(exc, one_line=True)}", file=sys.stderr)
        return None
    if show:
        from IPython.display import display
        display(Report(result, summary, page, saved_note(notebook)))
    return CheckedResult(result)


def grade_magic(line: str) -> None:
    """%grade [NOTEBOOK] [--assignment NAME]: check the saved notebook and show its report."""
    words = shlex.split(line)
    assignment = None
    if "--assignment" in words:
        at = words.index("--assignment")
        if at + 1 >= len(words):
            print("grader: --assignment needs a name", file=sys.stderr)
            return
        assignment = words[at + 1]
        del words[at:at + 2]
    if len(words) > 1:
        print("grader: %grade takes at most one notebook", file=sys.stderr)
        return
    check(words[0] if words else None, assignment)


def register(ipython) -> None:
    ipython.register_magic_function(grade_magic, "line", "grade")
