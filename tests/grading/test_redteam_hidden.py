"""A function sees a hidden check's case when it is called on it, and could carry what it saw
into a call made later: a visible check's message or figures, or the smallest failing case,
which students read. Every call whose result a student may see is made before any hidden
case, in every function."""
import json
import shutil

import nbformat
import pytest

from grading_helpers import run_grader
from grading_helpers.lms_entrypoints import run_entrypoint

pytestmark = pytest.mark.slow

# Only the hidden `dtypes` check gives float32 inputs: once it has seen one, every later call
# raises with what it saw, in both functions.
SPY = '''
import numpy as np
_seen = []

def _attention(X, Wq, Wk, Wv):
    if X.dtype == np.float32 and not _seen:
        _seen.append(f"SPY saw a hidden input of shape {X.shape}: {X.ravel()[:3].tolist()}")
    if _seen and X.dtype != np.float32:
        raise ValueError(_seen[0])
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T / np.sqrt(K.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ V, w

def self_attention(X, Wq, Wk, Wv):
    return _attention(X, Wq, Wk, Wv)

def multi_head_attention(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [_attention(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''
COURSE = '''name = "hidden-dtypes"
[[functions]]
name = "self_attention"
convention = "rows_single"
fixed_data = "sheet_000"
hidden = ["dtypes"]

[[functions]]
name = "multi_head_attention"
convention = "rows_multi"
fixed_data = "sheet_000_heads"
hidden = ["dtypes"]
'''
FAST = ["--cell-timeout", "4", "--call-timeout", "2", "--seed", "20261123"]


def test_no_call_a_student_sees_comes_after_a_hidden_case(tmp_path):
    notebook, course = tmp_path / "attention.ipynb", tmp_path / "assignment.toml"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SPY)]), notebook)
    course.write_text(COURSE)
    code, out, err, _ = run_grader(["check", notebook, "--assignment", course, *FAST, "--staff",
                                    "--json", tmp_path / "staff.json"])
    staff = json.loads((tmp_path / "staff.json").read_text())
    assert "SPY" in json.dumps([c for c in staff["checks"] if c["kind"] == "dtypes"])   # it did see them
    code, out, err, _ = run_grader(["check", notebook, "--assignment", course, *FAST,
                                    "--json", tmp_path / "student.json", "--html", tmp_path / "student.html"])
    assert code == 1, err
    shown = {"terminal": out, "json": (tmp_path / "student.json").read_text(),
             "html": (tmp_path / "student.html").read_text()}
    root = tmp_path / "gradescope"
    (root / "source").mkdir(parents=True)
    shutil.copy(course, root / "source" / "assignment.toml")
    done, results = run_entrypoint("gradescope", root, {"attention.ipynb": notebook})
    assert done.returncode == 0, done.stderr
    shown |= {"gradescope": json.dumps(results), "report": (root / "results" / "report.html").read_text()}
    assert [where for where, text in shown.items() if "SPY" in text] == []
    # Nothing visible lost a point for it: the visible checks were all made before.
    student = json.loads(shown["json"])
    assert [c["name"] for c in student["checks"] if c["points"] < c["max_points"]] == [
        "self_attention.dtypes", "multi_head_attention.dtypes"]
