"""What the grader computes from its own inputs alone, kept for the grading process's life.

Every submission of a batch is graded on the same cases (drawn from the spec and the seed), so
what the reference and each known mistake give on them, and the attempt test's probes, are the
same for all of them: a worker computes each once, not once per submission. Only the grader's
own computations on its own cases are kept, never anything a kernel returned. Each is kept
read-only, its arrays included, so that no submission's judging can change what a later one
reads: writing into one raises.

A store holds at most `limit` entries and drops the longest unused first, so a process that
grades many assignments (a Dask worker, the test suite) stays bounded."""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from types import MappingProxyType
from typing import Any

import numpy as np


def frozen(value: Any) -> Any:
    """`value` made read-only for sharing: its arrays (also inside dicts, lists, tuples and
    dataclasses) can no longer be written, and a dict becomes a read-only view of a copy."""
    kind = type(value)
    if kind in _IMMUTABLE:   # most of what a prediction holds, besides its arrays
        return value
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
        return value
    if isinstance(value, dict):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(frozen(v) for v in value)
    if isinstance(value, tuple):
        for v in value:
            frozen(v)
        return value
    for name in _dataclass_fields(kind):
        frozen(getattr(value, name))
    return value


_IMMUTABLE = frozenset({type(None), bool, int, float, complex, str, bytes})


def _dataclass_fields(kind: type) -> tuple[str, ...]:
    """The field names of a dataclass (none for any other class), looked up once per class."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind)) \
            if dataclasses.is_dataclass(kind) else ()
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}


class FrozenList(list):
    """A list that refuses to change (a prediction's parts per head are lists)."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a value computed once is shared by every submission: it cannot be changed")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse   # type: ignore[assignment]


class Store:
    """A bounded map from a key to a value computed once, frozen before it is kept."""

    def __init__(self, limit: int):
        self.limit = limit
        self._kept: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()   # a Dask worker grades in threads
        self.computed = 0   # how many values were computed rather than found

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            found = self._kept.get(key, _MISSING)
            if found is not _MISSING:
                self._kept.move_to_end(key)
                return found
        value = frozen(compute())   # outside the lock: a computation may use another store
        with self._lock:
            found = self._kept.setdefault(key, value)   # a thread that computed it first wins
            if found is value:
                self.computed += 1
            self._kept.move_to_end(key)
            if len(self._kept) > self.limit:
                self._kept.popitem(last=False)
        return found

    def __len__(self) -> int:
        return len(self._kept)


_MISSING = object()
