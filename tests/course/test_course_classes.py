"""Attention written as a class, graded through a course's TOML spec alone: the object made
with its sizes, its weights set through attributes, an init method or its constructor, and a
method called; the same checks, diagnosis and smallest failing case as for a function, end to
end in a real kernel, and a spec that cannot be graded refused in one line."""
import ast
from pathlib import Path
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from grading_helpers import FIXTURES, ROOT, grade, graded_at_full_marks, planted_mistakes_named, write_notebook
from grader.calling import cases
from grader.calling import class_table, classes
from grader.kernel_side import harness
from grader.kernel import replies as payloads
from grader.intake import source_scan as static_scan
from grader.kernel_side import wire
from grader.judging.checks import Context, InputVariant, Outcome, check_probes, judge_unmodified
from grader.errors import SpecError
from grader.judging.explain import features
from grader.calling.returns import Tolerance, compare
from grader.batch.similarity import fingerprint
from grader.course.spec import load_assignment, parse

sys.path.insert(0, str(ROOT / "tests"))
from make_class_fixtures import CHANGED, MISTAKES, SECOND_MISTAKES, SOFTMAX, WORKED  # noqa: E402

CLASSES = FIXTURES / "classes"
SPEC = CLASSES / "course.toml"
FUNCTION = '[[functions]]\nname = "Attention"\n[functions.convention]\n'
METHOD = 'params = [{ name = "x", role = "x" }]\nreturns = "output"\n'
WEIGHTS = 'attributes = { W_q = "wq", W_k = "wk", W_v = "wv" }\n'
# A notebook cell that replaces the harness's call so that its replies leave out the values
# as they were after each call.
DROPS_INPUTS_AFTER = ("import sys\n_h = sys.modules['_attention_grader_harness']\n_original = _h._call\n\n"
                      "def _quiet(request):\n    reply = _original(request)\n    reply.pop('inputs_after', None)\n"
                      "    return reply\n\n_h._call = _quiet\n")


def _functions():
    return {fn.name: fn for fn in load_assignment(str(SPEC)).functions}


def _worked_classes() -> dict:
    """The worked notebook's classes, defined here as the notebook defines them."""
    space = {"np": np}
    exec(SOFTMAX, space)
    for body in WORKED.values():
        exec(body, space)
    return space


def test_the_object_s_roles_count_as_the_convention_s():
    functions = _functions()
    mha = functions["MultiHeadAttention"].convention
    assert mha.param_names == ("x", "mask") and mha.class_call.method == "forward"
    assert mha.heads == "many" and mha.projection and mha.projection_bias and mha.biases and mha.masked
    assert {"mask", "projection", "projection_bias", "biases", "heads", "fused_heads"} <= features(mha)
    causal = functions["CausalSelfAttention"].convention
    assert causal.causal and causal.class_call.init == "init_weights" and len(causal.class_call.init_params) == 8
    heads = functions["SelfAttentionHeads"]
    assert heads.fixed_data == "sheet_000_heads" and "fixed" in heads.points
    assert heads.convention.class_call.method == "__call__" and not heads.convention.biases


def test_the_built_in_module_is_the_course_s_class_convention():
    built_in, = load_assignment("module").functions
    course = _functions()["MultiHeadAttention"]
    assert built_in.convention == course.convention and built_in.points == course.points
    assert classes.signature(built_in.name, built_in.convention, built_in.params) == \
        "MultiHeadAttention(d_model, num_heads).forward(x, mask)"
    assert classes.signature("layer", _functions()["SelfAttentionHeads"].convention, ["X"]) == \
        "layer(W_q, W_k, W_v, n_heads)(X)"


@pytest.mark.parametrize("name", ["MultiHeadAttention", "CausalSelfAttention", "SelfAttentionHeads"])
def test_an_object_made_from_the_request_computes_the_reference(name):
    """The harness's own code makes the worked class's object from what the grader sends (in
    every dtype and layout) and calls its method: the reference comes back."""
    fn, space = _functions()[name], _worked_classes()
    conv = fn.convention
    ctx = Context(seed=3, tolerance=Tolerance())
    probes = [*check_probes("random_shapes", fn, ctx), *check_probes("memory_layout", fn, ctx),
              *check_probes("dtypes", fn, ctx)[:1]]
    for probe in probes:
        sent = classes.sent_arguments(probe, conv)
        request = classes.request(conv, sent, probe.variant.layout)
        sizes = dict(zip([p.name for p in conv.class_call.construct], sent[len(conv.params):]))
        if "d_model" in sizes:
            assert sizes["d_model"] == probe.case.d
        method, _, _, _ = harness._method_of(space[name], request["object"], {"at": ""})
        returned = method(*[wire.decode_argument(a) for a in request["args"]])
        returned = returned if isinstance(returned, tuple) else (returned,)
        expected = conv.expected_parts(probe.case)
        for part, value in zip(conv.returns, returned):
            value = list(value) if part.endswith("_per_head") else value
            tol = Tolerance().loosened(probe.variant.loosening)
            assert compare(value, expected[part], tol) is None, (name, part, probe.label)


class _PerHead:
    """A course's class with one matrix per head in lists and the packed output projection in a
    dict, whose constructor takes its sizes in another order than the spec's."""

    def __init__(self, n_heads, d_model):
        self.n_heads, self.d_model = n_heads, d_model

    def __call__(self, x):
        heads = []
        for q, k, v in zip(self.W_q, self.W_k, self.W_v):
            s = (x @ q) @ (x @ k).T / np.sqrt(q.shape[1])
            e = np.exp(s - s.max(axis=1, keepdims=True))
            heads.append(e / e.sum(axis=1, keepdims=True) @ (x @ v))
        return np.concatenate(heads, axis=1) @ self.out["w"] + self.out["b"]


def test_per_head_lists_a_dict_and_a_reordered_constructor_reach_the_object():
    fn = parse(FUNCTION + METHOD + '[functions.convention.class]\nmethod = "__call__"\n'
               'construct = [{ name = "d_model", role = "d_model" }, { name = "n_heads", role = "n_heads" }]\n'
               'attributes = { W_q = { role = "wq", heads = "per_head" }, W_k = { role = "wk", heads = "per_head" }, '
               'W_v = { role = "wv", heads = "per_head" }, out = { role = "dict", keys = { w = "wo", b = "bo" } } }\n',
               "course.toml").functions[0]
    conv = fn.convention
    assert conv.heads == "many" and conv.projection_bias
    for probe in check_probes("random_shapes", fn, Context(seed=4, tolerance=Tolerance())):
        sent = classes.sent_arguments(probe, conv)
        request = classes.request(conv, sent, probe.variant.layout)
        method, by_keyword, given_after, _ = harness._method_of(_PerHead, request["object"], {"at": ""})
        assert by_keyword and method.__self__.n_heads == len(probe.case.heads)
        assert isinstance(method.__self__.W_q, list) and len(method.__self__.W_q) == len(probe.case.heads)
        output = method(*[wire.decode_argument(a) for a in request["args"]])
        assert compare(output, conv.expected_parts(probe.case)["output"], Tolerance()) is None, probe.label
        assert len(given_after()) == len(sent) - len(conv.params)


def test_the_weights_go_in_the_course_s_layout_and_float32_with_the_probe():
    fn = _functions()["MultiHeadAttention"]
    conv = fn.convention
    case = cases.base_case(conv, 2)
    d_model, num_heads, W_q, b_q, *_, W_o, b_o = classes.object_values(conv, case)
    assert (d_model, num_heads) == (case.d, len(case.heads))
    assert np.array_equal(W_q, np.concatenate([h.wq for h in case.heads], axis=1).T)   # out x in
    assert np.array_equal(W_o, case.wo.T) and np.array_equal(b_o, case.bo)
    probe = check_probes("dtypes", fn, Context(seed=2, tolerance=Tolerance()))[0]
    assert probe.variant is InputVariant.FLOAT32
    sent = classes.sent_arguments(probe, conv)
    assert all(v.dtype == np.float32 for v in sent if isinstance(v, np.ndarray) and v.dtype.kind == "f")


@pytest.mark.parametrize("table, words", [
    # A method that projects tokens needs weights; an object may hold none where its method
    # takes Q, K and V (see the weightless class below).
    ('[functions.convention.class]\nmethod = "forward"\n', "no param has role 'wq' (or 'wqkv')"),
    ('[functions.convention.class]\n' + WEIGHTS, "convention: class: method must be the name of a method, not None"),
    ('[functions.convention.class]\nmethod = "__init__"\n' + WEIGHTS, "method must be the name of a method"),
    ('[functions.convention.class]\nmethod = "forward"\nattrs = {}\n', "class: unknown key 'attrs'"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { W_q = "x" }\n',
     "role 'x' is not taken here"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { W_q = "d_model" }\n',
     "role 'd_model' is not taken here"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { W_q = "query" }\n', "unknown role 'query'"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { __class__ = "wq" }\n',
     "attribute '__class__' is not a name to set"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { forward = "wq", W_k = "wk", W_v = "wv" }\n',
     "attribute forward would replace the method graded"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { W_q = "wq", W_k = "wk" }\n',
     "no param has role 'wv' (or 'wqkv'), which its returns need"),
    ('[functions.convention.class]\nmethod = "forward"\nattributes = { W_q = "wq", W_k = "wk", W_v = "wv", '
     'Wq = "wq" }\n', "role 'wq' is given twice (W_q and Wq)"),
    ('[functions.convention.class]\nmethod = "forward"\ninit = { method = "forward", params = [] }\n',
     "init: params must name"),
    ('[functions.convention.class]\nmethod = "forward"\ninit = { method = "forward", '
     'params = [{ name = "Wq", role = "wq" }] }\n', "init: forward is the method graded"),
    ('[functions.convention.class]\nmethod = "forward"\ninit = { method = "setup", '
     'params = [{ name = "Wq", role = "wq" }], when = 1 }\n', "init must be a table"),
    ('[functions.convention.class]\nmethod = "forward"\nconstruct = [{ name = "d", role = "d_model", '
     'heads = "fused" }]\n' + WEIGHTS, "param d: unknown key 'heads' for role 'd_model'"),
    ('[functions.convention.class]\nmethod = "forward"\nconstruct = [{ name = "x", role = "x" }]\n' + WEIGHTS,
     "role 'x' is not taken here"),
    ('class = "MultiHeadAttention"\n', "class: must be a table"),
])
def test_a_class_that_cannot_be_graded_is_refused_in_one_line(table, words):
    with pytest.raises(SpecError) as error:
        parse(FUNCTION + METHOD + table, "course.toml")
    message = str(error.value)
    assert message.startswith("course.toml: function 1: Attention: convention: ") and "\n" not in message
    assert words in message, message


def test_a_weight_given_to_the_method_and_to_the_object_is_refused():
    with pytest.raises(SpecError, match="role 'wq' is given twice"):
        parse(FUNCTION + 'params = [{ name = "x", role = "x" }, { name = "W", role = "wq" }]\nreturns = "output"\n'
              '[functions.convention.class]\nmethod = "forward"\n' + WEIGHTS, "course.toml")


@pytest.mark.slow
def test_the_command_line_refuses_a_class_spec_with_exit_2(tmp_path):
    spec = tmp_path / "course.toml"
    spec.write_text(FUNCTION + METHOD + '[functions.convention.class]\nmethod = "forward"\n')
    done = subprocess.run([sys.executable, "-m", "grader.cli", "check", str(CLASSES / "worked.ipynb"),
                           "--assignment", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Attention: convention: no param has role 'wq' (or 'wqkv')" in lines[0]


def test_which_step_raised_is_only_a_choice_of_words():
    """The kernel names the step that raised; a forged step names nothing else."""
    conv = _functions()["MultiHeadAttention"].convention
    sent = [np.zeros((5, 6)), np.ones((5, 5), bool), 6, 2]
    reply = payloads.call_reply({"found": True, "error": {"type": "ValueError", "message": "no", "where": [],
                                                          "step": "construct\nall checks passed"}})
    assert "step" not in reply["error"]
    assert classes.raised("MultiHeadAttention", conv, reply["error"].get("step"), sent) == \
        "MultiHeadAttention.forward(x, mask) raised"
    reply = payloads.call_reply({"found": True, "error": {"type": "E", "message": "", "step": "construct"}})
    assert classes.raised("MultiHeadAttention", conv, reply["error"]["step"], sent) == \
        "constructing MultiHeadAttention(d_model=6, num_heads=2) raised"


def test_a_reply_that_leaves_out_the_inputs_after_the_call_fails_inputs_unmodified():
    """The harness reports every value it was sent; a reply that drops them (a replaced harness)
    must not pass the check, for a function as for a class."""
    for name in ("MultiHeadAttention", "SelfAttentionHeads"):
        fn = _functions()[name]
        probe, = check_probes("inputs_unmodified", fn, Context(seed=1, tolerance=Tolerance()))
        sent = classes.sent_arguments(probe, fn.convention)
        full = judge_unmodified(fn, None, [(probe, Outcome("ok", sent=sent, inputs_after=list(sent)))])
        assert full.status == "passed"
        for after in (None, sent[:len(fn.params)]):
            verdict = judge_unmodified(fn, None, [(probe, Outcome("ok", sent=sent, inputs_after=after))])
            assert verdict.status == "failed" and "inputs after the call" in verdict.message, (name, after)


def test_the_static_scan_and_similarity_read_a_graded_class():
    stub = "class MultiHeadAttention:\n    def __init__(self, d):\n        self.d = d\n\n    def forward(self, x):\n" \
           "        ...\n"
    scan = static_scan.scan([(0, "import numpy as np"), (1, stub)], {"MultiHeadAttention"},
                            {"MultiHeadAttention": "forward"})
    assert scan.stubs == {"MultiHeadAttention"} and scan.definers == {"MultiHeadAttention": [1]}
    worked = WORKED["MultiHeadAttention"].strip()
    scan = static_scan.scan([(0, "from scipy.special import softmax"), (1, worked), (2, "class Broken(:\n")],
                            {"MultiHeadAttention", "Broken"}, {"MultiHeadAttention": "forward"})
    assert not scan.stubs and scan.definers == {"MultiHeadAttention": [1], "Broken": [2]}
    assert "scipy.special.softmax" in scan.function_imports["MultiHeadAttention"]
    prints = fingerprint(CLASSES / "worked.ipynb", {"MultiHeadAttention", "SelfAttentionHeads"})
    assert set(prints) == {"MultiHeadAttention", "SelfAttentionHeads"}
    assert "forward" in prints["MultiHeadAttention"] and ast.parse(prints["MultiHeadAttention"])


@pytest.mark.slow
def test_class_worked_solutions_earn_full_marks():
    result = graded_at_full_marks(CLASSES / "worked.ipynb", str(SPEC))
    kinds = {c.name for c in result.checks}
    assert {"MultiHeadAttention.masked_keys_zero_weight", "CausalSelfAttention.causal_future",
            "SelfAttentionHeads.fixed", "MultiHeadAttention.inputs_unmodified"} <= kinds
    described = result.functions["MultiHeadAttention"]
    assert described["params"] == ["x", "mask"] and "numpy" in described["modules"]
    assert result.functions["SelfAttentionHeads"]["params"] == ["X"]


@pytest.mark.slow
@pytest.mark.parametrize("notebook, mistakes", [("mistakes.ipynb", MISTAKES),
                                                ("second_mistakes.ipynb", SECOND_MISTAKES)])
def test_each_planted_mistake_in_a_class_is_named_with_a_smallest_case_that_runs(notebook, mistakes):
    _, smallest = planted_mistakes_named(CLASSES / notebook, str(SPEC), mistakes)
    # The smallest failing case makes the object as the grader did.
    assert all(f"layer = {name}(" in case["code"] for name, case in smallest.items())


@pytest.mark.slow
def test_the_built_in_module_grades_the_worked_class_and_names_its_mistakes():
    worked = grade(CLASSES / "worked.ipynb", "module")
    assert worked.status == "graded" and worked.score == worked.max_score == 11
    for notebook, mistakes in (("mistakes.ipynb", MISTAKES), ("second_mistakes.ipynb", SECOND_MISTAKES)):
        title = mistakes["MultiHeadAttention"][2]
        result = grade(CLASSES / notebook, "module")
        assert result.score < result.max_score and any(title in (c.diagnosis or "") for c in result.checks), notebook


@pytest.mark.slow
def test_a_constructor_that_raises_is_named_as_the_student_s_error():
    result = grade(CLASSES / "constructor_raises.ipynb", str(SPEC))
    assert result.status == "graded"
    checks = [c for c in result.checks if c.function == "MultiHeadAttention" and c.max_points]
    assert checks and all(c.points == 0 for c in checks)
    random = next(c for c in checks if c.kind == "random_shapes")
    assert random.status == "error" and "constructing MultiHeadAttention(d_model=6, num_heads=2) raised " \
                                       "AttributeError" in random.message and "reset_parameters" in random.message
    missing = next(c for c in result.checks if c.function == "SelfAttentionHeads")
    assert "no class named `SelfAttentionHeads` is defined" in missing.message


@pytest.mark.slow
def test_a_forward_that_changes_the_weights_it_was_given_fails_inputs_unmodified_only():
    result = grade(CLASSES / "changes_weights.ipynb", str(SPEC))
    for name, words in CHANGED.items():
        checks = {c.kind: c for c in result.checks if c.function == name}
        assert checks["inputs_unmodified"].status == "failed" and words in checks["inputs_unmodified"].message
        assert checks["random_shapes"].status == checks["memory_layout"].status == "passed", name


@pytest.mark.slow
def test_a_template_class_a_function_in_its_place_and_a_replaced_harness(tmp_path):
    """A class whose graded method is still the template's is not implemented; a function
    where a class is expected fails when made; a notebook that drops the values it was sent
    from the harness's replies does not pass inputs_unmodified."""
    nb = nbformat.v4.new_notebook()
    template = WORKED["CausalSelfAttention"].split("    def forward")[0] + "    def forward(self, x):\n        ...\n"
    nb.cells = [nbformat.v4.new_code_cell(source) for source in [
        "import numpy as np", SOFTMAX, "def MultiHeadAttention(d_model, num_heads):\n    return None\n",
        template, WORKED["SelfAttentionHeads"], DROPS_INPUTS_AFTER]]
    path = tmp_path / "odd_classes.ipynb"
    nbformat.write(nb, path)
    checks = {c.name: c for c in grade(path, str(SPEC)).checks}
    made = checks["MultiHeadAttention.random_shapes"]
    assert made.status == "error" and "constructing MultiHeadAttention(d_model=6, num_heads=2) raised " \
                                     "TypeError: MultiHeadAttention is not a class" in made.message
    assert "still has the template's placeholder body" in checks["CausalSelfAttention.random_shapes"].message
    unmodified = checks["SelfAttentionHeads.inputs_unmodified"]
    assert unmodified.status == "failed" and "inputs after the call" in unmodified.message


@pytest.mark.slow
def test_a_function_that_changes_its_input_and_hides_it_from_the_grader_fails_inputs_unmodified(tmp_path):
    """The same replaced harness, for a built-in assignment's function: leaving out what the
    arguments were after the call is no way to pass the check."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in [
        "import numpy as np", SOFTMAX,
        "def self_attention(X, Wq, Wk, Wv):\n    Q, K, V = X @ Wq, X @ Wk, X @ Wv\n"
        "    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]))\n    output = weights @ V\n    X[0, 0] += 1\n"
        "    return output, weights\n", DROPS_INPUTS_AFTER]]
    path = tmp_path / "hides_changed_inputs.ipynb"
    nbformat.write(nb, path)
    checks = {c.name: c for c in grade(path, "rows").checks}
    assert checks["self_attention.random_shapes"].status == "passed"
    unmodified = checks["self_attention.inputs_unmodified"]
    assert unmodified.status == "failed" and "inputs after the call" in unmodified.message


def test_the_docs_class_example_is_a_spec_and_names_the_size_roles():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("\n## Classes\n", 1)[1].split("\n## ", 1)[0]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    conv = parse(example, "docs/specs.md").functions[0].convention
    assert conv.class_call.method == "forward" and conv.heads == "many" and conv.projection_bias
    for word in [*class_table.SIZE_ROLES, "construct", "attributes", "init", "__call__"]:
        assert f"`{word}`" in section, word


@pytest.mark.slow
def test_a_class_that_returns_its_own_weights_or_input_is_not_an_answer(tmp_path):
    """The non-answer rule holds for a class as for a function: what it was given, handed
    back (through the object or the method), earns nothing."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in [
        "import numpy as np",
        WORKED["MultiHeadAttention"].split("    def forward")[0]
        + "    def forward(self, x, mask):\n        n = x.shape[0]\n"
          "        return x @ self.W_v.T, np.full((self.num_heads, n, n), 1 / n)\n",
        WORKED["SelfAttentionHeads"].split("    def __call__")[0]
        + "    def __call__(self, X):\n        return self.W_q, [np.eye(len(X))] * self.n_heads\n"]]
    path = tmp_path / "non_answers.ipynb"
    nbformat.write(nb, path)
    result = grade(path, str(SPEC))
    for name in ("MultiHeadAttention", "SelfAttentionHeads"):
        assert result.functions[name]["non_answer"], name
        checks = [c for c in result.checks if c.function == name and c.max_points]
        assert all(c.points == 0 for c in checks) and "does not compute attention yet" in checks[0].message, name


def test_a_class_holding_no_weights_is_a_convention_when_its_method_takes_q_k_and_v():
    conv = parse(FUNCTION + 'params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, '
                 '{ name = "V", role = "v" }]\nreturns = ["output", "weights"]\n'
                 '[functions.convention.class]\nmethod = "forward"\n', "course.toml").functions[0].convention
    assert conv.class_call is not None and conv.class_call.slots() == []


# A ScaledDotProductAttention() that holds nothing and is given Q, K, V and an optional mask
# (True: ignore the key), as deep-learning course handouts write it; the worked solution and
# the same with one mistake, the scaling left out.
WEIGHTLESS = '''class ScaledDotProductAttention:
    def __init__(self):
        pass

    def forward(self, Q, K, V, mask=None):
        scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-1])
        if mask is not None:
            scores = np.where(mask, -1e9, scores)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = weights / weights.sum(axis=-1, keepdims=True)
        return weights @ V, weights'''


@pytest.mark.slow
def test_a_weightless_class_is_inferred_graded_at_full_marks_and_its_mistake_named(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.grade import grade_path
    expect_slow()

    def notebook(name: str, source: str) -> Path:
        return write_notebook(tmp_path / name, "import numpy as np", source, title="Attention lab")
    solution = notebook("solution.ipynb", WEIGHTLESS)
    inferred = infer(solution, tmp_path / "course.toml", TEST_SETTINGS)
    (tmp_path / "course.toml").write_text(inferred.text)
    assert inferred.score[0] == inferred.score[1] > 0
    assert "holding no weights" in inferred.text
    assignment = load_assignment(str(tmp_path / "course.toml"))
    unscaled = grade_path(notebook("unscaled.ipynb", WEIGHTLESS.replace(" / np.sqrt(K.shape[-1])", "")),
                          assignment, TEST_SETTINGS)
    assert unscaled.score < unscaled.max_score
    assert any(c.diagnosis and "scal" in c.diagnosis for c in unscaled.checks), \
        [(c.name, c.diagnosis) for c in unscaled.checks]


# A cross-attention class that draws its own random weights when it is made, then attends
# from query to key_value, written for this test from the usual handout description.
RANDOM_CROSS = '''class MultiHeadCrossAttention:
    def __init__(self, d_model, num_heads):
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.W_q = np.random.randn(d_model, d_model) * 0.1
        self.W_k = np.random.randn(d_model, d_model) * 0.1
        self.W_v = np.random.randn(d_model, d_model) * 0.1
        self.W_o = np.random.randn(d_model, d_model) * 0.1

    def forward(self, query, key_value):
        Q, K, V = query @ self.W_q, key_value @ self.W_k, key_value @ self.W_v
        heads = []
        for h in range(self.num_heads):
            part = slice(h * self.d_k, (h + 1) * self.d_k)
            s = Q[:, part] @ K[:, part].T / np.sqrt(self.d_k)
            w = np.exp(s - s.max(axis=1, keepdims=True))
            heads.append(w / w.sum(axis=1, keepdims=True) @ V[:, part])
        return np.concatenate(heads, axis=1) @ self.W_o'''


@pytest.mark.slow
def test_a_class_drawing_its_own_random_weights_is_graded_on_the_graders(tmp_path):
    """Its weights are set over the random ones for each call, so it earns full marks; the
    same class taking its keys and values from the query's tokens is named for it."""
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.grade import grade_path
    expect_slow()

    def notebook(name: str, source: str) -> Path:
        return write_notebook(tmp_path / name, "import numpy as np", source)
    inferred = infer(notebook("solution.ipynb", RANDOM_CROSS), tmp_path / "course.toml", TEST_SETTINGS)
    table = inferred.functions["MultiHeadCrossAttention"].table
    assert [(p["name"], p["role"]) for p in table["params"]] == [("query", "x"), ("key_value", "memory")]
    assert inferred.score[0] == inferred.score[1] > 0
    (tmp_path / "course.toml").write_text(inferred.text)
    mistaken = RANDOM_CROSS.replace("key_value @ self.W_k, key_value @ self.W_v", "query @ self.W_k, query @ self.W_v")
    result = grade_path(notebook("self_not_cross.ipynb", mistaken), load_assignment(str(tmp_path / "course.toml")),
                        TEST_SETTINGS)
    assert result.score < result.max_score
    assert any(c.diagnosis == "keys and values taken from the queries' sequence" for c in result.checks), \
        [c.diagnosis for c in result.checks]


# The same attention written for one leading batch axis only, looping over it.
ONE_LEADING_AXIS = '''class ScaledDotProductAttention:
    def forward(self, Q, K, V, mask=None):
        outputs, weights = [], []
        for b in range(Q.shape[0]):
            scores = Q[b] @ K[b].T / np.sqrt(K.shape[-1])
            w = np.exp(scores - scores.max(axis=-1, keepdims=True))
            outputs.append(w / w.sum(axis=-1, keepdims=True) @ V[b])
            weights.append(w / w.sum(axis=-1, keepdims=True))
        return np.stack(outputs), np.stack(weights)'''


@pytest.mark.slow
def test_a_function_for_any_leading_axes_earns_every_point_and_one_for_one_axis_fails_them(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.grade import grade_path
    expect_slow()
    solution = write_notebook(tmp_path / "solution.ipynb", "import numpy as np", WEIGHTLESS)
    spec = tmp_path / "any.toml"
    spec.write_text(FUNCTION.replace("Attention", "ScaledDotProductAttention") +
                    'params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }]\n'
                    'returns = ["output", "weights"]\nbatch = "any"\n'
                    '[functions.convention.class]\nmethod = "forward"\n')
    assignment = load_assignment(str(spec))
    graded = grade_path(solution, assignment, TEST_SETTINGS)
    assert graded.score == graded.max_score > 0, [(c.name, c.message) for c in graded.checks if not c.points]
    one_axis = grade_path(write_notebook(tmp_path / "one_axis.ipynb", "import numpy as np", ONE_LEADING_AXIS),
                          assignment, TEST_SETTINGS)
    assert one_axis.score < one_axis.max_score
