"""Turn what a student function returned into checked, canonical arrays, and compare arrays.

Everything here runs in the grader process on values the kernel sent in the wire format
(grader/kernel_side/wire.py); nothing is unpickled and nothing the student built is trusted as an object.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grader.calling.conventions import PART_WORDS, PER_HEAD_PARTS, PLURAL_PARTS, Convention
from grader.kernel_side.wire import BadValue, decode_array


def not_returned(part: str) -> str:
    """Why a part is missing when nothing came back for it at all, as a clause after its name:
    "the output was not returned", "the attention weights were not returned"."""
    return f"{'were' if part in PLURAL_PARTS else 'was'} not returned"


class OnceDecoded:
    """decode_array for the arrays of one reply, each decoded once: a reply is described (its
    arrays' shapes, read from the bytes that came back) and then read part by part, and
    decoding is most of either. Keeps each encoded value it decoded, so that the identity it is
    known by stays its own while this lives."""

    def __init__(self):
        self._decoded: dict[int, tuple[dict, np.ndarray | BadValue]] = {}

    def __call__(self, encoded: dict) -> np.ndarray:
        found = self._decoded.get(id(encoded))
        if found is None:
            try:
                value: np.ndarray | BadValue = decode_array(encoded)
            except BadValue as exc:
                value = exc
            found = self._decoded[id(encoded)] = (encoded, value)
        if isinstance(found[1], BadValue):
            raise found[1]
        return found[1]


def describe_value(encoded: dict, decode=decode_array) -> str:
    kind = encoded.get("kind")
    if kind == "sequence":
        inner = ", ".join(describe_value(i, decode) for i in encoded.get("items", [])[:4])
        more = ", ..." if encoded.get("length", 0) > 4 else ""
        return f"{encoded.get('type', 'sequence')}({inner}{more})"
    if kind == "mapping":
        keys = ", ".join(encoded.get("keys", [])[:6])
        more = ", ..." if encoded.get("length", 0) > 6 else ""
        return f"{encoded.get('type', 'dict')} with keys ({keys}{more})"
    if kind == "array":
        try:
            array = decode(encoded)
            return f"{encoded.get('type', 'array')} {array.shape}"
        except BadValue:
            return str(encoded.get("type", "array"))
    return str(encoded.get("type", "?"))


@dataclass
class Parts:
    """A return value in canonical form, with what was wrong with its structure."""

    values: dict = field(default_factory=dict)
    structure: list[str] = field(default_factory=list)   # what is wrong with the shape of the return
    returned: str = ""
    # Parts that came back but could not be decoded: part -> why. A part the convention returns
    # that is neither here nor among the values was not returned at all.
    unreadable: dict = field(default_factory=dict)

    def missing(self, part: str) -> str:
        """Why an expected part is not among the values, as a clause after its name."""
        return self.unreadable.get(part) or not_returned(part)

    def came_back(self, part: str) -> bool:
        """Whether anything came back for the part, readable or not."""
        return part in self.values or part in self.unreadable

    @property
    def problems(self) -> list[str]:
        """The structure's problems, then each part that came back but cannot be used."""
        return self.structure + [f"the {PART_WORDS[name]} {why}" for name, why in self.unreadable.items()]


class Unreadable(Exception):
    """One returned part cannot be used; the message completes "the <part> ..."."""


def _array(encoded: dict, decode=decode_array) -> np.ndarray:
    if encoded.get("kind") == "none":
        raise Unreadable("came back as None")
    if encoded.get("kind") != "array":
        detail = encoded.get("detail") or f"a {encoded.get('type')}"
        raise Unreadable(f"could not be read as a numeric array ({detail})")
    try:
        return decode(encoded)
    except BadValue as exc:
        raise Unreadable(f"could not be used ({exc})") from None


def _per_head(encoded: dict, batched: bool = False, read=None) -> list:
    """Per-head arrays: a list, one per head, or one array with the heads axis first (after
    the batch axis, B x H x ..., when batched); each array as `read` decodes it (_array)."""
    read = read or _array
    if encoded.get("kind") == "sequence":
        heads = []
        for i, item in enumerate(encoded["items"]):
            try:
                heads.append(read(item))
            except Unreadable as exc:
                raise Unreadable(f"of head {i + 1} {exc}") from None
        return heads
    stacked = read(encoded)
    if batched:
        if stacked.ndim == 4:
            return list(np.moveaxis(stacked, 1, 0))
        raise Unreadable(f"have shape {stacked.shape}; expected a heads axis after the batch axis "
                         "(B x H x ...) or a list of H arrays, one per head")
    if stacked.ndim == 3:
        return list(stacked)
    if stacked.ndim == 2:
        rows, cols = stacked.shape
        raise Unreadable(f"are one {rows} x {cols} array; expected a list of H arrays, one per head")
    raise Unreadable(f"have shape {stacked.shape}; expected a list of N x N arrays, one per head")


def _tokens_as_rows(value):
    """A part returned with tokens as columns, turned to the canonical rows: each matrix transposed."""
    if isinstance(value, list):
        return [_tokens_as_rows(v) for v in value]
    return value.T if value.ndim == 2 else value


def wanted(conv: Convention) -> str:
    """What the convention asks a function to return, in words."""
    if conv.return_keys is not None:
        return "a dict with keys " + ", ".join(repr(k) for k in conv.return_keys)
    said = [PART_WORDS[p] for p in conv.returned]
    if conv.cache_at is not None:
        said.insert(conv.cache_at, "the cache for the backward pass")
    return "(" + ", ".join(said) + ")"


def _pairs(conv: Convention, encoded: dict, parts: Parts) -> list:
    """(part, encoded value) for each part found where the convention says it is returned."""
    expected = conv.returned
    if conv.return_keys is not None:
        if encoded.get("kind") != "mapping":
            parts.structure.append(f"returned {parts.returned} where {wanted(conv)} was expected")
            return []
        items = dict(zip(encoded["keys"], encoded["items"]))
        absent = [k for k in conv.return_keys if k not in items]
        if absent:
            parts.structure.append(f"returned a dict without the key{'s' * (len(absent) > 1)} "
                                   f"{', '.join(repr(k) for k in absent)}; expected {wanted(conv)}")
        return [(part, items[key]) for part, key in zip(expected, conv.return_keys) if key in items]
    if conv.returns_tuple:
        if encoded.get("kind") == "sequence":
            items = encoded["items"]
            count = len(expected) + (conv.cache_at is not None)
            if len(items) != count:
                said = f"{len(items)} value{'s' * (len(items) != 1)}"
                parts.structure.append(f"returned {said}; expected {count}: {wanted(conv)}")
            if conv.cache_at is not None:   # the forward's cache is read past, never graded
                items = items[:conv.cache_at] + items[conv.cache_at + 1:]
            return list(zip(expected, items))
        lone = "output" if "output" in expected else expected[0]
        parts.structure.append(f"returned only one value ({parts.returned}) where {wanted(conv)} was expected; "
                               f"it is checked as the {PART_WORDS[lone]}")
        return [(lone, encoded)]
    if encoded.get("kind") == "sequence" and encoded.get("items") and expected[0] not in PER_HEAD_PARTS:
        parts.structure.append(f"returned a {encoded['type']} ({parts.returned}) where a single array was "
                               f"expected; its first item is checked")
        encoded = encoded["items"][0]
    return [(expected[0], encoded)]


def _merged_leading(encoded: dict, decode=decode_array) -> np.ndarray:
    """An array returned on two leading batch axes (batch = "any") with them merged into one,
    before anything is read off it, so that what follows sees one batch axis; an array with
    fewer than three axes cannot hold them and is left as it is."""
    value = _array(encoded, decode)
    return value.reshape(-1, *value.shape[2:]) if value.ndim >= 3 else value


# How the harness sends an attribute the object does not have after the call.
NO_ATTRIBUTE = {"kind": "other", "type": "missing", "detail": "no such attribute after the call"}


def _kept_pairs(conv: Convention, kept: list | None, parts: Parts) -> list:
    """(part, encoded value) for each part the object keeps, read back from its attribute; a
    part whose attribute is not there is said so, in the words of the attribute."""
    pairs = []
    for index, (attribute, part) in enumerate(conv.kept):
        item = kept[index] if kept is not None and index < len(kept) else None
        verb = "were" if part in PLURAL_PARTS else "was"
        if item is None:   # only a replaced harness leaves them out
            parts.unreadable[part] = f"{verb} not read back from `self.{attribute}`: the reply to the call left it out"
        elif item == NO_ATTRIBUTE:
            parts.unreadable[part] = f"{verb} not kept: the object has no attribute `{attribute}` after the call"
        else:
            pairs.append((part, item))
    return pairs


def canonical_parts(conv: Convention, encoded: dict, kept: list | None = None) -> Parts:
    """What a call returned, as canonical parts; `kept`: the values of the attributes the
    convention reads off a class's object after the call (Convention.kept), in its order."""
    decode = OnceDecoded()
    parts = Parts(returned=describe_value(encoded, decode))
    whole = _merged_leading if conv.leading_axes else _array

    def read(item: dict) -> np.ndarray:
        return whole(item, decode)

    attributes = {part: attribute for attribute, part in conv.kept}
    for name, item in _pairs(conv, encoded, parts) + _kept_pairs(conv, kept, parts):
        try:
            value = _per_head(item, conv.batched, read) if name in PER_HEAD_PARTS else read(item)
        except Unreadable as exc:
            where = f"kept in `self.{attributes[name]}` " if name in attributes else ""
            parts.unreadable[name] = f"{where}{exc}"
            continue
        if conv.vector and isinstance(value, np.ndarray) and value.ndim == 1:
            value = value[None, :]   # one vector's weights: canonically a 1 x Lk matrix
        parts.values[name] = _tokens_as_rows(value) if conv.columns else value
    return parts


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-5
    atol: float = 1e-8

    def loosened(self, factor: float) -> "Tolerance":
        return Tolerance(self.rtol * factor, self.atol * factor)


# The comparison rule, used by every check, the diagnosis and the non-answer rule alike. Two
# values are the same when they have the same shape (per-head lists: as many arrays, each the
# same) and, entry by entry, compared as float64:
#   - where the expected value is finite, the actual one is finite and
#     |actual - expected| <= atol + rtol * |expected|  (np.isclose's rule: relative to the expected value);
#   - where the expected value is NaN, inf or -inf, the actual one is NaN, inf or -inf too.
# Where values are not finite, only their places are compared, not which non-finite values they
# are: when exp() overflows, whether inf or NaN follows depends on the order of the operations
# after it, and a softmax without max-subtraction may be written in either order.

def _excess(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> np.ndarray:
    """How far each entry is outside its tolerance (<= 0: the same): inf where only one of the
    two is finite, -inf where neither is."""
    actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    finite_actual, finite_expected = np.isfinite(actual), np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore"):
        excess = np.abs(actual - expected) - (tol.atol + tol.rtol * np.abs(expected))
    return np.where(finite_actual & finite_expected, excess,
                    np.where(finite_actual == finite_expected, -np.inf, np.inf))


def same(actual, expected, tol: Tolerance) -> bool:
    """Whether `actual` is the same as `expected` under the comparison rule above."""
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            same(a, e, tol) for a, e in zip(actual, expected))
    if not isinstance(actual, np.ndarray) or actual.shape != expected.shape:
        return False
    # Two answers the rule gives without its every case, most comparisons among them: an
    # entry further off than its tolerance, the other's finite or not, makes the values differ
    # (NaN compares false); and every entry within it, the expected values all finite, makes
    # them the same (an infinite difference never is). Only non-finite places need the rest.
    # (The arrays' own any() and all(): np.any's dispatch cost more than the comparison, on
    # the small arrays judged here thousands of times a submission.)
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        gap, bound = np.abs(a - e), tol.atol + tol.rtol * np.abs(e)
        if (gap > bound).any():
            return False
        if (gap <= bound).all() and np.isfinite(e).all():
            return True
    return not (_excess(actual, expected, tol) > 0).any()


def largest_difference(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> tuple[tuple, float] | None:
    """Where two arrays of one shape differ most under the comparison rule: the index of the
    entry furthest outside its tolerance (a value that is finite in one and not in the other
    first) and |actual - expected| there; None when they are the same."""
    excess = _excess(actual, expected, tol)
    if not np.any(excess > 0):
        return None
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
    return index, abs(float(actual[index]) - float(expected[index]))


def _shape(shape, columns: bool) -> str:
    return "x".join(map(str, shape[::-1] if columns else shape))


def compare(actual, expected, tol: Tolerance, columns: bool = False, against: str = "the reference") -> str | None:
    """None when the same under the comparison rule, else a sentence saying what differs from
    `against`, what the expected values are."""
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return "is not a list of per-head arrays"
        if len(actual) != len(expected):
            return f"has {len(actual)} head{'s' * (len(actual) != 1)}, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            problem = compare(a, e, tol, against=against)
            if problem:
                return f"of head {i + 1} {problem}"
        return None
    if actual.shape != expected.shape:
        if actual.shape == expected.shape[::-1]:
            return (f"is transposed: shape {_shape(actual.shape, columns)}, expected "
                    f"{_shape(expected.shape, columns)}")
        return f"has shape {_shape(actual.shape, columns)}, expected {_shape(expected.shape, columns)}"
    largest = largest_difference(actual, expected, tol)
    if largest is None:
        return None
    index, difference = largest
    if not np.isfinite(actual[index]):
        return "contains NaN or inf"
    if actual.ndim == 2 and actual.shape[0] == actual.shape[1] and actual.shape[0] > 1 and \
            same(actual.T, expected, tol):
        return "is transposed"
    shown = index[::-1] if columns and len(index) == 2 else index
    return f"differs from {against}: largest difference {difference:.3g} at index {shown}"
