"""Writes tests/fixtures/three_inputs/: a worked notebook for the conventions of
reference/assignments/framework.toml, where query, key and value are three input sequences,
each projected (the framework form), and one with a known mistake in each function.

The functions are written from the public description of the framework form: the generic
`multi_head_attention(Q, K, V, W_q, W_k, W_v, W_o, num_heads)` on (B, L, d_model) and
(B, S, d_model) inputs, and a module's `forward(query, key, value, key_padding_mask=None,
attn_mask=None)` with its weights stored (out, in) as a framework's linear layers store them
(separate query, key and value projections, one packed bias), both masks True where a key is
ignored, and the weights of every head returned.

Run `python tests/make_three_input_fixtures.py` after changing a body below; the notebooks
are committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "three_inputs"

SOFTMAX = ROW_SOFTMAX

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "multi_head_attention": '''
def multi_head_attention(Q, K, V, W_q, W_k, W_v, W_o, num_heads):
    """Q is (B, L, d_model), K and V are (B, S, d_model); returns the output (B, L, d_model)
    and each head's weights (B, H, L, S)."""
    def split(x):
        b, n, width = x.shape
        return x.reshape(b, n, num_heads, width // num_heads).transpose(0, 2, 1, 3)

    q, k, v = split(Q @ W_q), split(K @ W_k), split(V @ W_v)
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
    heads = weights @ v
    b, h, n, d = heads.shape
    return heads.transpose(0, 2, 1, 3).reshape(b, n, h * d) @ W_o, weights
''',
    "MultiheadAttention": '''
class MultiheadAttention:
    """Batch first: query (B, L, E), key and value (B, S, kdim); each weight (out, in)."""

    def __init__(self, embed_dim, num_heads):
        self.num_heads = num_heads
        rng = np.random.default_rng()
        self.q_proj_weight, self.k_proj_weight, self.v_proj_weight, self.out_proj_weight = (
            rng.normal(size=(embed_dim, embed_dim)) for _ in range(4))
        self.in_proj_bias = np.zeros(3 * embed_dim)
        self.out_proj_bias = np.zeros(embed_dim)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        b_q, b_k, b_v = np.split(self.in_proj_bias, 3)
        q = query @ self.q_proj_weight.T + b_q
        k = key @ self.k_proj_weight.T + b_k
        v = value @ self.v_proj_weight.T + b_v
        batch, n, width = q.shape
        d = width // self.num_heads
        q, k, v = (t.reshape(batch, -1, self.num_heads, d).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        ignored = np.zeros(scores.shape, dtype=bool)
        if attn_mask is not None:
            ignored = ignored | attn_mask
        if key_padding_mask is not None:
            ignored = ignored | key_padding_mask[:, None, None, :]
        weights = softmax(np.where(ignored, -np.inf, scores))
        heads = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, n, width)
        return heads @ self.out_proj_weight.T + self.out_proj_bias, weights
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "multi_head_attention": ("    q, k, v = split(Q @ W_q), split(K @ W_k), split(V @ W_v)",
                             "    q, k, v = split(Q @ W_q), split(V @ W_k), split(K @ W_v)",
                             "keys and values projected from each other's inputs"),
    "MultiheadAttention": ("        v = value @ self.v_proj_weight.T + b_v",
                           "        v = key @ self.v_proj_weight.T + b_v",
                           "values projected from the key input (the value input is ignored)"),
}

# A second notebook: the scaling forgotten, the mistake every convention can make.
UNSCALED = {
    "multi_head_attention": ("    weights = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))",
                             "    weights = softmax(q @ k.transpose(0, 1, 3, 2))",
                             "scores not scaled"),
    "MultiheadAttention": ("        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)",
                           "        scores = q @ k.transpose(0, 1, 3, 2)",
                           "scores not scaled"),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, MISTAKES)}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, UNSCALED)}), HERE / "unscaled.ipynb")


if __name__ == "__main__":
    main()
