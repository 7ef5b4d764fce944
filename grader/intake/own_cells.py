"""The grader's own lines in a submission: the `%load_ext grader` and `%grade` lines the README
tells students to write to check their work, or its Python form `import grader;
grader.check()`. In a graded kernel the grader is not there (the
sandbox stubs it out), so run as they are they would fail and count as the student's problem.

They are recognised by their exact text alone, never by metadata or tags a student could set:
a line is the grader's only when it is a whole top-level magic statement of that form, so a
line in a string, in a block, or with IPython's `{expression}` or `$name` expansion in its
arguments is the student's code and runs. In the Python form, `grader.check(...)` (string
arguments only) is the grader's only after `import grader` among the cell's own grader lines,
so a name `grader` of the student's own is never taken for it.
"""
from __future__ import annotations

import ast
import re

from grader.intake.source_scan import python_source
from grader import syntax_tree

# %grade's arguments are a notebook's name and --assignment NAME: no braces, dollars or quotes,
# so nothing in them is Python that IPython would evaluate before calling the magic.
GRADER_LINE = re.compile(r"%load_ext[ \t]+(?:attention_)?grader|%grade(?:[ \t]+[\w./ \t-]*)?")
MAGICS = {"load_ext", "grade"}
MODULES = {"grader", "attention_grader"}


def _is_magic_call(stmt: ast.stmt) -> bool:
    """`get_ipython().run_line_magic(NAME, ARGS)` with constant arguments: what IPython makes of
    a line magic that stands as a statement of its own."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_line_magic" and len(call.args) == 2
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
            and isinstance(call.args[0], ast.Constant) and call.args[0].value in MAGICS)


def _imported(stmt: ast.stmt) -> str | None:
    """The grader's module a statement imports, exactly `import grader` (no alias), or None."""
    if isinstance(stmt, ast.Import) and len(stmt.names) == 1 and stmt.names[0].asname is None \
            and stmt.names[0].name in MODULES:
        return stmt.names[0].name
    return None


def _is_check_call(stmt: ast.stmt, imported: set) -> bool:
    """`grader.check(...)` with string arguments, after `import grader` in the cell."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "check"
            and isinstance(call.func.value, ast.Name) and call.func.value.id in imported
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
            and all(isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) for k in call.keywords))


def grader_lines(source: str) -> list[int]:
    """The indices of the cell's lines that hold only the grader's own statements: its magics,
    or its import and check call."""
    # Every form above has "grade" in its text, so most cells need no parse here; not so where
    # Python reads other letters as these (NFKC: `import ｇrader` imports grader).
    if "grade" not in source and source.isascii():
        return []
    python = python_source(source)
    lines = source.splitlines()
    if len(python.splitlines()) != len(lines):
        return []   # IPython rewrote the cell beyond one line for one line
    try:
        tree = syntax_tree.parse(python)
    except SyntaxError:
        return []
    imported: set = set()
    own: dict[int, bool] = {}   # line -> whether every statement on it is the grader's
    for stmt in tree.body:
        line = stmt.lineno - 1
        if _is_magic_call(stmt):
            mine = stmt.lineno == stmt.end_lineno and bool(GRADER_LINE.fullmatch(lines[line].strip()))
        elif _imported(stmt):
            imported.add(_imported(stmt))
            mine = True
        else:
            mine = _is_check_call(stmt, imported) and stmt.lineno == stmt.end_lineno
        for number in range(line, stmt.end_lineno or stmt.lineno):   # ast.parse sets end_lineno
            own[number] = own.get(number, True) and mine
    # A module imported by the grader's lines only: a line importing it beside code of the
    # student's is not the grader's, so neither is a check call that needs that import.
    return sorted(line for line, mine in own.items() if mine and _stands_alone(tree, line, imported))


def _stands_alone(tree: ast.Module, line: int, imported: set) -> bool:
    """An import of the grader counts only when the cell also calls its check (or is magics):
    `import grader` alone is a student's code, which the sandbox refuses as ever."""
    for stmt in tree.body:
        if stmt.lineno - 1 == line and _imported(stmt):
            return any(_is_check_call(s, imported) for s in tree.body)
    return True


def is_grader_cell(source: str) -> bool:
    """Whether the cell holds nothing but the grader's own lines (blank lines and comments aside)."""
    own = set(grader_lines(source))
    return bool(own) and all(i in own or not line.strip() or line.strip().startswith("#")
                             for i, line in enumerate(source.splitlines()))


def without_grader_lines(source: str) -> str:
    """The cell with the grader's own lines made comments, so that its other lines keep their
    numbers (a traceback's line is still the line the student sees; IPython would drop blank
    lines at the top of a cell)."""
    own = set(grader_lines(source))
    if not own:
        return source
    return "\n".join(f"# {line.strip()}" if i in own else line for i, line in enumerate(source.splitlines()))
