"""The backward pass of scaled dot-product attention graded as a unit: the reference gradients
against central finite differences of the reference forward, the cases drawn to fit (a random
upstream gradient, real masks, a batch), a course function written from docs/specs.md's words
meeting the reference, the backward mistakes computed apart from each other and named, the
refusals, and the spec inferred from a worked solution, end to end in a real kernel."""
import subprocess
import sys

import numpy as np
import pytest

from grading_helpers import (FIXTURES, GRADER, ROOT, grade, graded_at_full_marks, own_mistakes_apart,
                             planted_mistakes_named, write_notebook)
from grader.calling import cases
from grader.course.spec import load_assignment, parse
from grader.errors import SpecError
from grader.judging import smallest
from grader.judging.explain import Explanation, Predictions, applicable, features
from dataclasses import replace

from grader.reference.attention import Case, Head, attend, attention
from grader.reference.backward import attention_backward

sys.path.insert(0, str(ROOT / "tests"))
from make_backward_fixtures import MISTAKES, OTHERS  # noqa: E402

BACKWARD = FIXTURES / "backward"
SPEC = "backward"   # a built-in, written in the same TOML as a course's spec
GIVEN = ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }, '
         '{ name = "dO", role = "d_output" }]\n')
MASKED = ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }, '
          '{ name = "mask", role = "mask", form = "keep" }, { name = "dO", role = "d_output" }]\n')
OWN_MISTAKES = {"softmax_backward_elementwise", "backward_scale_missing", "query_key_gradients_swapped",
                "key_gradient_not_transposed", "transpose_on_the_wrong_gradient", "softmax_backward_wrong_axis",
                "masked_positions_given_gradient"}
STEP = 1e-6


def _function(text: str):
    return parse('[[functions]]\nname = "backward"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _numerical(q, k, v, d_output, scaled, keep, fully_masked="zeros"):
    """Central finite differences of sum(O * dO), O the reference forward, in each of Q, K, V."""
    found = {}
    for name, index in (("dq", 0), ("dk", 1), ("dv", 2)):
        gradient = np.zeros_like((q, k, v)[index])
        for at in np.ndindex(gradient.shape):
            for sign in (1.0, -1.0):
                moved = [a.copy() for a in (q, k, v)]
                moved[index][at] += sign * STEP
                out = attend(*moved, scaled=scaled, keep=keep, fully_masked=fully_masked)["output"]
                gradient[at] += sign * np.sum(out * d_output)
        found[name] = gradient / (2 * STEP)
    return found


@pytest.mark.parametrize("lq, lk, d_k, d_v", [(3, 5, 4, 2), (1, 1, 2, 3), (6, 6, 3, 4), (4, 2, 1, 1)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scaled", [True, False])
def test_the_reference_gradients_are_the_finite_differences_of_the_reference_forward(lq, lk, d_k, d_v, masked,
                                                                                     scaled):
    rng = np.random.default_rng(lq * 100 + lk * 10 + d_k + masked)
    q, k, v, d_output = (rng.normal(size=s) for s in ((lq, d_k), (lk, d_k), (lk, d_v), (lq, d_v)))
    keep = None
    if masked:
        keep = rng.random((lq, lk)) < 0.5
        keep[:, 0] = True
    exact = attention_backward(q, k, v, d_output, scaled, keep)
    numerical = _numerical(q, k, v, d_output, scaled, keep)
    for part in ("dq", "dk", "dv"):
        assert np.allclose(exact[part], numerical[part], rtol=1e-6, atol=1e-7), part
    if keep is not None:   # a key masked for every query gets no gradient at all
        hidden = ~keep.any(axis=0)
        assert np.all(exact["dk"][hidden] == 0) and np.all(exact["dv"][hidden] == 0)


@pytest.mark.parametrize("rule", ["zeros", "uniform", "unmasked"])
def test_a_row_with_every_key_masked_gets_the_gradient_of_what_its_rule_computes(rule):
    rng = np.random.default_rng(7)
    q, k, v, d_output = (rng.normal(size=s) for s in ((4, 3), (5, 3), (5, 2), (4, 2)))
    keep = rng.random((4, 5)) < 0.6
    keep[:, 0], keep[2] = True, False   # query 2 attends no key
    exact = attention_backward(q, k, v, d_output, True, keep, rule)
    numerical = _numerical(q, k, v, d_output, True, keep, rule)
    for name in ("dq", "dk", "dv"):
        assert np.allclose(exact[name], numerical[name], rtol=1e-6, atol=1e-7), (rule, name)
    assert np.any(exact["dq"][2] != 0) == (rule == "unmasked")


def test_the_reference_gradients_of_a_batch_are_each_element_s():
    conv = _function(MASKED + 'returns = ["dq", "dk", "dv"]\nbatch = true\n').convention
    case = cases.base_case(conv, 5)
    expected = conv.expected_parts(case)
    for i, element in enumerate(conv.elements(case)):
        head = element.heads[0]
        q, k, v = (element.x @ w for w in (head.wq, head.wk, head.wv))
        numerical = _numerical(q, k, v, element.d_output, True, element.keep)
        for part in ("dq", "dk", "dv"):
            assert np.allclose(expected[part][i], numerical[part], rtol=1e-6, atol=1e-7), (i, part)


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _backward(Q, K, V, dO, keep=None):
    """docs/specs.md's words: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)) / sqrt(d_k),
    dQ = dS K, dK = dS^T Q."""
    S = Q @ K.T / np.sqrt(K.shape[1])
    if keep is not None:
        S = np.where(keep, S, -np.inf)
    P = _softmax(S)
    dP = dO @ V.T
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) / np.sqrt(K.shape[1])
    return dS @ K, dS.T @ Q, P.T @ dO


def _drawn(conv, seed=4):
    return [*cases.random_cases(conv, seed), cases.base_case(conv, seed), cases.integer_case(conv, seed),
            *smallest.candidates(conv, seed)]


@pytest.mark.parametrize("text", [GIVEN, MASKED])
def test_a_course_function_written_from_the_docs_words_meets_the_reference(text):
    conv = _function(text + 'returns = ["dq", "dk", "dv"]\n').convention
    masked = conv.masked
    for case in _drawn(conv):
        arguments = conv.call_arguments(case)
        Q, K, V, dO = (arguments[i] for i in ((0, 1, 2, 4) if masked else (0, 1, 2, 3)))
        assert dO.shape == (Q.shape[0], V.shape[1]), case.label
        # Random, never all ones (nor one number everywhere) where it has room to differ.
        assert case.label.startswith(smallest.LABEL) or not np.all(dO == dO.flat[0]), case.label
        got = _backward(Q, K, V, dO, arguments[3] if masked else None)
        expected = conv.expected_parts(case)
        for value, part in zip(got, ("dq", "dk", "dv")):
            assert np.allclose(value, expected[part]), (case.label, part)


CACHED = ('params = [{ name = "d_out", role = "d_output" }, '
          '{ name = "cache", role = "dict", keys = { Q = "q", K = "k", V = "v", P = "weights" } }]\n')


def test_a_function_given_the_forward_s_cache_meets_the_reference_through_its_weights():
    conv = _function(CACHED + 'returns = ["dq", "dk", "dv"]\nbatch = true\n').convention
    assert conv.given_weights and not conv.steps
    for case in _drawn(conv):
        d_out, cache = conv.call_arguments(case)
        expected = conv.expected_parts(case)
        for i in range(d_out.shape[0]):
            Q, K, V, P = (cache[key][i] for key in "QKVP")
            assert np.allclose(P, _softmax(Q @ K.T / np.sqrt(K.shape[1]))), case.label
            dP = d_out[i] @ V.T
            dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True)) / np.sqrt(K.shape[1])
            for value, part in zip((dS @ K, dS.T @ Q, P.T @ d_out[i]), ("dq", "dk", "dv")):
                assert np.allclose(value, expected[part][i]), (case.label, part)
    # Handed the weights, it computes no forward: no forward mistake is its to make, and a mask
    # (which the weights already hold) is refused.
    assert {m.id for m in applicable(conv)} == OWN_MISTAKES - {"masked_positions_given_gradient"}
    with pytest.raises(SpecError, match="a mask"):
        _function(CACHED.replace("[{ name", '[{ name = "mask", role = "mask", form = "keep" }, { name', 1)
                  + 'returns = ["dq", "dk", "dv"]\n')


def test_any_subset_of_the_gradients_in_any_order_and_a_dict():
    conv = _function(GIVEN + 'returns = ["dv", "dq"]\n').convention
    case = cases.base_case(conv, 2)
    assert list(conv.expected_parts(case)) == ["dv", "dq"]
    keyed = _function(GIVEN + 'returns = { dq = "dQ", dk = "dK", dv = "dV" }\n').convention
    assert keyed.return_keys == ("dQ", "dK", "dV") and keyed.backward


def test_a_backward_pass_has_its_own_features_checks_and_mistakes():
    fn = _function(MASKED + 'returns = ["dq", "dk", "dv"]\nbatch = true\n')
    conv = fn.convention
    assert {"backward", "backward_mask", "scaled", "softmax"} <= features(conv)
    named = {m.id for m in applicable(conv)}
    assert OWN_MISTAKES <= named and "no_scaling" in named
    assert not OWN_MISTAKES & {m.id for m in applicable(load_assignment("rows").functions[0].convention)}
    assert {"random_shapes", "permutation_equivariance", "batch_elements", "memory_layout", "dtypes",
            "inputs_unmodified", "return_structure"} <= set(fn.points)
    assert not {"weights_distribution", "masked_keys_zero_weight", "causal_future", "single_head"} & set(fn.points)
    causal = _function(GIVEN + 'returns = ["dq", "dk", "dv"]\ncausal = true\n')
    assert "causal_future" not in causal.points and "permutation_equivariance" not in causal.points
    assert "masked_positions_given_gradient" in {m.id for m in applicable(causal.convention)}


@pytest.mark.parametrize("text", [GIVEN + 'returns = ["dq", "dk", "dv"]\n',
                                  MASKED + 'returns = ["dq", "dk", "dv"]\nbatch = true\n'])
def test_each_backward_mistake_differs_from_the_reference_and_from_the_others(text):
    own_mistakes_apart(_function(text).convention, OWN_MISTAKES, parts=None)


def test_the_mistakes_keep_dv_where_only_the_softmax_s_backward_is_wrong():
    conv = _function(MASKED + 'returns = ["dq", "dk", "dv"]\n').convention
    case = cases.base_case(conv, 3)
    reference = conv.expected_parts(case)
    predictions = Predictions()
    for m in applicable(conv):
        if m.id in OWN_MISTAKES - {"query_key_gradients_swapped", "key_gradient_not_transposed",
                                   "transpose_on_the_wrong_gradient"}:
            got = predictions.parts(conv, Explanation((m,), m.variant), case)
            assert np.allclose(got["dv"], reference["dv"]) and not np.allclose(got["dq"], reference["dq"]), m.id


@pytest.mark.parametrize("text, words", [
    (GIVEN + 'returns = ["dq", "output"]\n', "returns gradients (dq, dk, dv; or of its inputs and weights"),
    (GIVEN.replace(', { name = "dO", role = "d_output" }', "") + 'returns = "dq"\n', "needs the upstream gradient"),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }, { name = "dO", role = "d_output" }]\nreturns = "dq"\n', "not 'dq'"),
    (GIVEN.replace('{ name = "V", role = "v" }', '{ name = "V", role = "v" }, { name = "H", role = "n_heads" }')
     + 'returns = "dq"\n', "a backward pass given Q, K and V has one head"),
    (GIVEN + 'returns = "dq"\ntokens = "columns"\n', "takes tokens as rows"),
    (GIVEN.replace('{ name = "dO", role = "d_output" }', '{ name = "dO", role = "d_output" }, '
                   '{ name = "dO2", role = "d_output" }') + 'returns = "dq"\n', "given twice"),
    ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }, '
     '{ name = "P", role = "weights" }]\nreturns = "output"\n', "role 'weights' (the forward's attention weights) is"),
])
def test_a_backward_convention_that_cannot_be_graded_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_sheet_without_an_upstream_gradient_does_not_fit_a_backward_pass():
    with pytest.raises(SpecError, match="takes an upstream gradient") as error:
        parse('[[functions]]\nname = "backward"\nfixed_data = "sheet_004"\n[functions.convention]\n' + GIVEN
              + 'returns = ["dq", "dk", "dv"]\n', "course.toml")
    assert "\n" not in str(error.value)


def test_the_docs_example_of_a_backward_pass_is_the_built_in_s_first_convention():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("\n## Backward passes\n", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = parse(example, "docs/specs.md").functions[0].convention
    built_in = load_assignment(SPEC).functions[0].convention
    assert [p.role for p in documented.params] == [p.role for p in built_in.params]
    assert documented.returns == built_in.returns and documented.backward


@pytest.mark.slow
def test_the_worked_backward_passes_earn_full_marks():
    result = graded_at_full_marks(BACKWARD / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"attention_backward.permutation_equivariance", "masked_attention_backward.random_shapes",
            "batched_attention_backward.batch_elements"} <= kinds


def _by_unit(planted: dict) -> dict:
    """The planted mistakes by the unit they are graded in: a class's are in its backward's, and
    the multi-head class, built on the attention class, makes that class's mistake too."""
    units = {f"{name}.backward" if name[0].isupper() else name: mistake for name, mistake in planted.items()}
    return {**units, "MultiHeadAttention.backward": planted["ScaledDotProductAttention"]}


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes.ipynb", MISTAKES), ("other_mistakes.ipynb", OTHERS)])
def test_each_planted_backward_mistake_is_named(notebook, planted):
    planted = _by_unit(planted)
    result, found = planted_mistakes_named(BACKWARD / notebook, SPEC, planted)
    # The classes' forwards, which the backwards run after, are right: their points are kept.
    assert not any(c.lost_points for c in result.checks
                   if c.function in ("ScaledDotProductAttention", "MultiHeadAttention"))
    for name in [n for n in planted if "forward" not in n]:   # each gradient that differs is said, where most
        failed = next(c for c in result.checks if c.function == name and c.kind == "random_shapes")
        assert "the gradient d" in failed.message and "largest difference" in failed.message, failed.message


def _run(*args):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_infer_describes_the_backward_passes_and_audit_names_their_mistakes(tmp_path):
    spec = tmp_path / "backward.toml"
    done = _run("spec", "infer", BACKWARD / "worked.ipynb", "-o", spec, "--title", "Backward passes")
    assert done.returncode == 0, done.stdout + done.stderr
    text = spec.read_text()
    assert text.count('role = "d_output"') == 7 and text.count('returns = ["dq", "dk", "dv"]') == 6, text
    # The modular layer API's: a forward handing back its cache, a backward unpacking it.
    assert 'returns = ["output", "cache"]' in text and 'role = "tuple", items = ["q", "k", "v", "weights"]' in text
    # The multi-head class's: the gradients of its inputs, and its layers' weights' gradients read back.
    assert 'returns = ["dx", "dkey_tokens", "dvalue_tokens"]' in text and '"out_proj.dLdW" = "dwo"' in text, text
    # The class's backward is a unit of its own, called after its forward on the same object.
    assert 'name = "ScaledDotProductAttention.backward"' in text and 'before = { method = "forward"' in text, text
    assert 'keys = { Q = "q", K = "k", V = "v", P = "weights" }' in text, text
    checked = _run("spec", "check", spec, BACKWARD / "worked.ipynb")
    assert checked.returncode == 0 and "earns every point" in checked.stdout, checked.stdout + checked.stderr
    audited = _run("audit", spec)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    for _, _, title in (*MISTAKES.values(), *OTHERS.values()):
        assert title in audited.stdout, title
    planted_mistakes_named(BACKWARD / "mistakes.ipynb", str(spec), _by_unit(MISTAKES))


# A class graded forward then backward (the class table's `before`), as a course spec writes it.
BEFORE = ('before = { method = "forward", params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, '
          '{ name = "V", role = "v" }] }\n')


def _class_unit(name: str, class_table: str, params: str = '[{ name = "d_output", role = "d_output" }]',
                returns_: str = '["dq", "dk", "dv"]') -> str:
    return (f'[[functions]]\nname = "{name}"\n[functions.convention]\nparams = {params}\n'
            f'returns = {returns_}\n[functions.convention.class]\n{class_table}')


def test_a_class_s_backward_takes_its_forward_s_inputs_through_before():
    fn = parse(_class_unit("Attention.backward", 'method = "backward"\n' + BEFORE), "course.toml").functions[0]
    conv = fn.convention
    assert fn.symbol == "Attention" and fn.names == ["Attention"] and conv.backward
    assert [p.role for p in conv.object_call.before_params] == ["q", "k", "v"] and conv.param_names == ("d_output",)
    assert {"random_shapes", "permutation_equivariance", "inputs_unmodified"} <= set(fn.points)


@pytest.mark.parametrize("name, table, words", [
    ("Attention.backward", 'method = "backward"\nbefore = { method = "backward", params = [] }\n',
     "before: backward is the method graded"),
    ("Attention.backward", 'method = "backward"\nbefore = { method = "forward", params = [] }\n',
     "before: params must name what the method is given"),
    ("Attention.backward", 'method = "backward"\nbefore = "forward"\n', "before must be a table"),
    ("Attention.backward", 'method = "backward"\nbefore = { method = "forward", params = [{ name = "Q", role = "q" }, '
     '{ name = "K", role = "k" }, { name = "V", role = "v" }, { name = "d", role = "d_output" }] }\n',
     "role 'd_output' is taken by both forward and backward"),
    ("Attention.backward", 'method = "backward"\nbefore = { method = "forward", params = [{ name = "Q", role = "q" }, '
     '{ name = "K", role = "k" }, { name = "V", role = "v" }], extra = 1 }\n', "before must be a table"),
    ("Attention.forward", 'method = "backward"\n' + BEFORE, 'must have method = "forward"'),
    ("Attention.backward.x", 'method = "backward"\n' + BEFORE, "missing or invalid 'name'"),
])
def test_a_before_table_or_a_unit_name_that_cannot_be_graded_is_refused_in_one_line(name, table, words):
    with pytest.raises(SpecError) as error:
        parse(_class_unit(name, table), "course.toml")
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)


FAULTY = '''
class ForwardRaises:
    def forward(self, Q, K, V):
        raise ValueError("no forward yet")

    def backward(self, d_output):
        return d_output, d_output, d_output


class ForwardChangesQ:
    def forward(self, Q, K, V):
        Q *= 2   # in place: the caller's Q is changed
        self.Q, self.K, self.V = Q / 2, K, V
        return Q

    def backward(self, d_output):
        Q, K, V = self.Q, self.K, self.V
        P = np.exp(Q @ K.T / np.sqrt(K.shape[1]))
        P = P / P.sum(axis=1, keepdims=True)
        dP = d_output @ V.T
        dS = P * (dP - (dP * P).sum(axis=1, keepdims=True)) / np.sqrt(K.shape[1])
        return dS @ K, dS.T @ Q, P.T @ d_output
'''


@pytest.mark.slow
def test_a_forward_that_raises_or_changes_its_input_is_said_of_the_forward(tmp_path):
    """The backward is called after the forward: a forward that raises is named as the step
    that raised, and one that changes its argument in place fails inputs_unmodified, in the
    forward's words, while its backward's values are right."""
    spec = tmp_path / "course.toml"
    spec.write_text("\n".join(_class_unit(f"{name}.backward", 'method = "backward"\n' + BEFORE)
                              for name in ("ForwardRaises", "ForwardChangesQ")))
    path = write_notebook(tmp_path / "faulty.ipynb", "import numpy as np", FAULTY)
    checks = {c.name: c for c in grade(path, str(spec)).checks}
    raised = checks["ForwardRaises.backward.random_shapes"]
    assert raised.status == "error" and "ForwardRaises.forward(Q, K, V) raised, before backward was called " \
                                       "ValueError: no forward yet" in raised.message, raised.message
    changed = checks["ForwardChangesQ.backward.inputs_unmodified"]
    assert changed.status == "failed" and "Calling `forward` and then `backward` changed the argument `Q` of " \
                                          "`forward` in place" in changed.message, changed.message
    assert checks["ForwardChangesQ.backward.random_shapes"].status == "passed"


def test_the_docs_example_of_a_class_s_backward_is_the_built_in_s():
    section = (ROOT / "docs" / "specs.md").read_text().split("\n## Backward passes\n", 1)[1].split("\n## ", 1)[0]
    example = next(block.split("```", 1)[0] for block in section.split("```toml\n")[1:] if "before =" in block)
    documented = parse(example, "docs/specs.md").functions[0]
    built_in = next(f for f in load_assignment(SPEC).functions if f.name == documented.name)
    assert documented.convention.class_call == built_in.convention.class_call
    assert documented.convention.params == built_in.convention.params and documented.convention.leading_axes


# A backward pass through the projections: the gradients of the token inputs and the weights.
PROJECTED = ('params = [{ name = "x", role = "x" }, { name = "Wq", role = "wq" }, { name = "bq", role = "bq" }, '
             '{ name = "Wk", role = "wk" }, { name = "bk", role = "bk" }, { name = "Wv", role = "wv" }, '
             '{ name = "bv", role = "bv" }, { name = "Wo", role = "wo" }, { name = "bo", role = "bo" }, '
             '{ name = "h", role = "n_heads" }, { name = "dO", role = "d_output" }]\n')
WEIGHT_GRADIENTS = ["dwq", "dbq", "dwk", "dbk", "dwv", "dbv", "dwo", "dbo"]


def _loss(case, d_output):
    """sum(O * dO), O the reference forward: dO is the loss's gradient with respect to O."""
    return float(np.sum(attention(case)["output"] * d_output))


def _numerical_gradient(case, d_output, value, rebuilt):
    """Central finite differences of _loss in each entry of `value`, the case `rebuilt(moved)`."""
    gradient = np.zeros_like(value)
    for at in np.ndindex(value.shape):
        for sign in (1.0, -1.0):
            moved = value.copy()
            moved[at] += sign * STEP
            gradient[at] += sign * _loss(rebuilt(moved), d_output)
    return gradient / (2 * STEP)


def _fused_heads(case, name, fused):
    """The case with the heads' `name` matrices (or biases) taken from one fused array."""
    widths = np.cumsum([0] + [getattr(h, name).shape[-1] for h in case.heads])
    return replace(case, heads=tuple(replace(h, **{name: fused[..., a:b]})
                                     for h, a, b in zip(case.heads, widths[:-1], widths[1:])))


@pytest.mark.parametrize("sequences", ["self", "memory", "three"])
def test_the_projections_gradients_are_the_finite_differences_of_the_reference_forward(sequences):
    rng = np.random.default_rng(len(sequences))
    n, lk, d, h, d_k = 4, 5, 6, 2, 3
    heads = tuple(Head(*(rng.normal(size=(d, d_k)) for _ in range(3)), *(rng.normal(size=d_k) for _ in range(3)))
                  for _ in range(h))
    memory = None if sequences == "self" else rng.normal(size=(lk, d))
    values = rng.normal(size=(lk, d)) if sequences == "three" else None
    keep = rng.random((n, lk if memory is not None else n)) < 0.6
    keep[:, 0] = True
    d_output = rng.normal(size=(n, d))
    case = Case(x=rng.normal(size=(n, d)), heads=heads, wo=rng.normal(size=(h * d_k, d)), bo=rng.normal(size=d),
                memory=memory, values=values, mask=keep)
    exact = attention(replace(case, d_output=d_output))["gradients"]
    numerical = {"dx_query": _numerical_gradient(case, d_output, case.x, lambda m: replace(case, x=m)),
                 "dwo": _numerical_gradient(case, d_output, case.wo, lambda m: replace(case, wo=m)),
                 "dbo": _numerical_gradient(case, d_output, case.bo, lambda m: replace(case, bo=m))}
    for name in ("wq", "wk", "wv", "bq", "bk", "bv"):
        numerical[f"d{name}"] = _numerical_gradient(case, d_output, case.fused(name) if name[0] == "w" else
                                                    np.concatenate([getattr(x, name) for x in heads]),
                                                    lambda m, name=name: _fused_heads(case, name, m))
    if memory is not None:
        numerical["dx_keys"] = _numerical_gradient(case, d_output, memory, lambda m: replace(case, memory=m)) \
            if values is not None else None
    if values is not None:
        numerical["dx_values"] = _numerical_gradient(case, d_output, values, lambda m: replace(case, values=m))
    if memory is not None and values is None:   # one memory gives both: its gradient is both's
        through = _numerical_gradient(case, d_output, memory, lambda m: replace(case, memory=m))
        assert np.allclose(exact["dx_keys"] + exact["dx_values"], through, rtol=1e-6, atol=1e-7)
        del numerical["dx_keys"]
    if memory is None:   # X is all three
        numerical["dx_query"] = None
        assert np.allclose(exact["dx_query"] + exact["dx_keys"] + exact["dx_values"],
                           _numerical_gradient(case, d_output, case.x, lambda m: replace(case, x=m)),
                           rtol=1e-6, atol=1e-7)
    for name, expected in numerical.items():
        if expected is not None:
            assert np.allclose(exact[name], expected, rtol=1e-6, atol=1e-7), name


def test_a_projected_backward_pass_returns_each_input_s_gradient_in_its_layout_summed_over_a_batch():
    conv = _function(PROJECTED + f'returns = {["dx", *WEIGHT_GRADIENTS]}\nbatch = true\n'
                     .replace("'", '"')).convention
    case = cases.base_case(conv, 3)
    expected = conv.expected_parts(case)
    elements = [attention(e)["gradients"] for e in conv.elements(case)]
    assert np.allclose(expected["dx"][1], elements[1]["dx_query"] + elements[1]["dx_keys"] + elements[1]["dx_values"])
    assert np.allclose(expected["dwq"], sum(e["dwq"] for e in elements))   # the batch shares the weights
    framework = _function(PROJECTED + 'returns = ["dwq", "dbo"]\nweights = "out_in"\n').convention
    case = cases.base_case(framework, 3)
    element = attention(framework.elements(case)[0])["gradients"]
    assert np.allclose(framework.expected_parts(case)["dwq"], element["dwq"].T)   # laid out as W is: out x in
    assert {"backward", "backward_scaled"} <= features(conv)
    assert {"backward_scale_missing", "softmax_backward_elementwise", "no_scaling"} <= {m.id for m in applicable(conv)}


@pytest.mark.parametrize("text, words", [
    (PROJECTED + 'returns = ["dq"]\n', "not 'dq'"),
    (PROJECTED + 'returns = ["dmemory"]\n', "the gradient of role 'memory', which no param has"),
    (PROJECTED.replace('{ name = "Wq", role = "wq" }', '{ name = "Wq", role = "wq", heads = "per_head" }')
     + 'returns = ["dx"]\n', "takes each weight fused"),
    (GIVEN + 'returns = ["dx"]\n', "returns their gradients dq, dk and dv"),
])
def test_a_projected_backward_convention_that_cannot_be_graded_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_a_kept_attribute_is_read_off_the_object_or_off_a_layer_it_holds():
    table = 'method = "backward"\n' + BEFORE.replace('role = "q"', 'role = "q"') + \
        '[functions.convention.class.kept]\n"q_proj.dLdW" = "dv"\n'
    assert parse(_class_unit("A.backward", table, returns_='["dq", "dk"]'), "c.toml").functions[0].convention.kept \
        == (("q_proj.dLdW", "dv"),)
    with pytest.raises(SpecError, match="not an attribute to read off an object"):
        parse(_class_unit("A.backward", table.replace('"q_proj.dLdW"', '"a.q_proj.dLdW"'), returns_='["dq", "dk"]'),
              "c.toml")


TUPLE_CACHE = 'params = [{ name = "dout", role = "d_output" }, { name = "cache", role = "tuple", items = ITEMS }]\n'


def test_a_tuple_cache_holds_its_roles_in_order_and_a_forward_hands_one_back_ungraded():
    conv = _function(TUPLE_CACHE.replace("ITEMS", '["q", "k", "v", "weights"]') + 'returns = ["dq", "dk", "dv"]\n'
                     'batch = true\n').convention
    assert conv.given_weights and [p.role for p in conv.flat] == ["d_output", "q", "k", "v", "weights"]
    case = cases.base_case(conv, 2)
    d_out, cache = conv.call_arguments(case)
    assert isinstance(cache, tuple) and len(cache) == 4 and cache[3].shape == (d_out.shape[0], case.n, case.n)
    forward = _function('params = [{ name = "q", role = "q" }, { name = "k", role = "k" }, { name = "v", role = "v" }]'
                        '\nreturns = ["output", "cache"]\n').convention
    assert forward.returns == ("output",) and forward.cache_at == 1 and forward.returns_tuple
    from grader.calling.returns import canonical_parts
    from grader.kernel_side.wire import encode_value
    out = np.ones((3, 2))
    read = canonical_parts(forward, encode_value((out, (out, out))))
    assert not read.problems and np.array_equal(read.values["output"], out)
    assert "expected 2: (output, the cache for the backward pass)" in \
        canonical_parts(forward, encode_value((out, out, out))).problems[0]


@pytest.mark.parametrize("text, words", [
    (TUPLE_CACHE.replace("ITEMS", '"q"') + 'returns = "dq"\n', 'a tuple needs items = ["<role>", ...]'),
    (TUPLE_CACHE.replace("ITEMS", '["q", "k", "v", "bogus"]') + 'returns = "dq"\n', "unknown role 'bogus'"),
    (TUPLE_CACHE.replace(", items = ITEMS", "") + 'returns = "dq"\n', "a tuple needs items"),
    (GIVEN + 'returns = ["cache"]\n', "a cache is returned beside a part"),
    (GIVEN + 'returns = { cache = "c", dq = "dq" }\n', "leave its cache out"),
])
def test_a_tuple_or_a_cache_that_cannot_be_read_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)


@pytest.mark.slow
def test_a_backward_that_changes_its_cache_in_place_fails_inputs_unmodified(tmp_path):
    """A tuple cannot be changed, but the arrays it holds can: the grader reads them back."""
    spec = tmp_path / "course.toml"
    spec.write_text('[[functions]]\nname = "attention_backward"\n[functions.convention]\n'
                    + TUPLE_CACHE.replace("ITEMS", '["q", "k", "v", "weights"]') + 'returns = ["dq", "dk", "dv"]\n')
    path = write_notebook(tmp_path / "changes_cache.ipynb", "import numpy as np", """
def attention_backward(dout, cache):
    q, k, v, p = cache
    p *= 2   # in place: the caller's cache is changed
    p = p / 2
    dv = p.T @ dout
    dp = dout @ v.T
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True)) / np.sqrt(q.shape[1])
    return ds @ k, ds.T @ q, dv
""")
    checks = {c.kind: c for c in grade(path, str(spec)).checks}
    assert checks["random_shapes"].status == "passed", checks["random_shapes"].message
    assert checks["inputs_unmodified"].status == "failed", checks["inputs_unmodified"].message


# The multi-head class's own backward mistakes, each planted in the worked class (CMU 11-785's
# handout's form): function name -> (worked text, mistaken text, the mistake's title).
MULTI_HEAD_MISTAKES = {
    "heads_reshaped": ([("self.q_proj.backward(self._concat_heads(d_q))",
                         "self.q_proj.backward(d_q.reshape(d_q.shape[0], d_q.shape[2], -1))"),
                        ("self.k_proj.backward(self._concat_heads(d_k))",
                         "self.k_proj.backward(d_k.reshape(d_k.shape[0], d_k.shape[2], -1))"),
                        ("self.v_proj.backward(self._concat_heads(d_v))",
                         "self.v_proj.backward(d_v.reshape(d_v.shape[0], d_v.shape[2], -1))")],
                       "the heads' gradients merged by a reshape without moving the heads axis back"),
    "inputs_swapped": ([("        return d_query, d_key, d_value", "        return d_query, d_value, d_key")],
                       "the key and value inputs' gradients swapped"),
    "output_weight_transposed": ([("        d_attended = self._split_heads(self.out_proj.backward(d_output))",
                                   "        d_attended = self._split_heads(self.out_proj.backward(d_output))\n"
                                   "        self.out_proj.dLdW = self.out_proj.dLdW.T")],
                                 "the output projection's weight gradient transposed"),
}


def test_the_multi_head_backward_s_own_mistakes_differ_from_the_reference_and_each_other():
    conv = next(f for f in load_assignment(SPEC).functions if f.name == "MultiHeadAttention.backward").convention
    own = {"gradient_heads_merged_by_reshape", "input_gradients_swapped", "output_weight_gradient_transposed"}
    assert own <= {m.id for m in applicable(conv)}
    own_mistakes_apart(conv, own, parts=None)


@pytest.mark.slow
@pytest.mark.parametrize("planted", sorted(MULTI_HEAD_MISTAKES))
def test_each_multi_head_backward_mistake_is_named(tmp_path, planted):
    from make_backward_fixtures import AROUND, SOFTMAX, WORKED
    changes, title = MULTI_HEAD_MISTAKES[planted]
    body = AROUND["MultiHeadAttention"]
    for line, replacement in changes:
        assert line in body, line
        body = body.replace(line, replacement)
    path = write_notebook(tmp_path / f"{planted}.ipynb", "import numpy as np", SOFTMAX,
                          WORKED["ScaledDotProductAttention"], AROUND["Linear"], body)
    checks = [c for c in grade(path, SPEC).checks if c.function == "MultiHeadAttention.backward"]
    assert any(c.lost_points for c in checks) and any(title in (c.diagnosis or "") for c in checks), \
        {c.diagnosis for c in checks}
    forward = [c for c in grade(path, SPEC).checks if c.function == "MultiHeadAttention"]
    assert forward and not any(c.lost_points for c in forward)
