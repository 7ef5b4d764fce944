"""The hostile suite: what a submission must not be able to do, graded through the real
sandbox. Where this machine lacks a mechanism, the result must say so instead."""
import csv
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, SUBMISSIONS, grade, run_grader, sandbox_processes
from grader.sandbox import isolation as sandbox
from grader.settings import Settings

pytestmark = pytest.mark.slow

FULL = sandbox.namespaces_available() and sandbox.unprivileged_ids() is not None


def needs_full_isolation():
    if not FULL:
        pytest.skip("namespaces or an unprivileged user are not available here; see the isolation report test")


def test_isolation_report_names_what_is_active():
    result = grade(SUBMISSIONS / "worked_solution.ipynb", "rows")
    iso = result.isolation
    assert set(iso["active"]) | set(iso["missing"]) >= set(sandbox.REQUIRED)
    assert iso["level"] == ("full" if not iso["missing"] else "partial")
    if FULL:
        assert iso["level"] == "full", iso


def test_no_sandbox_says_isolation_is_partial():
    result = grade(SUBMISSIONS / "worked_solution.ipynb", "rows", sandbox=False)
    assert result.isolation["level"] == "partial"
    assert "network namespace" in result.isolation["missing"]
    assert result.score == result.max_score
    assert sandbox_processes() == []


def test_network_attempt_fails_fast_and_reaches_nothing(tmp_path):
    needs_full_isolation()
    accepted = []
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A port of its own, put into the fixture's connection attempts (written for port 47613):
    # a fixed port met the same test of another run of the suite on the machine.
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    notebook = tmp_path / "sandbox_network.ipynb"
    notebook.write_text((FIXTURES / "sandbox_network.ipynb").read_text().replace("47613", str(port)))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        result = grade(notebook, "rows", _fresh="network")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert accepted == []
    assert result.score == result.max_score
    errors = [e for e in result.errors if e.ename == "OSError"]
    assert errors and "unreachable" in errors[0].evalue.lower()
    assert not any(e.kind == "timeout" for e in result.errors), "the connection attempt must not hang"


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("GRADER_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    result = grade(FIXTURES / "sandbox_environment.ipynb", "rows", _fresh="environment")
    assert result.score == result.max_score


def test_fake_results_files_have_no_effect_and_stay_inside(tmp_path):
    needs_full_isolation()
    places = [Path("/tmp/results.json"), Path("/var/tmp/results.json"), Path.home() / "results.json",
              Path("/autograder/results/results.json"), Path("/grade/results/results.json")]
    before = {p: p.exists() for p in places}
    result = grade(FIXTURES / "sandbox_fake_results.ipynb", "rows")
    assert result.score == result.max_score == 25
    assert {p: p.exists() for p in places} == before


def test_importing_the_grader_fails_and_is_flagged():
    result = grade(FIXTURES / "sandbox_imports_grader.ipynb", "rows")
    flagged = {f["module"] for f in result.policy["findings"] if f.get("kind") == "grader_import"}
    assert {"grader", "grader.reference.attention", "grader.reference.sheets"} <= flagged
    if FULL:
        imports = [e for e in result.errors if "import" in e.source and "rows.toml" not in e.source]
        assert len(imports) == 3
        # ModuleNotFoundError where a source checkout was hidden whole (an editable install).
        assert all(e.ename in ("ImportError", "ModuleNotFoundError") for e in imports), imports
        reads = [e for e in result.errors if "rows.toml" in e.source]
        assert reads and reads[0].ename in ("FileNotFoundError", "PermissionError", "NotADirectoryError")


def test_memory_limit_from_the_spec(tmp_path):
    spec = tmp_path / "tight.toml"
    spec.write_text('[limits]\nmemory_limit = 512\n[[functions]]\nname = "self_attention"\n'
                    'convention = "rows_single"\nfixed_data = "sheet_000"\n'
                    '[functions.points]\nnumerical_stability = 0\n')
    from grader.cli import main
    code = main(["check", str(FIXTURES / "sandbox_memory_bomb.ipynb"), "--assignment", str(spec),
                 "--json", str(tmp_path / "r.json"), "--cell-timeout", "20"])
    import json
    result = json.loads((tmp_path / "r.json").read_text())
    assert code == 0
    assert any(e["kind"] == "memory" and "memory limit exceeded (512 MiB)" in e["evalue"] for e in result["errors"])
    assert sandbox_processes() == []


def test_infinite_loops_leave_nothing_running():
    for name in ("hostile_infinite_loop_cell.ipynb", "hostile_infinite_loop_function.ipynb",
                 "sandbox_double_fork_daemon.ipynb", "sandbox_process_flood.ipynb", "hostile_segfault.ipynb"):
        grade(FIXTURES / name, "rows")
        assert sandbox_processes() == [], name


def _grader_cgroups(run: int) -> set:
    """The cgroups of the grading run `run` (the grader's PID); they carry it in their name."""
    root = Path("/sys/fs/cgroup")
    return {str(p) for p in root.glob(f"**/grader-{run}-*")} if root.is_dir() else set()


def test_batch_of_hostile_and_correct_notebooks(tmp_path):
    """Every way one submission has hurt others, in one batch with correct notebooks: a row for
    each, full marks for the correct ones, no process, folder or cgroup left, nothing written
    outside the output folder."""
    batch = tmp_path / "batch"
    batch.mkdir()
    correct = ["worked_solution.ipynb", "correct_einsum_batched.ipynb"]
    hostile = ["sandbox_fake_results.ipynb", "sandbox_process_flood.ipynb", "sandbox_double_fork_daemon.ipynb",
               "hostile_os_exit.ipynb", "sandbox_thread_output.ipynb", "not_json.ipynb",
               "hostile_ignores_interrupt.ipynb", "hostile_message_flood.ipynb", "hostile_forged_errors.ipynb"]
    (batch / correct[0]).write_bytes((SUBMISSIONS / correct[0]).read_bytes())
    (batch / correct[1]).write_bytes((FIXTURES / correct[1]).read_bytes())
    for name in hostile:
        (batch / name).write_bytes((FIXTURES / name).read_bytes())
    # Names that once collided with the batch's own files, and inputs that once aborted it.
    (batch / "grades.csv.ipynb").write_bytes((SUBMISSIONS / "worked_solution.ipynb").read_bytes())
    (batch / "deep.ipynb").write_text("[" * 100_000)
    (batch / "corrupt.zip").write_bytes(b"PK\x03\x04 not really a zip")
    correct.append("grades.csv.ipynb")
    tmp_before = set(os.listdir("/tmp"))
    out = tmp_path / "out"
    code, _, err, pid = run_grader(["grade", batch, "-o", out, "--cell-timeout", "4", "--call-timeout", "2",
                                    "--interrupt-grace", "2"], cwd=tmp_path)
    assert code == 0, err
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert set(rows) >= set(correct) | set(hostile) | {"deep.ipynb"}
    assert any("corrupt.zip" in name for name in rows), rows.keys()
    for name in correct:
        assert rows[name]["score"] == rows[name]["max_score"] and rows[name]["status"] == "graded", rows[name]
    for name in ("hostile_ignores_interrupt.ipynb", "hostile_message_flood.ipynb", "hostile_forged_errors.ipynb"):
        assert rows[name]["score"] == rows[name]["max_score"], rows[name]   # each is correct apart from its trick
    assert rows["not_json.ipynb"]["status"] == "error" and rows["deep.ipynb"]["status"] == "error"
    assert sandbox_processes(grader_pid=pid) == []
    new_in_tmp = set(os.listdir("/tmp")) - tmp_before
    assert not [n for n in new_in_tmp if n.startswith(f"grader-kernel-{pid}-") or n.startswith(f"grader-task-{pid}-")
                or n == "results.json"], new_in_tmp
    assert _grader_cgroups(pid) == set()


def test_writing_past_the_folder_quota_is_a_cell_error():
    """A cell that writes 1 GiB into the kernel's folder gets "No space left on device"; the
    grader and the rest of the notebook carry on."""
    result = grade(FIXTURES / "sandbox_fills_folder.ipynb", "rows")
    if "folder quota" not in result.isolation["active"]:
        assert "folder quota" in result.isolation["missing"]
        pytest.skip("no tmpfs mounts here (not root); the result says the folder quota is missing")
    (error,) = result.errors
    assert error.ename == "OSError" and "No space left on device" in error.evalue, error
    assert result.status == "graded" and result.score == result.max_score
    assert sandbox_processes() == []


def test_spinning_neighbour_cannot_starve_a_correct_notebook(tmp_path):
    """Sixty processes spinning in one submission, each in a session of its own, get that
    submission's CPU share and no more: a correct notebook graded beside it, within short
    timeouts, keeps full marks (without the share, it does not even answer an interrupt)."""
    if "cpu share" not in grade(SUBMISSIONS / "worked_solution.ipynb", "rows").isolation["active"]:
        pytest.skip("no cpu cgroup here; the isolation report test covers what the result says")
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "spinners.ipynb").write_bytes((FIXTURES / "sandbox_cpu_spinners.ipynb").read_bytes())
    (batch / "correct.ipynb").write_bytes((SUBMISSIONS / "worked_solution.ipynb").read_bytes())
    code, _, err, pid = run_grader(["grade", batch, "-o", tmp_path / "out", "--workers", "2", "--max-processes", "100",
                                    "--notebook-timeout", "10", "--call-timeout", "2", "--interrupt-grace", "1"],
                                   cwd=tmp_path)
    assert code == 0, err
    rows = {r["submission"]: r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open())}
    correct = rows["correct.ipynb"]
    assert correct["score"] == correct["max_score"] and correct["status"] == "graded", correct
    assert sandbox_processes(grader_pid=pid) == []


@pytest.mark.sandbox
def test_the_cpu_a_submission_used_counts_a_process_outside_its_cgroup():
    """The interrupt's grace is the CPU the submission's processes use (Sandbox.cpu_used).
    Where the kernel does not run as the unprivileged user it can move a process out of its
    cgroup; that process still carries the marker and its CPU still counts."""
    workdir = tempfile.mkdtemp(prefix=f"grader-kernel-{sandbox.run_id()}-")
    box = sandbox.Sandbox(Settings(), workdir)
    box.ids = None   # as on a machine without the unprivileged user
    box.prepare()
    spinner = None
    try:
        if box.cgroup is None or not box.cgroup.dirs:
            pytest.skip("no cgroups here")
        assert not box.cgroup_holds_everything()
        spin = ("import sys, time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5: pass\n"
                "sys.stdout.write('spun'); sys.stdout.flush(); time.sleep(60)\n")
        spinner = subprocess.Popen([sys.executable, "-c", spin], env=box.environment(dict(os.environ)),
                                   stdout=subprocess.PIPE)
        assert spinner.stdout is not None and spinner.stdout.read(4) == b"spun"
        assert spinner.pid not in box.cgroup.pids()
        assert box.cpu_used() >= 0.5
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
        box.cleanup()
