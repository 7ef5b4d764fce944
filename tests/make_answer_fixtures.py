"""Writes tests/fixtures/answers/: notebooks for the non-answer rule, the one-head-weights
return, two mistakes at once and softmax without max-subtraction, in every calling convention
where each can occur. Their golden verdicts are in tests/fixtures/expected.json.

Run `python tests/make_answer_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent / "fixtures" / "answers"

SOFTMAX = '''
def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
'''

# What each non-answer returns, per convention, as the body's return expression.
NON_ANSWERS = {
    "zeros": {
        "rows": '''
def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    return np.zeros((n, Wv.shape[1])), np.full((n, n), 1.0 / n)

def multi_head_attention(X, Wq, Wk, Wv, H):
    n = X.shape[0]
    return np.zeros((n, Wv.shape[1])), [np.full((n, n), 1.0 / n) for _ in range(H)]
''',
        "columns": '''
def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return np.zeros((omega_v.shape[0], X.shape[1]))

def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return np.zeros((omega_v.shape[0], X.shape[1]))

def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    return np.zeros((omega_c.shape[0], X.shape[1]))
''',
        "two-head": '''
def compute_attention_scores(Q, K):
    return np.zeros((Q.shape[0], K.shape[0]))

def apply_softmax(scores):
    return np.full(scores.shape, 1.0 / scores.shape[1])
''',
        "sdpa": '''
def softmax(x, axis=-1):
    return np.full(x.shape, 1.0 / x.shape[axis])

def scaled_dot_product_attention(Q, K, V):
    n = Q.shape[0]
    return np.zeros((n, n)), np.full((n, n), 1.0 / n), np.zeros(V.shape)
''',
        "qkv": '''
def compute_qkv(X, W_q, W_k, W_v):
    n = X.shape[0]
    return np.zeros((n, W_q.shape[1])), np.zeros((n, W_k.shape[1])), np.zeros((n, W_v.shape[1]))

def self_attention(Q, K, V):
    return np.zeros(V.shape)

def multi_head_attention(Q, K, V, n_heads):
    return np.zeros(V.shape)
''',
    },
    "none": {
        "rows": '''
def self_attention(X, Wq, Wk, Wv):
    return None

def multi_head_attention(X, Wq, Wk, Wv, H):
    return None
''',
        "columns": '''
def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return None

def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return None

def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    return None
''',
        "two-head": '''
def compute_attention_scores(Q, K):
    return None

def apply_softmax(scores):
    return None
''',
        "sdpa": '''
def softmax(x, axis=-1):
    return None

def scaled_dot_product_attention(Q, K, V):
    return None, None, None
''',
        "qkv": '''
def compute_qkv(X, W_q, W_k, W_v):
    return None

def self_attention(Q, K, V):
    return None

def multi_head_attention(Q, K, V, n_heads):
    return None
''',
    },
    # Outputs that vary with the inputs but are not attention: an input itself, or an input
    # plus noise, with weights that are a valid (random) distribution.
    "inputs": {
        "rows": '''
def self_attention(X, Wq, Wk, Wv):
    return X.copy(), np.eye(X.shape[0])

def multi_head_attention(X, Wq, Wk, Wv, H):
    return X.copy(), [np.eye(X.shape[0]) for _ in range(H)]
''',
        "columns": '''
def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return X.copy()

def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return X.copy()

def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    return X.copy()
''',
        "two-head": '''
def compute_attention_scores(Q, K):
    return Q.copy()

def apply_softmax(scores):
    return scores.copy()
''',
        "sdpa": '''
def softmax(x, axis=-1):
    return x.copy()

def scaled_dot_product_attention(Q, K, V):
    n = Q.shape[0]
    return np.eye(n), np.eye(n), V.copy()
''',
        "qkv": '''
def compute_qkv(X, W_q, W_k, W_v):
    return X.copy(), X.copy(), X.copy()

def self_attention(Q, K, V):
    return V.copy()

def multi_head_attention(Q, K, V, n_heads):
    return V.copy()
''',
    },
    "noise": {
        "rows": '''
def _noisy(a):
    return a + 0.01 * np.sin(np.arange(a.size).reshape(a.shape) + a)

def _distribution(n):
    w = np.abs(np.sin(np.arange(n * n).reshape(n, n))) + 0.1
    return w / w.sum(axis=1, keepdims=True)

def self_attention(X, Wq, Wk, Wv):
    return _noisy(X @ Wv), _distribution(X.shape[0])

def multi_head_attention(X, Wq, Wk, Wv, H):
    return _noisy(X @ Wv), [_distribution(X.shape[0]) for _ in range(H)]
''',
        "columns": '''
def _noisy(a):
    return a + 0.01 * np.sin(np.arange(a.size).reshape(a.shape) + a)

def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return _noisy(omega_v @ X + beta_v)

def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    return _noisy(omega_v @ X + beta_v)

def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    return _noisy(omega_c @ X)
''',
        "two-head": '''
def _noisy(a):
    return a + 0.01 * np.sin(np.arange(a.size).reshape(a.shape) + a)

def compute_attention_scores(Q, K):
    return _noisy(Q @ K.T)

def apply_softmax(scores):
    w = np.abs(_noisy(scores)) + 0.1
    return w / w.sum(axis=1, keepdims=True)
''',
        "sdpa": '''
def _noisy(a):
    return a + 0.01 * np.sin(np.arange(a.size).reshape(a.shape) + a)

def softmax(x, axis=-1):
    w = np.abs(_noisy(x)) + 0.1
    return w / w.sum(axis=axis, keepdims=True)

def scaled_dot_product_attention(Q, K, V):
    s = _noisy(Q @ K.T)
    w = softmax(s)
    return s, w, _noisy(V)
''',
        "qkv": '''
def _noisy(a):
    return a + 0.01 * np.sin(np.arange(a.size).reshape(a.shape) + a)

def compute_qkv(X, W_q, W_k, W_v):
    return _noisy(X @ W_q), _noisy(X @ W_k), _noisy(X @ W_v)

def self_attention(Q, K, V):
    return _noisy(V)

def multi_head_attention(Q, K, V, n_heads):
    return _noisy(V)
''',
    },
}

ROWS_HELPERS = SOFTMAX + '''
def _attend(X, Wq, Wk, Wv, scale=True, axis=-1):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T
    if scale:
        s = s / np.sqrt(K.shape[1])
    w = softmax(s, axis=axis)
    return w @ V, w
'''

OTHERS = {
    # multi_head_attention returns only the last head's N x N weights, as a bare array.
    ("one_head_weights", "rows"): ROWS_HELPERS + '''
def self_attention(X, Wq, Wk, Wv):
    return _attend(X, Wq, Wk, Wv)

def multi_head_attention(X, Wq, Wk, Wv, H):
    outputs = []
    for idx in np.split(np.arange(Wq.shape[1]), H):
        out, A = _attend(X, Wq[:, idx], Wk[:, idx], Wv[:, idx])
        outputs.append(out)
    return np.concatenate(outputs, axis=1), A
''',
    # Two mistakes at once: no scaling and softmax over the columns.
    ("two_mistakes", "rows"): ROWS_HELPERS + '''
def self_attention(X, Wq, Wk, Wv):
    return _attend(X, Wq, Wk, Wv, scale=False, axis=0)

def multi_head_attention(X, Wq, Wk, Wv, H):
    outputs, weights = [], []
    for idx in np.split(np.arange(Wq.shape[1]), H):
        out, w = _attend(X, Wq[:, idx], Wk[:, idx], Wv[:, idx], scale=False, axis=0)
        outputs.append(out)
        weights.append(w)
    return np.concatenate(outputs, axis=1), weights
''',
    ("two_mistakes", "sdpa"): SOFTMAX + '''
def scaled_dot_product_attention(Q, K, V):
    s = Q @ K.T
    w = softmax(s, axis=0)
    return s, w, w @ V
''',
    ("two_mistakes", "qkv"): SOFTMAX + '''
def compute_qkv(X, W_q, W_k, W_v):
    return X @ W_q, X @ W_k, X @ W_v

def self_attention(Q, K, V):
    return softmax(Q @ K.T, axis=0) @ V

def multi_head_attention(Q, K, V, n_heads):
    heads = []
    for idx in np.split(np.arange(Q.shape[1]), n_heads):
        heads.append(softmax(Q[:, idx] @ K[:, idx].T, axis=0) @ V[:, idx])
    return np.concatenate(heads, axis=1)
''',
    # The sheet's own softmax_cols, without max-subtraction, in an otherwise correct notebook.
    ("sheet_softmax", "columns"): '''
def softmax_cols(data_in):
    exp_values = np.exp(data_in)
    denom = np.sum(exp_values, axis=0)
    return exp_values / denom

def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    V = beta_v + omega_v @ X
    Q = beta_q + omega_q @ X
    K = beta_k + omega_k @ X
    return V @ softmax_cols(K.T @ Q)

def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    V = beta_v + omega_v @ X
    Q = beta_q + omega_q @ X
    K = beta_k + omega_k @ X
    return V @ softmax_cols(K.T @ Q / np.sqrt(Q.shape[0]))

def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    head1 = scaled_dot_product_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1)
    head2 = scaled_dot_product_self_attention(X, omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2)
    return omega_c @ np.vstack([head1, head2])
''',
    # Seed 002's apply_softmax without the max-subtraction the sheet says is not expected.
    ("sheet_softmax", "two-head"): '''
def compute_attention_scores(Q, K):
    return Q @ K.T / np.sqrt(K.shape[1])

def apply_softmax(scores):
    e = np.exp(scores)
    return e / np.sum(e, axis=1, keepdims=True)
''',
    # The sheet's data answered from a table, anything else with uniform weights.
    ("sheet_lookup", "rows"): '''
SHEET_X0 = [0.7, -0.8, -1.2, -1.0, -0.0, -0.3]

def self_attention(X, Wq, Wk, Wv):
    n = X.shape[0]
    if n == 5 and np.allclose(X[0], SHEET_X0):
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        s = Q @ K.T / np.sqrt(K.shape[1])
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w = w / w.sum(axis=1, keepdims=True)
        return w @ V, w        # what a table of the sheet's printed answers holds
    return np.zeros((n, Wv.shape[1])), np.full((n, n), 1.0 / n)

def multi_head_attention(X, Wq, Wk, Wv, H):
    n = X.shape[0]
    if n == 5 and np.allclose(X[0], SHEET_X0):
        outputs, weights = [], []
        for idx in np.split(np.arange(Wq.shape[1]), H):
            out, w = self_attention(X, Wq[:, idx], Wk[:, idx], Wv[:, idx])
            outputs.append(out)
            weights.append(w)
        return np.concatenate(outputs, axis=1), weights
    return np.zeros((n, Wv.shape[1])), [np.full((n, n), 1.0 / n) for _ in range(H)]
''',
}


# Tricks around the zeros: numpy's comparisons patched in the kernel, and arrays whose
# __eq__ always agrees. The grader compares in its own process, so neither changes a thing.
PATCHES = {
    "monkeypatch": '''
np.allclose = lambda *a, **k: True
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
''',
    "lying": '''
class Agreeable(np.ndarray):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False

_zeros, _full = np.zeros, np.full
np.zeros = lambda *a, **k: _zeros(*a, **k).view(Agreeable)
np.full = lambda *a, **k: _full(*a, **k).view(Agreeable)
''',
}
for _trick, _patch in PATCHES.items():
    NON_ANSWERS[_trick] = {a: _patch + body for a, body in NON_ANSWERS["zeros"].items()}


def notebook(body: str, assignment: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np"), nbformat.v4.new_code_cell(body.strip() + "\n")]
    nb.metadata["grader"] = {"assignment": assignment}
    return nb


def all_fixtures() -> dict:
    found = {}
    for kind, per_assignment in NON_ANSWERS.items():
        for assignment, body in per_assignment.items():
            found[f"nonanswer_{kind}_{assignment.replace('-', '_')}.ipynb"] = (assignment, body)
    for (kind, assignment), body in OTHERS.items():
        found[f"{kind}_{assignment.replace('-', '_')}.ipynb"] = (assignment, body)
    return found


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    for name, (assignment, body) in all_fixtures().items():
        nbformat.write(notebook(body, assignment), HERE / name)
        print(HERE / name)
