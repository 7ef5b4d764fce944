"""A case's content as a key: two cases hold the same inputs (every array's dtype, shape and
values, every setting, the label too) exactly when their keys are equal, whichever objects
hold them. What the reference or a known mistake gives on a case depends on nothing else, so a
result kept under this key is right for any case that has it (judging/computed_once.py).

Only what it knows is read: an object of any other kind raises TypeError rather than being
left out of the key (a key that missed a field would tell two different cases for one)."""
from __future__ import annotations

import dataclasses
import hashlib
from enum import Enum

import numpy as np


def case_key(case) -> bytes:
    """The digest of everything `case` holds (a Case, or any of the dataclasses it is made of)."""
    digest = hashlib.blake2b(digest_size=32)
    _feed(digest, case)
    return digest.digest()


def _tagged(digest, tag: bytes, data: bytes) -> None:
    """`data` after its kind and its length, so that no two sequences of values read the same."""
    digest.update(tag + len(data).to_bytes(8, "little") + data)


def _field_names(kind: type) -> tuple[tuple[str, bytes], ...]:
    """Each field's name, and its bytes for the digest: looked up once per dataclass."""
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple((f.name, f.name.encode()) for f in dataclasses.fields(kind))
    return names


_FIELDS: dict[type, tuple[tuple[str, bytes], ...]] = {}


def _feed(digest, value) -> None:
    if value is None:
        digest.update(b"n")
    elif isinstance(value, np.ndarray):
        _tagged(digest, b"a", f"{value.dtype.str}{value.shape}".encode())
        _tagged(digest, b"v", value.tobytes())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _tagged(digest, b"d", type(value).__qualname__.encode())
        for name, encoded in _field_names(type(value)):
            _tagged(digest, b"f", encoded)
            _feed(digest, getattr(value, name))
    elif isinstance(value, (tuple, list)):
        _tagged(digest, b"t", len(value).to_bytes(8, "little"))
        for item in value:
            _feed(digest, item)
    elif isinstance(value, Enum):
        _tagged(digest, b"e", f"{type(value).__qualname__}.{value.name}".encode())
    elif isinstance(value, (bool, int, float, str, np.generic)):
        _tagged(digest, b"s", f"{type(value).__name__}:{value!r}".encode())
    else:
        raise TypeError(f"a case holds a {type(value).__name__}, which its key cannot read")
