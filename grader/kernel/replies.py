"""What the kernel may send back, checked before the grader reads any of it.

The harness in the kernel builds these replies, but the notebook can replace the harness,
hook the grader's probe code or publish under the grader's MIME type, so a reply is only data
of a known shape: anything else is that submission's problem (a malformed reply), never the
grader's. Strings and lists are bounded; a value's arrays are decoded later (wire.decode_array).
"""
from __future__ import annotations

from typing import TypedDict

from grader.calling.class_table import MAX_READ_BACK, RAISING_STEPS
from grader.result import FunctionInfo
from grader.kernel_side.wire import MAX_DEPTH, MAX_ITEMS, VALUE_KINDS

MAX_TEXT = 500
MAX_GLOBALS = 50
MAX_DIMENSIONS = 64   # NumPy's own limit: an honest kernel never sends more


class BadReply(Exception):
    """A reply from the kernel that does not have the shape the harness gives it."""


def _text(value, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise BadReply(f"{what} is not text")
    return value[:limit]


def _texts(value, what: str) -> list[str]:
    if not isinstance(value, list) or len(value) > 10 * MAX_ITEMS:
        raise BadReply(f"{what} is not a list of names")
    return [_text(v, what, 200) for v in value]


class Description(TypedDict):
    """The harness's description of the graded functions and the watched modules imported."""
    functions: dict[str, FunctionInfo]
    imported: list[str]


def function_info(info) -> FunctionInfo:
    if not isinstance(info, dict) or not isinstance(info.get("found"), bool):
        raise BadReply("a function's description is malformed")
    if not info["found"]:
        return {"found": False}
    globals_ = info.get("globals", {})
    if not isinstance(globals_, dict) or len(globals_) > MAX_GLOBALS:
        raise BadReply("a function's globals are malformed")
    return {"found": True, "name": _text(info.get("name"), "a function's name", 200),
            "params": _texts(info.get("params", []), "a function's parameters"),
            "globals": {_text(k, "a global's name", 100): _text(v, "a global's value", 100)
                        for k, v in globals_.items()},
            "modules": _texts(info.get("modules", []), "a function's modules")}


def describe_reply(payload, expected: list[str]) -> Description:
    """The harness's description of the graded functions and the imported watched modules."""
    if not isinstance(payload, dict) or not isinstance(payload.get("functions"), dict):
        raise BadReply("the description of the functions is malformed")
    functions = {name: function_info(payload["functions"][name]) for name in expected if name in payload["functions"]}
    return {"functions": functions, "imported": _texts(payload.get("imported", []), "the imported modules")}


def encoded_value(value, depth: int = 0) -> dict:
    """A returned value as wire.encode_value encodes it: an array, None, another object, or a
    sequence or a dict of those (MAX_DEPTH levels at most)."""
    if not isinstance(value, dict) or value.get("kind") not in VALUE_KINDS:
        raise BadReply("a returned value is malformed")
    kind = value["kind"]
    clean = {"kind": kind, "type": _text(value.get("type", "?"), "a type name", 100)}
    if kind == "array":
        shape = value.get("shape")
        if not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS or not all(type(n) is int for n in shape):
            raise BadReply("a returned array's shape is malformed")
        clean.update(raw=_text(value.get("raw"), "an array", 2**31), dtype=_text(value.get("dtype"), "a dtype", 20),
                     shape=shape)
    elif kind == "other":
        clean["detail"] = _text(value.get("detail", ""), "a detail", 300)
    elif kind == "sequence":
        items, length = value.get("items"), value.get("length")
        if depth >= MAX_DEPTH or not isinstance(items, list) or len(items) > MAX_ITEMS or not isinstance(length, int):
            raise BadReply("a returned sequence is malformed")
        clean["items"] = [encoded_value(item, depth + 1) for item in items]
        clean["length"] = length
    elif kind == "mapping":
        keys, items, length = value.get("keys"), value.get("items"), value.get("length")
        if depth >= MAX_DEPTH or not isinstance(items, list) or not isinstance(keys, list) \
                or len(items) > MAX_ITEMS or len(keys) != len(items) or not isinstance(length, int):
            raise BadReply("a returned dict is malformed")
        clean["keys"] = [_text(k, "a dict's key", 200) for k in keys]
        clean["items"] = [encoded_value(item, depth + 1) for item in items]
        clean["length"] = length
    return clean


def call_reply(payload) -> dict:
    """The harness's report of one call: not found, raised, or returned a value."""
    if not isinstance(payload, dict) or not isinstance(payload.get("found"), bool):
        raise BadReply("the reply to a call is malformed")
    if not payload["found"]:
        return {"found": False}
    clean: dict[str, object] = {"found": True, "by_keyword": bool(payload.get("by_keyword"))}
    if "error" in payload:
        error = payload["error"]
        if not isinstance(error, dict):
            raise BadReply("a call's error is malformed")
        described: dict[str, object] = {"type": _text(error.get("type"), "an error's type", 100),
                                        "message": _text(error.get("message", ""), "an error's message"),
                                        "where": _texts(error.get("where", []), "an error's location")[:3]}
        if error.get("step") in RAISING_STEPS:   # which step of making an object raised
            described["step"] = error["step"]
        clean["error"] = described
        return clean
    clean["value"] = encoded_value(payload.get("value"))
    if "kept" in payload:   # the attributes a class's method keeps parts in, read after the call
        kept = payload["kept"]
        if not isinstance(kept, list) or len(kept) > MAX_READ_BACK:
            raise BadReply("the attributes read after a call are malformed")
        clean["kept"] = [encoded_value(item) for item in kept]
    if "inputs_after" in payload:
        after = payload["inputs_after"]
        if not isinstance(after, list) or len(after) > MAX_ITEMS:
            raise BadReply("the arguments after a call are malformed")
        # Each argument as wire.encode_given sends it: a dict of dicts is two levels deep.
        clean["inputs_after"] = [encoded_value(item) for item in after]
    return clean


def indexed_call_reply(payload, index: int) -> dict:
    """The reply to call `index` of a run of calls. The harness tags each reply with its call's
    index; one tagged otherwise (forged, repeated or out of order) is malformed, since the
    grader reads replies in the order the calls were made."""
    if not isinstance(payload, dict) or type(payload.get("index")) is not int:
        raise BadReply("a reply to a call carries no index")
    if payload["index"] != index:
        raise BadReply(f"the reply that arrived for call {index + 1} is tagged as another call's")
    return call_reply(payload.get("reply"))
