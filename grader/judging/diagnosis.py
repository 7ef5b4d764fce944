"""Name the mistake behind a failed check, by comparing what the student returned with the
known mistakes computed on the same inputs; when none matches, say where the result is off.

A mistake (or a pair of them) is named only when its prediction matches everything the
student returned on the check's inputs and differs from the reference there: a mistake that
changes nothing on these inputs explains nothing. When none does, what is still known is said
(which returned parts are right, how the weights are normalised), never only "no match".
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grader.reference.mistakes import HARMLESS

from grader.judging.checks import Outcome, Probe, probe_tolerance
from grader.calling.conventions import PART_WORDS, WEIGHT_PARTS, Convention
from grader.judging.explain import (CORRECT, HANDED_BACK, Predictions, agrees, differs_from_reference, explanations,
                                   precision_agrees, shown_precisions, trivial)
from grader.calling.returns import largest_difference, wanted
from grader.result import FunctionInfo
from grader.course.spec import FunctionSpec

# inputs_unmodified and forbidden_libraries judge no value; memory_layout and dtypes compare a
# function with itself, so a known mistake (a computation on the case) explains none of their failures.
NOT_DIAGNOSED = ("inputs_unmodified", "forbidden_libraries", "memory_layout", "dtypes")
# Checks on scores so large that the softmax saturates: each query's weight goes to one key, which
# hides most of a mistake's effect (biases left out of Q and K barely move which key that is). A
# mistake named there must also explain what the function returned on ordinary inputs (the
# non-answer rule's evidence), so that it never names what the checks on those rule out.
SATURATED = ("numerical_stability",)
# How a part not returned is named in a diagnosis: "weights not returned".
NOT_RETURNED_WORDS = {"output": "output", "weights": "weights", "weights_per_head": "weights",
                      "scores": "scores", "scores_per_head": "scores", "heads": "heads' outputs",
                      "q": "Q", "k": "K", "v": "V", "mean_weights": "weights averaged over the heads"}


def _weights_only(observed) -> list:
    """The observations narrowed to the attention weights."""
    return [(case, {k: v for k, v in values.items() if k in WEIGHT_PARTS}, tol)
            for case, values, tol in observed]


def locate(conv: Convention, results, tol, message: str = "") -> str:
    """Where the first failing case's output is furthest off: row, column and head. A message
    that already gives the index gets only what it lacks, the head."""
    for probe, outcome in results:
        actual = outcome.parts.values.get("output")
        wanted = conv.expected_parts(probe.case).get("output")
        if actual is None or wanted is None or actual.shape != wanted.shape:
            continue
        largest = largest_difference(actual, wanted, probe_tolerance(probe, tol))
        if largest is None:
            continue
        index, _ = largest
        (row, col), element = index[-2:], index[:-2]   # a batch's element comes first
        heads = len(probe.case.heads)
        head = col // (wanted.shape[1] // heads) + 1 if heads > 1 and probe.case.wo is None else None
        if "at index" in message:
            return f" It is in head {head}." if head else ""
        where = (f"batch element {element[0]}, " if element else "") + f"token {row}, feature {col}" + (
            f" (head {head})" if head else "")
        return f" The largest difference is at {where}."
    return ""


def _finite_evidence(conv: Convention, explanation, observed, predictions: Predictions) -> bool:
    """The explanation differs from the reference at some entry where both are finite, unless it
    names the overflow itself. Where exp() overflows, a softmax saturates and many mistakes leave
    NaN in the same places: those places alone tell an overflow, not which other mistake it is."""
    if any(m.id in HARMLESS for m in explanation.mistakes):
        return True
    for case, values, tol in observed:
        wanted, reference = predictions.parts(conv, explanation, case), predictions.parts(conv, CORRECT, case)
        for part in values:
            if part not in wanted:
                continue
            pairs = zip(*(v if isinstance(v, list) else [v] for v in (wanted[part], reference[part])))
            for w, r in pairs:
                w, r = np.asarray(w, dtype=np.float64), np.asarray(r, dtype=np.float64)
                if w.shape != r.shape:
                    return True
                both = np.isfinite(w) & np.isfinite(r)
                if np.any(np.abs(w - r)[both] > tol.atol + tol.rtol * np.abs(r)[both]):
                    return True
    return False


def _observed(results: list[tuple[Probe, Outcome]], tol) -> list:
    """(case, returned parts, tolerance) of each call that returned readable parts."""
    return [(p.case, o.parts.values, probe_tolerance(p, tol)) for p, o in results
            if o.status == "ok" and o.parts is not None and o.parts.values]


def diagnose(fn: FunctionSpec, kind: str, results: list[tuple[Probe, Outcome]], tol, info: FunctionInfo,
             predictions: Predictions, message: str = "",
             ordinary: Sequence[tuple[Probe, Outcome]] = ()) -> tuple[str | None, str]:
    """(diagnosis and what it means, or None and a sentence to add to the check's `message`)
    for a failed check; `ordinary` holds the function's calls on ordinary inputs, which a
    mistake named on a SATURATED check must explain too."""
    if kind in NOT_DIAGNOSED:
        return None, ""
    usable = [(p, o) for p, o in results if o.status == "ok" and o.parts is not None and o.parts.values]
    if not usable:
        return None, ""
    conv = fn.convention
    observed = _observed(usable, tol)
    also = _observed(list(ordinary), tol) if kind in SATURATED else []
    right = agrees(conv, CORRECT, observed, predictions)
    missing = [part for part in conv.returns if any(not o.ok_parts.came_back(part) for _, o in usable)]
    if missing and (right or kind == "return_structure"):
        return not_returned_diagnosis(conv, missing)
    if right:
        return None, ""   # what came back is right: the failure is an unreadable part
    # What is only an argument handed back (X where scores are so large that a mistake's weights
    # are the identity) is explained by no computation.
    handed_back = all(trivial(v, o.sent) == HANDED_BACK for _, o in usable for v in o.ok_parts.values.values())
    for explanation in () if handed_back else explanations(conv):
        if agrees(conv, explanation, observed, predictions) and \
                differs_from_reference(conv, explanation, observed, predictions) and \
                _finite_evidence(conv, explanation, observed, predictions) and \
                (not also or agrees(conv, explanation, also, predictions)):
            return explanation.title, f" {explanation.advice}"
    slip = None if handed_back else precision_slip(conv, observed, predictions)
    if slip:
        return slip
    if info.get("globals"):
        shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
        title = f"reads notebook globals ({', '.join(info['globals'])})"
        return title, (f" The function reads the notebook's globals ({shown}) instead of taking "
                       "sizes from its arguments, so it only works for the notebook's own shapes. Derive sizes "
                       "from the arguments (for example their .shape).")
    if "output" in conv.returns and agrees(conv, CORRECT, _weights_only(observed), predictions):
        title = "weights right but combined wrongly with V"
        return title, (" Your attention weights match the reference, so the error "
                       "comes after the softmax: look at how the weights multiply V (output = weights @ V) "
                       "and how the heads are put together.")
    return None, " " + what_is_known(conv, observed, predictions) + locate(conv, usable, tol, message)


def not_returned_diagnosis(conv: Convention, missing: list[str]) -> tuple[str, str]:
    """A function that returns fewer parts than asked for, the ones it returns right: the
    mistake is the parts it leaves out ("weights not returned"), and what it returns is graded."""
    title = " and ".join(dict.fromkeys(NOT_RETURNED_WORDS[p] for p in missing)) + " not returned"
    returned = [PART_WORDS[p] for p in conv.returns if p not in missing]
    left_out = " and the ".join(PART_WORDS[p] for p in missing)
    return title, (f" The function returns the {' and the '.join(returned)} but not the {left_out}, where "
                   f"{wanted(conv)} is asked for. What it returns is graded, and earns its share of the checks "
                   f"that compare values; return the {left_out} too.")


def precision_slip(conv: Convention, observed, predictions: Predictions) -> tuple[str, str] | None:
    """(diagnosis, what it means) when what was returned is the reference, or a known mistake,
    at a reduced precision (rounded, or computed in float16): the precision slip is named, after
    the mistake if there is one."""
    shown = shown_precisions(observed)
    for explanation in (CORRECT, *explanations(conv)):
        precision = precision_agrees(conv, explanation, observed, predictions, shown)
        if precision is None:
            continue
        slip = precision.slip
        said = f" {slip.explanation.format(precision=precision.words)} {slip.hint}"
        if explanation.is_reference:
            return slip.title, said
        return f"{explanation.title}, and {slip.title}", f" {explanation.advice}{said}"
    return None


def _weight_matrices(values: dict) -> list:
    """Every returned weight matrix of one call (each head's, each batch element's)."""
    found = []
    for part in WEIGHT_PARTS:
        for value in (values[part] if isinstance(values.get(part), list) else [values.get(part)]):
            if value is not None and getattr(value, "ndim", 0) >= 2:
                found += list(np.asarray(value, dtype=np.float64).reshape(-1, *value.shape[-2:]))
    return found


# How far from 1 a sum of n weights may be and still be said to sum to 1: weights in half
# precision are off by up to about SUM_SLACK in all, weights rounded to 4 decimals (as a sheet
# prints them) by up to WEIGHT_ROUNDING each. A mistaken normalisation is off by far more.
SUM_SLACK = 1e-3
WEIGHT_ROUNDING = 5e-5
SUM_SLACK_MAX = 1e-2


def _sums_to_one(matrices: list, axis) -> bool:
    """Every line of every matrix along `axis` sums to 1, to the precision its weights were given
    in. A line of NaN alone (a masked key's column, 0/0, under a softmax over the queries) holds
    no weight to measure, so it says nothing either way."""
    def measured(m):
        sums, count = np.nansum(m, axis=axis), np.sum(np.isfinite(m), axis=axis)
        weighed = ~np.all(np.isnan(m), axis=axis)
        return sums[weighed], count[weighed]
    lines = [measured(np.asarray(m, dtype=np.float64)) for m in matrices]
    return any(len(sums) for sums, _ in lines) and all(
        np.all(np.abs(sums - 1.0) <= np.minimum(SUM_SLACK + count * WEIGHT_ROUNDING, SUM_SLACK_MAX))
        for sums, count in lines)


def what_is_known(conv: Convention, observed, predictions: Predictions) -> str:
    """When no known mistake (or pair) explains a failure: what the grader can still tell from
    the returned values, said in the student's own layout (rows are queries unless the tokens
    are columns): which returned parts are right, and how the weights are normalised."""
    facts = []
    right = [PART_WORDS[part] for part in ("q", "k", "v", "scores", "scores_per_head")
             if any(part in values for _, values, _ in observed)
             and agrees(conv, CORRECT, [(c, {part: v[part]}, t) for c, v, t in observed if part in v], predictions)]
    if right:
        facts.append(f"Your {' and '.join(right)} match the reference, so the mistake comes after them.")
    matrices = [m for _, values, _ in observed for m in _weight_matrices(values)]
    if matrices:
        row, column = ("column", "row") if conv.columns else ("row", "column")
        by_query, by_key = _sums_to_one(matrices, -1), _sums_to_one(matrices, -2)
        negative = any(np.nanmin(m) < -1e-12 for m in matrices)
        if by_query:
            facts.append(f"Your weights sum to 1 along each {row}, as a softmax over the keys gives.")
        elif by_key:
            facts.append(f"Your weights do not sum to 1 along each {row}; they do along each {column}.")
        elif _sums_to_one([m[None] for m in matrices], (-2, -1)):
            facts.append(f"Your weights do not sum to 1 along each {row}; each matrix sums to 1 as a whole.")
        else:
            facts.append(f"Your weights do not sum to 1 along each {row}, nor along each {column}.")
        if negative:
            facts.append("Some of your weights are negative, which no softmax gives.")
    return " ".join(facts) or "No known mistake matches."
