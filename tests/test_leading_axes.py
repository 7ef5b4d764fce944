"""Attention on any leading axes, as PyTorch's scaled_dot_product_attention describes it: Q is
(N, ..., L, E), K (N, ..., S, E), V (N, ..., S, Ev) with Ev free to differ from E, and a
boolean mask broadcastable to (N, ..., L, S), True meaning ignore. The grader's cases for Q, K
and V given draw values of another width than the keys somewhere, and a batch on any leading
axes takes such a mask in its shape."""
import numpy as np
import pytest

from grader.calling import cases
from grader.calling.conventions import CONVENTIONS
from grader.calling.returns import Tolerance, canonical_parts, same
from grader.course.spec import parse
from grader.kernel_side.wire import encode_value


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


GIVEN_VALUES = ["qkv_single", "sdpa"]


@pytest.mark.parametrize("name", GIVEN_VALUES)
def test_q_k_v_given_draw_values_wider_than_the_keys_on_the_longer_cases_only(name):
    conv = CONVENTIONS[name]
    widths = [(c.n, c.heads[0].wk.shape[1], c.heads[0].wv.shape[1]) for c in cases.random_cases(conv, seed=11)]
    assert any(d_v != d_k for _, d_k, d_v in widths), widths
    assert all(d_v == d_k for n, d_k, d_v in widths if n < cases.WIDE_MEMORY_FROM), widths
    wider = next(c for c in cases.random_cases(conv, seed=11) if c.heads[0].wv.shape[1] != c.heads[0].wk.shape[1])
    assert "d_v = " in wider.label   # the student reads why the case differs


def test_values_as_wide_as_the_keys_where_a_function_splits_fused_heads_or_projects_its_own():
    # A course handing out V = X W_v, W_v shaped like W_q, may split V by d_k (seed qkv's sample
    # does); weights and an output projection follow d_k: the seeds' golden verdicts rely on both.
    for name in ("qkv_multi", "rows_single", "rows_multi", "columns_single_scaled", "qkv_projections"):
        for case in cases.random_cases(CONVENTIONS[name], seed=11):
            assert all(h.wv.shape[1] == h.wk.shape[1] for h in case.heads), (name, case.label)


ANY_AXES = ('[[functions]]\nname = "attend"\n[functions.convention]\n'
            'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
            '{ name = "V", role = "v", heads = "axis" }]\nreturns = "heads"\nper_head_returns = "axis"\n'
            'batch = "any"\n')


def _flat(a, width):
    """(N, ..., L, width) as (N*..., L, width): the leading axes merged, as a function written
    for one batch axis might do it."""
    return a.reshape(-1, a.shape[-2], width)


def right(Q, K, V):
    """Attention on any leading axes, each array merged by its own last axis."""
    q, k, v = _flat(Q, Q.shape[-1]), _flat(K, K.shape[-1]), _flat(V, V.shape[-1])
    out = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])) @ v
    return out.reshape(*Q.shape[:-1], V.shape[-1])


def values_as_wide_as_keys(Q, K, V):
    """The same with E, the queries' width, taken for the values' too: a function assuming Ev == E."""
    e = Q.shape[-1]
    q, k, v = _flat(Q, e), _flat(K, e), _flat(V, e)
    out = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(e)) @ v
    return out.reshape(*Q.shape[:-1], e)


def test_a_function_that_assumes_ev_equals_e_fails_where_the_values_are_wider_and_passes_elsewhere():
    conv = parse(ANY_AXES, "course.toml").functions[0].convention
    verdicts = []
    for case in cases.random_cases(conv, seed=11):
        args = conv.call_arguments(case)
        expected = conv.expected_parts(case)["heads"]
        assert same(canonical_parts(conv, encode_value(right(*args))).values["heads"], expected, Tolerance())
        try:
            wrong = canonical_parts(conv, encode_value(values_as_wide_as_keys(*args))).values["heads"]
            verdicts.append(same(wrong, expected, Tolerance()))
        except ValueError:   # the reshape by E does not fit Ev
            verdicts.append(False)
    assert False in verdicts and True in verdicts, verdicts


ANY_AXES_MASKED = ('[[functions]]\nname = "attend"\n[functions.convention]\n'
                   'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
                   '{ name = "V", role = "v", heads = "axis" }, '
                   '{ name = "mask", role = "mask", form = "ignore", shape = "B x 1 x Lq x Lk" }]\n'
                   'returns = ["heads", "weights"]\nper_head_returns = "axis"\nbatch = "any"\n')


def any_axes_attention(Q, K, V, mask):
    """(N, ..., H, L, E) attention, the mask broadcast over the heads and applied as
    np.where(mask, -1e10, s), True = ignore."""
    s = np.where(mask, -1e10, Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
    w = _softmax(s)
    return w @ V, w


def test_a_mask_broadcastable_over_the_heads_comes_on_the_same_two_leading_axes_and_is_applied_as_written():
    conv = parse(ANY_AXES_MASKED, "course.toml").functions[0].convention
    assert conv.leading_axes and conv.heads == "many"
    seen_wider = False
    for case in [*cases.random_cases(conv, seed=3), cases.base_case(conv, 3)]:
        q, k, v, mask = conv.call_arguments(case)
        lead = q.shape[:2]
        assert mask.shape == (*lead, 1, case.n, case.lk) and mask.dtype == bool
        assert q.shape[2] == len(case.heads) and v.shape[:-1] == k.shape[:-1]
        seen_wider = seen_wider or v.shape[-1] != k.shape[-1]
        parts = canonical_parts(conv, encode_value(any_axes_attention(q, k, v, mask)))
        assert not parts.problems
        for part, expected in conv.expected_parts(case).items():
            assert same(parts.values[part], expected, Tolerance()), (case.label, part)
        if case.lk == 1:
            continue   # one key: every query keeps it, so no reading of the mask differs
        # The mask's True is ignore: read as keep, every masked key would be attended.
        inverted = canonical_parts(conv, encode_value(any_axes_attention(q, k, v, ~mask)))
        assert not same(inverted.values["weights_per_head"], conv.expected_parts(case)["weights_per_head"],
                        Tolerance())
    assert seen_wider
