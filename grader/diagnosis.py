"""Name the mistake behind a failed check, by comparing what the student returned with the
known mistakes computed on the same inputs; when none matches, say where the result is off.

A mistake (or a pair of them) is named only when its prediction matches everything the
student returned on the check's inputs and differs from the reference there: a mistake that
changes nothing on these inputs explains nothing.
"""
from __future__ import annotations

import numpy as np

from .checks import FLOAT32_LOOSENING, Outcome, Probe
from .conventions import Convention
from .explain import CORRECT, Explanation, Predictions, explanations, same

NOT_DIAGNOSED = ("inputs_unmodified", "forbidden_libraries")


def _tolerance(probe: Probe, tol):
    return tol.loosened(FLOAT32_LOOSENING) if probe.variant == "float32" else tol


def _agrees(conv, explanation: Explanation, results, tol, predictions: Predictions) -> bool:
    """The explanation predicts every part the student returned, on every case."""
    compared = False
    for probe, outcome in results:
        wanted = predictions.parts(conv, explanation, probe.case)
        t = _tolerance(probe, tol)
        for part, value in outcome.parts.values.items():
            if part in wanted:
                if not same(value, wanted[part], t.rtol, t.atol):
                    return False
                compared = True
    return compared


def _differs_from_reference(conv, explanation: Explanation, results, tol, predictions: Predictions) -> bool:
    for probe, outcome in results:
        wanted = predictions.parts(conv, explanation, probe.case)
        reference = predictions.parts(conv, CORRECT, probe.case)
        t = _tolerance(probe, tol)
        if any(part in wanted and not same(wanted[part], reference[part], t.rtol, t.atol)
               for part in outcome.parts.values):
            return True
    return False


def _weights_right(conv, results, tol, predictions: Predictions) -> bool:
    checked = False
    for probe, outcome in results:
        expected = predictions.parts(conv, CORRECT, probe.case)
        for part in ("weights", "weights_per_head"):
            if part in expected and part in outcome.parts.values:
                t = _tolerance(probe, tol)
                if not same(outcome.parts.values[part], expected[part], t.rtol, t.atol):
                    return False
                checked = True
    return checked


def locate(conv: Convention, results, tol) -> str:
    """Where the first failing case is furthest off: row, column and head."""
    for probe, outcome in results:
        expected = conv.expected_parts(probe.case)
        actual = outcome.parts.values.get("output")
        wanted = expected.get("output")
        if actual is None or wanted is None or actual.shape != wanted.shape:
            continue
        gap = np.abs(np.nan_to_num(actual.astype(np.float64), nan=1e300) - wanted)
        if gap.max() <= tol.atol + tol.rtol * np.abs(wanted).max():
            continue
        row, col = np.unravel_index(int(np.argmax(gap)), gap.shape)
        heads = len(probe.case.heads)
        where = f"token {row}, feature {col}"
        if heads > 1 and probe.case.wo is None:
            where += f" (head {col // (wanted.shape[1] // heads) + 1})"
        return f" The largest difference is at {where} on {probe.label}."
    return ""


def diagnose(fn, kind: str, results: list[tuple[Probe, Outcome]], tol, info: dict,
             predictions: Predictions) -> tuple[str | None, str]:
    """(diagnosis or None, sentence to add to the check's message) for a failed check."""
    if kind in NOT_DIAGNOSED:
        return None, ""
    usable = [(p, o) for p, o in results if o.status == "ok" and o.parts is not None and o.parts.values]
    if not usable:
        return None, ""
    conv = fn.convention
    if _agrees(conv, CORRECT, usable, tol, predictions):
        return None, ""   # what came back is right: the failure is a missing or unreadable part
    for explanation in explanations(conv.name):
        if _agrees(conv, explanation, usable, tol, predictions) and \
                _differs_from_reference(conv, explanation, usable, tol, predictions):
            return explanation.title, f" {explanation.advice}"
    if info.get("globals"):
        shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
        title = f"reads notebook globals ({', '.join(info['globals'])})"
        return title, (f" The function reads the notebook's globals ({shown}) instead of taking "
                       "sizes from its arguments, so it only works for the notebook's own shapes. Derive sizes "
                       "from the arguments (for example their .shape).")
    if "output" in conv.returns and _weights_right(conv, usable, tol, predictions):
        title = "weights right but combined wrongly with V"
        return title, (" Your attention weights match the reference, so the error "
                       "comes after the softmax: look at how the weights multiply V (output = weights @ V) "
                       "and how the heads are put together.")
    return None, " No known mistake matches." + locate(conv, usable, tol)
