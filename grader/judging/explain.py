"""What explains a value a student function returned: the reference, one known mistake, or
two known mistakes made together, each computed on the very inputs it was called with.

The diagnosis and the non-answer rule both ask this question, so it is answered here once;
every computation is kept per (convention, explanation, case) for the grading process
(computed_once.py).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache, lru_cache
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np

from grader.reference.mistakes import (HARMLESS, MISTAKES, REDUCED_PRECISION, REFERENCE, ROUNDED, Mistake, Variant,
                                       combined, mistaken_elements)

from grader.calling.conventions import Convention
from grader.calling.returns import Tolerance, same
from grader.judging.computed_once import Store
from grader.reference.case_key import case_key

# A returned value this close to one of the function's arguments is that argument.
ARGUMENT_TOLERANCE = Tolerance()
HANDED_BACK = "one of its own arguments, unchanged"
SAME_ROW = "the same row for every token"

# The precisions told apart from a float64 computation (precision_of): rounding to this many
# decimals (fewer is not rounding a result, it is an integer or a one-hot matrix) ...
ROUNDED_DECIMALS = range(2, 7)
# ... or this many significant bits: bfloat16 keeps 8, float16 11, float32 24.
REDUCED_BITS = range(6, 25)
# What arithmetic in b significant bits leaves of attention, relative to its largest entry, in
# units of 2**-b: float16 attention measured at up to about 40 (exp() amplifies the scores' error).
LOW_PRECISION_ERROR = 128
FLOAT_NAMES = {8: "bfloat16", 11: "float16", 24: "float32"}


@dataclass(frozen=True)
class Precision:
    """The precision a returned value carries, when it is less than float64's: rounded to
    `decimals` decimals, or `bits` significant bits."""
    decimals: int | None = None
    bits: int | None = None

    @property
    def words(self) -> str:
        if self.decimals is not None:
            return f"rounded to {self.decimals} decimals"
        named = f", as {FLOAT_NAMES[self.bits]} gives" if self.bits in FLOAT_NAMES else ""
        return f"only {self.bits} significant bits{named}"

    @property
    def slip(self) -> Mistake:
        return ROUNDED if self.decimals is not None else REDUCED_PRECISION

    def tolerance(self, tol: Tolerance, expected) -> Tolerance:
        """`tol` widened by what this precision leaves of `expected` (rounding moves an entry by
        up to half a unit of the last decimal, twice that at a tie or after rounded steps)."""
        if self.decimals is not None:
            return Tolerance(tol.rtol, tol.atol + 10.0 ** -self.decimals)
        assert self.bits is not None, "a precision is rounded decimals or significant bits"
        return Tolerance(tol.rtol, tol.atol + LOW_PRECISION_ERROR * 2.0 ** -self.bits * _largest(expected))


def _largest(value) -> float:
    arrays = value if isinstance(value, list) else [value]
    finite = [np.abs(a[np.isfinite(a)]) for a in (np.asarray(x, dtype=np.float64) for x in arrays)]
    return max((float(f.max()) for f in finite if f.size), default=0.0)


def _finite_entries(value) -> np.ndarray:
    arrays = value if isinstance(value, list) else [value]
    flat = [np.asarray(a, dtype=np.float64).ravel() for a in arrays]
    entries = np.concatenate(flat) if flat else np.zeros(0)
    return entries[np.isfinite(entries)]


# Most values looked at for their precision are float64 results, rounded to nothing: each test
# first asks the most it allows (the last decimals, the most bits), which such a value already
# fails, before it looks for the fewest.
# Anything held at fewer decimals or bits is held at more, so the answer is the same.
CLEARLY_UNROUNDED = 16   # units in the last place: np.round's own error is one or two


def _decimals(entries: np.ndarray, dtype) -> int | None:
    """The fewest decimals every entry is written with, up to the last of ROUNDED_DECIMALS: each
    is within two units of its own last place (in the dtype it came in) of itself so rounded."""
    spacing = 2 * np.abs(np.spacing(entries.astype(dtype))).astype(np.float64)
    last = ROUNDED_DECIMALS.stop - 1
    if np.any(np.abs(entries - np.round(entries, last)) > CLEARLY_UNROUNDED * spacing):
        return None
    for decimals in range(ROUNDED_DECIMALS.stop):
        if np.all(np.abs(entries - np.round(entries, decimals)) <= spacing):
            return decimals
    return None


def _holds_in(entries: np.ndarray, bits: int) -> bool:
    """Every entry is exact in `bits` significant bits (and so in more)."""
    shifted = np.ldexp(np.frexp(entries)[0], bits)
    return bool(np.array_equal(shifted, np.round(shifted)))


def _bits(entries: np.ndarray) -> int:
    """The fewest significant bits that hold every entry exactly (53 for float64 results)."""
    return next((bits for bits in range(1, 54) if _holds_in(entries, bits)), 53)


def precision_of(value) -> Precision | None:
    """The reduced precision a returned value shows, or None: every finite entry is a number of
    ROUNDED_DECIMALS decimals, or holds in REDUCED_BITS significant bits. A float64 result has
    neither (its entries need all 53 bits and no short decimal), so noise added to attention is
    never taken for rounding; nor are integers, one-hot or identity matrices, which hold in a bit."""
    try:
        entries = _finite_entries(value)
    except (TypeError, ValueError):
        return None
    if np.count_nonzero(entries) < 2:
        return None
    arrays = value if isinstance(value, list) else [value]
    single = any(np.asarray(a).dtype == np.float32 for a in arrays)
    decimals = _decimals(entries, np.float32 if single else np.float64)
    if decimals is not None:
        return Precision(decimals=decimals) if decimals in ROUNDED_DECIMALS else None
    if not _holds_in(entries, REDUCED_BITS.stop - 1):
        return None
    bits = _bits(entries)
    return Precision(bits=bits) if bits in REDUCED_BITS else None


def shown_precision(value) -> Callable[[], Precision | None]:
    """precision_of(value), worked out once, when first asked: a value is compared with many
    known computations, and its precision is the same for each."""
    return cache(lambda: precision_of(value))


def matches(value, expected, tol: Tolerance, shown: Callable[[], Precision | None]) -> bool:
    """`value` is `expected` under the comparison rule, or to the reduced precision it shows
    (`shown`: its shown_precision, which the caller keeps for every comparison of the value)."""
    if same(value, expected, tol):
        return True
    precision = shown()
    return precision is not None and same(value, expected, precision.tolerance(tol, expected))


@dataclass(frozen=True)
class Explanation:
    mistakes: tuple[Mistake, ...] = ()   # none: the reference itself
    variant: Variant = REFERENCE

    @property
    def is_reference(self) -> bool:
        return not self.mistakes

    @property
    def title(self) -> str:
        return " and ".join(m.title for m in self.mistakes)

    @property
    def advice(self) -> str:
        return " ".join(f"{m.explanation} {m.hint}" for m in self.mistakes)


CORRECT = Explanation()


def features(conv: Convention) -> set[str]:
    """What a convention's functions compute, which decides the mistakes they can make: the
    steps it declares, and what its shapes and returns say."""
    found = set(conv.steps)
    if "scores" in conv.steps and conv.scaled:
        found.add("scaled")
    # Whether D (the width of X, or of Q when it holds every head) differs from d_k.
    if conv.input_stage <= 1 and conv.heads != "one" or conv.input_stage == 0 and not conv.square:
        found.add("model_dim")
    if conv.splits_heads:
        found.add("fused_heads")
    if conv.heads != "one":
        found.add("heads")
    if conv.projection:
        found.add("projection")
    if conv.biases:
        found.add("biases")
    if conv.square:
        found.add("square")
    if not conv.columns:
        found.add("tokens_as_rows")
    if "output" in conv.returns:
        found.add("output")
    if conv.masked:
        found.add("mask")
    if conv.causal:
        found.add("causal")
    if conv.projection_bias:
        found.add("projection_bias")
    if conv.cross:
        found.add("cross")
    if conv.three_inputs:
        found.add("three_inputs")
    if conv.batched:
        found.add("batch")
    if conv.stacked_heads:
        found.add("stacked_heads")
    # The framework layout x @ W.T on tokens as rows (tokens as columns compute W @ X, where
    # the transpose is the layout itself).
    if conv.weights == "out_in" and not conv.columns and conv.input_stage == 0:
        found.add("framework_layout")
    if conv.attends:
        found.add("additive" if conv.additive else "dot_product")
    if "scale" in conv.roles and conv.scaled:
        found.add("scale_flag")
    if conv.unit == "attention":
        found.add("attention_output")
    else:
        found.add("feed_forward" if conv.unit == "feed_forward" else "layer_norm")
    if conv.unit in ("post_ln", "pre_ln"):
        found |= {"block", "feed_forward"}
    if conv.norm_reads_tokens:
        found.add("norm_of_tokens")
    if "feed_forward" in found:
        found.add("gelu" if conv.activation != "relu" else "relu")
    if conv.backward:
        found.add("backward")
        if "x" in conv.roles and conv.heads != "one":
            found.add("backward_heads")          # it merges the heads' gradients back itself
        if "x" in conv.roles and conv.three_inputs:
            found.add("backward_three_inputs")   # it returns the key and value inputs' gradients apart
        if "dwo" in conv.returns:
            found.add("backward_projection")     # it returns the output projection's weight gradient
        if conv.scaled:
            found.add("backward_scaled")
        if (conv.masked or conv.causal) and not conv.given_weights:
            found.add("backward_mask")
    return found


def applicable(conv: Convention) -> list[Mistake]:
    have = features(conv)
    return [m.words_for(have) for m in MISTAKES if m.needs <= have]


@lru_cache(maxsize=None)
def explanations(conv: Convention) -> tuple[Explanation, ...]:
    """Every known mistake the convention can make, then every pair of them that change
    different steps, in the order they are tried: a single mistake is named before a pair."""
    singles = applicable(conv)
    pairs = []
    for a, b in itertools.combinations(singles, 2):
        both = combined(a.variant, b.variant)
        if both is not None:
            pairs.append(Explanation((a, b), both))
    return tuple(Explanation((m,), m.variant) for m in singles) + tuple(pairs)


def harmless(conv: Convention) -> tuple[Explanation, ...]:
    """The softmaxes that differ from the reference only where exp() leaves its range: without
    max-subtraction, which the sheets do not ask for, or with one maximum for the whole matrix."""
    return tuple(e for e in explanations(conv) if len(e.mistakes) == 1 and e.mistakes[0].id in HARMLESS)


# Enough for every prediction a batch of the bundled assignments needs (about 4,600 over all
# five of them, some 7 KB each), so a worker keeps at most about 70 MB of them.
KEPT_PREDICTIONS = 10_000
# The cases as conventions compute on them: about 150 for the same batch.
KEPT_ELEMENTS = 1_000


class Predictions:
    """The parts an explanation predicts for a case. Each is computed once per grading process
    (computed_once.py): it depends only on the convention, the explanation and the case's
    content, which is the same for every submission graded on the same spec and seed. A
    notebook's own cases are looked up by their label, which names one case in a notebook."""

    shared = Store(KEPT_PREDICTIONS)
    shared_elements = Store(KEPT_ELEMENTS)

    def __init__(self):
        self._cache: dict[tuple, Mapping] = {}
        self._keys: dict[str, bytes] = {}   # a case's label -> its content's key
        self._matched: dict[Convention, dict[Explanation, None]] = {}   # in the order first matched

    def likely_first(self, conv: Convention) -> Iterator[Explanation]:
        """The reference and every explanation of the convention, those that matched a value of
        this notebook's (`matched`) first: a function that makes one mistake makes it on every
        input. Only for a question any of them answers (is some known computation this value?),
        where their order changes nothing but the time it takes."""
        before = tuple(self._matched.get(conv, ()))   # as it is now: matched() may add to it meanwhile
        yield from before
        yield from (e for e in (CORRECT, *explanations(conv)) if e not in before)

    def matched(self, conv: Convention, explanation: Explanation) -> None:
        self._matched.setdefault(conv, {})[explanation] = None

    def parts(self, conv: Convention, explanation: Explanation, case) -> Mapping:
        key = (conv, explanation.variant, case.label)
        found = self._cache.get(key)
        if found is None:
            content = self._keys.get(case.label)
            if content is None:
                content = self._keys[case.label] = case_key(case)
            found = self._cache[key] = self.shared.get((conv, explanation.variant, content),
                                                       lambda: self._computed(conv, explanation, case, content))
        return found

    def _computed(self, conv: Convention, explanation: Explanation, case, content: bytes) -> dict:
        elements = self.shared_elements.get((conv, content), lambda: conv.elements(case))
        if explanation.is_reference:
            return conv.expected_parts(case, elements)
        with np.errstate(all="ignore"):
            return conv.predict(case, lambda elements: mistaken_elements(elements, explanation.variant), elements)


def agrees(conv: Convention, explanation: Explanation, observed, predictions: Predictions) -> bool:
    """The explanation predicts every part returned, on every case. `observed` holds
    (case, returned parts, tolerance) for each call."""
    compared = False
    for case, values, tol in observed:
        wanted = predictions.parts(conv, explanation, case)
        for part, value in values.items():
            if part in wanted:
                if not same(value, wanted[part], tol):
                    return False
                compared = True
    return compared


def precision_agrees(conv: Convention, explanation: Explanation, observed,
                     predictions: Predictions, shown: list[dict]) -> Precision | None:
    """The reduced precision at which the explanation predicts every part returned, on every
    case (`observed` as for agrees), when some part shows one; else None. `shown`: each
    observation's shown_precision of each part (shown_precisions), kept by the caller for
    every explanation it asks about."""
    found = None
    for (case, values, tol), precisions in zip(observed, shown):
        wanted = predictions.parts(conv, explanation, case)
        for part, value in values.items():
            if part not in wanted:
                continue
            if not matches(value, wanted[part], tol, precisions[part]):
                return None
            found = found or precisions[part]()
    return found


def shown_precisions(observed) -> list[dict]:
    """shown_precision of each part of each observation (case, returned parts, tolerance)."""
    return [{part: shown_precision(value) for part, value in values.items()} for _, values, _ in observed]


def differs_from_reference(conv: Convention, explanation: Explanation, observed, predictions: Predictions) -> bool:
    """On some case, the explanation predicts a returned part other than the reference does:
    a mistake that changes nothing on these inputs explains nothing."""
    for case, values, tol in observed:
        wanted = predictions.parts(conv, explanation, case)
        reference = predictions.parts(conv, CORRECT, case)
        if any(part in wanted and not same(wanted[part], reference[part], tol) for part in values):
            return True
    return False


def _arrays(arguments) -> list:
    """The arrays among the arguments, those in a list, a dict or an object (per-head or packed
    weights) too."""
    found = []
    for arg in arguments:
        if isinstance(arg, (list, tuple)):
            found += _arrays(arg)
        elif isinstance(arg, (dict, SimpleNamespace)):
            found += _arrays(list((arg if isinstance(arg, dict) else vars(arg)).values()))
        elif isinstance(arg, np.ndarray):
            found.append(arg)
    return found


def trivial(value, arguments: list) -> str | None:
    """Why a value could be produced without computing attention, or None when it could not:
    it is constant, every token gets the same row, every row is uniform, or it is one of the
    function's own arguments (or its transpose). A batched value (B x N x ...) is judged matrix
    by matrix. Non-finite entries where a mask leaves a row nothing to attend (NaN, as -inf
    fills give) are left out of the tests, but a value with no finite entry is trivial."""
    arrays = value if isinstance(value, list) else [value]
    if not arrays:
        return "empty"
    handed: list | None = None   # the arguments' arrays, found once for every array of the value
    for array in arrays:
        a = np.asarray(array, dtype=np.float64)
        # The arrays' own methods, and the finite entries picked out only when some are not:
        # this runs on every part of every call's reply, where np.any's dispatch and a copy
        # cost more than the tests themselves.
        finite_places = np.isfinite(a)
        all_finite = bool(finite_places.all())
        finite = a.ravel() if all_finite else a[finite_places]
        if finite.size == 0:
            return "empty or not finite"
        if not finite.any():
            return "all zeros"
        top, bottom = float(finite.max()), float(finite.min())
        scale = 1e-9 * max(1.0, top, -bottom)   # the largest magnitude among them
        if top - bottom <= scale:
            return "constant"
        if a.ndim >= 2:
            matrices = a.reshape(-1, *a.shape[-2:])
            # fmax and fmin leave NaN out as nanmax and nanmin do, and give NaN for an all-NaN
            # column or row without the warning those raise (silencing it cost more than the
            # test, and only non-finite entries can raise it).
            with np.errstate(invalid="ignore") if not all_finite else nullcontext():
                across_tokens = np.fmax.reduce(matrices, axis=1) - np.fmin.reduce(matrices, axis=1)
                along_rows = np.fmax.reduce(matrices, axis=2) - np.fmin.reduce(matrices, axis=2)
            # An all-NaN line (NaN > scale is false) counts as flat, as nan_to_num's 0 did.
            if a.shape[-2] > 1 and not (across_tokens > scale).any():
                return SAME_ROW
            if a.shape[-1] > 1 and not (along_rows > scale).any():
                return "uniform along each row"
        handed = _arrays(arguments) if handed is None else handed
        for arg in handed:
            # An argument of another shape, even transposed, is never the same.
            if arg.shape == a.shape and same(arg, a, ARGUMENT_TOLERANCE) \
                    or arg.ndim == a.ndim and arg.shape[::-1] == a.shape and same(arg.T, a, ARGUMENT_TOLERANCE):
                return HANDED_BACK
    return None
