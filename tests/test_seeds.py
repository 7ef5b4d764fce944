"""Grading seeds students cannot know: a table of answers for the public seed's inputs scores
in `grader check` (where students may use it on themselves) and nothing in `grader grade`."""
import csv
import hashlib
import json
import stat

import nbformat
import numpy as np

import pytest

from conftest import FIXTURES, SUBMISSIONS, run_grader
from grader.checks import CHECKS, Context, evidence_probes
from grader.returns import Tolerance
from grader.settings import PUBLIC_SEED
from grader.spec import load_assignment

pytestmark = pytest.mark.slow

FAST = ["--cell-timeout", "4", "--call-timeout", "2"]

LOOKUP = '''
import hashlib
import numpy as np

def _key(X, W, H=None):
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64)).round(5)
    return hashlib.sha256(X.tobytes() + repr((np.shape(W), H)).encode()).hexdigest()

def self_attention(X, Wq, Wk, Wv):
    out, w = ANSWERS[_key(X, Wq)] if _key(X, Wq) in ANSWERS else (np.zeros((len(X), 1)), np.eye(len(X)))
    return np.array(out), np.array(w)

def multi_head_attention(X, Wq, Wk, Wv, H):
    key = _key(X, Wq, H)
    if key not in ANSWERS:
        return np.zeros((len(X), 1)), [np.eye(len(X))] * H
    out, ws = ANSWERS[key]
    return np.array(out), [np.array(w) for w in ws]
'''


def _key(x, w, h=None):
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float64)).round(5)
    return hashlib.sha256(x.tobytes() + repr((np.shape(w), h)).encode()).hexdigest()


def lookup_notebook(path, seed: int) -> None:
    """Every input the grader gives the rows functions under `seed`, with the right answer."""
    answers = {}
    ctx = Context(seed, Tolerance())
    for fn in load_assignment("rows").functions:
        probes = [p for kind in fn.points for p in CHECKS[kind].probes(fn, ctx)] + evidence_probes(fn, ctx)
        for probe in probes:
            args = probe.arguments(fn.convention)
            parts = fn.convention.expected_parts(probe.case)
            many = fn.convention.heads == "many"
            weights = [w.tolist() for w in parts["weights_per_head"]] if many else parts["weights"].tolist()
            answers[_key(args[0], args[1], args[4] if many else None)] = (parts["output"].tolist(), weights)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"ANSWERS = {json.dumps(answers)}"),
                                         nbformat.v4.new_code_cell(LOOKUP)])
    nbformat.write(nb, path)


def test_a_lookup_of_the_public_inputs_scores_only_where_students_check(tmp_path):
    path = tmp_path / "lookup.ipynb"
    lookup_notebook(path, PUBLIC_SEED)
    code, out, err, _ = run_grader(["check", path, *FAST], cwd=tmp_path)
    public_score = float(out.split(":")[1].split("/")[0])
    assert public_score >= 20, out + err        # the attack works against the public seed
    code, _, err, _ = run_grader(["grade", path, "-o", tmp_path / "out", *FAST], cwd=tmp_path)
    assert code == 0, err
    (row,) = csv.DictReader((tmp_path / "out" / "grades.csv").open())
    assert float(row["score"]) == 0, row


def test_grade_draws_a_secret_seed_per_student_and_keeps_it_for_reruns(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name in ("a_1_1_hw.ipynb", "b_2_2_hw.ipynb"):
        (inbox / name).write_bytes((SUBMISSIONS / "worked_solution.ipynb").read_bytes())
    out = tmp_path / "out"
    code, _, err, _ = run_grader(["grade", inbox, "-o", out, *FAST], cwd=tmp_path)
    assert code == 0, err
    seeds = [json.loads(p.read_text())["seed"] for p in sorted(out.glob("*/result.json"))]
    assert len(set(seeds)) == 2 and PUBLIC_SEED not in seeds
    kept = out / ".grading-seed"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    code, stdout, _, _ = run_grader(["grade", inbox, "-o", out, *FAST], cwd=tmp_path)
    assert "0 graded, 2 unchanged" in stdout
    code, stdout, _, _ = run_grader(["grade", inbox, "-o", out, "--seed", "7", *FAST], cwd=tmp_path)
    assert "2 graded" in stdout
    assert {json.loads(p.read_text())["seed"] for p in out.glob("*/result.json")} == {7}


def test_a_recorded_seed_replays_the_grading(tmp_path):
    out = tmp_path / "out"
    run_grader(["grade", FIXTURES / "mistake_heads_reversed.ipynb", "-o", out, *FAST], cwd=tmp_path)
    (result_file,) = out.glob("*/result.json")
    graded = json.loads(result_file.read_text())
    code, _, err, _ = run_grader(["check", FIXTURES / "mistake_heads_reversed.ipynb", "--seed", str(graded["seed"]),
                                  "--json", tmp_path / "replay.json", *FAST], cwd=tmp_path)
    replay = json.loads((tmp_path / "replay.json").read_text())
    assert [(c["name"], c["status"], c["message"]) for c in replay["checks"]] == \
        [(c["name"], c["status"], c["message"]) for c in graded["checks"]]
