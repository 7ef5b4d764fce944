"""Attention masks: the canonical keep-mask, the softmax that honours it, and the forms a
course's function takes a mask in.

Canonical form: a boolean array, True where query i may attend key j (Lq x Lk), or None when
every query may attend every key. A causal mask (query i attends keys j <= i) and a key-padding
mask (one flag per key) are keep-masks too, and combine with an attention mask by AND.

A course hands its function a mask in its own form (additive 0 / -inf, boolean "ignore", 0/1
floats, ...). Each `MaskForm` converts both ways: `to_course` makes the argument the course's
function receives from a canonical keep-mask, `from_course` says which keys the course's
function lets each query attend given that argument. How a fully masked row comes out depends
on how the function applies the mask, so it is a parameter of a case (`FULLY_MASKED_RULES`);
an additive form decides it by arithmetic, and says so in `fully_masked`. A causal mask a
function builds itself, with no argument or from a flag, is no form: the flag is the case's
`causal`, and the mask `causal_keep`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# What a row whose every key is masked gives, as courses differ:
#   zeros    - all weights 0, so the output row is 0 (a softmax that skips such rows)
#   uniform  - weights 1 / Lk (masked_fill with a large finite negative number replaces every score)
#   nan      - NaN weights (-inf everywhere: -inf - (-inf) is NaN), only when a course asks for it
#   unmasked - the row's softmax as if unmasked (a large finite negative number *added* to every
#              score shifts the row, which the softmax ignores up to float64 rounding)
FULLY_MASKED_RULES = ("zeros", "uniform", "nan", "unmasked")

# The large negative number of courses that avoid -inf; 1e9 is the usual one.
DEFAULT_BIG = 1e9


def causal_keep(lq: int, lk: int) -> np.ndarray:
    """Query i may attend keys j <= i."""
    return np.tril(np.ones((lq, lk), dtype=bool))


def combine(*keeps: np.ndarray | None) -> np.ndarray | None:
    """Every mask at once: a key may be attended only where all of them allow it. None (no
    mask) allows everything; the shapes broadcast (a key-padding mask of length Lk as 1 x Lk)."""
    given = [np.asarray(k, dtype=bool) for k in keeps if k is not None]
    if not given:
        return None
    out = given[0]
    for k in given[1:]:
        out = out & k
    return out


def with_key_padding(keep: np.ndarray | None, key_keep: np.ndarray, lq: int | None = None) -> np.ndarray:
    """An attention mask (Lq x Lk, B x Lq x Lk, or None for none: then give Lq) with a
    key-padding mask (Lk, or B x Lk: one row per batch element) applied to every query:
    B x Lq x Lk when batched."""
    keys = np.asarray(key_keep, dtype=bool)[..., None, :]      # ... x 1 x Lk: the same for every query
    if keep is None:
        if lq is None:
            raise ValueError("without an attention mask, say how many queries (lq) the mask is for")
        return np.broadcast_to(keys, (*keys.shape[:-2], lq, keys.shape[-1])).copy()
    return np.asarray(keep, dtype=bool) & keys


def _plain_softmax(scores: np.ndarray, axis, stable: bool) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=axis, keepdims=True)) if stable else np.exp(scores)
    return e / e.sum(axis=axis, keepdims=True)


def _group_size(shape: tuple, axis) -> int:
    axes = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([shape[a] for a in axes]))


def masked_softmax(scores: np.ndarray, keep: np.ndarray | None, fully_masked: str = "zeros",
                   axis=-1, stable: bool = True) -> np.ndarray:
    """The softmax of `scores` over `axis` (an axis or a tuple of them) in which masked entries
    get exactly zero weight and the kept ones of a group sum to 1; a group with nothing kept
    follows `fully_masked`. `stable=False` skips the max-subtraction, as a naive softmax does."""
    if fully_masked not in FULLY_MASKED_RULES:
        raise ValueError(f"fully_masked must be one of {', '.join(FULLY_MASKED_RULES)}, not {fully_masked!r}")
    if keep is None:
        return _plain_softmax(scores, axis, stable)
    keep = np.broadcast_to(np.asarray(keep, dtype=bool), scores.shape)
    some = keep.any(axis=axis, keepdims=True)
    shift: float | np.ndarray = 0.0
    if stable:
        top = np.where(keep, scores, -np.inf).max(axis=axis, keepdims=True)
        shift = np.where(some, top, 0.0)
    # exp(-inf) is exactly 0: masked entries never enter the sum, and never overflow.
    e = np.exp(np.where(keep, scores - shift, -np.inf))
    with np.errstate(invalid="ignore"):           # inf / inf of a naive softmax stays NaN, as a student's would
        weights = e / np.where(some, e.sum(axis=axis, keepdims=True), 1.0)
    if fully_masked == "zeros":
        return weights
    if fully_masked == "uniform":
        empty = np.full(scores.shape, 1.0 / _group_size(scores.shape, axis))
    elif fully_masked == "nan":
        empty = np.full(scores.shape, np.nan)
    else:
        empty = _plain_softmax(scores, axis, stable)
    return np.where(some, weights, empty)


@dataclass(frozen=True)
class MaskForm:
    """How a course spells a mask. `to_course(keep)` is the argument its function receives;
    `from_course(argument)` is the keep-mask the function computes from it, refusing values
    this form never has. `fully_masked` is what a fully masked row gives when the function
    applies the mask the way the form is made for (None: it depends on the function)."""

    name: str
    description: str
    to_course: Callable[[np.ndarray], np.ndarray]
    from_course: Callable[[np.ndarray], np.ndarray]
    fully_masked: str | None = None


def _only(values: np.ndarray, allowed: tuple, form: str) -> np.ndarray:
    values = np.asarray(values)
    ok = np.zeros(values.shape, dtype=bool)
    for a in allowed:
        ok |= values == a
    if not ok.all():
        bad = values[~ok].flat[0]
        raise ValueError(f"a {form} mask holds only {' and '.join(map(str, allowed))}, not {bad}")
    return values


def _boolean(values: np.ndarray, form: str) -> np.ndarray:
    """Booleans, or 0/1 numbers a course uses as booleans."""
    return _only(values, (0, 1), form).astype(bool)


def additive(big: float = np.inf) -> MaskForm:
    """Added to the scores: 0 where a key may be attended, -big where not (-inf by default).
    With -inf a fully masked row is NaN; with a finite big it is shifted as a whole, so the
    softmax gives the row as if unmasked."""
    big = float(big)
    if not big > 0:
        raise ValueError("the additive mask's big number must be positive")
    name = "additive_inf" if np.isinf(big) else "additive_big"
    return MaskForm(
        name, f"added to the scores: 0 to attend, -{big:g} to mask",
        lambda keep: np.where(np.asarray(keep, dtype=bool), 0.0, -big),
        lambda arg: _only(arg, (0.0, -big), f"0 / -{big:g}") == 0.0,
        "nan" if np.isinf(big) else "unmasked")


FORMS: dict[str, MaskForm] = {f.name: f for f in [
    MaskForm("keep", "boolean: True where a key may be attended",
             lambda keep: np.asarray(keep, dtype=bool).copy(),
             lambda arg: _boolean(arg, "boolean keep")),
    MaskForm("ignore", "boolean: True where a key is masked, as in np.where(mask, -big, scores)",
             lambda keep: ~np.asarray(keep, dtype=bool),
             lambda arg: ~_boolean(arg, "boolean ignore")),
    additive(),
    additive(DEFAULT_BIG),
    MaskForm("float_keep", "0/1 floats, 1 where a key may be attended, used as scores + (1 - mask) * -1e9",
             lambda keep: np.asarray(keep, dtype=bool).astype(np.float64),
             lambda arg: _only(arg, (0.0, 1.0), "0/1 keep") == 1.0,
             "unmasked"),
    MaskForm("float_ignore", "0/1 floats, 1 where a key is masked, used as scores + mask * -1e9",
             lambda keep: (~np.asarray(keep, dtype=bool)).astype(np.float64),
             lambda arg: _only(arg, (0.0, 1.0), "0/1 ignore") == 0.0,
             "unmasked"),
]}


def course_scores(scores: np.ndarray, argument: np.ndarray, form: str, big: float = DEFAULT_BIG) -> np.ndarray:
    """The scores after a course's function applied its mask argument the way `form` is made
    for: added (additive forms), used as (1 - mask) * -big or mask * -big (0/1 floats), or
    replacing masked scores by -big (boolean forms, np.where). The softmax of this is what the
    course's function computes."""
    argument = np.asarray(argument)
    if form in ("additive_inf", "additive_big"):
        return scores + argument
    if form == "float_keep":
        return scores + (1.0 - argument) * -big
    if form == "float_ignore":
        return scores + argument * -big
    if form in ("keep", "ignore"):
        return np.where(FORMS[form].from_course(argument), scores, -big)
    raise ValueError(f"unknown mask form {form!r}: one of {', '.join(FORMS)}")
