"""The grader's own lines in a submission: the `%load_ext grader` and `%grade` lines the README
tells students to write to check their work. In a graded kernel the grader is not there (the
sandbox stubs it out), so run as they are they would fail and count as the student's problem.

They are recognised by their exact text alone, never by metadata or tags a student could set:
a line is the grader's only when it is a whole top-level magic statement of that form, so a
line in a string, in a block, or with IPython's `{expression}` or `$name` expansion in its
arguments is the student's code and runs.
"""
from __future__ import annotations

import ast
import re

from .static_scan import python_source

# %grade's arguments are a notebook's name and --assignment NAME: no braces, dollars or quotes,
# so nothing in them is Python that IPython would evaluate before calling the magic.
GRADER_LINE = re.compile(r"%load_ext[ \t]+(?:attention_)?grader|%grade(?:[ \t]+[\w./ \t-]*)?")
MAGICS = {"load_ext", "grade"}


def _is_magic_call(stmt: ast.stmt) -> bool:
    """`get_ipython().run_line_magic(NAME, ARGS)` with constant arguments: what IPython makes of
    a line magic that stands as a statement of its own."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_line_magic" and len(call.args) == 2
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
            and call.args[0].value in MAGICS)


def grader_lines(source: str) -> list[int]:
    """The indices of the cell's lines that are the grader's own magic statements."""
    python = python_source(source)
    lines = source.splitlines()
    if python == source or len(python.splitlines()) != len(lines):
        return []   # no magic at all, or IPython rewrote the cell beyond one line for one line
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return []
    return [stmt.lineno - 1 for stmt in tree.body
            if _is_magic_call(stmt) and stmt.lineno == stmt.end_lineno
            and GRADER_LINE.fullmatch(lines[stmt.lineno - 1].strip())]


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
