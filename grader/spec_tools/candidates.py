"""Candidate calling conventions for one function, from its signature: each a convention table
in the spec's own TOML form, simplest first. The roles come from the parameters' names
(roles.py); the layouts, scaling, causal masking, mask forms and head forms are tried each
way. Nothing here calls the function: probing (probe.py) decides which candidates fit.

Each choice is a dimension with its options in order of preference, the first being the
convention's default; a candidate's rank is how many dimensions it takes away from their
first option, so the plainest reading of a function is tried, and kept, first.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..conventions import HEAD_FORM_ROLES, parse_convention
from ..errors import SpecError
from ..reference.masks import FORMS
from .roles import Guess, guesses
from .signatures import Parameter, Signature

# More candidates than this for one function are not tried (the simplest are kept).
MAX_CANDIDATES = 400
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
    """(option, table) pairs for one parameter: each role its name proposes, then, for one with a
    default, leaving it out."""
    options = []
    for guess in guesses(param.name):
        if guess.role == "dict":
            keys = {key: inner.role for key in param.keys for inner in guesses(key)[:1] if inner.role != "dict"}
            if keys:
                options.append((f"{param.name}: a dict", {"name": param.name, "role": "dict", "keys": keys}))
            continue
        options.append((f"{param.name}: {guess.role}", _param_table(param.name, guess)))
    if param.has_default:
        options.append((f"{param.name}: left to its default", OMITTED))
    return options


def _param_table(name: str, guess: Guess) -> dict:
    table = {"name": name, "role": guess.role}
    if guess.head is not None:
        table["head"] = guess.head
    return table


def _dimensions(params: list[dict], plural: bool) -> list[tuple[str, list]]:
    """The convention-wide choices that apply to these parameters, each option list default first."""
    roles = {p["role"] for p in params} | {r for p in params if p["role"] == "dict" for r in p["keys"].values()}
    dims: list[tuple[str, list]] = []
    helper = "scores" in roles
    if roles & WEIGHT_ROLES:
        dims.append(("weights", ["in_out", "out_in"]))
    if helper:
        dims.append(("axis", [-1, 0]))
    else:
        dims.append(("tokens", ["rows", "columns"]))
        dims.append(("scaled", [True, False]))
        if "causal" not in roles:
            dims.append(("causal", [False, True]))
    heads_given = any(p["role"] in HEAD_FORM_ROLES and "head" not in p for p in params)
    if heads_given and plural:
        dims.append(("heads", ["per_head", "axis", "fused"]))
    single = not plural and "n_heads" not in roles and not any("head" in p for p in params)
    if "x" in roles and single:
        dims.append(("square", [False, True]))
    # Leading batch axes and class-based conventions join here as dimensions of their own once
    # conventions take them (`batch`, `class`): one more entry, tried like the rest.
    for p in params:
        if p["role"] == "mask":
            dims.append((f"form:{p['name']}", list(FORMS)))
    return dims


def _placeholder_returns(roles: set) -> str | list:
    """A return to parse the candidate with before its real returns are read off a call."""
    if "scores" in roles:
        return "weights"
    if roles & {"v", "wv", "wqkv"}:
        return "output"
    if roles & {"q", "wq"} and roles & {"k", "wk"}:
        return "scores"
    return ["q"]


def _apply(params: list[dict], dims: list[tuple[str, list]], picks: tuple) -> dict:
    table: dict = {"params": [dict(p, keys=dict(p["keys"])) if "keys" in p else dict(p) for p in params]}
    for (dim, options), pick in zip(dims, picks):
        if dim.startswith("form:"):
            name = dim.split(":", 1)[1]
            next(p for p in table["params"] if p["name"] == name)["form"] = pick
        elif dim == "heads":
            if pick != "fused":
                for p in table["params"]:
                    if p["role"] in HEAD_FORM_ROLES and "head" not in p:
                        p["heads"] = pick
        elif pick != options[0]:
            table[dim] = pick
    return table


def parseable(table: dict, name: str) -> str | None:
    """None when the candidate is a convention the grader can read; else why not."""
    try:
        parse_convention(table, name, name)
    except SpecError as exc:
        return str(exc).removeprefix(f"{name}: ")
    return None


def candidates(signature: Signature) -> Candidates:
    per_param = [_param_options(p) for p in signature.params]
    for param, options in zip(signature.params, per_param):
        if not options and guesses(param.name):
            return Candidates([], f"its parameter `{param.name}` would be a dict, but the function reads no key "
                                  "of it by name")
        if not options:
            return Candidates([], f"its parameter `{param.name}` has a name no role is known by")
    found: list[Candidate] = []
    refusals: list[str] = []
    for combination in itertools.product(*(enumerate(o) for o in per_param)):
        role_rank = sum(i for i, _ in combination)
        params = [table for _, (_, table) in combination if table is not OMITTED]
        if not params:
            continue
        chosen = tuple(("role", label) for _, (label, _) in combination)
        plural = any(g.plural for p in signature.params for g in guesses(p.name)[:1])
        dims = _dimensions(params, plural)
        roles = {p["role"] for p in params} | {r for p in params if p["role"] == "dict" for r in p["keys"].values()}
        for picks in itertools.product(*(enumerate(options) for _, options in dims)):
            table = _apply(params, dims, tuple(option for _, option in picks))
            table["returns"] = _placeholder_returns(roles)
            refusal = parseable(table, signature.name)
            if refusal:
                refusals.append(refusal)
                continue
            choices = chosen + tuple((dim, option) for (dim, _), (_, option) in zip(dims, picks))
            found.append(Candidate(table, choices, role_rank + sum(i for i, _ in picks)))
    found.sort(key=lambda c: c.rank)
    if not found:
        return Candidates([], f"no reading of its parameters is a convention ({refusals[0] if refusals else 'none'})")
    return Candidates(found[:MAX_CANDIDATES])
