"""The backward pass of scaled dot-product attention, in float64: the gradients of a loss with
respect to Q, K and V, given the gradient dO of that loss with respect to the output.

For one head, with S = Q K^T / sqrt(d_k) (unscaled: Q K^T), P = softmax(S) over the keys (the
masked softmax of masks.py: masked keys get weight 0) and O = P V:

    dV = P^T dO                       (Lk x d_v)
    dP = dO V^T                       (Lq x Lk)
    dS = P * (dP - rowsum(dP * P))    the softmax's Jacobian-vector product, row by row
    dS = dS / sqrt(d_k)               where the scores are scaled
    dQ = dS K                         (Lq x d_k)
    dK = dS^T Q                       (Lk x d_k)

A masked score is replaced, not computed from Q and K, so no gradient reaches Q or K through it:
dS is 0 there (P already is, for every mask that leaves a query a key; a row with no key left
whose rule gives it uniform weights is constant, and gets 0 too).
"""
from __future__ import annotations

import numpy as np

from .masks import masked_softmax

GRADIENTS = ("dq", "dk", "dv")


def softmax_backward(weights: np.ndarray, d_weights: np.ndarray) -> np.ndarray:
    """dS from dP through a softmax over the last axis: P * (dP - rowsum(dP * P))."""
    return weights * (d_weights - (d_weights * weights).sum(axis=-1, keepdims=True))


def attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, d_output: np.ndarray, scaled: bool = True,
                       keep: np.ndarray | None = None, fully_masked: str = "zeros") -> dict[str, np.ndarray]:
    """dQ, dK and dV of one head (tokens as rows), `d_output` being Lq x d_v; `keep` (Lq x Lk,
    True where query i may attend key j) and `fully_masked` as for the forward pass."""
    q, k, v, d_output = (np.asarray(a, dtype=np.float64) for a in (q, k, v, d_output))
    d_k = k.shape[1]
    s = q @ k.T
    if scaled:
        s = s / np.sqrt(d_k)
    weights = masked_softmax(s, keep, fully_masked)
    d_v = weights.T @ d_output
    d_s = softmax_backward(weights, d_output @ v.T)
    if keep is not None:
        d_s = np.where(keep, d_s, 0.0)
    if scaled:
        d_s = d_s / np.sqrt(d_k)
    return {"dq": d_s @ k, "dk": d_s.T @ q, "dv": d_v}
