"""The known mistakes of masks, causal masks, cross-attention, heads on an array axis, the
framework weight layout and the output projection bias: each is what its title says, differs
from the reference where it can be made, is the reference where it cannot, and leaves the
conventions without its feature alone."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

from grader.calling.cases import revealing_keep, with_course_features
from grader.reference.attention import Case, Head, attention, batch_elements, batched, softmax_rows
from grader.reference.mistakes import MISTAKES, Variant, combined, mistaken_attention, mistaken_batched

BY_ID = {m.id: m for m in MISTAKES}
NEW = ("mask_after_softmax", "mask_inverted", "mask_multiplied", "mask_wrong_sign", "causal_diagonal_excluded",
       "causal_upper_triangle", "causal_after_softmax", "causal_multiplied", "softmax_over_heads",
       "softmax_over_batch", "keys_values_from_queries", "cross_sequences_swapped", "heads_split_by_reshape",
       "weights_wrong_layout", "projection_bias_missing", "mask_ignored", "causal_ignored",
       "heads_merged_by_reshape")
# What the conventions of the five built-in assignments can have: a mistake that needs nothing
# else would start applying to them.
BUILT_IN_FEATURES = {"projections", "scores", "softmax", "scaled", "model_dim", "fused_heads", "heads",
                     "projection", "biases", "square", "output"}


def make_case(seed=0, *, n=5, d=6, n_heads=2, d_k=3, memory_rows=None, d_mem=None, mask=False, key_mask=False,
              causal=False, wo=False, bo=False, biases=False, fully_masked="zeros") -> Case:
    rng = np.random.default_rng(seed)
    d_mem = d if d_mem is None else d_mem
    lk = n if memory_rows is None else memory_rows
    rows = d if memory_rows is None else d_mem

    def bias():
        return rng.normal(size=d_k) if biases else None

    heads = tuple(Head(rng.normal(size=(d, d_k)), rng.normal(size=(rows, d_k)), rng.normal(size=(rows, d_k)),
                       bias(), bias(), bias()) for _ in range(n_heads))
    keep = None
    if mask:
        keep = rng.random((n, lk)) < 0.5
        keep[:, 0], keep[:, -1] = True, False      # every query keeps a key and loses one
    return Case(x=rng.normal(size=(n, d)), heads=heads, label=f"case {seed}",
                memory=None if memory_rows is None else rng.normal(size=(memory_rows, d_mem)),
                mask=keep, key_mask=np.arange(lk) != 1 if key_mask else None, causal=causal,
                wo=rng.normal(size=(n_heads * d_k, d)) if wo else None,
                bo=rng.normal(size=d) if wo and bo else None, fully_masked=fully_masked)


# Per mistake: a case where it can be made, and cases where it cannot.
WHERE = {
    "mask_after_softmax": (dict(mask=True), [dict(), dict(memory_rows=4)]),
    "mask_inverted": (dict(mask=True, key_mask=True), [dict(), dict(causal=True)]),
    "mask_multiplied": (dict(mask=True), [dict(), dict(wo=True, bo=True)]),
    "mask_wrong_sign": (dict(key_mask=True), [dict(), dict(memory_rows=7)]),
    "causal_diagonal_excluded": (dict(causal=True), [dict(), dict(mask=True, key_mask=True)]),
    "causal_upper_triangle": (dict(causal=True, wo=True), [dict(), dict(mask=True)]),
    "causal_after_softmax": (dict(causal=True), [dict(), dict(mask=True)]),
    "causal_multiplied": (dict(causal=True, mask=True), [dict(), dict(mask=True, key_mask=True)]),
    "softmax_over_heads": (dict(n_heads=3, d_k=2), []),
    "softmax_over_batch": (dict(), []),
    "keys_values_from_queries": (dict(memory_rows=7), [dict(), dict(memory_rows=7, d_mem=4),
                                                       dict(memory_rows=7, mask=True)]),
    "cross_sequences_swapped": (dict(memory_rows=3, mask=False), [dict(), dict(memory_rows=3, d_mem=5)]),
    "heads_split_by_reshape": (dict(n_heads=2), [dict(n_heads=1, d_k=6)]),
    "heads_merged_by_reshape": (dict(n_heads=3, d_k=2, memory_rows=4), [dict(n_heads=1, d_k=6)]),
    "weights_wrong_layout": (dict(wo=True, biases=True), [dict(d_k=2, wo=True), dict(d_k=3, n_heads=3)]),
    "projection_bias_missing": (dict(wo=True, bo=True), [dict(), dict(wo=True)]),
    "mask_ignored": (dict(mask=True, causal=True), [dict(), dict(causal=True)]),
    "causal_ignored": (dict(causal=True, mask=True), [dict(), dict(mask=True, key_mask=True)]),
}


def _close(a, b, tol=1e-9) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


def _differs(a: dict, b: dict) -> bool:
    return not _close(a["output"], b["output"]) or any(
        not _close(x["weights"], y["weights"]) for x, y in zip(a["heads"], b["heads"]))


def _same_exactly(a: dict, b: dict) -> bool:
    return np.array_equal(a["output"], b["output"], equal_nan=True) and all(
        np.array_equal(x[p], y[p], equal_nan=True) for x, y in zip(a["heads"], b["heads"])
        for p in ("q", "k", "v", "scores", "weights"))


def test_every_new_mistake_is_listed_with_where_it_occurs():
    assert set(NEW) <= set(BY_ID) and set(WHERE) == set(NEW)


@pytest.mark.parametrize("mistake", NEW)
def test_each_new_mistake_needs_a_feature_no_built_in_convention_has(mistake):
    m = BY_ID[mistake]
    assert m.needs - BUILT_IN_FEATURES, m.needs
    assert m.title and m.explanation and m.hint


@pytest.mark.parametrize("mistake", NEW)
def test_each_new_mistake_differs_from_the_reference_where_it_can_be_made(mistake):
    variant = BY_ID[mistake].variant
    for seed in range(3):
        if mistake == "softmax_over_batch":
            elements = [make_case(seed * 10 + i, **WHERE[mistake][0]) for i in range(3)]
            got, want = mistaken_batched(elements, variant), batched(elements)
            assert not _close(got["output"], want["output"]) and not _close(got["weights"], want["weights"])
            continue
        case = make_case(seed, **WHERE[mistake][0])
        assert _differs(mistaken_attention(case, variant), attention(case)), seed


@pytest.mark.parametrize("mistake", [m for m in NEW if WHERE[m][1]])
def test_each_new_mistake_is_the_reference_where_it_cannot_be_made(mistake):
    variant = BY_ID[mistake].variant
    for kwargs in WHERE[mistake][1]:
        case = make_case(5, **kwargs)
        assert _same_exactly(mistaken_attention(case, variant), attention(case)), kwargs


def _kitchen_sinks() -> list[Case]:
    """Cases with every feature that a mistake may need."""
    return [make_case(11, mask=True, key_mask=True, causal=True, wo=True, bo=True, biases=True),
            make_case(12, n=4, memory_rows=6, mask=True, wo=True, bo=True),
            make_case(13, n=6, memory_rows=6, causal=True, wo=True, bo=True, fully_masked="uniform")]


def test_no_two_mistakes_coincide_on_cases_with_every_feature():
    computed = {m.id: [mistaken_attention(c, m.variant) for c in _kitchen_sinks()]
                for m in MISTAKES if m.id != "softmax_overflow"}
    for a, b in itertools.combinations(computed, 2):
        if {a, b} <= set(NEW) or {a, b} & set(NEW):
            assert any(_differs(x, y) for x, y in zip(computed[a], computed[b])), f"{a} coincides with {b}"


def test_every_mistake_and_pair_computes_on_cases_with_every_feature():
    """Masks, memory and an output bias never make a mistake's prediction fail to compute."""
    variants = [m.variant for m in MISTAKES]
    variants += [v for a, b in itertools.combinations(MISTAKES, 2) if (v := combined(a.variant, b.variant))]
    for case in _kitchen_sinks():
        for v in variants:
            with np.errstate(all="ignore"):
                result = mistaken_attention(case, v)
            assert result["output"].ndim == 2 and len(result["heads"]) >= 1


@pytest.mark.parametrize("rule", ["zeros", "uniform", "nan", "unmasked"])
def test_the_mistake_free_variant_is_the_reference_with_every_feature(rule):
    for case in _kitchen_sinks():
        case = replace(case, fully_masked=rule, key_mask=None if case.key_mask is None else np.arange(case.lk) > 2)
        assert _same_exactly(mistaken_attention(case, Variant()), attention(case))
    elements = batch_elements(np.random.default_rng(1).normal(size=(3, 5, 6)), make_case(0).heads,
                              mask=np.random.default_rng(2).random((3, 5, 5)) < 0.5, fully_masked=rule)
    got, want = mistaken_batched(elements, Variant()), batched(elements)
    assert all(np.array_equal(got[p], want[p], equal_nan=True) for p in want)


# --- each mistake computes what its title says ---

def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _single(seed=3, **kwargs) -> Case:
    return make_case(seed, n_heads=1, d_k=6, **kwargs)


def _qkv(case: Case):
    h, memory = case.heads[0], case.keys
    return case.x @ h.wq, memory @ h.wk, memory @ h.wv


def test_mask_after_softmax_zeroes_weights_of_the_unmasked_softmax():
    case = _single(mask=True)
    q, k, v = _qkv(case)
    w = _softmax(q @ k.T / np.sqrt(6)) * case.mask
    got = mistaken_attention(case, BY_ID["mask_after_softmax"].variant)
    np.testing.assert_allclose(got["heads"][0]["weights"], w)
    np.testing.assert_allclose(got["output"], w @ v)
    assert np.all(w.sum(axis=1) < 1)


def test_mask_multiplied_gives_masked_keys_the_weight_of_a_zero_score():
    case = _single(mask=True)
    q, k, v = _qkv(case)
    w = _softmax(q @ k.T / np.sqrt(6) * case.mask)
    got = mistaken_attention(case, BY_ID["mask_multiplied"].variant)["heads"][0]["weights"]
    np.testing.assert_allclose(got, w)
    assert np.all(got[~case.mask] > 0)


def test_mask_with_the_wrong_sign_gives_the_masked_keys_all_the_weight():
    case = _single(mask=True)
    got = mistaken_attention(case, BY_ID["mask_wrong_sign"].variant)["heads"][0]["weights"]
    np.testing.assert_allclose(got[case.mask], 0.0, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0)


def test_an_inverted_mask_attends_exactly_the_keys_the_mask_removes():
    case = _single(mask=True)
    flipped = mistaken_attention(case, BY_ID["mask_inverted"].variant)
    assert _same_exactly(flipped, attention(replace(case, mask=~case.mask)))


def test_causal_off_by_one_masks_as_described():
    case = _single(causal=True, fully_masked="uniform")
    strict = mistaken_attention(case, BY_ID["causal_diagonal_excluded"].variant)["heads"][0]["weights"]
    upper = mistaken_attention(case, BY_ID["causal_upper_triangle"].variant)["heads"][0]["weights"]
    np.testing.assert_array_equal(strict[0], np.full(case.n, 1 / case.n))   # query 0 has no key before it
    assert np.all(np.triu(strict)[1:] == 0)                                  # keys j >= i masked
    assert np.all(np.tril(upper, -1) == 0) and np.all(np.diag(upper) > 0)
    np.testing.assert_allclose(upper[-1], np.eye(case.n)[-1])              # the last query sees only itself


def test_a_causal_mask_multiplied_in_is_the_softmax_of_the_lower_triangle_of_the_scores():
    case = _single(causal=True)
    q, k, v = _qkv(case)
    w = _softmax(np.tril(q @ k.T / np.sqrt(6)))
    got = mistaken_attention(case, BY_ID["causal_multiplied"].variant)
    np.testing.assert_allclose(got["heads"][0]["weights"], w)
    np.testing.assert_allclose(got["output"], w @ v)


def test_a_causal_mask_after_the_softmax_zeroes_later_keys_of_the_unmasked_softmax():
    case = _single(causal=True, mask=True)
    q, k, v = _qkv(case)
    s = q @ k.T / np.sqrt(6)
    kept = np.where(case.mask, np.exp(s - np.where(case.mask, s, -np.inf).max(axis=1, keepdims=True)), 0.0)
    w = np.tril(kept / kept.sum(axis=1, keepdims=True))   # the given mask right, the causal one after
    got = mistaken_attention(case, BY_ID["causal_after_softmax"].variant)["heads"][0]["weights"]
    np.testing.assert_allclose(got, w)


def test_softmax_over_heads_normalises_each_entry_across_the_heads():
    case = make_case(4, n_heads=3, d_k=2)
    scores = np.stack([h["scores"] for h in attention(case)["heads"]])
    got = np.stack([h["weights"] for h in mistaken_attention(case, BY_ID["softmax_over_heads"].variant)["heads"]])
    np.testing.assert_allclose(got, np.exp(scores) / np.exp(scores).sum(axis=0))


def test_softmax_over_batch_normalises_each_entry_across_the_batch():
    elements = [make_case(i, mask=True) for i in range(3)]
    got = mistaken_batched(elements, BY_ID["softmax_over_batch"].variant)["weights"]
    scores = batched(elements)["scores"]
    keep = np.stack([c.keep for c in elements])[:, None]
    e = np.where(keep, np.exp(scores), 0.0)
    total = e.sum(axis=0)
    assert np.any(total == 0)      # a key masked in every element: the case's rule, zeros
    np.testing.assert_allclose(got, e / np.where(total > 0, total, 1.0))


def test_cross_attention_with_keys_and_values_from_the_wrong_sequence():
    case = make_case(6, memory_rows=4, wo=True)
    from_x = mistaken_attention(case, BY_ID["keys_values_from_queries"].variant)
    assert _same_exactly(from_x, attention(replace(case, memory=None)))
    swapped = mistaken_attention(case, BY_ID["cross_sequences_swapped"].variant)
    np.testing.assert_allclose(swapped["output"], attention(replace(case, x=case.memory, memory=case.x))["output"])
    assert swapped["output"].shape[0] == 4


def test_a_reshape_split_gives_each_head_a_run_of_the_flattened_matrix():
    case = make_case(7, n=5, n_heads=2, d_k=3)
    q = case.x @ case.fused("wq")
    flat = q.ravel()
    got = mistaken_attention(case, BY_ID["heads_split_by_reshape"].variant)
    for h, head in enumerate(got["heads"]):
        # Row r of head h is the r-th run of d_k numbers in head h's share of the flattened Q.
        want = np.array([flat[h * 15 + r * 3:h * 15 + r * 3 + 3] for r in range(5)])
        np.testing.assert_allclose(head["q"], want)
    outputs = np.stack([h["output"] for h in got["heads"]])
    np.testing.assert_array_equal(got["concat"], outputs.reshape(5, 6))


def test_framework_weights_applied_without_their_transpose():
    """The course hands W as out x in (the canonical matrix transposed); x @ W uses the
    canonical matrix transposed, and so does the output projection."""
    case = _single(wo=True, bo=True, biases=True)
    h = case.heads[0]
    framework = {name: getattr(h, name).T for name in ("wq", "wk", "wv")}
    q, k, v = (case.x @ framework[n] + getattr(h, "b" + n[1]) for n in ("wq", "wk", "wv"))
    w = softmax_rows(q @ k.T / np.sqrt(6))
    want = (w @ v) @ case.wo.T + case.bo      # the course passes wo.T; the student multiplies by it as given
    np.testing.assert_allclose(mistaken_attention(case, BY_ID["weights_wrong_layout"].variant)["output"], want)


def test_the_output_projection_without_its_bias():
    case = make_case(8, wo=True, bo=True)
    got = mistaken_attention(case, BY_ID["projection_bias_missing"].variant)["output"]
    np.testing.assert_allclose(got, attention(case)["output"] - case.bo)


# --- the generated inputs reveal these mistakes ---

FEATURES_OF = {"mask_after_softmax": dict(mask=True), "mask_inverted": dict(mask=True),
               "mask_multiplied": dict(key_padding=True), "mask_wrong_sign": dict(mask=True, key_padding=True),
               "causal_diagonal_excluded": dict(causal=True), "causal_upper_triangle": dict(causal=True),
               "causal_after_softmax": dict(causal=True), "causal_multiplied": dict(causal=True, mask=True),
               "keys_values_from_queries": dict(memory_rows=7), "cross_sequences_swapped": dict(memory_rows=3),
               "projection_bias_missing": dict(projection_bias=True)}


@pytest.mark.parametrize("mistake", sorted(FEATURES_OF))
def test_generated_course_features_reveal_their_mistakes(mistake):
    for seed in range(6):
        rng = np.random.default_rng(seed)
        base = make_case(seed, n=int(rng.integers(2, 7)), wo=True)
        case = with_course_features(base, rng, **FEATURES_OF[mistake])
        assert _differs(mistaken_attention(case, BY_ID[mistake].variant), attention(case)), seed


def test_a_revealing_mask_keeps_and_loses_a_key_in_every_row():
    rng = np.random.default_rng(0)
    for lq, lk in [(1, 1), (1, 2), (5, 2), (4, 7), (9, 3)]:
        for _ in range(20):
            keep = revealing_keep(rng, lq, lk)
            assert keep.shape == (lq, lk) and keep.any(axis=1).all()
            assert lk == 1 or (~keep).any(axis=1).all()


def test_course_features_keep_the_case_consistent():
    rng = np.random.default_rng(1)
    case = with_course_features(make_case(2, wo=True), rng, memory_rows=4, d_memory=3, mask=True, key_padding=True,
                                causal=True, projection_bias=True)
    assert case.memory.shape == (4, 3) and case.mask.shape == (5, 4) and case.key_mask.tolist() == [1, 1, 1, 0]
    assert case.causal and case.bo.shape == (6,) and all(h.wk.shape[0] == 3 and h.wv.shape[0] == 3 for h in case.heads)
    assert np.all(np.isfinite(attention(case)["output"]))
    assert case.label == ("case 2 with a memory of 4 tokens, a mask, key padding, a causal mask, an output bias")
    assert with_course_features(make_case(2), rng).label == "case 2"
