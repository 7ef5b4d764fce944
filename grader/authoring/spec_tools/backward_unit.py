"""A class's backward pass as a unit of its own: `Class.backward`, called with the upstream
gradient on an object whose forward just ran on the case (the class table's `before`), as a
course written on CMU 11-785's mytorch has it. Its candidates are its forward's, each turned
round: the forward's reading of its parameters is what `before` passes, and the backward's one
parameter is the upstream gradient."""
from __future__ import annotations

import copy
from dataclasses import replace

from grader.authoring.spec_tools.candidates import Candidate, parseable
from grader.calling.class_table import MAX_READ_BACK
from grader.authoring.spec_tools.roles import guesses, normalised
from grader.authoring.spec_tools.signatures import ClassSignature, Signature

# A backward method's names, as courses write them.
BACKWARD_METHODS = ("backward", "backwardpass", "backprop")


def backward_method(cls: ClassSignature) -> Signature | None:
    """The class's backward method: named as one, taking the upstream gradient alone."""
    for method in cls.methods:
        params = [p for p in method.params if not p.has_default]
        if normalised(method.name) in BACKWARD_METHODS and len(params) == 1 \
                and any(g.role == "d_output" for g in guesses(params[0].name)):
            return replace(method, params=tuple(params))
    return None


def left_on_layers(cls: ClassSignature, classes: dict[str, ClassSignature], named) -> tuple[str, ...]:
    """Where a backward pass may leave its weights' gradients: each attribute the layers the
    class makes set in their own methods (`q_proj.dLdW` for `self.q_proj = Linear(d, d)` whose
    backward sets self.dLdW), those `named` keeps (the Markdown's tasks)."""
    found = tuple(f"{attribute}.{leaf}" for attribute, made in cls.layers if made in classes
                  for leaf in named(classes[made].set_later))
    return found[:MAX_READ_BACK]


def backward_candidates(cls: ClassSignature, forward: list[Candidate],
                        read_back: tuple[str, ...] = ()) -> tuple[Signature, list[Candidate]] | None:
    """The unit `Class.backward` and its candidates, one per forward candidate that a backward
    pass can be graded after; None when the class has no backward method, or none can.
    `read_back`: the attributes read after each probe, where the weights' gradients may be."""
    method = backward_method(cls)
    if method is None:
        return None
    name = f"{cls.name}.{method.name}"
    found = []
    for candidate in forward:
        table = copy.deepcopy(candidate.table)
        before = {"method": table["class"]["method"], "params": table["params"]}
        table["class"] = {**{k: v for k, v in table["class"].items() if k != "kept"},
                          "method": method.name, "before": before}
        table["params"] = [{"name": method.params[0].name, "role": "d_output"}]
        # Of a forward given the tokens, the gradients of its inputs (read off the call later).
        table["returns"] = ["dx"] if any(p["role"] == "x" for p in before["params"]) else ["dq", "dk", "dv"]
        if parseable(table, name) is None:
            found.append(Candidate(table, candidate.choices, candidate.rank))
    if not found:
        return None
    return Signature(name, method.params, self_attributes=read_back, any_axes=cls.any_axes), found
