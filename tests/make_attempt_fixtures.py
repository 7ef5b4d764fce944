"""Writes tests/fixtures/attempts/: one-token bugs in worked notebooks (each a mistake the
grader names, or one it does not know that still computes attention), and forgeries that try
to pass as a genuine attempt without computing attention. Their golden verdicts are in
tests/fixtures/expected.json.

Run `python tests/make_attempt_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "fixtures" / "attempts"
WORKED = ROOT / "submissions" / "worked_solution.ipynb"
SDPA = ROOT / "tests" / "fixtures" / "samples" / "sdpa_sheet_004.ipynb"
BATCHED = ROOT / "tests" / "fixtures" / "batch" / "worked.ipynb"

# name -> (worked notebook, the line as written, the same line with one slip)
ONE_TOKEN_BUGS = {
    "keepdims_rows": (WORKED, "np.sum(exp_scores, axis=1, keepdims=True)", "np.sum(exp_scores, axis=1)"),
    "keepdims_sdpa": (SDPA, "np.sum(e, axis=axis, keepdims=True)", "np.sum(e, axis=axis)"),
    "scale_from_tokens_rows": (WORKED, "d_k = K.shape[1]", "d_k = K.shape[0]"),
    "floor_division_rows": (WORKED, "scores /= np.sqrt(d_k)", "scores //= np.sqrt(d_k)"),
    "max_wrong_axis_rows": (WORKED, "np.exp(scores)", "np.exp(scores - np.max(scores, axis=1))"),
    "max_whole_matrix_rows": (WORKED, "np.exp(scores)", "np.exp(scores - np.max(scores))"),
    # No known mistake: a softmax in base 2 is a softmax of rescaled scores.
    "unknown_exp2_rows": (WORKED, "np.exp(scores)", "np.exp2(scores)"),
    # The same in the batched assignment's shared softmax: every function is an attempt.
    "unknown_exp2_batched": (BATCHED, "np.exp(scores", "np.exp2(scores"),
}

# Forgeries, each for both functions of `rows`: output that varies with the values, and with
# the queries and keys, without being attention. Each must stay a non-answer.
MULTI_HEAD_FROM_ONE = '''
def multi_head_attention(X, Wq, Wk, Wv, H):
    output, weights = self_attention(X, Wq, Wk, Wv)
    return output, [weights] * H
'''
FORGERIES = {
    # uniform weights times V
    "forged_uniform_weights": '''
def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    weights = np.full((n, n), 1.0 / n)
    return weights @ (X @ Wv), weights
''',
    # softmax of numbers drawn at random (the same ones every call) times V
    "forged_random_weights": '''
def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    s = np.random.default_rng(0).normal(size=(n, n))
    weights = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    return weights @ (X @ Wv), weights
''',
    # random weights seeded by the queries and keys: they change with both, but not smoothly
    "forged_hashed_weights": '''
import hashlib

def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    seed = int(hashlib.sha256((X @ Wq).tobytes() + (X @ Wk).tobytes()).hexdigest()[:8], 16)
    s = np.random.default_rng(seed).normal(size=(n, n))
    weights = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    return weights @ (X @ Wv), weights
''',
    # the values times a number computed from the queries and keys: no tokens are mixed
    "forged_scaled_values": '''
def self_attention(X, Wq, Wk, Wv):
    c = np.tanh(np.mean(X @ Wq) * np.mean(X @ Wk)) + 1.5
    return c * (X @ Wv), np.eye(X.shape[0])
''',
    # the values plus something computed from the queries and keys
    "forged_shifted_values": '''
def self_attention(X, Wq, Wk, Wv):
    g = np.tanh((X @ Wq) @ (X @ Wk).T).sum(axis=1, keepdims=True)
    return X @ Wv + 0.1 * g, np.eye(X.shape[0])
''',
    # attention weights of another input (the same fixed tokens every call) times V
    "forged_other_input_weights": '''
def self_attention(X, Wq, Wk, Wv):
    n, d = X.shape
    other = np.cos(np.arange(n * d).reshape(n, d))
    s = (other @ Wq) @ (other @ Wk).T / np.sqrt(Wk.shape[1])
    weights = np.exp(s - s.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ (X @ Wv), weights
''',
}


def one_token_bug(source: Path, line: str, slip: str):
    nb = nbformat.read(source, as_version=4)
    found = [c for c in nb.cells if c.cell_type == "code" and line in c.source]
    assert len(found) == 1 and found[0].source.count(line) == 1, (source, line)
    found[0].source = found[0].source.replace(line, slip)
    return nb


def forgery(body: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np"),
                nbformat.v4.new_code_cell(body.strip() + "\n" + MULTI_HEAD_FROM_ONE)]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"   # the same file each time this script writes it
    return nb


def all_fixtures() -> dict:
    fixtures = {f"{name}.ipynb": one_token_bug(*bug) for name, bug in ONE_TOKEN_BUGS.items()}
    fixtures.update({f"{name}_rows.ipynb": forgery(body) for name, body in FORGERIES.items()})
    return fixtures


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    for name, nb in all_fixtures().items():
        nbformat.write(nb, HERE / name)
        print(HERE / name)
