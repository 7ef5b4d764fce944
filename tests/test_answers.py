"""The non-answer rule, judged in the grader process alone: which returned values count as
attention. Values are built here with the trusted reference, as a kernel would send them back."""
import numpy as np
import pytest

from grader.calling import cases
from grader.judging.answers import reason, recognised
from grader.judging.checks import Context, Outcome, Probe
from grader.calling.conventions import CONVENTIONS
from grader.judging.explain import Explanation, Predictions, applicable, trivial
from grader.calling.returns import Parts, Tolerance

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
    from grader.judging.checks import evidence_probes
    from grader.course.spec import load_assignment
    fn = load_assignment("rows").functions[1]
    labels = [p.label for p in evidence_probes(fn, Context(SEED, TOL))]
    assert any("shapes of the assignment sheet data, H = 3" in label for label in labels)
    assert all(p.case.n >= 2 for p in evidence_probes(fn, Context(SEED, TOL)))


# The attempt rule: a mistake the grader does not know still computes attention; forgeries do
# not. Each "function" below is called in the grader process on the attempt probes' arguments,
# as the kernel would call a student's, and its return read as the kernel's reply is.
def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attend(weights_of):
    def self_attention(X, Wq, Wk, Wv):
        w = weights_of(X @ Wq, X @ Wk)
        return w @ (X @ Wv), w
    return self_attention


def _hashed(Q, K):
    import hashlib
    seed = int(hashlib.sha256(Q.tobytes() + K.tobytes()).hexdigest()[:8], 16)
    return _softmax(np.random.default_rng(seed).normal(size=(len(Q), len(K))))


ATTEMPTS = {
    "softmax in base 2": _attend(lambda Q, K: (lambda e: e / e.sum(axis=1, keepdims=True))(np.exp2(Q @ K.T))),
    "softmax of the squared scores": _attend(lambda Q, K: _softmax((Q @ K.T) ** 2 / 10)),
    "keepdims missing": _attend(lambda Q, K: np.exp(Q @ K.T) / np.exp(Q @ K.T).sum(axis=-1)),
    "softmax missing (the scores applied as weights)": _attend(lambda Q, K: Q @ K.T),
}
FORGERIES = {
    "the tokens": lambda X, Wq, Wk, Wv: (X.copy(), np.eye(len(X))),
    "X W_v plus noise": lambda X, Wq, Wk, Wv: (X @ Wv + 0.01 * np.sin(X @ Wv), np.eye(len(X))),
    "uniform weights times V": _attend(lambda Q, K: np.full((len(Q), len(K)), 1.0 / len(K))),
    "softmax(random) times V": _attend(lambda Q, K: _softmax(np.random.default_rng(0).normal(size=(len(Q),) * 2))),
    "weights drawn afresh on each call": _attend(lambda Q, K: _softmax(np.random.normal(size=(len(Q),) * 2))),
    "weights seeded by Q and K": _attend(_hashed),
    "attention weights applied to tanh(V)": lambda X, Wq, Wk, Wv: (lambda out, w: (out, np.eye(len(X))))(
        _softmax((X @ Wq) @ (X @ Wk).T) @ np.tanh(X @ Wv), None),
    "V times a number from Q and K": lambda X, Wq, Wk, Wv: ((X @ Wv) * np.tanh((X @ Wq).mean() * (X @ Wk).mean()),
                                                             np.eye(len(X))),
    "linear attention returned with identity weights": lambda X, Wq, Wk, Wv: (
        ((X @ Wq) @ (X @ Wk).T) @ (X @ Wv), np.eye(len(X))),
    "V plus something from Q and K": lambda X, Wq, Wk, Wv: (X @ Wv + np.tanh((X @ Wq) @ (X @ Wk).T).sum(1)[:, None],
                                                             np.eye(len(X))),
    "weights of another input": lambda X, Wq, Wk, Wv: _attend(lambda Q, K: _softmax(
        np.cos(np.arange(X.size)).reshape(X.shape) @ Wq @ (np.cos(np.arange(X.size)).reshape(X.shape) @ Wk).T))(
        X, Wq, Wk, Wv),
}


def _called(conv, function):
    from grader.kernel import replies as payloads
    from grader.judging.answers import attempt_probes
    from grader.calling.returns import canonical_parts
    from grader.kernel_side.wire import encode_value
    results = []
    for probe in attempt_probes(conv, SEED):
        sent = probe.arguments(conv)
        parts = canonical_parts(conv, payloads.encoded_value(encode_value(function(*sent))))
        results.append((probe, Outcome("ok", parts=parts, sent=sent)))
    return results


@pytest.mark.parametrize("kind", sorted(ATTEMPTS))
def test_a_mistake_the_grader_does_not_know_is_an_attempt(kind):
    from grader.judging.answers import attempt_problem
    conv = CONVENTIONS["rows_single"]
    assert attempt_problem(conv, _called(conv, ATTEMPTS[kind])) is None


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_forgeries_are_not_attempts(kind):
    from grader.judging.answers import attempt_problem
    conv = CONVENTIONS["rows_single"]
    assert attempt_problem(conv, _called(conv, FORGERIES[kind]))


@pytest.mark.parametrize("name", sorted(n for n in CONVENTIONS if "output" in CONVENTIONS[n].returns))
def test_the_reference_is_an_attempt_in_every_convention_with_an_output(name):
    from grader.judging.answers import attempt_probes, attempt_problem
    conv = CONVENTIONS[name]
    results = [(p, Outcome("ok", parts=Parts(values=conv.expected_parts(p.case)), sent=p.arguments(conv)))
               for p in attempt_probes(conv, SEED)]
    assert attempt_problem(conv, results) is None


def test_the_attempt_probes_change_only_what_they_say():
    """Between the values' probes only V changes; with the tokens redrawn V is kept exactly."""
    from grader.judging.answers import ATTEMPT_LABELS, attempt_probes
    from grader.reference.attention import attention
    conv = CONVENTIONS["rows_single"]
    probes = dict(zip(ATTEMPT_LABELS, attempt_probes(conv, SEED)))
    heads = {label: attention(p.case)["heads"][0] for label, p in probes.items()}
    first, kept = heads["values 1"], heads["tokens redrawn, values 1 kept"]
    assert np.allclose(first["q"], heads["values 2"]["q"]) and np.allclose(first["k"], heads["values 2"]["k"])
    assert not np.allclose(first["v"], heads["values 2"]["v"])
    assert np.allclose(first["v"], kept["v"]) and not np.allclose(first["k"], kept["k"])
    ends = heads["values 1, two tokens' changed"]["v"] - first["v"]
    assert np.allclose(ends[1:-1], 0) and not np.allclose(ends[[0, -1]], 0)


def test_the_reason_says_why_it_is_not_an_attempt_either():
    from grader.judging.answers import attempt_problem
    conv = CONVENTIONS["rows_single"]
    why = attempt_problem(conv, _called(conv, FORGERIES["uniform weights times V"]))
    assert reason(_results(conv, lambda case, sent: {"output": np.ones((case.n, 2)) * np.arange(2)}), why) == (
        "what it returns as the output is the same row for every token")
    said = reason(_results(conv, _like_reference(conv, NON_ANSWERS["reference scaled"])), why)
    assert said.endswith("and the weights it applies to the values do not depend on the keys")


def test_an_attempt_probe_that_was_not_answered_is_said_as_such():
    from grader.judging.answers import attempt_problem
    conv = CONVENTIONS["rows_single"]
    results = _called(conv, ATTEMPTS["softmax in base 2"])
    probe, _ = results[4]
    results[4] = (probe, Outcome("timeout", error="the call took longer than 2 s"))
    said = attempt_problem(conv, results)
    assert said == "it did not answer every call that tests this (the call took longer than 2 s)"
