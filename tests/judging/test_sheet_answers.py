"""The sheet's printed answers earn the `fixed` points only when the function computes them.

The attack: a function with a real mistake (scores not scaled) that returns the answers the
assignment sheet prints when it is given the sheet's data earned the 6 points of `fixed` its
mistake loses (14/25 instead of 8/25, when memory_layout and dtypes still charged it again). It
recognised the data with np.array_equal; the same works by the data's shape alone. Either way
it now scores no more than the same function without the special case, and its `fixed` checks
say why; a function whose known mistake gives the sheet's answers on the sheet's data keeps
them (the other checks judge the mistake).
"""

import nbformat
import pytest

from grading_helpers import _current, grade
from grader.judging.checks import SHEET_ONLY
from grader.reference.sheets import FIXED_DATA
from grader.course.spec import load_assignment

pytestmark = pytest.mark.slow

UNSCALED = '''
import numpy as np

def _unscaled(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T                       # the mistake: never divided by sqrt(d_k)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ V, w

def _heads(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [_unscaled(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''

HONEST = UNSCALED + '''
def self_attention(X, Wq, Wk, Wv):
    return _unscaled(X, Wq, Wk, Wv)

def multi_head_attention(X, Wq, Wk, Wv, H):
    return _heads(X, Wq, Wk, Wv, H)
'''

# How a function tells the sheet's data: its values, or only its shape (and H).
RECOGNISES = {
    "equal": "np.array_equal(np.asarray(X, dtype=float), np.array(x)) and H == h",
    "shape": "np.shape(X) == np.shape(x) and H == h",
}

CHEAT = UNSCALED + '''
PRINTED = {printed}

def _printed(name, X, H=None):
    for x, h, out, ws in PRINTED[name]:
        if {recognises}:
            return np.array(out), (np.array(ws) if H is None else [np.array(w) for w in ws])
    return None

def self_attention(X, Wq, Wk, Wv):
    return _printed("self_attention", X) or _unscaled(X, Wq, Wk, Wv)

def multi_head_attention(X, Wq, Wk, Wv, H):
    return _printed("multi_head_attention", X, H) or _heads(X, Wq, Wk, Wv, H)
'''


def printed_answers() -> dict:
    """The sheet's data and the answers printed for it, per function, as a student copies them."""
    printed = {}
    for fn in load_assignment("rows").functions:
        for case in FIXED_DATA[fn.fixed_data]():
            parts = fn.convention.expected_parts(case)
            weights = parts.get("weights_per_head", parts.get("weights"))
            weights = [w.tolist() for w in weights] if isinstance(weights, list) else weights.tolist()
            arguments = fn.convention.call_arguments(case)
            h = arguments[4] if fn.convention.heads == "many" else None
            printed.setdefault(fn.name, []).append((arguments[0].tolist(), h, parts["output"].tolist(), weights))
    return printed


def notebook(path, source: str):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    _current["slow"] = True   # only slow tests request it, and it runs before their own set-up
    return grade(notebook(tmp_path_factory.mktemp("honest") / "honest.ipynb", HONEST), "rows")


@pytest.mark.parametrize("how", sorted(RECOGNISES))
def test_printed_answers_for_the_sheets_data_earn_nothing(tmp_path, honest, how):
    source = CHEAT.format(printed=repr(printed_answers()), recognises=RECOGNISES[how])
    cheat = grade(notebook(tmp_path / f"cheat_{how}.ipynb", source), "rows")
    fixed = [c for c in cheat.checks if c.kind == "fixed"]
    assert [c.status for c in fixed] == ["failed", "failed"], [c.message for c in fixed]
    assert all(c.message.startswith(SHEET_ONLY) for c in fixed), [c.message for c in fixed]
    # No more than without the special case (answering by shape also spoils the base case, 5 x 6).
    assert honest.score == 12 and cheat.score <= honest.score, (cheat.score, honest.score)
    # The honest function fails the sheet's data on its own, and says why.
    assert {c.diagnosis for c in honest.checks if c.kind == "fixed"} == {"scores not scaled"}
