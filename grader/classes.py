"""Class-based conventions: a course whose attention is a class (`MultiHeadAttention(d_model,
num_heads)`, its weights set through named attributes or an init method, then `forward(x)`).

A class convention is an ordinary convention (grader/conventions.py) whose `params` are the
method's, plus a `class` table saying how the object is made: its constructor's arguments,
the attributes or the init method the weights go through, and the method to call. Each call
makes a new object from the grader's own values, so a class that draws random weights in
`__init__` is graded on the weights the grader sets over them. This module is the one home of
that table: reading it, the values an object is given for a canonical case, the request the
kernel's harness builds the object from, and the words for what happened at each step.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from . import wire
from .errors import SpecError

if TYPE_CHECKING:
    from .conventions import Convention, Param

CLASS_KEYS = ("method", "construct", "attributes", "init")
INIT_KEYS = ("method", "params")
# Roles only a class's constructor takes: sizes a module is built for. They hold no array, so
# they are not roles of the attention computation (Convention.flat).
SIZE_ROLES = {"d_model": "the model width D (the tokens' features)",
              "d_k": "the per-head dimension d_k of the queries and keys"}
# What the weights may go through, and what the constructor may take besides its sizes.
WEIGHT_ROLES = ("wq", "wk", "wv", "bq", "bk", "bv", "wqkv", "bqkv", "wo", "bo", "dict")
CONSTRUCT_ROLES = (*SIZE_ROLES, "n_heads", "scale", "causal", *WEIGHT_ROLES)
# Where each value goes, in the order the grader sends and the harness reports them.
STAGES = ("construct", "attribute", "init")
# The steps of a call that may raise, as the harness names them (anything else: the method).
RAISING_STEPS = ("construct", "attributes", "init", "method")


@dataclass(frozen=True)
class ClassCall:
    method: str                        # the method graded, called with the convention's params
    construct: tuple[Param, ...] = ()   # the constructor's arguments, in order
    attributes: tuple[Param, ...] = ()  # each attribute set on the new object (Param.name: the attribute)
    init: str | None = None            # a method the weights are given to before the call
    init_params: tuple[Param, ...] = ()

    def slots(self) -> list[tuple[str, Param]]:
        """Every value the object is given, with where it goes (STAGES), in the wire's order."""
        return ([("construct", p) for p in self.construct] + [("attribute", p) for p in self.attributes]
                + [("init", p) for p in self.init_params])

    @property
    def flat(self) -> tuple[Param, ...]:
        """The attention roles the object is given (a dict's keys included), for the convention."""
        return tuple(inner for _, p in self.slots() if p.role not in SIZE_ROLES
                     for inner in ([i for _, i in p.keys] if p.role == "dict" else [p]))


def _fail(where: str, message: str):
    raise SpecError(f"{where}: {message}")


def _method_name(value, key: str, where: str) -> str:
    # `__call__` is how a module is called as `layer(x)`; no other dunder is a course's method.
    if not isinstance(value, str) or not value.isidentifier() or (value.startswith("__") and value != "__call__"):
        _fail(where, f"{key} must be the name of a method, not {value!r}"[:200])
    return value


def _class_param(raw, allowed: tuple, where: str) -> Param:
    """A constructor's, an attribute's or an init method's param: a convention's param with
    one of the roles `allowed`."""
    # conventions.py imports this module to read a convention's class table: import it late.
    from .conventions import ROLES, Param, _param
    role = raw.get("role") if isinstance(raw, dict) else None
    if role in SIZE_ROLES and role in allowed:
        name = raw.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            _fail(where, f"param name {name!r} is not a Python parameter name"[:200])
        extra = sorted(set(raw) - {"name", "role"})
        if extra:
            _fail(where, f"param {name}: unknown key {extra[0]!r} for role {role!r}")
        return Param(name, role)
    if isinstance(role, str) and role not in allowed and (role in ROLES or role in SIZE_ROLES):
        _fail(where, f"param {raw.get('name')}: role {role!r} is not taken here (roles: {', '.join(allowed)})"[:300])
    return _param(raw, where)


def _params(raw, allowed: tuple, where: str) -> tuple[Param, ...]:
    if not isinstance(raw, list):
        _fail(where, "params must list the parameters in order, each { name = ..., role = ... }")
    params = tuple(_class_param(p, allowed, where) for p in raw)
    if len({p.name for p in params}) != len(params):
        _fail(where, "two params have the same name")
    return params


def _attributes(raw, where: str) -> tuple[Param, ...]:
    if not isinstance(raw, dict) or not raw:
        _fail(where, "attributes must be a table { <attribute> = \"<role>\", ... }")
    found = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            _fail(where, f"attribute {name!r} is not a name to set on an object"[:200])
        table = {"role": value} if isinstance(value, str) else value
        if not isinstance(table, dict) or "name" in table:
            _fail(where, f"attribute {name}: give a role, or a table {{ role = ..., heads = ... }}")
        found.append(_class_param({**table, "name": name}, WEIGHT_ROLES, f"{where} attribute {name}"))
    return tuple(found)


def parse_class(raw, where: str) -> ClassCall:
    """The `class` table of a convention; a one-line SpecError naming `where` and the field."""
    where = f"{where}: class"
    if not isinstance(raw, dict):
        _fail(where, "must be a table { method = ..., construct = [...], attributes = {...} or init = {...} }")
    unknown = sorted(set(raw) - set(CLASS_KEYS))
    if unknown:
        _fail(where, f"unknown key {unknown[0]!r} (known: {', '.join(CLASS_KEYS)})")
    method = _method_name(raw.get("method"), "method", where)
    construct = _params(raw.get("construct", []), CONSTRUCT_ROLES, f"{where} construct")
    attributes = _attributes(raw["attributes"], where) if "attributes" in raw else ()
    init, init_params = None, ()
    if "init" in raw:
        table = raw["init"]
        if not isinstance(table, dict) or sorted(set(table) - set(INIT_KEYS)):
            _fail(where, "init must be a table { method = \"init_weights\", params = [...] }")
        init = _method_name(table.get("method"), "init.method", where)
        init_params = _params(table.get("params"), WEIGHT_ROLES, f"{where} init")
        if not init_params:
            _fail(where, "init: params must name what the init method is given")
        if init == method:
            _fail(where, f"init: {init} is the method graded; the weights go to another method")
    if method in {p.name for p in attributes}:
        _fail(where, f"attribute {method} would replace the method graded")
    call = ClassCall(method, construct, attributes, init, init_params)
    inputs = [p for p in call.flat if p.role not in CONSTRUCT_ROLES]
    if inputs:
        _fail(where, f"{inputs[0].name}: role {inputs[0].role!r} is the method's to take, not the object's")
    if not any(p.role in WEIGHT_ROLES for _, p in call.slots()):
        _fail(where, "give the weights through attributes = {...}, init = {...} or the constructor")
    return call


def with_class(conv: Convention, raw: dict, where: str) -> Convention:
    """The convention with its `class` table, if it has one: the object's roles join the
    method's, so that everything derived from the roles (heads, projection, biases, the
    mistakes that can occur) counts them."""
    if "class" not in raw:
        return conv
    call = parse_class(raw["class"], where)
    return replace(conv, class_call=call, flat=conv.flat + call.flat)


# The values an object is given, for one canonical case.

def _size(role: str, case) -> int:
    return int(case.d) if role == "d_model" else int(case.heads[0].wq.shape[1])


def object_values(conv: Convention, case) -> list:
    """What the object is given for `case`, one value per slot: sizes from the case, every
    other role exactly as the convention would pass it to a function."""
    params = [p for _, p in conv.class_call.slots()]
    arrays = iter(replace(conv, params=tuple(p for p in params if p.role not in SIZE_ROLES)).call_arguments(case))
    return [_size(p.role, case) if p.role in SIZE_ROLES else next(arrays) for p in params]


def sent_arguments(probe, conv: Convention) -> list:
    """Every value of a call as the grader sends it, in the probe's dtype: the method's
    arguments, then (for a class) what the object is given, slot by slot."""
    args = probe.arguments(conv)
    if conv.class_call is None:
        return args
    return args + [probe.variant.convert(v) for v in object_values(conv, probe.case)]


def request(conv: Convention, sent: list, layout) -> dict:
    """The part of a call's request that carries its values: `args`, and for a class the
    `object` the harness builds from them (names from the spec, values from the grader)."""
    encoded = [wire.encode_argument(a, layout) for a in sent]
    call = conv.class_call
    if call is None:
        return {"args": encoded}
    method, given = encoded[:len(conv.params)], encoded[len(conv.params):]
    slots = call.slots()
    of = {stage: [(p.name, value) for (where, p), value in zip(slots, given) if where == stage] for stage in STAGES}
    return {"args": method, "object": {
        "method": call.method,
        "construct": {"params": [n for n, _ in of["construct"]], "args": [v for _, v in of["construct"]]},
        "attributes": [[n, v] for n, v in of["attribute"]],
        "init": {"method": call.init, "params": [n for n, _ in of["init"]], "args": [v for _, v in of["init"]]}
        if call.init else None}}


# Words for what happened.

def kind(conv: Convention) -> str:
    """What the student writes for this convention: a class or a function."""
    return "function" if conv.class_call is None else "class"


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<{' x '.join(map(str, value.shape))} array>"
    if isinstance(value, list):
        return f"<list of {len(value)}>"
    if isinstance(value, dict):
        return f"<dict of {', '.join(map(str, value))}>"
    return repr(value)


def signature(name: str, conv: Convention, params) -> str:
    """How a graded function or class is called, for a listing: `f(x, mask)`, or
    `MultiHeadAttention(d_model, num_heads).forward(x, mask)`."""
    call = conv.class_call
    if call is None:
        return f"{name}({', '.join(params)})"
    made = f"{name}({', '.join(p.name for p in call.construct)})"
    return f"{made}({', '.join(params)})" if call.method == "__call__" else f"{made}.{call.method}({', '.join(params)})"


def constructor_call(class_name: str, conv: Convention, sent: list) -> str:
    """`MultiHeadAttention(d_model=6, num_heads=2)`, from what the grader sent."""
    call = conv.class_call
    given = sent[len(conv.params):len(conv.params) + len(call.construct)]
    return f"{class_name}({', '.join(f'{p.name}={_shown(v)}' for p, v in zip(call.construct, given))})"


def raised(class_name: str, conv: Convention, step: str, sent: list) -> str:
    """The start of a failed call's message, "<what> raised": which step of making the object
    or calling its method raised. `step` comes from the kernel, so it only picks the words."""
    call = conv.class_call
    if call is None:
        return "the call raised"
    if step == "construct":
        return f"constructing {constructor_call(class_name, conv, sent)} raised"
    if step == "attributes":
        return f"setting {', '.join(f'self.{p.name}' for p in call.attributes)} on {class_name} raised"
    if step == "init" and call.init:
        return f"{class_name}.{call.init}({', '.join(p.name for p in call.init_params)}) raised"
    return f"{class_name}.{call.method}({', '.join(conv.param_names)}) raised"


def changed_messages(conv: Convention) -> list[str]:
    """For the inputs_unmodified check, what to say when a value the object was given comes
    back changed after the method ran, one message per slot (the harness reads attributes
    back from the object, and the constructor's and init method's arguments as passed)."""
    call = conv.class_call
    if call is None:
        return []
    method = f"`{call.method}`"
    words = {"construct": lambda p: f"Making the object and calling {method} changed the constructor's argument "
                                    f"`{p.name}` in place; copy what you are given before changing it.",
             "attribute": lambda p: f"Calling {method} changed the weights in `self.{p.name}`; a forward pass must "
                                    f"leave them as they were set (work on a copy, e.g. `w = self.{p.name} * 2`, "
                                    f"not `self.{p.name} *= 2`).",
             "init": lambda p: f"Making the object and calling {method} changed the argument `{p.name}` of "
                               f"`{call.init}` in place; copy what you are given (e.g. `self.W = W.copy()`) "
                               "before changing it."}
    return [words[stage](p) for stage, p in call.slots()]
