"""The trusted attention mathematics, in one canonical form.

Tokens are rows: X is N x D. Every head has its own projection matrices (D x d_k, D x d_k,
D x d_v) and optional bias vectors; an optional output projection Wo maps the concatenated
heads (N x H*d_v) to the output, with an optional bias bo. Every calling convention the grader
knows is translated to and from this form, so the mathematics lives here once.

Cross-attention: with `memory` (Lk x D_mem), queries come from X and keys and values from the
memory, so W_k and W_v are D_mem x d_k and D_mem x d_v; D_mem may differ from D, and Lk from
Lq = N. Without it, the memory is X itself (self-attention).

Three input sequences (the framework form `forward(query, key, value)`): with `values` too,
the keys are projected from the memory and the values from `values` (Lk x D_mem as well), so
K = memory W_k and V = values W_v. Self-attention is the case query = key = value: no memory
and no values, X is all three.

Masks (see `masks.py`): `mask` is the attention mask a course passes (Lq x Lk, True where query
i may attend key j), `key_mask` its key-padding mask for this sequence (Lk, True for a real
key), and `causal` a causal mask the function builds itself (query i attends keys j <= i); a
key is attended where all of them allow it. `fully_masked` says what a row with no key left
gives. With none of them the computation is exactly the unmasked one.

Additive (Bahdanau) attention: with `additive`, query i and key j are scored by a small
network instead of a dot product, score_ij = v_a . tanh(q_i W1 + k_j W2), never scaled; the
softmax over the keys and the weighted sum of the values are as above. W1 is d_q x d_a and W2
d_k x d_a, so queries and keys may differ in width. A course's single weight on the
concatenation, W [q_i; k_j], is W1 stacked on W2.

Blocks (blocks.py): with `block`, the case is a transformer block around its attention (post-LN
or pre-LN, with a feed-forward network), or a part of one on its own (layer norm, the network),
and its output is the block's.

Backward passes (backward.py): with `d_output`, the gradient of a loss with respect to the
output (Lq x H*d_v, each head's block of columns its own), every head's result holds the
gradients dq, dk and dv of that loss with respect to its Q, K and V too.

Batches: a case is one sequence (one batch element). A course's B x N x D inputs are B cases
sharing the weights (`batch_elements`), computed one by one and stacked (`batched`); a
heads axis (B x H x N x d) is a representation of the fused projections (`split_heads`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .backward import attention_backward, heads_upstream, projections_backward
from .blocks import Block, attention_input, finish
from .masks import FULLY_MASKED_RULES, causal_keep, combine, masked_softmax


@dataclass(frozen=True)
class Head:
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None


@dataclass(frozen=True)
class Additive:
    """The scoring network of additive attention: score_ij = va . tanh(q_i w1 + k_j w2)."""
    w1: np.ndarray    # d_q x d_a: the query's weight
    w2: np.ndarray    # d_k x d_a: the key's weight
    va: np.ndarray    # d_a: the score vector

    @property
    def concatenated(self) -> np.ndarray:
        """The one weight on [q; k] that courses writing W [q; k] hand out: (d_q + d_k) x d_a."""
        return np.concatenate([self.w1, self.w2], axis=0)


@dataclass(frozen=True)
class Case:
    """One attention problem: inputs only, never expected values."""

    x: np.ndarray
    heads: tuple[Head, ...]
    wo: np.ndarray | None = None
    scaled: bool = True
    label: str = ""
    memory: np.ndarray | None = None     # cross-attention: keys and values from these Lk rows
    values: np.ndarray | None = None     # three inputs: values from these Lk rows, keys from the memory
    mask: np.ndarray | None = None       # Lq x Lk, True where query i may attend key j
    key_mask: np.ndarray | None = None   # Lk, True for a real key, False for padding
    causal: bool = False                 # the function masks keys j > i itself
    fully_masked: str = "zeros"          # what a row with no key left gives: masks.FULLY_MASKED_RULES
    bo: np.ndarray | None = None         # output projection bias
    additive: Additive | None = None     # additive (Bahdanau) scores instead of dot products
    block: Block | None = None           # the transformer block around attention, or a part of it
    scale_off: bool = False              # a function with a scale flag is told not to scale (flag False)
    d_output: np.ndarray | None = None   # a backward pass: the upstream gradient, Lq x H*d_v
    # A batch: the other elements of a batched function's input (this case is element 0),
    # sharing its weights; each is a case of its own and is computed on its own.
    batch_rest: tuple["Case", ...] = ()

    def __post_init__(self):
        if self.fully_masked not in FULLY_MASKED_RULES:
            raise ValueError(f"fully_masked must be one of {', '.join(FULLY_MASKED_RULES)}, "
                             f"not {self.fully_masked!r}")
        for name in ("mask", "key_mask"):
            value = getattr(self, name)
            if value is not None and np.asarray(value).dtype != bool:
                # A course's 0 / -inf or 0/1 mask is converted by masks.FORMS, never guessed here.
                raise ValueError(f"the canonical {name} is boolean (True = may attend), not {np.asarray(value).dtype}")
        if self.mask is not None and np.shape(self.mask) != (self.n, self.lk):
            raise ValueError(f"the mask is {np.shape(self.mask)}, not Lq x Lk = {(self.n, self.lk)}")
        if self.key_mask is not None and np.shape(self.key_mask) != (self.lk,):
            raise ValueError(f"the key mask is {np.shape(self.key_mask)}, not Lk = ({self.lk},)")
        if self.values is not None and (self.memory is None or np.shape(self.values)[0] != self.lk):
            # Each key has its value: the two sequences are one set of Lk tokens read twice.
            raise ValueError("the values' sequence needs the keys' one (memory) of the same length")
        if self.d_output is not None:
            # Of the output: through the output projection where there is one, else the heads'.
            width = sum(h.wv.shape[1] for h in self.heads) if self.wo is None else self.wo.shape[1]
            if np.shape(self.d_output) != (self.n, width):
                raise ValueError(f"the upstream gradient is {np.shape(self.d_output)}, not Lq x the output's "
                                 f"width = {(self.n, width)}")

    @property
    def elements(self) -> tuple["Case", ...]:
        """The batch this case heads: itself, then the rest (one element when unbatched)."""
        return (self, *self.batch_rest)

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def d(self) -> int:
        return self.x.shape[1]

    @property
    def keys(self) -> np.ndarray:
        """The sequence keys (and values, without their own) are projected from: the memory, or X."""
        return self.x if self.memory is None else self.memory

    @property
    def value_source(self) -> np.ndarray:
        """The sequence values are projected from: their own, else the keys' one."""
        return self.keys if self.values is None else self.values

    @property
    def lk(self) -> int:
        return self.keys.shape[0]

    @property
    def keep(self) -> np.ndarray | None:
        """Lq x Lk, True where query i may attend key j; None when every key may be attended."""
        keep = combine(self.mask, None if self.key_mask is None else self.key_mask[None, :],
                       causal_keep(self.n, self.lk) if self.causal else None)
        return None if keep is None else np.broadcast_to(keep, (self.n, self.lk)).copy()

    def permuted(self, order: np.ndarray) -> "Case":
        """The tokens reordered. In self-attention they are the keys too, so the masks follow
        on both axes; with a memory only the queries move. Under a causal mask the order is the
        point, so no permutation of it is the same problem."""
        if self.causal:
            raise ValueError("a causal case has no permuted equivalent: the mask depends on the order")
        mask, key_mask = self.mask, self.key_mask
        if mask is not None:
            mask = mask[order] if self.memory is not None else mask[order][:, order]
        if key_mask is not None and self.memory is None:
            key_mask = key_mask[order]
        d_output = None if self.d_output is None else self.d_output[order]
        return replace(self, x=self.x[order], mask=mask, key_mask=key_mask, d_output=d_output,
                       batch_rest=tuple(e.permuted(order) for e in self.batch_rest),
                       label=f"{self.label} (tokens permuted)")

    def memory_permuted(self, order: np.ndarray) -> "Case":
        """The memory's rows reordered, with the mask's key axis: keys and values move together,
        so a cross-attention output does not change."""
        if self.memory is None:
            raise ValueError("a self-attention case has no memory to permute")
        if self.causal:
            raise ValueError("a causal case has no permuted equivalent: the mask depends on the order")
        values = None if self.values is None else self.values[order]
        return replace(self, memory=self.memory[order], values=values,
                       mask=None if self.mask is None else self.mask[:, order],
                       key_mask=None if self.key_mask is None else self.key_mask[order],
                       batch_rest=tuple(e.memory_permuted(order) for e in self.batch_rest),
                       label=f"{self.label} ({'memory' if self.values is None else 'key and value inputs'} permuted)")

    def as_self_attention(self, same_array: bool) -> "Case":
        """The problem with X as its query, key and value sequences: the same array given three
        times (no memory), or equal copies of it. Its keys' weights must take X's width."""
        if self.heads[0].wk.shape[0] != self.d or self.heads[0].wv.shape[0] != self.d:
            raise ValueError("the key and value weights do not take X's width, so X cannot be the keys")
        if self.lk != self.n and (self.mask is not None or self.key_mask is not None):
            raise ValueError("the masks are for another number of keys than X has tokens")
        memory, values = (None, None) if same_array else (self.x.copy(), self.x.copy())
        how = "one array passed three times" if same_array else "equal copies"
        return replace(self, memory=memory, values=values, label=f"{self.label} (query = key = value: {how})",
                       batch_rest=tuple(e.as_self_attention(same_array) for e in self.batch_rest))

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
    keys, values = case.keys.astype(np.float64), case.value_source.astype(np.float64)
    return _project(x, head.wq, head.bq), _project(keys, head.wk, head.bk), _project(values, head.wv, head.bv)


def scores(q: np.ndarray, k: np.ndarray, scaled: bool = True) -> np.ndarray:
    s = q @ k.T
    return s / np.sqrt(k.shape[1]) if scaled else s


def additive_scores(q: np.ndarray, k: np.ndarray, additive: Additive) -> np.ndarray:
    """Lq x Lk: va . tanh(q_i w1 + k_j w2) for every query i and key j."""
    hidden = (q @ additive.w1)[:, None, :] + (k @ additive.w2)[None, :, :]
    return np.tanh(hidden) @ additive.va


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scaled: bool = True,
           keep: np.ndarray | None = None, fully_masked: str = "zeros",
           additive: Additive | None = None) -> dict[str, np.ndarray]:
    """The scores are the raw scaled products (or the additive network's), unmasked; masked
    keys get exactly zero weight."""
    s = scores(q, k, scaled) if additive is None else additive_scores(q, k, additive)
    w = softmax_rows(s) if keep is None else masked_softmax(s, keep, fully_masked)
    return {"scores": s, "weights": w, "output": w @ v}


def attention(case: Case) -> dict:
    """Everything a convention may ask for: per-head q/k/v, scores, weights, outputs, result;
    for a block (or a part of one), its output, attention's parts those of the attention inside."""
    if case.block is None:
        return _attention(case)
    inner = replace(case, x=attention_input(case.block, case.x), block=None)
    return finish(case.block, case.x, _attention(inner) if case.block.attends else {})


def _attention(case: Case) -> dict:
    keep = case.keep
    per_head = []
    start = 0
    upstream = None if case.d_output is None else heads_upstream(case)
    for head in case.heads:
        q, k, v = head_projections(case, head)
        attended = attend(q, k, v, case.scaled, keep, case.fully_masked, case.additive)
        per_head.append({"q": q, "k": k, "v": v, **attended})
        if upstream is not None:
            d_output = upstream[:, start:start + v.shape[1]]
            per_head[-1].update(attention_backward(q, k, v, d_output, case.scaled, keep, case.fully_masked))
        start += v.shape[1]
    concat = np.concatenate([h["output"] for h in per_head], axis=1)
    output = concat if case.wo is None else concat @ case.wo
    if case.wo is not None and case.bo is not None:
        output = output + case.bo
    result = {"heads": per_head, "concat": concat, "output": output}
    if upstream is not None:
        result["gradients"] = projections_backward(case, per_head, concat)
    return result


def batch_elements(x: np.ndarray, heads: tuple[Head, ...], *, memory: np.ndarray | None = None,
                   values: np.ndarray | None = None, mask: np.ndarray | None = None,
                   key_mask: np.ndarray | None = None, label: str = "", **common) -> list[Case]:
    """A course's batch as canonical cases, one per element, sharing the weights: x is
    B x Lq x D, memory (and values) B x Lk x D_mem, mask Lq x Lk (shared) or B x Lq x Lk,
    key_mask B x Lk.
    `common` holds the other Case fields (wo, bo, scaled, causal, fully_masked)."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError(f"a batch's tokens are B x N x D, not {x.shape}")
    b = x.shape[0]

    def element(a, i, per_element_ndim):
        if a is None:
            return None
        a = np.asarray(a)
        return a[i] if a.ndim == per_element_ndim + 1 else a

    return [Case(x=x[i], heads=tuple(heads), memory=element(memory, i, 2), values=element(values, i, 2),
                 mask=element(mask, i, 2), key_mask=element(key_mask, i, 1),
                 label=f"{label} [batch element {i}]".strip(), **common)
            for i in range(b)]


def batched(cases: list[Case]) -> dict:
    """attention() of each case, stacked on a leading batch axis, as a batched function
    returns it: see `stack_batch`."""
    if not cases:
        raise ValueError("a batch has at least one element")
    return stack_batch([attention(c) for c in cases])


def stack_batch(results: list[dict]) -> dict:
    """Per-element results stacked on a leading batch axis: output B x Lq x D_out and concat
    B x Lq x H*d_v, and q, k, v, scores and weights with a heads axis, B x H x L x d (scores
    and weights B x H x Lq x Lk)."""
    out = {}
    part = "output"
    try:
        for part in ("output", "concat"):
            out[part] = np.stack([r[part] for r in results])
        for part in ("q", "k", "v", "scores", "weights"):
            out[part] = np.stack([np.stack([h[part] for h in r["heads"]]) for r in results])
    except ValueError as e:
        raise ValueError(f"the batch's elements differ in the shape of {part}: {e}") from None
    return out


def split_heads(fused: np.ndarray, n_heads: int) -> np.ndarray:
    """(..., N, H*d) -> (..., H, N, d): head i is the i-th contiguous block of features."""
    *lead, n, width = fused.shape
    if width % n_heads:
        raise ValueError(f"{width} features do not split into {n_heads} heads")
    return np.swapaxes(fused.reshape(*lead, n, n_heads, width // n_heads), -2, -3)


def merge_heads(split: np.ndarray) -> np.ndarray:
    """(..., H, N, d) -> (..., N, H*d), the inverse of split_heads."""
    *lead, h, n, d = split.shape
    return np.swapaxes(split, -2, -3).reshape(*lead, n, h * d)
