"""Attention on any leading axes, as PyTorch's scaled_dot_product_attention describes it: Q is
(N, ..., L, E), K (N, ..., S, E), V (N, ..., S, Ev) with Ev free to differ from E, and a
boolean mask broadcastable to (N, ..., L, S), True meaning ignore. The grader's cases for Q, K
and V given draw values of another width than the keys somewhere, and a batch on any leading
axes takes such a mask in its shape."""
import numpy as np
import pytest

from grader.calling import cases
from grader.calling.conventions import CONVENTIONS
from grader.calling.returns import Tolerance, canonical_parts, same
from grader.course.spec import parse
from grader.kernel_side.wire import encode_value


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


GIVEN_VALUES = ["qkv_single", "sdpa"]


@pytest.mark.parametrize("name", GIVEN_VALUES)
def test_q_k_v_given_draw_values_wider_than_the_keys_on_the_longer_cases_only(name):
    conv = CONVENTIONS[name]
    widths = [(c.n, c.heads[0].wk.shape[1], c.heads[0].wv.shape[1]) for c in cases.random_cases(conv, seed=11)]
    assert any(d_v != d_k for _, d_k, d_v in widths), widths
    assert all(d_v == d_k for n, d_k, d_v in widths if n < cases.WIDE_MEMORY_FROM), widths
    wider = next(c for c in cases.random_cases(conv, seed=11) if c.heads[0].wv.shape[1] != c.heads[0].wk.shape[1])
    assert "d_v = " in wider.label   # the student reads why the case differs


def test_values_as_wide_as_the_keys_where_a_function_splits_fused_heads_or_projects_its_own():
    # A course handing out V = X W_v, W_v shaped like W_q, may split V by d_k (seed qkv's sample
    # does); weights and an output projection follow d_k: the seeds' golden verdicts rely on both.
    for name in ("qkv_multi", "rows_single", "rows_multi", "columns_single_scaled", "qkv_projections"):
        for case in cases.random_cases(CONVENTIONS[name], seed=11):
            assert all(h.wv.shape[1] == h.wk.shape[1] for h in case.heads), (name, case.label)


ANY_AXES = ('[[functions]]\nname = "attend"\n[functions.convention]\n'
            'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
            '{ name = "V", role = "v", heads = "axis" }]\nreturns = "heads"\nper_head_returns = "axis"\n'
            'batch = "any"\n')


def _flat(a, width):
    """(N, ..., L, width) as (N*..., L, width): the leading axes merged, as a function written
    for one batch axis might do it."""
    return a.reshape(-1, a.shape[-2], width)


def right(Q, K, V):
    """Attention on any leading axes, each array merged by its own last axis."""
    q, k, v = _flat(Q, Q.shape[-1]), _flat(K, K.shape[-1]), _flat(V, V.shape[-1])
    out = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])) @ v
    return out.reshape(*Q.shape[:-1], V.shape[-1])


def values_as_wide_as_keys(Q, K, V):
    """The same with E, the queries' width, taken for the values' too: a function assuming Ev == E."""
    e = Q.shape[-1]
    q, k, v = _flat(Q, e), _flat(K, e), _flat(V, e)
    out = _softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(e)) @ v
    return out.reshape(*Q.shape[:-1], e)


def test_a_function_that_assumes_ev_equals_e_fails_where_the_values_are_wider_and_passes_elsewhere():
    conv = parse(ANY_AXES, "course.toml").functions[0].convention
    verdicts = []
    for case in cases.random_cases(conv, seed=11):
        args = conv.call_arguments(case)
        expected = conv.expected_parts(case)["heads"]
        assert same(canonical_parts(conv, encode_value(right(*args))).values["heads"], expected, Tolerance())
        try:
            wrong = canonical_parts(conv, encode_value(values_as_wide_as_keys(*args))).values["heads"]
            verdicts.append(same(wrong, expected, Tolerance()))
        except ValueError:   # the reshape by E does not fit Ev
            verdicts.append(False)
    assert False in verdicts and True in verdicts, verdicts


ANY_AXES_MASKED = ('[[functions]]\nname = "attend"\n[functions.convention]\n'
                   'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
                   '{ name = "V", role = "v", heads = "axis" }, '
                   '{ name = "mask", role = "mask", form = "ignore", shape = "B x 1 x Lq x Lk" }]\n'
                   'returns = ["heads", "weights"]\nper_head_returns = "axis"\nbatch = "any"\n')


def any_axes_attention(Q, K, V, mask):
    """(N, ..., H, L, E) attention, the mask broadcast over the heads and applied as
    np.where(mask, -1e10, s), True = ignore."""
    s = np.where(mask, -1e10, Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
    w = _softmax(s)
    return w @ V, w


def test_a_mask_broadcastable_over_the_heads_comes_on_the_same_two_leading_axes_and_is_applied_as_written():
    conv = parse(ANY_AXES_MASKED, "course.toml").functions[0].convention
    assert conv.leading_axes and conv.heads == "many"
    seen_wider = False
    for case in [*cases.random_cases(conv, seed=3), cases.base_case(conv, 3)]:
        q, k, v, mask = conv.call_arguments(case)
        lead = q.shape[:2]
        assert mask.shape == (*lead, 1, case.n, case.lk) and mask.dtype == bool
        assert q.shape[2] == len(case.heads) and v.shape[:-1] == k.shape[:-1]
        seen_wider = seen_wider or v.shape[-1] != k.shape[-1]
        parts = canonical_parts(conv, encode_value(any_axes_attention(q, k, v, mask)))
        assert not parts.problems
        for part, expected in conv.expected_parts(case).items():
            assert same(parts.values[part], expected, Tolerance()), (case.label, part)
        if case.lk == 1:
            continue   # one key: every query keeps it, so no reading of the mask differs
        # The mask's True is ignore: read as keep, every masked key would be attended.
        inverted = canonical_parts(conv, encode_value(any_axes_attention(q, k, v, ~mask)))
        assert not same(inverted.values["weights_per_head"], conv.expected_parts(case)["weights_per_head"],
                        Tolerance())
    assert seen_wider


# spec infer and batch = "any": a solution written for any leading axes, its class keeping the
# weights on the object, written for these tests from the shapes PyTorch's
# scaled_dot_product_attention documents: Q (N, ..., L, E), K (N, ..., S, E), V (N, ..., S, Ev),
# a boolean mask broadcastable to (N, ..., L, S), True meaning ignore.
ANY_AXES_CLASS = '''class ScaledDotProductAttention:
    """Attention on any leading axes: Q (N, ..., L, E), K (N, ..., S, E), V (N, ..., S, Ev)
    give (N, ..., L, Ev); mask, broadcastable to (N, ..., L, S), is True where a key is ignored."""

    def __init__(self):
        self.attention_scores = None

    def forward(self, Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
        if mask is not None:
            scores = np.where(mask, -1e10, scores)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        self.attention_scores = e / e.sum(axis=-1, keepdims=True)
        return self.attention_scores @ V'''
# The docstring is what says "any leading axes" to spec infer; without it the same code is
# read as one leading axis's.
ONE_AXIS_DOC = ANY_AXES_CLASS.replace("(N, ..., ", "(N, ")
# Planted: the mask read as keep (True = may attend), a named mistake ("mask inverted").
MASK_INVERTED = ANY_AXES_CLASS.replace("np.where(mask, -1e10, scores)", "np.where(mask, scores, -1e10)")
# Not a mistake of the mathematics: the weights are not kept on the object.
KEEPS_NOTHING = ANY_AXES_CLASS.replace("self.attention_scores = e / e.sum", "weights = e / e.sum") \
    .replace("return self.attention_scores @ V", "return weights @ V")
# Written for one leading axis: it loops over it.
ONE_LEADING_AXIS = '''class ScaledDotProductAttention:
    def forward(self, Q, K, V, mask=None):
        outputs, kept = [], []
        for b in range(Q.shape[0]):
            scores = Q[b] @ K[b].T / np.sqrt(Q.shape[-1])
            if mask is not None:
                scores = np.where(mask[b], -1e10, scores)
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            kept.append(e / e.sum(axis=-1, keepdims=True))
            outputs.append(kept[-1] @ V[b])
        self.attention_scores = np.stack(kept)
        return np.stack(outputs)'''


def test_a_source_written_for_any_leading_axes_is_told_from_two_d_code_by_its_ellipses_or_starred_shape():
    import ast

    from grader.authoring.spec_tools.signatures import any_leading_axes
    written_for_any = [ANY_AXES_CLASS, "def f(Q, mask):\n    return Q + mask[..., None, :]",
                       "def f(Q):\n    *batch, L, E = Q.shape\n    return Q.reshape(-1, L, E)"]
    two_d = [ONE_AXIS_DOC, "def f(Q, K):\n    return Q @ np.swapaxes(K, -1, -2)", "def f(Q):\n    ...",
             'def f(Q):\n    """Softmax... and so on, ..."""\n    return Q']
    assert [any_leading_axes(ast.parse(s)) for s in written_for_any] == [True] * 3
    assert [any_leading_axes(ast.parse(s)) for s in two_d] == [False] * 4


def test_the_class_s_attributes_set_after_init_are_read_back_when_probed():
    import nbformat

    from grader.authoring.spec_tools.signatures import notebook_class_signatures
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(ANY_AXES_CLASS)])
    (found,), _ = notebook_class_signatures(nb)
    assert found.graded.self_attributes == ("attention_scores",) and found.graded.any_axes
    assert found.attributes == ("attention_scores",)   # set in __init__ too, to None


def test_words_say_whom_batch_any_fails():
    from grader.authoring.spec_tools.probe import Fit
    from grader.authoring.spec_tools.words import describe, differences
    table = {"params": [{"name": "Q", "role": "q"}], "returns": "output", "batch": True}
    words = differences(Fit(table, (("batch", True),), 1), Fit({**table, "batch": "any"}, (("batch", "any"),), 1))
    assert words.startswith('batch = "any"') and "one leading axis only" in words
    made = {**table, "batch": "any", "class": {"method": "forward", "kept": {"attention_scores": "weights"}}}
    assert "keeping the weights in self.attention_scores" in describe(made) and "any leading" in describe(made)


@pytest.mark.slow
def test_infer_writes_batch_any_and_the_kept_weights_and_the_spec_tells_the_mistakes_apart(tmp_path):
    """spec infer on a class written for any leading axes that keeps its weights: batch = "any"
    (its docstring says (N, ..., L, E), and the one-axis form passes too) and kept = {
    attention_scores = "weights" }; the spec grades the solution at full marks, names a planted
    mistake, and fails a class that keeps nothing or handles one leading axis only."""
    import tomllib

    from grading_helpers import TEST_SETTINGS, expect_slow, write_notebook
    from grader.authoring.spec_tools.infer import infer
    from grader.course.spec import load_assignment
    from grader.grade import grade_path
    expect_slow()

    def written(name: str, source: str):
        return write_notebook(tmp_path / name, "import numpy as np", source)
    inferred = infer(written("solution.ipynb", ANY_AXES_CLASS), tmp_path / "course.toml", TEST_SETTINGS)
    table = inferred.functions["ScaledDotProductAttention"].table
    assert table["batch"] == "any" and table["class"]["kept"] == {"attention_scores": "weights"}, table
    assert {p["name"]: p.get("form") for p in table["params"]}["mask"] == "ignore"
    assert any(w.startswith("batch = true") for w in inferred.undecided["ScaledDotProductAttention"]), \
        inferred.undecided
    assert inferred.score[0] == inferred.score[1] > 0
    spec = tomllib.loads(inferred.text)["functions"][0]["convention"]
    assert spec["batch"] == "any" and spec["class"]["kept"] == {"attention_scores": "weights"}
    (tmp_path / "course.toml").write_text(inferred.text)
    assignment = load_assignment(str(tmp_path / "course.toml"))
    solution = grade_path(tmp_path / "solution.ipynb", assignment, TEST_SETTINGS)
    assert solution.score == solution.max_score > 0, [(c.name, c.message) for c in solution.checks if not c.points]
    inverted = grade_path(written("inverted.ipynb", MASK_INVERTED), assignment, TEST_SETTINGS)
    assert inverted.score < inverted.max_score
    assert any(c.diagnosis == "mask inverted" for c in inverted.checks), [c.diagnosis for c in inverted.checks]
    nothing = grade_path(written("nothing.ipynb", KEEPS_NOTHING), assignment, TEST_SETTINGS)
    assert nothing.score < nothing.max_score
    # Its __init__ sets the attribute to None, which is what the grader reads back.
    assert any("weights kept in `self.attention_scores` came back as None" in c.message for c in nothing.checks)
    one_axis = grade_path(written("one_axis.ipynb", ONE_LEADING_AXIS), assignment, TEST_SETTINGS)
    assert one_axis.score < one_axis.max_score


@pytest.mark.slow
def test_infer_lists_batch_any_without_choosing_it_for_a_source_that_does_not_say_any_axes(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow, write_notebook
    from grader.authoring.spec_tools.infer import infer
    expect_slow()
    solution = write_notebook(tmp_path / "solution.ipynb", "import numpy as np", ONE_AXIS_DOC)
    inferred = infer(solution, tmp_path / "course.toml", TEST_SETTINGS)
    table = inferred.functions["ScaledDotProductAttention"].table
    assert table.get("batch") != "any" and table["class"]["kept"] == {"attention_scores": "weights"}
    assert any(w.startswith('batch = "any"') and "one leading axis only" in w
               for w in inferred.undecided["ScaledDotProductAttention"]), inferred.undecided
