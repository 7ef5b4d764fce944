"""Writes tests/fixtures/mean_weights/: a worked notebook whose multi-head attention returns
the attention weights averaged over the heads, and one with a known mistake planted in it.

The function is written from PyTorch's documentation of `torch.nn.MultiheadAttention` and
`torch.nn.functional.multi_head_attention_forward` (batch first): query (B, L, E), key and
value (B, S, E), the query, key and value projections packed in one `in_proj_weight` (3E, E)
with its `in_proj_bias` (3E), the output projection `out_proj_weight` (E, E) with its bias, each
applied as a framework's linear layer applies it (x @ W.T + b), and the weights returned
averaged over the heads, (B, L, S), as `average_attn_weights=True` (the default) returns them,
or per head, (B, H, L, S), with `average_attn_weights=False`.

Run `python tests/make_mean_weights_fixtures.py` after changing a body below; the notebooks
are committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "mean_weights"

WORKED = {
    "multi_head_attention_forward": '''
def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 out_proj_weight, out_proj_bias, need_weights=True,
                                 average_attn_weights=True):
    """query (B, L, E), key and value (B, S, E); returns the output (B, L, E) and the weights,
    averaged over the heads (B, L, S) unless average_attn_weights is False (B, H, L, S)."""
    w_q, w_k, w_v = np.split(in_proj_weight, 3)
    b_q, b_k, b_v = np.split(in_proj_bias, 3)
    batch, target, embed = query.shape
    head_dim = embed // num_heads

    def heads(x):
        return x.reshape(x.shape[0], x.shape[1], num_heads, head_dim).transpose(0, 2, 1, 3)

    q = heads(query @ w_q.T + b_q)
    k = heads(key @ w_k.T + b_k)
    v = heads(value @ w_v.T + b_v)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    joined = (weights @ v).transpose(0, 2, 1, 3).reshape(batch, target, embed)
    output = joined @ out_proj_weight.T + out_proj_bias
    if not need_weights:
        return output, None
    return output, weights.mean(axis=1) if average_attn_weights else weights
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "multi_head_attention_forward": ("    e = np.exp(scores - scores.max(axis=-1, keepdims=True))\n"
                                     "    weights = e / e.sum(axis=-1, keepdims=True)",
                                     "    e = np.exp(scores - scores.max(axis=-2, keepdims=True))\n"
                                     "    weights = e / e.sum(axis=-2, keepdims=True)",
                                     "softmax over the wrong axis"),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook(WORKED), HERE / "worked.ipynb")
    nbformat.write(notebook(planted(WORKED, MISTAKES)), HERE / "softmax_axis.ipynb")


if __name__ == "__main__":
    main()
