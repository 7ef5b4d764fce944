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
behaves as attention's does on probes the grader builds around a case (`attempt_probes`) and
judges itself (`attempt_problem`): weights that depend on the queries, query by query, and on
the keys, applied to the values and mixing the tokens. The probes are built around several
cases whose shapes are drawn from the grading seed, and the function must compute attention on
each of them (`unexplained`): one tuned to a shape it expects does not on the others.

Values returned with fewer digits (rounded as the sheet prints them, or computed in float16)
are compared to the precision they show (`explain.precision_of`), here and in the attempt test:
a rounded answer is an answer. Only values the grader computed and compared decide it; what the
function is called or says about itself never does.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from grader.calling import cases as make
from grader.reference.attention import attention
from grader.judging.checks import Outcome, Probe
from grader.judging.computed_once import Store
from grader.calling.conventions import PART_WORDS, WEIGHT_PARTS, Convention
from grader.judging.explain import (SAME_ROW, CORRECT, Predictions, matches, precision_of,
                                   shown_precision, trivial)
from grader.result import CheckResult
from grader.calling.returns import Tolerance


def _matching(conv: Convention, probe: Probe, part: str, value, tol, predictions: Predictions):
    """What the reference and each known mistake (or two) that compute `value` as the `part`
    of this call, to the precision the value shows, predict there, in no set order."""
    shown = shown_precision(value)
    # Those that matched another value of the notebook's are asked first: its callers ask
    # whether any matches, which the order does not change.
    for explanation in predictions.likely_first(conv):
        predicted = predictions.parts(conv, explanation, probe.case).get(part)
        if predicted is not None and matches(value, predicted, tol, shown):
            predictions.matched(conv, explanation)
            yield predicted


def explained(conv: Convention, probe: Probe, part: str, value, tol, predictions: Predictions,
              sent: list, allowed: str | None = None) -> bool:
    """Some known computation gives `value` here, and gives no trivial value doing so (or only
    the `allowed` kind of trivial value)."""
    return any(trivial(predicted, sent) in (None, allowed)
               for predicted in _matching(conv, probe, part, value, tol, predictions))


def recognised(conv: Convention, results: list[tuple[Probe, Outcome]], tol, predictions: Predictions) -> bool:
    """Some part returned is a known computation's, and not trivial. One row for every token
    counts where a known computation gives that very row: a mistake that takes away what
    tells the queries apart (additive scores without their tanh) still computes it from the
    keys and values, which no row handed back without attention matches."""
    for probe, outcome in results:
        if outcome.status != "ok":
            continue
        for part, value in outcome.ok_parts.values.items():
            why = trivial(value, outcome.sent)
            if why in (None, SAME_ROW) and explained(conv, probe, part, value, tol, predictions, outcome.sent,
                                                     allowed=why):
                return True
    return False


def trivial_answer(conv: Convention, results: list[tuple[Probe, Outcome]], tol,
                   predictions: Predictions) -> str | None:
    """Where these calls (a check's own, or an attempt case's) got a trivial value (zeros,
    uniform weights, an argument) that attention does not give there, nor a known mistake: a
    property holds for such a value, so it proves nothing, and a function answering some inputs
    (a shape, its first calls) and not these is judged on these."""
    for probe, outcome in results:
        if outcome.status != "ok" or outcome.parts is None:
            continue
        for part, value in outcome.parts.values.items():
            why = trivial(value, outcome.sent)
            if not why:
                continue
            # What attention gives there is computed only for a trivial value: most calls of
            # most functions return none, and each attempt case's probes are drawn afresh.
            wanted = predictions.parts(conv, CORRECT, probe.case)
            if part in wanted and trivial(wanted[part], outcome.sent) is None \
                    and next(_matching(conv, probe, part, value, tol, predictions), None) is None:
                return f"on {probe.label}, what it returns as the {PART_WORDS[part]} is {why}"
    return None


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


# The attempt probes of one case, in order (see attempt_probes): three draws of the values and
# their affine combination; the keys, then the tokens, redrawn, each with the first two values;
# the keys nudged by NUDGE and by twice that; the first values changed at two tokens only; then
# each token's query moved, one at a time (QUERY_MOVED). Weights returned beside the output are
# judged on the first two values, the keys and the tokens.
ATTEMPT_LABELS = ("values 1", "values 2", "values 3", "values 1 - 2 + 3", "keys redrawn, values 1",
                  "keys redrawn, values 2", "tokens redrawn, values 1 kept", "tokens redrawn, values 2 kept",
                  "keys nudged once, values 1", "keys nudged twice, values 1", "values 1, two tokens' changed")
QUERY_MOVED = "query of token {} moved, values 1"
# A unit response less than this far from the others' span is in it (a query's own direction).
INDEPENDENT = 0.05
# Small enough that attention is linear in it (second-order terms ~ NUDGE**2), large enough to
# stand far above float64 rounding.
NUDGE = 1e-5
# Relative to the largest entry compared: what float64 rounding (or float32 inside a student's
# function) leaves of an identity, and what counts as a change. An output of reduced precision
# (rounded, float16) is allowed what its precision leaves besides (_slack).
ROUNDING = 1e-5
CHANGED = 1e-3
# Relative to a row of the output: what float64 rounding leaves of a row that does not change
# when other tokens' values do (their V rows are solved for, so the row's own V moves by that).
MIXED = 1e-9
# The shapes (N, D, H) the attempt cases are drawn from, ATTEMPT_CASES of them for each grading
# seed, so that no function can expect them: more features than tokens, and than a memory's
# N + 2 tokens (so that V, and values changed at two tokens only, are solved for exactly), and
# fewer tokens than cases.WIDE_MEMORY_FROM, so that every known mistake can be made on them.
ATTEMPT_SHAPES = ((4, 6, 2), (4, 6, 3), (4, 8, 2), (4, 9, 3), (4, 12, 2), (5, 8, 2), (5, 9, 3), (5, 10, 2),
                  (5, 12, 3), (6, 8, 2), (6, 9, 3), (6, 12, 3))
ATTEMPT_CASES = 3


def _with_heads(case, heads, x=None):
    """The case (every element of a batch, which shares the weights) with other head weights,
    and other tokens for its first element."""
    heads = tuple(heads)
    return replace(case, heads=heads, x=case.x if x is None else x,
                   batch_rest=tuple(replace(e, heads=heads) for e in case.batch_rest))


def _full_row_rank(a: np.ndarray) -> bool:
    return np.linalg.matrix_rank(a) == a.shape[0]


def attempt_cases(conv: Convention, seed: int) -> list:
    """ATTEMPT_CASES random cases, each of a shape drawn from ATTEMPT_SHAPES by the grading seed."""
    rng = np.random.default_rng(seed + 13)
    # Only shapes whose features split evenly into the convention's heads (a convention with a
    # set number of heads has that many whatever H is drawn): a course's code divides D by H.
    fitting = [(n, d, h) for n, d, h in ATTEMPT_SHAPES if d % conv.head_count(h) == 0]
    chosen = rng.choice(len(fitting), size=ATTEMPT_CASES, replace=False)
    return [make.random_case(conv, rng, n, d, h, label=_attempt_label(conv, i, n, d, h), batch=make.BASE_BATCH)
            for i, (n, d, h) in enumerate(fitting[k] for k in chosen)]


def _attempt_label(conv: Convention, index: int, n: int, d: int, h: int) -> str:
    heads = f", H = {conv.head_count(h)}" if conv.heads != "one" else ""
    return f"attempt case {index + 1}, N = {n}, D = {d}{heads}"


# The attempt probes of the conventions and seeds graded lately (computed_once.py): a batch's
# submissions share them.
_ATTEMPT_PROBES = Store(64)


def attempt_probes(conv: Convention, seed: int) -> list[Probe]:
    """The calls of the attempt test: around each attempt case, the probes of ATTEMPT_LABELS
    (only the values, the keys, the tokens behind the queries and keys or one token's query
    change between them, so the grader alone knows what attention does on each). A convention
    that returns no output is judged by matching alone: one call on each case. Drawn once per
    grading process for each convention and seed, and read-only."""
    return _ATTEMPT_PROBES.get((conv, seed), lambda: _drawn_attempt_probes(conv, seed))


def _drawn_attempt_probes(conv: Convention, seed: int) -> list[Probe]:
    cases = attempt_cases(conv, seed)
    if _attended_part(conv) is None:
        return [Probe(case) for case in cases]
    return [probe for i, case in enumerate(cases)
            for probe in _probes_around(case, np.random.default_rng(seed + 12 + 1000 * i))]


def _case_of(item) -> str:
    probe = item[0] if isinstance(item, tuple) else item
    return probe.case.label.split(": ")[0]


def attempt_groups(conv: Convention, results: list) -> list[list]:
    """The attempt probes' results (or the probes), case by case."""
    groups: dict[str, list] = {}
    for item in results:
        groups.setdefault(_case_of(item), []).append(item)
    return list(groups.values())


def _most_attended_keys(case) -> list[int]:
    """The two keys attention gives the most weight from queries other than their own token
    (in self-attention a token's own query is its key's)."""
    weights = np.max([head["weights"] for head in attention(case)["heads"]], axis=0)
    if case.memory is None:
        np.fill_diagonal(weights, 0.0)
    return sorted(int(k) for k in np.argsort(-np.nan_to_num(weights).max(axis=0), kind="stable")[:2])


def _changed_value_tokens(first, changed) -> list[int]:
    """The tokens whose values differ between two cases that differ in their value weights only."""
    source = first.value_source.astype(np.float64)
    moved = source @ (changed.heads[0].wv - first.heads[0].wv)
    return [int(i) for i in np.flatnonzero(np.abs(moved).max(axis=1) > 1e-9 * max(1.0, float(np.abs(moved).max())))]


def _probes_around(base, rng: np.random.Generator) -> list[Probe]:
    def drawn(a):
        return None if a is None else rng.normal(size=a.shape)

    values = [[(drawn(h.wv), drawn(h.bv)) for h in base.heads] for _ in range(3)]
    combined = [(a[0] - b[0] + c[0], None if a[1] is None else a[1] - b[1] + c[1]) for a, b, c in zip(*values)]
    x = base.x.astype(np.float64)
    tokens = rng.normal(size=x.shape)
    # Each pseudo-inverse once: the same one solves for every head and every token's query.
    x_inverse, tokens_inverse = np.linalg.pinv(x), np.linalg.pinv(tokens)

    def kept(v):
        """The values v once the tokens are redrawn: in self-attention the value weights are
        solved for, so that V itself stays (exactly, as N < D in every attempt case)."""
        if base.memory is not None:
            return v
        return [(tokens_inverse @ (x @ wv), bv) for wv, bv in v]

    def case(label, v, wk=None, x=None, wq=None):
        heads = [replace(h, wv=wv, bv=bv, wk=h.wk if wk is None else wk[i], wq=h.wq if wq is None else wq[i])
                 for i, (h, (wv, bv)) in enumerate(zip(base.heads, v))]
        return Probe(replace(_with_heads(base, heads, x), label=f"{base.label}: {label}"))

    keys = [drawn(h.wk) for h in base.heads]
    nudge = [drawn(h.wk) for h in base.heads]
    nudged = [[h.wk + k * NUDGE * step for h, k in zip(base.heads, nudge)] for step in (1, 2)]
    # Values that change at two tokens only (exactly, as the values' sequence has fewer rows than
    # columns in every attempt case): those attention weighs most for the other queries, so that
    # their outputs see a change even where large scores saturate the softmax.
    source = base.value_source.astype(np.float64)
    ends = []
    for wv, bv in values[0]:
        target = np.zeros((source.shape[0], wv.shape[1]))
        target[_most_attended_keys(base)] = rng.normal(size=(2, wv.shape[1]))
        ends.append((wv + np.linalg.pinv(source) @ target, bv))

    def query_moved(token):
        """The query weights changed so that only this token's query moves, to a query drawn
        as the others are (exactly: N < D); a query moved far from them saturates its softmax."""
        moved = []
        for h in base.heads:
            queries = x @ h.wq
            target = np.zeros_like(queries)
            target[token] = rng.normal(size=queries.shape[1]) * float(np.std(queries)) - queries[token]
            moved.append(h.wq + x_inverse @ target)
        return moved

    labels = iter(ATTEMPT_LABELS)
    return [*(case(next(labels), v) for v in (*values, combined)),
            case(next(labels), values[0], wk=keys), case(next(labels), values[1], wk=keys),
            case(next(labels), kept(values[0]), x=tokens), case(next(labels), kept(values[1]), x=tokens),
            case(next(labels), values[0], wk=nudged[0]), case(next(labels), values[0], wk=nudged[1]),
            case(next(labels), ends),
            *(case(QUERY_MOVED.format(token), values[0], wq=query_moved(token)) for token in range(base.n))]


def _largest(*arrays) -> float:
    return max(float(np.abs(a).max(initial=0.0)) for a in arrays)


def _off(a, b) -> float:
    return float(np.abs(np.asarray(a) - b).max(initial=0.0))


def _slack(value, like: np.ndarray) -> float:
    """What the precision `value` shows (none: float64) leaves of entries as large as `like`'s."""
    precision = precision_of(value)
    return 0.0 if precision is None else precision.tolerance(Tolerance(0.0, 0.0), like).atol


def _attended_part(conv: Convention) -> str | None:
    """The part that holds the values once attended: the output, else the heads' outputs (a
    function that takes the heads already split returns those). A block's output, or its
    parts', is not attended values: such a function is judged by matching alone."""
    if conv.unit != "attention":
        return None
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


def _returned_weights(conv: Convention, outcome: Outcome) -> tuple | None:
    """The weights one call returned, every head's (a batch's first element), flattened, with
    the value as returned; None when it returned none that can be read."""
    value = next((outcome.ok_parts.values[p] for p in WEIGHT_PARTS if p in outcome.ok_parts.values),
                 None)
    try:
        arrays = [np.asarray(v, dtype=np.float64) for v in (value if isinstance(value, list) else [value])]
        flat = np.concatenate([(a[0] if conv.batched else a).ravel() for a in arrays])
    except (ValueError, IndexError, TypeError):
        return None
    return (flat, value) if np.all(np.isfinite(flat)) else None


def _weights_problem(conv: Convention, results: list[tuple[Probe, Outcome]]) -> str | None:
    """Weights returned beside the output must be the ones it applies: unchanged when only the
    values change, changed with the keys and with the tokens (identity or uniform weights
    returned beside some other output are not)."""
    returned = [_returned_weights(conv, outcome) for _, outcome in results]
    weights = [w for w in (returned[i] for i in (0, 1, 4, 6)) if w is not None]
    if len(weights) != 4 or len({w.shape for w, _ in weights}) != 1:
        return None   # missing or unreadable weights fail the checks that judge them
    (v1, as_returned), (v2, _), (k1, _), (t1, _) = weights
    scale = _largest(v1)
    slack = _slack(as_returned, v1)
    if _off(v1, v2) > max(ROUNDING * max(scale, 1.0), 2 * slack):
        return "the weights it returns change when only the values change"
    changed = max(CHANGED * scale, 2 * slack)
    if _off(v1, k1) <= changed or _off(v1, t1) <= changed:
        return "the weights it returns do not follow the keys and the tokens"
    return None


def _queries_problem(v1, moved: list, heads: int, changed: float, noise: float) -> str | None:
    """Attention weighs the values for each query by that query: moving a token's query changes
    the output (a query that attends one key, or a saturated softmax, may barely move), and the
    tokens' queries change it in more directions than the case has heads (attention's each in
    its own row). A weighting moved by one number computed from all the queries and keys (or one
    per head) changes it in no more directions than it has numbers."""
    responses = np.array([(m - v1).ravel() for m in moved])
    if all(_largest(r) <= changed for r in responses):
        return "moving a token's query does not change the output, so the weights it applies do not depend on " \
               "the queries"
    # Each response that stands above what noise of that size in every entry gives, as a unit
    # vector: a response is told apart from the others by its direction, whatever its size.
    floor = 2 * noise * np.sqrt(responses.shape[1])
    norms = np.linalg.norm(responses, axis=1)
    seen = responses[norms > floor] / norms[norms > floor][:, None]
    directions = int(np.sum(np.linalg.svd(seen, compute_uv=False) > INDEPENDENT)) if len(seen) else 0
    if directions <= min(heads, len(seen) - 1):
        return (f"moving each of {len(seen)} tokens' queries changes its output in only {directions} "
                "direction(s), so its weights follow the queries only as a whole, not query by query")
    return None


def _smoothness_problem(v1, once, twice, slack: float, scale: float) -> str | None:
    """Attention's output changes smoothly with the keys: nudged by NUDGE and by twice that,
    the change doubles (weights seeded by a hash of Q and K jump). Below the precision of an
    output that shows less than float64's, only that it does not jump can be seen."""
    if slack:
        if max(_off(once, v1), _off(twice, v1)) > 4 * slack:
            return "its output does not change smoothly with the keys"
        return None
    first = once - v1
    if _largest(first) <= ROUNDING * NUDGE * scale or _off(twice - v1, 2 * first) > 0.05 * _largest(first):
        return "its output does not change smoothly with the keys"
    return None


def attempt_problem(conv: Convention, results: list[tuple[Probe, Outcome]]) -> str | None:
    """None when the output behaves as attention's on one case's attempt probes, else what it
    lacks. With the queries and keys fixed, attention's output is affine in the values, through
    weights that change when the keys, the tokens or one token's query change, smoothly, and
    that mix the tokens; a constant, an argument, the values plus noise, uniform or random
    weights, the weights of another input, a blur of the values by a number computed from the
    keys, or a table lack one of these. A batch is judged on its first element, the one whose
    tokens the probes choose. The tolerances allow what the output's own precision leaves."""
    if len(results) <= len(ATTEMPT_LABELS):
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
    v1, v2, v3, combined, k1, k2, t1, t2, once, twice, ends, *moved = outputs
    scale = _largest(v1, v2, v3, combined)
    slack = _slack(results[0][1].ok_parts.values[_attended_part(conv)], np.asarray([scale]))
    response = v1 - v2
    size = _largest(response)
    changed = max(CHANGED * size, 2 * slack)
    if size <= max(CHANGED * scale, 2 * slack):
        return "its output does not change with the values"
    if _off(combined, v1 - v2 + v3) > max(ROUNDING * scale, 4 * slack):
        return "its output is not a weighted sum of the values"
    if _off(k1 - k2, response) <= changed:
        return "the weights it applies to the values do not depend on the keys"
    if _full_row_rank(results[6][0].case.x.astype(np.float64)) and _off(t1 - t2, response) <= changed:
        return "the weights it applies to the values do not depend on the tokens"
    problem = (_queries_problem(v1, moved, len(results[0][0].case.heads), changed, max(ROUNDING * scale, slack))
               or _smoothness_problem(v1, once, twice, slack, scale))
    if problem:
        return problem
    if _mixes_no_tokens(results[0][0].case, results[10][0].case, v1, ends, 2 * slack):
        return "changing two tokens' values changes only their own outputs, so it mixes no tokens"
    return _weights_problem(conv, results)


def _mixes_no_tokens(first, changed, v1: np.ndarray, ends: np.ndarray, slack: float) -> bool:
    """Values changed at two tokens change no other token's output (in cross-attention, where
    the values are the memory's, no output) beyond float64 rounding of that output's own row,
    or what its precision leaves. Any change counts: a saturated softmax may give those tokens
    a tiny weight, and none (V times a number, V plus something) is none but for rounding."""
    if not _full_row_rank(first.value_source.astype(np.float64)):
        return False
    tokens = _changed_value_tokens(first, changed) if first.memory is None else []
    rows = [i for i in range(v1.shape[0]) if i not in tokens]
    return bool(rows) and all(_off(ends[i], v1[i]) <= max(MIXED * _largest(v1[i]), slack) for i in rows)


def _not_made(outcome: Outcome) -> bool:
    """A call the grader did not make: the function's time ran out, or an earlier call hung or
    ended the kernel (grade.FunctionProber), which the checks made before it show."""
    return outcome.status != "ok" and outcome.error.startswith("not made")


def _shape_words(case) -> str:
    return f"N = {case.n}, D = {case.d}"


def unexplained(conv: Convention, evidence: list, attempts: list, tol, predictions: Predictions) -> str | None:
    """None when the function computes attention, else why not: on each attempt case some part
    it returns is what the reference or a known mistake computes there, to the precision it
    shows, or its output behaves as attention's (attempt_problem; a convention that returns no
    output is judged by matching alone), and no call returns a trivial value attention does not
    give there (trivial_answer). One case it does not compute attention on is enough: a function
    tuned to the shapes it expects, or to its first calls, computes nothing on the others."""
    groups = [g for g in attempt_groups(conv, attempts) if any(not _not_made(outcome) for _, outcome in g)]
    groups = groups or attempt_groups(conv, attempts)[:1]
    problems = []
    for group in groups:
        trivial_here = trivial_answer(conv, group, tol, predictions)
        if trivial_here is not None:
            return reason(evidence) if trivial_in(evidence) else trivial_here
        if recognised(conv, group[:1], tol, predictions):
            continue
        problem = attempt_problem(conv, group) if _attended_part(conv) is not None else ""
        if problem is not None:
            problems.append((group, problem))
    if not problems:
        return None
    group, problem = problems[0]
    if len(problems) < len(groups):
        problem = (f"{problem or 'nothing it returns matches attention'} with {_shape_words(group[0][0].case)}, "
                   "though it does on other shapes")
    return reason(evidence + group[:1], problem or None)


def trivial_in(results: list[tuple[Probe, Outcome]]) -> bool:
    """Some call returned None, nothing readable or a trivial value (what reason says first)."""
    return any(not outcome.ok_parts.values or any(trivial(v, outcome.sent) for v in outcome.ok_parts.values.values())
               for _, outcome in results if outcome.status == "ok")


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
