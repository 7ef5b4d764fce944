"""A library's warnings never reach a student's or a TA's terminal: what `grader` prints on
stderr is its own one line, or nothing."""
import json
import subprocess
import warnings

import pytest

from grading_helpers import GRADER, SUBMISSIONS
from grader.intake.notebook import load_submission

FAST = ["--cell-timeout", "4", "--call-timeout", "2"]


def run(*args, cwd=None):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def saved_without_ids(tmp_path, name="no_ids.ipynb", same_id=False):
    """The worked solution as an older front end saves it: format 4.5, but no cell ids (or,
    with `same_id`, every cell with the same one)."""
    nb = json.loads((SUBMISSIONS / "worked_solution.ipynb").read_text())
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5)
    for cell in nb["cells"]:
        del cell["id"]
        if same_id:
            cell["id"] = "same"
    path = tmp_path / name
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize("same_id", [False, True])
def test_cells_without_ids_are_read_quietly_and_whole(tmp_path, same_id):
    """Cell ids mean nothing to grading (the grader's own cells get their own): cells without
    them, or sharing one, are read without a warning, every cell's code as it was saved."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # any warning fails the test
        nb = load_submission(saved_without_ids(tmp_path, same_id=same_id))
    saved = json.loads((SUBMISSIONS / "worked_solution.ipynb").read_text())["cells"]
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c["cell_type"], "".join(c["source"])) for c in saved]


@pytest.mark.slow
def test_the_one_line_error_stands_alone_on_stderr(tmp_path):
    done = run("check", saved_without_ids(tmp_path), "--assignment", "nonsense")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("grader: error: unknown assignment 'nonsense'")


@pytest.mark.slow
def test_check_prints_only_its_summary(tmp_path):
    done = run("check", saved_without_ids(tmp_path), *FAST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    assert "25 / 25 points" in done.stdout


@pytest.mark.slow
def test_a_class_graded_in_worker_processes_prints_no_library_warning(tmp_path):
    """`grader grade` reads each file in a worker process of its own, which shares the TA's
    terminal: a file without ids and one whose cells share an id say nothing there either."""
    folder = tmp_path / "class"
    folder.mkdir()
    saved_without_ids(folder, "a_no_ids.ipynb")
    saved_without_ids(folder, "b_same_id.ipynb", same_id=True)
    done = run("grade", folder, "-o", tmp_path / "out", "--workers", "2", *FAST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stderr and "nbformat" not in done.stderr, done.stderr
    assert "2 graded" in done.stdout
