"""What can be learned from the submission's source without running it: graded functions
that are still stubs, imports of forbidden libraries, the cells that define each graded
function, the cells that are not Python, and the top-level definitions a graded function that
is missing may have been renamed to."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field

from functools import cache
from grader import syntax_tree


@dataclass(frozen=True)
class Definition:
    """A top-level def or class: as much of it as tells whether it could be a graded function
    under another name."""
    is_class: bool
    positional: int = 0          # a def's parameters that can be given by position
    required: int = 0            # of those, the ones without a default
    star_args: bool = False      # a def's *args
    methods: frozenset = frozenset()   # a class's methods

    def fits(self, params: int, method: str | None) -> bool:
        """Whether it can be called as the graded function is: a class with the graded method,
        or a def that takes `params` arguments by position."""
        if method is not None:
            return self.is_class and method in self.methods
        return not self.is_class and self.required <= params and (self.positional >= params or self.star_args)


@dataclass
class StaticScan:
    stubs: set = field(default_factory=set)         # graded names whose last definition is a stub
    imports: list = field(default_factory=list)     # (cell index, line, module)
    # function name -> modules it imports, or reaches through a name the notebook imported
    function_imports: dict = field(default_factory=dict)
    # graded name -> indexes of the cells whose source defines it (or would, had it run)
    definers: dict = field(default_factory=dict)
    # cell index -> (line, exception name, message) for a cell that does not parse, as Python
    # itself says it when it compiles the cell
    unparsable: dict = field(default_factory=dict)
    # name -> Definition of every top-level def and class, the last of each name
    definitions: dict = field(default_factory=dict)


# IPython's input transformer is one module of the standard library's imports alone; loaded
# from its file under this name, it comes without the IPython package, whose import (its
# terminal, its shell) takes a quarter of a second, most of a check's scan of a notebook with
# a magic.
TRANSFORMER_MODULE = "_grader_ipython_inputtransformer2"


@cache
def _transformer():
    """IPython's own TransformerManager, as the kernel transforms a cell; imported the usual way
    should its module ever need the rest of IPython."""
    try:
        return _transformer_module().TransformerManager()
    except Exception:  # noqa: BLE001 - any failure to load it alone: the usual import
        from IPython.core.inputtransformer2 import TransformerManager
        return TransformerManager()


def _transformer_module():
    found = importlib.util.find_spec("IPython")   # finds the package without importing it
    if found is None or not found.submodule_search_locations:
        raise ImportError("IPython is not installed")
    path = os.path.join(list(found.submodule_search_locations)[0], "core", "inputtransformer2.py")
    spec = importlib.util.spec_from_file_location(TRANSFORMER_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[TRANSFORMER_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[TRANSFORMER_MODULE]
        raise
    return module


def python_source(cell_source: str) -> str:
    """Turn magics and shell escapes into the calls IPython would make, so the cell parses.
    A cell that already parses as Python is left as it is: IPython changes only what is not
    Python (magics, shell escapes, help, prompts, indented first lines)."""
    try:
        syntax_tree.parse(cell_source)
        return cell_source
    except (SyntaxError, ValueError):
        pass
    try:
        return _transformer().transform_cell(cell_source)
    except Exception:  # noqa: BLE001 - IPython's transformer rejects some odd input
        return cell_source


def _is_placeholder(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)
    if isinstance(stmt, ast.Raise):
        target = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return isinstance(target, ast.Name) and target.id == "NotImplementedError"
    return isinstance(stmt, ast.Return)


def is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of only `...`, `pass`, a docstring, `raise NotImplementedError` and returns."""
    body = node.body
    has_placeholder = any(not isinstance(s, ast.Return) and not (
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))
        for s in body)
    return all(_is_placeholder(s) for s in body) and has_placeholder


IMPORT_CALLS = ("__import__", "import_module")
IMPORT_WORDS = ("import",)   # in the keyword and in every name of IMPORT_CALLS


def may_hold(text: str, words) -> bool:
    """Whether Python source can hold one of `words` as a name or keyword (or part of one).
    Only ASCII text is ruled out by its characters: Python reads a non-ASCII name in its
    NFKC form, in which `ｉmport_module` is `import_module`; and no escape or line continuation
    makes a name out of other characters."""
    return not text.isascii() or any(word in text for word in words)


def imported_modules(tree: ast.AST):
    """Import statements, and __import__/importlib.import_module calls with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in IMPORT_CALLS:
                yield node.lineno, node.args[0].value
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def imported_names(statements) -> dict[str, str]:
    """The names top-level import statements bind, each to the module it stands for."""
    bound = {}
    for node in statements:
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _dotted(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything else."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return inner + [node.attr] if inner else None
    return None


def reached_modules(function: ast.AST, bound: dict[str, str]) -> set[str]:
    """Modules a function reaches through names the notebook imported: `softmax` after
    `from scipy.special import softmax`, `scipy.special.softmax` after `import scipy`."""
    found = set()
    for node in ast.walk(function):
        parts = _dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if parts and parts[0] in bound:
            found.add(".".join([bound[parts[0]], *parts[1:]]))
    return found


def defined_textually(source: str, graded_names: set[str]) -> set[str]:
    """The graded names a `def` or `class` line of a cell that does not parse would define."""
    return {m.group(1) for m in re.finditer(r"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+(\w+)", source, re.MULTILINE)
            if m.group(1) in graded_names}


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def class_is_stub(node: ast.ClassDef, method: str | None) -> bool:
    """A graded class is a stub when the method graded is one (a template's `forward`)."""
    found = [s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == method]
    return bool(found) and is_stub(found[-1])


def _definition(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> Definition:
    if isinstance(node, ast.ClassDef):
        return Definition(True, methods=frozenset(s.name for s in node.body
                                                  if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))))
    positional = len(node.args.posonlyargs) + len(node.args.args)
    return Definition(False, positional, positional - len(node.args.defaults), node.args.vararg is not None)


def _normalised(name: str) -> str:
    return name.replace("_", "").lower()


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein's: the fewest letters inserted, deleted or replaced to make `a` into `b`."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


# Names this close to a graded one, once case and underscores are set aside, are taken for a
# rename or a typo of it: one letter in six (selfAttention, self_atention, multihead_attention).
LETTERS_PER_SLIP = 6


def looks_renamed(name: str, graded: str) -> bool:
    """`name` reads as `graded` spelled another way: other case, other underscores, a slip or two."""
    a, b = _normalised(name), _normalised(graded)
    return name != graded and _edit_distance(a, b) <= max(1, len(b) // LETTERS_PER_SLIP)


def renamed_candidates(scan_result: StaticScan, graded: str, graded_names: set[str], params: int,
                       method: str | None = None) -> list[str]:
    """The top-level definitions that look like `graded` renamed: a name close to it (and to no
    other graded name's own spelling) that can be called as it is, closest first. Only a hint:
    the grader never grades one under the graded name unless the spec's `aliases` say so."""
    found = [name for name, definition in scan_result.definitions.items()
             if name not in graded_names and looks_renamed(name, graded) and definition.fits(params, method)]
    return sorted(found, key=lambda name: (_edit_distance(_normalised(name), _normalised(graded)), name))


def _add_definers(result: StaticScan, index: int, names) -> None:
    for name in names:
        result.definers.setdefault(name, []).append(index)


def scan(cells: list[tuple[int, str]], graded_names: set[str], methods: dict | None = None) -> StaticScan:
    """`methods`: for a graded class, by each of its names, the method graded."""
    result = StaticScan()
    methods = methods or {}
    bound: dict[str, str] = {}
    for index, source in cells:
        text = python_source(source)
        try:
            tree = syntax_tree.parse(text)
        except SyntaxError as exc:
            result.unparsable[index] = (exc.lineno, type(exc).__name__, exc.msg)
            _add_definers(result, index, sorted(defined_textually(source, graded_names)))
            continue
        # A walk of the whole tree only where its text can hold what it looks for: a cell of the
        # sheet's data is thousands of nodes, and names no graded function and imports nothing.
        if may_hold(text, graded_names):
            _add_definers(result, index, sorted({node.name for node in ast.walk(tree)
                                                 if isinstance(node, DEFINITIONS) and node.name in graded_names}))
        if may_hold(text, IMPORT_WORDS):
            for line, module in imported_modules(tree):
                result.imports.append((index, line, module))
        bound.update(imported_names(tree.body))
        for node in tree.body:
            if isinstance(node, DEFINITIONS):
                result.definitions[node.name] = _definition(node)
            if isinstance(node, DEFINITIONS) and node.name in graded_names:
                stub = class_is_stub(node, methods.get(node.name)) if isinstance(node, ast.ClassDef) else is_stub(node)
                (result.stubs.add if stub else result.stubs.discard)(node.name)
                result.function_imports[node.name] = sorted({m for _, m in imported_modules(node)}
                                                            | reached_modules(node, bound))
    return result


def matches(module: str, forbidden: tuple[str, ...]) -> str | None:
    for name in forbidden:
        if module == name or module.startswith(name + "."):
            return name
    return None
