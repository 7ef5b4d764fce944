"""Grading through a real Dask cluster (two worker processes on 127.0.0.1) gives the same
results as local grading; the workers get the notebooks' bytes and need no shared files."""
import json

import pytest

from conftest import FIXTURES, SAMPLES, SUBMISSIONS, sandbox_processes
from grader.batch import grade_all

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
    from grader.sandbox import run_id
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
    from grader.loader import SubmissionError
    with pytest.raises(SubmissionError, match="cannot reach the Dask scheduler"):
        # The connect timeout is a setting: a second is plenty for a port nothing listens on.
        grade_all(BATCH[:1], tmp_path / "out", {**SETTINGS, "connect_timeout": 1.0}, scheduler="tcp://127.0.0.1:9")
