"""The functions a solution notebook defines, read from its source without running it: each
one's parameters, which of them have defaults, and the keys it reads from a parameter used as
a dict (`params["W_qkv"]`), which is all a signature says about a packed argument."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from ..loader import code_cells
from ..static_scan import is_stub, python_source


@dataclass(frozen=True)
class Parameter:
    name: str
    has_default: bool
    keys: tuple[str, ...] = ()    # the string keys the function reads from it, in first-use order


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Parameter, ...]

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def _keys_read(function: ast.FunctionDef, name: str) -> tuple[str, ...]:
    keys: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            if node.slice.value not in keys:
                keys.append(node.slice.value)
    return tuple(keys)


def _signature(node: ast.FunctionDef) -> Signature | None:
    """Positional parameters only: the grader calls functions positionally (or by these names).
    A function taking *args or required keyword-only arguments cannot be called that way."""
    args = node.args
    if args.vararg is not None or any(d is None for d in args.kw_defaults):
        return None
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = tuple(Parameter(a.arg, i >= first_default, _keys_read(node, a.arg)) for i, a in enumerate(positional))
    return Signature(node.name, params) if params else None


def _top_level(nb, kind) -> list:
    nodes = []
    for _, source in code_cells(nb):
        try:
            tree = ast.parse(python_source(source))
        except SyntaxError:
            continue
        nodes += [node for node in tree.body if isinstance(node, kind) and not node.name.startswith("_")]
    return nodes


def notebook_functions(nb) -> list[Signature]:
    """The notebook's top-level functions that take parameters, each as last defined, in the
    order they are first defined; placeholders (a template's stubs) and private names left out."""
    found: dict[str, Signature | None] = {}
    for node in _top_level(nb, ast.FunctionDef):
        found[node.name] = None if is_stub(node) else _signature(node)
    return [s for s in found.values() if s is not None]


def notebook_classes(nb) -> list[str]:
    """The names of the notebook's top-level classes (a class-based module is not proposed yet)."""
    return list(dict.fromkeys(node.name for node in _top_level(nb, ast.ClassDef)))
