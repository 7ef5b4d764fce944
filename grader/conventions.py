"""Calling conventions: how one canonical case becomes a student function's arguments, and
which canonical parts its return value holds.

Every check is written once against canonical parts (tokens as rows); a convention is the
only place that knows about argument order, transposes, fused heads and biases.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from grader.reference.attention import Case, attention

# How tokens index each canonical part, for the permutation property.
TOKEN_AXES = {"output": (0,), "q": (0,), "k": (0,), "v": (0,),
              "scores": (0, 1), "weights": (0, 1), "weights_per_head": (0, 1)}

PART_WORDS = {"output": "output", "weights": "attention weights", "scores": "attention scores",
              "weights_per_head": "per-head attention weights", "q": "Q", "k": "K", "v": "V"}


@dataclass(frozen=True)
class Convention:
    name: str
    description: str
    params: tuple[str, ...]
    returns: tuple[str, ...]
    arguments: Callable[[Case], list]
    expected: Callable[[dict, Case], dict]
    heads: str = "one"          # one | two | many: how many heads a case may have
    square: bool = False        # per-head dimension must equal D
    biases: bool = False
    projection: bool = False    # has an output projection
    scaled: bool = True
    columns: bool = False       # tokens are columns: outputs come back transposed
    # The steps of attention its functions compute themselves, which decide the mistakes they
    # can make: the projections of X to Q, K and V, the scores, the softmax.
    steps: frozenset = frozenset({"projections", "scores", "softmax"})
    int_inputs: str = "x"       # which inputs an integer test makes integral: x | qkv | none

    def prepare(self, case: Case) -> Case:
        return replace(case, scaled=self.scaled)

    def expected_parts(self, case: Case) -> dict:
        case = self.prepare(case)
        return self.expected(attention(case), case)

    def call_arguments(self, case: Case) -> list:
        return self.arguments(self.prepare(case))

    @property
    def returns_tuple(self) -> bool:
        return len(self.returns) > 1


def _h(case: Case, i: int = 0):
    return case.heads[i]


def _col(b):
    return b[:, None]


def _column_head_args(h) -> list:
    return [h.wv.T, h.wq.T, h.wk.T, _col(h.bv), _col(h.bq), _col(h.bk)]


def _fused_projection(case: Case, name: str) -> np.ndarray:
    return case.x.astype(np.float64) @ case.fused(name)


def _first_head(r: dict) -> dict:
    return r["heads"][0]


def _scores_input(case: Case) -> list:
    return [attention(case)["heads"][0]["scores"]]


CONVENTIONS: dict[str, Convention] = {c.name: c for c in [
    Convention(
        "rows_single", "tokens as rows; returns (output, weights)",
        ("X", "Wq", "Wk", "Wv"), ("output", "weights"),
        lambda c: [c.x, _h(c).wq, _h(c).wk, _h(c).wv],
        lambda r, c: {"output": r["output"], "weights": _first_head(r)["weights"]}),
    Convention(
        "rows_multi", "tokens as rows; fused D x D weights split into H contiguous column blocks; "
        "returns (output, [weights per head])",
        ("X", "Wq", "Wk", "Wv", "H"), ("output", "weights_per_head"),
        lambda c: [c.x, c.fused("wq"), c.fused("wk"), c.fused("wv"), len(c.heads)],
        lambda r, c: {"output": r["output"], "weights_per_head": [h["weights"] for h in r["heads"]]},
        heads="many"),
    Convention(
        "columns_single_unscaled", "tokens as columns (X is D x N) with biases; unscaled dot products",
        ("X", "omega_v", "omega_q", "omega_k", "beta_v", "beta_q", "beta_k"), ("output",),
        lambda c: [c.x.T, *_column_head_args(_h(c))],
        lambda r, c: {"output": r["output"]},
        square=True, biases=True, scaled=False, columns=True),
    Convention(
        "columns_single_scaled", "tokens as columns (X is D x N) with biases; scaled by sqrt(d_k)",
        ("X", "omega_v", "omega_q", "omega_k", "beta_v", "beta_q", "beta_k"), ("output",),
        lambda c: [c.x.T, *_column_head_args(_h(c))],
        lambda r, c: {"output": r["output"]},
        square=True, biases=True, columns=True),
    Convention(
        "columns_multi_two", "tokens as columns; two heads with biases, then output projection omega_c",
        ("X", "omega_v1", "omega_q1", "omega_k1", "beta_v1", "beta_q1", "beta_k1",
         "omega_v2", "omega_q2", "omega_k2", "beta_v2", "beta_q2", "beta_k2", "omega_c"), ("output",),
        lambda c: [c.x.T, *_column_head_args(_h(c, 0)), *_column_head_args(_h(c, 1)), c.wo.T],
        lambda r, c: {"output": r["output"]},
        heads="two", biases=True, projection=True, columns=True),
    Convention(
        "scores", "attention scores from Q and K: Q K^T / sqrt(d_k)",
        ("Q", "K"), ("scores",),
        lambda c: [attention(c)["heads"][0]["q"], attention(c)["heads"][0]["k"]],
        lambda r, c: {"scores": _first_head(r)["scores"]},
        int_inputs="qkv",
        steps=frozenset({"scores"})),
    Convention(
        "softmax_rows", "row-wise softmax of a score matrix",
        ("scores",), ("weights",),
        _scores_input,
        lambda r, c: {"weights": _first_head(r)["weights"]},
        int_inputs="none",
        steps=frozenset({"softmax"})),
    Convention(
        "sdpa", "scaled dot-product attention on Q, K, V; returns (scores, weights, output)",
        ("Q", "K", "V"), ("scores", "weights", "output"),
        lambda c: [attention(c)["heads"][0][p] for p in "qkv"],
        lambda r, c: {"scores": _first_head(r)["scores"], "weights": _first_head(r)["weights"],
                      "output": r["output"]},
        int_inputs="qkv",
        steps=frozenset({"scores", "softmax"})),
    Convention(
        "qkv_projections", "projections first: returns (Q, K, V)",
        ("X", "W_q", "W_k", "W_v"), ("q", "k", "v"),
        lambda c: [c.x, _h(c).wq, _h(c).wk, _h(c).wv],
        lambda r, c: {p: _first_head(r)[p] for p in "qkv"},
        steps=frozenset()),
    Convention(
        "qkv_single", "attention on given Q, K, V; returns the output",
        ("Q", "K", "V"), ("output",),
        lambda c: [attention(c)["heads"][0][p] for p in "qkv"],
        lambda r, c: {"output": r["output"]},
        int_inputs="qkv",
        steps=frozenset({"scores", "softmax"})),
    Convention(
        "qkv_multi", "multi-head attention on given Q, K, V split into n_heads contiguous blocks",
        ("Q", "K", "V", "n_heads"), ("output",),
        lambda c: [_fused_projection(c, "wq"), _fused_projection(c, "wk"), _fused_projection(c, "wv"),
                   len(c.heads)],
        lambda r, c: {"output": r["output"]},
        heads="many", int_inputs="qkv",
        steps=frozenset({"scores", "softmax"})),
]}
