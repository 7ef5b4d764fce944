"""What can be learned from the submission's source without running it: graded functions
that are still stubs, imports of forbidden libraries, the cells that define each graded
function and the cells that are not Python."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from functools import cache
from grader import syntax_tree


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


@cache
def _transformer():
    # Importing IPython costs a quarter of a second, so only cells that need it pay.
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager()


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


def _add_definers(result: StaticScan, index: int, names) -> None:
    for name in names:
        result.definers.setdefault(name, []).append(index)


def scan(cells: list[tuple[int, str]], graded_names: set[str], methods: dict | None = None) -> StaticScan:
    """`methods`: for a graded class, by each of its names, the method graded."""
    result = StaticScan()
    methods = methods or {}
    bound: dict[str, str] = {}
    for index, source in cells:
        try:
            tree = syntax_tree.parse(python_source(source))
        except SyntaxError as exc:
            result.unparsable[index] = (exc.lineno, type(exc).__name__, exc.msg)
            _add_definers(result, index, sorted(defined_textually(source, graded_names)))
            continue
        _add_definers(result, index, sorted({node.name for node in ast.walk(tree)
                                             if isinstance(node, DEFINITIONS) and node.name in graded_names}))
        for line, module in imported_modules(tree):
            result.imports.append((index, line, module))
        bound.update(imported_names(tree.body))
        for node in tree.body:
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
