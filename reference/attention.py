"""The trusted attention mathematics, in one canonical form.

Tokens are rows: X is N x D. Every head has its own projection matrices (D x d_k, D x d_k,
D x d_v) and optional bias vectors; an optional output projection Wo maps the concatenated
heads (N x H*d_v) to the output. Every calling convention the grader knows is translated to
and from this form, so the mathematics lives here once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Head:
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None


@dataclass(frozen=True)
class Case:
    """One attention problem: inputs only, never expected values."""

    x: np.ndarray
    heads: tuple[Head, ...]
    wo: np.ndarray | None = None
    scaled: bool = True
    label: str = ""

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def d(self) -> int:
        return self.x.shape[1]

    def permuted(self, order: np.ndarray) -> "Case":
        return replace(self, x=self.x[order], label=f"{self.label} (tokens permuted)")

    def fused(self, name: str) -> np.ndarray:
        """The heads' matrices side by side: head i is the i-th contiguous column block."""
        return np.concatenate([getattr(h, name) for h in self.heads], axis=1)


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def _project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    out = x @ w
    return out if b is None else out + b


def head_projections(case: Case, head: Head) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = case.x.astype(np.float64)
    return _project(x, head.wq, head.bq), _project(x, head.wk, head.bk), _project(x, head.wv, head.bv)


def scores(q: np.ndarray, k: np.ndarray, scaled: bool = True) -> np.ndarray:
    s = q @ k.T
    return s / np.sqrt(k.shape[1]) if scaled else s


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scaled: bool = True) -> dict[str, np.ndarray]:
    s = scores(q, k, scaled)
    w = softmax_rows(s)
    return {"scores": s, "weights": w, "output": w @ v}


def attention(case: Case) -> dict:
    """Everything a convention may ask for: per-head q/k/v, scores, weights, outputs, result."""
    per_head = []
    for head in case.heads:
        q, k, v = head_projections(case, head)
        per_head.append({"q": q, "k": k, "v": v, **attend(q, k, v, case.scaled)})
    concat = np.concatenate([h["output"] for h in per_head], axis=1)
    output = concat if case.wo is None else concat @ case.wo
    return {"heads": per_head, "concat": concat, "output": output}
