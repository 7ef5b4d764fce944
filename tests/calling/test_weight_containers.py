"""Weights held in nested dicts and in attribute objects, as picoGPT's `mha(x, c_attn, c_proj,
n_head)` takes its layers ({"w": ..., "b": ...}, passed on as `linear(x, **c_attn)`) and as a
course's `c_attn.w` reads them: the spellings a spec writes, what the grader passes, how it
travels to the kernel and back, and the smallest failing case's cell that builds it."""
from types import SimpleNamespace

import numpy as np
import pytest

from grader.calling import cases
from grader.calling.params import flattened
from grader.course.spec import parse
from grader.errors import SpecError
from grader.judging.checks import InputVariant, _unchanged
from grader.judging.explain import trivial
from grader.judging.smallest import _arguments, _holds_object
from grader.kernel import replies
from grader.kernel_side import wire
from grader.grading.prober import _argument_after

FUNCTION = '[[functions]]\nname = "mha"\n[functions.convention]\n'
X, HEADS = '{ name = "x", role = "x" }', '{ name = "n_head", role = "n_heads" }'
NESTED_DICT = '{ name = "attn", role = "dict", keys = { c_attn = { w = "wqkv", b = "bqkv" }, ' \
              'c_proj = { w = "wo", b = "bo" } } }'
OBJECTS = ('{ name = "c_attn", role = "object", attributes = { w = "wqkv", b = "bqkv" } }, '
           '{ name = "c_proj", role = "object", attributes = { w = "wo", b = "bo" } }')
NESTED_OBJECT = '{ name = "attn", role = "object", attributes = { c_attn = { w = "wqkv", b = "bqkv" }, ' \
                'c_proj = { w = "wo", b = "bo" } } }'
# A dict whose layers are objects: the inner table says what it is.
MIXED = '{ name = "attn", role = "dict", keys = { c_attn = { role = "object", attributes = { w = "wqkv", ' \
        'b = "bqkv" } }, c_proj = { role = "object", attributes = { w = "wo", b = "bo" } } } }'


def convention(*params: str, extra: str = ""):
    return parse(f'{FUNCTION}params = [{", ".join(params)}]\nreturns = "output"\n{extra}', "course.toml") \
        .functions[0].convention


def case_of(conv):
    return cases.random_cases(conv, 7)[0]


@pytest.mark.parametrize("params", [(X, NESTED_DICT, HEADS), (X, OBJECTS, HEADS), (X, NESTED_OBJECT, HEADS),
                                    (X, MIXED, HEADS)], ids=["nested dict", "objects", "nested object", "mixed"])
def test_the_roles_held_count_as_the_convention_s(params):
    conv = convention(*params)
    assert [p.role for p in conv.flat] == ["x", "wqkv", "bqkv", "wo", "bo", "n_heads"]
    assert conv.projection and conv.projection_bias and conv.biases and conv.packed and conv.heads == "many"


def test_a_nested_dict_is_passed_as_a_dict_of_dicts_holding_the_case_s_weights():
    conv = convention(X, NESTED_DICT, HEADS, extra='weights = "out_in"\n')
    case = case_of(conv)
    x, attn, n = conv.call_arguments(case)
    assert set(attn) == {"c_attn", "c_proj"} and set(attn["c_attn"]) == {"w", "b"} and n == len(case.heads)
    np.testing.assert_array_equal(attn["c_proj"]["w"], case.wo.T)   # the layout applies inside
    np.testing.assert_array_equal(attn["c_proj"]["b"], case.bo)
    np.testing.assert_array_equal(attn["c_attn"]["w"][:case.heads[0].wq.shape[1]], case.heads[0].wq.T)


def test_an_object_is_passed_as_a_simple_namespace_and_may_hold_dicts_or_objects():
    conv = convention(X, OBJECTS, HEADS)
    case = case_of(conv)
    _, c_attn, c_proj, _ = conv.call_arguments(case)
    assert type(c_attn) is SimpleNamespace and sorted(vars(c_attn)) == ["b", "w"]
    np.testing.assert_array_equal(c_proj.w, case.wo)
    _, attn, _ = convention(X, MIXED, HEADS).call_arguments(case)
    assert type(attn) is dict and type(attn["c_proj"]) is SimpleNamespace
    _, attn, _ = convention(X, NESTED_OBJECT, HEADS).call_arguments(case)
    np.testing.assert_array_equal(attn.c_proj.b, case.bo)


def test_a_class_attribute_may_be_an_object():
    conv = parse(f'{FUNCTION}params = [{X}]\nreturns = "output"\n[functions.convention.class]\nmethod = "forward"\n'
                 'construct = [{ name = "n_head", role = "n_heads" }]\n'
                 'attributes = { c_attn = { role = "object", attributes = { w = "wqkv", b = "bqkv" } }, '
                 'c_proj = { role = "object", attributes = { w = "wo", b = "bo" } } }\n',
                 "course.toml").functions[0].convention
    assert {p.role for p in conv.flat} == {"x", "n_heads", "wqkv", "bqkv", "wo", "bo"}


@pytest.mark.parametrize("params, words", [
    ((X, '{ name = "c_attn", role = "object" }'),
     'param c_attn: an object needs attributes = { <attribute> = "<role>", ... }'),
    ((X, '{ name = "c_attn", role = "object", attributes = {} }'), "param c_attn: an object needs attributes"),
    ((X, '{ name = "p", role = "dict", attributes = { w = "wqkv" } }'),
     'param p: a dict needs keys = { <key> = "<role>", ... }'),
    ((X, '{ name = "p", role = "dict", keys = { w = "wqkv" }, attributes = { w = "wqkv" } }'),
     'param p: attributes applies to role "object" only'),
    ((X, '{ name = "p", role = "object", attributes = { w = "wqkv" }, keys = { w = "wqkv" } }'),
     'param p: keys applies to role "dict" only'),
    ((X, '{ name = "p", role = "wqkv", attributes = { w = "wqkv" } }'), 'param p: attributes applies to role'),
    ((X, '{ name = "p", role = "dict", keys = { a = { b = { w = "wqkv" } } } }'),
     "param p key 'a': param p_a key 'b': param p_a_b: dicts and objects nest 2 deep at most (a dict of dicts)"),
    ((X, '{ name = "p", role = "object", attributes = { "w-1" = "wqkv" } }'),
     "param p: attribute 'w-1' is not a name to set on an object"),
    ((X, '{ name = "p", role = "object", attributes = { __class__ = "wqkv" } }'),
     "param p: attribute '__class__' is not a name to set on an object"),
    ((X, '{ name = "p", role = "object", attributes = { w = "wqkv", m = "mask" } }'),
     "a mask is its own param, not a key of a dict (or an object's attribute)"),
    ((X, '{ name = "p", role = "object", attributes = { w = { role = "wqkv" } } }'),
     "param p attribute 'w': an attribute holds a role as text (w = \"wq\"), a table of attributes, or "
     "{ role = \"dict\" or \"object\", ... }"),
    ((X, '{ name = "p", role = "dict", keys = { c = { role = "object", name = "q", attributes = { w = "wq" } } } }'),
     "param p key 'c': a key holds a role as text"),
    ((X, '{ name = "p", role = "dict", keys = { c = { role = ["dict"], keys = { w = "wq" } } } }'),
     "param p key 'c': a key holds a role as text"),
    ((X, '{ name = "attn", role = "dict", keys = { c_attn = { w = "wout" } } }'),
     "param attn key 'c_attn': param attn_c_attn key 'w': param attn_c_attn_w: unknown role 'wout'"),
    ((X, '{ name = "attn", role = "dict", keys = { c_attn = { w = "wqkv" }, c_proj = { w = "wqkv" } } }'),
     "role 'wqkv' is given twice (attn_c_attn_w and attn_c_proj_w)"),
    ((X, '{ name = "p", role = "object", attributes = { w = 3 } }'),
     "param p attribute 'w': param p_w: role must be the name of a role, not 3"),
])
def test_a_bad_spelling_is_one_line_naming_the_param(params, words):
    with pytest.raises(SpecError) as error:
        convention(*params)
    message = str(error.value)
    assert message.startswith("course.toml: function 1: mha: convention: ") and "\n" not in message
    assert words in message, message


def test_flattened_reaches_every_level():
    conv = convention(X, MIXED, HEADS)
    assert [p.name for p in flattened(conv.params)] == ["x", "attn_c_attn_w", "attn_c_attn_b", "attn_c_proj_w",
                                                         "attn_c_proj_b", "n_head"]


def test_objects_and_nested_dicts_travel_in_each_layout_and_deeper_ones_are_refused():
    matrix = np.arange(6.0).reshape(2, 3)
    sent = {"c_attn": SimpleNamespace(w=matrix, b=np.ones(3)), "c_proj": {"w": matrix}}
    received = wire.decode_argument(wire.encode_argument(sent, wire.Layout.FORTRAN))
    assert type(received["c_attn"]) is SimpleNamespace and received["c_attn"].w.flags.f_contiguous
    np.testing.assert_array_equal(received["c_proj"]["w"], matrix)
    three_deep = wire.encode_argument({"a": {"b": {"c": matrix}}})
    with pytest.raises(wire.BadValue, match="nested more than 2 levels"):
        wire.decode_argument(three_deep)
    for name in ("__class__", "not a name", "__dict__"):
        with pytest.raises(wire.BadValue, match="not a plain name"):
            wire.decode_argument({"object": [[name, wire.encode_argument(matrix)]]})


def test_an_object_comes_back_after_the_call_as_its_attributes_and_a_change_is_seen():
    """The harness reports an object it built as a mapping typed SimpleNamespace, two levels
    deep; the grader reads it back as an object and compares each array."""
    matrix = np.arange(6.0).reshape(2, 3)
    sent = {"c_attn": SimpleNamespace(w=matrix, b=np.ones(3))}
    in_kernel = wire.decode_argument(wire.encode_argument(sent))
    after = _argument_after(replies.encoded_value(wire.encode_given(in_kernel)))
    assert type(after["c_attn"]) is SimpleNamespace and _unchanged(sent, after)
    in_kernel["c_attn"].w = in_kernel["c_attn"].w.T   # `c_attn.w = c_attn.w.T` inside the function
    assert not _unchanged(sent, _argument_after(replies.encoded_value(wire.encode_given(in_kernel))))
    in_kernel["c_attn"].w = matrix.copy()
    in_kernel["c_attn"].w *= 2
    assert not _unchanged(sent, _argument_after(replies.encoded_value(wire.encode_given(in_kernel))))
    assert not _unchanged(SimpleNamespace(w=matrix), {"w": matrix})


def test_every_array_an_object_holds_is_converted_and_counts_as_an_argument():
    w = np.arange(6.0).reshape(3, 2)
    held = SimpleNamespace(w=w, inner={"b": np.ones(2)})
    converted = InputVariant.FLOAT32.convert(held)
    assert converted.w.dtype == np.float32 and converted.inner["b"].dtype == np.float32 and held.w.dtype == np.float64
    assert trivial(w.T, [held]) == "one of its own arguments, unchanged"


def test_the_smallest_case_cell_builds_the_object_and_runs():
    conv = convention(X, OBJECTS, HEADS)
    args = conv.call_arguments(case_of(conv))
    lines: list[str] = []
    call = _arguments(["x", "c_attn", "c_proj", "n_head"], args, False, lines)
    assert _holds_object(args) and not _holds_object([{"w": np.ones(1)}, [np.ones(1)]])
    assert any(line.startswith("c_attn = SimpleNamespace(w=np.array(") for line in lines), lines
    space: dict = {"np": np, "SimpleNamespace": SimpleNamespace, "mha": lambda *a: a}
    exec("\n".join(lines) + f"\nmade = mha({call})", space)
    np.testing.assert_allclose(space["made"][2].w, args[2].w, atol=1e-4)


# Worked solutions of this test's own writing, after the public description of picoGPT ("GPT in
# 60 Lines of NumPy", jaykmody.com, and github.com/jaymody/picoGPT's README): a layer's weights
# are {"w": ..., "b": ...}, applied by a helper that takes them as keywords (`linear(x,
# **c_attn)`), and a block's attention weights are the dict {"c_attn": ..., "c_proj": ...}; c_attn
# packs the query, key and value projections side by side, heads are contiguous column blocks,
# and the attention is causal.
NESTED_SOLUTION = '''def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)

def linear(x, w, b):
    return x @ w + b

def mha(x, attn, n_head):
    q, k, v = np.split(linear(x, **attn["c_attn"]), 3, axis=-1)
    n, d_head = x.shape[0], q.shape[-1] // n_head
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    heads = []
    for h in range(n_head):
        cols = slice(h * d_head, (h + 1) * d_head)
        scores = np.where(future, -1e10, q[:, cols] @ k[:, cols].T / np.sqrt(d_head))
        heads.append(softmax(scores) @ v[:, cols])
    return np.concatenate(heads, axis=-1) @ attn["c_proj"]["w"] + attn["c_proj"]["b"]'''
NESTED_RETURN = '    return np.concatenate(heads, axis=-1) @ attn["c_proj"]["w"] + attn["c_proj"]["b"]'
# The same layers as objects whose weights are attributes (`c_attn.w`), as a course's tiny
# Params class or a SimpleNamespace holds them; not causal. One layer is applied by a helper
# given the object, the other read in place.
OBJECT_SOLUTION = '''def dense(x, layer):
    return x @ layer.w + layer.b

def mha(x, c_attn, c_proj, n_head):
    qkv = dense(x, c_attn)
    d = qkv.shape[-1] // 3
    out = []
    for q, k, v in zip(*(np.split(qkv[:, i * d:(i + 1) * d], n_head, axis=-1) for i in range(3))):
        s = q @ k.T / np.sqrt(q.shape[-1])
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        out.append(e / e.sum(axis=-1, keepdims=True) @ v)
    return np.hstack(out) @ c_proj.w + c_proj.b'''
OBJECT_RETURN = "    return np.hstack(out) @ c_proj.w + c_proj.b"


def _inferred_and_graded(tmp_path, source: str):
    """The solution's spec inferred for mha, written beside it, and the solution graded with it
    at full marks in a real kernel. Returns the inferred table and the spec's path."""
    from grading_helpers import TEST_SETTINGS, expect_slow, graded_at_full_marks, write_notebook
    from grader.authoring.spec_tools.infer import infer
    expect_slow()
    solution = write_notebook(tmp_path / "solution.ipynb", "import numpy as np", source)
    inferred = infer(solution, tmp_path / "course.toml", TEST_SETTINGS, ["mha"])
    assert inferred.score[0] == inferred.score[1] > 0, inferred.score
    (tmp_path / "course.toml").write_text(inferred.text)
    graded_at_full_marks(solution, str(tmp_path / "course.toml"))
    return inferred.functions["mha"].table, str(tmp_path / "course.toml")


def _sibling(tmp_path, name: str, source: str, line: str, replacement: str):
    from grading_helpers import write_notebook
    assert line in source
    return write_notebook(tmp_path / name, "import numpy as np", source.replace(line, replacement))


@pytest.mark.slow
def test_a_nested_dict_is_inferred_from_its_keys_read_and_passed_on_and_a_missing_projection_is_named(tmp_path):
    from grading_helpers import planted_mistakes_named
    table, spec = _inferred_and_graded(tmp_path, NESTED_SOLUTION)
    assert table["params"] == [{"name": "x", "role": "x"},
                               {"name": "attn", "role": "dict", "keys": {"c_attn": {"w": "wqkv", "b": "bqkv"},
                                                                         "c_proj": {"w": "wo", "b": "bo"}}},
                               {"name": "n_head", "role": "n_heads"}]
    assert table.get("causal") is True
    assert 'keys = { c_attn = { w = "wqkv", b = "bqkv" }, c_proj = { w = "wo", b = "bo" } }' in open(spec).read()
    replacement = "    return np.concatenate(heads, axis=-1)"
    missing = _sibling(tmp_path, "projection_missing.ipynb", NESTED_SOLUTION, NESTED_RETURN, replacement)
    _, smallest = planted_mistakes_named(missing, spec, {"mha": (NESTED_RETURN, replacement,
                                                                 "output projection missing")})
    assert "attn = {'c_attn': {'w': np.array(" in smallest["mha"]["code"], smallest["mha"]["code"]


@pytest.mark.slow
def test_an_object_is_inferred_from_its_attributes_read_and_a_projection_from_the_wrong_side_is_named(tmp_path):
    from grading_helpers import grade, planted_mistakes_named
    table, spec = _inferred_and_graded(tmp_path, OBJECT_SOLUTION)
    assert table["params"] == [{"name": "x", "role": "x"},
                               {"name": "c_attn", "role": "object", "attributes": {"w": "wqkv", "b": "bqkv"}},
                               {"name": "c_proj", "role": "object", "attributes": {"w": "wo", "b": "bo"}},
                               {"name": "n_head", "role": "n_heads"}]
    replacement = "    return np.hstack(out) @ c_proj.w.T + c_proj.b"
    transposed = _sibling(tmp_path, "projection_transposed.ipynb", OBJECT_SOLUTION, OBJECT_RETURN, replacement)
    _, smallest = planted_mistakes_named(transposed, spec, {"mha": (OBJECT_RETURN, replacement,
                                                                    "output projection applied on the wrong side")})
    code = smallest["mha"]["code"]
    assert "from types import SimpleNamespace" in code and "c_proj = SimpleNamespace(w=np.array(" in code, code
    # Scaling an attribute's array in place (and undoing it in the result) still returns the
    # right output, but changes the caller's object: read back after the call, it is seen.
    scaled = _sibling(tmp_path, "scales_in_place.ipynb", OBJECT_SOLUTION, OBJECT_RETURN,
                      "    c_proj.w *= 2\n    return np.hstack(out) @ c_proj.w / 2 + c_proj.b")
    checks = {c.kind: c for c in grade(scaled, spec).checks}
    assert checks["random_shapes"].status == "passed"
    unmodified = checks["inputs_unmodified"]
    assert unmodified.status == "failed" and "changed its argument `c_proj` in place" in unmodified.message


def _signature(source: str, name: str):
    import nbformat
    from grader.authoring.spec_tools.signatures import notebook_functions
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    return next(s for s in notebook_functions(nb) if s.name == name)


def _first_table(source: str, name: str) -> dict:
    from grader.authoring.spec_tools.candidates import candidates
    found = candidates(_signature(source, name))
    assert found.found, found.why_none
    return found.found[0].table


def test_what_a_block_passes_on_as_keywords_is_read_through_every_function_it_reaches():
    """picoGPT's block passes its attention dict on as keywords (`mha(x, **attn, n_head=...)`),
    whose layers are passed on again (`linear(x, **c_attn)`): the block's `attn` is a dict of
    dicts, with the keys each function reads, and `n_head` given by name is not one of them."""
    source = NESTED_SOLUTION.replace("def mha(x, attn, n_head):", "def mha_inner(x, attn, n_head):") + '''

def mha(x, c_attn, c_proj, n_head):
    return linear(np.hstack([x]), **c_proj) if n_head < 0 else linear(x, **c_attn)

def block(x, attn, n_head):
    return x + mha(x, **attn, n_head=n_head)'''
    held = _signature(source, "block").params[1].held
    assert held.kind == "dict" and held.keys == ("c_attn", "c_proj")
    assert [(k, inner.kind, inner.keys) for k, inner in held.items] == [("c_attn", "dict", ("w", "b")),
                                                                       ("c_proj", "dict", ("w", "b"))]


@pytest.mark.parametrize("body, table", [
    ("return x @ c_attn.w.T + c_attn.b.reshape(1, -1) + c_attn.w.shape[0]",
     {"name": "c_attn", "role": "object", "attributes": {"w": "wqkv", "b": "bqkv"}}),
    ('return x @ c_attn.get("w") + c_attn["b"]',
     {"name": "c_attn", "role": "dict", "keys": {"w": "wqkv", "b": "bqkv"}}),
    ("return x @ attn.c_attn.w + attn.c_attn.b",
     {"name": "attn", "role": "object", "attributes": {"c_attn": {"w": "wqkv", "b": "bqkv"}}}),
    ('return x @ attn["c_attn"].w + attn["c_attn"].b',
     {"name": "attn", "role": "dict",
      "keys": {"c_attn": {"role": "object", "attributes": {"w": "wqkv", "b": "bqkv"}}}}),
])
def test_keys_and_attributes_read_make_a_dict_or_an_object_and_an_array_s_own_attributes_are_not_weights(body, table):
    source = f"def f(x, {table['name']}):\n    {body}"
    assert _first_table(source, "f")["params"][1] == table


def test_an_object_passed_to_a_helper_is_read_as_the_helper_reads_it():
    signature = _signature(OBJECT_SOLUTION, "mha")
    assert [(p.name, p.held and (p.held.kind, p.held.keys)) for p in signature.params] == [
        ("x", None), ("c_attn", ("object", ("w", "b"))), ("c_proj", ("object", ("w", "b"))), ("n_head", None)]


def test_a_dict_nested_deeper_than_a_spec_takes_is_refused_with_the_reason():
    from grader.authoring.spec_tools.candidates import candidates
    found = candidates(_signature('def f(x, p):\n    return x @ p["a"]["b"]["c_attn"]["w"]', "f"))
    assert not found.found and "nest 2 deep at most" in found.why_none, found.why_none


def test_a_weights_name_read_by_no_key_or_attribute_says_so():
    from grader.authoring.spec_tools.candidates import candidates
    found = candidates(_signature("def f(x, c_attn):\n    return x @ c_attn.T", "f"))
    assert "`c_attn` would hold weights (a dict or an object), but the function reads no key or attribute of it " \
           "by name" in found.why_none
