"""Pairs of submissions whose graded functions are identical or nearly so once names,
whitespace, comments and docstrings are normalised: a flag for a human, not a verdict."""
from __future__ import annotations

import ast
import difflib
import itertools
import sys

from grader.intake.notebook import SubmissionError, code_cells, load_submission
from grader.intake.source_scan import is_stub, python_source

THRESHOLD = 0.92


class _Renamer(ast.NodeTransformer):
    """Local names become v0, v1, ... in order of appearance; attributes (np.exp) stay."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._new(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=self._new(node.arg)), node)


def _without_docstring(fn: ast.FunctionDef) -> ast.FunctionDef:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:] or [ast.Pass()]
    if sys.version_info >= (3, 12):
        return ast.FunctionDef(name="f", args=fn.args, body=body, decorator_list=[], returns=None, type_comment=None,
                               type_params=[])
    return ast.FunctionDef(name="f", args=fn.args, body=body, decorator_list=[], returns=None, type_comment=None)


def _class_without_docstrings(node: ast.ClassDef) -> ast.ClassDef | None:
    """A graded class as its methods without docstrings; None while every method is a stub
    (a template's class, the same in every submission)."""
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
    if all(is_stub(m) for m in methods):
        return None
    body = [m for m in node.body if not (isinstance(m, ast.Expr) and isinstance(m.value, ast.Constant))]
    body = [ast.FunctionDef(**{**vars(_without_docstring(m)), "name": m.name}) if isinstance(m, ast.FunctionDef)
            else m for m in body]
    return ast.ClassDef(**{**vars(node), "name": "C", "body": body or [ast.Pass()], "decorator_list": []})


def fingerprint(path, names: set[str]) -> dict[str, str]:
    """The normalised source of each graded function a submission defines (none: {})."""
    try:
        cells = code_cells(load_submission(path))
    except SubmissionError:
        return {}
    found: dict[str, str] = {}
    for _, source in cells:
        try:
            tree = ast.parse(python_source(source))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in names and not is_stub(node):
                normal = _Renamer().visit(_without_docstring(node))
                found[node.name] = ast.unparse(ast.fix_missing_locations(normal))
            elif isinstance(node, ast.ClassDef) and node.name in names and (cls := _class_without_docstrings(node)):
                found[node.name] = ast.unparse(ast.fix_missing_locations(_Renamer().visit(cls)))
    return found


def similar_pairs(items: list[tuple[str, dict | str]], threshold: float = THRESHOLD) -> list[dict]:
    """items: (label, fingerprint: per function, or the text of all). Groups of submissions at
    or above the threshold, most similar first: {"a": labels, "b": [], "similarity": 1.0,
    "shared": functions} for submissions identical to one another, {"a": labels, "b": labels,
    "similarity": r, "shared": functions identical in both} for two such groups (of one or more)
    similar to each other. Each distinct fingerprint is compared once with each other one, and
    a group is named once, not as every pair in it: a class where many hand in the same code
    costs what its distinct submissions cost, in time and in memory."""
    labels: dict[str, list[str]] = {}
    parts: dict[str, dict] = {}
    for label, fp in items:
        functions = fp if isinstance(fp, dict) else {}
        text = "\n".join(functions[n] for n in sorted(functions)) if isinstance(fp, dict) else fp
        if text:
            labels.setdefault(text, []).append(label)
            parts[text] = functions
    found = [{"a": group, "b": [], "similarity": 1.0, "shared": sorted(parts[text])}
             for text, group in labels.items() if len(group) > 1]
    for fa, fb in itertools.combinations(labels, 2):
        matcher = difflib.SequenceMatcher(None, fa, fb, autojunk=False)
        if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
            ratio = matcher.ratio()
            if ratio >= threshold:
                shared = sorted(n for n in parts[fa] if parts[fb].get(n) == parts[fa][n])
                found.append({"a": labels[fa], "b": labels[fb], "similarity": round(ratio, 3), "shared": shared})
    return sorted(found, key=lambda p: -p["similarity"])
