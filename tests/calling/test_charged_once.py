"""One mistake is charged once, and a part not returned costs only its share: student functions
written in NumPy, called as the kernel would call them (arguments in each probe's layout and
dtype, the return value through the wire format) but in this process, and judged by
grading.function_grading.judge_computed exactly as grading judges a kernel's replies."""
import numpy as np
import pytest

from grader.calling.classes import sent_arguments
from grader.calling.returns import Parts, canonical_parts, not_returned
from grader.course.spec import load_assignment
from grader.grading.function_grading import judge_computed
from grader.judging.checks import Context, Outcome
from grader.kernel import replies as payloads
from grader.kernel_side.wire import decode_argument, encode_argument, encode_value
from grader.settings import PUBLIC_SEED

ROWS = {fn.name: fn for fn in load_assignment("rows").functions}
TOLERANCE = load_assignment("rows").tolerance


def called_in_process(fn, student):
    """The Outcome of each probe as a kernel running `student` would report it."""
    conv = fn.convention

    def outcome(probe) -> Outcome:
        sent = sent_arguments(probe, conv)
        received = [decode_argument(encode_argument(a, probe.variant.layout)) for a in sent]
        try:
            value = student(*received)
        except Exception as exc:  # noqa: BLE001 - a student's error is an outcome
            return Outcome("error", error=f"{type(exc).__name__}: {exc}", sent=sent)
        parts = canonical_parts(conv, payloads.encoded_value(encode_value(value)))
        return Outcome("ok", parts=parts, sent=sent, inputs_after=sent)
    return outcome


def graded(name: str, student) -> dict:
    """Each check of the rows assignment's function `name`, by kind."""
    fn = ROWS[name]
    grading = judge_computed(fn, Context(PUBLIC_SEED, TOLERANCE), called_in_process(fn, student))
    return {c.kind: c for c in grading.checks()}


def score(checks: dict) -> tuple[float, float]:
    return sum(c.points for c in checks.values()), sum(c.max_points for c in checks.values())


def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def attention(X, Wq, Wk, Wv, scale=True, axis=-1):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T / (np.sqrt(K.shape[1]) if scale else 1.0)
    w = softmax(s, axis=axis)
    return w @ V, w


def multi_head(X, Wq, Wk, Wv, H, **mistake):
    outputs, weights = [], []
    for idx in np.split(np.arange(Wq.shape[1]), H):
        out, w = attention(X, Wq[:, idx], Wk[:, idx], Wv[:, idx], **mistake)
        outputs.append(out)
        weights.append(w)
    return np.concatenate(outputs, axis=1), weights


VALUE_CHECKS = ("fixed", "random_shapes", "single_head")


@pytest.mark.parametrize("name, student", [
    ("self_attention", lambda X, Wq, Wk, Wv: attention(X, Wq, Wk, Wv, scale=False)),
    ("multi_head_attention", lambda X, Wq, Wk, Wv, H: multi_head(X, Wq, Wk, Wv, H, scale=False)),
])
def test_missing_scaling_is_charged_by_the_checks_that_compare_values_alone(name, student):
    checks = graded(name, student)
    lost = {kind for kind, c in checks.items() if c.points < c.max_points}
    assert lost == {kind for kind in VALUE_CHECKS if kind in checks}, {k: checks[k].message for k in lost}
    assert checks["random_shapes"].diagnosis == "scores not scaled"
    for kind in ("memory_layout", "dtypes"):
        assert checks[kind].status == "passed" and checks[kind].diagnosis is None, checks[kind].message


def test_softmax_over_the_wrong_axis_is_no_layout_or_dtype_problem():
    checks = graded("self_attention", lambda X, Wq, Wk, Wv: attention(X, Wq, Wk, Wv, axis=0))
    assert checks["random_shapes"].diagnosis == "softmax over the wrong axis"
    assert checks["memory_layout"].status == checks["dtypes"].status == "passed"
    assert "what it returns on the same inputs C-ordered" in checks["memory_layout"].message
    assert score(checks) == (5, 12)   # weights_distribution, the properties, unmodified, structure


def test_code_that_reads_an_arrays_memory_fails_memory_layout_alone():
    """Reading the bytes in memory order reads a Fortran-ordered X transposed: the answer
    depends on the layout, which is what memory_layout is about."""
    def by_memory(X, Wq, Wk, Wv):
        X = np.frombuffer(X.tobytes(order="A"), dtype=X.dtype).reshape(X.shape)
        return attention(X, Wq, Wk, Wv)
    checks = graded("self_attention", by_memory)
    failed = {kind for kind, c in checks.items() if c.status != "passed"}
    assert failed == {"memory_layout"}, {k: checks[k].message for k in failed}
    message = checks["memory_layout"].message
    assert message.startswith("On N = 5, D = 6, Fortran-ordered inputs: the output differs from its own result "
                              "on the same inputs C-ordered")
    assert "memory layout must give the same result" in message and checks["memory_layout"].diagnosis is None


def test_an_integer_array_that_truncates_fails_dtypes_alone():
    """An output array made like an integer X holds the output truncated: only integer inputs show it."""
    def truncating(X, Wq, Wk, Wv):
        output, weights = attention(X, Wq, Wk, Wv)
        kept = np.zeros((X.shape[0], Wv.shape[1]), dtype=X.dtype)
        kept[:] = output
        return kept, weights
    checks = graded("self_attention", truncating)
    failed = {kind for kind, c in checks.items() if c.status != "passed"}
    assert failed == {"dtypes"}, {k: checks[k].message for k in failed}
    assert "integer inputs: the output differs from its own result on the same inputs as floats" in \
        checks["dtypes"].message


def test_float32_is_judged_to_float32s_precision_against_the_functions_own_float64_answer():
    def in_half_precision_for_float32(X, Wq, Wk, Wv):
        output, weights = attention(X, Wq, Wk, Wv)
        return (output.astype(np.float16), weights) if X.dtype == np.float32 else (output, weights)
    assert graded("self_attention", in_half_precision_for_float32)["dtypes"].status == "passed"

    def rounded_for_float32(X, Wq, Wk, Wv):
        output, weights = attention(X, Wq, Wk, Wv)
        return (np.round(output, 1), weights) if X.dtype == np.float32 else (output, weights)
    dtypes = graded("self_attention", rounded_for_float32)["dtypes"]
    assert dtypes.status == "failed" and "float32 inputs: the output differs from its own result on the same " \
        "inputs in float64" in dtypes.message


def test_a_correct_output_returned_alone_earns_the_outputs_share_and_is_named():
    checks = graded("self_attention", lambda X, Wq, Wk, Wv: attention(X, Wq, Wk, Wv)[0])
    assert (checks["fixed"].points, checks["random_shapes"].points) == (1.5, 1.5)
    assert checks["fixed"].status == "failed"
    assert checks["fixed"].message.startswith("The attention weights were not returned, so this check gives only "
                                              "the share of the parts returned right, 1 of the 2 asked for: the "
                                              "output matches the reference on")
    for kind in ("permutation_equivariance", "memory_layout", "dtypes", "inputs_unmodified"):
        assert checks[kind].status == "passed", checks[kind].message
    assert checks["weights_distribution"].points == checks["return_structure"].points == 0
    assert "the attention weights were not returned" in checks["weights_distribution"].message
    # The first check that names a mistake, fixed, leads with it.
    first = next(c for c in checks.values() if c.diagnosis)
    assert first.kind == "fixed" and first.diagnosis == "weights not returned"
    assert "returns the output but not the attention weights, where (output, attention weights) is asked" \
        in first.advice
    assert {c.diagnosis for c in checks.values() if c.status == "failed"} == {"weights not returned"}
    assert score(checks) == (7, 12)


def test_the_per_head_weights_not_returned_are_plural_and_cost_their_share():
    checks = graded("multi_head_attention", lambda X, Wq, Wk, Wv, H: multi_head(X, Wq, Wk, Wv, H)[0])
    assert "the per-head attention weights were not returned" in checks["weights_distribution"].message
    assert checks["single_head"].points == 0.5 and checks["fixed"].diagnosis == "weights not returned"
    assert score(checks) == (7.5, 13)


def test_a_wrong_output_returned_alone_earns_nothing_for_its_values():
    checks = graded("self_attention", lambda X, Wq, Wk, Wv: attention(X, Wq, Wk, Wv, scale=False)[0])
    assert checks["fixed"].points == checks["random_shapes"].points == 0
    assert checks["fixed"].diagnosis == "scores not scaled"
    assert checks["return_structure"].diagnosis == "weights not returned"


def test_weights_in_a_form_that_cannot_be_used_still_fail_the_checks_that_judge_them():
    """Returning a part wrongly is a wrong answer, not a part left out: no share is paid."""
    checks = graded("multi_head_attention", lambda X, Wq, Wk, Wv, H: (multi_head(X, Wq, Wk, Wv, H)[0],
                                                                       multi_head(X, Wq, Wk, Wv, H)[1][-1]))
    assert checks["fixed"].points == 0 and "expected a list of H arrays" in checks["fixed"].message
    assert checks["fixed"].diagnosis is None


def test_a_part_not_returned_is_said_in_grammatical_english():
    assert not_returned("output") == "was not returned"
    assert not_returned("weights") == "were not returned"
    assert not_returned("weights_per_head") == "were not returned"
    assert not_returned("q") == "was not returned"
    parts = Parts(values={"output": np.ones((2, 2))})
    assert parts.missing("weights_per_head") == "were not returned" and not parts.came_back("weights_per_head")
