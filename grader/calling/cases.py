"""Seeded test inputs for a convention: randomized shapes, integer and large-score cases."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from grader.reference.attention import Additive, Case, Head, attention
from grader.reference.blocks import Block, FeedForward, Norm

from grader.calling.conventions import Convention

# (N, D, H): N != D, a single token, a long sequence, several H that divide D.
RANDOM_SHAPES = ((4, 6, 2), (1, 4, 2), (64, 8, 4), (7, 12, 3), (5, 6, 3))
# A batched convention's batch size for each random shape, one of them a batch of one (a
# softmax over the batch axis gives all ones there); the other cases' sizes are their own.
RANDOM_BATCHES = (3, 2, 2, 1, 3)
BASE_BATCH = 3
# Seed 002's largest score is about 756: past exp's float64 range (about 709).
LARGE_SCORE = 800.0
# Cross-attention: the memory always has other than N tokens (Lk = N + 2), and a width of its
# own (D_mem = D + 2) from this many query tokens on. The shorter cases keep D_mem = D, so that
# a function taking its keys and values from the wrong sequence still runs and is named.
MEMORY_EXTRA_TOKENS = 2
WIDE_MEMORY_FROM = 7
# Additive attention: the score network's hidden width is this much more than d_k, and from
# WIDE_MEMORY_FROM query tokens on the queries are wider than the keys by QUERY_EXTRA_WIDTH
# (a decoder's state beside an encoder's); the shorter cases keep them equally wide, so that
# a query and a key added before one weight (W1 (q + k)) still run and are named.
SCORE_EXTRA_WIDTH = 1
QUERY_EXTRA_WIDTH = 2
# Three inputs (query, key, value): the key and value sequences are as long and as wide as X's
# on the shorter cases, so that a function reading the query input for its keys or values
# still runs and is named, and longer and wider (as a memory is) from WIDE_MEMORY_FROM on.
# Q, K and V given: from WIDE_MEMORY_FROM query tokens on, each head's values are one feature
# wider than its queries and keys (d_v = d_k + 1, as PyTorch's (N, ..., S, Ev) allows), so that
# a function assuming Ev == E (a reshape by the keys' width) fails there; the shorter cases keep
# d_v = d_k, so that such a function's other mistakes still show. Not where the function splits
# fused heads itself (`multi_head_attention(Q, K, V, n_heads)`): a course handing out V = X W_v
# with W_v shaped like W_q may rightly split V by the queries' d_k, as seed qkv's sample does.
WIDER_VALUES = 1


def memory_shape(n: int, d: int) -> tuple[int, int]:
    return n + MEMORY_EXTRA_TOKENS, d + 2 if n >= WIDE_MEMORY_FROM else d


def key_value_shape(conv: Convention, n: int, d: int) -> tuple[int, int]:
    """The shape of the sequence keys (and values) are projected from: a memory's, or the key
    and value inputs'; X's width when one matrix projects Q, K and V side by side, or when the
    object is made for one model width (its layers sized by it)."""
    rows, width = memory_shape(n, d)
    if conv.three_inputs and n < WIDE_MEMORY_FROM:
        rows = n
    return rows, d if conv.packed or conv.sized_by_model else width


def head_count(conv: Convention, requested: int) -> int:
    return conv.head_count(requested)


def value_width(conv: Convention, n: int, d_k: int) -> int:
    """Each head's value width d_v: wider than d_k on the longer cases of a function given V
    (it takes no projection, bias or output projection whose shapes would follow) that does not
    split fused heads itself."""
    given_values = conv.input_stage == 1 and "v" in conv.roles and not conv.splits_heads
    return d_k + WIDER_VALUES if given_values and n >= WIDE_MEMORY_FROM else d_k


def random_case(conv: Convention, rng: np.random.Generator, n: int, d: int, h: int,
                label: str = "", integral: bool = False, batch: int = 1) -> Case:
    """A case fitting the convention. Single-head conventions get d_k = D / h, so per-head
    dimensions other than D are exercised unless the convention needs square weights. A
    batched convention's case is a batch of `batch` elements sharing the weights."""
    n_heads = head_count(conv, h)
    d_k = d if conv.square else d // h
    if conv.heads != "one" or conv.unit != "attention":
        d_k = d // n_heads   # a block's attention gives back D features, for its residual

    def matrix(rows, cols):
        if integral and conv.int_inputs == "qkv":
            return rng.integers(-1, 2, size=(rows, cols)).astype(np.float64)
        return rng.normal(size=(rows, cols))

    d_v = value_width(conv, n, d_k)
    heads = []
    for _ in range(n_heads):
        biases = [rng.normal(size=d_k) if role in conv.bias_roles else None for role in ("bq", "bk", "bv")]
        heads.append(Head(matrix(d, d_k), matrix(d, d_k), matrix(d, d_v), *biases))
    x: np.ndarray
    if integral:
        x = rng.integers(-2, 3, size=(n, d))
    else:
        x = rng.normal(size=(n, d))
    wo = rng.normal(size=(n_heads * d_k, d)) if conv.projection else None
    batch = batch if conv.batched else 1
    # H only where the convention has heads: a single-head course has no H to speak of.
    label = label or f"random N = {n}, D = {d}" + (f", H = {n_heads}" if conv.heads != "one" else "")
    if d_v != d_k:   # what a function assuming Ev == E fails on: said where the student reads the case
        label += f", d_k = {d_k}, d_v = {d_v}"
    case = Case(x=x, heads=tuple(heads), wo=wo, label=f"{label}, B = {batch}" if conv.batched else label)
    if conv.cross:
        rows, width = key_value_shape(conv, n, d)
        case = with_course_features(case, rng, memory_rows=rows, d_memory=width, values=conv.three_inputs,
                                    given_keys=conv.input_stage > 0)
        if integral and case.memory is not None:   # with_course_features gave it one
            values = None if case.values is None else rng.integers(-2, 3, size=case.values.shape)
            case = replace(case, memory=rng.integers(-2, 3, size=case.memory.shape), values=values)
    case = with_convention_features(conv, with_convention_weights(conv, case, rng), rng)
    rest = tuple(_other_element(conv, case, rng, i, integral) for i in range(1, batch))
    return conv.prepare(_shared_mask_leaves_a_key(conv, replace(case, batch_rest=rest)))


# A block's feed-forward network is this many times wider than D (a course's 4, smaller here).
FFN_WIDTH = 2


def with_block(conv: Convention, case: Case, rng: np.random.Generator, small: bool = False) -> Case:
    """The case with what the convention's unit adds around (or instead of) attention: its layer
    norms (a scale around 1, so that a norm left unscaled shows), its feed-forward network (F =
    FFN_WIDTH * D + 1, so that W1 and W2 transposed do not fit), the activation and eps."""
    if conv.unit == "attention":
        return case
    d = case.d

    def draw(*shape):
        return rng.integers(-4, 5, size=shape) / 2 if small else rng.normal(size=shape)

    def norm():
        return Norm(gamma=1.0 + draw(d) / 2, beta=draw(d))

    width = FFN_WIDTH * d + 1
    ffn = FeedForward(w1=draw(d, width), b1=draw(width), w2=draw(width, d), b2=draw(d))
    two = conv.unit in ("post_ln", "pre_ln")
    block = Block(unit=conv.unit, norm1=norm() if conv.unit != "feed_forward" else None,
                  norm2=norm() if two else None, ffn=ffn if conv.unit != "layer_norm" else None,
                  activation=conv.activation, eps=conv.eps)
    x = case.x
    if conv.norm_reads_tokens and case.n > 1:
        # One token with nearly constant features: its variance is far below eps, so where eps
        # goes shows. (Integer tokens stay whole: a constant row, variance 0.)
        x = x.astype(np.float64).copy() if not np.issubdtype(x.dtype, np.integer) else x.copy()
        x[-1] = x[-1].mean() + (0 if np.issubdtype(x.dtype, np.integer) else 1e-4 * (x[-1] - x[-1].mean()))
    return replace(case, block=block, x=x)


def with_convention_weights(conv: Convention, case: Case, rng: np.random.Generator, small: bool = False) -> Case:
    """The case with the weights the convention's roles add or tie: an additive score network
    (on queries wider than the keys from WIDE_MEMORY_FROM tokens on), values that are the keys
    (role kv), and a block's norms and network. `small`: the entries drawn in halves, as a
    printed cell shows them."""
    case = with_block(conv, case, rng, small)
    if conv.tied_values:
        case = replace(case, heads=tuple(replace(h, wv=h.wk, bv=h.bk) for h in case.heads))
    if not conv.additive:
        return case
    head = case.heads[0]
    d_k = head.wk.shape[1]
    d_q = d_k + (QUERY_EXTRA_WIDTH if case.n >= WIDE_MEMORY_FROM else 0)
    d_a = d_k + SCORE_EXTRA_WIDTH

    def draw(*shape):
        return rng.integers(-4, 5, size=shape) / 2 if small else rng.normal(size=shape)

    if d_q != head.wq.shape[1]:
        head = replace(head, wq=draw(head.wq.shape[0], d_q), bq=None if head.bq is None else draw(d_q))
    additive = Additive(w1=draw(d_q, d_a), w2=draw(d_k, d_a), va=draw(d_a))
    return replace(case, heads=(head,), additive=additive)


def _other_element(conv: Convention, first: Case, rng: np.random.Generator, index: int, integral: bool) -> Case:
    """Element `index` of a batch headed by `first`: new tokens (and memory), its own masks,
    the same weights. A mask the batch shares (shape Lq x Lk) is the first element's."""
    def like(a):
        return None if a is None else rng.integers(-2, 3, size=a.shape) if integral else rng.normal(size=a.shape)

    element = replace(first, x=like(first.x), memory=like(first.memory), values=like(first.values), mask=None,
                      key_mask=None, causal=False, label=f"{first.label} [batch element {index}]")
    element = with_convention_features(conv, element, rng, element=index)
    if any(p.role == "mask" and conv.mask_shape(p) == "Lq x Lk" for p in conv.flat):
        element = replace(element, mask=first.mask)
    return element


def _shared_mask_leaves_a_key(conv: Convention, case: Case) -> Case:
    """The batch, its shared mask (Lq x Lk) keeping the first key for each query that would
    have no real key left in some element: the elements pad different keys, and no query of
    the grader's cases is left with nothing to attend."""
    shared = any(p.role == "mask" and conv.mask_shape(p) == "Lq x Lk" for p in conv.flat)
    paddings = [e.key_mask for e in case.elements if e.key_mask is not None]
    if not shared or case.mask is None or len(paddings) != len(case.elements):
        return case
    keep = case.mask.copy()
    for real in paddings:
        keep[~(keep & real[None, :]).any(axis=1), 0] = True
    return replace(case, mask=keep, batch_rest=tuple(replace(e, mask=keep) for e in case.batch_rest))


def with_convention_features(conv: Convention, case: Case, rng: np.random.Generator, element: int = 0) -> Case:
    """The case with what the convention's roles add: a revealing mask for a function that
    takes one, key padding (as many padded keys as `element` of a batch says, so that a batch's
    elements differ), the causal mask for one that builds it, an output projection bias (once, on
    a batch's first element). No query is left with nothing to attend: under a causal mask each
    keeps itself, and every query keeps the first key, never padded, when its mask hides the rest."""
    takes = conv.roles
    case = with_course_features(case, rng, mask="mask" in takes, causal=conv.causal,
                                projection_bias=conv.projection_bias and element == 0,
                                key_padding="key_padding" in takes, padded_from=element)
    if conv.backward:
        case = replace(case, d_output=upstream_gradient(rng, case))
    if "mask" in takes and conv.causal and case.mask is not None:   # with_course_features gave it one
        keep = case.mask.copy()
        np.fill_diagonal(keep, True)
        case = replace(case, mask=keep)
    if case.mask is not None and case.key_mask is not None:
        keep = case.mask.copy()
        keep[~(keep & case.key_mask[None, :]).any(axis=1), 0] = True
        case = replace(case, mask=keep)
    return case


# The randomized case on which a function with a scale flag is told not to scale (the flag
# passed as False): a function that ignores its flag computes the scaled attention there.
SCALE_OFF_CASE = 3


def upstream_gradient(rng: np.random.Generator, case: Case) -> np.ndarray:
    """A backward pass's upstream gradient dO (Lq x the output's width: H*d_v, or the output
    projection's): random, never all ones (the gradient of a plain sum, which hides a transposed
    or swapped product), small nonzero whole numbers where the tokens are whole (the integer and
    smallest cases)."""
    shape = (case.n, sum(h.wv.shape[1] for h in case.heads) if case.wo is None else case.wo.shape[1])
    if np.issubdtype(np.asarray(case.x).dtype, np.integer):
        return rng.choice(np.array([-2.0, -1.0, 1.0, 2.0]), size=shape)
    return rng.normal(size=shape)


def random_cases(conv: Convention, seed: int, shapes=RANDOM_SHAPES) -> list[Case]:
    rng = np.random.default_rng(seed)
    drawn = [random_case(conv, rng, n, d, h, batch=b) for (n, d, h), b in zip(shapes, RANDOM_BATCHES)]
    if "scale" in conv.roles and conv.scaled and len(drawn) > SCALE_OFF_CASE:
        drawn[SCALE_OFF_CASE] = conv.prepare(_scale_off(drawn[SCALE_OFF_CASE]))
    return drawn


def _scale_off(case: Case) -> Case:
    return replace(case, scale_off=True, label=f"{case.label}, scale = False",
                   batch_rest=tuple(_scale_off(e) for e in case.batch_rest))


def single_head_case(conv: Convention, seed: int) -> Case:
    return random_case(conv, np.random.default_rng(seed + 1), 5, 6, 1, label="H = 1, N = 5, D = 6", batch=2)


def integer_case(conv: Convention, seed: int) -> Case:
    return random_case(conv, np.random.default_rng(seed + 2), 3, 4, 2, integral=True,
                       label="integer input, N = 3, D = 4", batch=2)


def base_case(conv: Convention, seed: int) -> Case:
    return random_case(conv, np.random.default_rng(seed + 3), 5, 6, 2, label="N = 5, D = 6", batch=BASE_BATCH)


def max_score(case: Case) -> float:
    """The largest score: exp() overflows on large positive scores, not on negative ones."""
    return max(float(h["scores"].max()) for h in attention(case)["heads"])


def _scaled_up(case: Case, factor: float) -> Case:
    """The case with larger scores: its tokens scaled, or, for additive scores (which tanh
    bounds by the score vector), the score vector shared by the batch, or, in a block (whose
    attention may read normalised tokens), the query and key weights."""
    if case.block is not None:
        heads = tuple(replace(h, wq=h.wq * factor, wk=h.wk * factor) for h in case.heads)
        return replace(case, heads=heads, batch_rest=tuple(replace(e, heads=heads) for e in case.batch_rest))
    if case.additive is None:
        return replace(case, x=case.x * factor)
    additive = replace(case.additive, va=case.additive.va * factor)
    return replace(case, additive=additive, batch_rest=tuple(replace(e, additive=additive) for e in case.batch_rest))


def large_score_case(conv: Convention, seed: int) -> Case:
    """Scale the tokens until some score exceeds LARGE_SCORE, as in seed 002. Scores grow with
    the square of the scale (without biases), so a positive largest score stays positive."""
    case = random_case(conv, np.random.default_rng(seed + 4), 4, 6, 2, label="large scores", batch=2)
    factor = 1.0
    for _ in range(100):
        if max_score(_scaled_up(case, factor)) >= LARGE_SCORE:
            break
        factor *= 1.5
    case = _scaled_up(case, factor)
    return replace(case, label=f"large scores (largest score {max_score(case):.0f})")


def shaped_like(sheet_cases: list[Case], seed: int) -> list[Case]:
    """Random values in exactly the shapes of the sheet's data (tokens, features, heads,
    biases and output projection), so that only the values are new."""
    rng = np.random.default_rng(seed + 6)

    def like(a):
        return None if a is None else rng.normal(size=np.shape(a))

    shaped = []
    for case in sheet_cases:
        heads = tuple(Head(like(h.wq), like(h.wk), like(h.wv), like(h.bq), like(h.bk), like(h.bv))
                      for h in case.heads)
        shaped.append(replace(case, x=like(case.x), memory=like(case.memory), values=like(case.values),
                              heads=heads, wo=like(case.wo),
                              bo=like(case.bo),
                              label=f"random values in the shapes of {_the(case.label)}"))
    return shaped


def _the(label: str) -> str:
    """A case's label as a noun: a built-in sheet's "assignment sheet data" with its article, a
    course's "the worked example in section 2" as it is."""
    return label if label.lower().startswith(("the ", "a ", "an ")) else f"the {label}"


def token_permutation(n: int, seed: int, offset: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed + offset)
    order = rng.permutation(n)
    while n > 1 and np.array_equal(order, np.arange(n)):
        order = rng.permutation(n)
    return order


def memory_permutation(lk: int, seed: int) -> np.ndarray:
    """An order of the memory's rows, drawn apart from the query tokens' one."""
    return token_permutation(lk, seed, offset=9)


def revealing_keep(rng: np.random.Generator, lq: int, lk: int) -> np.ndarray:
    """A random keep-mask (Lq x Lk) in which every query keeps a key and, when there are two
    or more keys, loses one: a mask that hides nothing, or everything, reveals no mask mistake."""
    keep = rng.random((lq, lk)) < 0.5
    keep[np.arange(lq), rng.integers(0, lk, size=lq)] = True
    if lk > 1:
        for i in range(lq):
            if keep[i].all():
                keep[i, rng.choice(np.flatnonzero(keep[i]))] = False
    return keep


def with_course_features(case: Case, rng: np.random.Generator, *, memory_rows: int | None = None,
                         d_memory: int | None = None, values: bool = False, mask: bool = False,
                         key_padding: bool = False, causal: bool = False, projection_bias: bool = False,
                         padded_from: int = 0, given_keys: bool = False) -> Case:
    """The case with the features a course's convention adds: a memory of `memory_rows` tokens
    of width `d_memory` (new key and value weights to match; cross-attention), a values'
    sequence of its own in the same shape (`values`: the key and value inputs), an attention
    mask, key padding (the last third of the keys and `padded_from` more, the first key always
    real), a causal mask, and a
    bias for the output projection. `given_keys`: the function is given the keys and values,
    not a sequence they are projected from, and the label says so. Each is drawn so that its known mistakes show."""
    if memory_rows is not None:
        width = case.d if d_memory is None else d_memory
        heads = tuple(replace(h, wk=rng.normal(size=(width, h.wk.shape[1])), wv=rng.normal(size=(width, h.wv.shape[1])))
                      for h in case.heads)
        case = replace(case, memory=rng.normal(size=(memory_rows, width)), heads=heads,
                       values=rng.normal(size=(memory_rows, width)) if values else None)
    lk = case.lk
    key_mask = case.key_mask
    if key_padding:
        key_mask = np.arange(lk) < lk - (lk // 3 + padded_from) % lk
    bo = np.asarray(rng.normal(size=case.wo.shape[1])) if projection_bias and case.wo is not None else case.bo
    # A case is known by its label (the predictions are cached by it): the label says what was added.
    sequences = (f"{memory_rows} keys and values" if given_keys else
                 f"key and value inputs of {memory_rows} tokens" if values else f"a memory of {memory_rows} tokens")
    added = [word for word, on in [(sequences, memory_rows is not None), ("a mask", mask),
                                   ("key padding", key_padding), ("a causal mask", causal),
                                   ("an output bias", bo is not case.bo)] if on]
    label = f"{case.label} with {', '.join(added)}" if added else case.label
    return replace(case, mask=revealing_keep(rng, case.n, lk) if mask else case.mask, key_mask=key_mask,
                   causal=causal or case.causal, bo=bo, label=label)
