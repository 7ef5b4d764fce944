"""Writes tests/fixtures/slips/: notebooks with the slips students make that the known mistakes
name since the tester's notebooks: the scores multiplied by sqrt(d_k) instead of divided, the
values projected with the key or the query weights (a copy-paste slip), the heads merged with a
reshape alone (the heads axis not moved back), one bias left out, and cross-attention's values
taken unprojected from the memory. Each notebook plants one such line in each function of a
built-in assignment's worked bodies.

Run `python tests/make_slip_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

import make_cross_fixtures as cross
import make_three_input_fixtures as framework
from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "slips"

ROWS = {
    "self_attention": '''
def self_attention(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = softmax(scores)
    return weights @ V, weights
''',
    "multi_head_attention": '''
def multi_head_attention(X, Wq, Wk, Wv, H):
    Q = X @ Wq
    K = X @ Wk
    V = X @ Wv
    d = Q.shape[1] // H
    outputs, all_weights = [], []
    for h in range(H):
        part = slice(h * d, (h + 1) * d)
        weights = softmax(Q[:, part] @ K[:, part].T / np.sqrt(d))
        outputs.append(weights @ V[:, part])
        all_weights.append(weights)
    return np.concatenate(outputs, axis=1), all_weights
''',
}

COLUMNS = {
    "self_attention": '''
def self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    Q = omega_q @ X + beta_q
    K = omega_k @ X + beta_k
    V = omega_v @ X + beta_v
    weights = softmax_rows(Q.T @ K)
    return V @ weights.T
''',
    "scaled_dot_product_self_attention": '''
def scaled_dot_product_self_attention(X, omega_v, omega_q, omega_k, beta_v, beta_q, beta_k):
    Q = omega_q @ X + beta_q
    K = omega_k @ X + beta_k
    V = omega_v @ X + beta_v
    weights = softmax_rows(Q.T @ K / np.sqrt(Q.shape[0]))
    return V @ weights.T
''',
    "multihead_scaled_self_attention": '''
def multihead_scaled_self_attention(X, omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1,
                                    omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2, omega_c):
    heads = []
    for omega_v, omega_q, omega_k, beta_v, beta_q, beta_k in (
            (omega_v1, omega_q1, omega_k1, beta_v1, beta_q1, beta_k1),
            (omega_v2, omega_q2, omega_k2, beta_v2, beta_q2, beta_k2)):
        Q = omega_q @ X + beta_q
        K = omega_k @ X + beta_k
        V = omega_v @ X + beta_v
        weights = softmax_rows(Q.T @ K / np.sqrt(Q.shape[0]))
        heads.append(V @ weights.T)
    return omega_c @ np.vstack(heads)
''',
}

COLUMN_SOFTMAX = '''
def softmax_rows(scores):
    """Each query's row of scores (one row per query) normalised over the keys."""
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''

# Notebook -> (assignment, worked bodies, their softmax, function -> (line, replacement, title)).
SLIPS = {
    "rows_scale_and_key_weights.ipynb": ("rows", ROWS, ROW_SOFTMAX, {
        "self_attention": ("    scores = Q @ K.T / np.sqrt(K.shape[1])",
                           "    scores = Q @ K.T * np.sqrt(K.shape[1])",
                           "scores multiplied by sqrt(d_k) instead of divided"),
        "multi_head_attention": ("    V = X @ Wv", "    V = X @ Wk",
                                 "values projected with the key weights (W_k instead of W_v)"),
    }),
    "rows_query_weights_and_scale.ipynb": ("rows", ROWS, ROW_SOFTMAX, {
        "self_attention": ("    Q, K, V = X @ Wq, X @ Wk, X @ Wv", "    Q, K, V = X @ Wq, X @ Wk, X @ Wq",
                           "values projected with the query weights (W_q instead of W_v)"),
        "multi_head_attention": ("        weights = softmax(Q[:, part] @ K[:, part].T / np.sqrt(d))",
                                 "        weights = softmax(Q[:, part] @ K[:, part].T * np.sqrt(d))",
                                 "scores multiplied by sqrt(d_k) instead of divided"),
    }),
    "columns_one_bias_missing.ipynb": ("columns", COLUMNS, COLUMN_SOFTMAX, {
        "self_attention": ("    V = omega_v @ X + beta_v", "    V = omega_v @ X", "value bias missing"),
        "scaled_dot_product_self_attention": ("    Q = omega_q @ X + beta_q", "    Q = omega_q @ X",
                                              "query bias missing"),
        "multihead_scaled_self_attention": ("        V = omega_v @ X + beta_v", "        V = omega_v @ X",
                                            "value bias missing"),
    }),
    "framework_heads_merged_by_reshape.ipynb": ("framework", framework.WORKED, framework.SOFTMAX, {
        "multi_head_attention": ("    return heads.transpose(0, 2, 1, 3).reshape(b, n, h * d) @ W_o, weights",
                                 "    return heads.reshape(b, n, h * d) @ W_o, weights",
                                 "heads merged with a reshape that mixes tokens and features (the heads axis "
                                 "not moved back)"),
        "MultiheadAttention": ("        heads = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, n, width)",
                               "        heads = (weights @ v).reshape(batch, n, width)",
                               "heads merged with a reshape that mixes tokens and features (the heads axis "
                               "not moved back)"),
    }),
    "framework_value_weights_and_bias.ipynb": ("framework", framework.WORKED, framework.SOFTMAX, {
        "multi_head_attention": ("    q, k, v = split(Q @ W_q), split(K @ W_k), split(V @ W_v)",
                                 "    q, k, v = split(Q @ W_q), split(K @ W_k), split(V @ W_k)",
                                 "values projected with the key weights (W_k instead of W_v)"),
        "MultiheadAttention": ("        v = value @ self.v_proj_weight.T + b_v",
                               "        v = value @ self.v_proj_weight.T",
                               "value bias missing"),
    }),
    "cross_values_unprojected.ipynb": ("cross", cross.WORKED, cross.SOFTMAX, {
        "cross_attention": ("    return weights @ V, weights", "    return weights @ memory, weights",
                            "values taken unprojected from their sequence instead of V"),
        "cross_multihead": ("        weights = softmax(Q[:, part] @ K[:, part].T / np.sqrt(d))",
                            "        weights = softmax(Q[:, part] @ K[:, part].T * np.sqrt(d))",
                            "scores multiplied by sqrt(d_k) instead of divided"),
    }),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    for name, (_, worked, softmax, mistakes) in SLIPS.items():
        nbformat.write(notebook({"softmax": softmax, **planted(worked, mistakes)}), HERE / name)


if __name__ == "__main__":
    main()
