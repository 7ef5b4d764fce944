"""Batched attention written in a course's TOML spec: a leading batch axis (B x N x D), heads on
an array axis (B x H x N x d), a key-padding mask beside the attention mask, masks in the
course's shape; the cases drawn as batches sharing the weights, each element its own problem
(the batch_elements check), and the batch mistakes named, end to end in a real kernel."""
import sys

import numpy as np
import pytest

from grading_helpers import FIXTURES, ROOT, grade, graded_at_full_marks, planted_mistakes_named
from grader.calling import cases
from grader.judging import smallest
from grader.judging.checks import CHECKS, Context, Outcome, check_probes, judge_batch_elements
from grader.errors import SpecError
from grader.judging.explain import applicable, features, trivial
from grader.calling.returns import Parts, Tolerance
from grader.course.spec import load_assignment, parse

sys.path.insert(0, str(ROOT / "tests"))
from make_batch_fixtures import LAYOUT_TITLES, MISTAKES, SECOND_MISTAKES  # noqa: E402

BATCH = FIXTURES / "batch"
SPEC = "batched"   # a built-in, written in the same TOML as a course's spec


def _function(text: str, name: str = "attend"):
    return parse(f'[[functions]]\nname = "{name}"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _fused_mha(x, W_q, W_k, W_v, W_o, n_heads, mask):
    """In x @ W layout, mask shared by the batch (Lq x Lk), boolean keep."""
    B, N, _ = x.shape
    split = lambda t: t.reshape(B, N, n_heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
    Q, K, V = split(x @ W_q), split(x @ W_k), split(x @ W_v)
    # The scores in float64 on every NumPy: NumPy 2 promotes a float32 batch by np.sqrt's float64, NumPy 1 does not.
    scores = (Q @ K.transpose(0, 1, 3, 2)).astype(np.float64) / np.sqrt(Q.shape[-1])
    w = _softmax(np.where(mask, scores, -1e9))
    return (w @ V).transpose(0, 2, 1, 3).reshape(B, N, -1) @ W_o, w


def _padded_sdpa(Q, K, V, pad):
    """Heads already split; key padding B x 1 x 1 x Lk, additive 0 / -inf."""
    w = _softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]) + pad)
    return w @ V, w


def _cross_batched(x, memory, W_q, W_k, W_v, key_padding):
    """Cross-attention on a batch: memory B x Lk x D_mem, key padding B x Lk, 0/1 float keep."""
    Q, K, V = x @ W_q, memory @ W_k, memory @ W_v
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1]) + (1 - key_padding[:, None, :]) * -1e9
    w = _softmax(s)
    return w @ V, w


def _per_element_mask(x, W_q, W_k, W_v, mask):
    """Single head, mask B x Lq x Lk in the ignore form, framework layout."""
    Q, K, V = x @ W_q.T, x @ W_k.T, x @ W_v.T
    w = _softmax(np.where(mask, -1e9, Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])))
    return w @ V


ROLES_XW = '{ name = "W_q", role = "wq" }, { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }'
FORMS = {
    "shared mask": ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ', { name = "W_o", role = "wo" }, '
                    '{ name = "n_heads", role = "n_heads" }, { name = "mask", role = "mask", form = "keep", '
                    'shape = "Lq x Lk" }]\nbatch = true\nreturns = ["output", "weights"]\nper_head_returns = "axis"\n'
                    'fully_masked = "uniform"\n', _fused_mha),
    "pre-split heads, padding": (
        'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
        '{ name = "V", role = "v", heads = "axis" }, { name = "pad", role = "key_padding", form = "additive_inf", '
        'shape = "B x 1 x 1 x Lk" }]\nbatch = true\nreturns = ["heads", "weights"]\nper_head_returns = "axis"\n',
        _padded_sdpa),
    "cross, padding": ('params = [{ name = "x", role = "x" }, { name = "memory", role = "memory" }, ' + ROLES_XW +
                       ', { name = "key_padding", role = "key_padding", form = "float_keep" }]\nbatch = true\n'
                       'returns = ["output", "weights"]\n', _cross_batched),
    "per-element mask": ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ', { name = "mask", role = "mask", '
                         'form = "ignore" }]\nbatch = true\nweights = "out_in"\nreturns = "output"\n'
                         'fully_masked = "uniform"\n', _per_element_mask),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_batch_is_sent_in_every_course_form_and_a_course_function_meets_the_reference(form):
    """Each form's arguments, as docs/specs.md describes them, fed to a function written from its
    words, give the reference's parts, batch axis first, on every kind of case a check draws."""
    text, course_function = FORMS[form]
    fn = _function(text)
    conv = fn.convention
    ctx = Context(seed=12, tolerance=Tolerance())
    probes = [*check_probes("random_shapes", fn, ctx), *check_probes("dtypes", fn, ctx),
              *check_probes("batch_elements", fn, ctx), *check_probes("permutation_equivariance", fn, ctx)]
    sizes = set()
    for probe in probes:
        case = probe.case
        sizes.add(len(case.elements))
        returned = course_function(*probe.arguments(conv))
        returned = returned if isinstance(returned, tuple) else (returned,)
        expected = conv.expected_parts(case)
        for part, value in zip(conv.returns, returned):
            wanted = expected[part]
            if isinstance(wanted, list):
                wanted = np.stack(wanted, axis=1)   # B x H x ...: the heads axis after the batch axis
            assert value.shape[0] == len(case.elements), (form, case.label)
            assert np.allclose(value, wanted), (form, part, case.label)
    assert {1, 2, 3} <= sizes


def test_a_batch_shares_its_weights_and_a_shared_mask_and_pads_each_element_differently():
    fn = _function(FORMS["cross, padding"][0])
    conv = fn.convention
    case = cases.base_case(conv, 3)
    assert len(case.elements) == cases.BASE_BATCH
    assert all(e.heads is case.heads and e.memory.shape == case.memory.shape for e in case.elements)
    padded = {int((~e.key_mask).sum()) for e in case.elements}
    assert len(padded) == len(case.elements) and all(e.key_mask[0] for e in case.elements)
    x, memory, *_, key_padding = conv.call_arguments(case)
    assert x.shape == (3, case.n, case.d) and memory.shape == (3, case.lk, case.memory.shape[1])
    assert key_padding.shape == (3, case.lk) and key_padding.dtype == np.float64
    shared = _function(FORMS["shared mask"][0]).convention
    case = cases.base_case(shared, 3)
    assert all(np.array_equal(e.mask, case.mask) for e in case.elements)
    assert conv.token_axes("weights") == (1,) and conv.memory_axes("weights") == (2,)


def test_batch_features_open_the_batch_mistakes():
    heads = _function(FORMS["pre-split heads, padding"][0]).convention
    assert {"batch", "stacked_heads", "mask"} <= features(heads)
    named = {m.id for m in applicable(heads)}
    assert {"softmax_over_heads", "softmax_over_batch", "mask_inverted"} <= named
    spec = load_assignment(SPEC)
    mha = spec.functions[0].convention
    assert {"framework_layout", "projection_bias", "fused_heads"} <= features(mha)
    wanted = {"weights_wrong_layout", "heads_split_by_reshape", "projection_bias_missing"}
    assert wanted <= {m.id for m in applicable(mha)}
    assert "batch_elements" in spec.functions[0].points and "batch_elements" in CHECKS
    unbatched = load_assignment("masks").functions[0]
    assert "batch_elements" not in unbatched.points and "batch" not in features(unbatched.convention)


@pytest.mark.parametrize("text, words", [
    ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ']\nbatch = true\ntokens = "columns"\nreturns = "output"\n',
     "batch = true takes tokens as rows"),
    ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ', { name = "m", role = "mask", form = "keep", '
     'shape = "B x Lq x Lk" }]\nreturns = "output"\n', "is not one of 'Lq x Lk' (without batch = true)"),
    ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ', { name = "m", role = "mask", form = "keep", '
     'shape = "B x H x Lq x Lk" }]\nbatch = true\nreturns = "output"\n', "is not one of 'B x Lq x Lk'"),
    ('params = [{ name = "x", role = "x", shape = "B x N x D" }, ' + ROLES_XW + ']\nbatch = true\nreturns = "output"\n',
     'shape applies to roles "mask" and "key_padding" only'),
    ('params = [{ name = "x", role = "x" }, ' + ROLES_XW + ']\nbatch = "yes"\nreturns = "output"\n',
     "batch must be one of False, True"),
])
def test_a_batch_convention_that_cannot_be_graded_is_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_function_that_mixes_the_batch_fails_the_batch_elements_check_in_one_sentence():
    fn = _function(FORMS["per-element mask"][0])
    ctx = Context(seed=5, tolerance=Tolerance())
    probes = check_probes("batch_elements", fn, ctx)
    assert len(probes) == 1 + cases.BASE_BATCH and all(len(p.case.elements) == 1 for p in probes[1:])

    def run(function):
        return [(p, Outcome("ok", Parts(values={"output": function(*p.arguments(fn.convention))}))) for p in probes]

    assert judge_batch_elements(fn, ctx, run(_per_element_mask)).status == "passed"
    centred = judge_batch_elements(fn, ctx, run(lambda x, *rest: _per_element_mask(x - x.mean(axis=0), *rest)))
    assert centred.status == "failed" and "Element 0 of a batch of 3" in centred.message
    assert "\n" not in centred.message
    unbatched = judge_batch_elements(fn, ctx, [(p, Outcome("ok", Parts(values={"output": np.ones((2, 5))})))
                                               for p in probes])
    assert unbatched.status == "failed" and "has no batch axis" in unbatched.message


def test_a_value_with_nan_only_where_a_mask_leaves_nothing_is_judged_on_its_finite_entries():
    """-inf filled in gives NaN on a row with nothing to attend: the rest of the value still
    shows whether it is attention; a value with no finite entry is still trivial."""
    rng = np.random.default_rng(0)
    value = rng.normal(size=(2, 4, 3))
    value[0, 1] = np.nan
    assert trivial(value, []) is None
    assert trivial(np.full((2, 4, 3), np.nan), []) == "empty or not finite"
    same_rows = np.broadcast_to(rng.normal(size=(2, 1, 3)), (2, 4, 3)).copy()
    same_rows[1, 2] = np.nan
    assert trivial(same_rows, []) == "the same row for every token"


@pytest.mark.slow
def test_batched_worked_solutions_earn_full_marks():
    result = graded_at_full_marks(BATCH / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"multi_head_attention.batch_elements", "attention_heads.batch_elements",
            "causal_self_attention.causal_future", "multi_head_attention.masked_keys_zero_weight"} <= kinds


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes", MISTAKES), ("second_mistakes", SECOND_MISTAKES)])
def test_each_planted_batch_mistake_is_named_and_its_smallest_case_runs(notebook, planted):
    result, _ = planted_mistakes_named(BATCH / f"{notebook}.ipynb", SPEC, planted)
    assert not any("does not compute attention" in c.message for c in result.checks)
    assert smallest.candidates   # the smallest case of a batched convention is a batch of one


@pytest.mark.slow
def test_the_framework_layout_mistakes_are_named_together_and_spare_the_other_functions():
    result = grade(BATCH / "layout_mistakes.ipynb", str(SPEC))
    named = {c.diagnosis for c in result.checks if c.function == "multi_head_attention" and c.diagnosis}
    assert named and all(all(title in d for title in LAYOUT_TITLES) for d in named), named
    others = [c for c in result.checks if c.function != "multi_head_attention"]
    assert others and not any(c.lost_points for c in others)
