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
from grader.grade import _argument_after

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
