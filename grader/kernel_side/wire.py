"""The wire format between the grader and the student's kernel, both ways.

Arguments go in as plain ints and as arrays, each array as its raw bytes in base64 with its
dtype and shape (an .npy header would be larger than most arguments, and slow to parse), and
the memory layout the student function is to receive it in, and as lists, dicts and objects
(a types.SimpleNamespace, sent as its attributes' names and values) of those, MAX_DEPTH levels
at most; return values come back as
arrays, None, sequences of those (two levels at most), or the type name of anything else.
Returned arrays travel the same way (raw bytes, dtype and shape): the grader accepts only a
real numeric dtype and exactly the bytes the shape holds, within a bound on their size, so
nothing is ever unpickled and a decoded array is always a plain numeric ndarray.

The grader imports this module; the kernel, which cannot import the grader, gets its source
text and loads it before the harness (see `_write_startup_file` in execution.py). So it
depends on the standard library and NumPy only, and takes the functions it uses when it
loads, before any notebook code has run: a notebook that replaces np.array or base64's
functions cannot change how its values are sent.
"""
import base64
import json
import math
from enum import Enum
from types import SimpleNamespace

import numpy as np

KERNEL_MODULE = "_attention_grader_wire"   # this module's name in the kernel
MIME = "application/vnd.attention-grader+json"   # the harness's display messages (its description)
# The key of a run of calls' requests in its execute request's metadata: the requests travel
# as data beside a one-line call, so IPython never tokenizes them as code (or echoes them).
CALLS_KEY = "attention_grader_calls"
MAX_ARRAY_BYTES = 4 * 2**20   # a 64-token attention matrix is 32 KiB
MAX_ITEMS = 64                # items of a returned sequence that are sent
MAX_DEPTH = 2                 # containers within containers; deeper returned values are sent as arrays
VALUE_KINDS = ("array", "none", "other", "sequence", "mapping")
NUMERIC_KINDS = "biuf"        # the dtype kinds of a decoded array: complex numbers are refused
TOO_LARGE = f"array larger than {MAX_ARRAY_BYTES // 2**20} MiB"
# A run of calls' replies travel as frames (frame, unframe): the length of a frame's JSON in
# FRAME_HEADER bytes, big-endian, then the JSON; the grader reads no frame longer than
# MAX_FRAME_BYTES, the largest message it reads from the kernel's output channel.
FRAME_HEADER = 4
MAX_FRAME_BYTES = 8 * 2**20

_b64encode, _b64decode = base64.b64encode, base64.b64decode
_array, _ndarray = np.array, np.ndarray
_asfortranarray, _zeros, _frombuffer, _dtype = np.asfortranarray, np.zeros, np.frombuffer, np.dtype
_dict_items = dict.items   # the items a dict holds, whatever its subclass says they are
_SimpleNamespace, _vars = SimpleNamespace, vars
_dumps = json.dumps


class BadValue(Exception):
    """What was sent is not a plain numeric array."""


class Layout(str, Enum):
    """How an argument matrix is laid out in memory when the student function receives it."""

    C = "C"
    FORTRAN = "F"
    STRIDED = "strided"   # every other column of an array twice as wide: neither C- nor Fortran-contiguous


def decode_array(encoded: dict) -> np.ndarray:
    """A returned array from its raw bytes, dtype and shape (as encode_value sends it). Raises
    BadValue for anything else: text that is not base64, more than MAX_ARRAY_BYTES, a dtype
    that is not a real numeric one (objects, structured records, text, complex numbers: said
    as such), or bytes that are not exactly what the shape holds."""
    try:
        kind = _dtype(str(encoded["dtype"])).kind
    except (KeyError, TypeError, ValueError):
        raise BadValue("unreadable array data") from None
    if kind == "c":
        raise BadValue("complex numbers")
    return _raw_array(encoded)


# Grader -> kernel: the arguments of a call.

def encode_argument(value, layout: Layout = Layout.C) -> dict:
    """A bool or an int as itself; an array as its bytes and the layout it is to be received
    in (the layouts are those of a matrix: an array of any other number of dimensions goes in
    C order); a list (one matrix per head), a dict of string keys (packed weights, a layer's
    {"w": ..., "b": ...}) or an object's attributes (a SimpleNamespace) of those."""
    if isinstance(value, (bool, np.bool_)):
        return {"bool": bool(value)}
    if isinstance(value, (int, np.integer)):
        return {"int": int(value)}
    if isinstance(value, list):
        return {"list": [encode_argument(v, layout) for v in value]}
    if isinstance(value, tuple):
        return {"tuple": [encode_argument(v, layout) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[str(k), encode_argument(v, layout)] for k, v in value.items()]}
    if isinstance(value, SimpleNamespace):
        return {"object": [[str(k), encode_argument(v, layout)] for k, v in vars(value).items()]}
    layout = layout if value.ndim == 2 else Layout.C
    return {"raw": _b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii"), "dtype": value.dtype.str,
            "shape": list(value.shape), "layout": layout.value}


def encode_arguments(values: list, layout: Layout = Layout.C) -> list[dict]:
    """A call's arguments, each as encode_argument sends it, except an array that is the very
    object of an earlier argument: that goes as a reference to it, so that the function is
    handed one object twice, as `attn(x, x, x)` hands it (a function may take another path
    when `key is query`)."""
    encoded: list[dict] = []
    for index, value in enumerate(values):
        earlier = next((i for i in range(index) if isinstance(value, np.ndarray) and values[i] is value), None)
        encoded.append({"same_as": earlier} if earlier is not None else encode_argument(value, layout))
    return encoded


def decode_arguments(encoded: list, run: dict | None = None) -> list:
    """A call's arguments as the student function receives them: a reference to an earlier
    argument (encode_arguments) is that argument's own object. `run`: the arrays decoded for
    the calls before this one in the same run (decode_argument)."""
    decoded: list = []
    for item in encoded:
        earlier = item.get("same_as") if isinstance(item, dict) else None
        if type(earlier) is int and 0 <= earlier < len(decoded):
            decoded.append(decoded[earlier])
        else:
            decoded.append(decode_argument(item, run=run))
    return decoded


def _raw_array(encoded: dict) -> np.ndarray:
    """A fresh, writable array from an argument's raw bytes, dtype and shape. Raises BadValue
    unless the dtype is a real numeric one and the bytes are exactly what the shape holds."""
    try:
        raw = _b64decode(encoded["raw"], validate=True)
        dtype, shape = _dtype(str(encoded["dtype"])), tuple(int(n) for n in encoded["shape"])
    except (KeyError, TypeError, ValueError):
        raise BadValue("unreadable array data") from None
    if len(raw) > MAX_ARRAY_BYTES:
        raise BadValue(TOO_LARGE)
    if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or min(shape, default=0) < 0 \
            or dtype.itemsize * math.prod(shape) != len(raw):
        raise BadValue(f"not a real numeric array of that shape (dtype {dtype})")
    return _frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def _fresh_array(encoded: dict, run: dict) -> np.ndarray:
    """_raw_array for one of a run's calls. The calls of a run are made on a few cases, so the
    same arrays come again and again (a third as many differ as are sent): each is decoded
    once a run, and every call gets a fresh copy of it, to change as it likes."""
    raw = encoded.get("raw")
    if not isinstance(raw, str):
        return _raw_array(encoded)   # which says why it cannot be read
    key = (raw, repr(encoded.get("dtype")), repr(encoded.get("shape")))   # a shape "[2, 3]" is no [2, 3]
    pristine = run.get(key)
    if pristine is None:
        pristine = run[key] = _raw_array(encoded)
        pristine.flags.writeable = False   # only its copies are handed out
    return pristine.copy()


def decode_argument(encoded: dict, depth: int = 0, run: dict | None = None):
    """The argument as the student function receives it: a bool, an int, an array in its
    layout, or a fresh list, dict or SimpleNamespace of those, MAX_DEPTH levels at most. Raises
    BadValue for anything deeper, or an attribute that is not a plain name. `run` keeps the
    arrays decoded in a run of calls (_fresh_array)."""
    if "bool" in encoded:
        return bool(encoded["bool"])
    if "int" in encoded:
        return int(encoded["int"])
    if any(kind in encoded for kind in ("list", "tuple", "dict", "object")) and depth >= MAX_DEPTH:
        raise BadValue(f"an argument nested more than {MAX_DEPTH} levels deep")
    if "list" in encoded:
        return [decode_argument(v, depth + 1, run) for v in encoded["list"]]
    if "tuple" in encoded:
        return tuple(decode_argument(v, depth + 1, run) for v in encoded["tuple"])
    if "dict" in encoded:
        return {str(k): decode_argument(v, depth + 1, run) for k, v in encoded["dict"]}
    if "object" in encoded:
        attributes = {str(k): decode_argument(v, depth + 1, run) for k, v in encoded["object"]}
        if not all(k.isidentifier() and not k.startswith("__") for k in attributes):
            raise BadValue("an object's attribute that is not a plain name")
        return _SimpleNamespace(**attributes)
    array = _raw_array(encoded) if run is None else _fresh_array(encoded, run)
    layout = Layout(encoded.get("layout", Layout.C.value))
    if layout is Layout.FORTRAN:
        return _asfortranarray(array)
    if layout is Layout.STRIDED and array.ndim >= 1:
        wide = _zeros(array.shape[:-1] + (array.shape[-1] * 2,), dtype=array.dtype)
        wide[..., ::2] = array
        return wide[..., ::2]
    return array


# Kernel -> grader: what a call returned, and its arguments after it.

def encode_given(value, depth: int = 0) -> dict:
    """An argument as it is after the call, as encode_value sends a value, except that an
    object the harness built (a SimpleNamespace: only the grader's arguments are one) comes
    back as a mapping of its attributes, typed "SimpleNamespace", so that what the function
    did to them is seen. A returned value never goes through here."""
    built = type(value) is _SimpleNamespace
    if depth < MAX_DEPTH and (built or isinstance(value, dict)):
        items: dict = _vars(value) if built else value
        pairs = [(k, v) for k, v in list(_dict_items(items)) if type(k) is str][:MAX_ITEMS]
        return {"kind": "mapping", "type": "SimpleNamespace" if built else type(value).__name__,
                "keys": [k[:200] for k, _ in pairs], "items": [encode_given(v, depth + 1) for _, v in pairs],
                "length": len(pairs)}
    return encode_value(value, depth)


def encode_value(value, depth: int = 0) -> dict:
    """What the student function returned, as the kernel sends it: a tuple or list as a
    sequence of at most MAX_ITEMS items (with its full length), None, a numeric array (anything
    NumPy turns into one, copied into a plain ndarray), or else only its type name and why it
    is not an array. A sequence nested MAX_DEPTH deep is sent as an array. A dict (a course may
    ask for one) as its first MAX_ITEMS string keys and their values, with its full length."""
    type_name = type(value).__name__
    if isinstance(value, (tuple, list)) and depth < MAX_DEPTH:
        return {"kind": "sequence", "type": type_name,
                "items": [encode_value(v, depth + 1) for v in list(value)[:MAX_ITEMS]], "length": len(value)}
    if isinstance(value, dict) and depth < MAX_DEPTH:
        pairs = [(k, v) for k, v in list(_dict_items(value)) if type(k) is str][:MAX_ITEMS]
        return {"kind": "mapping", "type": type_name, "keys": [k[:200] for k, _ in pairs],
                "items": [encode_value(v, depth + 1) for _, v in pairs], "length": len(pairs)}
    if value is None:
        return {"kind": "none", "type": "NoneType"}
    try:
        array = _array(value, copy=True, subok=False)
        if not isinstance(array, _ndarray) or array.dtype.kind not in NUMERIC_KINDS + "c":
            return {"kind": "other", "type": type_name,
                    "detail": f"not numeric (dtype {getattr(array, 'dtype', '?')})"}
        return {"kind": "array", "type": type_name, "raw": _b64encode(array.tobytes()).decode("ascii"),
                "dtype": array.dtype.str, "shape": list(array.shape)}
    except BaseException as exc:  # noqa: BLE001 - a hostile __array__ may raise anything
        return {"kind": "other", "type": type_name, "detail": f"{type(exc).__name__}: {exc}"[:300]}


# Kernel -> grader: a run of calls' replies, framed (grader/kernel/reply_channel.py).

def frame(payload) -> bytes:
    """One reply as a frame: its JSON's length, then its JSON."""
    data = _dumps(payload, separators=(",", ":")).encode()
    return len(data).to_bytes(FRAME_HEADER, "big") + data


def unframe(buffer: bytes | bytearray) -> tuple[list[bytes], int, str | None]:
    """The whole frames at the start of `buffer`, each as its JSON bytes, how many bytes of
    `buffer` they took (a frame not yet whole stays), and why the bytes after them are no frame
    (one longer than MAX_FRAME_BYTES), or None."""
    frames: list[bytes] = []
    at = 0
    while len(buffer) - at >= FRAME_HEADER:
        length = int.from_bytes(buffer[at:at + FRAME_HEADER], "big")
        if length > MAX_FRAME_BYTES:
            return frames, at, f"a reply longer than {MAX_FRAME_BYTES // 2**20} MiB"
        end = at + FRAME_HEADER + length
        if end > len(buffer):
            break
        frames.append(bytes(buffer[at + FRAME_HEADER:end]))
        at = end
    return frames, at, None
