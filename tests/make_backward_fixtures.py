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
    "ScaledDotProductAttention": ("        d_K = np.swapaxes(d_S, -1, -2) @ self.Q", "        d_K = d_S @ self.Q",
                                  "dK computed as dS Q instead of dS^T Q"),
}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, MISTAKES)}), HERE / "mistakes.ipynb")
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(WORKED, OTHERS)}), HERE / "other_mistakes.ipynb")


if __name__ == "__main__":
    main()
