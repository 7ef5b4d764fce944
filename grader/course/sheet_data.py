"""A course's own sheet data: the worked example its assignment prints, as named arrays in a
.npz file beside the spec, which become the canonical cases the `fixed` check compares on.

    fixed_data = "sheet.npz"
    fixed_data = { file = "sheet.npz", label = "the worked example in section 2" }

The arrays are the problem by role, each as the function is given it (the convention's
`tokens` and `weights` layouts, a mask in its parameter's form): the convention decides how
they are passed (packed, per head, in a dict), as it does for the built-in sheets. The files
are read once, with the spec, and checked here; a batch's worker gets their bytes (a Dask
worker has not the course's folder), `lms package` ships them beside the spec, and the kernel
never sees them. `label` is what students read of the check; a course's data is never called
"the assignment sheet", whose wording (seed numbers, H = 1) is the built-in sheets' own.
"""
from __future__ import annotations

import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

from grader.calling.conventions import Convention
from grader.errors import SpecError
from grader.reference.attention import Case, Head
from grader.reference.masks import FORMS

# Per spec: the files' bytes, and their arrays' once unpacked (a compressed .npz could say
# more than it holds; zipfile reads no more than a member's declared size).
MAX_SHEET_BYTES = 1024 * 2**10
MAX_SHEET_FILES = 8
TABLE_KEYS = ("file", "label")
MAX_LABEL = 80
DEFAULT_LABEL = "the assignment's example data"
SEQUENCES = ("x", "memory", "key_tokens", "value_tokens")
GIVEN = ("q", "k", "v")
HEAD_ARRAYS = ("wq", "wk", "wv", "bq", "bk", "bv")
OTHERS = ("wo", "bo", "mask", "key_padding", "n_heads")
KNOWN = ", ".join((*SEQUENCES, *GIVEN, *HEAD_ARRAYS, "wq1 (head 1's) ...", *OTHERS))
HEAD_NUMBERED = re.compile(r"(wq|wk|wv|bq|bk|bv)([1-9][0-9]?)")


@dataclass(frozen=True)
class SheetFile:
    shipped_as: str      # the path relative to the spec's folder: where `lms package` ships it
    data: bytes
    real_path: str = ""  # where it was read, kept out of the kernel's view; "" on a batch's worker


@dataclass(frozen=True)
class CourseSheet:
    label: str                   # the course's words for its data, as students read them
    cases: tuple[Case, ...]
    files: tuple[SheetFile, ...]

    @property
    def title(self) -> str:
        """The `fixed` check's title: the label, capitalised."""
        return self.label[:1].upper() + self.label[1:]

    @property
    def name(self) -> str:
        return ", ".join(f.shipped_as for f in self.files)


def is_course_sheet(value) -> bool:
    """`fixed_data` naming a course's own file (a table, or a string ending in .npz), not a built-in sheet."""
    return isinstance(value, dict) or isinstance(value, str) and value.endswith(".npz")


class SheetFiles:
    """Where a spec's sheet files are read from: the spec's folder, or the bytes a batch's
    worker was sent (`given`, by path as the spec writes it). Every file read is kept (`read`)."""

    def __init__(self, folder: Path | None, given: dict[str, bytes] | None = None):
        self.folder = Path(os.path.realpath(folder)) if folder is not None else None
        self.given = given
        self.read: dict[str, SheetFile] = {}

    def get(self, entry, where: str) -> SheetFile:
        if not isinstance(entry, str) or not entry.endswith(".npz") or Path(entry).is_absolute() \
                or ".." in Path(entry).parts:
            raise SpecError(f"{where}: fixed_data: file must be a .npz file in the spec's folder or below it, "
                            f"not {entry!r:.80}")
        shipped_as = os.path.normpath(entry)
        if shipped_as in self.read:
            return self.read[shipped_as]
        if self.given is not None:
            if shipped_as not in self.given:
                raise SpecError(f"{where}: fixed_data: {entry} was not sent with the spec")
            file = SheetFile(shipped_as, self.given[shipped_as])
        elif self.folder is None:
            raise SpecError(f"{where}: fixed_data {entry} needs a spec file, whose folder holds it")
        else:
            file = self._from_folder(entry, shipped_as, where)
        if sum(len(f.data) for f in self.read.values()) + len(file.data) > MAX_SHEET_BYTES:
            raise SpecError(f"{where}: fixed_data: the spec's .npz files are larger than "
                            f"{MAX_SHEET_BYTES // 2**10} KiB in all")
        self.read[shipped_as] = file
        return file

    def _from_folder(self, entry: str, shipped_as: str, where: str) -> SheetFile:
        assert self.folder is not None
        given = self.folder / entry
        if not os.path.lexists(given):
            raise SpecError(f"{where}: fixed_data: {entry} does not exist (beside the spec, in {self.folder})")
        real = Path(os.path.realpath(given))
        if self.folder not in real.parents:   # a link out of the folder
            raise SpecError(f"{where}: fixed_data: {entry} is not inside the spec's folder ({self.folder})")
        if not real.is_file():
            raise SpecError(f"{where}: fixed_data: {entry} is not a file")
        with open(real, "rb") as source:
            data = source.read(MAX_SHEET_BYTES + 1)
        return SheetFile(shipped_as, data, str(real))


def read_sheet(value, conv: Convention, files: SheetFiles, where: str) -> CourseSheet:
    """The course's sheet `value` names (fixed_data's string or table), read for `conv`, or a
    one-line SpecError naming what is wrong."""
    table = value if isinstance(value, dict) else {"file": value}
    unknown = sorted(set(table) - set(TABLE_KEYS))
    if unknown:
        raise SpecError(f"{where}: fixed_data: unknown key {unknown[0]!r} (known: {', '.join(TABLE_KEYS)})")
    label = table.get("label", DEFAULT_LABEL)
    if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL or not label.isprintable():
        raise SpecError(f"{where}: fixed_data: label must be one line of words, up to {MAX_LABEL} characters "
                        "(what students read of the check)")
    label = label.strip()
    entries = table.get("file")
    entries = [entries] if isinstance(entries, str) else entries
    if not isinstance(entries, list) or not entries or len(entries) > MAX_SHEET_FILES:
        raise SpecError(f"{where}: fixed_data: file must be a .npz file, or a list of up to {MAX_SHEET_FILES}")
    read = [files.get(entry, where) for entry in entries]
    cases = []
    for i, file in enumerate(read):
        case_label = label if len(read) == 1 else f"{label}, example {i + 1}"
        case = sheet_case(arrays_of(file, where), conv, case_label, f"{where}: fixed_data {file.shipped_as}")
        misfit = conv.misfit(case)
        if misfit:
            raise SpecError(f"{where}: fixed_data {file.shipped_as!r} does not fit its convention: {misfit}")
        cases.append(case)
    return CourseSheet(label, tuple(cases), tuple(read))


def arrays_of(file: SheetFile, where: str) -> dict[str, np.ndarray]:
    """The file's arrays, never unpickled, bounded in size unpacked, each numbers or booleans."""
    where = f"{where}: fixed_data {file.shipped_as}"
    try:
        with zipfile.ZipFile(io.BytesIO(file.data)) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile:
        raise SpecError(f"{where}: not a .npz file (np.savez's zip of arrays)") from None
    if sum(m.file_size for m in members) > MAX_SHEET_BYTES:
        raise SpecError(f"{where}: its arrays are larger than {MAX_SHEET_BYTES // 2**10} KiB unpacked")
    arrays = {}
    with np.load(io.BytesIO(file.data), allow_pickle=False) as npz:
        for name in npz.files:
            try:
                array = npz[name]
            except ValueError as exc:
                if "allow_pickle" in str(exc):
                    raise SpecError(f"{where}: array {name!r} holds Python objects (pickled), which are never "
                                    "loaded: save numbers or booleans") from None
                raise SpecError(f"{where}: array {name!r} cannot be read ({exc})"[:300]) from None
            except (OSError, EOFError, zipfile.BadZipFile) as exc:
                raise SpecError(f"{where}: array {name!r} cannot be read ({exc})"[:300]) from None
            if array.dtype.kind not in "biuf":
                raise SpecError(f"{where}: array {name!r} holds {array.dtype}, not numbers or booleans")
            arrays[name] = array
    if not arrays:
        raise SpecError(f"{where}: holds no arrays")
    return arrays


class _Reader:
    """One file's arrays, taken by role: every one must be taken, and each error names its array."""

    def __init__(self, arrays: dict[str, np.ndarray], conv: Convention, where: str):
        self.arrays, self.conv, self.where = dict(arrays), conv, where
        for name in arrays:
            if name not in (*SEQUENCES, *GIVEN, *HEAD_ARRAYS, *OTHERS) and not HEAD_NUMBERED.fullmatch(name):
                raise SpecError(f"{where}: unknown array {name!r} (known: {KNOWN})")

    def fail(self, name: str, why: str) -> NoReturn:
        raise SpecError(f"{self.where}: {name} {why}")

    def take(self, name: str, ndim: int | None = None):
        array = self.arrays.pop(name, None)
        if array is None:
            return None
        if ndim is not None and array.ndim != ndim:
            self.fail(name, f"is {_shape(array)}, not {'a vector' if ndim == 1 else f'{ndim}-D'}")
        if name not in ("mask", "key_padding") and array.dtype.kind == "b":
            self.fail(name, "holds booleans, not numbers")
        if name not in ("mask", "key_padding") and not np.all(np.isfinite(array)):
            self.fail(name, "holds a value that is not finite")
        return array

    def tokens(self, name: str):
        """A sequence, rows as tokens (given as the convention's `tokens` say)."""
        array = self.take(name, 2)
        return None if array is None else array.T if self.conv.columns else array

    def matrix(self, name: str):
        """A weight matrix as x @ W takes it (given in the convention's `weights` layout)."""
        array = self.take(name, 2)
        return None if array is None else array.T if self.conv.weights == "out_in" else array

    def bias(self, name: str):
        """A bias vector: a column (tokens as columns) or a row is read as one."""
        array = self.take(name)
        if array is None:
            return None
        if array.ndim == 2 and 1 in array.shape:
            array = array.reshape(-1)
        if array.ndim != 1:
            self.fail(name, f"is {_shape(array)}, not a vector")
        return array

    def mask(self, role: str, shape: tuple):
        array = self.take(role)
        if array is None:
            return None
        param = next((p for p in self.conv.flat if p.role == role), None)
        if param is None:
            self.fail(role, f"is given, but the convention takes no {role.replace('_', ' ')} parameter")
        if array.shape != shape:
            self.fail(role, f"is {_shape(array)}, not {_shape(shape)} ({'Lq x Lk' if role == 'mask' else 'Lk'})")
        try:
            return np.asarray(FORMS[param.mask_form].from_course(array), dtype=bool)
        except ValueError as exc:
            self.fail(role, f"is not in its parameter's form ({param.mask_form}): {exc}")


def _shape(value) -> str:
    shape = value if isinstance(value, tuple) else np.shape(value)
    return " x ".join(map(str, shape)) if shape else "a single number"


def sheet_case(arrays: dict[str, np.ndarray], conv: Convention, label: str, where: str) -> Case:
    """The canonical case a file's arrays spell for `conv`."""
    read = _Reader(arrays, conv, where)
    n_heads = read.take("n_heads")
    if n_heads is not None and (n_heads.ndim or n_heads.dtype.kind not in "iu" or int(n_heads) < 1):
        read.fail("n_heads", "must be one whole number, 1 or more")
    x, heads = _tokens_and_heads(read, None if n_heads is None else int(n_heads))
    memory, values = _second_sequences(read)
    keys = x if memory is None else memory
    _check_heads(read, heads, x, keys, keys if values is None else values)
    wo, bo = read.matrix("wo"), read.bias("bo")
    width = sum(h.wv.shape[1] for h in heads)
    if wo is not None and wo.shape[0] != width:
        read.fail("wo", f"takes {wo.shape[0]} features, but the heads' outputs side by side are {width} wide")
    if bo is not None and (wo is None or bo.shape != (wo.shape[1],)):
        read.fail("bo", "must be as long as wo's output" if wo is not None else "is given without wo")
    mask = read.mask("mask", (x.shape[0], keys.shape[0]))
    key_mask = read.mask("key_padding", (keys.shape[0],))
    if read.arrays:
        read.fail(sorted(read.arrays)[0], "is not used: give each head's arrays one way (wq, or wq1, wq2 ...)")
    try:
        return Case(x=x, heads=tuple(heads), wo=wo, bo=bo, memory=memory, values=values, mask=mask,
                    key_mask=key_mask, label=label)
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _tokens_and_heads(read: _Reader, n_heads: int | None) -> tuple[np.ndarray, list[Head]]:
    """X and the heads: from x and each head's projections, or from Q, K and V given (as a
    course whose function takes them prints them), as X = [Q | K | V] with projections that
    pick each out, so that the reference computes on them exactly."""
    if any(name in read.arrays for name in GIVEN):
        if read.conv.input_stage == 0:
            read.fail(next(n for n in GIVEN if n in read.arrays), "is given, but the convention takes the tokens "
                      "and projects them itself: give x and wq, wk, wv")
        if "x" in read.arrays:
            read.fail("x", "is given beside q, k and v: give the tokens and their projections, or Q, K and V")
        q, k, v = (read.tokens(name) for name in GIVEN)
        for name, given in zip(GIVEN, (q, k, v)):
            if given is None:
                read.fail(name, "is missing: q, k and v come together")
        if not q.shape[0] == k.shape[0] == v.shape[0] or q.shape[1] != k.shape[1]:
            read.fail("k", f"is {_shape(k)} beside q {_shape(q)} and v {_shape(v)}: given Q, K and V have one row "
                           "per token, and Q and K as many columns")
        x = np.concatenate([q, k, v], axis=1).astype(np.float64)
        picks = np.split(np.eye(x.shape[1]), np.cumsum([q.shape[1], k.shape[1]]), axis=1)
        return x, _split_heads(read, picks, [None, None, None], n_heads or 1, GIVEN)
    x = read.tokens("x")
    if x is None:
        read.fail("x", "is missing: the tokens (or q, k and v given)")
    numbered = sorted({int(m.group(2)) for name in read.arrays if (m := HEAD_NUMBERED.fullmatch(name))})
    if numbered:
        if n_heads is not None and n_heads != len(numbered):
            read.fail("n_heads", f"is {n_heads}, but heads {', '.join(map(str, numbered))} are given")
        if numbered != list(range(1, len(numbered) + 1)):
            read.fail(f"wq{numbered[-1]}", "numbers a head after a missing one: number them 1, 2, ...")
        return x, [_head(read, str(i)) for i in numbered]
    head = _head(read, "")
    return x, _split_heads(read, [head.wq, head.wk, head.wv], [head.bq, head.bk, head.bv], n_heads or 1,
                           ("wq", "wk", "wv"))


def _head(read: _Reader, suffix: str) -> Head:
    w = [read.matrix(f"{name}{suffix}") for name in ("wq", "wk", "wv")]
    b = [read.bias(f"{name}{suffix}") for name in ("bq", "bk", "bv")]
    for name, value in zip(("wq", "wk", "wv"), w):
        if value is None:
            read.fail(f"{name}{suffix}", "is missing: each head needs wq, wk and wv")
    if any(v is None for v in b) and any(v is not None for v in b):
        missing = next(n for n, v in zip(("bq", "bk", "bv"), b) if v is None)
        read.fail(f"{missing}{suffix}", "is missing: give the three biases bq, bk and bv, or none")
    return Head(*w, *b)   # type: ignore[arg-type]


def _split_heads(read: _Reader, w: list, b: list, n_heads: int, names: tuple) -> list[Head]:
    """Fused projections (D x H*d_k) as H heads, each a contiguous block of columns."""
    for label, matrix in zip(names, w):
        if matrix.shape[1] % n_heads:
            read.fail(label, f"has {matrix.shape[1]} columns, which {n_heads} heads cannot share equally")
    blocks = [np.split(m, n_heads, axis=1) for m in w]
    biases = [np.split(v, n_heads) if v is not None else [None] * n_heads for v in b]
    return [Head(*(blocks[j][h] for j in range(3)), *(biases[j][h] for j in range(3))) for h in range(n_heads)]


def _second_sequences(read: _Reader) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Cross-attention's memory, or the key and value inputs of query, key and value apart."""
    memory, keys, values = read.tokens("memory"), read.tokens("key_tokens"), read.tokens("value_tokens")
    if memory is not None and (keys is not None or values is not None):
        read.fail("memory", "is given beside key_tokens and value_tokens: give one or the other")
    if (keys is None) != (values is None):
        read.fail("value_tokens" if values is None else "key_tokens", "is missing: key_tokens and value_tokens "
                                                                      "come together")
    if keys is not None and values is not None and keys.shape[0] != values.shape[0]:
        read.fail("value_tokens", f"has {values.shape[0]} rows, key_tokens {keys.shape[0]}: one value per key")
    return (memory, None) if keys is None else (keys, values)


def _check_heads(read: _Reader, heads: list[Head], x, keys, values) -> None:
    """Each projection takes its sequence's width, and the shapes within a head agree."""
    for i, head in enumerate(heads):
        suffix = str(i + 1) if len(heads) > 1 else ""
        for name, matrix, source, what in (("wq", head.wq, x, "x"), ("wk", head.wk, keys, "the keys' sequence"),
                                           ("wv", head.wv, values, "the values' sequence")):
            if matrix.shape[0] != source.shape[1]:
                read.fail(f"{name}{suffix}", f"is {_shape(matrix)} (as x @ W takes it), but {what} is "
                                             f"{source.shape[1]} wide")
        if head.wk.shape[1] != head.wq.shape[1]:
            read.fail(f"wk{suffix}", f"has {head.wk.shape[1]} columns (d_k), wq {head.wq.shape[1]}")
        for name, bias, matrix in (("bq", head.bq, head.wq), ("bk", head.bk, head.wk), ("bv", head.bv, head.wv)):
            if bias is not None and bias.shape != (matrix.shape[1],):
                read.fail(f"{name}{suffix}", f"is {_shape(bias)}, its projection's columns {matrix.shape[1]}")
