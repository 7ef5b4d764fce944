"""The non-answer rule: a function earns points only when it recognisably computes attention.

A function is recognised when, on inputs it cannot have seen in advance (the randomized cases
and random values in the sheet's shapes, see `checks.evidence_probes`), some part it returns
equals, within tolerance, what the reference or a known mistake (or two together) computes
there, and that value is not trivial: not constant, not the same row for every token, not
uniform along each row, not one of the function's own arguments. Returning zeros, None,
uniform weights, X, or X plus noise is never recognised, since none of them equals attention
on inputs drawn at grading time; a function with a known mistake still is, and keeps the
property points it truly earns.
"""
from __future__ import annotations

from .checks import Outcome, Probe
from .conventions import PART_WORDS, Convention
from .explain import CORRECT, Predictions, explanations, trivial
from .result import CheckResult
from .returns import same


def recognised(conv: Convention, results: list[tuple[Probe, Outcome]], tol, predictions: Predictions) -> bool:
    for probe, outcome in results:
        if outcome.status != "ok":
            continue
        for part, value in outcome.parts.values.items():
            if trivial(value, outcome.sent):
                continue
            for explanation in (CORRECT, *explanations(conv)):
                predicted = predictions.parts(conv, explanation, probe.case).get(part)
                if predicted is not None and same(value, predicted, tol) \
                        and trivial(predicted, outcome.sent) is None:
                    return True
    return False


def reason(results: list[tuple[Probe, Outcome]]) -> str:
    """Why a function was not recognised, in words a student can act on."""
    answered = [(p, o) for p, o in results if o.status == "ok"]
    if not answered:
        return "it returned no result on any of the randomized inputs"
    for _, outcome in answered:
        if not outcome.parts.values:
            returned = outcome.parts.returned
            return "it returns None" if returned == "NoneType" else f"nothing it returns can be read ({returned})"
    for _, outcome in answered:
        for part, value in outcome.parts.values.items():
            why = trivial(value, outcome.sent)
            if why:
                return f"what it returns as the {PART_WORDS[part]} is {why}"
    return "nothing it returns matches attention, or a known mistake in it, on the randomized inputs"


def withhold(checks: list[CheckResult], why: str) -> None:
    """Every check of a non-answer scores 0 and says why; informational and policy checks,
    which carry no points, are left as they are."""
    prefix = f"No points: this function does not compute attention yet ({why})."
    for c in checks:
        if not c.max_points:
            continue
        c.points, c.diagnosis, c.advice = 0.0, None, ""
        if c.status == "passed":
            c.status = "failed"
            c.message = f"{prefix} The property checked here holds, but it holds for a non-answer too."
        else:
            c.message = f"{prefix} {c.message}"
