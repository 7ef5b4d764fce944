"""Writes tests/fixtures/backward/: a worked notebook for the conventions of
reference/assignments/backward.toml, the backward pass of scaled dot-product attention, and
notebooks with a known mistake in each function.

The functions are written from the chain rule through O = softmax(Q K^T / sqrt(d_k)) V: dV =
P^T dO, dP = dO V^T, the softmax's Jacobian-vector product dS = P * (dP - rowsum(dP * P)),
divided by sqrt(d_k), then dQ = dS K and dK = dS^T Q; a masked score is replaced by -inf, so it
gets no gradient. One function without a mask, one under a boolean mask, one on a batch, and
one taking the forward's cache (a dict holding Q, K, V and the weights P it computed), and a
class whose backward reads what its forward kept on the object.

Run `python tests/make_backward_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "backward"

SOFTMAX = ROW_SOFTMAX

WORKED = {
    "attention_backward": '''
def attention_backward(Q, K, V, dO):
    """Q (Lq, d_k), K (Lk, d_k), V (Lk, d_v), dO (Lq, d_v): the gradient of the loss with respect
    to the output of softmax(Q K^T / sqrt(d_k)) V. Returns dQ, dK, dV."""
    d_k = K.shape[1]
    P = softmax(Q @ K.T / np.sqrt(d_k))
    dV = P.T @ dO
    dP = dO @ V.T
    dS = P * (dP - np.sum(dP * P, axis=-1, keepdims=True))
    dS = dS / np.sqrt(d_k)
    return dS @ K, dS.T @ Q, dV
''',
    "masked_attention_backward": '''
def masked_attention_backward(Q, K, V, mask, d_out):
    """As attention_backward, under a boolean mask (Lq, Lk), True where query i may attend key j."""
    scale = 1.0 / np.sqrt(K.shape[-1])
    scores = np.where(mask, (Q @ K.T) * scale, -np.inf)
    P = softmax(scores)
    grad_V = P.T @ d_out
    grad_P = d_out @ V.T
    row = (grad_P * P).sum(axis=1, keepdims=True)
    grad_S = P * (grad_P - row) * scale
    grad_Q = grad_S @ K
    grad_K = grad_S.T @ Q
    return grad_Q, grad_K, grad_V
''',
    "batched_attention_backward": '''
def batched_attention_backward(q, k, v, grad_output):
    """q (B, Lq, d_k), k (B, Lk, d_k), v (B, Lk, d_v), grad_output (B, Lq, d_v)."""
    d_k = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ grad_output
    dp = grad_output @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / np.sqrt(d_k)
    dq = ds @ k
    dk = np.swapaxes(ds, -1, -2) @ q
    return dq, dk, dv
''',
    "attention_backward_cached": '''
def attention_backward_cached(d_out, cache):
    """The backward pass from the forward's cache: cache["Q"], cache["K"], cache["V"] and the
    attention weights cache["P"] the forward computed."""
    Q, K, V, P = cache["Q"], cache["K"], cache["V"], cache["P"]
    dV = P.T @ d_out
    dP = d_out @ V.T
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) / np.sqrt(Q.shape[1])
    return dS @ K, dS.T @ Q, dV
''',
    # The modular layer API (cs231n's layers.py): a forward returning (out, cache), the cache a
    # tuple, and a backward taking (dout, cache).
    "attention_forward": '''
def attention_forward(q, k, v):
    """q, k, v (L, d): returns out and cache = (q, k, v, p), p the attention probabilities."""
    p = softmax(q @ k.T / np.sqrt(q.shape[1]))
    return p @ v, (q, k, v, p)
''',
    "attention_backward_tuple": '''
def attention_backward_tuple(dout, cache):
    q, k, v, p = cache
    dv = p.T @ dout
    dp = dout @ v.T
    dscores = p * (dp - np.sum(dp * p, axis=1, keepdims=True)) / np.sqrt(q.shape[1])
    return dscores @ k, dscores.T @ q, dv
''',
    # A class, as CMU 11-785's mytorch handout describes its ScaledDotProductAttention: forward
    # (Q, K, V, mask) on any leading axes, True in the mask where a key is masked out, keeps what
    # its backward(d_output) needs on the object; backward returns dQ, dK and dV.
    "ScaledDotProductAttention": '''
class ScaledDotProductAttention:
    def __init__(self):
        self.eps = 1e10

    def forward(self, Q, K, V, mask=None):
        """Q (..., L, E), K (..., S, E), V (..., S, Ev); mask (..., L, S), True where masked out."""
        self.Q, self.K, self.V = Q, K, V
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])
        if mask is not None:
            scores = np.where(mask, -self.eps, scores)
        self.A = softmax(scores)
        return self.A @ V

    def backward(self, d_output):
        d_V = np.swapaxes(self.A, -1, -2) @ d_output
        d_A = d_output @ np.swapaxes(self.V, -1, -2)
        d_S = self.A * (d_A - np.sum(d_A * self.A, axis=-1, keepdims=True))
        d_S = d_S / np.sqrt(self.K.shape[-1])
        d_Q = d_S @ self.K
        d_K = np.swapaxes(d_S, -1, -2) @ self.Q
        return d_Q, d_K, d_V
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "attention_backward": ("    dS = P * (dP - np.sum(dP * P, axis=-1, keepdims=True))",
                           "    dS = dP * P * (1 - P)",
                           "softmax's backward taken element-wise, s (1 - s)"),
    "masked_attention_backward": ("    grad_S = P * (grad_P - row) * scale",
                                  "    P_all = softmax((Q @ K.T) * scale)\n"
                                  "    row = (grad_P * P_all).sum(axis=1, keepdims=True)\n"
                                  "    grad_S = P_all * (grad_P - row) * scale",
                                  "masked positions given gradient (the softmax's backward without the mask)"),
    "batched_attention_backward": ("    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) / np.sqrt(d_k)",
                                   "    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))",
                                   "1/sqrt(d_k) missing in the backward"),
    "attention_backward_cached": ("    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) / np.sqrt(Q.shape[1])",
                                  "    dS = P * (dP - (dP * P).sum(axis=0, keepdims=True)) / np.sqrt(Q.shape[1])",
                                  "the softmax backward's row sum taken over the wrong axis"),
    "attention_forward": ("    p = softmax(q @ k.T / np.sqrt(q.shape[1]))", "    p = softmax(q @ k.T)",
                          "scores not scaled"),
    "attention_backward_tuple": ("    return dscores @ k, dscores.T @ q, dv",
                                 "    return dscores.T @ k, dscores @ q, dv",
                                 "the transpose on the wrong gradient (dQ = dS^T K, dK = dS Q)"),
    "ScaledDotProductAttention": ("        d_S = d_S / np.sqrt(self.K.shape[-1])", "",
                                  "1/sqrt(d_k) missing in the backward"),
}

# A second notebook: each function's other mistake.
OTHERS = {
    "attention_backward": ("    return dS @ K, dS.T @ Q, dV",
                           "    return dS.T @ Q, dS @ K, dV",
                           "dQ and dK swapped"),
    "masked_attention_backward": ("    row = (grad_P * P).sum(axis=1, keepdims=True)",
                                  "    row = (grad_P * P).sum(axis=0, keepdims=True)",
                                  "the softmax backward's row sum taken over the wrong axis"),
    "batched_attention_backward": ("    dk = np.swapaxes(ds, -1, -2) @ q",
                                   "    dk = ds @ q",
                                   "dK computed as dS Q instead of dS^T Q"),
    "attention_backward_cached": ("    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) / np.sqrt(Q.shape[1])",
                                  "    dS = dP * P * (1 - P) / np.sqrt(Q.shape[1])",
                                  "softmax's backward taken element-wise, s (1 - s)"),
    "attention_forward": ("    p = softmax(q @ k.T / np.sqrt(q.shape[1]))",
                          "    p = softmax((q @ k.T / np.sqrt(q.shape[1])).T).T", "softmax over the wrong axis"),
    "attention_backward_tuple": ("np.sum(dp * p, axis=1, keepdims=True)", "np.sum(dp * p, axis=0, keepdims=True)",
                                 "the softmax backward's row sum taken over the wrong axis"),
    "ScaledDotProductAttention": ("        d_K = np.swapaxes(d_S, -1, -2) @ self.Q", "        d_K = d_S @ self.Q",
                                  "dK computed as dS Q instead of dS^T Q"),
}


# A course's layer, as CMU 11-785's mytorch handout describes its Linear: W is out x in, the
# forward A W^T + b on any leading axes, and backward(dLdZ) leaves dLdW and dLdb on the layer
# (summed over every leading axis) and returns dLdA.
LINEAR = '''
class Linear:
    def __init__(self, in_features, out_features):
        self.W = np.zeros((out_features, in_features))
        self.b = np.zeros(out_features)

    def init_weights(self, W, b):
        self.W, self.b = W, b

    def forward(self, A):
        self.A = A
        return A @ self.W.T + self.b

    def backward(self, dLdZ):
        flat_dZ = dLdZ.reshape(-1, dLdZ.shape[-1])
        flat_A = self.A.reshape(-1, self.A.shape[-1])
        self.dLdW = flat_dZ.T @ flat_A
        self.dLdb = flat_dZ.sum(axis=0)
        return dLdZ @ self.W
'''

# The handout's MultiHeadAttention around that class's ScaledDotProductAttention: its Linear
# layers project query, key and value (N x L x E, N x S x E), the heads split on an axis; masks
# True where a key is masked out, a key-padding mask (N x S) and an attention mask (L x S).
# backward(d_output) returns the gradients of query, key and value and leaves the weights' on
# the layers. Written once: a mistake in the attention class it uses is its own too.
MULTI_HEAD = '''
class MultiHeadAttention:
    def __init__(self, embed_dim, num_heads):
        self.num_heads = num_heads
        self.attention = ScaledDotProductAttention()
        self.q_proj = Linear(embed_dim, embed_dim)
        self.k_proj = Linear(embed_dim, embed_dim)
        self.v_proj = Linear(embed_dim, embed_dim)
        self.out_proj = Linear(embed_dim, embed_dim)

    def init_weights(self, Wq, bq, Wk, bk, Wv, bv, Wo, bo):
        self.q_proj.init_weights(Wq, bq)
        self.k_proj.init_weights(Wk, bk)
        self.v_proj.init_weights(Wv, bv)
        self.out_proj.init_weights(Wo, bo)

    def _split_heads(self, x):
        n, length, e = x.shape
        return x.reshape(n, length, self.num_heads, e // self.num_heads).transpose(0, 2, 1, 3)

    def _concat_heads(self, x):
        n, h, length, d = x.shape
        return x.transpose(0, 2, 1, 3).reshape(n, length, h * d)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        q = self._split_heads(self.q_proj.forward(query))
        k = self._split_heads(self.k_proj.forward(key))
        v = self._split_heads(self.v_proj.forward(value))
        mask = np.zeros((query.shape[0], 1, query.shape[1], key.shape[1]), dtype=bool)
        if key_padding_mask is not None:
            mask = mask | key_padding_mask[:, None, None, :]
        if attn_mask is not None:
            mask = mask | attn_mask[None, None, :, :]
        attended = self.attention.forward(q, k, v, mask)
        return self.out_proj.forward(self._concat_heads(attended))

    def backward(self, d_output):
        d_attended = self._split_heads(self.out_proj.backward(d_output))
        d_q, d_k, d_v = self.attention.backward(d_attended)
        d_query = self.q_proj.backward(self._concat_heads(d_q))
        d_key = self.k_proj.backward(self._concat_heads(d_k))
        d_value = self.v_proj.backward(self._concat_heads(d_v))
        return d_query, d_key, d_value
'''

# Cells every notebook has as they are: the course's layer and the class built on the attention
# class (whose planted mistakes it inherits).
AROUND = {"Linear": LINEAR, "MultiHeadAttention": MULTI_HEAD}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED, **AROUND}), HERE / "worked.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, MISTAKES), **AROUND}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, OTHERS), **AROUND}),
                   HERE / "other_mistakes.ipynb")


if __name__ == "__main__":
    main()
