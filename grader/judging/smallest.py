"""The smallest failing case: for a function that failed a check a student may see, the
smallest input on which it still differs from the reference (fewest tokens, smallest D,
fewest heads, small integers), written as a cell the student can paste and run.

The inputs are new ones, drawn from the grading seed, never a hidden check's. A function
whose only failures are hidden checks gets none, since its existence would tell.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np

from grader.reference.attention import Case, Head

from grader.calling.cases import head_count, with_convention_features, with_convention_weights
from grader.judging.checks import Context, Outcome, Probe, probe_tolerance
from grader.course.spec import FunctionSpec
from grader.calling.classes import sent_arguments
from grader.calling.conventions import Convention
from grader.judging.explain import CORRECT, agrees
from grader.result import CheckResult, SmallestCase

# (tokens, features, heads), smallest first; each shape is tried with DRAWS sets of values.
SHAPES = ((1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 2, 1), (1, 2, 2), (2, 2, 2), (3, 2, 1), (3, 2, 2),
          (2, 4, 2), (3, 4, 2), (3, 6, 3))
DRAWS = 2
LABEL = "smallest case"
FIRST = 6   # candidates in the first request; most mistakes show on one of them
OBJECT = "layer"   # the name a class's case gives its object


def wanted(checks: list[CheckResult]) -> bool:
    """Whether to look: some check the student may see lost points."""
    return any(c.lost_points and not c.hidden for c in checks)


def candidates(conv: Convention, seed: int, heads_said: bool = True) -> list[Case]:
    """Small integer cases the convention accepts, smallest first; their labels say H only
    with `heads_said` (a course's own spec says it only of a function that has heads)."""
    rng = np.random.default_rng(seed + 7)
    found, seen = [], set()
    for n, d, h in SHAPES:
        heads = head_count(conv, h)
        if d % heads or (conv.heads == "one" and h > 1):
            continue
        d_k = d if conv.square else d // heads
        if (n, d, heads) in seen:
            continue
        seen.add((n, d, heads))
        for draw in range(DRAWS):
            def small(*shape):
                return rng.integers(-1, 2, size=shape).astype(np.float64)
            head_list = tuple(Head(small(d, d_k), small(d, d_k), small(d, d_k),
                                   *[small(d_k) if role in conv.bias_roles else None for role in ("bq", "bk", "bv")])
                              for _ in range(heads))
            x = rng.integers(-2, 3, size=(n, d))
            wo = small(heads * d_k, d) if conv.projection else None
            label = f"{LABEL} N = {n}, D = {d}" + (f", H = {heads}" if heads_said else "")
            # Cross-attention (and three inputs): one key more than queries, of X's width, so
            # that taking the keys and values from the wrong sequence still runs and shows.
            memory = rng.integers(-2, 3, size=(n + 1, d)) if conv.cross else None
            values = rng.integers(-2, 3, size=(n + 1, d)) if conv.three_inputs else None
            if memory is not None and conv.input_stage > 0:   # given the keys and values themselves
                label += f", {n + 1} keys and values"
            elif memory is not None:
                label += f", {'key and value inputs' if conv.three_inputs else 'memory'} of {n + 1} tokens"
            label += _which_values(draw)
            case = Case(x=x, heads=head_list, wo=wo, label=label, memory=memory, values=values)
            case = with_convention_weights(conv, case, rng, small=True)
            found.append(conv.prepare(with_convention_features(conv, case, rng)))
    return found


ORDINALS = ("first", "second", "third", "fourth")


def _which_values(draw: int) -> str:
    """What tells apart the cases of one size in a label, in words a student reads without a
    key: nothing for the first; ", the second set of values tried at this size" after it."""
    return f", the {ORDINALS[draw]} set of values tried at this size" if draw else ""


def fails(conv: Convention, probe: Probe, outcome: Outcome, ctx) -> bool:
    if outcome.status != "ok" or outcome.parts is None:
        return outcome.status in ("error", "missing")   # a call cut short by time says nothing
    parts = outcome.parts
    if parts.problems or not parts.values:
        return True
    return not agrees(conv, CORRECT, [(probe.case, parts.values, probe_tolerance(probe, ctx.tolerance))],
                      ctx.predictions)


def _literal(value, prefix: str = "") -> str:
    """Python source for a value, on one line: the arrays are this small."""
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v, prefix) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_literal(v, prefix)}, " for v in value).rstrip(" ") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v, prefix)}" for k, v in value.items()) + "}"
    if isinstance(value, SimpleNamespace):
        return "SimpleNamespace(" + ", ".join(f"{k}={_literal(v, prefix)}" for k, v in vars(value).items()) + ")"
    if isinstance(value, np.ndarray):
        if value.dtype == bool:
            return f"np.array({value.tolist()!r})"
        # A mask's -inf (and a broken function's NaN) spelled so that the cell runs as printed.
        return "np.array(" + re.sub(r"\b(inf|nan)\b", r"np.\1", repr(np.round(value, 4).tolist())) + ")"
    return repr(value)


def _holds_object(value) -> bool:
    """Whether a value is, or holds, a SimpleNamespace."""
    if isinstance(value, SimpleNamespace):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(map(_holds_object, value))


def _shown(parts: dict, conv: Convention) -> list[str]:
    """One `name = value` per part, as lines, oriented as the function returns it (the grader
    compares a tokens-as-columns output transposed), per-head parts as the convention returns
    them: a list, or one array with the heads axis first."""
    lines = []
    # A dict return: each part under its key; otherwise the part's own name (weights, not
    # weights_per_head: the student returns "the weights").
    keys = dict(zip(conv.returned, conv.return_keys or conv.return_names))
    keys.update((part, f"{OBJECT}.{attribute}") for attribute, part in conv.kept)   # read off the object
    for part, value in parts.items():
        name = keys.get(part, part)
        value = value if isinstance(value, list) else np.asarray(value)
        if conv.columns:
            value = [v.T for v in value] if isinstance(value, list) else value.T
        if conv.vector and isinstance(value, np.ndarray) and value.ndim == 2:
            value = value[0]   # one query's row, a vector as the function returns it
        if isinstance(value, list) and conv.per_head_returns == "axis" and len({v.shape for v in value}) == 1:
            value = np.stack(value)
        lines.extend(f"{name} = {_literal(value, ' ' * len(name + ' = '))}".splitlines())
    return lines


def _comment(title: str, lines: list[str]) -> list[str]:
    pad = " " * len(title)
    return [f"# {title if i == 0 else pad}{line}" for i, line in enumerate(lines)]


def _arguments(names, values, by_keyword: bool, lines: list[str]) -> str:
    """A call's arguments: each array, list, dict or object becomes a line `name = ...` of its
    own (appended to `lines`) and is passed by its name; anything else is written as it is."""
    shown = []
    for name, value in zip(names, values):
        if isinstance(value, (np.ndarray, list, tuple, dict, SimpleNamespace)):
            lines.extend(f"{name} = {_literal(value, ' ' * len(name + ' = '))}".splitlines())
            shown.append(name)
        else:
            shown.append(repr(value))
    return ", ".join(f"{p}={a}" for p, a in zip(names, shown)) if by_keyword else ", ".join(shown)


def _object_lines(class_name: str, params, args: list, conv: Convention, by_keyword: bool, lines: list[str]) -> None:
    """A class's case: the object made as the grader made it (constructor, attributes, init
    method), then its method called."""
    call = conv.object_call
    given = iter(args[len(params):])
    construct, attributes, init, before = ([next(given) for _ in part] for part in
                                           (call.construct, call.attributes, call.init_params, call.before_params))
    names = [p.name for p in call.construct]
    lines.append(f"{OBJECT} = {class_name}({_arguments(names, construct, by_keyword, lines)})")
    for p, value in zip(call.attributes, attributes):
        lines.extend(f"{OBJECT}.{p.name} = {_literal(value)}".splitlines())
    if call.init:
        names = [p.name for p in call.init_params]
        lines.append(f"{OBJECT}.{call.init}({_arguments(names, init, by_keyword, lines)})")
    if call.before:
        names = [p.name for p in call.before_params]
        lines.append(f"{OBJECT}.{call.before}({_arguments(names, before, by_keyword, lines)})")
    method = OBJECT if call.method == "__call__" else f"{OBJECT}.{call.method}"
    lines.append(f"{method}({_arguments(params, args[:len(params)], by_keyword, lines)})")


def cell(fn_name: str, params: tuple[str, ...], probe: Probe, outcome: Outcome, conv: Convention,
         by_keyword: bool) -> SmallestCase:
    """The case as a cell: the inputs spelled out, the call, what came back and what was expected."""
    args = outcome.sent or sent_arguments(probe, conv)
    # An object argument is spelled as the SimpleNamespace the grader passed: the cell imports it.
    lines = ["import numpy as np", *(["from types import SimpleNamespace"] if _holds_object(args) else []), ""]
    given_globals = {}
    if conv.global_params:
        # The notebook globals it reads, as the grader set them for the call: assigned before it,
        # so that the cell computes what the grader saw.
        given = args[len(params):]
        given_globals = {p.name: _literal(value) for p, value in zip(conv.global_params, given)}
        lines.append(f"# the notebook globals {fn_name} reads, as the grader set them")
        for name, value in given_globals.items():
            lines.extend(f"{name} = {value}".splitlines())
        args = args[:len(params)]
    if conv.class_call is None:
        lines.append(f"{fn_name}({_arguments(params, args, by_keyword, lines)})")
    else:
        _object_lines(fn_name, params, args, conv, by_keyword, lines)
    if outcome.status != "ok" or outcome.parts is None:
        returned = [outcome.error or outcome.status]
    elif outcome.parts.problems:
        returned = ["; ".join(outcome.parts.problems)]
    else:
        returned = _shown(outcome.parts.values, conv)
    expected = _shown(conv.expected_parts(probe.case), conv)
    lines += _comment("returned: ", returned) + _comment("expected: ", expected)
    found: SmallestCase = {"case": probe.case.label.removeprefix(LABEL).strip(), "code": "\n".join(lines)[:8000]}
    if given_globals:
        found["globals"] = given_globals
    return found


async def find(prober, fn: FunctionSpec, ctx: Context, checks: list[CheckResult], name: str) -> SmallestCase | None:
    """Call the function on the candidates (one request) and describe the smallest it fails on."""
    if not wanted(checks) or any(o.status in ("timeout", "dead") for o in prober.outcomes.values()):
        return None   # a function that hangs or kills its kernel would only spend more time doing so
    conv = fn.convention
    probes = [Probe(case) for case in candidates(conv, ctx.seed, ctx.builtin_words or conv.heads != "one")]
    for batch in (probes[:FIRST], probes[FIRST:]):
        await prober.run(batch)
        for probe in batch:
            outcome = prober.outcomes.get(probe.key)
            if outcome is not None and fails(conv, probe, outcome, ctx):
                return cell(name, fn.params, probe, outcome, conv, prober.by_keyword)
    return None

