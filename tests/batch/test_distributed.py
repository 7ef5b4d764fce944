"""Grading through a real Dask cluster (two worker processes on 127.0.0.1) gives the same
results as local grading; the workers get the notebooks' bytes and need no shared files."""
import json
import re

import pytest

from grading_helpers import FIXTURES, SAMPLES, SUBMISSIONS, own_run_environment, sandbox_processes
from grader.batch.run import grade_all

pytestmark = pytest.mark.slow

distributed = pytest.importorskip("distributed")

BATCH = [SUBMISSIONS / "worked_solution.ipynb", SUBMISSIONS / "mistake_softmax_axis.ipynb",
         SAMPLES / "two_head_sheet_002.ipynb", FIXTURES / "not_json.ipynb", FIXTURES / "hostile_os_exit.ipynb"]
# The same staff-given seed for both runs: otherwise each output folder draws its own.
SETTINGS = {"cell_timeout": 4.0, "call_timeout": 2.0, "seed": 1234}


def comparable(folder):
    rows = {}
    for result in sorted(folder.glob("*/result.json")):
        r = json.loads(result.read_text())
        rows[r["submission"]] = {
            "score": r["score"], "max_score": r["max_score"], "status": r["status"], "student": r["student"],
            "checks": [(c["name"], c["status"], c["points"], c["message"], c["diagnosis"]) for c in r["checks"]],
            "errors": [(e["cell"], e["kind"], e["ename"]) for e in r["errors"]]}
    return rows


def test_dask_cluster_grades_like_local_mode(tmp_path):
    from grader.sandbox.isolation import run_id
    run = int(run_id())  # workers started from here inherit this run's id
    local, remote = tmp_path / "local", tmp_path / "dask"
    grade_all(BATCH, local, SETTINGS, workers=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        report = grade_all(BATCH, remote, SETTINGS, scheduler=cluster.scheduler_address)
    assert report.graded == len(BATCH)
    assert comparable(remote) == comparable(local)
    assert len(comparable(remote)) == len(BATCH)
    assert (remote / "summary.html").exists() and len(list(remote.glob("worked_solution-*/report.html"))) == 1
    assert sandbox_processes(grader_pid=run) == []


def test_unreachable_scheduler_is_a_one_line_error(tmp_path):
    from grader.intake.notebook import SubmissionError
    with pytest.raises(SubmissionError, match="cannot reach the Dask scheduler"):
        # The connect timeout is a setting: a second is plenty for a port nothing listens on.
        grade_all(BATCH[:1], tmp_path / "out", {**SETTINGS, "connect_timeout": 1.0}, scheduler="tcp://127.0.0.1:9")


def readme_recipe() -> list[str]:
    """The shell lines of the docs' cluster recipe, as written."""
    from grading_helpers import ROOT
    section = (ROOT / "docs" / "grading-a-class.md").read_text().split("\n## On a Dask cluster\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_loopback(line: str, port: int, batch) -> str:
    """A recipe line for this machine: the head is its loopback, the ports free ones, `dask`
    the test's interpreter's, fewer workers; everything else as written."""
    import sys
    line = line.split("  # ")[0].replace("--host 0.0.0.0", "--host 127.0.0.1").replace("HEAD:8786", f"127.0.0.1:{port}")
    line = line.replace("--port 8786", f"--port {port}").replace("127.0.0.1:8787", "127.0.0.1:0")
    line = line.replace("--nworkers 4", "--nworkers 2").replace("submissions.zip", str(batch))
    return f"{sys.executable} -m {line}" if line.startswith("dask ") else line


def test_the_readme_cluster_recipe_grades_over_tls_and_refuses_whoever_has_no_certificate(tmp_path):
    """The recipe run as written on this machine's loopback: certificates made with openssl, a
    scheduler and two workers over TLS, a batch graded through it. Someone who reaches the
    scheduler's port without the cluster's certificate (plain TCP, or TLS with a certificate
    of their own) cannot send the root workers anything."""
    import subprocess
    import time
    from distributed import Client
    from distributed.security import Security
    lines = readme_recipe()
    port = free_port()
    batch = tmp_path / "batch"
    batch.mkdir()
    for path in BATCH[:3] + [FIXTURES / "not_json.ipynb"]:
        (batch / path.name).write_bytes(path.read_bytes())
    made = [line for line in lines if line.startswith("openssl ")]   # the certificates, made once
    variables = "".join(f"{line}\n" for line in lines if re.match(r"[A-Z_]+=", line))
    servers = [on_loopback(line, port, batch) for line in lines if line.startswith("dask ")]
    grade = next(on_loopback(line, port, batch) for line in lines if line.startswith("grader "))
    subprocess.run(["bash", "-c", "set -e\n" + "\n".join(made)], cwd=tmp_path, check=True, capture_output=True)
    started = []
    try:
        for line in servers:
            started.append(subprocess.Popen(["bash", "-c", variables + "exec " + line], cwd=tmp_path,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(3)   # the scheduler listens before the workers come
        scheme = grade.split("--scheduler ")[1].split("://")[0]
        for address, security in ((f"tcp://127.0.0.1:{port}", None),
                                  (f"{scheme}://127.0.0.1:{port}", Security.temporary())):
            with pytest.raises(Exception):   # noqa: B017 - refused, however Dask words it
                with Client(address, timeout=5, security=security) as intruder:
                    intruder.run(lambda: None)
        done = subprocess.run(["bash", "-c", variables + grade + " --seed 1234"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, env=own_run_environment())
        assert done.returncode == 0, done.stdout + done.stderr
        rows = comparable(tmp_path / "out")
        assert rows["worked_solution.ipynb"]["score"] == 25 and rows["not_json.ipynb"]["status"] == "error"
        assert rows["mistake_softmax_axis.ipynb"]["score"] < 25 and len(rows) == 4
    finally:
        for process in reversed(started):
            process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
    assert len(made) == 2 and len(servers) == 2 and "--scheduler tls://" in grade
    assert len(made) + len(servers) + 1 + variables.count("\n") == len(lines)   # every line was run


def test_grade_refuses_a_plain_scheduler_address_that_is_not_loopback(tmp_path):
    from grading_helpers import non_loopback_address, run_grader
    for address in (f"tcp://{non_loopback_address()}:8786", f"{non_loopback_address()}:8786"):
        code, out, err, _ = run_grader(["grade", BATCH[0], "-o", tmp_path / "out", "--scheduler", address])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "is not encrypted and not this machine's loopback" in err and "Traceback" not in err + out
        assert not (tmp_path / "out").exists()   # refused before anything was written
