"""The `class` table of a class-based convention, as a spec writes it: the constructor's
arguments, the attributes or the init method the weights go through, and the method to call.
Parsed here, apart from the calling (grader/calling/classes.py), because a convention is
parsed with its class table and the calling needs the parsed convention.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.calling.params import BLOCK_ROLES, ROLES, SCORE_ROLES, Param, flattened, parse_param
from grader.errors import SpecError

CLASS_KEYS = ("method", "construct", "attributes", "init", "before", "kept")
INIT_KEYS = ("method", "params")
# Roles only a class's constructor takes: sizes a module is built for. They hold no array, so
# they are not roles of the attention computation (Convention.flat).
SIZE_ROLES = {"d_model": "the model width D (the tokens' features)",
              "d_k": "the per-head dimension d_k of the queries and keys"}
# What the weights may go through, and what the constructor may take besides its sizes.
WEIGHT_ROLES = ("wq", "wk", "wv", "bq", "bk", "bv", "wqkv", "bqkv", "wo", "bo", "dict", "object", *SCORE_ROLES,
                *BLOCK_ROLES)
CONSTRUCT_ROLES = (*SIZE_ROLES, "n_heads", "scale", "causal", *WEIGHT_ROLES)
# Where each value goes, in the order the grader sends and the harness reports them.
STAGES = ("construct", "attribute", "init", "before")
# The steps of a call that may raise, as the harness names them (anything else: the method).
RAISING_STEPS = ("construct", "attributes", "init", "before", "method")
# More attributes than this are not read back after a call: what the kernel sends stays bounded.
MAX_KEPT = 8
# What `spec infer` reads back after a probe to learn which attribute keeps which part: a class's
# own, or its layers' (a backward pass's weights' gradients on four projections, and the rest
# those layers keep), more than a spec keeps; a reply with more is malformed.
MAX_READ_BACK = 32


@dataclass(frozen=True)
class ClassCall:
    method: str                        # the method graded, called with the convention's params
    construct: tuple[Param, ...] = ()   # the constructor's arguments, in order
    attributes: tuple[Param, ...] = ()  # each attribute set on the new object (Param.name: the attribute)
    init: str | None = None            # a method the weights are given to before the call
    init_params: tuple[Param, ...] = ()
    # A method called on the object just before the one graded, with inputs of its own: a
    # backward pass is graded after its object's forward ran on the case (`forward(Q, K, V)`,
    # then `backward(d_output)`), reading what the forward kept on the object.
    before: str | None = None
    before_params: tuple[Param, ...] = ()

    def slots(self) -> list[tuple[str, Param]]:
        """Every value the object is given, with where it goes (STAGES), in the wire's order."""
        return ([("construct", p) for p in self.construct] + [("attribute", p) for p in self.attributes]
                + [("init", p) for p in self.init_params] + [("before", p) for p in self.before_params])

    @property
    def flat(self) -> tuple[Param, ...]:
        """The attention roles the object is given (a dict's keys included), for the convention."""
        return flattened(p for _, p in self.slots() if p.role not in SIZE_ROLES)

    @property
    def made_flat(self) -> tuple[Param, ...]:
        """The roles the object is made with (its constructor, attributes and init method)."""
        return flattened(p for where, p in self.slots() if where != "before" and p.role not in SIZE_ROLES)


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
    return parse_param(raw, where)


def _params(raw, allowed: tuple, where: str) -> tuple[Param, ...]:
    if not isinstance(raw, list):
        _fail(where, "params must list the parameters in order, each { name = ..., role = ... }")
    params = tuple(_class_param(p, allowed, where) for p in raw)
    if len({p.name for p in params}) != len(params):
        _fail(where, "two params have the same name")
    return params


def _attributes(raw, where: str, what: str = "attribute", set_on: str = "an object") -> tuple[Param, ...]:
    """Weights given by name: attributes set on an object, or a function's notebook globals."""
    if not isinstance(raw, dict) or not raw:
        _fail(where, f"{what}s must be a table {{ <{what}> = \"<role>\", ... }}")
    found = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            _fail(where, f"{what} {name!r} is not a name to set on {set_on}"[:200])
        table = {"role": value} if isinstance(value, str) else value
        if not isinstance(table, dict) or "name" in table:
            _fail(where, f"{what} {name}: give a role, or a table {{ role = ..., heads = ... }}")
        found.append(_class_param({**table, "name": name}, WEIGHT_ROLES, f"{where} {what} {name}"))
    return tuple(found)


def parse_globals(raw, where: str) -> tuple[Param, ...]:
    """A function's `globals` table: the notebook globals it reads its weights from, each with
    its role (global = role), which the grader sets, for each call, in the function's own copy
    of the notebook's namespace."""
    return _attributes(raw, f"{where}: globals", "global", "the notebook")


def parse_kept(raw, where: str, parts: tuple[str, ...], call: ClassCall) -> tuple[tuple[str, str], ...]:
    """A class table's `kept`: the attributes its method stores parts on (`self.attention_scores
    = weights`), each with the part it holds, as written (attribute = part), read back after
    the call as if returned."""
    where = f"{where}: class: kept"
    if not isinstance(raw, dict) or not raw or len(raw) > MAX_KEPT:
        _fail(where, f"must be a table {{ <attribute> = \"<part>\", ... }} of 1 to {MAX_KEPT} attributes")
    set_on = {p.name for p in call.attributes}
    found = []
    for name, part in raw.items():
        # `q_proj.dLdW`: an attribute of an object the object holds (a course's layer, whose
        # backward leaves its weights' gradients on itself), two levels at most.
        path = name.split(".")
        if len(path) > 2 or not all(a.isidentifier() and not a.startswith("__") for a in path):
            _fail(where, f"{name!r} is not an attribute to read off an object (or off an object it holds: "
                         "layer.attribute)"[:200])
        if name == call.method or name in set_on:
            what = "the method graded" if name == call.method else "an attribute the weights are set through"
            _fail(where, f"{name} is {what}, not a part the method keeps")
        if part not in parts:
            _fail(where, f"{name}: {part!r} is not a part (parts: {', '.join(parts)})"[:200])
        found.append((name, part))
    if len({part for _, part in found}) != len(found):
        _fail(where, "a part is kept in two attributes")
    return tuple(found)


def _before(raw: dict, method: str, init: str | None, where: str) -> tuple[str, tuple[Param, ...]]:
    """A class table's `before`: the method run on the object just before the one graded (a
    forward before its backward), and the inputs it takes, as a function's params are written."""
    table = raw["before"]
    if not isinstance(table, dict) or sorted(set(table) - set(INIT_KEYS)):
        _fail(where, "before must be a table { method = \"forward\", params = [...] }")
    name = _method_name(table.get("method"), "before.method", where)
    if name in (method, init):
        _fail(where, f"before: {name} is {'the method graded' if name == method else 'the init method'}; "
                     "before names the method run just before the one graded")
    params = _params(table.get("params"), tuple(r for r in ROLES if r not in SIZE_ROLES), f"{where} before")
    if not params:
        _fail(where, "before: params must name what the method is given")
    return name, params


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
    init: str | None = None
    init_params: tuple[Param, ...] = ()
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
    before, before_params = _before(raw, method, init, where) if "before" in raw else (None, ())
    call = ClassCall(method, construct, attributes, init, init_params, before, before_params)
    inputs = [p for p in call.made_flat if p.role not in CONSTRUCT_ROLES]
    if inputs:
        _fail(where, f"{inputs[0].name}: role {inputs[0].role!r} is the method's to take, not the object's")
    # An object given no weights is fine where its method takes Q, K and V (or the scores): a
    # ScaledDotProductAttention() holds none. Where the method projects tokens, the
    # convention's own check says which weight is missing.
    return call
