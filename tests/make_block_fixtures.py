"""Writes tests/fixtures/blocks/: a worked notebook for the units of
reference/assignments/blocks.toml (a layer norm, the position-wise feed-forward network, a
post-LN encoder block and a causal pre-LN decoder block with its weights in nested dicts), and
notebooks with a known mistake in each.

Written from the public descriptions: the encoder block of Vaswani et al., "Attention Is All You
Need" (2017), LayerNorm(x + Sublayer(x)) around multi-head attention and FFN(x) = max(0, x W1 +
b1) W2 + b2; layer norm as Ba, Kiros and Hinton (2016) define it; and GPT-2's pre-LN decoder
block as picoGPT's README and "GPT in 60 Lines of NumPy" describe it: `transformer_block(x, mlp,
attn, ln_1, ln_2, n_head)`, x + mha(layer_norm(x, **ln_1)), then x + ffn(layer_norm(x, **ln_2)),
GELU in its tanh approximation, parameters as dicts of dicts ({"c_attn": {"w", "b"}, ...}).

Run `python tests/make_block_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "blocks"

HELPERS = ROW_SOFTMAX + '''

def mha(x, W_q, W_k, W_v, W_o, num_heads, causal=False):
    n, d_model = x.shape
    d = d_model // num_heads
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    heads = []
    for h in range(num_heads):
        cols = slice(h * d, (h + 1) * d)
        scores = q[:, cols] @ k[:, cols].T / np.sqrt(d)
        if causal:
            scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
        heads.append(softmax(scores) @ v[:, cols])
    return np.concatenate(heads, axis=1) @ W_o


# The blocks' own layer norm and network, apart from the graded ones, so that each block's
# planted mistake is its own (a block calling a graded helper inherits the helper's mistakes).
def _norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * gamma + beta


def _ffn(x, W1, b1, W2, b2):
    return np.maximum(0, x @ W1 + b1) @ W2 + b2
'''

WORKED = {
    "layer_norm": '''
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta
''',
    "feed_forward": '''
def feed_forward(x, W1, b1, W2, b2):
    return np.maximum(0, x @ W1 + b1) @ W2 + b2
''',
    "encoder_block": '''
def encoder_block(x, W_q, W_k, W_v, W_o, W1, b1, W2, b2, gamma1, beta1, gamma2, beta2, num_heads):
    h = _norm(x + mha(x, W_q, W_k, W_v, W_o, num_heads), gamma1, beta1)
    return _norm(h + _ffn(h, W1, b1, W2, b2), gamma2, beta2)
''',
    "transformer_block": '''
def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def linear(x, w, b):
    return x @ w + b


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    n, d_model = x.shape
    d = d_model // n_head
    h = _norm(x, ln_1["g"], ln_1["b"])
    q, k, v = np.split(linear(h, **attn["c_attn"]), 3, axis=-1)
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    heads = []
    for i in range(n_head):
        cols = slice(i * d, (i + 1) * d)
        scores = q[:, cols] @ k[:, cols].T / np.sqrt(d)
        heads.append(softmax(np.where(future, -1e10, scores)) @ v[:, cols])
    x = x + linear(np.concatenate(heads, axis=1), **attn["c_proj"])
    h = _norm(x, ln_2["g"], ln_2["b"])
    return x + linear(gelu(linear(h, **mlp["c_fc"])), **mlp["c_proj"])
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "layer_norm": ("    var = x.var(axis=-1, keepdims=True)", "    var = x.var(axis=-1, keepdims=True, ddof=1)",
                   "unbiased variance in the layer norm (divided by D - 1)"),
    "feed_forward": ("    return np.maximum(0, x @ W1 + b1) @ W2 + b2", "    return (x @ W1 + b1) @ W2 + b2",
                     "activation missing in the feed-forward network"),
    "encoder_block": ("    return _norm(h + _ffn(h, W1, b1, W2, b2), gamma2, beta2)",
                      "    return _norm(_ffn(h, W1, b1, W2, b2), gamma2, beta2)",
                      "residual connection around the feed-forward network missing"),
    "transformer_block": ("    x = x + linear(np.concatenate(heads, axis=1), **attn[\"c_proj\"])",
                          "    x = linear(np.concatenate(heads, axis=1), **attn[\"c_proj\"])",
                          "residual connection around attention missing"),
}

# A second notebook: each unit's other mistake (the network's none: it is worked there).
OTHERS = {
    "layer_norm": ("    return (x - mean) / np.sqrt(var + eps) * gamma + beta",
                   "    return (x - mean) / (np.sqrt(var) + eps) * gamma + beta",
                   "eps added outside the square root"),
    "feed_forward": ("    return np.maximum(0, x @ W1 + b1) @ W2 + b2",
                     "    return np.maximum(0, x @ W1 + b1) @ W2 + b2",
                     None),
    "encoder_block": ("    h = _norm(x + mha(x, W_q, W_k, W_v, W_o, num_heads), gamma1, beta1)\n"
                      "    return _norm(h + _ffn(h, W1, b1, W2, b2), gamma2, beta2)",
                      "    h = x + mha(_norm(x, gamma1, beta1), W_q, W_k, W_v, W_o, num_heads)\n"
                      "    return h + _ffn(_norm(h, gamma2, beta2), W1, b1, W2, b2)",
                      "layer norms in the other order (pre-LN and post-LN swapped)"),
    "transformer_block": ("        scores = q[:, cols] @ k[:, cols].T / np.sqrt(d)",
                          "        scores = q[:, cols] @ k[:, cols].T",
                          "scores not scaled"),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"helpers": HELPERS, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook({"helpers": HELPERS, **planted(WORKED, MISTAKES)}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"helpers": HELPERS, **planted(WORKED, OTHERS)}), HERE / "other_mistakes.ipynb")


if __name__ == "__main__":
    main()
