"""What a function reads from a parameter that holds its weights, from its source alone: keys
(`params["W_qkv"]`, `layer.get("w")`), attributes (`c_attn.w`), a tuple's items by what it is
unpacked into (`q, k, v, p = cache`), and, where a key or an
attribute holds weights in turn, what is read from that (`attn["c_attn"]["w"]`). A parameter
passed on to another of the notebook's functions counts what that function reads of it: as
keywords, its parameters are the keys (picoGPT's `linear(x, **c_attn)` with `def linear(x, w,
b)`, and `mha(x, **attn, n_head=n_head)` one level up), and passed as an argument, what the
callee reads of its own parameter (`linear(x, attn["c_attn"])`). `spec infer` proposes a dict
or an object param from it (candidates.py).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

# `c_attn.w.T`, `attn.c_proj.b.shape`: what an array has is never a weight's name, so a chain of
# attributes ends before it.
ARRAY_ATTRIBUTES = frozenset(dir(np.ndarray))
# How many functions deep passing a parameter on is followed (a block to its attention to its
# layers is two).
MAX_CALLS = 3


@dataclass(frozen=True)
class Held:
    """How a parameter (or what one of its keys or attributes holds) is read."""
    kind: str            # "dict": read by key | "object": read by attribute | "tuple": unpacked
    items: tuple = ()    # (key or attribute, Held or None: what is read from it in turn), first use first

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.items)


class _Reads:
    """What is read from one value so far: how (by key or attribute) and each key's own reads."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.items: dict[str, _Reads] = {}

    def at(self, path: list[tuple[str, str]]) -> _Reads | None:
        """The reads of the value at the end of `path`, made as needed; None where a value is read
        both by key and by attribute (the first way it is read counts)."""
        node = self
        for kind, key in path:
            if node.kind not in (None, kind):
                return None
            node.kind = kind
            node = node.items.setdefault(key, _Reads())
        return node

    def frozen(self) -> Held | None:
        if self.kind is None or not self.items:
            return None
        return Held(self.kind, tuple((key, inner.frozen()) for key, inner in self.items.items()))


def held(function: ast.FunctionDef, name: str, others: dict) -> Held | None:
    """What `function` reads from its parameter `name`; None when it reads no key or attribute
    of it. `others`: the notebook's functions by name, which it may be passed on to."""
    reads = _Reads()
    _read(reads, function, name, others, ((function.name, name),))
    return reads.frozen()


def _read(reads: _Reads, function: ast.FunctionDef, name: str, others: dict, seen: tuple) -> None:
    called = {id(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)}
    # In the order of the source, so that keys are listed as first used (`x @ p.w + p.b`: w, b).
    in_order: list[ast.expr | ast.stmt] = sorted(
        (node for node in ast.walk(function) if isinstance(node, (ast.expr, ast.stmt))),
        key=lambda node: (node.lineno, node.col_offset))
    for node in in_order:
        unpacked = _unpacked(node, name)
        if unpacked:   # `q, k, v, p = cache`: a tuple, its items named by what they are unpacked into
            for item in unpacked:
                reads.at([("tuple", item)])
            continue
        path = _path(node, name, called)
        if path:
            reads.at(path)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in others \
                and len(seen) <= MAX_CALLS:
            _passed_on(reads, node, others[node.func.id], name, called, others, seen)


def _unpacked(node: ast.AST, name: str) -> list[str]:
    """The names `name` is unpacked into by `q, k, v, p = name`, in order; [] for another node
    (or an unpacking into anything but plain names)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Name) and node.value.id == name):
        return []
    names = [e.id for e in node.targets[0].elts if isinstance(e, ast.Name)]
    return names if len(names) == len(node.targets[0].elts) and len(set(names)) == len(names) else []


def _path(node: ast.AST, name: str, called: set) -> list[tuple[str, str]] | None:
    """The keys and attributes `node` reads from the parameter `name`, outermost last, as
    ("dict" or "object", key) steps; None when it is not such a read."""
    steps = []
    while True:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            steps.append(("dict", node.slice.value))
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            steps.append(("dict", node.args[0].value))
            node = node.func.value
        elif isinstance(node, ast.Attribute) and id(node) not in called and node.attr not in ARRAY_ATTRIBUTES:
            steps.append(("object", node.attr))
            node = node.value
        elif isinstance(node, ast.Name) and node.id == name:
            return steps[::-1]
        else:
            return None


def _passed_on(reads: _Reads, call: ast.Call, callee: ast.FunctionDef, name: str, called: set, others: dict,
               seen: tuple) -> None:
    """What a call of another notebook function reads of the parameter: `callee(..., **value)`
    gives value the callee's parameters the call does not fill otherwise as keys, each read as
    the callee reads it; `callee(value)` reads value as the callee reads that parameter."""
    args = callee.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    given = {k.arg for k in call.keywords if k.arg is not None}
    passed: list[tuple[list, str]] = []
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        path = _path(arg, name, called)
        if path is not None and index < len(positional):
            passed.append((path, positional[index]))
    for keyword in call.keywords:
        path = _path(keyword.value, name, called)
        if path is None:
            continue
        if keyword.arg is not None:
            passed.append((path, keyword.arg))
            continue
        unfilled = positional[len(call.args):] + [a.arg for a in args.kwonlyargs]
        passed += [(path + [("dict", p)], p) for p in unfilled if p not in given]
    for path, parameter in passed:
        target = reads.at(path)
        if target is not None and (callee.name, parameter) not in seen:
            _read(target, callee, parameter, others, seen + ((callee.name, parameter),))
