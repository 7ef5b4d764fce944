"""The non-answer rule: a function earns points only when it recognisably computes attention.

A function is recognised when, on inputs it cannot have seen in advance (the randomized cases
and random values in the sheet's shapes, see `checks.evidence_probes`), some part it returns
equals, within tolerance, what the reference or a known mistake (or two together) computes
there, and that value is not trivial: not constant, not the same row for every token, not
uniform along each row, not one of the function's own arguments. Returning zeros, None,
uniform weights, X, or X plus noise is never recognised, since none of them equals attention
on inputs drawn at grading time; a function with a known mistake still is, and keeps the
property points it truly earns.

A function whose output matches nothing known is still a genuine attempt when its output
behaves as attention's does on probes the grader builds around one case (`attempt_probes`)
and judges itself (`attempt_problem`): weights that depend on the queries and on the keys,
applied to the values and mixing the tokens. Only values the grader computed and compared
decide it; what the function is called or says about itself never does.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from grader.calling import cases as make
from grader.judging.checks import Outcome, Probe
from grader.calling.conventions import PART_WORDS, Convention
from grader.judging.explain import CORRECT, Predictions, explanations, trivial
from grader.result import CheckResult
from grader.calling.returns import same


def recognised(conv: Convention, results: list[tuple[Probe, Outcome]], tol, predictions: Predictions) -> bool:
    for probe, outcome in results:
        if outcome.status != "ok":
            continue
        for part, value in outcome.ok_parts.values.items():
            if trivial(value, outcome.sent):
                continue
            for explanation in (CORRECT, *explanations(conv)):
                predicted = predictions.parts(conv, explanation, probe.case).get(part)
                if predicted is not None and same(value, predicted, tol) \
                        and trivial(predicted, outcome.sent) is None:
                    return True
    return False


def reason(results: list[tuple[Probe, Outcome]], attempt: str | None = None) -> str:
    """Why a function was not recognised, in words a student can act on; `attempt` is why it is
    not a genuine attempt either (attempt_problem), when that was asked."""
    answered = [(p, o) for p, o in results if o.status == "ok"]
    if not answered:
        return "it returned no result on any of the randomized inputs"
    for _, outcome in answered:
        if not outcome.ok_parts.values:
            returned = outcome.ok_parts.returned
            return "it returns None" if returned == "NoneType" else f"nothing it returns can be read ({returned})"
    for _, outcome in answered:
        for part, value in outcome.ok_parts.values.items():
            why = trivial(value, outcome.sent)
            if why:
                return f"what it returns as the {PART_WORDS[part]} is {why}"
    unmatched = "nothing it returns matches attention, or a known mistake in it, on the randomized inputs"
    return f"{unmatched}, and {attempt}" if attempt else unmatched


# The attempt probes, in order (see attempt_probes): three draws of the values and their affine
# combination; the keys, then the tokens, redrawn, each with the first two values; the keys
# nudged by NUDGE and by twice that; the first values changed at the first and last tokens only.
# Weights returned beside the output are judged on the first two values, the keys and the tokens.
ATTEMPT_LABELS = ("values 1", "values 2", "values 3", "values 1 - 2 + 3", "keys redrawn, values 1",
                  "keys redrawn, values 2", "tokens redrawn, values 1 kept", "tokens redrawn, values 2 kept",
                  "keys nudged once, values 1", "keys nudged twice, values 1", "values 1, two tokens' changed")
# Small enough that attention is linear in it (second-order terms ~ NUDGE**2), large enough to
# stand far above float64 rounding.
NUDGE = 1e-5
# Relative to the largest entry compared: what float64 rounding (or float32 inside a student's
# function) leaves of an identity, and what counts as a change.
ROUNDING = 1e-5
CHANGED = 1e-3


def _with_heads(case, heads, x=None):
    """The case (every element of a batch, which shares the weights) with other head weights,
    and other tokens for its first element."""
    heads = tuple(heads)
    return replace(case, heads=heads, x=case.x if x is None else x,
                   batch_rest=tuple(replace(e, heads=heads) for e in case.batch_rest))


def _full_row_rank(a: np.ndarray) -> bool:
    return np.linalg.matrix_rank(a) == a.shape[0]


def attempt_probes(conv: Convention, seed: int) -> list[Probe]:
    """Calls around the base case for the attempt test (ATTEMPT_LABELS): only the values, the
    keys or the tokens behind the queries and keys change between them, so the grader alone
    knows what attention does on each. None for a convention that returns no output."""
    if _attended_part(conv) is None:
        return []
    base = make.base_case(conv, seed)
    rng = np.random.default_rng(seed + 12)

    def drawn(a):
        return None if a is None else rng.normal(size=a.shape)

    values = [[(drawn(h.wv), drawn(h.bv)) for h in base.heads] for _ in range(3)]
    combined = [(a[0] - b[0] + c[0], None if a[1] is None else a[1] - b[1] + c[1]) for a, b, c in zip(*values)]
    x = base.x.astype(np.float64)
    tokens = rng.normal(size=x.shape)

    def kept(v):
        """The values v once the tokens are redrawn: in self-attention the value weights are
        solved for, so that V itself stays (exactly, as N <= D in the base case)."""
        if base.memory is not None:
            return v
        return [(np.linalg.pinv(tokens) @ (x @ wv), bv) for wv, bv in v]

    def case(label, v, wk=None, x=None):
        heads = [replace(h, wv=wv, bv=bv, wk=h.wk if wk is None else wk[i])
                 for i, (h, (wv, bv)) in enumerate(zip(base.heads, v))]
        return Probe(replace(_with_heads(base, heads, x), label=f"{base.label}: {label}"))

    keys = [drawn(h.wk) for h in base.heads]
    nudge = [drawn(h.wk) for h in base.heads]
    nudged = [[h.wk + k * NUDGE * step for h, k in zip(base.heads, nudge)] for step in (1, 2)]
    # Values that change at the first and the last token only (exactly where the values' sequence
    # has no more rows than columns, as the base case's N = 5 < D = 6; a memory of Lk > D rows
    # has not). Under a causal mask every query sees the first, and under one kept the wrong
    # way round the last: either way the tokens between them see a change.
    source = base.value_source.astype(np.float64)
    ends = []
    for wv, bv in values[0]:
        target = np.zeros((source.shape[0], wv.shape[1]))
        target[[0, -1]] = rng.normal(size=(2, wv.shape[1]))
        ends.append((wv + np.linalg.pinv(source) @ target, bv))
    labels = iter(ATTEMPT_LABELS)
    return [*(case(next(labels), v) for v in (*values, combined)),
            case(next(labels), values[0], wk=keys), case(next(labels), values[1], wk=keys),
            case(next(labels), kept(values[0]), x=tokens), case(next(labels), kept(values[1]), x=tokens),
            case(next(labels), values[0], wk=nudged[0]), case(next(labels), values[0], wk=nudged[1]),
            case(next(labels), ends)]


def _largest(*arrays) -> float:
    return max(float(np.abs(a).max(initial=0.0)) for a in arrays)


def _off(a, b) -> float:
    return float(np.abs(np.asarray(a) - b).max(initial=0.0))


def _attended_part(conv: Convention) -> str | None:
    """The part that holds the values once attended: the output, else the heads' outputs (a
    function that takes the heads already split returns those)."""
    return next((part for part in ("output", "heads") if part in conv.returns), None)


def _attended(conv: Convention, outcome: Outcome) -> np.ndarray | None:
    """The attended values one call returned, as one finite matrix (the heads side by side; a
    batch's first element), or None."""
    value = outcome.parts.values.get(_attended_part(conv)) if outcome.status == "ok" and outcome.parts else None
    if value is None:
        return None
    try:
        arrays = [np.asarray(v, dtype=np.float64) for v in (value if isinstance(value, list) else [value])]
        arrays = [a[0] if conv.batched else a for a in arrays]
        matrix = np.concatenate(arrays, axis=-1) if all(a.ndim == 2 for a in arrays) else None
    except (ValueError, IndexError, TypeError):
        return None
    return matrix if matrix is not None and np.all(np.isfinite(matrix)) else None


def _returned_weights(conv: Convention, outcome: Outcome) -> np.ndarray | None:
    """The weights one call returned, every head's (a batch's first element), flattened; None
    when it returned none that can be read."""
    value = next((outcome.ok_parts.values[p] for p in ("weights", "weights_per_head") if p in outcome.ok_parts.values),
                 None)
    try:
        arrays = [np.asarray(v, dtype=np.float64) for v in (value if isinstance(value, list) else [value])]
        flat = np.concatenate([(a[0] if conv.batched else a).ravel() for a in arrays])
    except (ValueError, IndexError, TypeError):
        return None
    return flat if np.all(np.isfinite(flat)) else None


def _weights_problem(conv: Convention, results: list[tuple[Probe, Outcome]]) -> str | None:
    """Weights returned beside the output must be the ones it applies: unchanged when only the
    values change, changed with the keys and with the tokens (identity or uniform weights
    returned beside some other output are not)."""
    returned = [_returned_weights(conv, outcome) for _, outcome in results]
    weights = [w for w in (returned[i] for i in (0, 1, 4, 6)) if w is not None]
    if len(weights) != 4 or len({w.shape for w in weights}) != 1:
        return None   # missing or unreadable weights fail the checks that judge them
    v1, v2, k1, t1 = weights
    scale = _largest(v1)
    if _off(v1, v2) > ROUNDING * max(scale, 1.0):
        return "the weights it returns change when only the values change"
    if _off(v1, k1) <= CHANGED * scale or _off(v1, t1) <= CHANGED * scale:
        return "the weights it returns do not follow the keys and the tokens"
    return None


def attempt_problem(conv: Convention, results: list[tuple[Probe, Outcome]]) -> str | None:
    """None when the output behaves as attention's on the attempt probes, else what it lacks.
    With the queries and keys fixed, attention's output is affine in the values, through
    weights that change when the keys or the tokens change, smoothly, and that mix the tokens;
    a constant, an argument, the values plus noise, uniform or random weights, the weights of
    another input, or a table lack one of these. A batch is judged on its first element, the
    one whose tokens the probes choose."""
    if len(results) != len(ATTEMPT_LABELS):
        return "it returns no output"
    failed = next((outcome for _, outcome in results if outcome.status != "ok"), None)
    if failed is not None:
        return f"it did not answer every call that tests this ({failed.error or failed.status})"
    attended = [_attended(conv, outcome) for _, outcome in results]
    outputs = [o for o in attended if o is not None]
    if len(outputs) != len(attended):
        return "its output could not be read as a finite matrix on every call"
    if len({o.shape for o in outputs}) != 1:
        return "its output changes shape between calls of the same shapes"
    v1, v2, v3, combined, k1, k2, t1, t2, once, twice, ends = outputs
    scale = _largest(v1, v2, v3, combined)
    response = v1 - v2
    size = _largest(response)
    if size <= CHANGED * scale:
        return "its output does not change with the values"
    if _off(combined, v1 - v2 + v3) > ROUNDING * scale:
        return "its output is not a weighted sum of the values"
    if _off(k1 - k2, response) <= CHANGED * size:
        return "the weights it applies to the values do not depend on the keys"
    if _full_row_rank(results[6][0].case.x.astype(np.float64)) and _off(t1 - t2, response) <= CHANGED * size:
        return "the weights it applies to the values do not depend on the tokens"
    first = once - v1
    if _largest(first) <= ROUNDING * NUDGE * scale or _off(twice - v1, 2 * first) > 0.05 * _largest(first):
        return "its output does not change smoothly with the keys"
    changed = ends - v1
    if _full_row_rank(results[-1][0].case.value_source.astype(np.float64)) and changed.shape[0] > 2 \
            and _largest(changed[1:-1]) <= CHANGED * _largest(changed):
        return "changing the first and last tokens' values changes only their own outputs, so it mixes no tokens"
    return _weights_problem(conv, results)


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
