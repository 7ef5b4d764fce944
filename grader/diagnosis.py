"""Name the mistake behind a failed check, by comparing what the student returned with the
known mistakes computed on the same inputs; when none matches, say where the result is off."""
from __future__ import annotations

import numpy as np

from grader.reference.mistakes import MISTAKES, Mistake, mistaken_attention

from .checks import FLOAT32_LOOSENING, Outcome, Probe
from .conventions import Convention

NOT_DIAGNOSED = ("inputs_unmodified", "forbidden_libraries")


def features(conv: Convention) -> set[str]:
    """What a convention's functions compute, which decides the mistakes they can make."""
    computes_scores = conv.name not in ("softmax_rows", "qkv_projections")
    found = set()
    if computes_scores:
        found.add("scores")
        if conv.scaled:
            found.add("scaled")
    if conv.name not in ("scores", "qkv_projections"):
        found.add("softmax")
    if conv.params[0] == "X" and conv.name != "qkv_projections":
        found.add("projections")
    if conv.params[0] in ("X", "Q") and conv.heads != "one" or conv.params[0] == "X" and not conv.square:
        found.add("model_dim")
    if conv.heads == "many":
        found.add("fused_heads")
    if conv.heads != "one":
        found.add("heads")
    if conv.projection:
        found.add("projection")
    if conv.biases:
        found.add("biases")
    if conv.square:
        found.add("square")
    if "output" in conv.returns:
        found.add("output")
    return found


def applicable(conv: Convention) -> list[Mistake]:
    have = features(conv)
    return [m for m in MISTAKES if m.needs <= have]


def mistake_parts(conv: Convention, mistake: Mistake, case) -> dict:
    case = conv.prepare(case)
    return conv.expected(mistaken_attention(case, mistake.variant), case)


def same(actual, expected, rtol: float, atol: float) -> bool:
    """Equal within tolerance, with NaN and inf required in the same places."""
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            same(a, e, rtol, atol) for a, e in zip(actual, expected))
    if not isinstance(actual, np.ndarray) or actual.shape != expected.shape:
        return False
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    finite = np.isfinite(expected)
    if not np.array_equal(np.isfinite(actual), finite):
        return False
    return bool(np.allclose(actual[finite], expected[finite], rtol=rtol, atol=atol))


def _tolerance(probe: Probe, tol):
    return tol.loosened(FLOAT32_LOOSENING) if probe.variant == "float32" else tol


def _matches(conv, mistake, results, tol) -> bool:
    compared = False
    for probe, outcome in results:
        wanted = mistake_parts(conv, mistake, probe.case)
        t = _tolerance(probe, tol)
        for part, value in outcome.parts.values.items():
            if part in wanted:
                if not same(value, wanted[part], t.rtol, t.atol):
                    return False
                compared = True
    return compared


def _weights_right(conv, results, tol) -> bool:
    checked = False
    for probe, outcome in results:
        expected = conv.expected_parts(probe.case)
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


def diagnose(fn, kind: str, results: list[tuple[Probe, Outcome]], tol, info: dict) -> tuple[str | None, str]:
    """(diagnosis or None, sentence to add to the check's message) for a failed check."""
    if kind in NOT_DIAGNOSED:
        return None, ""
    usable = [(p, o) for p, o in results if o.status == "ok" and o.parts is not None]
    if not usable:
        return None, ""
    conv = fn.convention
    for mistake in applicable(conv):
        if _matches(conv, mistake, usable, tol):
            return mistake.title, f" {mistake.explanation} {mistake.hint}"
    if info.get("globals"):
        shown = ", ".join(f"{k} = {v}" for k, v in info["globals"].items())
        title = f"reads notebook globals ({', '.join(info['globals'])})"
        return title, (f" The function reads the notebook's globals ({shown}) instead of taking "
                       "sizes from its arguments, so it only works for the notebook's own shapes. Derive sizes "
                       "from the arguments (for example their .shape).")
    if "output" in conv.returns and _weights_right(conv, usable, tol):
        title = "weights right but combined wrongly with V"
        return title, (" Your attention weights match the reference, so the error "
                       "comes after the softmax: look at how the weights multiply V (output = weights @ V) "
                       "and how the heads are put together.")
    return None, " No known mistake matches." + locate(conv, usable, tol)
