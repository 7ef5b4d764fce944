"""`grader spec infer`: a spec proposed from the staff's own solution, which grades that
solution at full marks.

Each function the solution defines gets candidate conventions from its parameters' names
(candidates.py); one kernel session calls it with each and keeps those whose values the
reference computes (probe.py). The simplest that fit are then graded for real, with every
check, and the first to earn every point is written; a function none fits is left out, and
the output says why. A forbidden library the solution itself imports is allowed by the spec,
and the output says so.
"""
from __future__ import annotations

import asyncio
import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SpecError, SubmissionError
from ..grade import grade_notebook
from ..loader import code_cells, load_submission
from ..result import GradeResult
from ..spec import DEFAULT_FORBIDDEN, SCHEMA, Assignment, parse
from ..static_scan import matches, scan
from ..toml_text import dumps
from .candidates import candidates
from .probe import Fit, probe_all
from .signatures import notebook_functions

# The convention every setup spec can parse: the kernel for probing is set up from the spec's
# header alone (its policy, its support), exactly as grading will set it up.
SETUP_FUNCTION = {"name": "softmax", "convention": "softmax_rows"}


@dataclass
class Inferred:
    text: str                                   # the spec, as written
    functions: dict[str, Fit]                   # the convention chosen for each graded function
    left_out: dict[str, str] = field(default_factory=dict)    # function -> why
    undecided: dict[str, list[str]] = field(default_factory=dict)
    allowed: list[str] = field(default_factory=list)          # forbidden libraries the solution uses
    result: GradeResult | None = None           # the solution graded with the spec


def describe(table: dict) -> str:
    """A convention table in words: each parameter's role, then what is not the default."""
    params = []
    for p in table["params"]:
        role = p["role"] if p["role"] != "dict" else \
            "a dict of " + " and ".join(f"{k}={r}" for k, r in p["keys"].items())
        extra = [f"form {p['form']}" if "form" in p else "", f"head {p['head']}" if "head" in p else "",
                 f"{p['heads']} heads" if "heads" in p else ""]
        extra = [e for e in extra if e]
        params.append(f"{p['name']}={role}" + (f" ({', '.join(extra)})" if extra else ""))
    words = [", ".join(params)]
    if table.get("tokens") == "columns":
        words.append("tokens as columns")
    if table.get("weights") == "out_in":
        words.append("framework layout x @ W.T")
    if "axis" in table:
        words.append(f"softmax over axis {table['axis']}")
    if table.get("scaled") is False:
        words.append("unscaled")
    if table.get("square"):
        words.append("d_k = D")
    if table.get("causal"):
        words.append("causal mask built inside")
    if "fully_masked" in table:
        words.append(f"a fully masked row gives {table['fully_masked']}")
    returns = table["returns"]
    if isinstance(returns, dict):
        shown = "a dict: " + ", ".join(f"{k!r} the {part}" for part, k in returns.items())
    elif isinstance(returns, list):
        shown = "(" + ", ".join(returns) + ")"
    else:
        shown = returns
    if table.get("per_head_returns") == "axis":
        shown += ", per head along a heads axis"
    return "; ".join([*words, f"returns {shown}"])


# A choice that only narrows the cases (d_k = D) fits whenever the general one does: never undecided.
NARROWING = {("square", True)}


def _choice_words(dim: str, option) -> str:
    if dim.startswith("form:"):
        return f"{dim.split(':', 1)[1]} in form {option}"
    return f"{dim} = {str(option).lower() if isinstance(option, bool) else option}"


def _differences(chosen: Fit, other: Fit) -> str | None:
    """What sets another fitting candidate apart from the chosen one, or None when it only
    narrows the chosen one's cases."""
    mine, theirs = dict(chosen.choices), dict(other.choices)
    changed = [(dim, option) for dim, option in theirs.items() if dim != "role" and mine.get(dim) != option]
    if any(change in NARROWING for change in changed):
        return None
    words = [label for dim, label in other.choices if dim == "role" and (dim, label) not in chosen.choices]
    words += [_choice_words(dim, option) for dim, option in changed]
    if other.table.get("returns") != chosen.table.get("returns"):
        words.append(f"returns {other.table['returns']}")
    return ", ".join(words) or None


def _header(name: str, solution: Path, allowed: list[str], support: Path | None, output: Path) -> dict:
    header: dict = {"name": name, "title": f"Proposed from {solution.name}"}
    if support is not None:
        if "support" not in SCHEMA[""]:
            raise SpecError("--support needs course support modules in specs (a spec's `support`), which this "
                            "grader does not have yet")
        header["support"] = os.path.relpath(support.resolve(), output.resolve().parent)
    if allowed:
        header["policy"] = {"forbidden": [f for f in DEFAULT_FORBIDDEN if f not in allowed]}
    return header


def _spec_text(header: dict, chosen: dict[str, Fit], solution: Path) -> str:
    functions = [{"name": name, "convention": {"description": describe(fit.table), **fit.table}}
                 for name, fit in chosen.items()]
    return dumps({**header, "functions": functions},
                 f"Proposed by `grader spec infer` from {solution.name}, and graded on it at full marks.\n"
                 "Check it with: grader spec check SPEC SOLUTION")


def _setup(header: dict, source: str) -> Assignment:
    return replace(parse(dumps({**header, "functions": [SETUP_FUNCTION]}), source), functions=())


def _points_lost(result: GradeResult, name: str) -> str | None:
    """Why `name` did not earn every point, or None when it did."""
    checks = [c for c in result.checks if c.function == name]
    lost = [c for c in checks if c.points < c.max_points]
    if result.status == "graded" and checks and not lost:
        return None
    if not lost:
        return f"it could not be graded ({result.status})"
    return f"with the simplest fitting convention it lost {lost[0].kind}: {lost[0].message.splitlines()[0][:160]}"


def infer(solution: Path, output: Path, settings, only: list[str] | None = None,
          support: Path | None = None) -> Inferred:
    """The proposed spec for `solution`, graded on it; raises SpecError when nothing fits."""
    if support is not None and not support.is_dir():
        raise SubmissionError(f"--support: no such folder: {support}")
    nb = load_submission(solution)
    signatures = notebook_functions(nb)
    if only:
        known = {s.name for s in signatures}
        missing = [name for name in only if name not in known]
        if missing:
            raise SubmissionError(f"{solution.name} defines no function {missing[0]!r} that takes parameters "
                                  f"(it defines: {', '.join(sorted(known)) or 'none'})")
        signatures = [s for s in signatures if s.name in only]
    # What the solution imports, and reaches through what it imported (`scipy.special.logsumexp`
    # after `import scipy`): a forbidden library there is the course's own choice.
    found = scan(code_cells(nb), {s.name for s in signatures})
    modules = [module for _, _, module in found.imports] + [m for ms in found.function_imports.values() for m in ms]
    allowed = sorted({hit for module in modules if (hit := matches(module, DEFAULT_FORBIDDEN))})
    header = _header(output.stem, solution, allowed, support, output)
    inferred = Inferred("", {}, allowed=allowed)
    proposals = []
    for signature in signatures:
        proposed = candidates(signature)
        if proposed.found:
            proposals.append((signature, proposed.found))
        else:
            inferred.left_out[signature.name] = proposed.why_none
    setup = _setup(header, str(output))
    probed = asyncio.run(probe_all(copy.deepcopy(nb), setup, proposals, settings, setup.tolerance))
    fits = {}
    for name, result in probed.items():
        if result.fits:
            fits[name] = result.fits
        else:
            inferred.left_out[name] = f"no candidate convention fits: {result.why_none or 'none was tried'}"
    tried = {name: 0 for name in fits}
    while tried:
        chosen = {name: fits[name][index] for name, index in tried.items()}
        text = _spec_text(header, chosen, solution)
        assignment = replace(parse(text, str(output)), source_file="")
        # Each run gets the notebook as read: running one changes it (the rest of a failed cell).
        result = asyncio.run(grade_notebook(copy.deepcopy(nb), assignment, settings, solution.name))
        lost = {name: why for name in chosen if (why := _points_lost(result, name))}
        if not lost:
            inferred.text, inferred.functions, inferred.result = text, chosen, result
            break
        for name, why in lost.items():
            tried[name] += 1
            if tried[name] >= len(fits[name]):
                del tried[name]
                inferred.left_out[name] = why
    if not inferred.functions:
        reasons = "; ".join(f"{name}: {why}" for name, why in inferred.left_out.items())
        raise SpecError(f"nothing fits: no function of {solution.name} could be graded at full marks by any "
                        f"convention ({reasons or 'it defines no function that takes parameters'})")
    for name, fit in inferred.functions.items():
        others = [words for other in fits[name] if other is not fit and (words := _differences(fit, other))]
        if others:
            inferred.undecided[name] = others[:2]
    return inferred

