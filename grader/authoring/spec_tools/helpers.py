"""Which of a solution's functions are its own helpers rather than tasks: a function another of
its functions (or a class's method) calls, which no Markdown cell of the solution names as a task;
and, in the same way, which attributes a class's method sets on its object are the task's (read
back as a part the object keeps) rather than the solution's own bookkeeping.

A course's sheet says what students write (`softmax(x)`, "implement `scaled_attention`"); a
helper it does not name is the solution's business, and a student who writes the same step
inline, or under another name, is right too. Grading it would cost such a student its points. A
solution without Markdown says nothing of its tasks: then every function is one.
"""
from __future__ import annotations

import ast
import re

from grader.authoring.spec_tools.candidates import candidates
from grader.authoring.spec_tools.signatures import Signature
from grader.syntax_tree import parse


def _named(markdown: str, name: str) -> bool:
    """The Markdown names the function: as code, `name` in backticks or name( as a call, or, for
    a name of several words, in words ("Implement the self-attention operation" names
    self_attention). One word in prose ("apply a softmax") names a step, not a task."""
    escaped = re.escape(name)
    if re.search(rf"`{escaped}\b|\b{escaped}\s*\(", markdown):
        return True
    # Its words: snake_case and CamelCase alike (DotProductAttention, "dot-product attention").
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)]
    return len(words) > 1 and re.search(r"\b" + r"[\s_-]+".join(map(re.escape, words)) + r"\b",
                                        markdown.lower()) is not None


def _class_calls(code: list[str]) -> dict[str, set[str]]:
    """What each class's methods call, by class name (a module's forward calling softmax)."""
    calls: dict[str, set[str]] = {}
    for source in code:
        try:
            tree = parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                calls[node.name] = {call.func.id if isinstance(call.func, ast.Name) else call.func.attr
                                    for call in ast.walk(node) if isinstance(call, ast.Call)
                                    and isinstance(call.func, (ast.Name, ast.Attribute))}
    return calls


def _a_step(signature: Signature) -> bool:
    """A function that computes a step, not attention: every reading of it is a softmax helper's
    (its input the scores), or it has none (a `linear`, a `gelu`). One that computes attention
    (a single head a multi-head function calls) is a task whoever calls it."""
    found = candidates(signature).found
    return all(any(p["role"] == "scores" for p in c.table["params"]) for c in found)


def helpers(nb, signatures: list[Signature], classes: dict[str, int] | None = None) -> dict[str, str]:
    """Each helper's name, with why it is one, in the words `spec infer` prints: among the
    functions of `signatures` that compute a step, and the classes in `classes` (name: how many
    parameters its graded method takes) applied to one input, a layer another class makes, as a
    module's `Softmax(dim=-1)` or `Linear(d, d)`."""
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if not markdown.strip():
        return {}
    callers: dict[str, set[str]] = {s.name: set(s.calls) for s in signatures}
    callers.update(_class_calls([c.source for c in nb.cells if c.cell_type == "code"]))
    steps = [s.name for s in signatures if _a_step(s)]
    layers = [name for name, taken in (classes or {}).items() if taken <= 1]
    found = {}
    for name in [*steps, *layers]:
        by = sorted(other for other, calls in callers.items() if other != name and name in calls)
        if by and not _named(markdown, name):
            found[name] = (f"a helper ({by[0]} calls it) that no Markdown cell names as a task (`{name}` or "
                           f"{name}(...)), so a student who writes it inline or under another name is right "
                           f"too; give --function {name} with the others to grade it")
    return found


def kept_as_tasks(nb, attributes: tuple[str, ...]) -> tuple[str, ...]:
    """The attributes a method sets on its object that the Markdown names (`attention_scores`,
    self.attn, or its words): a part kept there is then the course's to read back. One the
    Markdown does not name is the solution's own (weights stored for a plot), which a student need
    not keep; a notebook without Markdown says nothing, and every attribute is read back."""
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if not markdown.strip():
        return attributes
    return tuple(a for a in attributes if _named(markdown, a) or f"self.{a}" in markdown)
