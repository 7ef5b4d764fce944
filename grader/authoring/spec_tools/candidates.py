"""Candidate calling conventions for one function, from its signature: each a convention table
in the spec's own TOML form, simplest first. The roles come from the parameters' names
(roles.py); the layouts, scaling, causal masking, mask forms and head forms are tried each
way. Nothing here calls the function: probing (probe.py) decides which candidates fit.

Each choice is a dimension with its options in order of preference, the first being the
convention's default; a candidate's rank is how many dimensions it takes away from their
first option, so the plainest reading of a function is tried, and kept, first.
"""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass

from grader.calling.conventions import MASK_SHAPES, parse_convention
from grader.calling.params import (BLOCK_NORM_ROLES, CONTAINERS, FFN_ROLES, HEAD_FORM_ROLES, MASK_ROLES, NORM_ROLES,
                                   ROLES, SCORE_ROLES)
from grader.errors import SpecError
from grader.reference.masks import FORMS
from grader.calling.class_table import CONSTRUCT_ROLES
from grader.calling.class_table import WEIGHT_ROLES as OBJECT_WEIGHT_ROLES
from grader.authoring.spec_tools.roles import Guess, guesses, key_role, normalised
from grader.authoring.spec_tools.held import Held
from grader.authoring.spec_tools.signatures import ClassSignature, Parameter, Signature

# More candidates than this for one function are not tried (the simplest are kept).
MAX_CANDIDATES = 400
# What leaving a mask parameter to its default adds to a candidate's rank: more than spelling
# the mask in any form and shape, so that a function whose masks fit is graded with them (a spec
# that leaves them out never grades them).
MASK_LEFT_OUT = 8
WEIGHT_ROLES = {"wq", "wk", "wv", "wqkv", "wo"}
OMITTED = None   # a parameter with a default, left out of the call


@dataclass(frozen=True)
class Candidate:
    table: dict              # the convention as its TOML table, `returns` still to be read off a call
    choices: tuple           # (dimension, option) pairs: what sets it apart from its neighbours
    rank: int


@dataclass
class Candidates:
    found: list[Candidate]
    why_none: str = ""       # when none: why, in a clause


def _param_options(param: Parameter) -> list:
    """(option, table, rank) triples for one parameter: each role its name proposes, then, for
    one with a default, leaving it out (after any reading of a mask: MASK_LEFT_OUT)."""
    options: list[tuple[str, dict | None]] = []
    for guess in guesses(param.name):
        if guess.role == "dict" and param.held is not None and param.held.kind == "tuple":
            # Unpacked in order: a tuple param only when every item's name says its role.
            items = [key_role(param.name, key) for key in param.held.keys]
            if all(items):
                options.append((f"{param.name}: a tuple", {"name": param.name, "role": "tuple", "items": items}))
            continue
        if guess.role == "dict":
            held = _held_entries(param.name, param.held) if param.held is not None else {}
            if param.held is not None and held:
                kind = param.held.kind
                options.append((f"{param.name}: a{'n' * (kind == 'object')} {kind}",
                                {"name": param.name, "role": kind, CONTAINERS[kind]: held}))
            continue
        options.append((f"{param.name}: {guess.role}", _param_table(param.name, guess)))
    ranked = [(label, table, rank) for rank, (label, table) in enumerate(options)]
    if param.has_default:
        a_mask = any(table is not None and table["role"] in MASK_ROLES for _, table in options)
        ranked.append((f"{param.name}: left to its default", OMITTED, MASK_LEFT_OUT if a_mask else len(options)))
    return ranked


def _held_entries(name: str, held: Held, within: str = "") -> dict:
    """A dict's keys or an object's attributes as a spec writes them: each one's role, from the
    holder's name and its own (roles.key_role), or, for one that holds weights in turn, its own
    table (saying what it is where a dict holds an object, or an object a dict); those no role
    fits are left out."""
    entries: dict = {}
    for key, inner in held.items:
        if inner is not None:
            nested = _held_entries(key, inner, within=name)
            if nested:
                entries[key] = nested if inner.kind == held.kind else \
                    {"role": inner.kind, CONTAINERS[inner.kind]: nested}
        elif (role := key_role(name, key, within)) is not None:
            entries[key] = role
    return entries


def table_roles(table: dict) -> set[str]:
    """The roles a param's table gives: its own, or every role a dict or an object holds."""
    role = table["role"]
    if role not in CONTAINERS:
        return {role}
    if role == "tuple":
        return set(table["items"])
    return set().union(*(_held_roles(value, role) for value in table[CONTAINERS[role]].values()))


def _held_roles(value, holder: str) -> set[str]:
    """The roles one key or attribute holds: a role, or a table of the holder's kind (or one
    saying its own, with a role)."""
    if isinstance(value, str):
        return {value}
    return table_roles(value if "role" in value else {"role": holder, CONTAINERS[holder]: value})


def _param_table(name: str, guess: Guess) -> dict:
    table: dict[str, str | int] = {"name": name, "role": guess.role}
    if guess.head is not None:
        table["head"] = guess.head
    return table


def _dimensions(params: list[dict], plural: bool) -> list[tuple[str, list]]:
    """The convention-wide choices that apply to these parameters, each option list default first."""
    roles = set().union(*map(table_roles, params))
    dims: list[tuple[str, list]] = []
    helper = "scores" in roles
    additive = bool(roles & set(SCORE_ROLES))
    if roles & set(FFN_ROLES):
        dims.append(("activation", ["relu", "gelu_tanh", "gelu"]))
    if roles & {*NORM_ROLES, *FFN_ROLES} and not roles & {"wq", "wk", "wv", "wqkv", "q", "k", "v", "scores"}:
        return dims + [("batch", [False, True])]   # a block's part on its own: tokens as rows, nothing to scale
    if roles & set(BLOCK_NORM_ROLES):
        dims.append(("block", ["post_ln", "pre_ln"]))
    if roles & (WEIGHT_ROLES | {"score_wq", "score_wk", "score_w"}):
        dims.append(("weights", ["in_out", "out_in"]))
    if helper:
        dims.append(("axis", [-1, 0]))
        dims.append(("vector", [False, True]))   # a softmax over one vector (a row of scores)
    elif additive:
        # Never scaled, tokens as rows, one head: one query given as a vector is its choice.
        dims.append(("vector", [False, True]))
    else:
        dims.append(("tokens", ["rows", "columns"]))
        dims.append(("scaled", [True, False]))
        if "causal" not in roles:
            dims.append(("causal", [False, True]))
    heads_given = any(p["role"] in HEAD_FORM_ROLES and "head" not in p for p in params)
    if heads_given and plural:
        dims.append(("heads", ["per_head", "axis", "fused"]))
    elif heads_given and "n_heads" not in roles and roles & {"q", "k", "v"}:
        dims.append(("heads", ["fused", "axis"]))   # Q, K, V with the heads already split off
    single = not plural and "n_heads" not in roles and not any("head" in p for p in params)
    if "x" in roles and single:
        dims.append(("square", [False, True]))
    if not helper and roles & {"x", "q", "k", "v"}:
        dims.append(("batch", [False, True]))
    # Class-based conventions would join here as a dimension of their own (`class`).
    masks = [p for p in params if p["role"] in MASK_ROLES]
    if masks:
        # Masks a function takes together are spelled alike (an attention mask and a key-padding
        # mask both True = ignore, say): one form for them all, since a form each would multiply
        # the candidates past those tried.
        dims.append((f"form:{', '.join(p['name'] for p in masks)}", list(FORMS)))
    for p in masks:
        # Only with a batch: a shape other than the default (candidates() drops the rest).
        dims.append((f"shape:{p['name']}", [None, *MASK_SHAPES[(p["role"], True)][1:]]))
    return dims


def _placeholder_returns(roles: set) -> str | list:
    """A return to parse the candidate with before its real returns are read off a call."""
    if "d_output" in roles:
        return ["dq", "dk", "dv"]
    if "scores" in roles:
        return "weights"
    if roles & {"v", "kv", "wv", "wqkv", *NORM_ROLES, *FFN_ROLES}:
        return "output"
    if roles & {"q", "wq"} and roles & {"k", "wk"}:
        return "scores"
    return ["q"]


def _apply(params: list[dict], dims: list[tuple[str, list]], picks: tuple) -> dict:
    table: dict = {"params": copy.deepcopy(params)}
    for (dim, options), pick in zip(dims, picks):
        if dim.startswith(("form:", "shape:")):
            key, names = dim.split(":", 1)
            if pick is not None:
                for p in table["params"]:
                    if p["name"] in names.split(", "):
                        p[key] = pick
        elif dim == "heads":
            if pick != "fused":
                for p in table["params"]:
                    if p["role"] in HEAD_FORM_ROLES and "head" not in p:
                        p["heads"] = pick
        elif pick != options[0] or dim == "block":   # a block's order has no default
            table[dim] = pick
    return table


# A method a module's weights are given to (init_weights, set_params, load_weights, ...).
INIT_METHOD = re.compile(r"(init|set|load|assign)(weights|params|parameters)")


def _first_role(name: str, allowed) -> str | None:
    return next((g.role for g in guesses(name) if g.role in allowed and g.role != "dict" and g.head is None), None)


# A constructor parameter named as an axis (`Softmax(dim=-1)`, `LayerNorm(axis=-1)`): the axis
# a layer computes over, never a size, when its default says so.
AXIS_NAMES = ("dim", "axis", "softmaxdim", "softmaxaxis")


def an_axis(param: Parameter) -> bool:
    """Whether a constructor's parameter is an axis left to its default: named as one, with a
    default that is no width (an integer below 2, -1 say, or None). A `dim=512` is a width."""
    default = param.default
    if not param.has_default or default is None or normalised(param.name) not in AXIS_NAMES:
        return False
    return default == "None" or bool(re.fullmatch(r"-?\d+", default)) and int(default) < 2


def class_table(cls: ClassSignature) -> tuple[dict | None, str]:
    """How to make the object, as a convention's `class` table, from the class's source: its
    constructor's parameters by their names, and where the weights go, in order of preference:
    the constructor itself, an init method, or the attributes __init__ sets, else nowhere (an
    object that holds none). (None, why) when a constructor's parameter has no role."""
    construct = []
    for p in cls.construct:
        if an_axis(p):
            continue   # left to its default: taken for the model's width, it would be an axis out of bounds
        role = _first_role(p.name, CONSTRUCT_ROLES)
        if role is None:
            if p.has_default:
                continue   # left to its default (the harness then calls by keyword)
            return None, (f"its constructor's parameter `{p.name}` has a name no role is known by (a `construct` "
                          f"role: {', '.join(CONSTRUCT_ROLES)}): give it one by hand in the class table's `construct`")
        construct.append({"name": p.name, "role": role})
    table: dict = {"method": cls.method.name}
    if construct:
        table["construct"] = construct
    if any(c["role"] in OBJECT_WEIGHT_ROLES for c in construct):
        return table, ""
    for method in cls.methods:
        roles = [_first_role(p.name, OBJECT_WEIGHT_ROLES) for p in method.params]
        if INIT_METHOD.fullmatch(normalised(method.name)) and all(roles) and len(set(roles)) == len(roles):
            table["init"] = {"method": method.name,
                             "params": [{"name": p.name, "role": r} for p, r in zip(method.params, roles)]}
            return table, ""
    attributes: dict = {}
    for name in cls.attributes:
        role = _first_role(name, OBJECT_WEIGHT_ROLES)
        if role is not None and role not in attributes.values():
            attributes[name] = role
    if attributes:
        table["attributes"] = attributes
    # With no weights anywhere, the object holds none (a ScaledDotProductAttention() given Q,
    # K and V): the candidates decide, and a method that projects tokens is refused there.
    return table, ""


def _object_params(table: dict | None) -> list[dict]:
    """The roles a class table gives the object, as params (what the convention-wide choices
    depend on: a weight layout, for one)."""
    if table is None:
        return []
    return [*table.get("construct", []), *table.get("init", {}).get("params", []),
            *({"name": n, "role": r} for n, r in table.get("attributes", {}).items())]


def _weight_globals(signature: Signature) -> dict[str, str]:
    """The notebook globals a function reads whose names propose a weight role (a lab's `Wq`),
    each with that role: the weights its parameters do not bring."""
    found: dict[str, str] = {}
    for name in signature.globals_read:
        role = _first_role(name, OBJECT_WEIGHT_ROLES)
        if role is not None and role != "dict" and role not in found.values():
            found[name] = role
    return found


def parseable(table: dict, name: str) -> str | None:
    """None when the candidate is a convention the grader can read; else why not, with the
    reading it refused (each parameter's role), in the spec's words."""
    try:
        parse_convention(table, name, name)
    except SpecError as exc:
        reading = ", ".join(f"`{p['name']}` as {p['role']}" for p in table["params"])
        return f"read as {reading}, {str(exc).removeprefix(f'{name}: ')}"
    return None


def _no_role(param: Parameter) -> str:
    """Why a parameter has no role to propose, in the words of the spec's `params`: what to
    write by hand."""
    if guesses(param.name) and param.keys:
        return (f"its parameter `{param.name}` is read as a dict or an object, but none of the keys it reads "
                f"({', '.join(param.keys[:6])}) is named like a role ({', '.join(ROLES)}): write its "
                f"`keys = {{ KEY = ROLE, ... }}` by hand")
    if guesses(param.name):
        return (f"its parameter `{param.name}` would hold weights (a dict or an object), but the function reads "
                f"no key or attribute of it by name (`{param.name}[\"W_q\"]`, `{param.name}.w`, or `**{param.name}` "
                "passed on to a notebook function): write its `keys = { KEY = ROLE, ... }` (or `attributes = "
                "{ NAME = ROLE, ... }`) by hand")
    return (f"its parameter `{param.name}` has a name no role is known by (roles: {', '.join(ROLES)}): give it "
            f"one by hand, `{{ name = \"{param.name}\", role = ... }}`, or a default to leave it out")


def candidates(signature: Signature, object_table: dict | None = None) -> Candidates:
    """`signature`'s candidate conventions; for a class's method, each with the class table
    `object_table` saying how its object is made."""
    per_param = [_param_options(p) for p in signature.params]
    for param, options in zip(signature.params, per_param):
        if not options:
            return Candidates([], _no_role(param))
    found: list[Candidate] = []
    refusals: list[str] = []
    given_globals = _weight_globals(signature) if object_table is None else {}
    for combination in itertools.product(*per_param):
        role_rank = sum(rank for _, _, rank in combination)
        params = [table for _, table, _ in combination if table is not OMITTED]
        if not params:
            continue
        chosen = tuple(("role", label) for label, _, _ in combination)
        plural = any(g.plural for p in signature.params for g in guesses(p.name)[:1])
        held = [*_object_params(object_table), *({"name": n, "role": r} for n, r in given_globals.items())]
        dims = _dimensions(params + held, plural)
        roles = set().union(*map(table_roles, params))
        for picks in itertools.product(*(enumerate(options) for _, options in dims)):
            table = _apply(params, dims, tuple(option for _, option in picks))
            if not table.get("batch") and any("shape" in p for p in table["params"]):
                continue   # without a batch a mask has one shape, the default
            table["returns"] = _placeholder_returns(roles | {p["role"] for p in held})
            if object_table is not None:
                table["class"] = object_table
            if given_globals:
                table["globals"] = dict(given_globals)
            refusal = parseable(table, signature.name)
            if refusal:
                refusals.append(refusal)
                continue
            choices = chosen + tuple((dim, option) for (dim, _), (_, option) in zip(dims, picks))
            # A softmax over one vector fits wherever a matrix reading over axis 0 does (a
            # vector's only axis): the matrix reading says more, so it is tried first.
            narrower = 1 if table.get("vector") else 0
            found.append(Candidate(table, choices, role_rank + sum(i for i, _ in picks) + narrower))
    found.sort(key=lambda c: c.rank)
    if not found:
        return Candidates([], "no reading of its parameters is a convention the spec can write: "
                              + (refusals[0] if refusals else "none was found"))
    return Candidates(found[:MAX_CANDIDATES])
