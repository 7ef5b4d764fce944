"""What a function returns, read off one call: which canonical part each returned value is,
as a convention's `returns` (and `per_head_returns`) says it. Each value is read by the
grader's own rules (returns.canonical_parts) for every part it could be, and compared with
the reference's part by the grader's one comparison rule."""
from __future__ import annotations

from dataclasses import replace

from grader.calling.conventions import CACHE, PART_WORDS, RETURN_NAMES, Convention
from grader.reference.attention import Case
from grader.calling.returns import Tolerance, canonical_parts, describe_value, same

# The parts a value may be, in order of preference when one value could be two.
SINGLE_PARTS = ("output", "weights", "scores", "q", "k", "v")
MULTI_PARTS = ("output", "weights_per_head", "mean_weights", "scores_per_head", "heads", "q", "k", "v")
RETURN_NAME = {"weights_per_head": "weights", "scores_per_head": "scores"}


def _every_part(conv: Convention, case: Case) -> dict:
    """Every part the reference computes for this case, canonical: a backward pass's gradients,
    else the forward's parts."""
    parts: tuple[str, ...] = MULTI_PARTS if conv.heads != "one" else SINGLE_PARTS
    if not conv.attends:
        parts = ("output",)   # a layer norm or a feed-forward network computes nothing else
    if conv.backward:
        parts = conv.gradient_parts
    return replace(conv, returns=parts, return_keys=None).expected_parts(case)


def _part_of(conv: Convention, encoded: dict, expected: dict, tol: Tolerance) -> tuple[str, bool] | None:
    """(the part one returned value is, whether it came as one array with a heads axis), or None."""
    for part, wanted in expected.items():
        read = canonical_parts(replace(conv, returns=(part,), return_keys=None), encoded)
        if read.structure or part not in read.values:
            continue
        if same(read.values[part], wanted, tol):
            return part, isinstance(wanted, list) and encoded.get("kind") == "array"
    return None


def read_returns(conv: Convention, case: Case, encoded: dict, tol: Tolerance) -> dict | None:
    """The convention keys saying what the function returned on `case` (`returns`, and
    `per_head_returns` for a heads axis), or None when some returned value is no part."""
    expected = _every_part(conv, case)
    kind = encoded.get("kind")
    if kind == "mapping":
        found = {}
        for key, item in zip(encoded["keys"], encoded["items"]):
            part = _part_of(conv, item, expected, tol)
            if part is not None and part[0] not in found:
                found[part[0]] = (key, part[1])
        if not found:
            return None
        return _keys({RETURN_NAME.get(p, p): key for p, (key, _) in found.items()},
                     any(axis for _, axis in found.values()))
    whole = _part_of(conv, encoded, expected, tol)
    if whole is not None:
        return _keys(RETURN_NAME.get(whole[0], whole[0]), whole[1])
    if kind != "sequence" or encoded.get("length") != len(encoded["items"]) or not encoded["items"]:
        return None
    parts = [_part_of(conv, item, expected, tol) for item in encoded["items"]]
    named = [p for p in parts if p is not None]
    names = [name for name, _ in named]
    # One item that is no part but holds values (a tuple or a dict) beside the parts: the
    # forward's cache for its backward (`return out, cache`), read past.
    unread = [i for i, p in enumerate(parts) if p is None]
    cache = unread[0] if len(unread) == 1 and named and \
        encoded["items"][unread[0]].get("kind") in ("sequence", "mapping") else None
    if len(named) + (cache is not None) != len(parts) or len(set(names)) != len(names):
        return None
    returned = [RETURN_NAME.get(n, n) for n in names]
    if cache is not None:
        returned.insert(cache, CACHE)
    return _keys(returned if len(returned) > 1 else returned[0], any(axis for _, axis in named))


def why_unread(conv: Convention, case: Case, encoded: dict, tol: Tolerance) -> str:
    """Why read_returns found no reading of what came back, in the words of `returns`: which
    value is none of the parts it may name."""
    expected = _every_part(conv, case)
    names = f"none of the parts `returns` may name ({', '.join(RETURN_NAMES)})"
    kind, items = encoded.get("kind"), encoded.get("items") or []
    if kind == "sequence" and items and encoded.get("length") == len(items):
        said, seen = [], set()
        for i, item in enumerate(items, 1):
            part = _part_of(conv, item, expected, tol)
            if part is None:
                said.append(f"item {i} ({describe_value(item)}) is {names}")
                continue
            again = " again" if part[0] in seen else ""
            said.append(f"item {i} ({describe_value(item)}) is the {PART_WORDS[part[0]]}{again}")
            seen.add(part[0])
        return f"no reading of its returns matched: on {case.label} it returned a {len(items)}-tuple: " + \
            "; ".join(said)
    if kind == "mapping":   # read_returns reads a dict whose values are some parts, the rest left aside
        return (f"no reading of its returns matched: on {case.label} it returned {describe_value(encoded)}, "
                f"and no value of it is one of the parts `returns` may name ({', '.join(RETURN_NAMES)})")
    return f"no reading of its returns matched: on {case.label} it returned {describe_value(encoded)}, {names}"


def _keys(returns, axis: bool) -> dict:
    return {"returns": returns, **({"per_head_returns": "axis"} if axis else {})}


def _returned_names(returns) -> set[str]:
    """The parts a `returns` value names: one, a list, or a dict's parts."""
    return {returns} if isinstance(returns, str) else set(returns)


def read_kept(conv: Convention, case: Case, returned: dict, kept: dict, tol: Tolerance, made: dict) -> dict:
    """The convention keys saying which part each attribute a class's object holds after the
    call is (`kept` in its class table, from `made`; `per_head_returns` for a heads axis), of
    the parts not returned already; {} when none is a part."""
    expected = _every_part(conv, case)
    taken = _returned_names(returned["returns"])
    found: dict[str, str] = {}
    axis = False
    for attribute, encoded in kept.items():
        wanted = {p: v for p, v in expected.items() if RETURN_NAME.get(p, p) not in taken | set(found.values())}
        part = _part_of(conv, encoded, wanted, tol)
        if part is not None:
            found[attribute] = RETURN_NAME.get(part[0], part[0])
            axis = axis or part[1]
    if not found:
        return {}
    keys: dict = {"class": {**made, "kept": found}}
    if axis and "per_head_returns" not in returned:
        keys["per_head_returns"] = "axis"
    return keys
