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
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.errors import SpecError, SubmissionError
from grader.grade import grade_notebook
from grader.intake.notebook import code_cells, load_submission
from grader.result import GradeResult
from grader.course.spec import DEFAULT_FORBIDDEN, Assignment, FunctionSpec, parse
from grader.intake.source_scan import matches, scan
from grader.toml_text import dumps
from grader.authoring.spec_tools.backward_unit import backward_candidates, left_on_layers
from grader.authoring.spec_tools.candidates import candidates, class_table
from grader.authoring.spec_tools.probe import Fit, probe_all
from grader.authoring.spec_tools.words import describe, differences
from grader.authoring.spec_tools.helpers import helpers, kept_as_tasks
from grader.authoring.spec_tools.signatures import (notebook_class_signatures, notebook_classes,
    notebook_functions, uncallable_functions, why_no_function)

# The convention every setup spec can parse: the kernel for probing is set up from the spec's
# header alone (its policy, its support), exactly as grading will set it up.
SETUP_FUNCTION = {"name": "softmax", "convention": "softmax_rows"}


@dataclass
class Inferred:
    text: str                                   # the spec, as written
    functions: dict[str, Fit]                   # the convention chosen for each graded function
    left_out: dict[str, str] = field(default_factory=dict)    # function -> why
    # function -> the other conventions that also earn every point, in words
    undecided: dict[str, list[str]] = field(default_factory=dict)
    allowed: list[str] = field(default_factory=list)          # forbidden libraries the solution uses
    score: tuple[float, float] = (0.0, 0.0)     # what the solution earns graded with the spec, of how much
    cell_errors: list[str] = field(default_factory=list)     # the solution's cells that raised, in words
    naming: str = ""        # where the spec's name and title, which every student sees, came from


def _header(name: str, title: str, allowed: list[str], support: Path | None, output: Path) -> dict:
    header: dict = {"name": name, "title": title}
    if support is not None:
        # A folder with an __init__.py is the course's package (imported by its folder's name,
        # relative imports included); any other folder holds top-level modules.
        table = {"path": os.path.relpath(support.resolve(), output.resolve().parent)}
        if (support / "__init__.py").is_file():
            table = {"package": support.resolve().name, **table}
        header["support"] = table
    if allowed:
        header["policy"] = {"forbidden": [f for f in DEFAULT_FORBIDDEN if f not in allowed]}
    return header


# A notebook's title: its first Markdown heading, as Jupyter shows it.
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def notebook_title(nb) -> str | None:
    """The text of the notebook's first Markdown heading, without its markup, or None."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (found := HEADING.search(cell.source)):
            text = re.sub(r"[*_`]|\[([^\]]*)\]\([^)]*\)", r"\1", found.group(1)).strip()
            if text:
                return text[:120]
    return None


def slug(title: str) -> str:
    """A spec name from a title: lowercase words joined by hyphens."""
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))[:60]


def _spec_text(header: dict, chosen: dict[str, Fit], solution: Path) -> str:
    functions = [{"name": name, "convention": {"description": describe(fit.table), **fit.table}}
                 for name, fit in chosen.items()]
    return dumps({**header, "functions": functions},
                 f"Proposed by `grader spec infer` from {solution.name}, and graded on it at full marks.\n"
                 "Check it with: grader spec check SPEC SOLUTION")


def _setup(header: dict, source: str, folder: Path) -> Assignment:
    return replace(parse(dumps({**header, "functions": [SETUP_FUNCTION]}), source, folder), functions=())


def _points_lost(result: GradeResult, name: str) -> str | None:
    """Why the function graded as `name` did not earn every point, or None when it did."""
    checks = [c for c in result.checks if c.function == name]
    lost = [c for c in checks if c.points < c.max_points]
    if result.status == "graded" and checks and not lost:
        return None
    if not lost:
        return f"it could not be graded ({result.status})"
    return f"graded with each convention that fit the probe, it lost points (the last lost {lost[0].kind}: " \
           f"{lost[0].message.splitlines()[0][:160]})"


# Said of a function left out that calls tanh: additive (Bahdanau) scores are a convention whose
# roles its parameters' names may not have said.
ADDITIVE = ("; it calls tanh: for additive (Bahdanau) scores, v^T tanh(W_1 q + W_2 k), give its score network "
            "the roles score_wq and score_wk (or score_w, one weight on [q; k]) and score_v, beside q, k and v "
            "(or kv, keys that are the values)")


# Other conventions graded beside the chosen one, each as a function of its own in the same run.
MAX_OTHERS = 4


def _others(chosen: Fit, later: list[Fit]) -> list[tuple[int, Fit, str]]:
    """Up to MAX_OTHERS later fits that differ from the chosen one, numbered from 1, each with
    what sets it apart in words; those that only narrow the chosen one's cases (square) too,
    since they earn full marks for students the chosen one does not."""
    found = [(other, words) for other in later if (words := differences(chosen, other))]
    return [(number, other, words) for number, (other, words) in enumerate(found[:MAX_OTHERS], 1)]


# The number a function's fit on any leading axes is graded as, after its other alternatives.
ANY_AXES_NUMBER = MAX_OTHERS + 1


def _any_axes(fits: list[Fit]) -> tuple[Fit, Fit] | None:
    """The first batched fit of `fits` (the chosen one, then the others graded beside it), and
    that fit on any leading axes (batch = "any": the same calls, the batch on two leading axes);
    None when none is batched."""
    for fit in fits:
        if fit.table.get("batch") is True:
            choices = tuple(("batch", "any") if c == ("batch", True) else c for c in fit.choices)
            return fit, Fit({**fit.table, "batch": "any"}, choices, fit.rank)
    return None


def _alternative(name: str, fit: Fit, number: int) -> FunctionSpec:
    """Another convention that fit the probe, graded beside the chosen one in the same run: a
    function of its own name in the result, calling the solution's `name` (as an alias)."""
    fn = parse(dumps({"name": "alternative", "functions": [{"name": name, "convention": fit.table}]}),
               "alternative").functions[0]
    return replace(fn, name=f"{name} (alternative {number})", aliases=(name,))


def _choose_any_axes(name: str, chosen: dict[str, Fit], full: list[tuple[Fit, str]],
                     on_any: tuple[Fit, Fit] | None, written_for_any: bool, result: GradeResult) -> str:
    """Where the solution earns every point with its first batched fit both as it is (one
    leading axis) and on any leading axes, say so among the alternatives (`full`); when its
    source is written for any leading axes, choose the latter instead (`chosen[name]`, and
    `full` in words from it). Returns the name the chosen convention was graded under."""
    if on_any is None or _points_lost(result, f"{name} (alternative {ANY_AXES_NUMBER})"):
        return name
    one_axis, fit = on_any
    if one_axis is not chosen[name] and all(one_axis is not other for other, _ in full):
        return name   # the one-axis form lost points: neither is proposed
    if not written_for_any:
        full.append((fit, differences(chosen[name], fit) or ""))
        return name
    previous = chosen[name]
    chosen[name] = fit
    full[:] = [(other, words) for other in [previous, *(o for o, _ in full)] if (words := differences(fit, other))]
    return f"{name} (alternative {ANY_AXES_NUMBER})"


def infer(solution: Path, output: Path, settings, only: list[str] | None = None,
          support: Path | None = None, name: str | None = None, title: str | None = None) -> Inferred:
    """The proposed spec for `solution`, graded on it; raises SpecError when nothing fits. Its
    name and title, which every student sees, are `name` and `title` when given, else read off
    the notebook's title (notebook_title), and said to be so (Inferred.naming)."""
    if support is not None and not support.is_dir():
        raise SubmissionError(f"--support: no such folder: {support}")
    nb = load_submission(solution)
    signatures = notebook_functions(nb)
    classes, not_modules = notebook_class_signatures(nb)
    if only:
        known = {s.name for s in signatures} | set(notebook_classes(nb))
        missing = [name for name in only if name not in known]
        if missing:
            raise SubmissionError(f"{solution.name} defines no function {missing[0]!r} that takes parameters "
                                  f"(it defines: {', '.join(sorted(known)) or 'none'})")
        signatures = [s for s in signatures if s.name in only]
    else:
        layers = {c.name: len(c.method.params) for c in classes}
        own_helpers = helpers(nb, signatures, layers)
        signatures = [s for s in signatures if s.name not in own_helpers]
    # What the solution imports, and reaches through what it imported (`scipy.special.logsumexp`
    # after `import scipy`): a forbidden library there is the course's own choice.
    found = scan(code_cells(nb), {s.name for s in signatures})
    modules = [module for _, _, module in found.imports] + [m for ms in found.function_imports.values() for m in ms]
    allowed = sorted({hit for module in modules if (hit := matches(module, DEFAULT_FORBIDDEN))})
    found_title = notebook_title(nb)
    title_from = "given" if title else "the notebook's first heading" if found_title else \
        "the spec's file name: the notebook has no heading"
    title = title or found_title or output.stem
    name = name or slug(title) or output.stem
    header = _header(name, title, allowed, support, output)
    naming = (f"name {name!r} and title {title!r} (the title: {title_from}): every student sees them; "
              "give --name and --title, or edit the spec")
    inferred = Inferred("", {}, allowed=allowed, naming=naming)
    if not only:
        inferred.left_out.update(own_helpers)
    every_class = {c.name: c for c in classes}   # a course's layers among them, helpers or not
    classes = [replace(c, set_later=kept_as_tasks(nb, c.set_later)) for c in classes
               if only or c.name not in own_helpers]
    not_modules = {name: why for name, why in not_modules.items() if only or name not in own_helpers}
    if only:
        classes = [c for c in classes if c.name in only]
        not_modules = {name: why for name, why in not_modules.items() if name in only}
    inferred.left_out.update(not_modules)
    inferred.left_out.update({name: why for name, why in uncallable_functions(nb).items() if not only or name in only})
    proposals = []
    for signature in signatures:
        proposed = candidates(signature)
        if proposed.found:
            proposals.append((signature, proposed.found))
        else:
            inferred.left_out[signature.name] = proposed.why_none
    for module in classes:
        # A class is graded as its method, called on an object made as its source says.
        table, why = class_table(module)
        offered = candidates(module.graded, table) if table else None
        if offered is not None and offered.found:
            proposals.append((module.graded, offered.found))
            # Its backward pass, graded after its forward on the same object, where it has one.
            backward = backward_candidates(module, offered.found,
                                           left_on_layers(module, every_class, lambda found: kept_as_tasks(nb, found)))
            if backward is not None:
                proposals.append(backward)
        else:
            inferred.left_out[module.name] = f"a class: {why or (offered.why_none if offered else '')}"
    setup = _setup(header, str(output), output.resolve().parent)
    probed = asyncio.run(probe_all(copy.deepcopy(nb), setup, proposals, settings, setup.tolerance))
    fits = {}
    for name, fitted in probed.items():
        if fitted.fits:
            fits[name] = fitted.fits
        else:
            kind = "a class: " if name in {c.name for c in classes} else ""
            inferred.left_out[name] = f"{kind}no candidate convention fits: {fitted.why_none or 'none was tried'}"
    for signature in signatures:
        # A score network takes the queries, keys and its weights: a tanh of one argument (an
        # activation such as GELU's) is not one.
        if signature.name in inferred.left_out and "tanh" in signature.calls and len(signature.params) >= 3:
            inferred.left_out[signature.name] += ADDITIVE
    # The simplest fit of each function is graded with every check, with up to two others that
    # fit the probe in other ways beside it (what the output calls undecided); a function whose
    # choice loses points is graded again with its next fit.
    any_axes = {s.name: s.any_axes for s, _ in proposals}
    tried = {name: 0 for name in fits}
    while tried:
        chosen = {name: fits[name][index] for name, index in tried.items()}
        others = {name: _others(chosen[name], fits[name][tried[name] + 1:]) for name in chosen}
        # Each function's first batched fit is graded on any leading axes too (_choose_any_axes).
        on_any = {name: pair for name in chosen
                  if (pair := _any_axes([chosen[name], *(other for _, other, _ in others[name])]))}
        text = _spec_text(header, chosen, solution)
        assignment = parse(text, str(output), output.resolve().parent)
        beside = tuple(_alternative(name, other, number) for name in chosen for number, other, _ in others[name])
        beside += tuple(_alternative(name, fit, ANY_AXES_NUMBER) for name, (_, fit) in on_any.items())
        # Each run gets the notebook as read: running one changes it (the rest of a failed cell).
        result = asyncio.run(grade_notebook(copy.deepcopy(nb), replace(assignment, functions=assignment.functions
                                                                       + beside), settings, solution.name))
        lost = {name: loss for name in chosen if (loss := _points_lost(result, name))}
        if not lost:
            # The solution's own faults: the spec is inferred from what ran, which staff should know.
            inferred.cell_errors = [f"cell {e.cell + 1} raised {e.ename or 'an error'}: {e.evalue}"
                                    for e in result.errors if e.kind == "error"]
            graded_as = {}
            for name in chosen:
                full = [(other, words) for number, other, words in others[name]
                        if not _points_lost(result, f"{name} (alternative {number})")]
                graded_as[name] = _choose_any_axes(name, chosen, full, on_any.get(name), any_axes[name], result)
                if full:
                    inferred.undecided[name] = [words for _, words in full]
            inferred.text, inferred.functions = _spec_text(header, chosen, solution), chosen
            checks = [c for c in result.checks if c.function in graded_as.values()]
            inferred.score = (sum(c.points for c in checks), sum(c.max_points for c in checks))
            break
        for name, why in lost.items():
            tried[name] += 1
            if tried[name] >= len(fits[name]):
                del tried[name]
                inferred.left_out[name] = why
    if not inferred.functions:
        reasons = "; ".join(f"{name}: {why}" for name, why in inferred.left_out.items())
        raise SpecError(f"nothing fits: no function of {solution.name} could be graded at full marks by any "
                        f"convention ({reasons or why_no_function(nb)})")
    return inferred

