"""Writes tests/fixtures/masks/: a worked notebook for the masked and causal conventions of
reference/assignments/masks.toml, and one with a known mistake in each function.

Run `python tests/make_mask_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "masks"

SOFTMAX = ROW_SOFTMAX

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "masked_attention": '''
def masked_attention(Q, K, V, mask):
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = softmax(scores + mask)
    return weights @ V, weights
''',
    "boolean_masked_attention": '''
def boolean_masked_attention(X, W_q, W_k, W_v, mask):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = softmax(np.where(mask, scores, -1e9))
    return weights @ V, weights
''',
    "causal_multihead": '''
def causal_multihead(x, W_q, W_k, W_v, W_o, b_o, n_heads):
    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    n, d = x.shape[0], Q.shape[1] // n_heads
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    heads = []
    for h in range(n_heads):
        part = slice(h * d, (h + 1) * d)
        scores = Q[:, part] @ K[:, part].T / np.sqrt(d)
        heads.append(softmax(np.where(future, -np.inf, scores)) @ V[:, part])
    return np.concatenate(heads, axis=1) @ W_o + b_o
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "masked_attention": ("    weights = softmax(scores + mask)", "    weights = softmax(scores) * (mask == 0)",
                         "mask applied after the softmax"),
    "boolean_masked_attention": ("    weights = softmax(np.where(mask, scores, -1e9))",
                                 "    weights = softmax(np.where(mask, -1e9, scores))", "mask inverted"),
    "causal_multihead": ("    future = np.triu(np.ones((n, n), dtype=bool), 1)",
                         "    future = np.tril(np.ones((n, n), dtype=bool), -1)",
                         "causal mask keeps the upper triangle"),
}

# A second mistake for each function, named too.
SECOND_MISTAKES = {
    "masked_attention": ("    scores = Q @ K.T / np.sqrt(K.shape[1])", "    scores = Q @ K.T",
                         "scores not scaled"),
    "boolean_masked_attention": ("    weights = softmax(np.where(mask, scores, -1e9))",
                                 "    weights = softmax(scores * mask)",
                                 "mask multiplied into the scores (zeros instead of -inf)"),
    "causal_multihead": ("    return np.concatenate(heads, axis=1) @ W_o + b_o",
                         "    return np.concatenate(heads, axis=1) @ W_o", "output projection bias missing"),
}


def mistaken(mistakes: dict) -> dict:
    return {"softmax": SOFTMAX, **planted(WORKED, mistakes)}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook(mistaken(MISTAKES)), HERE / "mistakes.ipynb")
    nbformat.write(notebook(mistaken(SECOND_MISTAKES)), HERE / "second_mistakes.ipynb")


if __name__ == "__main__":
    main()
