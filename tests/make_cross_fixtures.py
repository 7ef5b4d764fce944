"""Writes tests/fixtures/cross/: a worked notebook for the cross-attention conventions of
reference/assignments/cross.toml, and one with a known cross-attention mistake in each function.

Run `python tests/make_cross_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "cross"

SOFTMAX = ROW_SOFTMAX

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "cross_attention": '''
def cross_attention(X, memory, W_q, W_k, W_v):
    Q, K, V = X @ W_q, memory @ W_k, memory @ W_v
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]))
    return weights @ V, weights
''',
    "cross_multihead": '''
def cross_multihead(x, encoder_out, W_q, W_k, W_v, W_o, n_heads):
    Q, K, V = x @ W_q, encoder_out @ W_k, encoder_out @ W_v
    d = Q.shape[1] // n_heads
    heads = []
    for h in range(n_heads):
        part = slice(h * d, (h + 1) * d)
        weights = softmax(Q[:, part] @ K[:, part].T / np.sqrt(d))
        heads.append(weights @ V[:, part])
    return np.concatenate(heads, axis=1) @ W_o
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "cross_attention": ("    Q, K, V = X @ W_q, memory @ W_k, memory @ W_v", "    Q, K, V = X @ W_q, X @ W_k, X @ W_v",
                        "keys and values taken from the queries' sequence"),
    "cross_multihead": ("    Q, K, V = x @ W_q, encoder_out @ W_k, encoder_out @ W_v",
                        "    Q, K, V = encoder_out @ W_q, x @ W_k, x @ W_v",
                        "queries and keys/values taken from the wrong sequences"),
}


def mistaken(mistakes: dict) -> dict:
    return {"softmax": SOFTMAX, **planted(WORKED, mistakes)}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook(mistaken(MISTAKES)), HERE / "mistakes.ipynb")


if __name__ == "__main__":
    main()
