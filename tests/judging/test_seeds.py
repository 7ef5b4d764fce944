"""Grading seeds students cannot know: a table of answers for the public seed's inputs scores
in `grader check` (where students may use it on themselves) and nothing in `grader grade`; no
student-facing file shows a grading seed; a resubmission never gets the inputs of an earlier
grading; seeds have 128 bits."""
import csv
import hashlib
import json
import re
import stat

import nbformat
import numpy as np

import pytest

from grading_helpers import FIXTURES, SUBMISSIONS, run_grader
from grading_helpers.lms_entrypoints import run_entrypoint
from grader.judging.checks import CHECKS, Context, evidence_probes
from grader.judging.answers import attempt_probes
from grader.calling.returns import Tolerance
from grader.settings import PUBLIC_SEED
from grader.course.spec import load_assignment

pytestmark = pytest.mark.slow

FAST = ["--cell-timeout", "4", "--call-timeout", "2"]

LOOKUP = '''
import hashlib
import numpy as np

def _key(arrays, H=None):
    rounded = [np.ascontiguousarray(np.asarray(a, dtype=np.float64)).round(5) for a in arrays]
    return hashlib.sha256(b"".join(a.tobytes() + repr(a.shape).encode() for a in rounded)
                          + repr(H).encode()).hexdigest()

def self_attention(X, Wq, Wk, Wv):
    key = _key((X, Wq, Wk, Wv))
    out, w = ANSWERS[key] if key in ANSWERS else (np.zeros((len(X), 1)), np.eye(len(X)))
    return np.array(out), np.array(w)

def multi_head_attention(X, Wq, Wk, Wv, H):
    key = _key((X, Wq, Wk, Wv), H)
    if key not in ANSWERS:
        return np.zeros((len(X), 1)), [np.eye(len(X))] * H
    out, ws = ANSWERS[key]
    return np.array(out), [np.array(w) for w in ws]
'''


def _key(arrays, h=None):
    """The lookup's key of a call: every array it is given, to 5 decimals, and the head count."""
    rounded = [np.ascontiguousarray(np.asarray(a, dtype=np.float64)).round(5) for a in arrays]
    return hashlib.sha256(b"".join(a.tobytes() + repr(a.shape).encode() for a in rounded)
                          + repr(h).encode()).hexdigest()


def lookup_notebook(path, seed: int) -> None:
    """Every input the grader gives the rows functions under `seed`, with the right answer."""
    answers = {}
    ctx = Context(seed, Tolerance())
    for fn in load_assignment("rows").functions:
        probes = [p for kind in fn.points for p in CHECKS[kind].probes(fn, ctx)] + evidence_probes(fn, ctx) + \
            attempt_probes(fn.convention, seed)
        for probe in probes:
            args = probe.arguments(fn.convention)
            parts = fn.convention.expected_parts(probe.case)
            many = fn.convention.heads == "many"
            weights = [w.tolist() for w in parts["weights_per_head"]] if many else parts["weights"].tolist()
            answers[_key(args[:4], args[4] if many else None)] = (parts["output"].tolist(), weights)
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
    # 128 bits: not to be found by trying seeds against what a report shows (a 31-bit one was).
    assert all(seed.bit_length() > 100 for seed in seeds), seeds
    kept = out / ".grading-secret"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert not any(str(seed) in kept.read_text() for seed in seeds)
    code, stdout, _, _ = run_grader(["grade", inbox, "-o", out, *FAST], cwd=tmp_path)
    assert "0 graded, 2 unchanged" in stdout
    code, stdout, _, _ = run_grader(["grade", inbox, "-o", out, "--force", *FAST], cwd=tmp_path)
    assert "2 graded" in stdout   # the same bytes, graded again, resume with the same inputs
    assert sorted(json.loads(p.read_text())["seed"] for p in out.glob("*/result.json")) == sorted(seeds)
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


REPLAY_HINT = re.compile(r"--seed\s*(?:<[^>]*>\s*)?(\d+)")


def test_a_lookup_built_from_a_report_earns_nothing_when_resubmitted(tmp_path):
    """The attack: grade a first attempt, take the seed its report.html shows ("run with --seed N
    to replay"), put every answer for that seed's inputs into the notebook, and submit it again
    at the same path. It scored 25/25 when a resubmission got the seed of its path. Now the
    report shows no seed, and even the seed itself (from the staff's result.json, as if it had
    leaked) is worth nothing: the resubmission's other bytes get other inputs."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    submitted = inbox / "mallory_7_7_hw.ipynb"
    submitted.write_bytes((FIXTURES / "mistake_heads_reversed.ipynb").read_bytes())
    out = tmp_path / "out"
    code, _, err, _ = run_grader(["grade", inbox, "-o", out, *FAST], cwd=tmp_path)
    assert code == 0, err
    (folder,) = [p.parent for p in out.glob("*/result.json")]
    report = (folder / "report.html").read_text()
    seed = json.loads((folder / "result.json").read_text())["seed"]   # the staff's file
    shown = REPLAY_HINT.findall(report)
    assert not shown and str(seed) not in report, f"the student's report shows the grading seed {shown}"

    lookup_notebook(submitted, seed)
    code, _, err, _ = run_grader(["grade", inbox, "-o", out, *FAST], cwd=tmp_path)
    assert code == 0, err
    resubmitted = json.loads((folder / "result.json").read_text())
    assert resubmitted["score"] == 0, [(c["name"], c["status"]) for c in resubmitted["checks"] if c["points"]]
    assert resubmitted["seed"] != seed


def test_the_lms_results_show_students_no_seed_and_the_staff_log_has_it(tmp_path):
    """Gradescope's and PrairieLearn's results files are what students read: a seed there (it
    was in Gradescope's summary) would let a student replay the grading's inputs. The seed
    goes to the grading job's log instead, which the staff read."""
    for platform in ("gradescope", "prairielearn"):
        root = tmp_path / platform
        done, results = run_entrypoint(platform, root, {"attention.ipynb": FIXTURES / "mistake_heads_reversed.ipynb"})
        assert done.returncode == 0, done.stderr
        shown = json.dumps(results) + (root / "results" / "report.html").read_text()
        assert not re.search(r"seed \d{4,}", shown), f"{platform} shows a seed: {re.search(r'seed [0-9]+', shown)}"
        (logged,) = re.findall(r"grading seed: (\d+)", done.stderr)
        assert int(logged).bit_length() > 100 and logged not in shown


def test_runs_starting_together_on_one_output_folder_agree_on_its_secret(tmp_path):
    """Each run that finds no secret writes its own and links it into place; the ones that
    lose the race read the winner's, so every run grades with the same inputs."""
    from concurrent.futures import ThreadPoolExecutor

    from grader.judging.seeds import SECRET_FILE, run_secret
    with ThreadPoolExecutor(8) as pool:
        secrets_seen = set(pool.map(lambda _: run_secret(tmp_path), range(32)))
    assert len(secrets_seen) == 1
    assert [p.name for p in tmp_path.iterdir()] == [SECRET_FILE]
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o777 == 0o600
    # An older seed of another form is replaced, once.
    (tmp_path / SECRET_FILE).write_text("1234\n")
    assert run_secret(tmp_path) == run_secret(tmp_path) != 1234
