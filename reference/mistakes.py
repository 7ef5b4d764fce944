"""Known mistakes, computed by the trusted side in the canonical form.

Each mistake is the reference computation with one thing done wrong. It returns the same
structure as `attention.attention`, so every calling convention can turn it into the parts
a student's function would have returned had it made that mistake.

A mistake applies to a convention only when the convention has every feature it `needs`.
Besides the steps a convention computes ("projections", "scores", "softmax") and what its
shapes say ("scaled", "model_dim", "heads", "fused_heads", "projection", "biases", "square",
"output"), a convention declares:
  mask             - it takes an attention or key-padding mask
  causal           - it builds a causal mask itself (no argument, or a flag)
  cross            - keys and values come from a second sequence (the case's memory)
  three_inputs     - keys and values come from sequences of their own, passed apart
                     (query, key and value; the case's memory and values)
  batch            - it takes a leading batch axis
  stacked_heads    - it holds the heads on an array axis (B x H x N x d) and splits fused
                     projections into it itself
  framework_layout - its weights are out x in, applied as x @ W.T + b
  projection_bias  - its output projection has a bias
  additive         - it scores with an additive network, v . tanh(q W1 + k W2)
  layer_norm       - it computes a layer norm (alone, or in a block)
  feed_forward     - it computes the position-wise feed-forward network (alone, or in a block)
  block            - it computes a transformer block: residuals around attention and the network
  norm_of_tokens   - a layer norm reads its tokens X as given (a layer norm alone, or pre-LN's
                     first), where the grader's cases give one token nearly constant features
  gelu             - its network's activation is a GELU
  relu             - its network's activation is ReLU
  scale_flag       - it takes a scale flag, passed as False on one randomized case
  attention_output - it returns attention's own output (not a block's): a mistake that changes
                     that output's shape raises inside a block, where it meets the residual
  dot_product      - it scores with dot products (every convention that is not additive)
  backward         - it computes the backward pass: the gradients dQ, dK and dV given the upstream
                     gradient (a mistake of the forward pass is then made in the recomputed forward,
                     and the backward is taken through it, the same scale factor included)
  backward_scaled  - a backward pass of scaled attention (the forward's weights given or computed)
  backward_mask    - a backward pass under a mask (given, or causal) that computes the forward's
                     weights itself (not handed them in a cache)
A mistake that cannot be made on a case (a mask mistake without a mask, keys from X when the
memory's width differs from X's) predicts the reference there, so it is never named on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from .attention import Additive, Case, Head, softmax_rows, stack_batch
from .backward import attention_backward, heads_upstream, projections_backward, side_by_side
from .blocks import BlockSteps, attention_input, finish
from .masks import causal_keep, combine, masked_softmax

# What a mask added with the wrong sign adds to the masked scores.
WRONG_SIGN_BIG = 1e9


@dataclass(frozen=True)
class Variant:
    """How the computation goes wrong; the defaults are the reference."""

    # sqrt_dk | none | sqrt_D | sqrt_N | twice | after_softmax | floor | flag_ignored (scaled though
    # its scale flag says not to) | times (multiplied by sqrt(d_k))
    scale: str = "sqrt_dk"
    # rows | columns | whole | naive | heads | batch, or a slip inside a row softmax (_SLIPS)
    softmax: str = "rows"
    scores: str = "qk"              # qk | kq
    values: str = "v"               # v | x
    combine: str = "wv"             # wv | transposed
    # blocks | interleaved | tokens | reversed | stacked | reshaped (split and merged by reshapes alone)
    # | merged_by_reshape (split right, merged from H x N x d by a reshape alone)
    heads: str = "blocks"
    projection: str = "right"       # right | missing | transposed
    # after | missing | before | missing_q | missing_v (that one only; a key bias left out adds one
    # number to each query's scores, which the softmax does not see)
    biases: str = "after"
    output: str = "plain"           # plain | transposed
    mask: str = "before"            # before | after_softmax | inverted | multiplied | wrong_sign | ignored
    causal: str = "lower"           # lower | strict (diagonal excluded) | upper (upper triangle kept) | ignored
    causal_step: str = "before"     # before | after_softmax | multiplied: how the causal mask is applied
    # memory | x (keys and values from X) | swapped (queries from the memory) | kv_swapped (keys
    # from the values' sequence, values from the keys') | values_from_keys | values_from_queries
    # | keys_from_queries (_SOURCES)
    kv_source: str = "memory"
    layout: str = "right"           # right | transposed (x @ W for a framework-layout W)
    projection_bias: str = "added"  # added | missing
    keys_from: str = "wk"           # wk | wq | wv: the weights the keys are projected with
    queries_from: str = "wq"        # wq | wk | wv: the weights the queries are projected with
    values_from: str = "wv"         # wv | wk | wq: the weights the values are projected with
    # additive scores: tanh | linear (tanh left out) | summed (query and key added, then W1)
    additive: str = "tanh"
    # The steps around attention in a transformer block (blocks.BlockSteps): layer norm's,
    # the residuals, the norms' order and the network's activation.
    norm: str = "features"
    residual: str = "both"
    block_order: str = "right"
    activation: str = "right"

    @property
    def block_steps(self) -> BlockSteps:
        return BlockSteps(norm=self.norm, residual=self.residual, order=self.block_order,
                          activation=self.activation)
    # The backward pass (backward.py): the softmax's backward as its Jacobian-vector product or
    # element-wise s (1 - s); the 1/sqrt(d_k) applied to dS or missing; dQ and dK returned in
    # their places or swapped; dK as dS^T Q or dS Q; the row sum of dP * P over the keys (rows)
    # or over the queries (columns); the softmax's backward through the masked weights (kept)
    # or through weights computed without the mask (ignored).
    softmax_backward: str = "jacobian"
    backward_scale: str = "applied"
    gradients: str = "right"
    key_gradient: str = "ds_t_q"
    query_gradient: str = "ds_k"      # dQ as dS K, or dS^T K (the transpose on the wrong gradient)
    # Through the projections: the heads' gradients side by side, or merged from H x N x d by a
    # reshape alone; the key and value inputs' gradients in their places, or swapped.
    gradient_heads: str = "side_by_side"
    input_gradients: str = "right"
    output_weight_gradient: str = "right"   # or transposed: computed as concat^T dO the other way round
    row_sum: str = "rows"
    backward_mask: str = "kept"


@dataclass(frozen=True)
class Mistake:
    id: str
    title: str
    explanation: str
    hint: str
    variant: Variant
    needs: frozenset = field(default_factory=frozenset)   # features the convention must have
    # Other words for the same computation where a convention has a feature: (feature, title,
    # explanation, hint), the first whose feature it has (values unprojected in cross-attention
    # are the memory's, not X's).
    worded: tuple = ()

    def words_for(self, have) -> "Mistake":
        """The mistake in the words that fit a convention with the features `have`."""
        for feature, title, explanation, hint in self.worded:
            if feature in have:
                return replace(self, title=title, explanation=explanation, hint=hint, worded=())
        return self


def _softmax(scores: np.ndarray, how: str) -> np.ndarray:
    if how == "rows":
        return softmax_rows(scores)
    if how == "columns":
        return softmax_rows(scores.T).T
    if how == "whole":
        e = np.exp(scores - scores.max())
        return e / e.sum()
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores)
        return e / e.sum(axis=-1, keepdims=True)


def _slipped_softmax(scores: np.ndarray, how: str) -> np.ndarray:
    """A row softmax written with one NumPy slip (see _SLIPS); masked scores arrive as -inf.
    A reduction without keepdims=True gives a vector of one entry per row, which broadcasting
    lines up with the columns: row j's sum (or maximum) then meets column j."""
    with np.errstate(all="ignore"):
        if how == "broadcast":            # e / e.sum(axis=-1), no max-subtraction
            e = np.exp(scores)
            return e / e.sum(axis=-1)[None, :]
        if how == "broadcast_shifted":    # the maximum with keepdims, the sum without
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1)[None, :]
        if how == "shift_columns":        # the maximum without keepdims, the sum with
            e = np.exp(scores - scores.max(axis=-1)[None, :])
            return e / e.sum(axis=-1, keepdims=True)
        # shift_whole: one maximum for the whole matrix (np.max(x)), harmless but where a row
        # lies so far below it that all of its exp() underflow to 0
        e = np.exp(scores - scores[np.isfinite(scores)].max(initial=0.0))
        return e / e.sum(axis=-1, keepdims=True)


# Slips inside a row softmax; all but shift_whole need a square score matrix, or they raise.
_SLIPS = ("broadcast", "broadcast_shifted", "shift_columns", "shift_whole")
_SQUARE_SLIPS = ("broadcast", "broadcast_shifted", "shift_columns")


# The axes each softmax variant normalises one head's score matrix over.
_SOFTMAX_AXES = {"rows": -1, "columns": 0, "whole": (0, 1), "naive": -1}


def _bias_step(v: Variant, part: str) -> str:
    """How the bias of one projection ("q", "k" or "v") is added: a variant missing one bias
    leaves only that one out."""
    if v.biases.startswith("missing_"):
        return "missing" if v.biases == f"missing_{part}" else "after"
    return v.biases


def _project(x, w, b, how):
    if b is None or how == "missing":
        return x @ w
    if how == "before":
        return (x + b) @ w if b.shape[0] == x.shape[1] else x @ w + b
    return x @ w + b


# Where queries, keys and values are projected from, by kv_source: indices into the case's
# (X, keys' sequence, values' sequence).
_SOURCES = {"memory": (0, 1, 2), "x": (0, 0, 0), "swapped": (1, 0, 0), "kv_swapped": (0, 2, 1),
            "values_from_keys": (0, 1, 1), "values_from_queries": (0, 1, 0), "keys_from_queries": (0, 0, 2)}


def _sources(case: Case, v: Variant) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sequences queries, keys and values are projected from."""
    sequences = tuple(s.astype(np.float64) for s in (case.x, case.keys, case.value_source))
    return tuple(sequences[i] for i in _SOURCES[v.kv_source])  # type: ignore[return-value]


def _sources_fit(case: Case, v: Variant) -> bool:
    """Whether code taking its sequences as `v.kv_source` says runs on the case's shapes: each
    sequence as wide as its weights take, as many keys as values, and the masks' Lq x Lk."""
    xq, xk, xv = _sources(case, v)
    head = case.heads[0]
    widths = (xq.shape[1], xk.shape[1], xv.shape[1]) == (head.wq.shape[0], head.wk.shape[0], head.wv.shape[0])
    masked = case.keep is not None
    return widths and xk.shape[0] == xv.shape[0] and (not masked or (xq.shape[0], xk.shape[0]) == (case.n, case.lk))


# The ways a student applies a mask: the right one (-inf before the softmax), then the wrong ones.
_MASK_STEPS = ("before", "after_softmax", "multiplied", "wrong_sign")


def _keep(case: Case, v: Variant) -> dict | None:
    """The keep-masks as the student builds and applies them, by step (see _MASK_STEPS): the
    masks given (inverted, if so) as `v.mask` says, the causal mask made inside (off by one, if
    so) as `v.causal_step` says; None when there is no mask at all."""
    given = [case.mask, None if case.key_mask is None else case.key_mask[None, :]]
    if v.mask == "inverted":
        given = [None if g is None else ~g for g in given]
    if v.mask == "ignored":
        given = []
    built = None
    if case.causal and v.causal != "ignored":
        ones = np.ones((case.n, case.lk), dtype=bool)
        built = {"lower": causal_keep(case.n, case.lk), "strict": np.tril(ones, -1), "upper": np.triu(ones)}[v.causal]
    given_step = "before" if v.mask in ("inverted", "ignored") else v.mask
    parts: dict[str, list] = {step: [] for step in _MASK_STEPS}
    parts[given_step] += given
    parts[v.causal_step].append(built)
    steps = {step: combine(*keeps) for step, keeps in parts.items()}
    if all(k is None for k in steps.values()):
        return None
    return {step: None if k is None else np.broadcast_to(k, (case.n, case.lk)).copy() for step, k in steps.items()}


def _mask_step(s, keep: dict | None, plain, honouring):
    """The weights from scores `s`, each mask applied at its step: `plain` is the variant's
    softmax without a mask, `honouring(s, keep)` the one that gives masked keys zero weight."""
    if keep is None:
        return plain(s)
    if keep["multiplied"] is not None:
        s = s * keep["multiplied"]
    if keep["wrong_sign"] is not None:
        s = s + np.where(keep["wrong_sign"], 0.0, WRONG_SIGN_BIG)
    w = plain(s) if keep["before"] is None else honouring(s, keep["before"])
    return w if keep["after_softmax"] is None else w * keep["after_softmax"]


def _weights(s: np.ndarray, keep: dict | None, v: Variant, rule: str) -> np.ndarray:
    """One head's weights from its score matrix."""
    if v.softmax in _SLIPS:
        return _mask_step(s, keep, lambda t: _slipped_softmax(t, v.softmax),
                          lambda t, k: _slipped_softmax(np.where(k, t, -np.inf), v.softmax))
    axis = _SOFTMAX_AXES.get(v.softmax, -1)
    return _mask_step(s, keep, lambda t: _softmax(t, v.softmax),
                      lambda t, k: masked_softmax(t, k, rule, axis=axis, stable=v.softmax != "naive"))


def _group_weights(scores: list, keeps: list, rule: str) -> list:
    """Score matrices normalised across a group (the heads of a case, or the elements of a
    batch), as a softmax over the heads or the batch axis does."""
    s = np.stack(scores)
    keep = None
    if any(k is not None for k in keeps):
        keep = {}
        for step in _MASK_STEPS:
            mine = [None if k is None else k[step] for k in keeps]
            keep[step] = None if all(m is None for m in mine) else np.stack(
                [np.ones(m.shape, dtype=bool) if k is None else k for k, m in zip(mine, scores)])
    return list(_mask_step(s, keep, lambda t: masked_softmax(t, None, axis=0),
                           lambda t, k: masked_softmax(t, k, rule, axis=0)))


def _additive_scores(q, k, additive: Additive, v: Variant) -> np.ndarray:
    """The score network as the student computes it: Lq x Lk."""
    if v.additive == "summed":   # W [q; k] read as W (q + k), W1 its first block
        hidden = (q[:, None, :] + k[None, :, :]) @ additive.w1
    else:
        hidden = (q @ additive.w1)[:, None, :] + (k @ additive.w2)[None, :, :]
    return (hidden if v.additive == "linear" else np.tanh(hidden)) @ additive.va


def _scored(case: Case, q, k, values, v: Variant) -> dict:
    if case.additive is not None:
        s = _additive_scores(q, k, case.additive, v)
        return {"q": q, "k": k, "v": values, "scores": s if v.scores == "qk" else s.T}
    raw = q @ k.T if v.scores == "qk" else k @ q.T
    d_k = k.shape[1]
    if v.scale == "flag_ignored" and case.scale_off:
        s = raw / np.sqrt(d_k)
    elif not case.scaled or v.scale in ("none", "after_softmax"):
        s = raw
    elif v.scale == "sqrt_D":
        s = raw / np.sqrt(case.d)
    elif v.scale == "sqrt_N":
        s = raw / np.sqrt(k.shape[0])
    elif v.scale == "twice":
        s = raw / d_k
    elif v.scale == "floor":
        s = np.floor(raw / np.sqrt(d_k))
    elif v.scale == "times":
        s = raw * np.sqrt(d_k)

    else:
        s = raw / np.sqrt(d_k)
    return {"q": q, "k": k, "v": values, "scores": s}


def _head_scores(case: Case, head, v: Variant) -> dict:
    xq, xk, xv = _sources(case, v)
    q = _project(xq, getattr(head, v.queries_from), head.bq, _bias_step(v, "q"))
    k = _project(xk, getattr(head, v.keys_from), head.bk, _bias_step(v, "k"))
    values = _project(xv, getattr(head, v.values_from), head.bv, _bias_step(v, "v")) if v.values == "v" else xv
    return _scored(case, q, k, values, v)


def _head_output(case: Case, part: dict, w: np.ndarray, v: Variant) -> dict:
    if case.scaled and v.scale == "after_softmax":
        w = w / np.sqrt(part["k"].shape[1])
    out = (w.T if v.combine == "transposed" else w) @ part["v"]
    return {**part, "weights": w, "output": out}


def _backward_scale(case: Case, k: np.ndarray, v: Variant) -> float:
    """What the student divides dS by: the forward's scale factor, as the variant computes it,
    unless the backward leaves it out."""
    if not case.scaled or v.backward_scale == "missing" or v.scale == "none":
        return 1.0
    if v.scale == "twice":
        return float(k.shape[1])
    if v.scale == "sqrt_D":
        return float(np.sqrt(case.d))
    return float(np.sqrt(k.shape[0] if v.scale == "sqrt_N" else k.shape[1]))


def _head_backward(case: Case, part: dict, w: np.ndarray, d_output: np.ndarray, v: Variant) -> dict:
    """dQ, dK and dV of one head as the variant takes the backward pass, through the weights its
    forward computed; where those cannot meet the upstream gradient (the student's code would
    raise), the reference's gradients."""
    q, k, values = part["q"], part["k"], part["v"]
    if w.shape != (q.shape[0], k.shape[0]) or d_output.shape != (q.shape[0], values.shape[1]):
        return attention_backward(q, k, values, d_output, case.scaled, case.keep, case.fully_masked)
    d_v = w.T @ d_output
    d_p = d_output @ values.T
    p = softmax_rows(part["scores"]) if v.backward_mask == "ignored" else w
    if v.softmax_backward == "elementwise":
        d_s = d_p * p * (1 - p)
    else:
        d_s = p * (d_p - (d_p * p).sum(axis=0 if v.row_sum == "columns" else -1, keepdims=True))
    d_s = d_s / _backward_scale(case, k, v)
    d_q = d_s.T @ k if v.query_gradient == "ds_t_k" else d_s @ k
    d_k = d_s @ q if v.key_gradient == "ds_q" else d_s.T @ q
    if v.gradients == "swapped":
        d_q, d_k = d_k, d_q
    return {"dq": d_q, "dk": d_k, "dv": d_v}


def _head(case: Case, head, v=Variant(), keep=None):
    part = _head_scores(case, head, v)
    return _head_output(case, part, _weights(part["scores"], keep, v, case.fully_masked), v)


def _reshaped_scores(case: Case, heads: list, v: Variant) -> list:
    """Fused Q, K and V split into heads by reshaping L x H*d straight to H x L x d: each head
    takes a run of the flattened matrix, so its rows mix tokens and features."""
    n = len(heads)
    xq, xk, xv = _sources(case, v)

    def fused(source, w, b):
        biases = [getattr(h, b) for h in heads]
        bias = None if any(x is None for x in biases) else np.concatenate(biases)
        return _project(source, np.concatenate([getattr(h, w) for h in heads], axis=1), bias, _bias_step(v, b[1]))

    q, k = fused(xq, v.queries_from, "bq"), fused(xk, v.keys_from, "bk")
    values = fused(xv, v.values_from, "bv") if v.values == "v" else xv
    qs, ks, vs = (a.reshape(n, a.shape[0], a.shape[1] // n) for a in (q, k, values))
    return [_scored(case, qs[i], ks[i], vs[i], v) for i in range(n)]


def _split_heads(case: Case, v: Variant) -> list:
    """The heads a student's split produces, as canonical heads."""
    if v.heads != "interleaved" or len(case.heads) == 1:
        return list(case.heads)
    n = len(case.heads)
    fused = {name: case.fused(name) for name in ("wq", "wk", "wv")}
    return [Head(fused["wq"][:, i::n], fused["wk"][:, i::n], fused["wv"][:, i::n]) for i in range(n)]


def _square(a) -> bool:
    return a is None or a.shape[0] == a.shape[1]


def _possible(case: Case, v: Variant) -> Variant:
    """The variant without the mistakes that cannot be made on this case (the student's code
    would fail on its shapes), which then predict the reference. A case without memory or
    masks keeps every mistake a built-in convention can make: for them this is `v` itself."""
    undo: dict[str, str] = {}
    cross = case.memory is not None and case.n != case.lk
    if cross and (v.scores != "qk" or v.combine != "wv"):
        undo.update(scores="qk", combine="wv")          # a Lk x Lq matrix meets Lk x d values
    if v.softmax in _SQUARE_SLIPS and case.n != case.lk:
        undo["softmax"] = "rows"                        # a vector of Lq sums meets Lk columns
    if v.heads == "tokens" and (case.memory is not None or case.keep is not None):
        undo["heads"] = "blocks"
    # The values' width: their projection's, or their own sequence's when taken unprojected.
    value_width = case.fused("wv").shape[1] if v.values == "v" else case.value_source.shape[1]
    if v.heads == "reshaped" and any(width % len(case.heads) for width in
                                     (case.fused("wq").shape[1], case.fused("wk").shape[1], value_width)):
        undo["heads"] = "blocks"
    if v.kv_source != "memory" and not _sources_fit(case, v):
        undo["kv_source"] = "memory"
    # W_q of X's width meets a wider memory (or W_k, W_v of the memory's width meet X), or d_v != d_k.
    if v.keys_from != "wk" and any(getattr(h, v.keys_from).shape != h.wk.shape for h in case.heads):
        undo["keys_from"] = "wk"
    if v.queries_from != "wq" and any(getattr(h, v.queries_from).shape != h.wq.shape for h in case.heads):
        undo["queries_from"] = "wq"
    if v.values_from != "wv" and any(getattr(h, v.values_from).shape != h.wv.shape for h in case.heads):
        undo["values_from"] = "wv"
    if v.additive == "summed" and any(h.wq.shape[1] != h.wk.shape[1] for h in case.heads):
        undo["additive"] = "tanh"                       # a d_q query meets a d_k key
    if (v.gradients != "right" or v.key_gradient != "ds_t_q" or v.query_gradient != "ds_k") and case.n != case.lk:
        undo.update(gradients="right", key_gradient="ds_t_q", query_gradient="ds_k")   # dQ is Lq x d_k, dK Lk x d_k
    if v.layout == "transposed" and not all(_square(a) for a in (
            case.fused("wq"), case.fused("wk"), case.fused("wv"), case.wo)):
        undo["layout"] = "right"
    return replace(v, **undo) if undo else v


def _laid_out(case: Case, v: Variant) -> Case:
    """The case as the student reads it: with `x @ W` for framework-layout weights, every
    fused matrix transposed (then split into contiguous blocks, as the student splits them)."""
    if v.layout != "transposed":
        return case
    n = len(case.heads)
    blocks = {}
    for name in ("wq", "wk", "wv"):
        fused = case.fused(name).T
        width = fused.shape[1] // n
        blocks[name] = [fused[:, i * width:(i + 1) * width] for i in range(n)]
    heads = tuple(Head(blocks["wq"][i], blocks["wk"][i], blocks["wv"][i], h.bq, h.bk, h.bv)
                  for i, h in enumerate(case.heads))
    return replace(case, heads=heads, wo=None if case.wo is None else case.wo.T)


def mistaken_attention(case: Case, v: Variant) -> dict:
    """`attention.attention(case)` with the variant's mistakes made; a batch axis is one element."""
    return _mistaken([case], v)[0]


def mistaken_batched(cases: list[Case], v: Variant) -> dict:
    """mistaken_attention() over a batch, stacked as `attention.batched` stacks the reference;
    a softmax over the batch axis normalises across the elements."""
    return stack_batch(_mistaken(cases, v))


def mistaken_elements(cases: list[Case], v: Variant) -> list[dict]:
    """mistaken_attention() of each element of a batch, in attention()'s structure; a softmax
    over the batch axis normalises across the elements."""
    return _mistaken(cases, v)


def _mistaken(cases: list[Case], v: Variant) -> list[dict]:
    """Each case's result with the variant's mistakes; a block's attention is computed on what
    it reads (the batch's elements together, for a softmax over the batch), then the block
    around it. Where the mistaken attention's output cannot meet the block's tokens (a transposed
    output, heads on the wrong axis: the student's code raises), the element is the reference's."""
    blocks = [c.block for c in cases]
    if not all(blocks):
        return _mistaken_attention(cases, v)
    steps = v.block_steps
    inner = [replace(c, x=attention_input(b, c.x, steps), block=None) for c, b in zip(cases, blocks) if b]
    attended = _mistaken_attention(inner, v) if blocks[0] and blocks[0].attends else [{} for _ in cases]
    results = []
    for case, block, result in zip(cases, blocks, attended):
        if result and np.shape(result["output"]) != case.x.shape:
            results.append(_mistaken([case], REFERENCE)[0])
        elif block:
            results.append(finish(block, case.x, result, steps))
    return results


def _mistaken_attention(cases: list[Case], v: Variant) -> list[dict]:
    plans = []
    for case in cases:
        cv = _possible(case, v)
        case = _laid_out(case, cv)
        plan: dict[str, Any] = {"case": case, "v": cv, "keep": _keep(case, cv), "parts": None}
        if cv.heads == "reshaped":
            plan["parts"] = _reshaped_scores(case, list(case.heads), cv)
        elif cv.heads != "tokens":
            plan["parts"] = [_head_scores(case, h, cv) for h in _split_heads(case, cv)]
        plans.append(plan)
    scored = [p for p in plans if p["parts"] is not None]
    if v.softmax == "heads":
        for p in scored:
            p["weights"] = _group_weights([part["scores"] for part in p["parts"]], [p["keep"]] * len(p["parts"]),
                                          p["case"].fully_masked)
    elif v.softmax == "batch" and scored:
        per_element: list[list] = [[] for _ in scored]
        for i in range(len(scored[0]["parts"])):
            weights = _group_weights([p["parts"][i]["scores"] for p in scored], [p["keep"] for p in scored],
                                     scored[0]["case"].fully_masked)
            for mine, w in zip(per_element, weights):
                mine.append(w)
        for p, weights in zip(scored, per_element):
            p["weights"] = weights
    else:
        for p in scored:
            p["weights"] = [_weights(part["scores"], p["keep"], p["v"], p["case"].fully_masked) for part in p["parts"]]
    return [_finish(p) for p in plans]


def _finish(plan: dict) -> dict:
    """The heads' outputs put together and projected, as the variant does it."""
    case, v = plan["case"], plan["v"]
    if plan["parts"] is None:
        per_head = _token_heads(case, v)
    else:
        per_head = [_head_output(case, part, w, v) for part, w in zip(plan["parts"], plan["weights"])]
        if case.d_output is not None:
            start, upstream = 0, heads_upstream(case)
            for head in per_head:
                width = head["v"].shape[1]
                head.update(_head_backward(case, head, head["weights"], upstream[:, start:start + width], v))
                start += width
    outputs = [h["output"] for h in per_head]
    if v.heads == "reversed":
        outputs = outputs[::-1]
    if v.heads == "stacked":
        concat = np.concatenate(outputs, axis=0)
    elif v.heads == "tokens":
        concat = np.concatenate(outputs, axis=0)
    elif v.heads in ("reshaped", "merged_by_reshape"):
        concat = np.stack(outputs).reshape(outputs[0].shape[0], -1)   # H x N x d read as N x H*d
    else:
        concat = np.concatenate(outputs, axis=1)
    projected = True
    if case.wo is None or v.projection == "missing" or concat.shape[1] != case.wo.shape[0]:
        output, projected = concat, False
    elif v.projection == "transposed":
        output = concat @ case.wo.T if case.wo.shape[0] == case.wo.shape[1] else concat @ case.wo
    else:
        output = concat @ case.wo
    if projected and case.bo is not None and v.projection_bias == "added":
        output = output + case.bo
    if v.output == "transposed":
        output = output.T
    result: dict[str, Any] = {"heads": per_head, "concat": concat, "output": output}
    if case.d_output is not None and all("dq" in h for h in per_head):
        gradients = _projections_gradients(case, per_head, concat, v)
        if gradients is not None:
            result["gradients"] = gradients
    return result


def _projections_gradients(case: Case, per_head: list, concat: np.ndarray, v: Variant) -> dict | None:
    """The gradients through the projections as the variant takes them back; None where its
    shapes cannot be (the student's code would raise)."""
    merged = _reshaped_heads if v.gradient_heads == "merged_by_reshape" else side_by_side
    try:
        gradients = projections_backward(case, per_head, concat, merged)
    except ValueError:
        return None
    if v.input_gradients == "swapped" and gradients["dx_keys"].shape == gradients["dx_values"].shape:
        gradients["dx_keys"], gradients["dx_values"] = gradients["dx_values"], gradients["dx_keys"]
    if v.output_weight_gradient == "transposed" and "dwo" in gradients:
        gradients["dwo"] = gradients["dwo"].T
    return gradients


def _reshaped_heads(per_head: list[np.ndarray]) -> np.ndarray:
    """The heads' arrays (each N x d) read as N x H*d by a reshape of their H x N x d stack."""
    return np.stack(per_head).reshape(per_head[0].shape[0], -1)


def _token_heads(case: Case, v: Variant) -> list:
    """Heads split over tokens: each block of N/H tokens attends only within itself, with
    all of the features."""
    n_heads = len(case.heads)
    fused = {name: case.fused(name) for name in ("wq", "wk", "wv")}
    whole = Head(fused["wq"], fused["wk"], fused["wv"])
    x = case.x.astype(np.float64)
    per_head = []
    for rows in np.array_split(np.arange(case.n), n_heads):
        if rows.size == 0:  # more heads than tokens: the student's split yields empty heads too
            empty = np.zeros((0, 0))
            per_head.append({"q": empty, "k": empty, "v": empty, "scores": empty, "weights": empty,
                             "output": np.zeros((0, whole.wv.shape[1]))})
            continue
        part = Case(x=x[rows], heads=(whole,), scaled=case.scaled)
        per_head.append(_head(part, whole, v=Variant()))
    return per_head


def _m(id, title, explanation, hint, needs=(), worded=(), **variant):
    return Mistake(id, title, explanation, hint, Variant(**variant), frozenset(needs), tuple(worded))


# Order matters: when several match, the first is named. The later ones (from the softmax's
# keepdims slips on) came after the others, and stay after them, so that a name given before
# stays the name given.
MISTAKES: tuple[Mistake, ...] = (
    _m("softmax_wrong_axis", "softmax over the wrong axis",
       "Your weights are normalised down each column (over the queries) instead of along each row "
       "(over the keys), so each query's weights do not sum to 1.",
       "Look at which axis your softmax sums over: softmax(Q K^T / sqrt(d_k)) is taken row by row.",
       needs={"softmax", "dot_product"}, softmax="columns"),
    _m("softmax_whole_matrix", "softmax over the whole matrix",
       "Your softmax normalises over every entry of the score matrix at once, so the whole matrix sums "
       "to 1 instead of each row.",
       "Look at the sum in your softmax: it should be taken separately for each row.",
       needs={"softmax"}, softmax="whole"),
    _m("no_scaling", "scores not scaled",
       "The scores Q K^T are never divided by sqrt(d_k).",
       "Look at the definition: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.",
       needs={"scaled"}, scale="none"),
    _m("scale_by_model_dim", "scaled by sqrt(D) instead of sqrt(d_k)",
       "The scores are divided by the square root of the model dimension D, not of the per-head "
       "dimension d_k of the queries and keys.",
       "Look at where d_k comes from: it is the width of Q and K for this head, not of X.",
       needs={"scaled", "model_dim"}, scale="sqrt_D"),
    _m("scaled_twice", "scaled twice (by d_k instead of sqrt(d_k))",
       "The scores are divided by d_k, as if the sqrt(d_k) scaling were applied twice.",
       "Look at your scaling: divide Q K^T by sqrt(d_k) exactly once.",
       needs={"scaled"}, scale="twice"),
    _m("scaled_after_softmax", "scaling applied after the softmax",
       "The division by sqrt(d_k) happens after the softmax, so the weights no longer sum to 1.",
       "Look at the order of operations: scale the scores, then take the softmax.",
       needs={"scaled", "softmax"}, scale="after_softmax"),
    _m("keys_times_queries", "K Q^T instead of Q K^T",
       "The score matrix is K Q^T, the transpose of Q K^T: row i then holds key i against every query.",
       "Look at the order in your score product: queries on the left, keys transposed on the right.",
       needs={"scores", "dot_product"}, scores="kq"),
    _m("transposed_attention", "attention matrix transposed before it is applied to V",
       "The weights are transposed before they multiply the values, so each output mixes the values "
       "with another query's weights.",
       "Look at the product with V: output = weights @ V with the weights as computed, one row per query.",
       needs={"softmax", "output"}, combine="transposed"),
    _m("values_from_x", "values taken from X instead of V",
       "The weights multiply the inputs X rather than the values V = X W_v.",
       "Look at what the weights are applied to: the projected values V.",
       needs={"projections", "output", "attention_output"}, values="x",
       worded=[("cross", "values taken unprojected from their sequence instead of V",
                "The weights multiply the values' own sequence (the memory, or the value input) as it is, "
                "rather than the values V projected from it with W_v.",
                "Look at what the weights are applied to: the projected values V = memory W_v, computed from "
                "the sequence the keys and values come from.")]),
    _m("interleaved_heads", "heads split in an interleaved pattern",
       "Head i takes every H-th column (i, i + H, ...) of W_q, W_k, W_v instead of a contiguous block.",
       "Look at how you split the columns: head i uses columns i*d_k to (i+1)*d_k - 1.",
       needs={"fused_heads"}, heads="interleaved"),
    _m("heads_over_tokens", "heads split over tokens instead of features",
       "The split into heads cuts the tokens (rows) into groups instead of cutting the features "
       "(columns) of Q, K and V.",
       "Look at the axis of your split: every head sees all N tokens and d_k = D / H features.",
       needs={"fused_heads"}, heads="tokens"),
    _m("heads_reversed", "heads concatenated in the wrong order",
       "The head outputs are concatenated in reverse order.",
       "Look at the order of your concatenation: head 1 first, then head 2, ...",
       needs={"heads"}, heads="reversed"),
    _m("heads_stacked_on_tokens", "heads stacked on the wrong axis",
       "The head outputs are stacked along the token axis instead of side by side along the features.",
       "Look at the axis of your concatenation: the result has one row per token and H * d_v columns.",
       needs={"heads", "attention_output"}, heads="stacked"),
    _m("projection_missing", "output projection missing",
       "The concatenated heads are returned without the final output projection.",
       "Look at the last step: the concatenated heads are multiplied by the output projection.",
       needs={"projection"}, projection="missing"),
    _m("projection_wrong_side", "output projection applied on the wrong side",
       "The output projection is applied transposed (from the wrong side) to the concatenated heads.",
       "Look at the shapes in the last product: tokens must stay where they are.",
       needs={"projection"}, projection="transposed"),
    _m("biases_missing", "biases missing",
       "The query, key and value biases are never added.",
       "Look at the projections: each one is omega @ X + beta.",
       needs={"biases"}, biases="missing"),
    _m("biases_before_product", "biases added before the product instead of after",
       "The biases are added to X before multiplying by the weights, instead of to the product.",
       "Look at the projections: omega @ X + beta, not omega @ (X + beta).",
       needs={"biases", "square"}, biases="before"),
    _m("transposed_output", "output transposed",
       "The output has tokens and features swapped.",
       "Look at the shape you return: one row per token (one column per token where tokens are columns).",
       needs={"output", "attention_output"}, output="transposed"),
    _m("mask_after_softmax", "mask applied after the softmax",
       "The masked weights are zeroed after the softmax, so each query's remaining weights no longer "
       "sum to 1.",
       "Look at where the mask goes: masked scores become -inf (or a large negative number) before the "
       "softmax, so the softmax shares each row among the keys it may attend.",
       needs={"mask", "softmax"}, mask="after_softmax"),
    _m("mask_inverted", "mask inverted",
       "The mask is read the other way round: the keys it allows are masked and the ones it masks "
       "are attended.",
       "Look at what True (or 1, or 0) means in this assignment's mask, and which entries you set to -inf.",
       needs={"mask"}, mask="inverted"),
    _m("mask_multiplied", "mask multiplied into the scores (zeros instead of -inf)",
       "The scores are multiplied by the mask, so a masked score becomes 0, and exp(0) still gives "
       "that key weight.",
       "Look at the value a masked score gets before the softmax: it must be -inf (or a large negative "
       "number) to get zero weight, not 0.",
       needs={"mask", "softmax"}, mask="multiplied"),
    _m("mask_wrong_sign", "mask added with the wrong sign",
       "A large positive number is added to the masked scores, so the masked keys take all of the weight.",
       "Look at the sign of the number you add to the masked scores: it must push them down, not up.",
       needs={"mask", "softmax"}, mask="wrong_sign"),
    _m("mask_ignored", "mask not applied",
       "The mask argument is never used, so every query attends every key.",
       "Look at where the mask goes: masked scores become -inf (or a large negative number) before the softmax.",
       needs={"mask"}, mask="ignored"),
    _m("causal_diagonal_excluded", "causal mask excludes the diagonal",
       "Each token is kept from attending to itself: the causal mask is off by one and lets query i "
       "see only keys before i.",
       "Look at the diagonal of your causal mask: query i may attend keys 0 to i, itself included.",
       needs={"causal"}, causal="strict"),
    _m("causal_upper_triangle", "causal mask keeps the upper triangle",
       "The causal mask lets each query attend the keys after it instead of before it.",
       "Look at which triangle your mask keeps: query i may attend keys j <= i (the lower triangle).",
       needs={"causal"}, causal="upper"),
    _m("causal_ignored", "causal mask not applied",
       "No causal mask is applied, so each token attends the tokens after it too.",
       "Mask the scores of keys j > i with -inf (or a large negative number) before the softmax, e.g. with "
       "np.triu(np.ones((N, N), dtype=bool), 1).",
       needs={"causal"}, causal="ignored"),
    _m("causal_after_softmax", "causal mask applied after the softmax",
       "The weights of later tokens are zeroed after the softmax, so each query's remaining weights no "
       "longer sum to 1.",
       "Look at where the causal mask goes: the scores of later keys become -inf before the softmax.",
       needs={"causal", "softmax"}, causal_step="after_softmax"),
    _m("causal_multiplied", "causal mask multiplied into the scores (zeros instead of -inf)",
       "The scores of later keys are set to 0 (as np.tril of the scores does), and exp(0) still gives "
       "those keys weight.",
       "Look at the value a later key's score gets before the softmax: -inf (or a large negative number), not 0.",
       needs={"causal", "softmax"}, causal_step="multiplied"),
    _m("softmax_over_heads", "softmax over the heads axis",
       "The weights are normalised across the heads for each query and key, instead of across the keys.",
       "Look at the axis of your softmax: with arrays of shape (..., heads, queries, keys) it is the last one.",
       needs={"softmax", "stacked_heads"}, softmax="heads"),
    _m("softmax_over_batch", "softmax over the batch axis",
       "The weights are normalised across the elements of the batch instead of across the keys.",
       "Look at the axis of your softmax: with a leading batch axis it is the last one, never the first.",
       needs={"softmax", "batch"}, softmax="batch"),
    _m("keys_values_from_queries", "keys and values taken from the queries' sequence",
       "The keys and values are projected from the queries' own input instead of from the second "
       "sequence, so this is self-attention, not cross-attention.",
       "Look at what K and V are computed from: in cross-attention they come from the other sequence "
       "(the memory), only Q from X.",
       needs={"cross", "projections"}, kv_source="x"),
    _m("cross_sequences_swapped", "queries and keys/values taken from the wrong sequences",
       "The queries come from the second sequence (the memory) and the keys and values from X: "
       "the two sequences are swapped.",
       "Look at which input each projection reads: Q from X, K and V from the memory.",
       needs={"cross", "projections"}, kv_source="swapped"),
    # Three inputs: each mistake reads one sequence where another belongs.
    _m("keys_values_swapped", "keys and values projected from each other's inputs",
       "K is projected from the value input and V from the key input: the key and value sequences "
       "are swapped.",
       "Look at which input each projection reads: K = key @ W_k and V = value @ W_v.",
       needs={"three_inputs"}, kv_source="kv_swapped"),
    _m("values_from_key_input", "values projected from the key input (the value input is ignored)",
       "V is projected from the key sequence instead of the value sequence, so the value input is never used.",
       "Look at what V is computed from: the value input, V = value @ W_v, not the key input.",
       needs={"three_inputs"}, kv_source="values_from_keys"),
    _m("values_from_query_input", "values projected from the query input (the value input is ignored)",
       "V is projected from the query sequence instead of the value sequence, so the value input is never used.",
       "Look at what V is computed from: the value input, V = value @ W_v, not the query input.",
       needs={"three_inputs"}, kv_source="values_from_queries"),
    _m("keys_from_query_input", "keys projected from the query input (the key input is ignored)",
       "K is projected from the query sequence instead of the key sequence, so the key input is never used.",
       "Look at what K is computed from: the key input, K = key @ W_k, not the query input.",
       needs={"three_inputs"}, kv_source="keys_from_queries"),
    _m("heads_split_by_reshape", "heads split with a reshape that mixes tokens and features",
       "Q, K and V are reshaped from (tokens, heads * d_k) straight to (heads, tokens, d_k), so each head "
       "holds pieces of several tokens instead of its own d_k features of every token.",
       "Look at your split: reshape to (tokens, heads, d_k) first, then move the heads axis to the front "
       "(a transpose), and undo both in that order when merging.",
       needs={"stacked_heads", "fused_heads"}, heads="reshaped"),
    _m("weights_wrong_layout", "weights applied in the wrong layout (W instead of W.T)",
       "The weight matrices are given as (out, in), as a framework's linear layer stores them, but are "
       "applied as x @ W instead of x @ W.T.",
       "Look at the shapes of the weights: a linear layer computes x @ W.T + b.",
       needs={"framework_layout"}, layout="transposed"),
    _m("projection_bias_missing", "output projection bias missing",
       "The output projection's bias is never added.",
       "Look at the last step: the output projection is a linear layer with its own bias.",
       needs={"projection_bias"}, projection_bias="missing"),
    _m("softmax_overflow", "softmax without max-subtraction overflows",
       "exp() of scores this large overflows to inf, and inf / inf gives NaN.",
       "Subtract each row's maximum before exponentiating; softmax does not change under that shift.",
       needs={"softmax"}, softmax="naive"),
    _m("softmax_denominator_broadcast", "softmax denominator broadcast along the wrong axis (keepdims missing)",
       "Your softmax divides by e.sum(axis=-1) without keepdims=True: the sums, one per row, come back as "
       "a flat vector that broadcasting lines up with the columns, so entry (i, j) is divided by row j's "
       "sum instead of row i's, and the rows no longer sum to 1.",
       "Keep the summed axis (keepdims=True, or [:, None]) so that each row is divided by its own sum.",
       needs={"softmax", "tokens_as_rows"}, softmax="broadcast"),
    _m("softmax_denominator_broadcast_shifted", "softmax denominator broadcast along the wrong axis (keepdims missing)",
       "Your softmax subtracts each row's maximum correctly but divides by e.sum(axis=-1) without "
       "keepdims=True: the sums, one per row, line up with the columns, so entry (i, j) is divided by row "
       "j's sum instead of row i's, and the rows no longer sum to 1.",
       "Keep the summed axis (keepdims=True, or [:, None]) so that each row is divided by its own sum.",
       needs={"softmax", "tokens_as_rows"}, softmax="broadcast_shifted"),
    _m("max_wrong_axis", "maximum subtracted along the wrong axis (keepdims missing)",
       "The maximum subtracted before exp() is taken without keepdims=True, so row j's maximum is "
       "subtracted from column j: the entries of a row are shifted by different amounts, which changes "
       "the softmax. Subtracting one number from a whole row (its own maximum) would change nothing.",
       "Keep the reduced axis when you take the maximum (keepdims=True), so each row loses its own maximum.",
       needs={"softmax", "tokens_as_rows"}, softmax="shift_columns"),
    _m("scale_by_token_count", "scaled by sqrt(N), the number of tokens, instead of sqrt(d_k)",
       "The scores are divided by the square root of the number of tokens: d_k was read from the wrong "
       "axis of Q or K (their number of rows instead of their number of columns).",
       "Look at where d_k comes from: it is the width of Q and K (one entry per feature), not their length.",
       # With tokens as rows, shape[0] (the first index one reaches for) is the token count.
       needs={"scaled", "tokens_as_rows"}, scale="sqrt_N"),
    _m("scores_floor_divided", "scores floor-divided (// instead of /)",
       "The scores are divided by sqrt(d_k) with //, which rounds every score down to a whole number.",
       "Use true division (/) for the scaling: floor division throws away the fractional part of each score.",
       needs={"scaled"}, scale="floor"),
    _m("max_whole_matrix", "maximum subtracted over the whole matrix (harmless on ordinary scores)",
       "Your softmax subtracts one maximum for the whole score matrix (np.max without an axis) instead of "
       "each row's own. That is harmless on ordinary scores, since a softmax does not change when a whole "
       "row is shifted by one number, and it costs no points; but a row whose scores all lie more than "
       "about 745 below the matrix's largest one underflows to 0 / 0 = NaN.",
       "To be safe on any scores, subtract each row's own maximum (axis=-1, keepdims=True).",
       needs={"softmax", "tokens_as_rows"}, softmax="shift_whole"),
    _m("keys_from_query_weights", "keys projected with the query weights (W_q instead of W_k)",
       "Your keys are computed with the query weights, so K equals Q: each query is scored against the "
       "other queries, and W_k is never used.",
       "Look at the projection of the keys: K comes from the key weights W_k, Q from W_q.",
       needs={"projections"}, keys_from="wq"),
    _m("keys_from_value_weights", "keys projected with the value weights (W_v instead of W_k)",
       "Your keys are computed with the value weights, so K equals V, and W_k is never used.",
       "Look at the projection of the keys: K comes from the key weights W_k, V from W_v.",
       needs={"projections"}, keys_from="wv"),
    _m("queries_from_key_weights", "queries projected with the key weights (W_k instead of W_q)",
       "Your queries are computed with the key weights, so Q equals K: each key is scored against the "
       "other keys, and W_q is never used.",
       "Look at the projection of the queries: Q comes from the query weights W_q, K from W_k.",
       needs={"projections"}, queries_from="wk"),
    _m("queries_from_value_weights", "queries projected with the value weights (W_v instead of W_q)",
       "Your queries are computed with the value weights, so Q equals V, and W_q is never used.",
       "Look at the projection of the queries: Q comes from the query weights W_q, V from W_v.",
       needs={"projections"}, queries_from="wv"),
    # Additive (Bahdanau) attention: score_ij = v . tanh(q_i W1 + k_j W2).
    _m("additive_tanh_missing", "tanh missing from the additive score",
       "Your scores are v . (q W1 + k W2), without the tanh: the score network is then linear, and each "
       "query's scores are its keys' k W2 v plus one number, so every query weighs the keys alike.",
       "Look at the score: v . tanh(q W1 + k W2), the tanh applied to the sum before the product with v.",
       needs={"additive"}, additive="linear"),
    _m("additive_softmax_wrong_axis", "softmax over the wrong axis (over the queries, not the keys)",
       "Your weights are normalised over the queries for each key instead of over the keys for each "
       "query, so each query's weights do not sum to 1.",
       "Look at which axis your softmax sums over: each query's scores against all the keys are one "
       "softmax (the keys' axis, the last one).",
       needs={"additive", "softmax"}, softmax="columns"),
    _m("additive_concatenation_as_sum", "concatenation read as a sum (W1 (q + k))",
       "Your query and key are added before one weight, W1 (q + k), instead of each weighed by its own: "
       "W [q; k] over the concatenation is W1 q + W2 k, with W1 the rows of W that meet q and W2 those "
       "that meet k, so the key's weight W2 is never used.",
       "Look at the score's inside: W1 q + W2 k (W [q; k] is the two blocks of W, each on its own part).",
       needs={"additive"}, additive="summed"),
    # The transformer block around attention, and its parts (blocks.py).
    _m("layer_norm_wrong_axis", "layer norm over the wrong axis (over the tokens, not the features)",
       "Your layer norm takes each feature's mean and variance over the tokens instead of each token's over "
       "its features.",
       "Look at the axis of your mean and variance: a layer norm normalises each token (row) on its own, "
       "over the last axis, keepdims=True.",
       needs={"layer_norm"}, norm="tokens"),
    _m("layer_norm_eps_outside", "eps added outside the square root",
       "Your layer norm divides by sqrt(var) + eps instead of sqrt(var + eps): the same on ordinary tokens, "
       "but not on a token whose features are nearly constant, where eps is what keeps the division finite.",
       "Look at where eps goes: (x - mean) / sqrt(var + eps).",
       needs={"norm_of_tokens"}, norm="eps_outside"),
    _m("layer_norm_unbiased", "unbiased variance in the layer norm (divided by D - 1)",
       "Your layer norm's variance divides by D - 1 (np.var(..., ddof=1), or torch's default for var), where a "
       "layer norm divides by D.",
       "Use the biased variance: np.var(x, axis=-1, keepdims=True), or the mean of the squared deviations.",
       needs={"layer_norm"}, norm="unbiased"),
    _m("layer_norm_no_affine", "layer norm's gamma and beta not applied",
       "Your layer norm normalises but never scales by gamma nor shifts by beta.",
       "Look at the last step of the layer norm: normalised * gamma + beta.",
       needs={"layer_norm"}, norm="no_affine"),
    _m("residual_around_attention_missing", "residual connection around attention missing",
       "The block adds nothing of its input to the attention's output: x + attention(...) became attention(...).",
       "Look at the first sublayer: its output is added to the tokens it was given (the residual).",
       needs={"block"}, residual="no_attention"),
    _m("residual_around_feed_forward_missing", "residual connection around the feed-forward network missing",
       "The block does not add the feed-forward network's input to its output.",
       "Look at the second sublayer: h + FFN(...) (the residual), not FFN(...) alone.",
       needs={"block"}, residual="no_ffn"),
    _m("pre_and_post_ln_swapped", "layer norms in the other order (pre-LN and post-LN swapped)",
       "Your block puts its layer norms where the other order does: before each sublayer (x + f(LN(x))) "
       "where they belong after each residual (LN(x + f(x))), or the other way round.",
       "Look at where each layer norm goes in this assignment's block: post-LN normalises the sum x + f(x), "
       "pre-LN normalises the sublayer's input and adds f(LN(x)) to x.",
       needs={"block"}, block_order="swapped"),
    _m("activation_missing", "activation missing in the feed-forward network",
       "Your feed-forward network applies no activation between its two layers, so it is one linear map.",
       "Look at the hidden layer: act(x W1 + b1) W2 + b2, with the assignment's activation (ReLU or GELU).",
       needs={"feed_forward"}, activation="missing"),
    _m("other_gelu", "the other GELU (the tanh approximation for the exact one, or the reverse)",
       "Your GELU is the other one: GPT-2's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 "
       "x^3))), where the exact 0.5 x (1 + erf(x / sqrt(2))) is asked for, or the reverse. They differ by up "
       "to about 1e-3.",
       "Use the GELU this assignment defines.",
       needs={"gelu"}, activation="other_gelu"),
    _m("relu_for_gelu", "ReLU in the feed-forward network where a GELU is asked for",
       "Your feed-forward network applies max(0, x) between its layers, where this assignment's network "
       "applies a GELU (GPT-2's: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), or the exact one).",
       "Use the GELU this assignment defines in the hidden layer: gelu(x W1 + b1) W2 + b2.",
       needs={"gelu"}, activation="relu"),
    _m("gelu_for_relu", "GELU in the feed-forward network where a ReLU is asked for",
       "Your feed-forward network applies a GELU between its layers, where this assignment's network applies "
       "ReLU, max(0, x).",
       "Use ReLU in the hidden layer: max(0, x W1 + b1) W2 + b2.",
       needs={"relu"}, activation="gelu"),
    _m("scale_flag_ignored", "scale flag ignored (scaled when told not to)",
       "Your function divides the scores by sqrt(d_k) whatever its scale flag says: called with the flag False, "
       "it still scales.",
       "Look at your scale parameter: scale the scores only when it is True.",
       needs={"scale_flag"}, scale="flag_ignored"),
    # The backward pass (backward.py): dV = P^T dO, dS = P * (dP - rowsum(dP * P)) / sqrt(d_k),
    # dQ = dS K, dK = dS^T Q.
    _m("softmax_backward_elementwise", "softmax's backward taken element-wise, s (1 - s)",
       "Your backward multiplies dP by P (1 - P) entry by entry, the diagonal of the softmax's Jacobian "
       "only: each weight depends on every score of its row, so the off-diagonal terms -P_ij P_ik are "
       "missing.",
       "Use the Jacobian-vector product: dS = P * (dP - sum(dP * P, axis=-1, keepdims=True)).",
       needs={"backward"}, softmax_backward="elementwise"),
    _m("backward_scale_missing", "1/sqrt(d_k) missing in the backward",
       "Your forward divides the scores by sqrt(d_k), but your backward does not divide dS by it, so dQ "
       "and dK are sqrt(d_k) times too large (dV is right).",
       "The scores are Q K^T / sqrt(d_k): the chain rule divides dS by sqrt(d_k) before dQ = dS K and "
       "dK = dS^T Q.",
       needs={"backward", "backward_scaled"}, backward_scale="missing"),
    _m("query_key_gradients_swapped", "dQ and dK swapped",
       "Your gradient with respect to Q is the one with respect to K, and the other way round.",
       "dQ = dS K (each query's row of dS weighs the keys); dK = dS^T Q (each key's column weighs the queries).",
       needs={"backward"}, gradients="swapped"),
    _m("transpose_on_the_wrong_gradient", "the transpose on the wrong gradient (dQ = dS^T K, dK = dS Q)",
       "Your dQ multiplies the transpose of dS by K and your dK multiplies dS itself by Q: the transpose "
       "belongs to dK. Where Lq = Lk the shapes still fit, so nothing raises.",
       "dQ = dS K (each query's row of dS weighs the keys); dK = dS^T Q (each key's column weighs the queries).",
       needs={"backward"}, query_gradient="ds_t_k", key_gradient="ds_q"),
    _m("gradient_heads_merged_by_reshape", "the heads' gradients merged by a reshape without moving the heads "
       "axis back",
       "Your backward puts the heads' gradients dQ, dK and dV (H x N x d_k) back together with a reshape to "
       "N x H*d_k alone, so each token's row mixes several tokens' gradients of one head.",
       "Move the heads axis back next to d_k before the reshape (np.swapaxes(g, -3, -2), or transpose(0, 2, 1, 3) "
       "with a batch), as the forward merges the heads' outputs.",
       needs={"backward_heads"}, gradient_heads="merged_by_reshape"),
    _m("output_weight_gradient_transposed", "the output projection's weight gradient transposed",
       "Your gradient of the output projection's weight is laid out the other way round from the weight "
       "itself (in x out where the weight is out x in, or the reverse), so it cannot update the weight.",
       "A weight's gradient has the weight's own shape: for out = concat W_o^T + b_o (W_o out x in), "
       "dW_o = dO^T concat; for out = concat W_o, dW_o = concat^T dO.",
       needs={"backward_projection"}, output_weight_gradient="transposed"),
    _m("input_gradients_swapped", "the key and value inputs' gradients swapped",
       "Your backward returns the gradient of the value input where the key input's is asked for, and the other "
       "way round.",
       "The key input's gradient comes through W_k from dK, the value input's through W_v from dV: return them in "
       "the order of the forward's inputs.",
       needs={"backward_three_inputs"}, input_gradients="swapped"),
    _m("key_gradient_not_transposed", "dK computed as dS Q instead of dS^T Q",
       "Your dK multiplies dS by Q without transposing dS, so row j of dK sums over query j's row of dS "
       "instead of key j's column.",
       "Look at the shapes: dS is Lq x Lk and Q is Lq x d_k, so dK (Lk x d_k) = dS^T Q.",
       needs={"backward"}, key_gradient="ds_q"),
    _m("softmax_backward_wrong_axis", "the softmax backward's row sum taken over the wrong axis",
       "Your sum of dP * P is taken over the queries (axis 0) instead of over each query's keys, so each "
       "row of dS is corrected by the wrong numbers.",
       "Each query's softmax is over its keys: sum(dP * P, axis=-1, keepdims=True).",
       needs={"backward"}, row_sum="columns"),
    _m("masked_positions_given_gradient", "masked positions given gradient (the softmax's backward without the mask)",
       "Your softmax's backward uses weights computed without the mask, so scores the mask hides get "
       "gradient and it reaches Q and K through keys the query never attended.",
       "Take the backward through the weights of the masked softmax: a masked score is replaced, so its "
       "gradient is 0 (P is 0 there).",
       needs={"backward_mask"}, backward_mask="ignored"),
    _m("scores_multiplied_by_scale", "scores multiplied by sqrt(d_k) instead of divided",
       "Your scores are multiplied by sqrt(d_k) where they should be divided by it, so they are d_k times "
       "too large: the softmax saturates, each query putting nearly all of its weight on one key.",
       "Look at your scaling: Q K^T / sqrt(d_k) divides the scores (or the queries) by sqrt(d_k).",
       needs={"scaled"}, scale="times"),
    _m("values_from_key_weights", "values projected with the key weights (W_k instead of W_v)",
       "Your values are computed with the key weights, so V equals K, and W_v is never used.",
       "Look at the projection of the values: V comes from the value weights W_v, K from W_k.",
       needs={"projections", "output"}, values_from="wk"),
    _m("values_from_query_weights", "values projected with the query weights (W_q instead of W_v)",
       "Your values are computed with the query weights, so V equals Q (in self-attention), and W_v is "
       "never used.",
       "Look at the projection of the values: V comes from the value weights W_v, Q from W_q.",
       needs={"projections", "output"}, values_from="wq"),
    _m("heads_merged_by_reshape", "heads merged with a reshape that mixes tokens and features (the heads axis "
       "not moved back)",
       "Your heads' outputs, held as (heads, tokens, d_v), are reshaped straight to (tokens, heads * d_v) "
       "without moving the heads axis back next to the features first, so each row of the result holds "
       "pieces of several tokens instead of one token's heads side by side.",
       "Look at your merge: move the heads axis back behind the tokens (a transpose to (tokens, heads, d_v)) "
       "before the reshape, undoing the split in reverse order.",
       needs={"stacked_heads", "fused_heads"}, heads="merged_by_reshape"),
    _m("query_bias_missing", "query bias missing",
       "The query bias is never added: Q is the product with the weights alone, while K and V have their "
       "biases.",
       "Look at the projection of the queries: it adds its bias, as those of the keys and values do.",
       needs={"biases"}, biases="missing_q"),
    _m("value_bias_missing", "value bias missing",
       "The value bias is never added: V is the product with the weights alone, while Q and K have their "
       "biases.",
       "Look at the projection of the values: it adds its bias, as those of the queries and keys do.",
       needs={"biases"}, biases="missing_v"),
)

# Mistakes that give the reference on ordinary inputs and differ only where exp() leaves its
# range: no sheet asks for the max-subtraction, so only the numerical_stability check names them.
HARMLESS = ("softmax_overflow", "max_whole_matrix")

# Precision slips: the reference's values (or a mistake's) returned with fewer digits than the
# checks compare, rounded as the sheet prints them or computed in a smaller float type. They
# predict no values of their own, only fewer digits of them, so they are told by the precision of
# what is returned (grader/judging/explain.py, precision_of) and kept apart from MISTAKES; the
# checks still compare to their tolerance, so a slip keeps only the points of the checks it
# passes. `{precision}` in an explanation is what was found ("rounded to 4 decimals").
PRECISION_SLIPS: tuple[Mistake, ...] = (
    _m("rounded", "values rounded before they are returned",
       "Your values are {precision}: they agree with attention to that many digits, but the checks compare "
       "to a relative tolerance of about 1e-5, and rounded weights no longer sum exactly to 1.",
       "Return the values as computed; round only when printing them (np.round on a copy, or "
       "np.set_printoptions(precision=4))."),
    _m("reduced_precision", "computed in reduced precision",
       "Your values carry {precision}: they agree with attention to that precision, but the checks "
       "compare to a relative tolerance of about 1e-5, which float64 (NumPy's default) meets.",
       "Compute in float64: do not convert the inputs or the results to float16 or float32 "
       "(.astype(np.float64) if they come in another dtype)."),
)
ROUNDED, REDUCED_PRECISION = PRECISION_SLIPS


def _changed(v: Variant) -> dict:
    return {f.name: getattr(v, f.name) for f in fields(Variant) if getattr(v, f.name) != getattr(REFERENCE, f.name)}


def combined(a: Variant, b: Variant) -> Variant | None:
    """Both mistakes made at once, or None when they change the same step."""
    first, second = _changed(a), _changed(b)
    if set(first) & set(second):
        return None
    return Variant(**first, **second)


REFERENCE = Variant()


def computable(case: Case, v: Variant) -> bool:
    """Whether code making the variant's mistakes runs on the case's shapes at all; where it
    does not, `mistaken_attention` predicts the reference (see _possible), while the student's
    call raises."""
    return _possible(case, v) == v
