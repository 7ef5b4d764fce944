"""The library of known mistakes: distinct from each other and from the reference on the
checks' inputs, and never pinned on a correct submission."""
import itertools

import numpy as np
import pytest

from grading_helpers import ROOT, SAMPLES, FIXTURES, SUBMISSIONS, grade
from grader.calling import cases
from grader.calling.conventions import CONVENTIONS
from grader.judging.explain import Explanation, Predictions, applicable, explanations
from grader.reference.attention import attention
from grader.reference.mistakes import HARMLESS, MISTAKES, PRECISION_SLIPS, Variant, mistaken_attention
from grader.calling.returns import Tolerance, same

SEED = 20261122
EXACT = Tolerance(1e-12, 1e-12)


def mistake_parts(conv, mistake, case) -> dict:
    return Predictions().parts(conv, Explanation((mistake,), mistake.variant), case)


def _differ(a: dict, b: dict) -> bool:
    return any(not same(a[p], b[p], Tolerance()) for p in a if p in b)


# The conventions that can make a mistake besides the overflow (a projections-only convention
# can only project with the wrong weights).
WITH_MISTAKES = sorted(n for n in CONVENTIONS if any(m.id != "softmax_overflow" for m in applicable(CONVENTIONS[n])))
WITH_PAIRS = sorted(n for n in CONVENTIONS if any(len(e.mistakes) == 2 for e in explanations(CONVENTIONS[n])))


def test_every_convention_can_make_mistakes_and_all_but_the_projections_alone_pairs_of_them():
    assert set(CONVENTIONS) == set(WITH_MISTAKES)
    assert {m.id for m in applicable(CONVENTIONS["qkv_projections"])} == {
        "keys_from_query_weights", "keys_from_value_weights", "queries_from_key_weights", "queries_from_value_weights"}
    assert len(WITH_PAIRS) >= len(CONVENTIONS) - 2, WITH_PAIRS


@pytest.mark.parametrize("name", WITH_MISTAKES)
def test_mistakes_are_distinct_on_the_randomized_inputs(name):
    conv = CONVENTIONS[name]
    inputs = cases.random_cases(conv, SEED) + [cases.base_case(conv, SEED)]
    mistakes = [m for m in applicable(conv) if m.id not in HARMLESS]
    computed = {m.id: [mistake_parts(conv, m, c) for c in inputs] for m in mistakes}
    reference = [conv.expected_parts(c) for c in inputs]
    for m in mistakes:
        assert any(_differ(a, r) for a, r in zip(computed[m.id], reference)), f"{m.id} equals the reference"
    for a, b in itertools.combinations(mistakes, 2):
        assert any(_differ(x, y) for x, y in zip(computed[a.id], computed[b.id])), f"{a.id} coincides with {b.id}"


WITH_OVERFLOW = sorted(n for n in CONVENTIONS if any(m.id == "softmax_overflow" for m in applicable(CONVENTIONS[n])))


def test_every_convention_with_a_softmax_can_overflow():
    assert len(WITH_OVERFLOW) >= 5, WITH_OVERFLOW


@pytest.mark.parametrize("name", WITH_OVERFLOW)
def test_overflow_shows_only_on_large_scores(name):
    conv = CONVENTIONS[name]
    overflow = [m for m in applicable(conv) if m.id == "softmax_overflow"]
    large = cases.large_score_case(conv, SEED)
    broken = mistake_parts(conv, overflow[0], large)
    assert any(not np.all(np.isfinite(v)) for v in
               (x for value in broken.values() for x in (value if isinstance(value, list) else [value])))


@pytest.mark.slow
@pytest.mark.parametrize("path, assignment", [
    (SUBMISSIONS / "worked_solution.ipynb", "rows"),
    (FIXTURES / "correct_einsum_batched.ipynb", "rows"),
    (SAMPLES / "qkv_correct.ipynb", "qkv"),
    (SAMPLES / "columns_correct.ipynb", "columns"),
    (SAMPLES / "sdpa_sheet_004.ipynb", "sdpa"),
    (SAMPLES / "two_head_sheet_002.ipynb", "two-head"),
])
def test_correct_submissions_get_no_diagnosis(path, assignment, golden_graded):
    result = grade(path, assignment)
    diagnosed = {c.name: c.diagnosis for c in result.checks if c.diagnosis and c.kind != "numerical_stability"}
    assert diagnosed == {}


EXPECTED = {
    "mistake_softmax_whole_matrix.ipynb": "softmax_whole_matrix",
    "mistake_scaled_twice.ipynb": "scaled_twice",
    "mistake_scaled_after_softmax.ipynb": "scaled_after_softmax",
    "mistake_keys_times_queries.ipynb": "keys_times_queries",
    "mistake_transposed_attention.ipynb": "transposed_attention",
    "mistake_values_from_x.ipynb": "values_from_x",
    "mistake_interleaved_heads.ipynb": "interleaved_heads",
    "mistake_heads_over_tokens.ipynb": "heads_over_tokens",
    "mistake_heads_reversed.ipynb": "heads_reversed",
    "mistake_heads_stacked.ipynb": "heads_stacked_on_tokens",
    "mistake_projection_missing.ipynb": "projection_missing",
    "mistake_projection_wrong_side.ipynb": "projection_wrong_side",
    "mistake_biases_missing.ipynb": "biases_missing",
    "mistake_biases_before_product.ipynb": "biases_before_product",
    "transposed_output.ipynb": "transposed_output",
}
TITLES = {m.id: m.title for m in MISTAKES}


@pytest.mark.slow
@pytest.mark.parametrize("fixture, mistake", sorted(EXPECTED.items()))
def test_each_mistake_is_named_on_its_fixture(fixture, mistake, golden_graded):
    nb = FIXTURES / fixture
    assignment = "columns" if "projection" in fixture or "biases" in fixture else "rows"
    result = grade(nb, assignment)
    diagnoses = {c.diagnosis for c in result.checks if c.diagnosis and c.kind != "numerical_stability"}
    assert TITLES[mistake] in diagnoses, diagnoses
    fixed = [c for c in result.checks if c.kind in ("random_shapes",) and c.status == "failed"]
    assert all(c.diagnosis == TITLES[mistake] for c in fixed), [(c.name, c.diagnosis) for c in fixed]


@pytest.mark.slow
@pytest.mark.parametrize("fixture, words", [
    ("submissions/mistake_softmax_axis.ipynb", "softmax over the wrong axis"),
    ("submissions/mistake_no_scaling.ipynb", "scores not scaled"),
    ("submissions/mistake_scale_by_D.ipynb", "scaled by sqrt(D) instead of sqrt(d_k)"),
    ("submissions/mistake_global_D.ipynb", "reads notebook globals (D)"),
    ("submissions/worked_solution.ipynb", "softmax without max-subtraction overflows"),
    ("tests/fixtures/answers/two_mistakes_rows.ipynb", "softmax over the wrong axis and scores not scaled"),
    ("tests/fixtures/mistake_combined_wrongly.ipynb", "weights right but combined wrongly with V"),
    ("tests/fixtures/samples/columns_sheet_003.ipynb", "attention matrix transposed before it is applied to V"),
])
def test_other_diagnoses(fixture, words, golden_graded):
    root = ROOT
    assignment = "columns" if "columns" in fixture else "rows"
    result = grade(root / fixture, assignment)
    assert words in {c.diagnosis for c in result.checks}


def test_the_mistakes_page_lists_every_diagnosis():
    page = (ROOT / "docs" / "mistakes.md").read_text()
    for mistake in (*MISTAKES, *PRECISION_SLIPS):
        assert mistake.title in page, mistake.title
        for _, title, _, _ in mistake.worded:
            assert title in page, title
    assert "reads notebook globals" in page and "weights right but combined wrongly with V" in page


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_the_mistake_free_variant_is_the_reference(name):
    """The mistakes are the reference with parameters: with none set, they are the reference."""
    conv = CONVENTIONS[name]
    for case in cases.random_cases(conv, SEED) + [cases.base_case(conv, SEED)]:
        case = conv.prepare(case)
        mistaken, reference = mistaken_attention(case, Variant()), attention(case)
        assert same(mistaken["output"], reference["output"], EXACT)
        for a, b in zip(mistaken["heads"], reference["heads"]):
            assert all(same(a[p], b[p], EXACT) for p in ("q", "k", "v", "scores", "weights"))


@pytest.mark.parametrize("name", WITH_PAIRS)
def test_pairs_of_mistakes_change_two_different_steps(name):
    pairs = [e for e in explanations(CONVENTIONS[name]) if len(e.mistakes) == 2]
    assert pairs
    for explanation in pairs:
        a, b = (m.variant for m in explanation.mistakes)
        changed = [{f for f in Variant.__dataclass_fields__ if getattr(v, f) != getattr(Variant(), f)}
                   for v in (a, b)]
        assert not changed[0] & changed[1]
        assert all(getattr(explanation.variant, f) == getattr(v, f) for v, c in zip((a, b), changed) for f in c)


@pytest.mark.slow
def test_a_passing_overflow_prediction_is_never_named_on_ordinary_inputs():
    """The one-head-weights notebook returns the right output: a mistake whose prediction equals
    the reference there (the overflow, on ordinary scores) must not be named."""
    result = grade(FIXTURES / "answers" / "one_head_weights_rows.ipynb", "rows")
    multi = [c for c in result.checks if c.function == "multi_head_attention"]
    assert not any(c.diagnosis for c in multi), [(c.name, c.diagnosis) for c in multi]
    comparing = ("fixed", "random_shapes", "single_head", "memory_layout", "dtypes")
    assert all(c.status == "failed" and "expected a list of H arrays" in c.message
               for c in multi if c.kind in comparing)


# Each new mistake, as a student writes it in NumPy: its prediction must be what that code
# computes, so the name is given exactly when the slip was made.
def _scores(X, Wq, Wk):
    return (X @ Wq) @ (X @ Wk).T


SLIPS = {
    "softmax_denominator_broadcast": lambda s, d_k: (lambda e: e / e.sum(axis=-1))(np.exp(s / np.sqrt(d_k))),
    "softmax_denominator_broadcast_shifted": lambda s, d_k: (lambda e: e / e.sum(axis=-1))(
        np.exp(s / np.sqrt(d_k) - (s / np.sqrt(d_k)).max(axis=-1, keepdims=True))),
    "max_wrong_axis": lambda s, d_k: (lambda e: e / e.sum(axis=-1, keepdims=True))(
        np.exp(s / np.sqrt(d_k) - np.max(s / np.sqrt(d_k), axis=1))),
    "max_whole_matrix": lambda s, d_k: (lambda e: e / e.sum(axis=-1, keepdims=True))(
        np.exp(s / np.sqrt(d_k) - np.max(s / np.sqrt(d_k)))),
    "scale_by_token_count": lambda s, d_k: _row_softmax(s / np.sqrt(s.shape[0])),
    "scores_floor_divided": lambda s, d_k: _row_softmax(s // np.sqrt(d_k)),
}


def _row_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("mistake_id", sorted(SLIPS))
def test_each_new_mistake_is_what_the_slip_computes(mistake_id):
    conv = CONVENTIONS["rows_single"]
    mistake = next(m for m in MISTAKES if m.id == mistake_id)
    for case in cases.random_cases(conv, SEED) + [cases.base_case(conv, SEED)]:
        head = case.heads[0]
        weights = SLIPS[mistake_id](_scores(case.x, head.wq, head.wk), head.wk.shape[1])
        predicted = mistake_parts(conv, mistake, case)
        assert np.allclose(predicted["weights"], weights, rtol=1e-9, atol=1e-12), case.label
        assert np.allclose(predicted["output"], weights @ (case.x @ head.wv), rtol=1e-9, atol=1e-12)


def test_a_slip_that_cannot_run_on_a_case_predicts_the_reference_there():
    """Without keepdims, Lq sums meet Lk columns: with Lq != Lk the student's code raises."""
    from grader.reference.attention import Case, Head
    rng = np.random.default_rng(0)
    head = Head(*(rng.normal(size=(4, 2)) for _ in range(3)))
    case = Case(x=rng.normal(size=(3, 4)), heads=(head,), memory=rng.normal(size=(5, 4)))
    for mistake_id in ("softmax_denominator_broadcast", "max_wrong_axis"):
        variant = next(m for m in MISTAKES if m.id == mistake_id).variant
        assert np.allclose(mistaken_attention(case, variant)["output"], attention(case)["output"])


def test_when_nothing_matches_what_is_known_is_said():
    from grader.judging.diagnosis import what_is_known
    conv = CONVENTIONS["rows_single"]
    case = cases.base_case(conv, SEED)
    expected = conv.expected_parts(case)
    by_column = expected["weights"] / expected["weights"].sum(axis=0, keepdims=True)
    said = what_is_known(conv, [(case, {"weights": by_column, "output": expected["output"] * 2}, Tolerance())],
                         Predictions())
    assert said == "Your weights do not sum to 1 along each row; they do along each column."
    said = what_is_known(conv, [(case, {"weights": expected["weights"] ** 2, "output": expected["output"]},
                                 Tolerance())], Predictions())
    assert said == "Your weights do not sum to 1 along each row, nor along each column."
    assert what_is_known(conv, [(case, {"output": expected["output"] * 2}, Tolerance())], Predictions()) == \
        "No known mistake matches."
    sdpa = CONVENTIONS["sdpa"]
    case = cases.base_case(sdpa, SEED)
    parts = sdpa.expected_parts(case)
    said = what_is_known(sdpa, [(case, {**parts, "weights": parts["weights"] ** 0.5, "output": parts["output"] + 1},
                                Tolerance())], Predictions())
    assert said.startswith("Your attention scores match the reference, so the mistake comes after them.")


def test_weights_that_sum_to_1_along_each_column_as_given_are_said_to():
    """Column sums measured on what the student returned: weights rounded to 4 decimals as the
    sheet prints them, or kept in half precision, still sum to 1 along each column to that
    precision, and a masked key's column of NaN (0/0) holds no weight to measure; "nor along
    each column" is said only where a column does not sum to 1."""
    from grader.judging.diagnosis import what_is_known
    conv = CONVENTIONS["rows_single"]
    case = cases.base_case(conv, SEED)
    expected = conv.expected_parts(case)
    by_column = expected["weights"] / expected["weights"].sum(axis=0, keepdims=True)
    with_masked_key = by_column.copy()
    with_masked_key[:, 2] = np.nan
    for given in (np.round(by_column, 4), by_column.astype(np.float16), with_masked_key):
        said = what_is_known(conv, [(case, {"weights": given, "output": expected["output"] * 2}, Tolerance())],
                             Predictions())
        assert said == "Your weights do not sum to 1 along each row; they do along each column.", given
    halved_column = by_column.copy()
    halved_column[:, 1] /= 2
    said = what_is_known(conv, [(case, {"weights": halved_column, "output": expected["output"] * 2}, Tolerance())],
                         Predictions())
    assert said == "Your weights do not sum to 1 along each row, nor along each column."


def test_the_largest_difference_of_a_batched_output_names_its_element():
    from grader.judging.checks import Outcome, Probe
    from grader.judging.diagnosis import locate
    from grader.calling.returns import Parts
    from grader.course.spec import load_assignment
    conv = next(fn for fn in load_assignment("batched").functions if fn.name == "causal_self_attention").convention
    case = cases.base_case(conv, SEED)
    output = conv.expected_parts(case)["output"].copy()
    output[2, 3, 1] += 1.0
    said = locate(conv, [(Probe(case), Outcome("ok", parts=Parts(values={"output": output})))], Tolerance())
    assert said == " The largest difference is at batch element 2, token 3, feature 1."
