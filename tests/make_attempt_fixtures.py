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
    # A typo: the keys projected with the query weights, named as a known mistake.
    "typo_keys_from_query_weights_rows": (WORKED, "K = X @ Wk", "K = X @ Wq"),
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


# Correct attention, returned with fewer digits: answers, which keep the points of the checks
# they pass and are named as rounding or reduced precision.
CORRECT_FINISHED = '''
import numpy as np

def self_attention(X, Wq, Wk, Wv):
    X, Wq, Wk, Wv = ({dtype}(a) for a in (X, Wq, Wk, Wv))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scores = Q @ K.T / np.sqrt(K.shape[1]).astype(Q.dtype)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights = weights / weights.sum(axis=1, keepdims=True)
    output = weights @ V
    return {finish}

def multi_head_attention(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [self_attention(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''
FEWER_DIGITS = {
    # as the sheet prints them
    "rounded_4_decimals_rows": CORRECT_FINISHED.format(dtype="np.float64",
                                                       finish="np.round(output, 4), np.round(weights, 4)"),
    "float16_rows": CORRECT_FINISHED.format(dtype="np.float16", finish="output, weights"),
}

# Non-answers that passed the attempt rule while it drew its calls around one case: mixing the
# tokens only in the shape of that case, or only for as many calls as the rule made.
SHAPE_TUNED = '''
import numpy as np

def _attention(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ V, weights

def self_attention(X, Wq, Wk, Wv):
    if X.shape == (5, 6):
        return _attention(X, Wq, Wk, Wv)
    n = X.shape[0]
    return np.zeros((n, Wv.shape[1])), np.full((n, n), 1.0 / n)

def multi_head_attention(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [self_attention(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''
# A blur of the values by a number taken from the keys: no query is ever used.
QUERY_FREE_BLUR = '''
import numpy as np

def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    c = 1 / (1 + np.exp(-np.mean(X @ Wk)))
    M = (1 - c) * np.eye(n) + c / n
    return M @ (X @ Wv), M
''' + MULTI_HEAD_FROM_ONE
# The module's class, attending for the first calls the harness makes (as many as the attempt
# rule made around one case) with a counter kept on the class, zeros and uniform weights after.
CLASS_COUNTER = '''
import numpy as np

class MultiHeadAttention:
    calls = 0

    def __init__(self, d_model, num_heads):
        self.num_heads = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (np.eye(d_model) for _ in range(4))
        self.b_q, self.b_k, self.b_v, self.b_o = (np.zeros(d_model) for _ in range(4))

    def forward(self, x, mask):
        MultiHeadAttention.calls += 1
        n = x.shape[0]
        if MultiHeadAttention.calls > 17:
            return np.zeros((n, self.W_o.shape[0])), np.full((self.num_heads, n, n), 1.0 / n)
        Q, K, V = x @ self.W_q.T + self.b_q, x @ self.W_k.T + self.b_k, x @ self.W_v.T + self.b_v
        d = Q.shape[1] // self.num_heads
        heads, weights = [], []
        for h in range(self.num_heads):
            part = slice(h * d, (h + 1) * d)
            scores = np.where(mask, Q[:, part] @ K[:, part].T / np.sqrt(d), -1e9)
            w = np.exp(scores - scores.max(axis=-1, keepdims=True))
            w /= w.sum(axis=-1, keepdims=True)
            heads.append(w @ V[:, part])
            weights.append(w)
        return np.concatenate(heads, axis=1) @ self.W_o.T + self.b_o, np.stack(weights)
'''
NON_ANSWERS = {"nonanswer_shape_tuned_rows": SHAPE_TUNED, "nonanswer_query_free_blur_rows": QUERY_FREE_BLUR,
               "nonanswer_class_counter_module": CLASS_COUNTER}


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


def notebook(source: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source.strip() + "\n")]
    nb.cells[0].id = "cell-0"
    return nb


def all_fixtures() -> dict:
    fixtures = {f"{name}.ipynb": one_token_bug(*bug) for name, bug in ONE_TOKEN_BUGS.items()}
    fixtures.update({f"{name}_rows.ipynb": forgery(body) for name, body in FORGERIES.items()})
    fixtures.update({f"{name}.ipynb": notebook(body) for name, body in {**FEWER_DIGITS, **NON_ANSWERS}.items()})
    return fixtures


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    for name, nb in all_fixtures().items():
        nbformat.write(nb, HERE / name)
        print(HERE / name)
