"""Whose doing a kernel's death was, decided by the grader alone from the kernel's own process:
killed from outside (the machine's out-of-memory killer, a supervisor, an administrator) is
the machine's, and the submission is graded again from the start; the submission's own
os._exit, crash or memory bomb is the submission's, recorded and never retried. Real kernels
throughout: the "machine" here is this test killing a kernel's processes from outside."""
import os
import signal
import threading
import time

import nbformat
import pytest

from grading_helpers import FIXTURES, SUBMISSIONS, TEST_SETTINGS, expect_slow, sandbox_processes
from grader import grade as grade_module
from grader.kernel import client as client_module
from grader.kernel import session as kernel_module
from grader.grade import grade_path
from grader.sandbox.isolation import CREATED_MARKERS
from grader.settings import Settings
from grader.course.spec import load_assignment

pytestmark = pytest.mark.slow

# Generous: what is asserted is the verdict, and a busy machine must not change it.
SETTINGS = Settings(**{**TEST_SETTINGS.__dict__, "cell_timeout": 30.0, "call_timeout": 10.0})


def graded(path, settings=SETTINGS):
    """The result, and how many kernels (sandboxes) its grading started."""
    expect_slow()
    before = len(CREATED_MARKERS)
    result = grade_path(path, load_assignment("rows"), settings)
    return result, len(CREATED_MARKERS) - before


def with_first_cell(tmp_path, source: str, notebook=SUBMISSIONS / "worked_solution.ipynb"):
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(source))
    path = tmp_path / f"{notebook.stem}_{abs(hash(source))}.ipynb"
    nbformat.write(nb, path)
    return path


class Killer(threading.Thread):
    """Kills, from outside, every process of the first kernel this test process starts, once
    that kernel has run for `after` seconds: as the machine's OOM killer or an administrator would."""

    def __init__(self, after: float, signum=signal.SIGKILL):
        super().__init__(daemon=True)
        self.after, self.signum = after, signum
        self.killed: list[int] = []
        self.known = set(CREATED_MARKERS)
        self.stop = threading.Event()

    def run(self):
        seen = None
        while not self.stop.wait(0.05):
            pids = [p for p in sandbox_processes() if self._new(p)]
            if pids and seen is None:
                seen = time.monotonic()
            if pids and time.monotonic() - seen >= self.after:
                for pid in pids:
                    try:
                        os.kill(pid, self.signum)
                        self.killed.append(pid)
                    except ProcessLookupError:
                        pass
                return

    def _new(self, pid: int) -> bool:
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            return False
        return any(v.startswith(b"SANDBOX_ID=") and v[len(b"SANDBOX_ID="):].decode() not in self.known
                   for v in environ)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_kernel_killed_from_outside_is_graded_again_from_the_start(tmp_path, signum):
    """The kill lands while the notebook's first cell sleeps: before, the cell was recorded as
    the kernel dying under the student's code, and the notebook run again without it."""
    path = with_first_cell(tmp_path, "import time\ntime.sleep(6)")
    killer = Killer(after=2.0, signum=signum)
    killer.start()
    try:
        result, kernels = graded(path)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed, "the kernel was never seen running"
    assert [e for e in result.errors if e.kind != "error"] == [], result.errors
    assert result.status == "graded" and result.score == result.max_score == 25
    assert kernels >= 2


def test_a_kernel_killed_from_outside_during_the_calls_is_graded_again(tmp_path):
    """Killed while its functions are being called: before, each call under way or after it
    was a failed check ("the kernel died during the call")."""
    slow = with_first_cell(tmp_path, "import time\n_slept = []", FIXTURES / "correct_with_magics.ipynb")
    nb = nbformat.read(slow, as_version=4)
    # Every call of self_attention sleeps a little, so the functions are called for a while.
    nb.cells.append(nbformat.v4.new_code_cell(
        "_plain = self_attention\n"
        "def self_attention(*args, **kwargs):\n"
        "    time.sleep(0.3)\n"
        "    return _plain(*args, **kwargs)\n"))
    nbformat.write(nb, slow)
    quiet, _ = graded(slow)
    killer = Killer(after=6.0)
    killer.start()
    try:
        result, kernels = graded(slow)
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed and kernels >= 2
    assert result.score == quiet.score and result.status == quiet.status == "graded"
    assert [c.status for c in result.checks] == [c.status for c in quiet.checks]
    assert not [e for e in result.errors if e.kind in ("kernel_died", "unresponsive", "grader_error")]


@pytest.mark.parametrize("fixture, kind", [("hostile_os_exit.ipynb", "kernel_died"),
                                           ("hostile_segfault.ipynb", "kernel_died"),
                                           ("sandbox_memory_bomb.ipynb", "memory")])
def test_the_submission_s_own_death_is_recorded_and_never_retried(fixture, kind):
    """One kernel for the notebook, one for its run again without the fatal cell: no more."""
    result, kernels = graded(FIXTURES / fixture)
    assert kind in [e.kind for e in result.errors]
    assert result.status == "graded"
    assert kernels == 2


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_kernel_that_exits_mid_cell_is_found_dead_by_its_exit_alone(monkeypatch, fork_server):
    """The kernel's exit is an event the grader waits on (the fork server's handler says it; a
    fresh kernel's process ends its pidfd), not something found by looking once a second. With
    the periodic look and the cell's timeout both pushed to an hour, a notebook that ends its
    kernel is still found dead, and graded again without that cell; without the event the
    grading would wait the hour (the guard below gives up long before)."""
    monkeypatch.setattr(client_module, "ALIVE_LOOK_SECONDS", 3600.0)
    settings = Settings(**{**SETTINGS.__dict__, "cell_timeout": 3600.0, "fork_server": fork_server})
    done: list = []
    grading = threading.Thread(target=lambda: done.append(graded(FIXTURES / "hostile_os_exit.ipynb", settings)),
                               daemon=True)
    grading.start()
    grading.join(600)
    assert done, "the kernel's exit was not noticed"
    (result, kernels), = done
    assert "kernel_died" in [e.kind for e in result.errors]
    assert result.isolation["kernel_start"].startswith("forked" if fork_server else "fresh")
    assert result.status == "graded" and result.score == result.max_score and kernels == 2


def test_a_kernel_that_kills_itself_as_the_machine_would_is_never_given_points(tmp_path):
    """A SIGKILL the kernel sends itself cannot be told from the machine's: it is graded again,
    and when every attempt ends so, the submission is not graded (status error, the staff's to
    look at, graded again by the next run), never scored on an attempt's partial work."""
    path = with_first_cell(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    result, kernels = graded(path)
    assert kernels == grade_module.GRADING_ATTEMPTS
    assert result.status == "error" and result.score == 0
    assert [(e.kind, e.ename) for e in result.errors] == [("grader_error", "KernelKilled")]
    assert "killed from outside (SIGKILL)" in result.errors[0].evalue


def test_a_kernel_whose_start_fails_is_started_again(monkeypatch):
    """No code of the submission runs before its kernel has started, so a failed start is the
    machine's: the first start here fails (its harness raises, as a start a busy machine spoiled
    would), and the next one grades the notebook in full. Before, the first failure stopped the
    grading as the machine's fault (a batch stopped with it)."""
    real = kernel_module.harness_source
    starts = []

    def first_start_fails():
        starts.append(1)
        return "raise RuntimeError('a start that failed')" if len(starts) == 1 else real()
    monkeypatch.setattr(kernel_module, "harness_source", first_start_fails)
    result, kernels = graded(SUBMISSIONS / "worked_solution.ipynb")
    assert result.status == "graded" and result.score == result.max_score == 25
    assert kernels == 2 and len(starts) == 2


def test_the_cpu_time_limit_is_the_submission_s(tmp_path):
    """A cell that computes past the CPU time limit dies of SIGXCPU, its own doing: recorded,
    the notebook run again without it, never retried as the machine's. (With the hard limit at
    the soft one, Linux sends SIGKILL instead, which reads as a kill from outside.)"""
    path = with_first_cell(tmp_path, "while True:\n    pass")
    settings = Settings(**{**SETTINGS.__dict__, "cpu_limit": 2.0, "cell_timeout": 120.0, "notebook_timeout": 300.0})
    result, kernels = graded(path, settings)
    assert [e.kind for e in result.errors] == ["kernel_died"]
    assert result.status == "graded" and result.score == 25
    assert kernels == 2
