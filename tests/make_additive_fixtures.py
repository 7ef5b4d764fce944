"""Writes tests/fixtures/additive/: a worked notebook for the conventions of
reference/assignments/additive.toml, additive (Bahdanau) attention, and notebooks with a known
mistake in each function.

The functions are written from the public description of additive attention (Bahdanau, Cho
and Bengio, "Neural Machine Translation by Jointly Learning to Align and Translate", 2015:
e_ij = v_a^T tanh(W_a s_i + U_a h_j), a softmax over j, the context sum_j a_ij h_j; and the
"concat" score of Luong, Pham and Manning, 2015, v_a^T tanh(W_a [h_t; h_s])): queries, keys
and values given; a batch of them; and one decoder state against the encoder's states, which
are the keys and the values at once.

Run `python tests/make_additive_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "additive"

SOFTMAX = ROW_SOFTMAX

WORKED = {
    "additive_attention": '''
def additive_attention(queries, keys, values, W_q, W_k, w_v):
    """queries (Lq, d_q), keys (Lk, d_k), values (Lk, d_v); W_q (d_q, h), W_k (d_k, h), w_v (h,).
    Returns the output (Lq, d_v) and the weights (Lq, Lk)."""
    features = (queries @ W_q)[:, None, :] + (keys @ W_k)[None, :, :]
    scores = np.tanh(features) @ w_v
    weights = softmax(scores)
    return weights @ values, weights
''',
    "batched_additive_attention": '''
def batched_additive_attention(queries, keys, values, W1, W2, v):
    """queries (B, Lq, d_q), keys and values (B, Lk, d_k) and (B, Lk, d_v), shared weights."""
    hidden = np.tanh((queries @ W1)[:, :, None, :] + (keys @ W2)[:, None, :, :])
    scores = hidden @ v
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ values, weights
''',
    "bahdanau_context": '''
def bahdanau_context(state, annotations, W_a, v_a):
    """One decoder state (d_s,) against the encoder's annotations (T, d_h), which are the keys
    and the values; W_a ((d_s + d_h), n) weighs the concatenation [s; h_j]. Returns the
    context (d_h,) and the alignment weights (T,)."""
    d_s = state.shape[0]
    energies = np.tanh(state @ W_a[:d_s] + annotations @ W_a[d_s:]) @ v_a
    alignment = softmax(energies)
    return alignment @ annotations, alignment
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "additive_attention": ("    scores = np.tanh(features) @ w_v",
                           "    scores = features @ w_v",
                           "tanh missing from the additive score"),
    "batched_additive_attention": ("    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))\n"
                                   "    weights = weights / weights.sum(axis=-1, keepdims=True)",
                                   "    weights = np.exp(scores - scores.max(axis=1, keepdims=True))\n"
                                   "    weights = weights / weights.sum(axis=1, keepdims=True)",
                                   "softmax over the wrong axis (over the queries, not the keys)"),
    "bahdanau_context": ("    energies = np.tanh(state @ W_a[:d_s] + annotations @ W_a[d_s:]) @ v_a",
                         "    energies = np.tanh((state + annotations) @ W_a[:d_s]) @ v_a",
                         "concatenation read as a sum (W1 (q + k))"),
}

# A second notebook: each function's other mistake.
OTHERS = {
    "additive_attention": ("    weights = softmax(scores)",
                           "    weights = softmax(scores.T).T",
                           "softmax over the wrong axis (over the queries, not the keys)"),
    # Scores divided by a constant: no known mistake, still an attempt that loses points. Its
    # softmax written with the helper, as a student's second draft might.
    "batched_additive_attention": ("    scores = hidden @ v\n"
                                   "    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))\n"
                                   "    weights = weights / weights.sum(axis=-1, keepdims=True)",
                                   "    weights = softmax((hidden / np.tanh(1.0)) @ v)",
                                   None),
    "bahdanau_context": ("    energies = np.tanh(state @ W_a[:d_s] + annotations @ W_a[d_s:]) @ v_a",
                         "    energies = (state @ W_a[:d_s] + annotations @ W_a[d_s:]) @ v_a",
                         "tanh missing from the additive score"),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, MISTAKES)}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, OTHERS)}), HERE / "other_mistakes.ipynb")


if __name__ == "__main__":
    main()
