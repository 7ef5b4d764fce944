"""Calling conventions as data: the built-ins are TOML in the same form as a course's, a
course's own conventions grade end to end in a real kernel, and a spec that cannot be graded
is refused in one line naming the function and the field."""
import dataclasses
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from grading_helpers import FIXTURES, ROOT, SUBMISSIONS, grade, graded_at_full_marks, write_notebook
from grader.calling import cases
from grader.kernel import replies as payloads
from grader.calling.conventions import CONVENTIONS
from grader.errors import SpecError
from grader.judging.explain import features
from grader.calling.returns import Tolerance, canonical_parts, compare
from grader.course.spec import load_assignment, parse
from grader.kernel_side.wire import encode_value

COURSE = FIXTURES / "conventions"
SPEC = COURSE / "course.toml"
BUILTIN_TABLES = ROOT / "reference" / "conventions.toml"


def _builtin_tables() -> dict[str, str]:
    """Each built-in convention's TOML table, as text, from the data file."""
    text = BUILTIN_TABLES.read_text()
    return {name: body for name, body in re.findall(r"^\[conventions\.(\w+)\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_a_builtin_convention_written_inline_in_a_course_spec_is_the_same_convention(name):
    table = _builtin_tables()[name]
    spec = parse(f'[[functions]]\nname = "f"\n[functions.convention]\n{table}', "course.toml")
    inline, builtin = spec.functions[0].convention, CONVENTIONS[name]
    assert inline == dataclasses.replace(builtin, name=inline.name)
    assert features(inline) == features(builtin)
    case = cases.base_case(builtin, 3)
    for a, b in zip(inline.call_arguments(case), builtin.call_arguments(case)):
        np.testing.assert_array_equal(a, b)


def test_every_builtin_convention_is_in_the_data_file():
    assert set(_builtin_tables()) == set(CONVENTIONS) and len(CONVENTIONS) == 11


def _notebook_functions(name: str) -> dict:
    space = {}
    for cell in nbformat.read(COURSE / f"{name}.ipynb", as_version=4).cells:
        exec(cell.source, space)
    return space


def test_course_conventions_round_trip_through_the_wire():
    """The worked notebook's functions, called in this process with each convention's
    arguments, give back the reference once their returns are read as the convention says."""
    assignment, worked = load_assignment(str(SPEC)), _notebook_functions("worked")
    for fn in assignment.functions:
        conv = fn.convention
        for case in [*cases.random_cases(conv, 11), cases.base_case(conv, 11), cases.single_head_case(conv, 11)]:
            returned = worked[fn.name](*conv.call_arguments(case))
            parts = canonical_parts(conv, payloads.encoded_value(encode_value(returned)))
            assert not parts.problems, (fn.name, parts.problems)
            for part, expected in conv.expected_parts(case).items():
                assert compare(parts.values[part], expected, Tolerance()) is None, (fn.name, case.label, part)


def test_roles_layouts_and_returns_are_read_from_the_spec():
    conv = {fn.name: fn.convention for fn in load_assignment(str(SPEC)).functions}
    assert conv["scaled_dot_product_attention"].returns == ("output", "weights")
    assert conv["mha_forward"].heads == "many" and conv["mha_forward"].biases and conv["mha_forward"].projection
    assert conv["multihead_per_head"].returns == ("output", "weights_per_head")
    assert "fused_heads" not in features(conv["multihead_per_head"])   # the lists come split: no split to get wrong
    assert conv["packed_attention"].return_keys == ("out", "attn")
    assert conv["softmax"].steps == {"softmax"} and conv["softmax"].int_inputs == "none"
    case = cases.base_case(conv["mha_forward"], 1)
    x, w_q, b_q, *_, w_o, heads = conv["mha_forward"].call_arguments(case)
    np.testing.assert_array_equal(w_q, case.fused("wq").T)   # framework layout: out x in
    np.testing.assert_array_equal(w_o, case.wo.T)
    assert b_q.shape == (w_q.shape[0],) and heads == len(case.heads) == 2
    case = cases.base_case(conv["packed_attention"], 1)
    x, params = conv["packed_attention"].call_arguments(case)
    assert sorted(params) == ["W_qkv", "b_qkv"] and params["W_qkv"].shape == (3 * case.heads[0].wq.shape[1], case.d)
    np.testing.assert_array_equal(params["W_qkv"][:case.heads[0].wq.shape[1]], case.heads[0].wq.T)


def test_a_dict_return_without_a_key_says_which():
    conv = load_assignment(str(SPEC)).functions[-1].convention
    parts = canonical_parts(conv, payloads.encoded_value(encode_value({"out": np.ones((2, 2))})))
    assert parts.structure == ["returned a dict without the key 'attn'; expected a dict with keys 'out', 'attn'"]
    assert "output" in parts.values and parts.missing("weights") == "were not returned"
    parts = canonical_parts(conv, payloads.encoded_value(encode_value((np.ones((2, 2)), np.eye(2)))))
    assert parts.structure[0].startswith("returned tuple(")
    assert "where a dict with keys 'out', 'attn' was expected" in parts.structure[0]


@pytest.mark.slow
def test_course_conventions_grade_a_worked_solution_at_full_marks():
    result = graded_at_full_marks(COURSE / "worked.ipynb", str(SPEC))
    assert {c.function for c in result.checks} == {"scaled_dot_product_attention", "softmax", "mha_forward",
                                                   "multihead_per_head", "packed_attention"}


@pytest.mark.slow
def test_course_conventions_name_each_planted_mistake():
    result = grade(COURSE / "mistakes.ipynb", str(SPEC))
    sys.path.insert(0, str(ROOT / "tests"))
    from make_convention_fixtures import MISTAKES
    for function, (_, _, title) in MISTAKES.items():
        checks = [c for c in result.checks if c.function == function]
        assert any(c.lost_points for c in checks), function
        diagnoses = {c.diagnosis for c in checks if c.diagnosis}
        assert any(title in d for d in diagnoses), (function, diagnoses)
    # A lab whose softmax is over axis 0 by design: its worked softmax is not told otherwise, the
    # usual axis=-1 one is.
    worked = grade(COURSE / "worked.ipynb", str(SPEC))
    assert not any(c.diagnosis for c in worked.checks if c.function == "softmax")
    # The smallest failing cases run as printed, with lists and dicts spelled out, per-head
    # weights shown as the one array the convention returns.
    for function in MISTAKES:
        code = result.functions[function]["smallest_failing"]["code"]
        space = _notebook_functions("mistakes")
        exec(code, space)
    assert "weights = np.array([[[" in result.functions["multihead_per_head"]["smallest_failing"]["code"]
    packed = result.functions["packed_attention"]["smallest_failing"]["code"]
    assert "params = {'W_qkv': np.array(" in packed and "# expected: out = np.array(" in packed
    assert "#           attn = np.array(" in packed


FUNCTION = '[[functions]]\nname = "attend"\n[functions.convention]\n'
QKV = 'params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }]\n'


@pytest.mark.parametrize("convention, words", [
    ('params = [{ name = "Q", role = "query" }]\nreturns = "output"\n', "param Q: unknown role 'query'"),
    ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }]\nreturns = "output"\n',
     "no param has role 'v', which its returns need"),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }]\n'
     'returns = "output"\n', "no param has role 'wv' (or 'wqkv'), which its returns need"),
    (QKV + 'returns = ["output", "attention"]\n', "returns: 'attention' is not a part"),
    (QKV + 'returns = "q"\n', "returns 'q', which is computed before its inputs"),
    (QKV + 'returns = "output"\nweights = "row_major"\n', "weights must be one of 'in_out', 'out_in'"),
    (QKV + 'returns = "output"\ntokens = "cols"\n', "tokens must be one of 'rows', 'columns'"),
    (QKV + 'returns = "output"\naxis = 0\n', "axis applies to a softmax helper"),
    (QKV + 'returns = "output"\nheads = 2\n', "unknown key 'heads' in the convention"),
    ('params = ["Q", "K", "V"]\nreturns = "output"\n', "param 'Q' needs a role"),
    (QKV + 'returns = "output"\nbatch = 1\n', "batch must be one of False, True, 'any', not 1"),
    (QKV[:-2] + ', { name = "mask", role = "mask" }]\nreturns = "output"\n',
     "param mask: form must be one of 'keep', 'ignore', 'additive_inf'"),
    (QKV[:-2] + ', { name = "mask", role = "mask", form = "additive" }]\nreturns = "output"\n',
     "param mask: form must be one of 'keep', 'ignore', 'additive_inf', 'additive_big', 'float_keep'"),
    (QKV[:-2] + ', { name = "mask", role = "mask", form = "keep" }]\nreturns = "output"\nfully_masked = "ones"\n',
     "fully_masked must be one of 'zeros', 'uniform', 'nan', 'unmasked'"),
    (QKV + 'returns = "output"\nfully_masked = "zeros"\n', "fully_masked applies to a convention with a mask"),
    ('params = [{ name = "Q", role = "q", form = "keep" }, { name = "K", role = "k" }, { name = "V", role = "v" }]\n'
     'returns = "output"\n', "param Q: form applies to roles \"mask\" and \"key_padding\" only"),
    (QKV[:-2] + ', { name = "c", role = "causal" }]\nreturns = "output"\ncausal = true\n',
     "give causal = true (built inside) or a param with role causal (a flag), not both"),
    (QKV + 'returns = "output"\ncausal = 1\n', "causal must be one of False, True, not 1"),
    ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "m", role = "mask", form = "keep" }]\n'
     'returns = "scores"\n', "a mask (or causal) needs a function that computes the softmax itself"),
    (QKV[:-2] + ', { name = "m", role = "mask", form = "keep" }]\nreturns = "output"\ntokens = "columns"\n',
     "a mask (or causal) with tokens as columns is not supported yet"),
    ('params = [{ name = "X", role = "x" }, { name = "p", role = "dict", keys = { w = "wqkv", m = "mask" } }]\n'
     'returns = "output"\n', "a mask is its own param, not a key of a dict"),
    ('params = [{ name = "X", role = "x" }, { name = "W", role = "wqkv" }, { name = "b_o", role = "bo" }]\n'
     'returns = "output"\n', "an output projection bias (bo) needs the output projection (wo)"),
    (QKV[:-2] + ', { name = "memory", role = "memory" }]\nreturns = "output"\n',
     "a memory (cross-attention) needs the tokens X as input (role x)"),
    (QKV[:-2] + ', { name = "Q2", role = "q" }]\nreturns = "output"\n', "role 'q' is given twice (Q and Q2)"),
    ('params = [{ name = "X", role = "x" }, { name = "p", role = "dict", keys = { w = "wqkv", o = "wout" } }]\n'
     'returns = "output"\n', "param p key 'o': param p_o: unknown role 'wout'"),
    ('params = [{ name = "s", role = "scores" }]\nreturns = "output"\n', "a softmax helper (role scores) can only"),
    ('params = [{ name = "Q", role = ["q"] }]\nreturns = "output"\n', "param Q: role must be the name of a role"),
    ('params = [{ name = "X", role = "x" }, { name = "p", role = "dict", keys = { w = { role = "wq" } } }]\n'
     'returns = "output"\n', "param p key 'w': a key holds a role as text (w = \"wq\"), a table of keys, or "),
    ('params = [{ name = "s", role = "scores" }]\nreturns = "weights"\naxis = true\n',
     "axis must be one of -1, 1, 0, not True"),
])
def test_a_spec_that_cannot_be_graded_is_one_line_naming_the_function_and_the_field(convention, words):
    with pytest.raises(SpecError) as error:
        parse(FUNCTION + convention, "course.toml")
    message = str(error.value)
    assert message.startswith("course.toml: function 1: attend: convention: ") and "\n" not in message
    assert words in message, message


def test_params_of_an_inline_convention_are_named_only_inside_it():
    with pytest.raises(SpecError, match="attend: params go inside its inline convention"):
        parse('[[functions]]\nname = "attend"\nparams = ["Q"]\n[functions.convention]\n' + QKV + 'returns = "output"\n',
              "course.toml")


@pytest.mark.slow
def test_the_command_line_refuses_such_a_spec_with_exit_2(tmp_path):
    spec = tmp_path / "course.toml"
    spec.write_text(FUNCTION + QKV[:-2] + ', { name = "memory", role = "memory" }]\nreturns = "output"\n')
    done = subprocess.run([sys.executable, "-m", "grader.cli", "check", str(SUBMISSIONS / "worked_solution.ipynb"),
                           "--assignment", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "attend: convention: a memory (cross-attention) needs the tokens X as input " \
                               "(role x)" in lines[0]


def test_the_docs_example_is_a_spec_and_names_every_role():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("\n## Calling conventions\n", 1)[1].split("\n## ", 1)[0]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    conv = parse(example, "docs/specs.md").functions[0].convention
    assert conv.weights == "out_in" and conv.heads == "many" and conv.projection
    from grader.calling.conventions import RETURN_NAMES
    from grader.calling.params import NOT_SUPPORTED_YET, ROLES
    for word in [*ROLES, *NOT_SUPPORTED_YET, *RETURN_NAMES]:
        assert f"`{word}`" in section, word


@pytest.mark.parametrize("convention, fixed, words", [
    (QKV + 'returns = "output"\n', "sheet_003_multihead", "it has 2 heads, the convention takes 1"),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }]\nreturns = "output"\n', "sheet_003_single", "it has biases, the convention none"),
])
def test_the_sheet_data_must_fit_the_convention(convention, fixed, words):
    with pytest.raises(SpecError, match=f"attend: fixed_data '{fixed}' does not fit its convention: {words}"):
        parse(f'[[functions]]\nname = "attend"\nfixed_data = "{fixed}"\n[functions.convention]\n{convention}',
              "course.toml")


@pytest.mark.slow
def test_a_list_or_dict_argument_changed_in_place_is_found():
    result = grade(COURSE / "modifies_inputs.ipynb", str(SPEC))
    checks = {c.name: c for c in result.checks}
    for function, name in (("multihead_per_head", "Wvs"), ("packed_attention", "params")):
        assert checks[f"{function}.random_shapes"].status == "passed", function
        unmodified = checks[f"{function}.inputs_unmodified"]
        assert unmodified.status == "failed" and f"changed its argument `{name}` in place" in unmodified.message


def test_an_argument_is_unchanged_only_when_every_array_in_it_is():
    from grader.judging.checks import _unchanged
    w = np.eye(2)
    assert _unchanged([w, w], [w.copy(), w.copy()]) and _unchanged({"w": w}, {"w": w.copy()}) and _unchanged(3, None)
    assert not _unchanged([w, w], [w, w * 2]) and not _unchanged([w, w], [w]) and not _unchanged([w], None)
    assert not _unchanged({"w": w, "b": w}, {"w": w}) and not _unchanged({"w": w}, {"w": w.T[:1]})


def test_a_matrix_from_a_list_or_dict_argument_returned_unchanged_is_no_answer():
    from grader.judging.explain import trivial
    w = np.arange(6.0).reshape(3, 2)
    assert trivial(w, [np.ones(3), [np.eye(2), w]]) == "one of its own arguments, unchanged"
    assert trivial(w.T, [{"W_qkv": w, "b_qkv": np.ones(2)}]) == "one of its own arguments, unchanged"
    assert trivial(w + 1, [[np.eye(2), w], {"W_qkv": w}]) is None


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _heads(q, k, v, n, scaled=True):
    """Per head (output, weights, scores) of fused Q, K, V (tokens as rows); V split by its own
    width, which may differ from the keys' (d_v != d_k)."""
    found = []
    for cols, values in zip(np.split(np.arange(q.shape[1]), n), np.split(v, n, axis=1)):
        s = q[:, cols] @ k[:, cols].T / (np.sqrt(len(cols)) if scaled else 1.0)
        found.append((_softmax(s) @ values, _softmax(s), s))
    return found


def _packed_columns(X, W, b, n):
    """Tokens as columns, Q | K | V packed in out x in layout with column biases."""
    q, k, v = np.split((W @ X + b).T, 3, axis=1)
    parts = _heads(q, k, v, n)
    return np.concatenate([o for o, _, _ in parts], axis=1).T, [w.T for _, w, _ in parts]


def _indexed(X, *args):
    """Three heads, each head's matrices on their own, then W_o (in x out)."""
    *per_head, wo = args
    outs = [_heads(X @ a, X @ b, X @ c, 1)[0][0] for a, b, c in zip(*[iter(per_head)] * 3)]
    return np.concatenate(outs, axis=1) @ wo


SYNTHETIC = [
    ('params = [{ name = "X", role = "x" }, { name = "W", role = "wqkv" }, { name = "b", role = "bqkv" }, '
     '{ name = "h", role = "n_heads" }]\ntokens = "columns"\nweights = "out_in"\nreturns = ["output", "weights"]\n',
     lambda X, W, b, h: _packed_columns(X, W, b[:, 0][:, None], h)),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }, { name = "Wo", role = "wo" }, { name = "h", role = "n_heads" }]\n'
     'returns = ["heads", "scores", "q", "v", "output"]\nper_head_returns = "axis"\n',
     lambda X, Wq, Wk, Wv, Wo, h: (lambda p: (np.stack([o for o, _, _ in p]), [s for _, _, s in p], X @ Wq, X @ Wv,
                                             np.concatenate([o for o, _, _ in p], axis=1) @ Wo))(
         _heads(X @ Wq, X @ Wk, X @ Wv, h))),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq", heads = "per_head" }, '
     '{ name = "bq", role = "bq", heads = "per_head" }, { name = "Wk", role = "wk", heads = "per_head" }, '
     '{ name = "bk", role = "bk", heads = "per_head" }, { name = "Wv", role = "wv", heads = "per_head" }, '
     '{ name = "bv", role = "bv", heads = "per_head" }]\nweights = "out_in"\nreturns = { weights = "w" }\n',
     lambda X, Wq, bq, Wk, bk, Wv, bv: {"w": [_heads(X @ a.T + c, X @ b.T + d, X @ e.T + f, 1)[0][1]
                                              for a, c, b, d, e, f in zip(Wq, bq, Wk, bk, Wv, bv)]}),
    ('params = [{ name = "X", role = "x" }, '
     + ", ".join(f'{{ name = "W{p}{i}", role = "w{p}", head = {i} }}' for i in (1, 2, 3) for p in "qkv")
     + ', { name = "Wo", role = "wo" }]\nreturns = "output"\n', _indexed),
    ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }, '
     '{ name = "n", role = "n_heads" }, { name = "scaled", role = "scale" }]\nreturns = ["output", "weights"]\n',
     lambda Q, K, V, n, scaled: (lambda p: (np.concatenate([o for o, _, _ in p], axis=1), [w for _, w, _ in p]))(
         _heads(Q, K, V, n, scaled)) if scaled in (True, False) else None),
]


SYNTHETIC += [
    ('params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
     '{ name = "V", role = "v", heads = "per_head" }]\nreturns = ["heads", "weights"]\n',
     lambda Q, K, V: (lambda p: ([o for o, _, _ in p], np.stack([w for _, w, _ in p])))(
         [_heads(q, k, v, 1)[0] for q, k, v in zip(Q, K, V)])),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq", heads = "axis" }, '
     '{ name = "Wk", role = "wk", heads = "axis" }, { name = "Wv", role = "wv", heads = "axis" }, '
     '{ name = "bv", role = "bv", heads = "axis" }, { name = "bq", role = "bq", heads = "axis" }, '
     '{ name = "bk", role = "bk", heads = "axis" }, { name = "n", role = "n_heads" }]\n'
     'tokens = "columns"\nweights = "out_in"\nreturns = "output"\n',
     lambda X, Wq, Wk, Wv, bv, bq, bk, n: np.concatenate(
         [_heads((a @ X + c).T, (b @ X + d).T, (e @ X + f).T, 1)[0][0]
          for a, c, b, d, e, f in zip(Wq, bq, Wk, bk, Wv, bv)], axis=1).T),
]


@pytest.mark.parametrize("index", range(len(SYNTHETIC)))
def test_roles_layouts_and_returns_mean_what_the_readme_says(index):
    """Plain NumPy implementations written from the words of docs/specs.md for each field give back
    the reference once their returns are read as the convention says."""
    convention, implementation = SYNTHETIC[index]
    conv = parse(FUNCTION + convention, "course.toml").functions[0].convention
    for case in [*cases.random_cases(conv, 4), cases.base_case(conv, 4)]:
        returned = implementation(*conv.call_arguments(case))
        parts = canonical_parts(conv, payloads.encoded_value(encode_value(returned)))
        assert not parts.problems, parts.problems
        for part, expected in conv.expected_parts(case).items():
            assert compare(parts.values[part], expected, Tolerance()) is None, (case.label, part)


@pytest.mark.parametrize("extra, words", [
    ('axis = 0\n', "vector = true applies to a softmax helper"),
    ('batch = true\n', "vector = true applies to a softmax helper"),
])
def test_a_vector_softmax_takes_nothing_but_the_scores(extra, words):
    from grader.course.spec import parse
    from grader.errors import SpecError
    spec = ('[[functions]]\nname = "softmax"\n[functions.convention]\n'
            'params = [{ name = "x", role = "scores" }]\nreturns = "weights"\nvector = true\n')
    assert parse(spec, "course.toml").functions[0].convention.vector
    with pytest.raises(SpecError, match=words):
        parse(spec + extra, "course.toml")


# A softmax over one vector, as seed 003's notebook writes it (max-subtracted, over the whole
# argument), and the same not normalised, and a non-answer.
VECTOR_SOFTMAX = "def softmax(items_in):\n    e_x = np.exp(items_in - np.max(items_in))\n    return e_x / e_x.sum()"


@pytest.mark.slow
def test_a_softmax_over_one_vector_is_inferred_as_a_helper_and_graded(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.course.spec import load_assignment
    from grader.grade import grade_path
    expect_slow()

    def notebook(name: str, source: str):
        return write_notebook(tmp_path / name, "import numpy as np", source, title="Softmax")
    inferred = infer(notebook("solution.ipynb", VECTOR_SOFTMAX), tmp_path / "course.toml", TEST_SETTINGS)
    assert inferred.functions["softmax"].table.get("vector") is True
    assert inferred.score[0] == inferred.score[1] > 0
    (tmp_path / "course.toml").write_text(inferred.text)
    assignment = load_assignment(str(tmp_path / "course.toml"))
    unnormalised = grade_path(notebook("unnormalised.ipynb", VECTOR_SOFTMAX.replace(" / e_x.sum()", "")),
                              assignment, TEST_SETTINGS)
    assert 0 < unnormalised.max_score and unnormalised.score < unnormalised.max_score
    uniform = grade_path(notebook("uniform.ipynb", "def softmax(items_in):\n"
                                                   "    return np.ones(len(items_in)) / len(items_in)"),
                         assignment, TEST_SETTINGS)
    assert uniform.score == 0


GLOBALS_SPEC = ('[[functions]]\nname = "self_attention"\n[functions.convention]\n'
                'params = [{ name = "X", role = "x" }]\nglobals = { Wq = "wq", Wk = "wk", Wv = "wv" }\n'
                'returns = ["output", "weights"]\n')


@pytest.mark.parametrize("extra, words", [
    ("", None),
    ('[functions.convention.class]\nmethod = "forward"\n', "globals: a class's weights go through its class table"),
])
def test_weights_as_notebook_globals_are_a_convention(extra, words):
    from grader.course.spec import parse
    from grader.errors import SpecError
    if words is None:
        conv = parse(GLOBALS_SPEC, "course.toml").functions[0].convention
        assert [(p.name, p.role) for p in conv.global_params] == [("Wq", "wq"), ("Wk", "wk"), ("Wv", "wv")]
        assert {"wq", "wk", "wv"} <= conv.roles
        return
    with pytest.raises(SpecError, match=words):
        parse(GLOBALS_SPEC + extra, "course.toml")
    with pytest.raises(SpecError, match="a global has the name of a parameter"):
        parse(GLOBALS_SPEC.replace('Wq = "wq"', 'X = "wq"'), "course.toml")


# A lab whose function reads its weights from the notebook's globals, written for this test.
GLOBALS_LAB = '''def self_attention(X):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T / np.sqrt(K.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ V, w'''


@pytest.mark.slow
def test_weights_read_from_globals_are_inferred_set_by_the_grader_and_their_changes_seen(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.course.spec import load_assignment
    from grader.grade import grade_path
    expect_slow()

    def notebook(name: str, source: str):
        return write_notebook(tmp_path / name, "import numpy as np\nrng = np.random.default_rng(1)\n"
                              "Wq, Wk, Wv = (rng.normal(size=(6, 6)) for _ in range(3))", source)
    inferred = infer(notebook("solution.ipynb", GLOBALS_LAB), tmp_path / "course.toml", TEST_SETTINGS)
    assert inferred.functions["self_attention"].table["globals"] == {"Wq": "wq", "Wk": "wk", "Wv": "wv"}
    assert inferred.score[0] == inferred.score[1] > 0
    (tmp_path / "course.toml").write_text(inferred.text)
    assignment = load_assignment(str(tmp_path / "course.toml"))
    unscaled = grade_path(notebook("unscaled.ipynb", GLOBALS_LAB.replace(" / np.sqrt(K.shape[1])", "")),
                          assignment, TEST_SETTINGS)
    assert any(c.diagnosis == "scores not scaled" for c in unscaled.checks), [c.diagnosis for c in unscaled.checks]
    in_place = grade_path(notebook("in_place.ipynb", GLOBALS_LAB.replace("    Q, K, V", "    Wq *= 2.0\n    Q, K, V")
                                   .replace("def self_attention(X):", "def self_attention(X):\n    global Wq")),
                          assignment, TEST_SETTINGS)
    unmodified = {c.name: c for c in in_place.checks}["self_attention.inputs_unmodified"]
    assert unmodified.status == "failed" and "global `Wq`" in unmodified.message


def test_a_batch_on_any_leading_axes_comes_on_two_and_is_read_back_on_one():
    from grader.calling import cases
    from grader.calling.returns import canonical_parts
    from grader.course.spec import parse
    from grader.kernel_side import wire
    spec = ('[[functions]]\nname = "attend"\n[functions.convention]\nparams = [{ name = "Q", role = "q" }, '
            '{ name = "K", role = "k" }, { name = "V", role = "v" }]\nreturns = ["output", "weights"]\n'
            'batch = "any"\n')
    conv = parse(spec, "course.toml").functions[0].convention
    assert conv.batched and conv.leading_axes
    case = cases.base_case(conv, 5)
    q, k, v = conv.call_arguments(case)
    b = len(case.elements)
    assert q.shape[:2] == ((2, b // 2) if b % 2 == 0 else (1, b)) and q.ndim == 4
    expected = conv.expected_parts(case)
    spread = [conv._spread(expected["output"]), conv._spread(expected["weights"])]
    parts = canonical_parts(conv, wire.encode_value(tuple(spread)))
    assert np.array_equal(parts.values["output"], expected["output"])
    assert np.array_equal(parts.values["weights"], expected["weights"])
