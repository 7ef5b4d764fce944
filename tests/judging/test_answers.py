"""The non-answer rule, judged in the grader process alone: which returned values count as
attention. Values are built here with the trusted reference, as a kernel would send them back."""
import numpy as np
import pytest

from grader.calling import cases
from grader.judging.answers import reason, recognised
from grader.judging.checks import Context, Outcome, Probe
from grader.calling.conventions import CONVENTIONS
from grader.judging.explain import Explanation, Predictions, applicable, explanations, trivial
from grader.calling.returns import Parts, Tolerance

SEED = 20261122
TOL = Tolerance()


def _results(conv, make_parts, seed=SEED):
    """(probe, outcome) pairs for the randomized cases, with the parts `make_parts` returns."""
    results = []
    for case in cases.random_cases(conv, seed) + [cases.base_case(conv, seed)]:
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


def _called_on(conv, function, probes):
    from grader.kernel import replies as payloads
    from grader.calling.returns import canonical_parts
    from grader.kernel_side.wire import encode_value
    results = []
    for probe in probes:
        sent = probe.arguments(conv)
        parts = canonical_parts(conv, payloads.encoded_value(encode_value(function(*sent))))
        results.append((probe, Outcome("ok", parts=parts, sent=sent)))
    return results


def _called(conv, function):
    """The function's results on the first attempt case's probes."""
    from grader.judging.answers import attempt_groups, attempt_probes
    return _called_on(conv, function, attempt_groups(conv, attempt_probes(conv, SEED))[0])


def _problems(conv, function):
    """What the attempt test finds lacking on each attempt case (None where nothing)."""
    from grader.judging.answers import attempt_groups, attempt_probes, attempt_problem
    return [attempt_problem(conv, _called_on(conv, function, group))
            for group in attempt_groups(conv, attempt_probes(conv, SEED))]


@pytest.mark.parametrize("kind", sorted(ATTEMPTS))
def test_a_mistake_the_grader_does_not_know_is_an_attempt(kind):
    conv = CONVENTIONS["rows_single"]
    assert _problems(conv, ATTEMPTS[kind]) == [None, None, None]


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_forgeries_are_not_attempts(kind):
    conv = CONVENTIONS["rows_single"]
    assert all(_problems(conv, FORGERIES[kind]))


@pytest.mark.parametrize("name", sorted(n for n in CONVENTIONS if "output" in CONVENTIONS[n].returns))
def test_the_reference_is_an_attempt_in_every_convention_with_an_output(name):
    from grader.judging.answers import attempt_groups, attempt_probes, attempt_problem
    conv = CONVENTIONS[name]
    for group in attempt_groups(conv, attempt_probes(conv, SEED)):
        results = [(p, Outcome("ok", parts=Parts(values=conv.expected_parts(p.case)), sent=p.arguments(conv)))
                   for p in group]
        assert attempt_problem(conv, results) is None, group[0].label


@pytest.mark.parametrize("case_index", range(3))
def test_the_attempt_probes_change_only_what_they_say(case_index):
    """Between the values' probes only V changes; with the tokens redrawn V is kept exactly;
    values change at two tokens only; a moved query is one token's query only."""
    from grader.judging.answers import ATTEMPT_LABELS, attempt_groups, attempt_probes
    from grader.reference.attention import attention
    conv = CONVENTIONS["rows_single"]
    probes = {p.label.split(": ")[1]: p for p in attempt_groups(conv, attempt_probes(conv, SEED))[case_index]}
    heads = {label: attention(p.case)["heads"][0] for label, p in probes.items()}
    first, kept = heads["values 1"], heads["tokens redrawn, values 1 kept"]
    assert np.allclose(first["q"], heads["values 2"]["q"]) and np.allclose(first["k"], heads["values 2"]["k"])
    assert not np.allclose(first["v"], heads["values 2"]["v"])
    assert np.allclose(first["v"], kept["v"]) and not np.allclose(first["k"], kept["k"])
    ends = np.abs(heads["values 1, two tokens' changed"]["v"] - first["v"]).max(axis=1)
    assert np.sum(ends > 1e-9) == 2
    assert len(probes) == len(ATTEMPT_LABELS) + len(first["q"])
    for label in set(probes) - set(ATTEMPT_LABELS):
        moved = heads[label]
        assert np.allclose(moved["k"], first["k"]) and np.allclose(moved["v"], first["v"])
        assert np.sum(np.abs(moved["q"] - first["q"]).max(axis=1) > 1e-9) == 1


def test_the_attempt_cases_are_drawn_from_the_seed_in_several_shapes():
    from grader.judging.answers import ATTEMPT_CASES, attempt_cases
    conv = CONVENTIONS["rows_single"]
    shapes = {seed: [(c.n, c.d) for c in attempt_cases(conv, seed)] for seed in (SEED, SEED + 1, 7)}
    assert all(len(set(s)) == ATTEMPT_CASES for s in shapes.values())
    assert len({tuple(s) for s in shapes.values()}) > 1


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


# Whole gradings of the rule's hard cases, without a kernel: the fake kernel runs the real
# harness in this process on the functions a source defines (tests/kernel_fakes.py).
ATTENTION = '''
import numpy as np

def _attention(X, Wq, Wk, Wv):
    X, Wq, Wk, Wv = (np.asarray(a, dtype=float) for a in (X, Wq, Wk, Wv))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scores = Q @ K.T / np.sqrt(K.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights = weights / weights.sum(axis=1, keepdims=True)
    return weights @ V, weights

def multi_head_attention(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [self_attention(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''
NOTHING = "np.zeros((len(X), np.shape(Wv)[1])), np.full((len(X), len(X)), 1.0 / len(X))"


def _graded(monkeypatch, source: str, assignment: str = "rows"):
    import asyncio
    from contextlib import asynccontextmanager

    import nbformat

    from kernel_fakes import HarnessKernel
    from grader import grade
    from grader.course.spec import load_assignment
    from grader.kernel.run_record import ExecutionLog
    from grader.settings import Settings
    namespace: dict = {}
    exec(source, namespace)
    kernel = HarnessKernel(monkeypatch, namespace)

    @asynccontextmanager
    async def executed(*args, **kwargs):
        yield kernel, ExecutionLog()
    monkeypatch.setattr(grade, "executed_notebook", executed)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    return asyncio.run(grade.grade_notebook(nb, load_assignment(assignment), Settings(call_timeout=5), "x.ipynb"))


def _rule_calls(assignment: str = "rows") -> int:
    from grader.course.spec import load_assignment
    from grader.judging.answers import attempt_probes
    from grader.judging.checks import evidence_probes
    from grader.settings import Settings
    fn = load_assignment(assignment).functions[0]
    ctx = Context(Settings().seed, TOL)
    return len({p.key for p in [*evidence_probes(fn, ctx), *attempt_probes(fn.convention, ctx.seed)]})


TUNED = {
    # attention on one shape only, each of several (the base case's, an attempt case's)
    **{f"shape {n} x {d}": f'''
def self_attention(X, Wq, Wk, Wv):
    return _attention(X, Wq, Wk, Wv) if np.shape(X) == ({n}, {d}) else ({NOTHING})
''' for n, d in ((5, 6), (4, 6), (5, 8), (6, 9), (4, 12))},
    # attention on the first calls only: as many as the rule makes, or far fewer
    **{f"first {k} calls": f'''
_calls = [0]
def self_attention(X, Wq, Wk, Wv):
    _calls[0] += 1
    return _attention(X, Wq, Wk, Wv) if _calls[0] <= {k} else ({NOTHING})
''' for k in (17, "RULE_CALLS")},
    # the values blurred by one number computed from the queries, or from queries and keys
    "blur from the queries": '''
def self_attention(X, Wq, Wk, Wv):
    X = np.asarray(X, dtype=float)
    c = 1 / (1 + np.exp(-np.mean(X @ Wq)))
    M = (1 - c) * np.eye(len(X)) + c / len(X)
    return M @ (X @ Wv), M
''',
    "blur from the queries and keys": '''
def self_attention(X, Wq, Wk, Wv):
    X = np.asarray(X, dtype=float)
    c = 1 / (1 + np.exp(-np.mean(X @ Wq) * np.mean(X @ Wk)))
    M = (1 - c) * np.eye(len(X)) + c / len(X)
    return M @ (X @ Wv), M
''',
}


@pytest.mark.parametrize("kind", sorted(TUNED))
def test_tuned_non_answers_earn_nothing(monkeypatch, kind):
    source = ATTENTION + TUNED[kind].replace("RULE_CALLS", str(_rule_calls()))
    result = _graded(monkeypatch, source)
    assert result.score == 0, [(c.name, c.message) for c in result.checks if c.points]


def _bfloat16(a):
    """float32 with its mantissa cut to bfloat16's 7 bits."""
    return (np.asarray(a, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


FEWER_DIGITS = {
    "rounded to 3 decimals": ("lambda a: np.round(a, 3)", "values rounded before they are returned"),
    "rounded to 5 decimals": ("lambda a: np.round(a, 5)", "values rounded before they are returned"),
    "float32": ("lambda a: a.astype(np.float32)", None),
    "bfloat16-like truncation": ("_bfloat16", "computed in reduced precision"),
    "float16": ("lambda a: a.astype(np.float16)", "computed in reduced precision"),
}


@pytest.mark.parametrize("kind", sorted(FEWER_DIGITS))
def test_answers_with_fewer_digits_are_answers_and_named(monkeypatch, kind):
    finish, named = FEWER_DIGITS[kind]
    import inspect
    source = ATTENTION + inspect.getsource(_bfloat16) + f'''
_finish = {finish}
def self_attention(X, Wq, Wk, Wv):
    return tuple(_finish(a) for a in _attention(X, Wq, Wk, Wv))
'''
    result = _graded(monkeypatch, source)
    assert not any(info.get("non_answer") for info in result.functions.values())
    passed = {c.kind for c in result.checks if c.points}
    assert {"permutation_equivariance", "inputs_unmodified", "return_structure"} <= passed
    diagnoses = {c.diagnosis for c in result.checks if c.status == "failed"}
    assert diagnoses <= {named}, diagnoses
    if named:
        assert named in diagnoses


TYPOS = {"K = X @ Wq": "keys projected with the query weights (W_q instead of W_k)",
         "K = X @ Wv": "keys projected with the value weights (W_v instead of W_k)",
         "Q = X @ Wk": "queries projected with the key weights (W_k instead of W_q)"}


@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_projection_from_the_wrong_weights_is_a_named_attempt(monkeypatch, typo):
    role = typo[0]
    wrong = typo.split("@ ")[1]
    source = ATTENTION.replace(f"{role} = X @ W{role.lower()}", typo) + '''
def self_attention(X, Wq, Wk, Wv):
    return _attention(X, Wq, Wk, Wv)
'''
    source = source.replace("Q, K, V = X @ Wq, X @ Wk, X @ Wv",
                            {"K": f"Q, K, V = X @ Wq, X @ {wrong}, X @ Wv",
                             "Q": f"Q, K, V = X @ {wrong}, X @ Wk, X @ Wv"}[role])
    result = _graded(monkeypatch, source)
    assert not any(info.get("non_answer") for info in result.functions.values())
    assert result.score > 0
    assert TYPOS[typo] in {c.diagnosis for c in result.checks}


def test_a_mistake_matched_once_is_asked_first_on_the_notebook_s_later_values():
    """Whether any known computation gives a value does not depend on the order they are asked
    in: the one that matched an earlier value of the notebook's is asked first, so a function
    making one mistake costs one computation on each later case, not one for each mistake
    listed before its own."""
    conv = CONVENTIONS["rows_multi"]
    mistake = applicable(conv)[-1]   # the last single mistake: every other one is listed before it
    explanation = Explanation((mistake,), mistake.variant)
    predictions = Predictions()
    # Cases of their own seed: no other test has had anything computed on them.
    results = _results(conv, lambda case, sent: predictions.parts(conv, explanation, case), seed=SEED + 41)
    first, *later = results
    assert recognised(conv, [first], TOL, predictions)
    assert next(predictions.likely_first(conv)) == explanation
    before = Predictions.shared.computed
    for result in later:
        assert recognised(conv, [result], TOL, predictions)
    assert Predictions.shared.computed == before   # each later case's own prediction was already made
    everything = list(predictions.likely_first(conv))
    assert len(everything) == len(set(everything)) == 1 + len(explanations(conv))
