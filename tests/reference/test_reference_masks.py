"""The reference's masks, cross-attention and batches: against attention written out entry by
entry, the properties they must have, and the course mask forms both ways."""
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.reference.attention import Case, Head, attention, batch_elements, batched, merge_heads, split_heads
from grader.reference.masks import (FORMS, FULLY_MASKED_RULES, additive, causal_keep, course_scores, masked_softmax,
    with_key_padding)

# Derandomized: the suite draws the same examples on every run, so a failure reproduces.
QUICK = settings(max_examples=60, deadline=None, derandomize=True)


def _rows(a):
    return None if a is None else a.tolist()


def loop_attention(case: Case) -> dict:
    """Attention one entry at a time, from the definitions: independent of the reference."""
    x = case.x.tolist()
    memory = x if case.memory is None else case.memory.tolist()
    lq, lk = len(x), len(memory)

    def may(i, j):
        return ((case.mask is None or bool(case.mask[i][j])) and (case.key_mask is None or bool(case.key_mask[j]))
                and (not case.causal or j <= i))

    def project(rows, w, b):
        w = w.tolist()
        return [[sum(r[a] * w[a][c] for a in range(len(r))) + (0.0 if b is None else float(b[c]))
                 for c in range(len(w[0]))] for r in rows]

    concat = [[] for _ in range(lq)]
    weights = []
    for head in case.heads:
        q, k, v = project(x, head.wq, head.bq), project(memory, head.wk, head.bk), project(memory, head.wv, head.bv)
        dk, dv = len(k[0]), len(v[0])
        head_weights = []
        for i in range(lq):
            s = [sum(q[i][c] * k[j][c] for c in range(dk)) / (math.sqrt(dk) if case.scaled else 1.0) for j in range(lk)]
            kept = [j for j in range(lk) if may(i, j)]
            if kept:
                top = max(s[j] for j in kept)
                e = [math.exp(s[j] - top) if may(i, j) else 0.0 for j in range(lk)]
                w = [a / sum(e) for a in e]
            elif case.fully_masked == "zeros":
                w = [0.0] * lk
            elif case.fully_masked == "uniform":
                w = [1.0 / lk] * lk
            elif case.fully_masked == "nan":
                w = [math.nan] * lk
            else:
                e = [math.exp(a - max(s)) for a in s]
                w = [a / sum(e) for a in e]
            head_weights.append(w)
            concat[i].extend(sum(w[j] * v[j][c] for j in range(lk)) for c in range(dv))
        weights.append(head_weights)
    output = concat
    if case.wo is not None:
        wo = case.wo.tolist()
        output = [[sum(row[a] * wo[a][c] for a in range(len(row))) + (0.0 if case.bo is None else float(case.bo[c]))
                   for c in range(len(wo[0]))] for row in concat]
    return {"output": np.array(output), "weights": [np.array(w) for w in weights]}


@st.composite
def masked_cases(draw, cross=None, causal=None, rules=FULLY_MASKED_RULES, masks=True):
    """A random case: self- or cross-attention (D_mem may differ from D), optional attention,
    key-padding and causal masks, biases and output projection with its bias."""
    cross = draw(st.booleans()) if cross is None else cross
    lq = draw(st.integers(1, 5))
    lk = draw(st.integers(1, 5)) if cross else lq
    d = draw(st.integers(1, 4))
    d_mem = draw(st.integers(1, 4)) if cross else d
    n_heads, d_k, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    biases = draw(st.booleans())

    def bias(n):
        return rng.normal(size=n) if biases else None

    heads = tuple(Head(rng.normal(size=(d, d_k)), rng.normal(size=(d_mem, d_k)), rng.normal(size=(d_mem, d_v)),
                       bias(d_k), bias(d_k), bias(d_v)) for _ in range(n_heads))
    projection = draw(st.booleans())
    wo = rng.normal(size=(n_heads * d_v, draw(st.integers(1, 4)))) if projection else None
    bo = rng.normal(size=wo.shape[1]) if projection and draw(st.booleans()) else None
    mask = rng.random((lq, lk)) < 0.6 if masks and draw(st.booleans()) else None
    key_mask = rng.random(lk) < 0.7 if masks and draw(st.booleans()) else None
    return Case(x=rng.normal(size=(lq, d)), heads=heads, wo=wo, bo=bo, scaled=draw(st.booleans()),
                memory=rng.normal(size=(lk, d_mem)) if cross else None, mask=mask, key_mask=key_mask,
                causal=draw(st.booleans()) if causal is None else causal,
                fully_masked=draw(st.sampled_from(rules)), label="random")


@QUICK
@given(masked_cases())
def test_the_reference_is_attention_written_out(case):
    got, want = attention(case), loop_attention(case)
    np.testing.assert_allclose(got["output"], want["output"], rtol=1e-9, atol=1e-12, equal_nan=True)
    for head, weights in zip(got["heads"], want["weights"]):
        np.testing.assert_allclose(head["weights"], weights, rtol=1e-9, atol=1e-12, equal_nan=True)


@QUICK
@given(masked_cases(rules=("zeros", "uniform", "unmasked")))
def test_no_nan_unless_the_course_asks_for_it(case):
    result = attention(case)
    assert np.all(np.isfinite(result["output"]))
    assert all(np.all(np.isfinite(h["weights"])) for h in result["heads"])


@QUICK
@given(masked_cases(rules=("nan",)))
def test_the_nan_rule_gives_nan_exactly_on_fully_masked_rows(case):
    keep = case.keep
    empty = np.zeros(case.n, dtype=bool) if keep is None else ~keep.any(axis=1)
    for head in attention(case)["heads"]:
        assert np.all(np.isnan(head["weights"][empty]))
        assert np.all(np.isfinite(head["weights"][~empty]))


@QUICK
@given(masked_cases())
def test_masked_keys_get_exactly_zero_weight_and_the_rest_sum_to_one(case):
    keep = case.keep
    if keep is None:
        keep = np.ones((case.n, case.lk), dtype=bool)
    some = keep.any(axis=1)
    for head in attention(case)["heads"]:
        w = head["weights"]
        assert np.all(w[some][~keep[some]] == 0.0)
        np.testing.assert_allclose(w[some].sum(axis=1), 1.0)


def test_a_fully_masked_row_follows_the_courses_rule():
    scores = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    keep = np.array([[True, False, True], [False, False, False]])
    plain = np.exp(scores[1] - 3.0) / np.exp(scores[1] - 3.0).sum()
    for rule, row in [("zeros", np.zeros(3)), ("uniform", np.full(3, 1 / 3)), ("unmasked", plain)]:
        np.testing.assert_allclose(masked_softmax(scores, keep, rule)[1], row)
    assert np.all(np.isnan(masked_softmax(scores, keep, "nan")[1]))
    first = np.exp([1.0 - 3.0, 0.0]) / np.exp([1.0 - 3.0, 0.0]).sum()
    np.testing.assert_allclose(masked_softmax(scores, keep, "nan")[0], [first[0], 0.0, first[1]])
    with pytest.raises(ValueError, match="fully_masked"):
        masked_softmax(scores, keep, "ignore")


@QUICK
@given(masked_cases(cross=False, causal=True), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_under_a_causal_mask_output_i_does_not_depend_on_later_tokens(case, i, seed):
    # A row with no key left may take weights from every key (uniform, unmasked): only rows
    # that keep a key, or the zeros and nan rules, promise this.
    i = min(i, case.n - 1)
    later = case.x.copy()
    later[i + 1:] = np.random.default_rng(seed).normal(size=later[i + 1:].shape) * 10
    before, after = attention(case)["output"], attention(replace(case, x=later))["output"]
    some = case.keep.any(axis=1)
    rows = [r for r in range(i + 1) if some[r] or case.fully_masked in ("zeros", "nan")]
    np.testing.assert_allclose(after[rows], before[rows], rtol=1e-12, atol=1e-12, equal_nan=True)
    if case.n > i + 1 and case.mask is None and case.key_mask is None and case.wo is None:
        assert not np.allclose(after[i + 1:], before[i + 1:]), "the check could not fail"


@QUICK
@given(masked_cases(cross=True, causal=False), st.integers(0, 2**32 - 1))
def test_permuting_the_memory_leaves_a_cross_attention_output_unchanged(case, seed):
    order = np.random.default_rng(seed).permutation(case.lk)
    moved = case.memory_permuted(order)
    np.testing.assert_allclose(attention(moved)["output"], attention(case)["output"], rtol=1e-9, atol=1e-12,
                               equal_nan=True)
    for a, b in zip(attention(moved)["heads"], attention(case)["heads"]):
        np.testing.assert_allclose(a["weights"], b["weights"][:, order], rtol=1e-9, atol=1e-12, equal_nan=True)


@QUICK
@given(masked_cases(causal=False), st.integers(0, 2**32 - 1))
def test_permuting_the_tokens_permutes_the_output_masks_included(case, seed):
    order = np.random.default_rng(seed).permutation(case.n)
    np.testing.assert_allclose(attention(case.permuted(order))["output"], attention(case)["output"][order],
                               rtol=1e-9, atol=1e-12, equal_nan=True)


def test_a_causal_case_has_no_permutation():
    rng = np.random.default_rng(1)
    case = Case(x=rng.normal(size=(3, 2)), heads=(Head(*rng.normal(size=(3, 2, 2))),), causal=True)
    with pytest.raises(ValueError, match="causal"):
        case.permuted(np.array([2, 0, 1]))
    with pytest.raises(ValueError, match="memory"):
        Case(x=case.x, heads=case.heads).memory_permuted(np.array([2, 0, 1]))


def test_cross_attention_takes_keys_and_values_from_the_memory():
    rng = np.random.default_rng(7)
    x, memory = rng.normal(size=(2, 3)), rng.normal(size=(4, 5))   # Lq 2, Lk 4, D 3, D_mem 5
    head = Head(rng.normal(size=(3, 2)), rng.normal(size=(5, 2)), rng.normal(size=(5, 6)))
    result = attention(Case(x=x, heads=(head,), memory=memory))
    q, k, v = x @ head.wq, memory @ head.wk, memory @ head.wv
    s = q @ k.T / np.sqrt(2)
    w = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(result["heads"][0]["weights"], w)
    np.testing.assert_allclose(result["output"], w @ v)
    assert result["output"].shape == (2, 6)


def test_the_canonical_masks_are_checked():
    rng = np.random.default_rng(2)
    x, heads = rng.normal(size=(3, 2)), (Head(*rng.normal(size=(3, 2, 2))),)
    with pytest.raises(ValueError, match="boolean"):
        Case(x=x, heads=heads, mask=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="Lq x Lk"):
        Case(x=x, heads=heads, mask=np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match="key mask"):
        Case(x=x, heads=heads, key_mask=np.ones(2, dtype=bool))
    with pytest.raises(ValueError, match="fully_masked"):
        Case(x=x, heads=heads, fully_masked="skip")


def test_without_masks_or_memory_the_reference_is_unchanged():
    """The unmasked computation, exactly as written before masks existed."""
    rng = np.random.default_rng(3)
    heads = tuple(Head(*rng.normal(size=(3, 4, 2)), *rng.normal(size=(3, 2))) for _ in range(2))
    case = Case(x=rng.normal(size=(5, 4)), heads=heads, wo=rng.normal(size=(4, 3)))
    result = attention(case)
    for head, got in zip(heads, result["heads"]):
        q, k, v = case.x @ head.wq + head.bq, case.x @ head.wk + head.bk, case.x @ head.wv + head.bv
        s = q @ k.T / np.sqrt(2)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        np.testing.assert_array_equal(got["weights"], e / e.sum(axis=-1, keepdims=True))
        np.testing.assert_array_equal(got["output"], got["weights"] @ v)
    np.testing.assert_array_equal(result["output"], result["concat"] @ case.wo)


# --- batches and heads as an array axis ---

@QUICK
@given(masked_cases(), st.integers(1, 4), st.booleans(), st.integers(0, 2**32 - 1))
def test_each_batch_element_equals_the_unbatched_result(case, b, shared_mask, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, case.n, case.d))
    memory = None if case.memory is None else rng.normal(size=(b, *case.memory.shape))
    mask = rng.random((case.n, case.lk)) < 0.6 if shared_mask else rng.random((b, case.n, case.lk)) < 0.6
    key_mask = rng.random((b, case.lk)) < 0.7
    elements = batch_elements(x, case.heads, memory=memory, mask=mask, key_mask=key_mask, wo=case.wo, bo=case.bo,
                              causal=case.causal, fully_masked=case.fully_masked, scaled=case.scaled)
    result = batched(elements)
    assert result["output"].shape[0] == b
    assert result["weights"].shape == (b, len(case.heads), case.n, case.lk)
    for i in range(b):
        alone = Case(x=x[i], heads=case.heads, memory=None if memory is None else memory[i],
                     mask=mask if shared_mask else mask[i], key_mask=key_mask[i], wo=case.wo, bo=case.bo,
                     causal=case.causal, fully_masked=case.fully_masked, scaled=case.scaled)
        want = attention(alone)
        np.testing.assert_array_equal(result["output"][i], want["output"])
        for h, head in enumerate(want["heads"]):
            np.testing.assert_array_equal(result["weights"][i, h], head["weights"])
            np.testing.assert_array_equal(result["q"][i, h], head["q"])


def test_a_batch_needs_elements_of_one_shape():
    rng = np.random.default_rng(4)
    heads = (Head(*rng.normal(size=(3, 2, 2))),)
    with pytest.raises(ValueError, match="shape"):
        batched([Case(x=rng.normal(size=(3, 2)), heads=heads), Case(x=rng.normal(size=(4, 2)), heads=heads)])
    with pytest.raises(ValueError, match="at least one"):
        batched([])
    with pytest.raises(ValueError, match="B x N x D"):
        batch_elements(rng.normal(size=(3, 2)), heads)


@QUICK
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_split_heads_gives_each_head_its_contiguous_block(b, n, n_heads, d, seed):
    rng = np.random.default_rng(seed)
    x, fused = rng.normal(size=(b, n, 5)), rng.normal(size=(5, n_heads * d))
    split = split_heads(x @ fused, n_heads)
    assert split.shape == (b, n_heads, n, d)
    for h in range(n_heads):
        np.testing.assert_allclose(split[:, h], x @ fused[:, h * d:(h + 1) * d], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(merge_heads(split), x @ fused)


def test_features_that_do_not_split_into_the_heads_are_refused():
    with pytest.raises(ValueError, match="do not split"):
        split_heads(np.zeros((2, 5)), 2)


# --- the course mask forms ---

keeps = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**32 - 1)).map(
    lambda a: np.random.default_rng(a[3]).random(a[:3]) < 0.6)


@QUICK
@given(keeps, st.sampled_from(sorted(FORMS)))
def test_each_mask_form_round_trips(keep, form):
    course = FORMS[form].to_course(keep)
    np.testing.assert_array_equal(FORMS[form].from_course(course), keep)
    np.testing.assert_array_equal(FORMS[form].to_course(FORMS[form].from_course(course)), course)


@QUICK
@given(keeps, st.sampled_from(sorted(FORMS)), st.integers(0, 2**32 - 1))
def test_what_a_courses_function_computes_from_its_mask_is_the_masked_softmax(keep, form, seed):
    scores = np.random.default_rng(seed).normal(size=keep.shape) * 3
    computed = course_scores(scores, FORMS[form].to_course(keep), form)
    shifted = computed - computed.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        course = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    # How a fully masked row comes out follows from the arithmetic: -inf added gives NaN, a big
    # number added shifts the whole row, a big number put in place of every score is uniform.
    rule = FORMS[form].fully_masked or "uniform"
    np.testing.assert_allclose(course, masked_softmax(scores, keep, rule), rtol=1e-6, atol=1e-12, equal_nan=True)


def test_mask_forms_spell_the_same_mask_as_courses_do():
    keep = np.array([[True, False], [True, True]])
    np.testing.assert_array_equal(FORMS["ignore"].to_course(keep), [[False, True], [False, False]])
    np.testing.assert_array_equal(FORMS["additive_inf"].to_course(keep), [[0, -np.inf], [0, 0]])
    np.testing.assert_array_equal(FORMS["additive_big"].to_course(keep), [[0, -1e9], [0, 0]])
    np.testing.assert_array_equal(FORMS["float_keep"].to_course(keep), [[1.0, 0.0], [1.0, 1.0]])
    np.testing.assert_array_equal(FORMS["float_ignore"].to_course(keep), [[0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(additive(1e4).to_course(keep), [[0, -1e4], [0, 0]])
    np.testing.assert_array_equal(FORMS["keep"].from_course(np.array([[1, 0], [1, 1]])), keep)


@pytest.mark.parametrize("form, bad", [("additive_inf", [[0.0, -1e9]]), ("additive_big", [[0.0, -np.inf]]),
                                       ("float_keep", [[0.5, 1.0]]), ("keep", [[2, 0]]), ("ignore", [[-1, 0]])])
def test_a_value_a_form_never_has_is_refused(form, bad):
    with pytest.raises(ValueError, match="mask holds only"):
        FORMS[form].from_course(np.array(bad))


@QUICK
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 5), st.booleans(), st.integers(0, 2**32 - 1))
def test_key_padding_combines_with_an_attention_mask(b, lq, lk, with_mask, seed):
    rng = np.random.default_rng(seed)
    attention_keep = rng.random((lq, lk)) < 0.6 if with_mask else None
    key_keep = rng.random((b, lk)) < 0.7
    combined = with_key_padding(attention_keep, key_keep, lq)
    assert combined.shape == (b, lq, lk)
    for e in range(b):
        for i in range(lq):
            for j in range(lk):
                assert combined[e, i, j] == (key_keep[e, j] and (attention_keep is None or attention_keep[i, j]))


def test_key_padding_alone_needs_the_number_of_queries():
    with pytest.raises(ValueError, match="how many queries"):
        with_key_padding(None, np.ones(3, dtype=bool))


def test_a_causal_keep_mask_is_the_lower_triangle():
    np.testing.assert_array_equal(causal_keep(3, 4), [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
