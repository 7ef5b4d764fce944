"""The checks: which calls each one needs, and how it judges what came back.

A check never talks to the kernel. It names its probes (a canonical case plus a variant);
the grader runs them once each, and the check judges the canonical parts that came back.
Checks share cases (the base case serves most of them), except across the line between
hidden and visible checks: a hidden check draws its own cases (check_context, check_probes),
so what a visible check shows a student never belongs to a hidden one. A visible check's case
drawn in the same family as a hidden one's (the same label and shapes, other values) is marked
as such (mark_hidden_twins), and a student is shown nothing of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from types import SimpleNamespace
from typing import Callable

import numpy as np

from grader.reference.attention import Case
from grader.reference.sheets import FIXED_DATA

from grader.calling import cases as make
from grader.calling.classes import changed_messages
from grader.calling.conventions import (PART_WORDS, PER_HEAD_PARTS, PLURAL_PARTS, WEIGHT_GRADIENTS, WEIGHT_PARTS,
                                       Convention)
from grader.calling.params import MASK_ROLES
from grader.judging.explain import CORRECT, Predictions, agrees, differs_from_reference, explanations, harmless
from grader.calling.returns import Parts, Tolerance, compare, not_returned
from grader.judging.seeds import hidden_cases_seed
from grader.course.check_rules import CHECK_RULES, CheckRule
from grader.result import HIDDEN_CASE_MARK, SHAPED_AS_HIDDEN_MARK
from grader.kernel_side.wire import Layout
from grader.course.spec import FunctionSpec

FLOAT32_LOOSENING = 1e3
HEATMAP_MAX_TOKENS = 12


LAYOUT_RULE = ("The same values in another memory layout must give the same result: code that reads an array's "
               "memory (its buffer, its strides, a ravel or reshape in memory order) instead of its indices "
               "depends on the layout.")
FLOAT32_RULE = ("float32 inputs must give what the same values in float64 give, to float32's precision: a result "
                "kept in a lower precision (float16) or in an integer array loses it.")
INTEGER_RULE = ("Integer inputs must give what the same values as floats give: an array made with np.zeros_like "
                "or np.empty_like of an integer input, or a floor division, truncates; convert the inputs first "
                "(X.astype(float)).")


class InputVariant(Enum):
    """How a probe's inputs differ from its case's float64 C-ordered arrays: the words its label
    adds, the memory layout its matrices are sent in, the dtype its float arrays are converted
    to, the factor its tolerance is loosened by, and, for the checks that compare a function's
    result on these inputs with its own result on the same case's plain inputs (those of a
    variant with no rule), what those inputs are called and the rule broken when they differ."""

    PLAIN = ("", Layout.C, None, 1.0, "", "")
    # An integer case's whole values as float64: what its integer inputs must give.
    FLOATS = (", as floats", Layout.C, np.float64, 1.0, "", "")
    FORTRAN = (", Fortran-ordered inputs", Layout.FORTRAN, None, 1.0, "C-ordered", LAYOUT_RULE)
    STRIDED = (", non-contiguous inputs", Layout.STRIDED, None, 1.0, "C-ordered", LAYOUT_RULE)
    # float32 keeps about 7 significant digits, where the reference is computed in float64.
    FLOAT32 = (", float32 inputs", Layout.C, np.float32, FLOAT32_LOOSENING, "in float64", FLOAT32_RULE)
    INT = (", integer inputs", Layout.C, np.int64, 1.0, "as floats", INTEGER_RULE)

    def __init__(self, words: str, layout: Layout, dtype, loosening: float, plain_words: str, rule: str):
        self.words, self.layout, self.dtype, self.loosening = words, layout, dtype, loosening
        self.plain_words, self.rule = plain_words, rule

    def convert(self, value):
        """An argument in this variant's dtype: float arrays only (those in a list, a dict or an object too),
        and to an integer dtype only when every value is whole, so that the inputs (and the
        expected values) stay the case's; to float64, integer arrays too (an integer case's
        whole values as floats)."""
        if isinstance(value, (list, tuple)):
            return type(value)(self.convert(v) for v in value)
        if isinstance(value, dict):
            return {k: self.convert(v) for k, v in value.items()}
        if isinstance(value, SimpleNamespace):
            return SimpleNamespace(**self.convert(vars(value)))
        if self.dtype is None or not isinstance(value, np.ndarray):
            return value
        if self.dtype is np.float64 and value.dtype.kind in "iu":
            return value.astype(np.float64)
        if value.dtype.kind != "f":
            return value
        if np.dtype(self.dtype).kind in "iu" and not np.array_equal(value, np.round(value)):
            return value
        return value.astype(self.dtype)


@dataclass(frozen=True)
class Probe:
    case: Case
    variant: InputVariant = InputVariant.PLAIN
    return_inputs: bool = False

    @property
    def key(self) -> tuple:
        return (self.case.label, self.variant, self.return_inputs)

    @property
    def label(self) -> str:
        return self.case.label + self.variant.words

    def arguments(self, conv: Convention) -> list:
        """The arguments the function is called with: the case's, in the variant's dtype. A
        mask keeps its course form's dtype (a 0 / -inf mask has no integer form)."""
        return [a if p.role in MASK_ROLES else self.variant.convert(a)
                for p, a in zip(conv.params, conv.call_arguments(self.case))]


@dataclass
class Outcome:
    status: str                   # ok | missing | error | timeout | dead
    parts: Parts | None = None
    error: str = ""
    sent: list = field(default_factory=list)
    inputs_after: list | None = None

    @property
    def ok_parts(self) -> Parts:
        """What a call that ended "ok" returned; a call that ended otherwise returned nothing."""
        if self.parts is None:
            raise ValueError(f"a call that ended {self.status!r} returned nothing")
        return self.parts


@dataclass
class Verdict:
    status: str                   # passed | failed | error
    message: str
    figures: list = field(default_factory=list)
    # The share of the check's points earned, when it is not all (passed) or none (otherwise):
    # a check comparing values pays the parts returned right when others were not returned.
    share: float | None = None

    @property
    def earned(self) -> float:
        """The fraction of the check's points this verdict gives."""
        if self.share is not None:
            return self.share
        return 1.0 if self.status == "passed" else 0.0


@dataclass(frozen=True)
class Context:
    seed: int
    tolerance: Tolerance
    forbidden_uses: dict = field(default_factory=dict)   # function name -> [module, ...]
    predictions: Predictions = field(default_factory=Predictions, compare=False)
    hidden: bool = False   # the context of a hidden check (check_context)
    # A built-in assignment's words: its sheets speak of H = 1 for a single head, and so do its
    # reports; a course's own spec says H only of a function that has heads.
    builtin_words: bool = True


@dataclass(frozen=True)
class CheckKind:
    """A check: its rule (name, title, default points, where it applies: course/check_rules.py),
    the calls it needs, and how it judges what came back."""
    rule: CheckRule
    probes: Callable
    judge: Callable

    @property
    def name(self) -> str:
        return self.rule.name

    @property
    def title(self) -> str:
        return self.rule.title

    @property
    def policy(self) -> bool:
        return self.rule.policy


def _failed_call(probe: Probe, outcome: Outcome) -> Verdict | None:
    if outcome.status == "ok":
        return None
    return Verdict("error", f"On {probe.label}: {outcome.error}")


def finite_rows(matrix: np.ndarray) -> list:
    """Rows for JSON and HTML: NaN and inf become None."""
    return [[float(v) if np.isfinite(v) else None for v in row] for row in matrix.astype(np.float64)]


def weight_heatmaps(conv: Convention, probe: Probe, parts: Parts) -> list:
    """The student's and the expected attention weights of one case, for the report (a
    batch's first element)."""
    figures = []
    expected = conv.expected_parts(probe.case)
    for part in WEIGHT_PARTS:
        if part not in expected or part not in parts.values:
            continue
        pairs = [(PART_WORDS[part], parts.values[part], expected[part])]
        if part == "weights_per_head" and isinstance(parts.values[part], list):
            pairs = [(f"attention weights, head {i + 1}", a, e)
                     for i, (a, e) in enumerate(zip(parts.values[part], expected[part]))]
        if conv.batched:
            pairs = [(f"{title}, batch element 0", a[0], e[0]) for title, a, e in pairs
                     if getattr(a, "ndim", 0) == 3 and e.ndim == 3]
        for title, actual, wanted in pairs:
            if getattr(actual, "shape", None) == wanted.shape and wanted.ndim == 2 \
                    and wanted.shape[0] <= HEATMAP_MAX_TOKENS:
                figures.append({"title": title, "case": probe.label,
                                "student": finite_rows(actual), "expected": finite_rows(wanted)})
    return figures


def _missing_part(probe: Probe, parts: Parts, part: str) -> Verdict:
    heads = f" (H = {len(probe.case.heads)} here)" if part in PER_HEAD_PARTS else ""
    return Verdict("failed", f"On {probe.label}: the {PART_WORDS[part]} {parts.missing(part)}{heads}.")


def probe_tolerance(probe: Probe, tol: Tolerance) -> Tolerance:
    return tol.loosened(probe.variant.loosening)


def _only_overflow(conv: Convention, probe: Probe, parts: Parts, tol: Tolerance, ctx: Context) -> bool:
    """What came back is exactly what a softmax without max-subtraction (or with one maximum for
    the whole matrix) gives, and that differs from the reference here only because exp() leaves
    its range: the sheets do not ask for the max-subtraction, so only the numerical_stability
    check judges it."""
    observed = [(probe.case, parts.values, tol)]
    return any(differs_from_reference(conv, e, observed, ctx.predictions) and agrees(conv, e, observed, ctx.predictions)
               for e in harmless(conv))


def _reference_mismatch(conv: Convention, probe: Probe, parts: Parts, ctx: Context,
                        overflow_allowed: bool) -> Verdict | None:
    """Why what one call returned is not the reference, or None: each part that came back is
    compared (one that cannot be decoded fails); a part not returned at all is left to the
    share the check pays (_paid), unless nothing came back."""
    tol = probe_tolerance(probe, ctx.tolerance)
    expected_parts = ctx.predictions.parts(conv, CORRECT, probe.case)
    if not any(parts.came_back(part) for part in expected_parts):
        return _missing_part(probe, parts, next(iter(expected_parts)))
    problems = []
    for part, expected in expected_parts.items():
        if not parts.came_back(part):
            continue
        if part not in parts.values:
            return _missing_part(probe, parts, part)
        problem = compare(parts.values[part], expected, tol, conv.columns)
        if problem:
            if overflow_allowed and _only_overflow(conv, probe, parts, tol, ctx):
                return None
            problems.append(f"the {PART_WORDS[part]} {problem}")
            if not conv.backward:   # a backward pass's gradients are each said, with where they differ most
                break
    if problems:
        return Verdict("failed", f"On {probe.label}: {'; '.join(problems)}.", weight_heatmaps(conv, probe, parts))
    return None


def _not_returned(conv: Convention, results) -> list[str]:
    """The parts the convention returns that some call did not return at all."""
    return [part for part in conv.returns if any(not o.parts.came_back(part) for _, o in results)]


def _words(parts: list[str]) -> str:
    return " and the ".join(PART_WORDS[p] for p in parts)


def _missing_clause(parts: list[str]) -> str:
    """"the output was not returned", "the Q and the K were not returned": parts not returned."""
    return f"the {_words(parts)} {not_returned(parts[0]) if len(parts) == 1 else 'were not returned'}"


def _paid(conv: Convention, results) -> Verdict:
    """A comparing check whose calls returned only some of the parts asked for, each of them
    right: each part asked for is an equal share of its points, and the parts returned earn
    theirs (a correct output returned alone where (output, weights) is asked earns half)."""
    missing = _not_returned(conv, results)
    returned = [p for p in conv.returns if p not in missing]
    verb = "matches" if len(returned) == 1 and returned[0] not in PLURAL_PARTS else "match"
    clause = _missing_clause(missing)
    return Verdict("failed", f"{clause[0].upper()}{clause[1:]}, so this check gives only the share of the parts "
                             f"returned right, {len(returned)} of the {len(conv.returns)} asked for: the "
                             f"{_words(returned)} {verb} the reference on {len(results)} case(s): "
                             f"{_labels(results)}.", share=len(returned) / len(conv.returns))


def _labels(results) -> str:
    return "; ".join(p.label for p, _ in results)


def _judge_reference(fn: FunctionSpec, ctx: Context, results, overflow_allowed: bool,
                     paid_by_part: bool = True) -> Verdict:
    """Every call returned the reference's values. With `paid_by_part`, a part not returned
    costs its share of the points (_paid); without, only the parts returned are judged."""
    for probe, outcome in results:
        verdict = _failed_call(probe, outcome) or _reference_mismatch(fn.convention, probe, outcome.parts, ctx,
                                                                      overflow_allowed)
        if verdict:
            return _gradients_paid(fn.convention, ctx, results, verdict) if paid_by_part else verdict
    if paid_by_part and _not_returned(fn.convention, results):
        return _paid(fn.convention, results)
    return Verdict("passed", f"Matches the reference on {len(results)} case(s): {_labels(results)}.")


def _gradients_paid(conv: Convention, ctx: Context, results, mismatch: Verdict) -> Verdict:
    """A backward pass's mismatch, paid by gradient: each gradient asked for is an equal share
    of the check's points, earned when it matches the reference on every call (a right dV
    beside a wrong dQ earns its third). Anything else's mismatch as it is."""
    if not conv.backward or mismatch.status != "failed" or any(o.status != "ok" for _, o in results):
        return mismatch   # a call that failed earns nothing of it
    right = [part for part in conv.returns
             if all(o.parts.came_back(part) and part in o.parts.values
                    and not compare(o.parts.values[part], expected, probe_tolerance(p, ctx.tolerance), conv.columns)
                    for p, o in results
                    for expected in [ctx.predictions.parts(conv, CORRECT, p.case)[part]])]
    if not right:
        return mismatch
    if len(right) == 1:
        said = f"The {PART_WORDS[right[0]]} matches"
    else:
        names = [PART_WORDS[p].removeprefix("gradient ") for p in right]
        said = f"The gradients {', '.join(names[:-1])} and {names[-1]} match"
    return Verdict("failed", f"{mismatch.message} {said} the reference on every case, so this check gives "
                             f"{'its' if len(right) == 1 else 'their'} share: {len(right)} of the "
                             f"{len(conv.returns)} gradients asked for.",
                   mismatch.figures, share=len(right) / len(conv.returns))


def judge_against_reference(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    return _judge_reference(fn, ctx, results, overflow_allowed=True)


SHEET_ONLY = ("Returns the answers printed on the assignment sheet for its data, but computes something else "
              "on new values in the same shapes, so they earn nothing here: the sheet's answers count only "
              "when the function computes them, not when it recognises the sheet's data.")
# The same for a course's own data, in the course's words (its label): a course that has no
# assignment sheet is never told of one.
OWN_DATA_ONLY = ("Returns the expected answers on {label}, but computes something else on new values in the same "
                 "shapes, so they earn nothing here: the answers on {label} count only when the function computes "
                 "them, not when it recognises that data.")


def sheet_cases(fn: FunctionSpec) -> list[Case]:
    """The data the `fixed` check compares on: the course's own (fn.sheet), else the built-in
    sheet fn.fixed_data names."""
    if fn.sheet is not None:
        return list(fn.sheet.cases)
    if fn.fixed_data is None:
        raise ValueError(f"{fn.name} names no sheet data: its spec has no fixed check")
    return FIXED_DATA[fn.fixed_data]()


def check_title(fn: FunctionSpec, kind: str) -> str:
    """A check's title as `fn`'s students read it: the `fixed` check of a course's own data is
    called by the course's label, never "the assignment sheet"."""
    if kind == "fixed" and fn.sheet is not None:
        return fn.sheet.title
    return CHECKS[kind].title


def _sheet_only(fn: FunctionSpec) -> str:
    return OWN_DATA_ONLY.format(label=fn.sheet.label) if fn.sheet is not None else SHEET_ONLY


def judge_sheet(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """The sheet's data, whose answers are printed, then random values in exactly its shapes
    (see _fixed). The printed answers earn the points only when one computation explains what
    the function returns on both, inputs it cannot have seen included: the reference, or a known
    mistake that the sheet's data cannot tell from it (the other checks judge that one). A
    function that returns the printed answers only for the sheet's data (compared, hashed or
    told apart by shape) has memorised them."""
    sheet, twins = results[:len(results) // 2], results[len(results) // 2:]
    verdict = judge_against_reference(fn, ctx, sheet)
    if not verdict.earned:
        return verdict
    for probe, outcome in twins:
        failed = _failed_call(probe, outcome)
        if failed:
            return Verdict("failed", f"{_sheet_only(fn)} {failed.message}")
    conv = fn.convention
    observed = [(p.case, o.parts.values, probe_tolerance(p, ctx.tolerance)) for p, o in results]
    if any(agrees(conv, e, observed, ctx.predictions) for e in (CORRECT, *explanations(conv))):
        return verdict
    for probe, outcome in twins:
        mismatch = _reference_mismatch(conv, probe, outcome.parts, ctx, overflow_allowed=True)
        if mismatch:
            return Verdict("failed", f"{_sheet_only(fn)} {mismatch.message}", mismatch.figures)
    return verdict


def judge_stability(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """Whether the values stay finite: the parts returned are judged, and a part not returned
    is the comparing checks' to charge."""
    return _judge_reference(fn, ctx, results, overflow_allowed=False, paid_by_part=False)


def _weights_in(parts: Parts) -> list:
    found = []
    if "weights" in parts.values:
        found.append(("attention weights", parts.values["weights"]))
    for i, w in enumerate(parts.values.get("weights_per_head", [])):
        found.append((f"attention weights of head {i + 1}", w))
    if "mean_weights" in parts.values:
        found.append((PART_WORDS["mean_weights"], parts.values["mean_weights"]))
    return found


def _weight_parts(conv: Convention) -> list[str]:
    return [p for p in WEIGHT_PARTS if p in conv.returns]


def judge_distribution(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    for probe, outcome in results:
        problem = _unusable([(probe, outcome)], _weight_parts(fn.convention))
        if problem:
            return problem
        weights = _weights_in(outcome.parts)
        if not weights:
            return Verdict("failed", f"On {probe.label}: no attention weights were returned.")
        batched = fn.convention.batched
        for what, w in weights:
            w = w.astype(np.float64)
            if w.ndim != 2 + batched or w.size == 0 or not np.all(np.isfinite(w)):
                shape = "B x N x N array" if batched else "N x N matrix"
                return Verdict("failed", f"On {probe.label}: the {what} are not a finite {shape}.")
            if w.min() < -1e-12:
                return Verdict("failed", f"On {probe.label}: the {what} contain a negative value ({w.min():.3g}).")
            sums = w.sum(axis=-1)
            worst = np.unravel_index(int(np.argmax(np.abs(sums - 1))), sums.shape)
            if abs(sums[worst] - 1) > 1e-6:
                # Tokens as columns (a softmax helper over axis 0 included): a query's weights are a column.
                line, axis = ("column", "axis=0") if fn.convention.columns else ("row", "axis=-1")
                where = f"{line} {worst[-1]}" + (f" of batch element {worst[0]}" if batched else "")
                return Verdict("failed", f"On {probe.label}: {where} of the {what} sums to {sums[worst]:.4g}; "
                                         f"each query's weights must sum to 1 (softmax over the keys, {axis}).",
                               weight_heatmaps(fn.convention, probe, outcome.parts))
    return Verdict("passed", f"Weights are non-negative and each row sums to 1 on {len(results)} case(s).")


def _permute(value, order: np.ndarray, axes: tuple):
    if isinstance(value, list):
        return [_permute(v, order, axes) for v in value]
    for axis in axes:
        value = np.take(value, order, axis=axis)
    return value


def _unusable(results, parts) -> Verdict | None:
    """Why calls cannot be judged on `parts`: one of them failed, or lacks one of the parts
    (every failure is said before any missing part)."""
    for p, o in results:
        failed = _failed_call(p, o)
        if failed:
            return failed
    for part in parts:
        for p, o in results:
            if part not in o.parts.values:
                return _missing_part(p, o.parts, part)
    return None


def _returned_parts(results, parts) -> tuple[list[str], Verdict | None]:
    """The parts a property check judges, and why its calls cannot be judged on them (or None):
    those of `parts` that came back from some call. A part no call returned at all is charged
    by the checks that compare values (its share of their points), by the weights' checks and
    by return_structure, not again by each property; one returned in a form that cannot be
    decoded is judged, and fails. When nothing came back, every part is judged, and fails."""
    for p, o in results:
        failed = _failed_call(p, o)
        if failed:
            return [], failed
    returned = [part for part in parts if any(o.parts.came_back(part) for _, o in results)] or list(parts)
    return returned, _unusable(results, returned)


def _axes_not_over(probe, part: str, value, axes: tuple, length: int, what: str) -> Verdict | None:
    """A permutation check moves `axes` of a returned part. The returned values are the
    student's: an axis that does not run over the permuted `length` things is a wrong answer,
    never a permutation the grader cannot make."""
    for array in value if isinstance(value, list) else [value]:
        shape = np.shape(array)
        for axis in axes:
            if len(shape) <= axis or shape[axis] != length:
                return Verdict("failed", f"On {probe.label}: the {PART_WORDS[part]} has shape {shape}; "
                                         f"its axis {axis} should run over the {what}.")
    return None


def judge_permutation(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    (base_probe, base), (probe, permuted) = results
    returned, unusable = _returned_parts(results, fn.convention.returns)
    if unusable:
        return unusable
    order = make.token_permutation(base_probe.case.n, ctx.seed)
    for part in returned:
        value = base.parts.values[part]
        off_axis = _axes_not_over(base_probe, part, value, fn.convention.token_axes(part), len(order),
                                  f"{len(order)} tokens")
        if off_axis:
            return off_axis
        problem = compare(permuted.parts.values[part], _permute(value, order, fn.convention.token_axes(part)),
                          ctx.tolerance,
                          against="the original order's result, permuted")
        if problem:
            return Verdict("failed", f"Permuting the tokens (order {order.tolist()}) should permute the "
                                     f"{PART_WORDS[part]} the same way, but the result {problem}.")
    return Verdict("passed", f"Permuting the tokens (order {order.tolist()}) permutes the results the same way.")


def _keys_owner(conv: Convention) -> str:
    """Whose rows the memory-permutation check reorders, in words."""
    return "key and value inputs'" if conv.three_inputs else "memory's"


def judge_memory_permutation(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """Cross-attention attends a set of keys with their values: reordering the memory's rows
    (or the key and value inputs' rows, in the same order) reorders the keys' axis of what is
    returned and leaves the output as it was."""
    (base_probe, base), (probe, permuted) = results
    returned, unusable = _returned_parts(results, fn.convention.returns)
    if unusable:
        return unusable
    order = make.memory_permutation(base_probe.case.lk, ctx.seed)
    owner = _keys_owner(fn.convention)
    for part in returned:
        value = base.parts.values[part]
        axes = fn.convention.memory_axes(part)
        off_axis = _axes_not_over(base_probe, part, value, axes, len(order), f"{owner} {len(order)} rows (keys)")
        if off_axis:
            return off_axis
        problem = compare(permuted.parts.values[part], _permute(value, order, axes), ctx.tolerance,
                          against="the original order's result" + (", permuted" if axes else ""))
        if problem:
            return Verdict("failed", f"Permuting the {owner} rows (keys and values together, order "
                                     f"{order.tolist()}) should leave the {PART_WORDS[part]} "
                                     f"{'permuted the same way' if axes else 'unchanged'}, "
                                     f"but the result {problem}.")
    return Verdict("passed", f"Permuting the {owner} rows (order {order.tolist()}) leaves the output unchanged.")


def _causal_parts(conv: Convention) -> list[str]:
    """The returned parts with one row per query: what a later token may not change."""
    return [p for p in conv.returns if p in ("output", *WEIGHT_PARTS, "scores", "scores_per_head", "heads")]


def _rows(value, last: int, axis: int):
    """Rows 0 to `last` on the queries' axis (of each head's array); what has no such axis is
    compared whole."""
    if isinstance(value, list):
        return [_rows(v, last, axis) for v in value]
    value = np.asarray(value)
    return np.take(value, range(min(last + 1, value.shape[axis])), axis=axis) if value.ndim > axis else value


def judge_causal(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """Under a causal mask query i attends only tokens up to i: changing the tokens after
    `kept` may change no row up to it."""
    (base_probe, base), (probe, changed) = results
    returned, unusable = _returned_parts(results, _causal_parts(fn.convention))
    if unusable:
        return unusable
    kept = future_start(base_probe.case.n) - 1
    for part in returned:
        axis = fn.convention.query_axis
        problem = compare(_rows(changed.parts.values[part], kept, axis), _rows(base.parts.values[part], kept, axis),
                          ctx.tolerance, against="the rows computed before the later tokens changed")
        if problem:
            return Verdict("failed", f"Changing the tokens after token {kept} changed the {PART_WORDS[part]} "
                                     f"of tokens 0 to {kept}: {problem}. Under a causal mask token i attends "
                                     "only tokens 0 to i.")
    return Verdict("passed", f"Changing the tokens after token {kept} leaves tokens 0 to {kept} unchanged.")


def judge_masked_keys(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """Every key the masks hide from a query gets exactly zero weight (up to the tolerance)."""
    for probe, outcome in results:
        problem = _unusable([(probe, outcome)], _weight_parts(fn.convention))
        if problem:
            return problem
        conv = fn.convention
        # A case without a mask (none here: the check applies to masked functions) hides no key.
        hidden = ~np.stack([np.ones((e.n, e.lk), dtype=bool) if e.keep is None else e.keep
                            for e in conv.elements(probe.case)])
        if not conv.batched:
            hidden = hidden[0]
        for what, w in _weights_in(outcome.parts):
            w = np.asarray(w, dtype=np.float64)
            if w.shape != hidden.shape:
                shape = "B x Lq x Lk" if conv.batched else "Lq x Lk"
                return Verdict("failed", f"On {probe.label}: the {what} are {w.shape}, not {shape} = {hidden.shape}.")
            leaked = np.where(hidden, np.nan_to_num(np.abs(w), nan=np.inf), 0.0)
            if leaked.max() > ctx.tolerance.atol:
                at = np.unravel_index(int(np.argmax(leaked)), leaked.shape)
                i, j = at[-2:]
                element = f" of batch element {at[0]}" if conv.batched else ""
                return Verdict("failed", f"On {probe.label}: query {i}{element} gives masked key {j} weight "
                                         f"{w[at]:.4g} in the {what}; a masked key gets weight 0.",
                               weight_heatmaps(fn.convention, probe, outcome.parts))
    return Verdict("passed", f"Masked keys get zero weight on {len(results)} case(s).")


def _element(value, i: int):
    """Batch element i of a returned part (of each head's array), or None when it has none."""
    if isinstance(value, list):
        found = [_element(v, i) for v in value]
        return None if any(f is None for f in found) else found
    value = np.asarray(value)
    return value[i] if value.ndim and value.shape[0] > i else None


def judge_batch_elements(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """A batch's elements are independent problems sharing the weights: element i of the
    batch's result is the function's own result on that element alone (a batch of one)."""
    returned, unusable = _returned_parts(results, fn.convention.returns)
    if unusable:
        return unusable
    (base_probe, base), *alone = results
    shared = [part for part in returned if part in WEIGHT_GRADIENTS]
    for part in shared:
        # A weight's gradient is one for the batch, which shares the weight: the sum of each
        # element's own.
        own = [np.asarray(single.parts.values[part], dtype=np.float64) for _, single in alone]
        problem = compare(base.parts.values[part], sum(own[1:], own[0]), ctx.tolerance,
                          against="the sum of the results on each element alone") \
            if len({o.shape for o in own}) == 1 else "has a shape that differs from element to element"
        if problem:
            return Verdict("failed", f"A batch shares the weights, so the {PART_WORDS[part]} of a batch of "
                                     f"{len(alone)} should be the sum of what the function returns for each element "
                                     f"alone, but it {problem}. Sum each element's gradient over the batch axis.")
    for i, (_probe, single) in enumerate(alone):
        for part in returned:
            if part in shared:
                continue
            value = base.parts.values[part]
            mine, own = _element(value, i), _element(single.parts.values[part], 0)
            if mine is None or own is None:
                return Verdict("failed", f"On {base_probe.label}: the {PART_WORDS[part]} has no batch axis "
                                         f"with element {i} (a batch's results are B x ...).")
            problem = compare(mine, own, ctx.tolerance, against="the result on that element alone")
            if problem:
                return Verdict("failed", f"Element {i} of a batch of {len(alone)} should be what the function "
                                         f"returns for that element alone (a batch of one), but the "
                                         f"{PART_WORDS[part]} {problem}. A batch's elements are computed apart: "
                                         "a softmax, a sum or a reshape across the batch axis mixes them.")
    return Verdict("passed", f"Each of the {len(alone)} elements of a batch is what the function returns for it alone.")


def _unchanged(sent, after) -> bool:
    """An argument is as it was sent: each array of it (those in a list, a dict or an object
    included) has its shape and values; ints and flags cannot be changed in place."""
    if isinstance(sent, (list, tuple)):   # a tuple's arrays can be changed in place too
        return isinstance(after, (list, tuple)) and len(after) == len(sent) and all(map(_unchanged, sent, after))
    if isinstance(sent, dict):
        return isinstance(after, dict) and set(after) == set(sent) and all(_unchanged(v, after[k])
                                                                           for k, v in sent.items())
    if isinstance(sent, SimpleNamespace):
        return isinstance(after, SimpleNamespace) and _unchanged(vars(sent), vars(after))
    if isinstance(sent, np.ndarray):
        return isinstance(after, np.ndarray) and after.shape == sent.shape and np.array_equal(after, sent)
    return True


def judge_own_answers(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    """memory_layout and dtypes: the same values given in another layout or dtype give what the
    function itself returns on them as C-ordered float64 arrays (within the variant's tolerance:
    float32's precision for float32). What it returns is compared with its own answer, never
    with the reference: a wrong value is the comparing checks' to charge, once."""
    returned, unusable = _returned_parts(results, fn.convention.returns)
    if unusable:
        return unusable
    plain = {p.case.label: o for p, o in results if not p.variant.rule}
    variants = [(p, o) for p, o in results if p.variant.rule]
    for probe, outcome in variants:
        own = plain[probe.case.label]
        against = f"its own result on the same inputs {probe.variant.plain_words}"
        for part in returned:
            problem = compare(outcome.parts.values[part], own.parts.values[part],
                              probe_tolerance(probe, ctx.tolerance), fn.convention.columns, against=against)
            if problem:
                return Verdict("failed", f"On {probe.label}: the {PART_WORDS[part]} {problem}. {probe.variant.rule}")
    return Verdict("passed", f"Returns {_own_answers_said([p.variant for p, _ in variants])}.")


def _own_answers_said(variants: list[InputVariant]) -> str:
    """"on Fortran-ordered inputs and non-contiguous inputs what it returns on the same inputs C-ordered"."""
    by_plain: dict[str, list[str]] = {}
    for variant in dict.fromkeys(variants):
        by_plain.setdefault(variant.plain_words, []).append(variant.words.removeprefix(", "))
    return ", and ".join(f"on {' and '.join(words)} what it returns on the same inputs {plain}"
                         for plain, words in by_plain.items())


def judge_unmodified(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    (probe, outcome), = results
    failed = _failed_call(probe, outcome)
    if failed:
        return failed
    after = outcome.inputs_after or []
    if len(after) != len(outcome.sent):
        # The harness reports every value it was sent; a reply that leaves some out proves nothing.
        return Verdict("failed", f"The kernel reported {len(after)} of the {len(outcome.sent)} inputs after the "
                                 "call, so it cannot be told that they were left unmodified.")
    for name, sent, changed in zip(fn.params, outcome.sent, after):
        if not _unchanged(sent, changed):
            return Verdict("failed", f"The function changed its argument `{name}` in place; "
                                     "work on a copy (e.g. `x = x - m`, not `x -= m`).")
    given = len(fn.params)
    for message, sent, changed in zip(changed_messages(fn.convention), outcome.sent[given:], after[given:]):
        if not _unchanged(sent, changed):
            return Verdict("failed", message)
    return Verdict("passed", "The inputs are left unmodified.")


def judge_structure(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    (probe, outcome), = results
    failed = _failed_call(probe, outcome)
    if failed:
        return failed
    conv = fn.convention
    problems = list(outcome.parts.problems)
    for part, expected in conv.expected_parts(probe.case).items():
        actual = outcome.parts.values.get(part)
        if actual is None:
            continue
        if isinstance(expected, list):
            if not isinstance(actual, list) or len(actual) != len(expected):
                shape = "N x d_v" if part == "heads" else "N x N"
                problems.append(f"the {PART_WORDS[part]} should be a list of {len(expected)} {shape} arrays")
            continue
        if actual.shape != expected.shape:
            problem = compare(actual, expected, ctx.tolerance, conv.columns)
            problems.append(f"the {PART_WORDS[part]} {problem}")
    if problems:
        return Verdict("failed", f"Returned {outcome.parts.returned}: " + "; ".join(problems) + ".")
    return Verdict("passed", f"Returns {outcome.parts.returned}, as expected.")


def judge_forbidden(fn: FunctionSpec, ctx: Context, results) -> Verdict:
    uses = ctx.forbidden_uses.get(fn.name, [])
    if uses:
        return Verdict("failed", f"Uses {', '.join(sorted(uses))}, which this assignment forbids: "
                                 "implement attention with NumPy operations only.")
    return Verdict("passed", "Uses no forbidden library.")


def _fixed(fn: FunctionSpec, ctx: Context):
    """The sheet's data, then its twins: random values in exactly the same shapes, in the same
    order (judge_sheet pairs them up)."""
    sheet = sheet_cases(fn)
    return [Probe(c) for c in sheet] + [Probe(c) for c in make.shaped_like(sheet, ctx.seed)]


def _random(fn: FunctionSpec, ctx: Context):
    return [Probe(c) for c in make.random_cases(fn.convention, ctx.seed)]


def _base(fn: FunctionSpec, ctx: Context, **kw):
    return Probe(make.base_case(fn.convention, ctx.seed), **kw)


def _permutation(fn: FunctionSpec, ctx: Context):
    base = make.base_case(fn.convention, ctx.seed)
    return [Probe(base), Probe(base.permuted(make.token_permutation(base.n, ctx.seed)))]


def _batch_alone(fn: FunctionSpec, ctx: Context):
    """The base batch, then each of its elements as a batch of one."""
    base = make.base_case(fn.convention, ctx.seed)
    alone = [replace(e, batch_rest=(), label=f"{base.label}: batch element {i} alone")
             for i, e in enumerate(base.elements)]
    return [Probe(base), *(Probe(e) for e in alone)]


def _memory_permutation(fn: FunctionSpec, ctx: Context):
    base = make.base_case(fn.convention, ctx.seed)
    return [Probe(base), Probe(base.memory_permuted(make.memory_permutation(base.lk, ctx.seed)))]


def _self_attention(fn: FunctionSpec, ctx: Context):
    """The base case with X as query, key and value: one array passed three times, and equal
    copies of it."""
    base = make.base_case(fn.convention, ctx.seed)
    return [Probe(base.as_self_attention(same_array=True)), Probe(base.as_self_attention(same_array=False))]


def future_start(n: int) -> int:
    """The first token the causal check changes: the later half of the sequence."""
    return max(1, n // 2)


def _future_changed(fn: FunctionSpec, ctx: Context):
    """The base case, and the same case with every token from future_start on redrawn."""
    base = make.base_case(fn.convention, ctx.seed)
    start = future_start(base.n)
    x = base.x.copy()
    x[start:] = np.random.default_rng(ctx.seed + 8).normal(size=x[start:].shape)
    return [Probe(base), Probe(replace(base, x=x, label=f"{base.label} (tokens after {start - 1} changed)"))]


# memory_layout's and dtypes' probes: first the variants, then the plain inputs each variant's
# answer is compared with (judge_own_answers), the base case's already called for other checks.

def _layouts(fn: FunctionSpec, ctx: Context):
    """The base case Fortran-ordered and non-contiguous, then C-ordered."""
    return [_base(fn, ctx, variant=InputVariant.FORTRAN), _base(fn, ctx, variant=InputVariant.STRIDED), _base(fn, ctx)]


def _dtypes(fn: FunctionSpec, ctx: Context):
    """The base case in float32 and the integer case's whole values as integers, then the same
    in float64."""
    variants, plain = [_base(fn, ctx, variant=InputVariant.FLOAT32)], [_base(fn, ctx)]
    if fn.convention.int_inputs != "none":
        whole = make.integer_case(fn.convention, ctx.seed)
        variants.append(Probe(whole, variant=InputVariant.INT))
        plain.append(Probe(whole, variant=InputVariant.FLOATS))
    return variants + plain


# How each check of course/check_rules.py calls the function and judges what came back, by name.
_PROBES_AND_JUDGES: dict[str, tuple[Callable, Callable]] = {
    "fixed": (_fixed, judge_sheet),
    "random_shapes": (_random, judge_against_reference),
    "single_head": (lambda fn, ctx: [Probe(make.single_head_case(fn.convention, ctx.seed))], judge_against_reference),
    "weights_distribution": (lambda fn, ctx: [_base(fn, ctx), *_random(fn, ctx)], judge_distribution),
    "permutation_equivariance": (_permutation, judge_permutation),
    "memory_permutation": (_memory_permutation, judge_memory_permutation),
    "key_value_permutation": (_memory_permutation, judge_memory_permutation),
    "self_attention_inputs": (_self_attention, judge_against_reference),
    "batch_elements": (_batch_alone, judge_batch_elements),
    "causal_future": (_future_changed, judge_causal),
    "masked_keys_zero_weight": (lambda fn, ctx: [_base(fn, ctx), *_random(fn, ctx)], judge_masked_keys),
    "memory_layout": (_layouts, judge_own_answers),
    "dtypes": (_dtypes, judge_own_answers),
    "inputs_unmodified": (lambda fn, ctx: [_base(fn, ctx, return_inputs=True)], judge_unmodified),
    "return_structure": (lambda fn, ctx: [_base(fn, ctx)], judge_structure),
    "numerical_stability": (lambda fn, ctx: [Probe(make.large_score_case(fn.convention, ctx.seed))], judge_stability),
    "forbidden_libraries": (lambda fn, ctx: [], judge_forbidden),
}
CHECKS: dict[str, CheckKind] = {name: CheckKind(rule, *_PROBES_AND_JUDGES[name]) for name, rule in CHECK_RULES.items()}


def check_context(ctx: Context, hidden: bool) -> Context:
    """The context a check draws its cases from and is judged in. A hidden check's seed is
    derived apart from the visible checks' one, so no case of a hidden check is ever a visible
    check's (a visible check that failed on a shared case would show a student that case's
    expected weights)."""
    return replace(ctx, seed=hidden_cases_seed(ctx.seed), hidden=True) if hidden else ctx


def check_probes(kind: str, fn: FunctionSpec, ctx: Context) -> list[Probe]:
    """The calls the check `kind` of `fn` needs. A hidden check's cases carry HIDDEN_CASE_MARK
    in their label: they are called apart from any visible case (a probe is known by its label),
    and a rendering for students can tell (grader/report/view.py)."""
    probes = CHECKS[kind].probes(fn, ctx)
    if not ctx.hidden:
        return probes
    return [_marked(p, HIDDEN_CASE_MARK) for p in probes]


def _marked(probe: Probe, mark: str) -> Probe:
    return replace(probe, case=replace(probe.case, label=f"{probe.case.label} {mark}"))


def hidden_twins(fn: FunctionSpec, ctx: Context, hidden_probes: list[Probe]) -> frozenset[str]:
    """The labels a visible check's cases may share with the hidden checks' ones: a hidden
    check draws its cases from its own seed, but in the same families as the visible checks
    (the randomized shapes of random_shapes are weights_distribution's too), so a visible case
    of the same label has the same shapes, and a student reading it would take it for the
    hidden one. The base case is left out: every check draws it, its shapes are in nearly every
    visible message, and hiding them would hide most feedback."""
    base = make.base_case(fn.convention, ctx.seed).label
    return frozenset(p.case.label.removesuffix(f" {HIDDEN_CASE_MARK}") for p in hidden_probes) - {base}


def mark_hidden_twins(probes: list[Probe], twins: frozenset[str]) -> list[Probe]:
    """The probes, those whose case shares a label with a hidden check's case (hidden_twins)
    marked with SHAPED_AS_HIDDEN_MARK: a check whose details name one is withheld from students
    (grader/report/view.py). The same mark on every check's copy keeps the calls shared."""
    return [_marked(p, SHAPED_AS_HIDDEN_MARK) if p.case.label in twins else p for p in probes]


def results_to_diagnose(results: list, verdict: Verdict) -> list:
    """The calls a visible check's diagnosis may draw on: a diagnosis (or where it locates the
    largest difference) from a case mark_hidden_twins marked would tell its shapes beside a
    verdict students see. A verdict that names such a case is withheld whole, so draws on all."""
    if SHAPED_AS_HIDDEN_MARK in verdict.message:
        return results
    return [(p, o) for p, o in results if SHAPED_AS_HIDDEN_MARK not in p.case.label]


def evidence_probes(fn: FunctionSpec, ctx: Context) -> list[Probe]:
    """Inputs a function cannot have seen in advance, with two or more tokens: the randomized
    cases of the checks, and random values in the shapes of the sheet's own data (so that a
    function which reads the notebook's sizes from its globals still shows what it computes).
    The non-answer rule asks whether anything it returns on these is attention."""
    probes = [*_random(fn, ctx), _base(fn, ctx)]
    if fn.convention.heads == "many":
        probes.append(Probe(make.single_head_case(fn.convention, ctx.seed)))
    if fn.fixed_data:
        probes += [Probe(c) for c in make.shaped_like(sheet_cases(fn), ctx.seed)]
    return [p for p in probes if p.case.n >= 2]
