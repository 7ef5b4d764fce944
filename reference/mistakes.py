"""Known mistakes, computed by the trusted side in the canonical form.

Each mistake is the reference computation with one thing done wrong. It returns the same
structure as `attention.attention`, so every calling convention can turn it into the parts
a student's function would have returned had it made that mistake.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from .attention import Case, softmax_rows


@dataclass(frozen=True)
class Variant:
    """How the computation goes wrong; the defaults are the reference."""

    scale: str = "sqrt_dk"          # sqrt_dk | none | sqrt_D | twice | after_softmax
    softmax: str = "rows"           # rows | columns | whole | naive
    scores: str = "qk"              # qk | kq
    values: str = "v"               # v | x
    combine: str = "wv"             # wv | transposed
    heads: str = "blocks"           # blocks | interleaved | tokens | reversed | stacked
    projection: str = "right"       # right | missing | transposed
    biases: str = "after"           # after | missing | before
    output: str = "plain"           # plain | transposed


@dataclass(frozen=True)
class Mistake:
    id: str
    title: str
    explanation: str
    hint: str
    variant: Variant
    needs: frozenset = field(default_factory=frozenset)   # features the convention must have


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


def _project(x, w, b, how):
    if b is None or how == "missing":
        return x @ w
    if how == "before":
        return (x + b) @ w if b.shape[0] == x.shape[1] else x @ w + b
    return x @ w + b


def _head(case: Case, head, v=Variant()):
    x = case.x.astype(np.float64)
    q = _project(x, head.wq, head.bq, v.biases)
    k = _project(x, head.wk, head.bk, v.biases)
    values = _project(x, head.wv, head.bv, v.biases) if v.values == "v" else x
    raw = q @ k.T if v.scores == "qk" else k @ q.T
    d_k = k.shape[1]
    if not case.scaled or v.scale in ("none", "after_softmax"):
        s = raw
    elif v.scale == "sqrt_D":
        s = raw / np.sqrt(case.d)
    elif v.scale == "twice":
        s = raw / d_k
    else:
        s = raw / np.sqrt(d_k)
    w = _softmax(s, v.softmax)
    if case.scaled and v.scale == "after_softmax":
        w = w / np.sqrt(d_k)
    out = (w.T if v.combine == "transposed" else w) @ values
    return {"q": q, "k": k, "v": values, "scores": s, "weights": w, "output": out}


def _split_heads(case: Case, v: Variant) -> list:
    """The heads a student's split produces, as canonical heads."""
    if v.heads != "interleaved" or len(case.heads) == 1:
        return list(case.heads)
    from .attention import Head
    n = len(case.heads)
    fused = {name: case.fused(name) for name in ("wq", "wk", "wv")}
    return [Head(fused["wq"][:, i::n], fused["wk"][:, i::n], fused["wv"][:, i::n]) for i in range(n)]


def mistaken_attention(case: Case, v: Variant) -> dict:
    heads = _split_heads(case, v)
    if v.heads == "tokens":
        per_head = _token_heads(case, v)
    else:
        per_head = [_head(case, h, v=v) for h in heads]
    outputs = [h["output"] for h in per_head]
    if v.heads == "reversed":
        outputs = outputs[::-1]
    if v.heads == "stacked":
        concat = np.concatenate(outputs, axis=0)
    elif v.heads == "tokens":
        concat = np.concatenate(outputs, axis=0)
    else:
        concat = np.concatenate(outputs, axis=1)
    if case.wo is None or v.projection == "missing" or concat.shape[1] != case.wo.shape[0]:
        output = concat
    elif v.projection == "transposed":
        output = concat @ case.wo.T if case.wo.shape[0] == case.wo.shape[1] else concat @ case.wo
    else:
        output = concat @ case.wo
    if v.output == "transposed":
        output = output.T
    return {"heads": per_head, "concat": concat, "output": output}


def _token_heads(case: Case, v: Variant) -> list:
    """Heads split over tokens: each block of N/H tokens attends only within itself, with
    all of the features."""
    n_heads = len(case.heads)
    fused = {name: case.fused(name) for name in ("wq", "wk", "wv")}
    from .attention import Head
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


def _m(id, title, explanation, hint, needs=(), **variant):
    return Mistake(id, title, explanation, hint, Variant(**variant), frozenset(needs))


# Order matters: when several match, the first is named.
MISTAKES: tuple[Mistake, ...] = (
    _m("softmax_wrong_axis", "softmax over the wrong axis",
       "Your weights are normalised down each column (over the queries) instead of along each row "
       "(over the keys), so each query's weights do not sum to 1.",
       "Look at which axis your softmax sums over: softmax(Q K^T / sqrt(d_k)) is taken row by row.",
       needs={"softmax"}, softmax="columns"),
    _m("softmax_whole_matrix", "softmax over the whole matrix",
       "Your softmax normalises over every entry of the score matrix at once, so the whole matrix sums "
       "to 1 instead of each row.",
       "Look at the sum in your softmax: it should be taken separately for each row.",
       needs={"softmax"}, softmax="whole"),
    _m("no_scaling", "scores not scaled",
       "The scores Q K^T are never divided by sqrt(d_k).",
       "Look at equation (1) on the sheet: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.",
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
       needs={"scores"}, scores="kq"),
    _m("transposed_attention", "attention matrix transposed before it is applied to V",
       "The weights are transposed before they multiply the values, so each output mixes the values "
       "with another query's weights (seed 003's own multi-head function does this).",
       "Look at the product with V: output = weights @ V with the weights as computed, one row per query.",
       needs={"softmax", "output"}, combine="transposed"),
    _m("values_from_x", "values taken from X instead of V",
       "The weights multiply the inputs X rather than the values V = X W_v.",
       "Look at what the weights are applied to: the projected values V.",
       needs={"projections", "output"}, values="x"),
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
       needs={"heads"}, heads="stacked"),
    _m("projection_missing", "output projection missing",
       "The concatenated heads are returned without the final output projection.",
       "Look at the last step on the sheet: the concatenated heads are multiplied by the output projection.",
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
       "Look at the shape you return: one row per token (one column per token in the column-major sheet).",
       needs={"output"}, output="transposed"),
    _m("softmax_overflow", "softmax without max-subtraction overflows",
       "exp() of scores this large overflows to inf, and inf / inf gives NaN.",
       "Subtract each row's maximum before exponentiating; softmax does not change under that shift.",
       needs={"softmax"}, softmax="naive"),
)


def _changed(v: Variant) -> dict:
    return {f.name: getattr(v, f.name) for f in fields(Variant) if getattr(v, f.name) != getattr(REFERENCE, f.name)}


def combined(a: Variant, b: Variant) -> Variant | None:
    """Both mistakes made at once, or None when they change the same step."""
    first, second = _changed(a), _changed(b)
    if set(first) & set(second):
        return None
    return Variant(**first, **second)


REFERENCE = Variant()
