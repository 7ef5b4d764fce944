"""Masks, causal attention and the output projection bias, written in a course's TOML spec:
the forms a mask is passed in, the cases that carry a revealing mask, the checks that hold
under a mask (and the one that does not), and the mask mistakes named, end to end in a real
kernel."""
import sys

import nbformat
import numpy as np
import pytest

from grading_helpers import FIXTURES, ROOT, grade, graded_at_full_marks, planted_mistakes_named
from grader.calling import cases
from grader.judging.checks import Context, check_probes
from grader.judging.explain import applicable, features
from grader.reference.attention import attention, softmax_rows
from grader.reference.masks import FORMS, course_scores
from grader.calling.returns import Tolerance, compare
from grader.course.spec import load_assignment, parse

sys.path.insert(0, str(ROOT / "tests"))
from make_mask_fixtures import MISTAKES, SECOND_MISTAKES  # noqa: E402

MASKS = FIXTURES / "masks"
SPEC = "masks"   # a built-in, written in the same TOML as a course's spec
FUNCTION = '[[functions]]\nname = "attend"\n[functions.convention]\n'
QKV = 'params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }'


def _convention(text: str):
    return parse(FUNCTION + text, "course.toml").functions[0]


def _masked_qkv(form: str, extra: str = ""):
    return _convention(QKV + f', {{ name = "mask", role = "mask", form = "{form}" }}]\n'
                             f'returns = ["output", "weights"]\n{extra}')


def _course_attention(Q, K, V, mask, form):
    """A course's function written from the words of docs/specs.md for `form`."""
    scores = course_scores(Q @ K.T / np.sqrt(K.shape[1]), mask, form)
    weights = softmax_rows(scores)
    return weights @ V, weights


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_mask_form_is_sent_as_the_course_spells_it_and_means_the_reference(form):
    conv = _masked_qkv(form).convention
    for case in [*cases.random_cases(conv, 5), cases.base_case(conv, 5)]:
        Q, K, V, mask = conv.call_arguments(case)
        assert np.array_equal(FORMS[form].from_course(mask), case.keep)
        output, weights = _course_attention(Q, K, V, mask, form)
        expected = conv.expected_parts(case)
        assert compare(output, expected["output"], Tolerance()) is None, (form, case.label)
        assert compare(weights, expected["weights"], Tolerance()) is None, (form, case.label)


def test_the_grader_s_cases_carry_a_mask_that_reveals_mask_mistakes():
    conv = _masked_qkv("keep").convention
    for case in [*cases.random_cases(conv, 6), cases.base_case(conv, 6), cases.single_head_case(conv, 6)]:
        keep = case.keep
        assert keep is not None and keep.any(axis=1).all(), case.label
        if case.lk > 1:
            assert (~keep).any(axis=1).all(), case.label   # every query loses a key
        unmasked = attention(cases.replace(case, mask=None))["output"]
        if case.n > 1:
            assert not np.allclose(unmasked, attention(case)["output"]), case.label


def test_causal_built_inside_or_by_a_flag_gives_causal_cases_and_its_own_checks():
    inside = _convention('params = [{ name = "x", role = "x" }, { name = "Wq", role = "wq" }, '
                         '{ name = "Wk", role = "wk" }, { name = "Wv", role = "wv" }, { name = "Wo", role = "wo" }, '
                         '{ name = "bo", role = "bo" }, { name = "h", role = "n_heads" }]\n'
                         'returns = "output"\ncausal = true\n')
    flag = _convention(QKV + ', { name = "is_causal", role = "causal" }]\nreturns = ["output", "weights"]\n')
    for fn in (inside, flag):
        conv = fn.convention
        assert conv.causal and not conv.masked
        assert "permutation_equivariance" not in fn.points and fn.points["causal_future"] == 1
        for case in cases.random_cases(conv, 7):
            assert case.causal and not case.keep[np.triu_indices(case.n, 1)].any()
    assert flag.convention.call_arguments(cases.base_case(flag.convention, 7))[-1] is True
    assert flag.points["masked_keys_zero_weight"] == 1 and "masked_keys_zero_weight" not in inside.points
    base = cases.base_case(inside.convention, 7)
    assert base.bo is not None and inside.convention.call_arguments(base)[5] is base.bo
    assert {"causal", "projection_bias"} <= features(inside.convention)
    named = {m.id for m in applicable(inside.convention)}
    assert {"causal_diagonal_excluded", "causal_upper_triangle", "causal_after_softmax", "causal_multiplied",
            "projection_bias_missing"} <= named
    assert not {"mask_inverted", "mask_after_softmax"} & named


def test_a_fixed_mask_is_permuted_with_the_tokens_rows_and_columns():
    fn = _masked_qkv("ignore")
    ctx = Context(seed=9, tolerance=Tolerance())
    base, permuted = check_probes("permutation_equivariance", fn, ctx)
    order = cases.token_permutation(base.case.n, 9)
    assert np.array_equal(permuted.case.mask, base.case.mask[order][:, order])
    conv = fn.convention
    sent = permuted.arguments(conv)[-1]
    assert np.array_equal(sent, base.arguments(conv)[-1][order][:, order])
    # The property holds for the reference itself, so a correct function passes it.
    before, after = conv.expected_parts(base.case), conv.expected_parts(permuted.case)
    assert np.allclose(after["weights"], before["weights"][order][:, order])
    assert np.allclose(after["output"], before["output"][order])


def test_a_mask_keeps_its_course_dtype_in_the_integer_and_float32_variants():
    fn = _masked_qkv("additive_inf")
    for probe in check_probes("dtypes", fn, Context(seed=3, tolerance=Tolerance())):
        mask = probe.arguments(fn.convention)[-1]
        assert mask.dtype == np.float64 and np.isneginf(mask).any(), probe.label


def test_the_sheet_data_is_sent_with_a_mask_that_hides_nothing():
    from grader.calling.conventions import given_keep
    fn = load_assignment(SPEC).functions[1]
    assert fn.fixed_data == "sheet_000" and fn.points["fixed"] == 3
    probes = check_probes("fixed", fn, Context(seed=1, tolerance=Tolerance()))
    for probe in probes:
        mask = probe.arguments(fn.convention)[-1]
        assert mask.dtype == bool and mask.all() and np.array_equal(given_keep(probe.case), mask)


@pytest.mark.slow
def test_masked_and_causal_worked_solutions_earn_full_marks():
    result = graded_at_full_marks(MASKS / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"masked_attention.masked_keys_zero_weight", "boolean_masked_attention.fixed",
            "boolean_masked_attention.permutation_equivariance", "causal_multihead.causal_future"} <= kinds
    assert "causal_multihead.permutation_equivariance" not in kinds


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes", MISTAKES), ("second_mistakes", SECOND_MISTAKES)])
def test_each_planted_mask_mistake_is_named(notebook, planted):
    # The smallest failing case runs as printed, a -inf mask included.
    planted_mistakes_named(MASKS / f"{notebook}.ipynb", SPEC, planted)


@pytest.mark.slow
def test_the_new_checks_catch_what_they_are_for():
    mistakes = {c.name: c for c in grade(MASKS / "mistakes.ipynb", str(SPEC)).checks}
    # Keeping the upper triangle lets a token see the tokens after it.
    assert mistakes["causal_multihead.causal_future"].status == "failed"
    assert "changed the output of tokens 0 to" in mistakes["causal_multihead.causal_future"].message
    # An inverted mask gives the masked keys the weight.
    assert mistakes["boolean_masked_attention.masked_keys_zero_weight"].status == "failed"
    # Zeroing masked weights after the softmax still gives them zero weight; the rows no longer sum to 1.
    assert mistakes["masked_attention.masked_keys_zero_weight"].status == "passed"
    assert mistakes["masked_attention.weights_distribution"].status == "failed"


def test_a_mask_or_causal_mask_not_applied_is_the_reference_without_it():
    from grader.reference.mistakes import MISTAKES, mistaken_attention
    by_id = {m.id: m for m in MISTAKES}
    conv = _masked_qkv("keep", "causal = true\n").convention
    case = cases.base_case(conv, 4)
    assert case.mask is not None and case.causal
    ignored = mistaken_attention(case, by_id["mask_ignored"].variant)
    assert np.allclose(ignored["output"], attention(cases.replace(case, mask=None))["output"])
    ignored = mistaken_attention(case, by_id["causal_ignored"].variant)
    assert np.allclose(ignored["output"], attention(cases.replace(case, causal=False))["output"])


@pytest.mark.slow
def test_a_function_that_ignores_its_mask_is_told_so_and_keeps_what_it_earns(tmp_path):
    """Attention with the mask left out is a genuine attempt with a known mistake: it is named,
    the checks a mask is there for fail on their own, and the properties it keeps still count."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('''import numpy as np

def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def masked_attention(Q, K, V, mask):
    w = softmax(Q @ K.T / np.sqrt(K.shape[1]))
    return w @ V, w

def causal_multihead(x, W_q, W_k, W_v, W_o, b_o, n_heads):
    Q, K, V = x @ W_q, x @ W_k, x @ W_v
    d = Q.shape[1] // n_heads
    heads = [softmax(Q[:, h*d:(h+1)*d] @ K[:, h*d:(h+1)*d].T / np.sqrt(d)) @ V[:, h*d:(h+1)*d]
             for h in range(n_heads)]
    return np.concatenate(heads, axis=1) @ W_o + b_o
''')]
    path = tmp_path / "ignores_masks.ipynb"
    nbformat.write(nb, path)
    checks = {c.name: c for c in grade(path, str(SPEC)).checks}
    masked = checks["masked_attention.masked_keys_zero_weight"]
    assert masked.status == "failed" and "gives masked key" in masked.message
    causal = checks["causal_multihead.causal_future"]
    assert causal.status == "failed" and "Changing the tokens after token" in causal.message
    assert "mask not applied" in checks["masked_attention.random_shapes"].diagnosis
    assert "causal mask not applied" in checks["causal_multihead.random_shapes"].diagnosis
    assert checks["masked_attention.permutation_equivariance"].points == 1
    assert checks["causal_multihead.inputs_unmodified"].points == 1


@pytest.mark.parametrize("weights, words", [
    (np.float64(0.5), "are (), not Lq x Lk"),
    (np.ones((5, 4)), "are (5, 4), not Lq x Lk = (5, 5)"),
    (np.full((5, 5), np.nan), "gives masked key"),
])
def test_odd_weights_fail_the_masked_keys_check_in_one_sentence(weights, words):
    """Whatever a function returns (decoded from the kernel, so anything) is judged, never a crash."""
    from grader.judging.checks import Outcome, judge_masked_keys
    from grader.calling.returns import Parts
    fn = _masked_qkv("keep")
    ctx = Context(seed=2, tolerance=Tolerance())
    probe, = check_probes("masked_keys_zero_weight", fn, ctx)[:1]
    outcome = Outcome("ok", Parts(values={"output": np.zeros((5, 6)), "weights": weights}))
    verdict = judge_masked_keys(fn, ctx, [(probe, outcome)])
    assert verdict.status == "failed" and words in verdict.message and "\n" not in verdict.message


def test_a_scalar_output_fails_the_causal_check_without_a_crash():
    from grader.judging.checks import Outcome, judge_causal
    from grader.calling.returns import Parts
    fn = _convention(QKV + ', { name = "c", role = "causal" }]\nreturns = "output"\n')
    ctx = Context(seed=2, tolerance=Tolerance())
    probes = check_probes("causal_future", fn, ctx)
    results = [(probes[0], Outcome("ok", Parts(values={"output": np.float64(1.0)}))),
               (probes[1], Outcome("ok", Parts(values={"output": np.float64(2.0)})))]
    assert judge_causal(fn, ctx, results).status == "failed"
    same = [(p, Outcome("ok", Parts(values={"output": np.ones((p.case.n, 3))}))) for p in probes]
    assert judge_causal(fn, ctx, same).status == "passed"
