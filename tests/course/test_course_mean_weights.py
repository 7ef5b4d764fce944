"""The attention weights averaged over the heads, a returned part of their own (`mean_weights`):
PyTorch's multi-head attention returns them so by default (`average_attn_weights=True`: B x L
x S where each head's are B x H x L x S). Read off a call by `spec infer`, judged by the
weights' checks, predicted by every known mistake from its heads' weights, and inferred from a
worked solution, checked and graded end to end in a real kernel."""
import subprocess
import sys

import numpy as np
import pytest

from grading_helpers import FIXTURES, GRADER, ROOT, graded_at_full_marks, planted_mistakes_named
from grader.authoring.spec_tools.returned import read_returns
from grader.calling import cases
from grader.calling.classes import sent_arguments
from grader.calling.conventions import RETURN_NAMES, parse_convention
from grader.calling.returns import Tolerance, canonical_parts
from grader.course.spec import load_assignment, parse
from grader.grading.function_grading import judge_computed
from grader.judging.checks import Context, Outcome
from grader.kernel import replies as payloads
from grader.kernel_side.wire import decode_argument, encode_argument, encode_value
from grader.reference.attention import attention
from grader.reference.mistakes import MISTAKES as KNOWN, mistaken_elements
from grader.settings import PUBLIC_SEED

sys.path.insert(0, str(ROOT / "tests"))
from make_mean_weights_fixtures import MISTAKES  # noqa: E402

HERE = FIXTURES / "mean_weights"
PARAMS = ('params = [{ name = "query", role = "x" }, { name = "key", role = "key_tokens" }, '
          '{ name = "value", role = "value_tokens" }, { name = "num_heads", role = "n_heads" }, '
          '{ name = "in_proj_weight", role = "wqkv" }, { name = "in_proj_bias", role = "bqkv" }, '
          '{ name = "out_proj_weight", role = "wo" }, { name = "out_proj_bias", role = "bo" }]\n'
          'weights = "out_in"\nbatch = true\n')
AVERAGED = PARAMS + 'returns = ["output", "mean_weights"]\n'


def _function(text: str):
    return parse('[[functions]]\nname = "mha"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def mha(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
        average_attn_weights=True, axis=-1):
    """Batch-first multi-head attention as PyTorch's documentation describes it: packed (3E, E)
    input projection, x @ W.T + b, the weights averaged over the heads by default."""
    w_q, w_k, w_v = np.split(in_proj_weight, 3)
    b_q, b_k, b_v = np.split(in_proj_bias, 3)
    b, n, e = query.shape
    d = e // num_heads

    def heads(x):
        return x.reshape(x.shape[0], x.shape[1], num_heads, d).transpose(0, 2, 1, 3)

    q, k, v = heads(query @ w_q.T + b_q), heads(key @ w_k.T + b_k), heads(value @ w_v.T + b_v)
    weights = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d), axis)
    output = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, e) @ out_proj_weight.T + out_proj_bias
    return output, weights.mean(axis=1) if average_attn_weights else weights


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


def test_mean_weights_is_a_part_returns_may_name_and_is_each_element_s_heads_averaged():
    assert "mean_weights" in RETURN_NAMES
    conv = _function(AVERAGED).convention
    assert conv.returns == ("output", "mean_weights")
    case = cases.base_case(conv, 5)
    expected = conv.expected_parts(case)["mean_weights"]
    elements = conv.elements(case)
    assert len(case.heads) > 1 and expected.shape == (len(elements), case.n, case.lk)
    for i, element in enumerate(elements):
        per_head = [h["weights"] for h in attention(element)["heads"]]
        assert np.allclose(expected[i], np.mean(per_head, axis=0))
        assert np.allclose(expected[i].sum(axis=-1), 1.0)
    # One head: its own weights.
    single = parse_convention({"params": [{"name": "X", "role": "x"}, {"name": "Wq", "role": "wq"},
                                          {"name": "Wk", "role": "wk"}, {"name": "Wv", "role": "wv"}],
                               "returns": ["output", "mean_weights"]}, "t", "t")
    case = single.prepare(cases.base_case(single, 5))
    assert np.array_equal(single.expected_parts(case)["mean_weights"], attention(case)["heads"][0]["weights"])


def test_a_known_mistake_predicts_the_mean_of_its_own_heads_weights():
    averaged = _function(AVERAGED).convention
    per_head = _function(PARAMS + 'returns = ["output", "weights"]\nper_head_returns = "axis"\n').convention
    case = cases.base_case(averaged, 5)
    wrong_axis = next(m for m in KNOWN if m.id == "softmax_wrong_axis").variant

    def mistaken(elements):
        return mistaken_elements(elements, wrong_axis)

    predicted = averaged.predict(case, mistaken)["mean_weights"]
    heads = per_head.predict(case, mistaken)["weights_per_head"]
    assert np.allclose(predicted, np.mean(heads, axis=0))
    assert not np.allclose(predicted, averaged.expected_parts(case)["mean_weights"])


def test_infer_reads_weights_averaged_over_the_heads_off_a_call():
    conv = _function(PARAMS + 'returns = "output"\n').convention
    case = conv.prepare(cases.base_case(conv, 5))
    args = conv.call_arguments(case)
    tol = Tolerance()
    assert read_returns(conv, case, encode_value(mha(*args)), tol) == {"returns": ["output", "mean_weights"]}
    assert read_returns(conv, case, encode_value(mha(*args)[1]), tol) == {"returns": "mean_weights"}
    # Each head's weights along a heads axis are still read as the weights.
    assert read_returns(conv, case, encode_value(mha(*args, average_attn_weights=False)), tol) == \
        {"returns": ["output", "weights"], "per_head_returns": "axis"}


def test_the_weights_checks_judge_the_averaged_weights_and_the_mistake_is_named():
    fn = _function(AVERAGED)
    ctx = Context(PUBLIC_SEED, Tolerance())
    right = {c.kind: c for c in judge_computed(fn, ctx, called_in_process(fn, mha)).checks()}
    assert "weights_distribution" in right
    assert all(c.points == c.max_points for c in right.values()), {k: c.message for k, c in right.items()
                                                                   if c.points < c.max_points}
    wrong = {c.kind: c for c in judge_computed(fn, ctx, called_in_process(
        fn, lambda *a: mha(*a, axis=-2))).checks()}
    assert wrong["weights_distribution"].points == 0
    assert "of the attention weights averaged over the heads sums to" in wrong["weights_distribution"].message
    assert wrong["random_shapes"].diagnosis == "softmax over the wrong axis"


def test_a_mask_s_checks_judge_the_averaged_weights_too():
    fn = _function(PARAMS.replace('role = "bo" }]', 'role = "bo" }, { name = "key_padding_mask", '
                                                    'role = "key_padding", form = "ignore" }]')
                   + 'returns = ["output", "mean_weights"]\n')
    assert "masked_keys_zero_weight" in fn.points


@pytest.mark.slow
def test_infer_proposes_the_averaged_weights_and_the_spec_grades_a_mistake_by_name(tmp_path):
    spec = tmp_path / "course.toml"
    done = subprocess.run([*GRADER, "spec", "infer", HERE / "worked.ipynb", "-o", spec],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out" not in done.stdout, done.stdout
    assert "returns (output, mean_weights)" in done.stdout
    (inferred,) = load_assignment(str(spec)).functions
    assert inferred.convention.returns == ("output", "mean_weights") and inferred.convention.batched
    checked = subprocess.run([*GRADER, "spec", "check", spec, HERE / "worked.ipynb"], capture_output=True,
                             text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = graded_at_full_marks(HERE / "worked.ipynb", str(spec))
    assert any(c.kind == "weights_distribution" for c in result.checks)
    result, found = planted_mistakes_named(HERE / "softmax_axis.ipynb", str(spec), MISTAKES)
    distribution = next(c for c in result.checks if c.kind == "weights_distribution")
    assert distribution.points == 0 and "averaged over the heads" in distribution.message
    assert "mean_weights = " in found["multi_head_attention_forward"]["code"]
