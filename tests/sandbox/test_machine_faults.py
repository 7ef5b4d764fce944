"""A grader environment that cannot run kernels is the machine's fault, never a student's:
`check` exits 3 with one line naming the cause, `grade` stops at the first such failure with
one line and exit 3 and stores nothing for what it did not grade, so a rerun grades it; a
student's cell that kills the kernel is still the student's."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grading_helpers import SUBMISSIONS, expect_slow, run_grader
from interpreters import build_wheel, interpreter_environment, make_venv, site_packages_of, stop_fork_server


pytestmark = pytest.mark.slow

EXIT_GRADER_FAULT = 3   # the documented exit code of a grader or machine fault

OWN_PYTHON = Path(sys.executable)   # this suite's, with the grader of this checkout
WORKED = SUBMISSIONS / "worked_solution.ipynb"
FAST = ["--cell-timeout", "10", "--call-timeout", "3"]
BROKEN = "ipykernel is broken on this machine"


@pytest.fixture(scope="module")
def broken_venv(tmp_path_factory):
    """A venv whose ipykernel raises on import, and a way to mend it."""
    folder = Path(tempfile.mkdtemp(prefix="grader-broken-"))
    python = make_venv(folder / "venv", build_wheel(tmp_path_factory.mktemp("wheel")), own_copies=())
    stub = site_packages_of(python) / "ipykernel"
    stub.mkdir()
    (stub / "__init__.py").write_text(f"raise ImportError({BROKEN!r})\n")
    yield python, stub
    stop_fork_server(python)   # the mended venv started one
    shutil.rmtree(folder, ignore_errors=True)


def run_with(python: Path, args: list, env: dict | None = None):
    """`grader ARGS` run by `python`; returns (returncode, stdout, stderr)."""
    expect_slow()
    done = subprocess.run([str(python), "-m", "grader.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=tempfile.gettempdir(), env=env or interpreter_environment())
    return done.returncode, done.stdout, done.stderr


def one_fault_line(err: str, cause: str) -> str:
    """The machine's fault, said once on the last line, without a traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err[-3000:]
    assert lines and lines[-1].startswith("grader: cannot grade on this machine:"), err[-3000:]
    assert cause in lines[-1], lines[-1]
    assert sum("cannot grade on this machine" in line for line in lines) == 1, err[-3000:]
    return lines[-1]


def test_check_with_a_broken_ipykernel_exits_3_naming_the_cause(broken_venv, tmp_path):
    python, _ = broken_venv
    for start in ([], ["--no-fork-server"]):
        code, out, err = run_with(python, ["check", WORKED, "--json", tmp_path / "r.json", *FAST, *start])
        assert code == EXIT_GRADER_FAULT, (out[-2000:], err[-2000:])
        line = one_fault_line(err, BROKEN)
        assert "ImportError" in line and str(python.parent) in line, line
        assert "Score" not in out and not (tmp_path / "r.json").exists()   # no student's result for it


def test_grade_with_a_broken_ipykernel_stops_stores_nothing_and_a_rerun_grades_again(broken_venv, tmp_path):
    python, stub = broken_venv
    batch, out = tmp_path / "batch", tmp_path / "out"
    batch.mkdir()
    for name in ("alice", "bob", "carol"):
        shutil.copy(WORKED, batch / f"{name}.ipynb")
    code, stdout, err = run_with(python, ["grade", batch, "-o", out, "--workers", "1", *FAST])
    assert code == EXIT_GRADER_FAULT, (stdout[-2000:], err[-2000:])
    one_fault_line(err, BROKEN)
    assert "graded" not in stdout
    assert list(out.rglob("result.json")) == [] and not (out / "grades.csv").exists()
    shutil.move(stub, stub.with_name("ipykernel-broken"))   # the machine mended
    try:
        code, stdout, err = run_with(python, ["grade", batch, "-o", out, "--workers", "1", *FAST])
    finally:
        shutil.move(stub.with_name("ipykernel-broken"), stub)
    assert code == 0, err[-2000:]
    assert "3 graded, 0 unchanged and skipped" in stdout, stdout
    results = [json.loads(p.read_text()) for p in out.rglob("result.json")]
    assert sorted(r["score"] for r in results) == [25, 25, 25]


def without_unshare() -> dict:
    """This machine less `unshare`: the grader's own interpreter's folder alone on PATH."""
    return interpreter_environment(PATH=str(OWN_PYTHON.parent))


def test_check_asking_for_the_sandbox_where_there_is_none_exits_3(tmp_path):
    code, out, err = run_with(OWN_PYTHON, ["check", WORKED, "--sandbox", "--json", tmp_path / "r.json", *FAST],
                              env=without_unshare())
    assert code == EXIT_GRADER_FAULT, (out[-2000:], err[-2000:])
    line = one_fault_line(err, "--sandbox asks for the whole sandbox")
    assert "pid namespace" in line and "network namespace" in line, line
    assert not (tmp_path / "r.json").exists()
    # Without --sandbox the same machine grades, and says the isolation is partial.
    code, out, err = run_with(OWN_PYTHON, ["check", WORKED, "--json", tmp_path / "r.json", *FAST],
                              env=without_unshare())
    assert code == 0, err[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["score"] == 25 and result["isolation"]["level"] == "partial"


def test_grade_asking_for_the_sandbox_where_there_is_none_stops_and_stores_nothing(tmp_path):
    batch, out = tmp_path / "batch", tmp_path / "out"
    batch.mkdir()
    shutil.copy(WORKED, batch / "alice.ipynb")
    code, stdout, err = run_with(OWN_PYTHON, ["grade", batch, "-o", out, "--sandbox", *FAST], env=without_unshare())
    assert code == EXIT_GRADER_FAULT, (stdout[-2000:], err[-2000:])
    one_fault_line(err, "--sandbox asks for the whole sandbox")
    assert list(out.rglob("result.json")) == []


def test_a_cell_that_kills_the_kernel_is_still_the_students(tmp_path):
    """The kernel started and ran the student's code before it died: a cell error, graded."""
    nb = nbformat.read(WORKED, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import os\nos._exit(1)"))
    path = tmp_path / "dies.ipynb"
    nbformat.write(nb, path)
    code, out, err, _ = run_grader(["check", path, "--json", tmp_path / "r.json", *FAST])
    assert code in (0, 1) and "cannot grade on this machine" not in err, err[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert any(e["kind"] == "kernel_died" and e["cell"] == 0 for e in result["errors"]), result["errors"]
    assert result["score"] == 25   # run again without that cell


@pytest.mark.parametrize("platform, student_folder", [("gradescope", "submission"), ("prairielearn", "student")])
def test_an_lms_grading_on_a_broken_machine_costs_the_student_nothing(broken_venv, tmp_path, platform,
                                                                      student_folder):
    """Gradescope gets no results file (its job fails, the staff regrade); PrairieLearn gets
    `gradable: false`, which awards and takes nothing and counts no attempt. Never a 0."""
    python, _ = broken_venv
    root = tmp_path / "root"
    (root / student_folder).mkdir(parents=True)
    shutil.copy(WORKED, root / student_folder / "attention.ipynb")
    code, out, err = run_with(python, ["lms", platform, "--root", root, *FAST])
    assert code == EXIT_GRADER_FAULT, (out[-2000:], err[-2000:])
    one_fault_line(err, BROKEN)
    results = root / "results" / "results.json"
    if platform == "gradescope":
        assert not results.exists()
    else:
        data = json.loads(results.read_text())
        assert data["gradable"] is False and BROKEN in data["message"], data
