"""The slips named since the tester's notebooks: scores multiplied by sqrt(d_k) instead of
divided, the values projected with the key or the query weights, the heads merged with a
reshape alone, one bias left out, and cross-attention's values taken unprojected (in words that
fit cross-attention). Each computes what its line of NumPy computes, differs from the reference
and from every other known mistake where it applies, is named on every check it fails (never
a non-answer, so the property checks keep their points), and a mistake named on large scores,
where the softmax saturates, explains the ordinary inputs too."""
import sys

import numpy as np
import pytest

from grading_helpers import ROOT, planted_mistakes_named
from grader.authoring.audit import _Computation
from grader.calling import cases
from grader.calling.conventions import CONVENTIONS
from grader.calling.returns import Tolerance, same
from grader.course.spec import load_assignment, parse
from grader.grading.function_grading import judge_computed
from grader.judging.checks import Context
from grader.judging.explain import Explanation, Predictions, applicable
from grader.reference.attention import Case, Head, attention
from grader.reference.mistakes import HARMLESS, MISTAKES, mistaken_attention

sys.path.insert(0, str(ROOT / "tests"))
from make_slip_fixtures import SLIPS  # noqa: E402

SEED = 20261122
BY_ID = {m.id: m for m in MISTAKES}
NEW = ("scores_multiplied_by_scale", "values_from_key_weights", "values_from_query_weights",
       "heads_merged_by_reshape", "query_bias_missing", "value_bias_missing")

# Functions as the tester's course-style solutions declare them (inferred by `grader spec
# infer`): a scale flag, weights read from the notebook's globals, a class built from course
# layers, tokens as columns in a framework's layout, cross-attention on an encoder's output.
TESTER_SPEC = '''
name = "tester"

[[functions]]
name = "DotProductAttention"
[functions.convention]
description = "query, key, value, a keep-mask and a scale flag; returns output"
params = [{ name = "query", role = "q" }, { name = "key", role = "k" }, { name = "value", role = "v" },
          { name = "mask", role = "mask", form = "keep" }, { name = "scale", role = "scale" }]
returns = "output"
fully_masked = "uniform"

[[functions]]
name = "self_attention_globals"
[functions.convention]
description = "X; weights read from the notebook's globals; returns output"
params = [{ name = "X", role = "x" }]
returns = "output"
globals = { Wq = "wq", Wk = "wk", Wv = "wv" }

[[functions]]
name = "MultiHeadAttention"
[functions.convention]
description = "a module of course layers: forward(query, key, value) on a batch; returns output"
params = [{ name = "query", role = "x" }, { name = "key", role = "key_tokens" },
          { name = "value", role = "value_tokens" }]
batch = true
returns = "output"
[functions.convention.class]
method = "forward"
construct = [{ name = "d_model", role = "d_model" }, { name = "num_heads", role = "n_heads" }]
init = { method = "init_weights", params = [{ name = "Wq", role = "wq" }, { name = "bq", role = "bq" },
 { name = "Wk", role = "wk" }, { name = "bk", role = "bk" }, { name = "Wv", role = "wv" }, { name = "bv", role = "bv" },
 { name = "Wo", role = "wo" }, { name = "bo", role = "bo" }] }

[[functions]]
name = "self_attention_columns"
[functions.convention]
description = "tokens as columns, framework layout, a bias each; returns output"
params = [{ name = "X", role = "x" }, { name = "omega_q", role = "wq" }, { name = "omega_k", role = "wk" },
          { name = "omega_v", role = "wv" }, { name = "beta_q", role = "bq" }, { name = "beta_k", role = "bk" },
          { name = "beta_v", role = "bv" }]
weights = "out_in"
tokens = "columns"
returns = "output"

[[functions]]
name = "cross_attention"
[functions.convention]
description = "x, encoder_out; returns output"
params = [{ name = "x", role = "x" }, { name = "encoder_out", role = "memory" }, { name = "W_q", role = "wq" },
          { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }]
returns = "output"
'''
TESTER = {fn.name: fn for fn in parse(TESTER_SPEC, "tester.toml").functions}

# Each new mistake on the tester's function that made it (and where else it applies).
WHERE = {
    "scores_multiplied_by_scale": ["DotProductAttention", "cross_attention", "self_attention_globals"],
    "values_from_key_weights": ["self_attention_globals", "MultiHeadAttention", "self_attention_columns"],
    "values_from_query_weights": ["self_attention_globals", "self_attention_columns"],
    "heads_merged_by_reshape": ["MultiHeadAttention"],
    "query_bias_missing": ["self_attention_columns", "MultiHeadAttention"],
    "value_bias_missing": ["self_attention_columns", "MultiHeadAttention"],
}
CROSS_VALUES = "values taken unprojected from their sequence instead of V"


def _case(seed=0, n=5, d=6, n_heads=2, d_k=3, biases=False, memory_rows=None) -> Case:
    rng = np.random.default_rng(seed)
    rows = d

    def bias():
        return rng.normal(size=d_k) if biases else None

    heads = tuple(Head(rng.normal(size=(d, d_k)), rng.normal(size=(rows, d_k)), rng.normal(size=(rows, d_k)),
                       bias(), bias(), bias()) for _ in range(n_heads))
    return Case(x=rng.normal(size=(n, d)), heads=heads,
                memory=None if memory_rows is None else rng.normal(size=(memory_rows, d)))


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _fused(case: Case, name: str) -> np.ndarray:
    return np.concatenate([getattr(h, name) for h in case.heads], axis=-1)


# --- each computes what its line of NumPy computes ---

def test_scores_multiplied_by_sqrt_dk():
    case = _case(n_heads=1, d_k=4)
    h = case.heads[0]
    q, k, v = case.x @ h.wq, case.x @ h.wk, case.x @ h.wv
    weights = _softmax(q @ k.T * np.sqrt(4))
    got = mistaken_attention(case, BY_ID["scores_multiplied_by_scale"].variant)
    np.testing.assert_allclose(got["heads"][0]["weights"], weights)
    np.testing.assert_allclose(got["output"], weights @ v)


@pytest.mark.parametrize("mistake, weights", [("values_from_key_weights", "wk"), ("values_from_query_weights", "wq")])
def test_values_projected_with_other_weights(mistake, weights):
    case = _case(n_heads=1, d_k=4, biases=True)
    h = case.heads[0]
    q, k = case.x @ h.wq + h.bq, case.x @ h.wk + h.bk
    v = case.x @ getattr(h, weights) + h.bv       # the weight mistyped, the value's bias kept
    w = _softmax(q @ k.T / 2)
    got = mistaken_attention(case, BY_ID[mistake].variant)
    np.testing.assert_allclose(got["output"], w @ v)


def test_heads_merged_with_a_reshape_alone():
    """Split right into (H, N, d), then (H, N, d).reshape(N, H * d) with no transpose back."""
    case = _case(n_heads=3, d_k=2)
    q, k, v = (case.x @ _fused(case, name) for name in ("wq", "wk", "wv"))

    def split(a):
        return a.reshape(case.n, 3, 2).transpose(1, 0, 2)

    heads = _softmax(split(q) @ split(k).transpose(0, 2, 1) / np.sqrt(2)) @ split(v)
    got = mistaken_attention(case, BY_ID["heads_merged_by_reshape"].variant)
    np.testing.assert_allclose(got["output"], heads.reshape(case.n, 6))
    assert not np.allclose(got["output"], heads.transpose(1, 0, 2).reshape(case.n, 6))


@pytest.mark.parametrize("mistake, left_out", [("query_bias_missing", "q"), ("value_bias_missing", "v")])
def test_one_bias_left_out(mistake, left_out):
    case = _case(n_heads=1, d_k=4, biases=True)
    h = case.heads[0]
    q, k, v = (case.x @ getattr(h, f"w{p}") + (0 if p == left_out else getattr(h, f"b{p}")) for p in "qkv")
    got = mistaken_attention(case, BY_ID[mistake].variant)
    np.testing.assert_allclose(got["output"], _softmax(q @ k.T / 2) @ v)


# --- distinct from the reference and from each other where they apply ---

def _conventions(mistake: str) -> list:
    built_in = [c for c in CONVENTIONS.values() if any(m.id == mistake for m in applicable(c))]
    return built_in + [TESTER[name].convention for name in WHERE[mistake]]


@pytest.mark.parametrize("mistake", NEW)
def test_each_applies_where_the_tester_met_it(mistake):
    for name in WHERE[mistake]:
        assert mistake in {m.id for m in applicable(TESTER[name].convention)}, name


@pytest.mark.parametrize("mistake", NEW)
def test_each_differs_from_the_reference_and_every_other_mistake_on_the_randomized_inputs(mistake):
    def parts(conv, m, case):
        return Predictions().parts(conv, Explanation((m,), m.variant), case)

    def differ(a, b):
        return any(not same(a[p], b[p], Tolerance()) for p in a if p in b)

    for conv in _conventions(mistake):
        inputs = cases.random_cases(conv, SEED) + [cases.base_case(conv, SEED)]
        mine = next(m for m in applicable(conv) if m.id == mistake)
        computed = [parts(conv, mine, c) for c in inputs]
        assert any(differ(a, conv.expected_parts(c)) for a, c in zip(computed, inputs)), conv.description
        for other in applicable(conv):
            if other.id in (mistake, *HARMLESS):
                continue
            theirs = [parts(conv, other, c) for c in inputs]
            assert any(differ(a, b) for a, b in zip(computed, theirs)), (mistake, other.id, conv.description)


def test_a_key_bias_left_out_is_no_mistake_the_output_shows():
    """q . (k_j + b_k) adds q . b_k to every score of query i alike, which the softmax does not
    see: so no mistake is named for it, and the query and value biases each have one."""
    assert {"query_bias_missing", "value_bias_missing"} <= set(BY_ID)
    case = _case(n_heads=1, d_k=4, biases=True)
    h = case.heads[0]
    q, v = case.x @ h.wq + h.bq, case.x @ h.wv + h.bv
    np.testing.assert_allclose(_softmax(q @ (case.x @ h.wk).T / 2) @ v, attention(case)["output"])


# --- the words: cross-attention's values are the memory's, not X's ---

def test_values_left_unprojected_are_said_in_cross_attentions_words():
    rows = {m.id: m for m in applicable(CONVENTIONS["rows_single"])}["values_from_x"]
    assert rows.title == "values taken from X instead of V" and "V = X W_v" in rows.explanation
    for conv in (TESTER["cross_attention"].convention,
                 *(fn.convention for fn in load_assignment("cross").functions),
                 *(fn.convention for fn in load_assignment("framework").functions)):
        mistake = {m.id: m for m in applicable(conv)}.get("values_from_x")
        if mistake is None:
            continue
        assert mistake.title == CROSS_VALUES, conv.description
        assert " X " not in f" {mistake.explanation} {mistake.hint} " and "memory" in mistake.explanation
        assert mistake.variant == rows.variant


# --- named on every check it fails, never a non-answer ---

def _judged(fn, mistake_id: str):
    ctx = Context(SEED, Tolerance(1e-5, 1e-8))
    mistake = next(m for m in applicable(fn.convention) if m.id == mistake_id)
    computation = _Computation(fn, Explanation((mistake,), mistake.variant), ctx.predictions, ctx.tolerance)
    return mistake, judge_computed(fn, ctx, computation.outcome)


@pytest.mark.parametrize("mistake_id, function", [(m, f) for m in NEW for f in WHERE[m]] +
                         [("values_from_x", "cross_attention")])
def test_each_is_named_on_the_checks_it_fails_and_keeps_its_property_points(mistake_id, function):
    mistake, grading = _judged(TESTER[function], mistake_id)
    assert mistake_id != "values_from_x" or mistake.title == CROSS_VALUES
    assert not grading.non_answer_reason, grading.non_answer_reason
    checks = grading.checks()
    failed = [c for c in checks if c.status == "failed"]
    assert failed and all(c.diagnosis == mistake.title for c in failed), [(c.name, c.diagnosis) for c in failed]
    assert any(c.status == "passed" and c.points for c in checks)
    # The large scores' check names this mistake or none: never one the ordinary inputs rule out.
    assert all(c.diagnosis in (None, mistake.title) for c in checks if c.kind == "numerical_stability")


def test_a_mistake_named_on_saturated_scores_explains_the_ordinary_inputs_too():
    """On large scores each query's weight goes to one key, so a query bias left out changes
    nothing there: "biases missing" matched the large scores of a function that leaves out the
    value bias alone, and was named beside the checks that said otherwise."""
    for fn in (load_assignment("framework").functions[1], TESTER["MultiHeadAttention"]):
        _, grading = _judged(fn, "value_bias_missing")
        said = {c.kind: c.diagnosis for c in grading.checks()}
        assert said["numerical_stability"] == "value bias missing", said
        assert said["random_shapes"] == "value bias missing", said


# --- planted in notebooks, graded in a real kernel ---

@pytest.mark.slow
@pytest.mark.parametrize("notebook", sorted(SLIPS))
def test_each_planted_slip_is_named_and_no_non_answer(notebook):
    assignment, _, _, planted = SLIPS[notebook]
    result, _ = planted_mistakes_named(ROOT / "tests" / "fixtures" / "slips" / notebook, assignment, planted)
    for function, (_, _, title) in planted.items():
        checks = [c for c in result.checks if c.function == function]
        failed = [c for c in checks if c.status == "failed"]
        assert all(c.diagnosis == title for c in failed), [(c.name, c.diagnosis) for c in failed]
        assert all(c.diagnosis in (None, title) for c in checks if c.kind == "numerical_stability")
        assert any(c.status == "passed" and c.points for c in checks), function
