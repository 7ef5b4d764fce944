"""Name the mistake behind a failed check, by comparing what the student returned with the
known mistakes computed on the same inputs; when none matches, say where the result is off.

A mistake (or a pair of them) is named only when its prediction matches everything the
student returned on the check's inputs and differs from the reference there: a mistake that
changes nothing on these inputs explains nothing.
"""
from __future__ import annotations

from .checks import Outcome, Probe, probe_tolerance
from .conventions import Convention
from .explain import CORRECT, Predictions, agrees, differs_from_reference, explanations
from .returns import largest_difference

NOT_DIAGNOSED = ("inputs_unmodified", "forbidden_libraries")


def _weights_only(observed) -> list:
    """The observations narrowed to the attention weights."""
    return [(case, {k: v for k, v in values.items() if k in ("weights", "weights_per_head")}, tol)
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
        (row, col), _ = largest
        heads = len(probe.case.heads)
        head = col // (wanted.shape[1] // heads) + 1 if heads > 1 and probe.case.wo is None else None
        if "at index" in message:
            return f" It is in head {head}." if head else ""
        where = f"token {row}, feature {col}" + (f" (head {head})" if head else "")
        return f" The largest difference is at {where}."
    return ""


def diagnose(fn, kind: str, results: list[tuple[Probe, Outcome]], tol, info: dict,
             predictions: Predictions, message: str = "") -> tuple[str | None, str]:
    """(diagnosis and what it means, or None and a sentence to add to the check's `message`)
    for a failed check."""
    if kind in NOT_DIAGNOSED:
        return None, ""
    usable = [(p, o) for p, o in results if o.status == "ok" and o.parts is not None and o.parts.values]
    if not usable:
        return None, ""
    conv = fn.convention
    observed = [(p.case, o.parts.values, probe_tolerance(p, tol)) for p, o in usable]
    if agrees(conv, CORRECT, observed, predictions):
        return None, ""   # what came back is right: the failure is a missing or unreadable part
    for explanation in explanations(conv):
        if agrees(conv, explanation, observed, predictions) and \
                differs_from_reference(conv, explanation, observed, predictions):
            return explanation.title, f" {explanation.advice}"
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
    return None, " No known mistake matches." + locate(conv, usable, tol, message)
