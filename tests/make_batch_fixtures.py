"""Writes tests/fixtures/batch/: a worked notebook for the batched conventions of
reference/assignments/batched.toml (a leading batch axis, heads on an array axis, key padding,
the framework layout), and one with a known batch mistake in each function.

Run `python tests/make_batch_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "batch"

SOFTMAX = '''
def softmax(scores, axis=-1):
    e = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
'''

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "multi_head_attention": '''
def multi_head_attention(x, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, num_heads, mask):
    """x is B x N x D; each W is (out, in) as a linear layer stores it; mask is B x 1 x N x N."""
    B, N, D = x.shape

    def split(t):
        return t.reshape(B, N, num_heads, t.shape[-1] // num_heads).transpose(0, 2, 1, 3)

    def merge(t):
        return t.transpose(0, 2, 1, 3).reshape(B, N, -1)

    Q, K, V = split(x @ W_q.T + b_q), split(x @ W_k.T + b_k), split(x @ W_v.T + b_v)
    scores = Q @ K.transpose(0, 1, 3, 2) / np.sqrt(Q.shape[-1])
    scores = np.where(mask, scores, -1e9)
    weights = softmax(scores, axis=-1)
    heads = merge(weights @ V)
    return heads @ W_o.T + b_o, weights
''',
    "attention_heads": '''
def attention_heads(Q, K, V, key_padding_mask):
    """Q, K, V are B x H x N x d (heads already split); key_padding_mask is B x N, True = padding."""
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    scores = np.where(key_padding_mask[:, None, None, :], -np.inf, scores)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights
''',
    "causal_self_attention": '''
def causal_self_attention(x, W_q, W_k, W_v):
    """x is B x N x D; each token attends the tokens up to itself."""
    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    N = x.shape[1]
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])
    scores = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)
    weights = softmax(scores, axis=-1)
    return weights @ V, weights
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "multi_head_attention": ("    weights = softmax(scores, axis=-1)", "    weights = softmax(scores, axis=1)",
                             "softmax over the heads axis"),
    "attention_heads": ("    weights = softmax(scores, axis=-1)", "    weights = softmax(scores, axis=0)",
                        "softmax over the batch axis"),
    "causal_self_attention": ("    scores = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)",
                              "    scores = np.where(np.triu(np.ones((N, N), dtype=bool)), scores, -np.inf)",
                              "causal mask keeps the upper triangle"),
}

SPLIT_AND_MERGE = """        return t.reshape(B, N, num_heads, t.shape[-1] // num_heads).transpose(0, 2, 1, 3)

    def merge(t):
        return t.transpose(0, 2, 1, 3).reshape(B, N, -1)"""

# More of the batch mistakes, one per function again: a reshape that mixes tokens and features,
# a key-padding mask read the other way round, a causal mask multiplied in.
SECOND_MISTAKES = {
    "multi_head_attention": (SPLIT_AND_MERGE, SPLIT_AND_MERGE.replace(
                                 "t.reshape(B, N, num_heads, t.shape[-1] // num_heads).transpose(0, 2, 1, 3)",
                                 "t.reshape(B, num_heads, N, t.shape[-1] // num_heads)").replace(
                                 "t.transpose(0, 2, 1, 3).reshape(B, N, -1)", "t.reshape(B, N, -1)"),
                             "heads split with a reshape that mixes tokens and features"),
    "attention_heads": ("    scores = np.where(key_padding_mask[:, None, None, :], -np.inf, scores)",
                        "    scores = np.where(~key_padding_mask[:, None, None, :], -np.inf, scores)",
                        "mask inverted"),
    "causal_self_attention": ("    scores = np.where(np.tril(np.ones((N, N), dtype=bool)), scores, -np.inf)",
                              "    scores = np.tril(scores)",
                              "causal mask multiplied into the scores (zeros instead of -inf)"),
}
# The framework layout's own mistakes, in the function that has it: W applied as x @ W, and
# the output projection's bias left out (the other functions worked).
LAYOUT_MISTAKES = {
    "multi_head_attention": [("    Q, K, V = split(x @ W_q.T + b_q), split(x @ W_k.T + b_k), split(x @ W_v.T + b_v)",
                              "    Q, K, V = split(x @ W_q + b_q), split(x @ W_k + b_k), split(x @ W_v + b_v)"),
                             ("    return heads @ W_o.T + b_o, weights", "    return heads @ W_o, weights")],
}
LAYOUT_TITLES = ("weights applied in the wrong layout (W instead of W.T)", "output projection bias missing")


def with_layout_mistakes() -> dict:
    bodies = dict(WORKED)
    for name, changes in LAYOUT_MISTAKES.items():
        for line, replacement in changes:
            assert line in bodies[name], name
            bodies[name] = bodies[name].replace(line, replacement)
    return bodies


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, MISTAKES)}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, SECOND_MISTAKES)}), HERE / "second_mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **with_layout_mistakes()}), HERE / "layout_mistakes.ipynb")


if __name__ == "__main__":
    main()
