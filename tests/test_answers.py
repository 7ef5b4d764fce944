"""The non-answer rule, judged in the grader process alone: which returned values count as
attention. Values are built here with the trusted reference, as a kernel would send them back."""
import numpy as np
import pytest

from grader import cases
from grader.answers import reason, recognised
from grader.checks import Context, Outcome, Probe
from grader.conventions import CONVENTIONS
from grader.explain import Explanation, Predictions, applicable, trivial
from grader.returns import Parts, Tolerance

SEED = 20261122
TOL = Tolerance()


def _results(conv, make_parts):
    """(probe, outcome) pairs for the randomized cases, with the parts `make_parts` returns."""
    results = []
    for case in cases.random_cases(conv, SEED) + [cases.base_case(conv, SEED)]:
        sent = conv.call_arguments(case)
        parts = Parts(values=make_parts(case, sent))
        results.append((Probe(case), Outcome("ok", parts=parts, sent=sent)))
    return [(p, o) for p, o in results if p.case.n >= 2]


def _reference(conv):
    return lambda case, sent: conv.expected_parts(case)


def _like_reference(conv, change):
    return lambda case, sent: {k: change(v, case, sent) for k, v in conv.expected_parts(case).items()}


def _each(v, f):
    return [f(x) for x in v] if isinstance(v, list) else f(v)


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_the_reference_and_every_known_mistake_are_recognised(name):
    conv = CONVENTIONS[name]
    assert recognised(conv, _results(conv, _reference(conv)), TOL, Predictions())
    for mistake in applicable(conv):
        if mistake.id == "softmax_overflow":
            continue   # identical to the reference on ordinary inputs
        explanation = Explanation((mistake,), mistake.variant)
        predictions = Predictions()
        results = _results(conv, lambda case, sent, p=predictions, e=explanation: p.parts(conv, e, case))
        assert recognised(conv, results, TOL, predictions), mistake.id


NON_ANSWERS = {
    "zeros": lambda v, case, sent: _each(v, np.zeros_like),
    "ones": lambda v, case, sent: _each(v, np.ones_like),
    "uniform rows": lambda v, case, sent: _each(v, lambda a: np.full_like(a, 1.0 / a.shape[-1])),
    "same row for every token": lambda v, case, sent: _each(v, lambda a: np.tile(np.arange(a.shape[-1]),
                                                                                  (a.shape[0], 1)) + 0.5),
    "reference plus noise": lambda v, case, sent: _each(v, lambda a: a + 1e-3 * np.sin(np.arange(a.size))
                                                        .reshape(a.shape)),
    "reference scaled": lambda v, case, sent: _each(v, lambda a: 1.01 * a),
}


@pytest.mark.parametrize("kind", sorted(NON_ANSWERS))
@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_non_answers_are_not_recognised(name, kind):
    conv = CONVENTIONS[name]
    results = _results(conv, _like_reference(conv, NON_ANSWERS[kind]))
    assert not recognised(conv, results, TOL, Predictions())


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_returning_an_argument_is_not_recognised(name):
    conv = CONVENTIONS[name]

    def first_argument(case, sent):
        arg = next(a for a in sent if isinstance(a, np.ndarray))
        return {p: arg.T if conv.columns else arg for p in conv.returns if p != "weights_per_head"}
    results = _results(conv, first_argument)
    assert not recognised(conv, results, TOL, Predictions())
    assert "one of its own arguments" in reason(results) or "matches" in reason(results)


def test_nothing_returned_is_not_recognised_and_says_none():
    conv = CONVENTIONS["rows_single"]
    results = _results(conv, lambda case, sent: {})
    for _, outcome in results:
        outcome.parts.returned = "NoneType"
    assert not recognised(conv, results, TOL, Predictions())
    assert reason(results) == "it returns None"


def test_calls_that_all_fail_are_not_recognised():
    conv = CONVENTIONS["rows_single"]
    case = cases.base_case(conv, SEED)
    results = [(Probe(case), Outcome("error", error="the call raised ValueError"))]
    assert not recognised(conv, results, TOL, Predictions())
    assert "no result" in reason(results)


def test_one_right_part_is_enough():
    """Weights right, output wrong: a genuine attempt that keeps its property points."""
    conv = CONVENTIONS["rows_single"]

    def weights_only_right(case, sent):
        parts = conv.expected_parts(case)
        return {"weights": parts["weights"], "output": np.zeros_like(parts["output"])}
    assert recognised(conv, _results(conv, weights_only_right), TOL, Predictions())


def test_trivial_values():
    x = np.arange(12.0).reshape(3, 4)
    assert trivial(np.zeros((3, 3)), []) == "all zeros"
    assert trivial(np.full((3, 3), 1 / 3), []) == "constant"
    assert trivial(np.tile([1.0, 2.0, 3.0], (3, 1)), []) == "the same row for every token"
    assert trivial(np.array([[1.0, 1.0], [2.0, 2.0]]), []) == "uniform along each row"
    assert trivial(x.copy(), [x]) == "one of its own arguments, unchanged"
    assert trivial(x.T.copy(), [x]) == "one of its own arguments, unchanged"
    assert trivial(np.array([[1.0, 2.0], [4.0, 3.0]]), [x]) is None


def test_evidence_includes_the_sheet_shapes():
    from grader.checks import evidence_probes
    from grader.spec import load_assignment
    fn = load_assignment("rows").functions[1]
    labels = [p.label for p in evidence_probes(fn, Context(SEED, TOL))]
    assert any("shapes of the assignment sheet data, H = 3" in label for label in labels)
    assert all(p.case.n >= 2 for p in evidence_probes(fn, Context(SEED, TOL)))
