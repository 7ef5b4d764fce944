"""The wire format, without a kernel: arguments arrive in every layout and dtype as they were
sent, returned values come back as they were, and what must not be read is refused."""
import base64
import json
import os
import pickle
import sys
import types
from importlib import resources

import numpy as np
import pytest

from grader.kernel import session as kernel
from grader.kernel import replies as payloads
from grader.kernel_side import wire
from grader.kernel_side.wire import BadValue, Layout

DTYPES = [np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]
CONTIGUOUS = {Layout.C: (True, False), Layout.FORTRAN: (False, True), Layout.STRIDED: (False, False)}


def _sent(raw: bytes, dtype: str, shape: list) -> dict:
    """A returned array as a kernel could send it, whatever its bytes, dtype and shape."""
    return {"kind": "array", "type": "ndarray", "raw": base64.b64encode(raw).decode(), "dtype": dtype, "shape": shape}


@pytest.mark.parametrize("layout", list(Layout))
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_argument_arrives_with_its_values_dtype_and_layout(layout, dtype):
    matrix = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    encoded = wire.encode_argument(matrix, layout)
    assert json.loads(json.dumps(encoded)) == encoded   # the request reaches the kernel as JSON
    received = wire.decode_argument(encoded)
    assert received.dtype == matrix.dtype and received.shape == matrix.shape
    np.testing.assert_array_equal(received, matrix)
    assert (received.flags.c_contiguous, received.flags.f_contiguous) == CONTIGUOUS[layout]


def test_layouts_are_those_of_a_matrix_and_ints_stay_ints():
    for layout in Layout:
        for array in (np.arange(4.0), np.ones((2, 3, 4))):
            received = wire.decode_argument(wire.encode_argument(array, layout))
            assert received.flags.c_contiguous
            np.testing.assert_array_equal(received, array)
    for number in (3, np.int64(3)):
        received = wire.decode_argument(wire.encode_argument(number, Layout.FORTRAN))
        assert received == 3 and type(received) is int


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_returned_array_comes_back_as_it_was(dtype):
    value = (np.arange(6).reshape(2, 3) % 4).astype(dtype)
    for returned in (value, np.asfortranarray(value), np.repeat(value, 2, axis=1)[:, ::2]):
        encoded = payloads.encoded_value(wire.encode_value(returned))
        decoded = wire.decode_array(encoded)
        assert type(decoded) is np.ndarray and decoded.dtype == value.dtype
        np.testing.assert_array_equal(decoded, value)


def test_a_returned_subclass_or_scalar_comes_back_as_a_plain_array_with_its_type_name():
    class Agreeable(np.ndarray):
        def __eq__(self, other):
            return True

    encoded = wire.encode_value(np.zeros((2, 2)).view(Agreeable))
    assert encoded["type"] == "Agreeable" and type(wire.decode_array(encoded)) is np.ndarray
    encoded = wire.encode_value(2.5)
    assert encoded["kind"] == "array" and wire.decode_array(encoded) == 2.5


def test_sequences_nest_two_levels_and_are_cut_at_max_items():
    encoded = wire.encode_value((np.ones(2), [np.zeros((2, 2))] * 3, None))
    assert payloads.encoded_value(encoded) == encoded
    assert (encoded["kind"], encoded["type"], encoded["length"]) == ("sequence", "tuple", 3)
    heads = encoded["items"][1]
    assert heads["kind"] == "sequence" and [i["kind"] for i in heads["items"]] == ["array"] * 3
    assert encoded["items"][2] == {"kind": "none", "type": "NoneType"}
    long = wire.encode_value(list(range(100)))
    assert long["length"] == 100 and len(long["items"]) == wire.MAX_ITEMS
    deep = wire.encode_value([[[1.0, 2.0]]])
    innermost = deep["items"][0]["items"][0]
    assert innermost["kind"] == "array" and wire.decode_array(innermost).tolist() == [1.0, 2.0]
    assert payloads.encoded_value(deep) == deep


def test_what_is_not_numeric_is_named_not_sent():
    class Explosive:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("no arrays for you")

    assert wire.encode_value(Explosive()) == {"kind": "other", "type": "Explosive",
                                              "detail": "RuntimeError: no arrays for you"}
    for value in ("text", {"a", "b"}, np.array([object()])):
        encoded = wire.encode_value(value)
        assert encoded["kind"] == "other" and "raw" not in encoded
    with pytest.raises(BadValue, match="complex numbers"):
        wire.decode_array(wire.encode_value(np.array([1j])))
    text = np.array(["text"])
    with pytest.raises(BadValue, match="not a real numeric array"):
        wire.decode_array(_sent(text.tobytes(), text.dtype.str, [1]))


def test_oversized_arrays_are_refused():
    for largest in (np.zeros(wire.MAX_ARRAY_BYTES // 8), np.zeros(wire.MAX_ARRAY_BYTES, dtype=np.uint8)):
        assert wire.decode_array(wire.encode_value(largest)).shape == largest.shape
        assert wire.decode_argument(wire.encode_argument(largest)).shape == largest.shape
    for too_large in (np.zeros(wire.MAX_ARRAY_BYTES // 8 + 1), np.zeros(wire.MAX_ARRAY_BYTES + 1, dtype=np.uint8)):
        with pytest.raises(BadValue, match="larger than 4 MiB"):
            wire.decode_array(wire.encode_value(too_large))
        with pytest.raises(BadValue, match="larger than 4 MiB"):
            wire.decode_argument(wire.encode_argument(too_large))


def test_a_shape_declaring_a_huge_array_is_refused_without_allocating_it():
    for shape in ([10**12], [2**40, 2**40], [-2, -1]):
        with pytest.raises(BadValue, match="not a real numeric array of that shape"):
            wire.decode_array(_sent(np.zeros(2).tobytes(), "<f8", shape))


def test_bytes_that_are_not_what_the_shape_holds_are_refused():
    for shape in ([3], [1], [2, 2], []):
        with pytest.raises(BadValue, match="not a real numeric array of that shape"):
            wire.decode_array(_sent(np.zeros(2).tobytes(), "<f8", shape))
    assert wire.decode_array(_sent(np.ones(2).tobytes(), "<f8", [2, 1])).shape == (2, 1)
    assert wire.decode_array(_sent(np.float64(3).tobytes(), "<f8", [])).shape == ()


_UNPICKLED = []


def _record_unpickling():
    _UNPICKLED.append(True)


class _Payload:
    def __reduce__(self):
        return _record_unpickling, ()


def test_pickles_and_objects_are_never_read():
    payload = pickle.dumps(_Payload())
    objects = np.array([_Payload()], dtype=object)
    attempts = [_sent(payload, "|O", [1]), _sent(objects.tobytes(), objects.dtype.str, [1]),
                _sent(payload, f"|V{len(payload)}", [1]), _sent(payload, "|S1", [len(payload)]),
                _sent(payload, "[('a', '|O')]", [1]), _sent(payload, "(2,)f8", [1]), _sent(payload, "u1,O", [1])]
    for encoded in attempts:
        with pytest.raises(BadValue):
            wire.decode_array(encoded)
        with pytest.raises(BadValue):
            wire.decode_argument(encoded)
    assert not _UNPICKLED


@pytest.mark.parametrize("raw", [None, 3, "not base64!"])
def test_unreadable_data_is_a_bad_value(raw):
    with pytest.raises(BadValue, match="unreadable array data"):
        wire.decode_array({"raw": raw, "dtype": "<f8", "shape": [1]})
    for dtype in (None, "not a dtype", 3.5, "f" * 20):
        with pytest.raises(BadValue, match="unreadable array data"):
            wire.decode_array({"raw": "", "dtype": dtype, "shape": [0]})
    with pytest.raises(BadValue, match="unreadable array data"):
        wire.decode_array({})


def _kernel_copy(monkeypatch) -> types.ModuleType:
    """The wire module as the kernel's startup file makes it: from its source, under its kernel name."""
    module = types.ModuleType(wire.KERNEL_MODULE)
    exec(compile(resources.files("grader.kernel_side").joinpath("wire.py").read_text(), "<grader-wire>", "exec"),
         module.__dict__)
    monkeypatch.setitem(sys.modules, wire.KERNEL_MODULE, module)
    return module


def test_the_harness_in_the_kernel_uses_the_wire_module_loaded_before_it(monkeypatch):
    kernel_wire = _kernel_copy(monkeypatch)
    harness = types.ModuleType(kernel.HARNESS_MODULE)
    exec(compile(kernel.harness_source(), "<grader-harness>", "exec"), harness.__dict__)
    assert harness.wire is kernel_wire


def test_a_run_of_calls_in_the_harness_shares_decoding_but_no_array_and_keeps_nothing_after(monkeypatch, tmp_path):
    """harness.call_many, as the kernel runs it: a function that changes its arguments in place
    does not change what the next call gets, and the arrays decoded for the run are dropped
    when it ends."""
    _kernel_copy(monkeypatch)
    harness = types.ModuleType(kernel.HARNESS_MODULE)
    exec(compile(kernel.harness_source(), "<grader-harness>", "exec"), harness.__dict__)
    received = []

    def doubles_in_place(X, Y):
        received.append((X.copy(), X is Y))
        X *= 2
        return X

    harness.get_ipython = lambda: types.SimpleNamespace(user_ns={"doubles_in_place": doubles_in_place})
    replies = tmp_path / "replies"
    harness._replies["fd"] = os.open(replies, os.O_WRONLY | os.O_CREAT)
    try:
        matrix = np.arange(6.0).reshape(2, 3)
        call = {"names": ["doubles_in_place"], "params": ["X", "Y"], "args": wire.encode_arguments([matrix, matrix])}
        harness.call_many([call, call, call])
    finally:
        os.close(harness._replies["fd"])
    assert [same for _, same in received] == [True, True, True]   # one object twice, as sent
    for got, _ in received:
        np.testing.assert_array_equal(got, matrix)
    frames, _, _ = wire.unframe(replies.read_bytes())
    values = [json.loads(f)["reply"]["value"] for f in frames]
    assert [payloads.encoded_value(v)["shape"] for v in values] == [[2, 3]] * 3
    np.testing.assert_array_equal(wire.decode_array(values[2]), 2 * matrix)
    assert harness._calls["arrays"] is None


def test_a_notebook_that_replaces_numpys_functions_still_gets_and_sends_arrays(monkeypatch):
    kernel_wire = _kernel_copy(monkeypatch)
    matrix = np.arange(6.0).reshape(2, 3)
    request = wire.encode_argument(matrix, Layout.STRIDED)
    with monkeypatch.context() as notebook:
        for name in ("save", "load", "array", "asarray", "zeros", "asfortranarray"):
            notebook.setattr(np, name, lambda *a, **k: None)
        received = kernel_wire.decode_argument(request)
        reply = kernel_wire.encode_value((received, [received.T]))
    assert reply["items"][1]["items"][0]["kind"] == "array"
    np.testing.assert_array_equal(wire.decode_array(reply["items"][0]), matrix)
    np.testing.assert_array_equal(wire.decode_array(reply["items"][1]["items"][0]), matrix.T)


def test_each_probe_variant_arrives_as_its_label_says():
    from grader.calling import cases
    from grader.judging.checks import InputVariant, Probe
    from grader.calling.conventions import CONVENTIONS

    conv = CONVENTIONS["rows_single"]
    arrives = {InputVariant.PLAIN: ("float64", (True, False)), InputVariant.FORTRAN: ("float64", (False, True)),
               InputVariant.STRIDED: ("float64", (False, False)), InputVariant.FLOAT32: ("float32", (True, False)),
               InputVariant.INT: ("int64", (True, False)), InputVariant.FLOATS: ("float64", (True, False))}
    assert set(arrives) == set(InputVariant)
    for variant, (dtype, contiguous) in arrives.items():
        whole = variant in (InputVariant.INT, InputVariant.FLOATS)   # the integer case, as integers or floats
        case = cases.integer_case(conv, 5) if whole else cases.base_case(conv, 5)
        probe = Probe(case, variant)
        assert probe.label == case.label + variant.words and (variant is InputVariant.PLAIN) == (variant.words == "")
        sent = probe.arguments(conv)
        assert np.dtype(dtype) in {a.dtype for a in sent}   # the integer case has whole tokens only
        for array in sent:
            received = wire.decode_argument(wire.encode_argument(array, variant.layout))
            assert received.dtype == array.dtype and received.dtype in (np.float64, np.dtype(dtype))
            assert (received.flags.c_contiguous, received.flags.f_contiguous) == contiguous
            np.testing.assert_allclose(received, array)
    not_whole = InputVariant.INT.convert(np.array([0.5, 1.0]))
    assert not_whole.dtype == np.float64   # an integer dtype would change the case


def test_a_dict_comes_back_as_its_own_items_with_string_keys_only():
    class Lying(dict):
        def items(self):
            return [("output", np.zeros(2))]

        def keys(self):
            return ["output"]

    value = Lying(output=np.ones((2, 2)), weights=[np.eye(2)])
    value[3] = np.ones(1)   # not a name a course can give: left out
    encoded = wire.encode_value(value)
    assert encoded["kind"] == "mapping" and encoded["keys"] == ["output", "weights"] and encoded["length"] == 2
    assert wire.decode_array(encoded["items"][0]).tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert encoded["items"][1]["kind"] == "sequence"
    assert payloads.encoded_value(encoded) == encoded
    for forged in ({**encoded, "keys": ["output"]}, {**encoded, "keys": [1, 2]}, {**encoded, "items": "x"}):
        with pytest.raises(payloads.BadReply):
            payloads.encoded_value(forged)
    nested = wire.encode_value([[{"a": np.ones(1)}]])   # deeper than MAX_DEPTH: not sent as a dict
    assert nested["items"][0]["items"][0]["kind"] != "mapping"


def test_lists_dicts_and_flags_arrive_as_such_in_the_layout_asked():
    matrix = np.arange(6.0).reshape(2, 3)
    sent = [True, 3, [matrix, matrix.T], {"w": matrix, "b": np.ones(3)}]
    received = [wire.decode_argument(wire.encode_argument(a, wire.Layout.FORTRAN)) for a in sent]
    assert received[0] is True and received[1] == 3 and type(received[1]) is int
    assert all(m.flags.f_contiguous and not m.flags.c_contiguous for m in received[2])
    np.testing.assert_array_equal(received[2][1], matrix.T)
    assert sorted(received[3]) == ["b", "w"] and received[3]["w"].flags.f_contiguous
    np.testing.assert_array_equal(received[3]["w"], matrix)


def test_an_argument_arrives_writable_and_a_malformed_one_is_a_bad_value():
    """Arguments travel as raw bytes with their dtype and shape: the student's function gets an
    array it may change in place, and nothing but a real numeric array of exactly those bytes
    is made from one."""
    matrix = np.arange(6.0).reshape(2, 3)
    received = wire.decode_argument(wire.encode_argument(matrix))
    received[0, 0] = 7.0
    assert received.flags.writeable and matrix[0, 0] == 0.0
    good = wire.encode_argument(matrix)
    for forged in ({"dtype": "|O"}, {"dtype": "<c16"}, {"dtype": "<U2"}, {"dtype": "no dtype"},
                   {"shape": [2, 4]}, {"shape": [-2, -3]}, {"shape": "2x3"}, {"raw": "not base64!"}):
        with pytest.raises(BadValue):
            wire.decode_argument({**good, **forged})


def test_a_run_decodes_each_array_once_and_every_call_gets_its_own_copy(monkeypatch):
    """In a run of calls (harness.call_many) an array sent again is decoded once: each call
    still gets a fresh, writable array in its layout, which its changes leave the next call's
    untouched; the same bytes in another dtype or shape are another array; and a malformed one
    is still a bad value."""
    decoded = []
    real = wire._raw_array
    monkeypatch.setattr(wire, "_raw_array", lambda encoded: decoded.append(encoded) or real(encoded))
    matrix = np.arange(6.0).reshape(2, 3)
    call = [wire.encode_argument(matrix, Layout.FORTRAN), wire.encode_argument(matrix)]
    run: dict = {}
    first = wire.decode_arguments(call, run)
    first[0][0, 0] = first[1][0, 0] = 7.0
    second = wire.decode_arguments(call, run)
    assert len(decoded) == 1
    assert first[0] is not second[0] and first[1] is not second[1] and second[0] is not second[1]
    assert second[0].flags.f_contiguous and not second[0].flags.c_contiguous and second[1].flags.c_contiguous
    assert all(a.flags.writeable for a in second)
    np.testing.assert_array_equal(second[0], matrix)
    np.testing.assert_array_equal(second[1], matrix)
    assert not any(kept.flags.writeable for kept in run.values())   # only copies are handed out
    reshaped = wire.decode_argument(wire.encode_argument(matrix.reshape(3, 2)), run=run)
    as_ints = wire.decode_argument({**wire.encode_argument(matrix), "dtype": "<i8"}, run=run)
    assert reshaped.shape == (3, 2) and as_ints.dtype == np.int64 and len(decoded) == 3
    for forged in ({"dtype": "|O"}, {"shape": [2, 4]}, {"shape": "[2, 3]"}, {"raw": "not base64!"}, {"raw": 3}):
        with pytest.raises(BadValue):
            wire.decode_argument({**wire.encode_argument(matrix), **forged}, run=run)


@pytest.mark.parametrize("shape", [None, "3", [3.0], ["3"], [True], [1] * 65, {"0": 3}])
def test_a_returned_arrays_shape_that_is_not_a_list_of_ints_is_a_malformed_reply(shape):
    encoded = wire.encode_value(np.zeros(3))
    assert payloads.encoded_value(encoded)["shape"] == [3]
    with pytest.raises(payloads.BadReply, match="shape is malformed"):
        payloads.encoded_value({**encoded, "shape": shape})
