"""`grader check --watch`: a save is graded again and only what changed is printed."""
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from grading_helpers import GRADER, SUBMISSIONS, expect_slow, own_run_environment
from grader.result import CheckResult, ErrorRecord, GradeResult
from grader.report.view import result_view
from grader.student.regrade_on_save import changes


def result(fixed: str, points: float, mistake=None, errors=()) -> GradeResult:
    r = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, errors=list(errors), checks=[
        CheckResult("f.fixed", "f", "fixed", "Sheet", fixed, points, 3, "m", diagnosis=mistake),
        CheckResult("f.dtypes", "f", "dtypes", "dtypes", "passed", 1, 1, ""),
        CheckResult("f.random_shapes", "f", "random_shapes", "Random", "failed", 0, 3, "secret",
                    diagnosis="secret mistake", hidden=True)])
    r.total()
    return r


def test_only_what_changed_is_listed():
    error = ErrorRecord(cell=2, kind="error", ename="NameError", evalue="name 'Q' is not defined")
    old = result_view(result("failed", 0, "softmax over the wrong axis", [error]))
    new = result_view(result("passed", 3))
    lines = changes(old, new)
    assert lines[0] == "score 1 -> 4 / 7 (+3)"
    assert "  f.fixed: failed -> passed (+3)" in lines
    assert "  f: likely mistake softmax over the wrong axis -> none" in lines
    assert "  fixed: cell 3: NameError" in lines
    assert not any("dtypes" in line or "random_shapes" in line or "secret" in line for line in lines)
    assert changes(new, new) == ["score 4 / 7 (unchanged)"]


@pytest.mark.slow
def test_watch_grades_each_save_and_stops_on_ctrl_c(tmp_path):
    expect_slow()
    notebook = tmp_path / "hw.ipynb"
    shutil.copy(SUBMISSIONS / "mistake_softmax_axis.ipynb", notebook)
    process = subprocess.Popen([*GRADER, "check", "--watch", str(notebook), "--cell-timeout", "4"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=own_run_environment())
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in process.stdout], daemon=True).start()

    def read_until(words, seconds=120):
        seen, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            if words in seen[-1]:
                return seen
        pytest.fail(f"no {words!r} within {seconds} s; printed: {seen}")

    try:
        first = read_until("watching hw.ipynb")
        assert any("10 / 25 points" in line for line in first)
        time.sleep(1.1)   # a save in a later second, as an editor's would be
        shutil.copy(SUBMISSIONS / "worked_solution.ipynb", notebook)
        second = read_until("likely mistake softmax over the wrong axis -> none")
        said = "\n".join(second)
        assert "hw.ipynb saved: score 10 -> 25 / 25 (+15)" in said
        assert "self_attention.fixed: failed -> passed (+3)" in said
        assert "permutation_equivariance" not in said   # it passed before and after
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
