"""Class-based conventions: a course whose attention is a class (`MultiHeadAttention(d_model,
num_heads)`, its weights set through named attributes or an init method, then `forward(x)`).

A class convention is an ordinary convention (grader/calling/conventions.py) whose `params` are the
method's, plus a `class` table saying how the object is made: its constructor's arguments,
the attributes or the init method the weights go through, and the method to call. Each call
makes a new object from the grader's own values, so a class that draws random weights in
`__init__` is graded on the weights the grader sets over them. The table is read in
grader/calling/class_table.py; this module is the home of the values an object is given for a
canonical case, the request the kernel's harness builds the object from, and the words for
what happened at each step.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from grader.calling.class_table import SIZE_ROLES, STAGES
from grader.calling.conventions import Convention
from grader.calling.params import MASK_ROLES
from grader.kernel_side import wire


# The values an object is given, for one canonical case.

def _size(role: str, case) -> int:
    return int(case.d) if role == "d_model" else int(case.heads[0].wq.shape[1])


def object_values(conv: Convention, case) -> list:
    """What the object is given for `case`, one value per slot: sizes from the case, every
    other role exactly as the convention would pass it to a function."""
    params = [p for _, p in conv.object_call.slots()]
    arrays = iter(replace(conv, params=tuple(p for p in params if p.role not in SIZE_ROLES)).call_arguments(case))
    return [_size(p.role, case) if p.role in SIZE_ROLES else next(arrays) for p in params]


def global_values(conv: Convention, case) -> list:
    """What a function's notebook globals are set to for `case`, one value per global,
    exactly as the convention would pass each role to a function."""
    return replace(conv, params=conv.global_params).call_arguments(case)


def sent_arguments(probe, conv: Convention) -> list:
    """Every value of a call as the grader sends it, in the probe's dtype: the method's
    arguments, then what the object is given, slot by slot (a class), or the notebook globals
    the function reads (a convention with globals)."""
    args = probe.arguments(conv)
    if conv.global_params:
        return args + [probe.variant.convert(v) for v in global_values(conv, probe.case)]
    if conv.class_call is None:
        return args
    # A mask keeps its course form's dtype, as a method's own mask argument does (Probe.arguments).
    return args + [v if p.role in MASK_ROLES else probe.variant.convert(v)
                   for (_, p), v in zip(conv.object_call.slots(), object_values(conv, probe.case))]


def request(conv: Convention, sent: list, layout) -> dict:
    """The part of a call's request that carries its values: `args`, and for a class the
    `object` the harness builds from them (names from the spec, values from the grader)."""
    given_to_method = len(conv.params)
    method = wire.encode_arguments(sent[:given_to_method], layout)
    if conv.global_params:
        given = [wire.encode_argument(a, layout) for a in sent[given_to_method:]]
        return {"args": method, "globals": [[p.name, v] for p, v in zip(conv.global_params, given)]}
    call = conv.class_call
    if call is None:
        return {"args": method}
    slots = call.slots()
    made = len(slots) - len(call.before_params)
    # The method run before the graded one is called as a function is: one array passed as
    # three of its arguments (`forward(x, x, x)`) is sent once, as the same object.
    given = [wire.encode_argument(a, layout) for a in sent[given_to_method:given_to_method + made]] + \
        wire.encode_arguments(sent[given_to_method + made:], layout)
    of = {stage: [(p.name, value) for (where, p), value in zip(slots, given) if where == stage] for stage in STAGES}
    return {"args": method, "object": {
        "method": call.method,
        "construct": {"params": [n for n, _ in of["construct"]], "args": [v for _, v in of["construct"]]},
        "attributes": [[n, v] for n, v in of["attribute"]],
        "init": {"method": call.init, "params": [n for n, _ in of["init"]], "args": [v for _, v in of["init"]]}
        if call.init else None,
        "before": {"method": call.before, "params": [n for n, _ in of["before"]],
                   "args": [v for _, v in of["before"]]} if call.before else None,
        "kept": [attribute for attribute, _ in conv.kept]}}


# Words for what happened.

def kind(conv: Convention) -> str:
    """What the student writes for this convention: a class or a function."""
    return "function" if conv.class_call is None else "class"


def _shown(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<{' x '.join(map(str, value.shape))} array>"
    if isinstance(value, (list, tuple)):
        return f"<{type(value).__name__} of {len(value)}>"
    if isinstance(value, dict):
        return f"<dict of {', '.join(map(str, value))}>"
    if isinstance(value, SimpleNamespace):
        return f"<SimpleNamespace of {', '.join(vars(value))}>"
    return repr(value)


def signature(name: str, conv: Convention, params) -> str:
    """How a graded function or class is called, for a listing: `f(x, mask)`, or
    `MultiHeadAttention(d_model, num_heads).forward(x, mask)`."""
    call = conv.class_call
    if call is None:
        return f"{name}({', '.join(params)})"
    made = f"{name}({', '.join(p.name for p in call.construct)})"
    if call.before:
        made += f".{call.before}({', '.join(p.name for p in call.before_params)}), then "
        return f"{made}.{call.method}({', '.join(params)})"
    return f"{made}({', '.join(params)})" if call.method == "__call__" else f"{made}.{call.method}({', '.join(params)})"


def constructor_call(class_name: str, conv: Convention, sent: list) -> str:
    """`MultiHeadAttention(d_model=6, num_heads=2)`, from what the grader sent."""
    call = conv.object_call
    given = sent[len(conv.params):len(conv.params) + len(call.construct)]
    return f"{class_name}({', '.join(f'{p.name}={_shown(v)}' for p, v in zip(call.construct, given))})"


def made_as(class_name: str, conv: Convention, sent: list) -> str:
    """How the object of a call was made, from what the grader sent: `Softmax(dim=6)`, then
    `init_weights(Wq, ...)`, or with `self.W_q, ...` set."""
    call = conv.object_call
    words = constructor_call(class_name, conv, sent)
    if call.attributes:
        words += f" with {', '.join(f'self.{p.name}' for p in call.attributes)} set"
    if call.init:
        words += f", then {call.init}({', '.join(p.name for p in call.init_params)})"
    if call.before:
        words += f", then {call.before}({', '.join(p.name for p in call.before_params)}) called"
    return words


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
    if step == "before" and call.before:
        return f"{class_name}.{call.before}({', '.join(p.name for p in call.before_params)}) raised, before " \
               f"{call.method} was called"
    return f"{class_name}.{call.method}({', '.join(conv.param_names)}) raised"


def changed_messages(conv: Convention) -> list[str]:
    """For the inputs_unmodified check, what to say when a value the object was given comes
    back changed after the method ran, one message per slot (the harness reads attributes
    back from the object, and the constructor's and init method's arguments as passed)."""
    if conv.global_params:
        return [f"The function changed the notebook global `{p.name}` in place; work on a copy (e.g. "
                f"`w = {p.name} * 2`, not `{p.name} *= 2`)." for p in conv.global_params]
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
                               "before changing it.",
             "before": lambda p: f"Calling `{call.before}` and then {method} changed the argument `{p.name}` of "
                                 f"`{call.before}` in place; work on a copy (e.g. `q = {p.name} * 2`, not "
                                 f"`{p.name} *= 2`), or keep a copy when {method} needs the value."}
    return [words[stage](p) for stage, p in call.slots()]
