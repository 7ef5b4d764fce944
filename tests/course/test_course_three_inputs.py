"""Query, key and value as three input sequences, each projected (the framework form
`multi_head_attention(Q, K, V, W_q, W_k, W_v, W_o, num_heads)` and a module's `forward(query,
key, value, key_padding_mask, attn_mask)`), written in a course's TOML spec: the cases drawn to
fit (all three sequences different, and X given as all three), the checks that hold (the queries'
order permutes the output, the keys' and values' order together does not matter, query = key =
value is self-attention), the mistakes of reading the wrong input named, and the spec inferred
from a worked solution, end to end in a real kernel."""
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from grading_helpers import (FIXTURES, GRADER, ROOT, grade, graded_at_full_marks, planted_mistakes_named,
                             own_mistakes_apart)
from grader.calling import cases
from grader.calling.returns import Tolerance
from grader.course.spec import load_assignment, parse
from grader.errors import SpecError
from grader.judging import smallest
from grader.judging.checks import Context, check_probes
from grader.judging.explain import applicable, features
from grader.kernel_side import wire

sys.path.insert(0, str(ROOT / "tests"))
from make_three_input_fixtures import MISTAKES, UNSCALED  # noqa: E402

THREE = FIXTURES / "three_inputs"
SPEC = "framework"   # a built-in, written in the same TOML as a course's spec
QKV = ('params = [{ name = "query", role = "x" }, { name = "key", role = "key_tokens" }, '
       '{ name = "value", role = "value_tokens" }, ')
WEIGHTS = '{ name = "W_q", role = "wq" }, { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }'
SINGLE = QKV + WEIGHTS + ']\nreturns = ["output", "weights"]\n'
NEW_MISTAKES = {"keys_values_swapped", "values_from_key_input", "values_from_query_input", "keys_from_query_input"}


def _function(text: str):
    return parse('[[functions]]\nname = "attend"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attend(query, key, value, W_q, W_k, W_v):
    q, k, v = query @ W_q, key @ W_k, value @ W_v
    weights = _softmax(q @ k.T / np.sqrt(k.shape[1]))
    return weights @ v, weights


def test_the_three_sequences_differ_and_the_key_and_value_inputs_are_as_long_as_each_other():
    conv = _function(SINGLE).convention
    drawn = [*cases.random_cases(conv, 4), cases.base_case(conv, 4), cases.integer_case(conv, 4),
             cases.large_score_case(conv, 4), *smallest.candidates(conv, 4)]
    for case in drawn:
        query, key, value, W_q, W_k, W_v = conv.call_arguments(case)
        assert key is case.memory and value is case.values and key.shape == value.shape, case.label
        assert W_k.shape[0] == W_v.shape[0] == key.shape[1], case.label
        # Drawn apart (a smallest case's few small integers may coincide).
        assert case.label.startswith(smallest.LABEL) or not np.array_equal(key, value), case.label
        assert conv.expected_parts(case)["weights"].shape == (case.n, case.lk)
    # As long and as wide as X on the shorter cases (so that reading the query input for the
    # keys or values runs and is named), longer and wider from N = 7 on.
    shapes = {(c.lk == c.n, c.memory.shape[1] == c.d) for c in cases.random_cases(conv, 4)}
    assert shapes == {(True, True), (False, False)}
    integral = cases.integer_case(conv, 4)
    assert np.array_equal(integral.values, np.round(integral.values))


def test_one_matrix_projecting_q_k_and_v_side_by_side_gets_sequences_of_x_s_width():
    packed = _function(QKV + '{ name = "W_qkv", role = "wqkv" }]\nreturns = "output"\n').convention
    for case in cases.random_cases(packed, 4):
        assert case.memory.shape[1] == case.values.shape[1] == case.d, case.label
        query, key, value, W_qkv = packed.call_arguments(case)
        assert np.allclose(key @ W_qkv[:, W_qkv.shape[1] // 3:2 * W_qkv.shape[1] // 3], key @ case.heads[0].wk)


def test_three_inputs_have_their_own_checks_features_and_mistakes():
    fn = _function(SINGLE)
    assert {"key_value_permutation", "self_attention_inputs", "permutation_equivariance"} <= set(fn.points)
    assert "memory_permutation" not in fn.points
    assert {"cross", "three_inputs"} <= features(fn.convention)
    named = {m.id for m in applicable(fn.convention)}
    assert NEW_MISTAKES | {"keys_values_from_queries"} <= named
    cross = load_assignment("cross").functions[0]
    assert not NEW_MISTAKES & {m.id for m in applicable(cross.convention)}
    causal = _function(SINGLE + "causal = true\n")
    assert "key_value_permutation" not in causal.points and "self_attention_inputs" in causal.points


@pytest.mark.parametrize("text, words", [
    (QKV[:-2].replace(', { name = "value", role = "value_tokens" }', "") + ", " + WEIGHTS + ']\nreturns = "output"\n',
     "role 'key_tokens' needs role 'value_tokens' too"),
    (QKV + '{ name = "m", role = "memory" }, ' + WEIGHTS + ']\nreturns = "output"\n',
     "as one memory, or as key_tokens and value_tokens, not both"),
    ('params = [{ name = "q", role = "q" }, { name = "k", role = "k" }, { name = "v", role = "v" }, '
     '{ name = "key", role = "key_tokens" }, { name = "value", role = "value_tokens" }]\nreturns = "output"\n',
     "need the queries' tokens X as input (role x)"),
])
def test_a_key_or_value_input_that_cannot_be_graded_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_permuting_the_queries_or_the_keys_and_values_together_moves_only_their_own_axis():
    fn = _function(SINGLE)
    conv = fn.convention
    ctx = Context(seed=5, tolerance=Tolerance())
    base, permuted = check_probes("key_value_permutation", fn, ctx)
    order = cases.memory_permutation(base.case.lk, 5)
    assert np.array_equal(permuted.case.memory, base.case.memory[order])
    assert np.array_equal(permuted.case.values, base.case.values[order])
    before, after = conv.expected_parts(base.case), conv.expected_parts(permuted.case)
    assert np.allclose(after["output"], before["output"])
    assert np.allclose(after["weights"], before["weights"][:, order])
    base, permuted = check_probes("permutation_equivariance", fn, ctx)
    order = cases.token_permutation(base.case.n, 5)
    assert np.array_equal(permuted.case.values, base.case.values)
    before, after = conv.expected_parts(base.case), conv.expected_parts(permuted.case)
    assert np.allclose(after["output"], before["output"][order])


@pytest.mark.parametrize("batch", ["", "batch = true\n"])
def test_self_attention_is_x_passed_three_times_as_one_object_and_as_equal_copies(batch):
    fn = _function(SINGLE + batch)
    conv = fn.convention
    ctx = Context(seed=5, tolerance=Tolerance())
    same, copies = check_probes("self_attention_inputs", fn, ctx)
    query, key, value, *_ = same.arguments(conv)
    assert query is key is value
    query, key, value, *_ = copies.arguments(conv)
    assert query is not key and key is not value and np.array_equal(query, key) and np.array_equal(key, value)
    # Self-attention as the plain self-attention convention computes it.
    plain = _function('params = [{ name = "X", role = "x" }, ' + WEIGHTS + ']\nreturns = ["output", "weights"]\n'
                      + batch).convention
    for probe in (same, copies):
        ours = conv.expected_parts(probe.case)["output"]
        theirs = plain.expected_parts(probe.case)["output"]
        assert np.allclose(ours, theirs)


def test_one_object_passed_three_times_reaches_the_function_as_one_object():
    x = np.arange(6.0).reshape(2, 3)
    sent = wire.encode_arguments([x, x, x.copy(), 2], wire.Layout.FORTRAN)
    assert sent[1] == {"same_as": 0} and "raw" in sent[2]
    query, key, value, heads = wire.decode_arguments(sent)
    assert query is key and value is not query and np.array_equal(value, query) and heads == 2
    assert query.flags.f_contiguous


@pytest.mark.parametrize("fn", load_assignment(SPEC).functions, ids=lambda fn: fn.name)
def test_each_three_input_mistake_differs_from_the_reference_and_from_the_others(fn):
    """On the randomized cases each mistake that reads the wrong input computes something of
    its own (reading the query input runs only where the shapes allow, on the shorter cases)."""
    own_mistakes_apart(fn.convention, NEW_MISTAKES)


def _unbatched_module(query, key, value, key_padding_mask, attn_mask, W_q, W_k, W_v, b_qkv, W_o, b_o):
    """forward(query, key, value, key_padding_mask, attn_mask) as docs/specs.md words it, one
    sequence: weights (out, in), both masks True = ignore."""
    b_q, b_k, b_v = np.split(b_qkv, 3)
    q, k, v = query @ W_q.T + b_q, key @ W_k.T + b_k, value @ W_v.T + b_v
    scores = q @ k.T / np.sqrt(k.shape[1])
    weights = _softmax(np.where(attn_mask | key_padding_mask[None, :], -np.inf, scores))
    return weights @ v @ W_o.T + b_o


def test_a_course_function_written_from_the_docs_words_meets_the_reference():
    fn = _function(QKV + '{ name = "kpm", role = "key_padding", form = "ignore" }, '
                   '{ name = "mask", role = "mask", form = "ignore" }, '
                   '{ name = "W_q", role = "wq" }, { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }, '
                   '{ name = "b_qkv", role = "bqkv" }, { name = "W_o", role = "wo" }, { name = "b_o", role = "bo" }]\n'
                   'weights = "out_in"\nreturns = "output"\n')
    conv = fn.convention
    ctx = Context(seed=11, tolerance=Tolerance())
    probes = [*check_probes("random_shapes", fn, ctx), *check_probes("self_attention_inputs", fn, ctx),
              *check_probes("key_value_permutation", fn, ctx)]
    for probe in probes:
        returned = _unbatched_module(*conv.call_arguments(probe.case))
        assert np.allclose(returned, conv.expected_parts(probe.case)["output"]), probe.label
    # Unmasked, the plain function computes the same.
    plain = _function(SINGLE).convention
    for case in cases.random_cases(plain, 11):
        output, weights = _attend(*plain.call_arguments(case))
        assert np.allclose(output, plain.expected_parts(case)["output"]), case.label


@pytest.mark.slow
def test_the_worked_framework_solutions_earn_full_marks():
    result = graded_at_full_marks(THREE / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"multi_head_attention.key_value_permutation", "MultiheadAttention.self_attention_inputs",
            "MultiheadAttention.masked_keys_zero_weight", "multi_head_attention.batch_elements"} <= kinds


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes.ipynb", MISTAKES), ("unscaled.ipynb", UNSCALED)])
def test_each_planted_mistake_is_named(notebook, planted):
    result, found = planted_mistakes_named(THREE / notebook, SPEC, planted)
    assert not any("could not judge" in c.message for c in result.checks)
    assert all("key and value inputs of" in case["case"] for case in found.values())


@pytest.mark.slow
def test_a_function_that_goes_wrong_only_when_key_is_query_fails_the_self_attention_check(tmp_path):
    """A function that takes a shortcut when given one object three times, and gets it wrong
    (the scaling forgotten on that path), fails only what gives it one object."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('''import numpy as np

def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)

def attend(query, key, value, W_q, W_k, W_v):
    q, k, v = query @ W_q, key @ W_k, value @ W_v
    scale = 1.0 if key is query else np.sqrt(k.shape[1])
    weights = softmax(q @ k.T / scale)
    return weights @ v, weights
''')]
    path = tmp_path / "shortcut.ipynb"
    nbformat.write(nb, path)
    spec = tmp_path / "course.toml"
    spec.write_text('name = "c"\ntitle = "c"\n[[functions]]\nname = "attend"\n[functions.convention]\n' + SINGLE)
    checks = {c.kind: c for c in grade(path, str(spec)).checks}
    check = checks["self_attention_inputs"]
    assert check.status == "failed" and "one array passed three times" in check.message, check.message
    assert checks["random_shapes"].status == "passed"


def _run(*args):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_infer_describes_the_framework_form_and_audit_catches_its_mistakes(tmp_path):
    spec = tmp_path / "framework.toml"
    done = _run("spec", "infer", THREE / "worked.ipynb", "-o", spec)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Q=x, K=key_tokens, V=value_tokens" in done.stdout
    assert "query=x, key=key_tokens, value=value_tokens, key_padding_mask=key_padding (form ignore)" in done.stdout
    checked = _run("spec", "check", spec, THREE / "worked.ipynb")
    assert checked.returncode == 0 and "earns every point" in checked.stdout, checked.stdout + checked.stderr
    audited = _run("audit", spec)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    for title in ("keys and values projected from each other's inputs",
                  "values projected from the key input (the value input is ignored)"):
        assert title in audited.stdout
    for notebook, planted in (("mistakes.ipynb", MISTAKES), ("unscaled.ipynb", UNSCALED)):
        planted_mistakes_named(THREE / notebook, str(spec), planted)


def test_the_docs_example_of_three_inputs_is_the_built_in_module_s_convention():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("Query, key and value as three inputs", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = parse(example, "docs/specs.md").functions[0].convention
    built_in = load_assignment(SPEC).functions[1].convention
    assert documented.params == built_in.params and documented.class_call == built_in.class_call
    assert (documented.weights, documented.batched, documented.fully_masked) == ("out_in", True, "nan")
