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
whose rule gives it uniform weights, or zeros, is constant, and gets 0 too; one whose rule is
"unmasked", a large number added to the whole row, is the unmasked row, and gets its gradient).
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
        # A masked score gets no gradient, except in a row whose every key is masked where the
        # rule is "unmasked": a large number added to every score of the row shifts it as a
        # whole, so its weights, and their gradient, are the unmasked row's.
        held = keep | ~keep.any(axis=-1, keepdims=True) if fully_masked == "unmasked" else keep
        d_s = np.where(held, d_s, 0.0)
    if scaled:
        d_s = d_s / np.sqrt(d_k)
    return {"dq": d_s @ k, "dk": d_s.T @ q, "dv": d_v}


def side_by_side(per_head: list[np.ndarray]) -> np.ndarray:
    """The heads' gradients side by side, as their projections' columns are (Lq x H*d)."""
    return np.concatenate(per_head, axis=1)


def projections_backward(case, per_head: list[dict], concat: np.ndarray,
                         merged=side_by_side) -> dict[str, np.ndarray]:
    """The gradients of a projected attention (attention.py's case: Q = X Wq + bq, K = M Wk + bk,
    V = S Wv + bv per head, the heads side by side, then Wo and bo) where its heads' gradients
    dq, dk and dv (each head's) are known: with the output projection, those heads were given
    dO Wo^T, and dWo = concat^T dO, dbo = the column sums of dO.

    Returned: the weights' gradients fused as the weights are (heads side by side, as
    Case.fused), and each token sequence's: `dx_query` from the queries, `dx_keys` and
    `dx_values` from the keys and values, whichever sequence those come from (X itself in
    self-attention: a convention taking X once adds the three). `merged` puts the heads'
    gradients together (a mistake may do it otherwise)."""
    x, keys, values = (np.asarray(a, dtype=np.float64) for a in (case.x, case.keys, case.value_source))
    d_q, d_k, d_v = (merged([h[name] for h in per_head]) for name in ("dq", "dk", "dv"))
    w_q, w_k, w_v = (case.fused(name) for name in ("wq", "wk", "wv"))
    found = {"dx_query": d_q @ w_q.T, "dx_keys": d_k @ w_k.T, "dx_values": d_v @ w_v.T,
             "dwq": x.T @ d_q, "dwk": keys.T @ d_k, "dwv": values.T @ d_v,
             "dbq": d_q.sum(axis=0), "dbk": d_k.sum(axis=0), "dbv": d_v.sum(axis=0)}
    if case.wo is not None:
        found["dwo"] = concat.T @ case.d_output
        found["dbo"] = case.d_output.sum(axis=0)
    return found


def heads_upstream(case) -> np.ndarray:
    """The gradient reaching the heads' outputs, side by side (Lq x H*d_v): the upstream
    gradient itself, or through the output projection dO Wo^T."""
    d_output = np.asarray(case.d_output, dtype=np.float64)
    return d_output if case.wo is None else d_output @ case.wo.T
