"""The tests' shared helpers: paths, grading a notebook once per run (cached), writing notebooks,
running the grader's command, and the assertions several test files make. A package of its own
(pyproject.toml puts tests/ on the import path), so `from grading_helpers import grade` works
under any pytest import mode; tests/conftest.py holds only pytest's hooks and fixtures.
"""
import shutil
import sys
import time
from pathlib import Path

import pytest

from grader.grade import grade_path
from grader.settings import Settings
from grader.course.spec import load_assignment

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SUBMISSIONS = ROOT / "submissions"
# Sample notebooks of the other built-in assignments; submissions/ holds one class's (rows).
SAMPLES = FIXTURES / "samples"
# Short limits keep the hostile fixtures quick; they are still real interrupts and timeouts.
TEST_SETTINGS = Settings(cell_timeout=4.0, call_timeout=2.0, notebook_timeout=60.0)

_graded = {}
_current = {"slow": True}


def expect_slow() -> None:
    """Called by every helper that grades or starts a grader process."""
    if not _current["slow"]:
        pytest.fail("this test grades a notebook or starts a grader process: mark it @pytest.mark.slow")


def grade(path: Path, assignment: str, _fresh=None, **overrides):
    """Grade once per (file, assignment, settings); `_fresh` names a grading that must not
    share its result with others (the test changes the environment around it)."""
    expect_slow()
    key = (str(path), assignment, tuple(sorted(overrides.items())), _fresh)
    if key not in _graded:
        settings = Settings(**{**TEST_SETTINGS.__dict__, **overrides})
        _graded[key] = grade_path(path, load_assignment(assignment), settings)
    return _graded[key]


def write_notebook(path: Path, *code: str, title: str | None = None) -> Path:
    """A notebook at `path`: a Markdown heading `# title` when given, then a code cell each."""
    import nbformat
    cells = [nbformat.v4.new_markdown_cell(f"# {title}")] if title else []
    nbformat.write(nbformat.v4.new_notebook(cells=cells + [nbformat.v4.new_code_cell(c) for c in code]), path)
    return path


def graded_at_full_marks(path: Path, assignment: str):
    """The notebook graded: every check passed (or informational), and some points to earn."""
    result = grade(path, assignment)
    assert result.status == "graded"
    failed = [(c.name, c.message) for c in result.checks if c.status not in ("passed", "info")]
    assert not failed and result.score == result.max_score > 0
    return result


def planted_mistakes_named(path: Path, assignment: str, planted: dict) -> tuple:
    """The notebook graded, each function in `planted` (function -> (line, replacement, title))
    losing points with its mistake's title among its diagnoses, a genuine attempt (never a
    non-answer), and its smallest failing case running as printed beside the notebook's own
    cells. Returns the result and each function's smallest case."""
    import nbformat
    result = grade(path, assignment)
    cells = [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    smallest = {}
    for function, (_, _, title) in planted.items():
        checks = [c for c in result.checks if c.function == function]
        assert any(c.lost_points for c in checks), function
        assert any(title in (c.diagnosis or "") for c in checks), (function, {c.diagnosis for c in checks})
        assert not result.functions[function].get("non_answer"), function
        smallest[function] = result.functions[function]["smallest_failing"]
        # Pasted into the notebook: its cells run, then the case's cell in the same namespace
        # (which it may assign to: the notebook globals a function reads).
        space: dict = {}
        for source in cells:
            exec(source, space)
        code = smallest[function]["code"]
        try:
            exec(code, space)
        except Exception as exc:  # noqa: BLE001 - the student's code may raise anything; as printed
            assert f"raised {type(exc).__name__}" in code, (function, exc)
    return result, smallest


def grade_many(requests: list[tuple]) -> None:
    """Grade (path, assignment, settings) requests into the cache. One at a time: gradings in
    threads of one process can fail in CPython 3.11 (seen on 3.11.7) with "SystemError: AST
    constructor recursion depth mismatch" (gh-106905: the AST constructor's recursion counter
    is shared between threads), and a failed grading cached here fails every test reading it."""
    for path, assignment, settings in requests:
        grade(path, assignment, **settings)


# Chromium as the browser tests start it: headless, offline, no first-run work.
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def sandbox_processes(grader_pid: int | None = None) -> list[int]:
    """Live processes of submissions (each carries its sandbox's marker): those graded by the
    grader process `grader_pid`, or by default those of sandboxes this test process created,
    so that other graders running on the machine do not count."""
    from grader.sandbox.isolation import CREATED_MARKERS, MARKER
    prefix = MARKER.encode() + b"="
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        for value in environ:
            if value.startswith(prefix):
                marker = value[len(prefix):].decode()
                if (marker.startswith(f"{grader_pid}.") if grader_pid else marker in CREATED_MARKERS):
                    found.append(int(entry.name))
    return found


# A Python expression, for a script run in a subprocess: the peak memory (KiB) of that process
# alone. Not getrusage's ru_maxrss, which Linux carries across fork and exec: a child of the test
# process would report the test process's own size, hundreds of MiB late in a run.
OWN_PEAK_KIB = "int(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))"

# The grader's command line, run by the interpreter running the tests: never whatever `grader`
# is first on PATH (another install's).
GRADER = [sys.executable, "-m", "grader.cli"]


def run_grader(args: list, cwd=None, timeout=600):
    """Run the `grader` command; returns (returncode, stdout, stderr, pid)."""
    import subprocess
    expect_slow()
    process = subprocess.Popen([*GRADER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=cwd, env=own_run_environment())
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err, process.pid


def own_run_environment() -> dict:
    """The environment for a `grader` subprocess that starts a grading run of its own, so its
    submissions' processes are marked with its own PID, and that runs this checkout's grader
    (not a copy installed in the environment) from whatever folder it starts in."""
    import os
    env = {k: v for k, v in os.environ.items() if k != "GRADER_RUN_ID"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def non_loopback_address() -> str:
    """One of this machine's own addresses that is not loopback (no connection is made to it)."""
    import subprocess
    found = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
             if not a.startswith("127.") and a != "::1"]
    if not found:
        pytest.skip("this machine has no address but loopback")
    return f"[{found[0]}]" if ":" in found[0] else found[0]


def own_mistakes_apart(conv, own, parts=("output",), skip=()) -> None:
    """Each of a convention's own mistakes (ids in `own`, but `skip`) computes something of its
    own on the randomized cases and the base case: the `parts` it predicts (None: every part)
    differ from the reference's and from every other applicable mistake's somewhere."""
    import numpy as np

    from grader.calling import cases
    from grader.judging.explain import Explanation, Predictions, applicable
    from grader.reference.mistakes import HARMLESS
    inputs = cases.random_cases(conv, 7) + [cases.base_case(conv, 7)]
    mistakes = [m for m in applicable(conv) if m.id not in HARMLESS]
    predictions = Predictions()

    def computed(m):
        return [predictions.parts(conv, Explanation((m,), m.variant), c) for c in inputs]

    def apart(a, b):
        # A computation that predicts nothing for a part (its shapes cannot be taken back) is
        # told apart by it too.
        return any(p not in y or x[p].shape != y[p].shape or not np.allclose(x[p], y[p])
                   for x, y in zip(a, b) for p in (parts or x) if p in x)

    reference = [conv.expected_parts(c) for c in inputs]
    for ours in (m for m in mistakes if m.id in own and m.id not in skip):
        mine = computed(ours)
        assert apart(mine, reference), ours.id
        for other in mistakes:
            if other is not ours:
                assert apart(mine, computed(other)), (ours.id, other.id)


def wait_for(condition, seconds: float, what: str):
    """What condition() gives once it gives something, within `seconds`; else the test fails."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds:g} s: {what}")
