"""Cross-attention written in a course's TOML spec: queries from X, keys and values from a
second sequence (role memory) of another length and width; the cases drawn to fit, the checks
that hold (the memory's order does not matter, the queries' order permutes the output), the
sheet's data refused, and the cross-attention mistakes named, end to end in a real kernel."""
import sys

import nbformat
import numpy as np
import pytest

from grading_helpers import FIXTURES, ROOT, grade, graded_at_full_marks, planted_mistakes_named
from grader.calling import cases
from grader.judging import smallest
from grader.judging.checks import Context, Outcome, check_probes, judge_memory_permutation
from grader.errors import SpecError
from grader.judging.explain import applicable, features
from grader.calling.returns import Parts, Tolerance
from grader.course.spec import load_assignment, parse

sys.path.insert(0, str(ROOT / "tests"))
from make_cross_fixtures import MISTAKES  # noqa: E402

CROSS = FIXTURES / "cross"
SPEC = "cross"   # a built-in, written in the same TOML as a course's spec
SINGLE = ('[[functions]]\nname = "cross_attention"\n{fixed}[functions.convention]\n'
          'params = [{{ name = "X", role = "x" }}, {{ name = "memory", role = "memory" }}, '
          '{{ name = "W_q", role = "wq" }}, {{ name = "W_k", role = "wk" }}, {{ name = "W_v", role = "wv" }}]\n'
          'returns = ["output", "weights"]\n{extra}')


def _single(fixed: str = "", extra: str = ""):
    return parse(SINGLE.format(fixed=fixed, extra=extra), "course.toml").functions[0]


def test_every_case_has_a_memory_of_another_length_and_some_of_another_width():
    fn = _single()
    conv = fn.convention
    drawn = [*cases.random_cases(conv, 4), cases.base_case(conv, 4), cases.integer_case(conv, 4),
             cases.large_score_case(conv, 4), *smallest.candidates(conv, 4)]
    for case in drawn:
        assert case.memory is not None and case.lk != case.n, case.label
        X, memory, W_q, W_k, W_v = conv.call_arguments(case)
        assert memory is case.memory and W_k.shape[0] == W_v.shape[0] == memory.shape[1], case.label
        assert conv.expected_parts(case)["weights"].shape == (case.n, case.lk)
    widths = {case.memory.shape[1] == case.d for case in drawn}
    assert widths == {True, False}
    assert np.array_equal(cases.integer_case(conv, 4).memory, np.round(cases.integer_case(conv, 4).memory))


def test_cross_attention_has_its_own_checks_features_and_mistakes():
    fn = _single()
    assert fn.points["memory_permutation"] == 1 and fn.points["permutation_equivariance"] == 1
    assert "cross" in features(fn.convention)
    named = {m.id for m in applicable(fn.convention)}
    assert {"keys_values_from_queries", "cross_sequences_swapped"} <= named
    causal = _single(extra="causal = true\n")
    assert "memory_permutation" not in causal.points and "causal_future" in causal.points
    self_attention = load_assignment("masks").functions[1]
    assert "memory_permutation" not in self_attention.points
    assert "cross" not in features(self_attention.convention)


def test_permuting_the_memory_or_the_queries_moves_only_their_own_axis_of_the_reference():
    fn = _single()
    ctx = Context(seed=5, tolerance=Tolerance())
    conv = fn.convention
    base, permuted = check_probes("memory_permutation", fn, ctx)
    order = cases.memory_permutation(base.case.lk, 5)
    assert np.array_equal(permuted.case.memory, base.case.memory[order])
    assert np.array_equal(permuted.case.x, base.case.x)
    before, after = conv.expected_parts(base.case), conv.expected_parts(permuted.case)
    assert np.allclose(after["output"], before["output"])
    assert np.allclose(after["weights"], before["weights"][:, order])
    base, permuted = check_probes("permutation_equivariance", fn, ctx)
    order = cases.token_permutation(base.case.n, 5)
    before, after = conv.expected_parts(base.case), conv.expected_parts(permuted.case)
    assert np.allclose(after["output"], before["output"][order])
    assert np.allclose(after["weights"], before["weights"][order])
    assert conv.token_axes("weights") == (0,)


def test_the_sheet_data_is_refused_for_a_cross_convention_in_one_line():
    with pytest.raises(SpecError) as error:
        _single(fixed='fixed_data = "sheet_000"\n')
    message = str(error.value)
    assert "\n" not in message and "does not fit its convention" in message
    assert "the convention takes a second sequence (memory, cross-attention), it has none" in message


@pytest.mark.parametrize("weights, words", [
    (np.ones((5, 5)), "has shape (5, 5); its axis 1 should run over the memory's 7 rows"),
    (np.float64(1.0), "has shape (); its axis 1 should run over"),
])
def test_weights_that_are_not_over_the_memory_fail_the_memory_check_in_one_sentence(weights, words):
    """What a function returns is the kernel's, so anything: a wrong shape is a wrong answer."""
    fn = _single()
    ctx = Context(seed=5, tolerance=Tolerance())
    probes = check_probes("memory_permutation", fn, ctx)
    assert probes[0].case.lk == 7
    results = [(p, Outcome("ok", Parts(values={"output": np.zeros((5, 2)), "weights": weights}))) for p in probes]
    verdict = judge_memory_permutation(fn, ctx, results)
    assert verdict.status == "failed" and words in verdict.message and "\n" not in verdict.message


@pytest.mark.slow
def test_cross_attention_worked_solutions_earn_full_marks():
    result = graded_at_full_marks(CROSS / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"cross_attention.memory_permutation", "cross_multihead.memory_permutation",
            "cross_attention.permutation_equivariance", "cross_multihead.single_head"} <= kinds


@pytest.mark.slow
def test_each_planted_cross_attention_mistake_is_named():
    result, smallest = planted_mistakes_named(CROSS / "mistakes.ipynb", SPEC, MISTAKES)
    # A wrong shape is the student's answer, judged, never a check the grader cannot judge.
    assert not any("could not judge" in c.message for c in result.checks)
    # The smallest failing case has a memory.
    assert all("memory of" in case["case"] for case in smallest.values())


@pytest.mark.slow
def test_keys_and_values_misaligned_fail_the_memory_permutation_check(tmp_path):
    """Values read from the memory in another order than the keys: the output depends on the
    memory's order, which cross-attention's may not."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('''import numpy as np

def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def cross_attention(X, memory, W_q, W_k, W_v):
    Q, K, V = X @ W_q, memory @ W_k, memory[::-1] @ W_v
    w = softmax(Q @ K.T / np.sqrt(K.shape[1]))
    return w @ V, w
''')]
    path = tmp_path / "misaligned.ipynb"
    nbformat.write(nb, path)
    checks = {c.name: c for c in grade(path, str(SPEC)).checks if c.function == "cross_attention"}
    check = checks["cross_attention.memory_permutation"]
    assert check.status == "failed" and "should leave the output unchanged" in check.message
    assert checks["cross_attention.permutation_equivariance"].status == "passed"


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _masked_cross(X, memory, W_q, W_k, W_v, mask):
    Q, K, V = X @ W_q, memory @ W_k, memory @ W_v
    weights = _softmax(np.where(mask, Q @ K.T / np.sqrt(K.shape[1]), -1e9))
    return weights @ V, weights


def _causal_cross(X, memory, W_q, W_k, W_v, is_causal):
    Q, K, V = X @ W_q, memory @ W_k, memory @ W_v
    scores = Q @ K.T / np.sqrt(K.shape[1])
    if is_causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    weights = _softmax(scores)
    return weights @ V, weights


def _columns_cross(X, M, W_q, W_k, W_v, b_q, b_k, b_v):
    """Tokens as columns, framework layout: W is out x in, applied as W @ X + b."""
    Q, K, V = W_q @ X + b_q, W_k @ M + b_k, W_v @ M + b_v
    return V @ _softmax((K.T @ Q / np.sqrt(K.shape[0])).T).T


def _per_head_cross(x, memory, W_q, W_k, W_v, W_o):
    heads = [_softmax(x @ q @ (memory @ k).T / np.sqrt(k.shape[1])) @ (memory @ v) for q, k, v in zip(W_q, W_k, W_v)]
    return np.concatenate(heads, axis=1) @ W_o


XM = 'params = [{ name = "X", role = "x" }, { name = "memory", role = "memory" }, '
WQKV = '{ name = "W_q", role = "wq" }, { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }, '
CROSS_FORMS = {
    "mask": (XM + WQKV + '{ name = "mask", role = "mask", form = "keep" }]\n'
             'returns = ["output", "weights"]\nfully_masked = "uniform"\n', _masked_cross),
    "causal": (XM + WQKV + '{ name = "c", role = "causal" }]\nreturns = ["output", "weights"]\n', _causal_cross),
    "columns": ('params = [{ name = "X", role = "x" }, { name = "M", role = "memory" }, ' + WQKV +
                '{ name = "b_q", role = "bq" }, { name = "b_k", role = "bk" }, { name = "b_v", role = "bv" }]\n'
                'returns = "output"\ntokens = "columns"\nweights = "out_in"\n', _columns_cross),
    "per_head": ('params = [{ name = "x", role = "x" }, { name = "memory", role = "memory" }, '
                 '{ name = "W_q", role = "wq", heads = "per_head" }, '
                 '{ name = "W_k", role = "wk", heads = "per_head" }, '
                 '{ name = "W_v", role = "wv", heads = "per_head" }, { name = "W_o", role = "wo" }]\n'
                 'returns = "output"\n', _per_head_cross),
}


@pytest.mark.parametrize("form", sorted(CROSS_FORMS))
def test_a_memory_is_sent_in_every_course_form_and_a_course_function_meets_the_reference(form):
    """A memory with a mask, causal, tokens as columns in the framework layout, or per-head
    weights: a course's function written from the words of docs/specs.md computes the reference."""
    text, course_function = CROSS_FORMS[form]
    fn = parse('[[functions]]\nname = "attend"\n[functions.convention]\n' + text, "course.toml").functions[0]
    conv = fn.convention
    ctx = Context(seed=11, tolerance=Tolerance())
    probes = [*check_probes("random_shapes", fn, ctx), *check_probes("dtypes", fn, ctx)[:1]]
    if not conv.causal:
        probes += check_probes("memory_permutation", fn, ctx)
    for probe in probes:
        case = probe.case
        assert case.memory is not None and case.lk != case.n and case.causal == conv.causal, case.label
        returned = course_function(*conv.call_arguments(case))
        returned = returned if isinstance(returned, tuple) else (returned,)
        expected = conv.expected_parts(case)
        for part, value in zip(conv.returns, returned):
            value = value.T if conv.columns else value
            assert np.allclose(value, expected[part]), (form, part, case.label)
