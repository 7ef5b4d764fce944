"""Writes tests/fixtures/conventions/: a worked notebook for the course conventions of
tests/fixtures/conventions/course.toml, one with a known mistake in each function, and one
whose functions change their list and dict arguments in place.

Run `python tests/make_convention_fixtures.py` after changing a body below; the notebooks
are committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent / "fixtures" / "conventions"

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "softmax": '''
def softmax(x, axis=0):
    """This lab's softmax normalises each column: its score matrices hold one query per column."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
''',
    "scaled_dot_product_attention": '''
def scaled_dot_product_attention(Q, K, V):
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = softmax(scores, axis=-1)
    return weights @ V, weights
''',
    "mha_forward": '''
def mha_forward(x, W_q, b_q, W_k, b_k, W_v, b_v, W_o, num_heads):
    Q, K, V = x @ W_q.T + b_q, x @ W_k.T + b_k, x @ W_v.T + b_v
    d = Q.shape[1] // num_heads
    heads = []
    for h in range(num_heads):
        part = slice(h * d, (h + 1) * d)
        weights = softmax(Q[:, part] @ K[:, part].T / np.sqrt(d), axis=-1)
        heads.append(weights @ V[:, part])
    return np.concatenate(heads, axis=1) @ W_o.T
''',
    "multihead_per_head": '''
def multihead_per_head(X, Wqs, Wks, Wvs, scale=True):
    outputs, all_weights = [], []
    for Wq, Wk, Wv in zip(Wqs, Wks, Wvs):
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        scores = Q @ K.T
        if scale:
            scores = scores / np.sqrt(K.shape[1])
        weights = softmax(scores, axis=-1)
        outputs.append(weights @ V)
        all_weights.append(weights)
    return np.concatenate(outputs, axis=1), np.stack(all_weights)
''',
    "packed_attention": '''
def packed_attention(x, params):
    qkv = x @ params["W_qkv"].T + params["b_qkv"]
    d = qkv.shape[1] // 3
    Q, K, V = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    weights = softmax(Q @ K.T / np.sqrt(d), axis=-1)
    return {"out": weights @ V, "attn": weights}
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "softmax": ("def softmax(x, axis=0):", "def softmax(x, axis=-1):", "softmax over the wrong axis"),
    "scaled_dot_product_attention": ("    scores = Q @ K.T / np.sqrt(K.shape[1])", "    scores = Q @ K.T",
                                     "scores not scaled"),
    "mha_forward": ("    return np.concatenate(heads, axis=1) @ W_o.T", "    return np.concatenate(heads, axis=1)",
                    "output projection missing"),
    "multihead_per_head": ("    return np.concatenate(outputs, axis=1), np.stack(all_weights)",
                           "    return np.concatenate(outputs[::-1], axis=1), np.stack(all_weights)",
                           "heads concatenated in the wrong order"),
    "packed_attention": ('    return {"out": weights @ V, "attn": weights}',
                         '    return {"out": weights @ x, "attn": weights}', "values taken from X instead of V"),
}


# Right answers, but the caller's per-head list and packed dict are changed in place.
MODIFIES_INPUTS = {
    "multihead_per_head": WORKED["multihead_per_head"].replace(
        "    return np.concatenate(outputs, axis=1), np.stack(all_weights)",
        "    Wvs[0][:] = 0.0\n    return np.concatenate(outputs, axis=1), np.stack(all_weights)"),
    "packed_attention": WORKED["packed_attention"].replace(
        '    return {"out": weights @ V, "attn": weights}',
        '    params.pop("b_qkv")\n    return {"out": weights @ V, "attn": weights}'),
}


def notebook(bodies: dict) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np")]
    nb.cells += [nbformat.v4.new_code_cell(body.strip()) for body in bodies.values()]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


ROW_SOFTMAX = '''
def softmax(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
'''


def planted(worked: dict, mistakes: dict) -> dict:
    """The worked bodies, each with its one line replaced by its mistake (`mistakes`:
    function -> (line, replacement, the mistake's title)): every function has one."""
    bodies = {}
    for name, body in worked.items():
        line, replacement, _ = mistakes[name]
        assert line in body, name
        bodies[name] = body.replace(line, replacement)
    return bodies


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook(WORKED), HERE / "worked.ipynb")
    nbformat.write(notebook(planted(WORKED, MISTAKES)), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": WORKED["softmax"], **MODIFIES_INPUTS}), HERE / "modifies_inputs.ipynb")


if __name__ == "__main__":
    main()
