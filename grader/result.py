"""The one result model: every run, however it ended, produces a valid GradeResult.

Its JSON (to_json) is the contract that result.json, `grader check --json`, the LMS results
and the golden fixtures rest on. The records kept in lists (checks, errors) are dataclasses;
the JSON objects whose keys depend on how far grading got (policy, timing, isolation, each
function's description) are TypedDicts, so that an absent key stays absent in the JSON while
the type checker still knows every key and its type.
"""
from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Literal, TypedDict, Union

from grader import __version__
from grader.atomic_write import write_json

Status = Literal["graded", "error", "timeout"]
# "info" is a 0-point check that did not pass: it informs and is never shown or counted as a failure.
CheckStatus = Literal["passed", "failed", "error", "info"]
# A cell's: error | timeout | unresponsive | memory | kernel_died | output_flood | deadline;
# the kernel's answer to the grader: bad_reply; not graded at all: unreadable | grader_error.
ErrorKind = Literal["error", "timeout", "unresponsive", "memory", "kernel_died", "output_flood", "deadline",
                    "bad_reply", "unreadable", "grader_error"]

# Kinds of error that mean the submission was not graded at all: the submission could not be
# read (its author's doing) or the grader failed (the staff's to look into).
NOT_GRADED: tuple[ErrorKind, ...] = ("unreadable", "grader_error")


class ResultFormatError(ValueError):
    """Stored result data that is not a result of this grader's form (from an older grader, or
    damaged): `str()` says where, in one line."""


class _FindingBase(TypedDict):
    source: Literal["static", "runtime"]   # the grader's scan of the source, or what the kernel reported
    module: str


class Finding(_FindingBase, total=False):
    """An import the policy flags: of a forbidden library, or (kind "grader_import") of the grader."""
    cell: int
    cell_number: int   # the cell as every message numbers it: from 1 (cell_number)
    line: int
    kind: Literal["grader_import"]


class _PolicyBase(TypedDict):
    forbidden: list[str]
    findings: list[Finding]
    # "full" where the forbidden libraries were removed from the kernel's filesystem,
    # "partial" where the policy rests on the static scan and on what the kernel reported.
    level: Literal["full", "partial"]


class Policy(_PolicyBase, total=False):
    penalty: str   # the spec's; absent when the submission was not graded


class Timing(TypedDict, total=False):
    """Seconds each stage took, as far as grading got; absent for a submission not graded."""
    execution: float
    probing: float
    output_characters: int
    grader_cells: list[int]   # the grader's own cells, left out (grader/intake/own_cells.py); only when any
    grader_cell_numbers: list[int]   # the same cells numbered from 1, as every message numbers them
    total: float


class Isolation(TypedDict, total=False):
    """The sandbox's report (Sandbox.report) and what the grader cleaned up after the kernel."""
    level: Literal["full", "partial"]
    active: list[str]
    missing: list[str]
    kernel_start: str
    leftover_processes_killed: int
    background_processes_stopped: int


class _DefiningCellFailureBase(TypedDict):
    cell: int
    line: int | None
    ename: str
    evalue: str


class DefiningCellFailure(_DefiningCellFailureBase, total=False):
    """Why a function is not defined: the first error of the last cell that defines it."""
    cell_number: int   # `cell` numbered from 1; absent from results of graders before it was added


class _SmallestCaseBase(TypedDict):
    case: str
    code: str


class SmallestCase(_SmallestCaseBase, total=False):
    """The smallest input a function fails on, as a cell to paste (grader/judging/smallest.py)."""
    # The notebook globals the function reads its weights from (a convention's `globals`), as
    # the grader set them for the call: name -> the value as the cell spells it.
    globals: dict[str, str]


class _FunctionInfoBase(TypedDict):
    found: bool


class FunctionInfo(_FunctionInfoBase, total=False):
    """What the grader learnt of one graded function: the kernel's description (checked by
    grader/kernel/replies.py) when it is found, then the grader's own findings."""
    name: str
    params: list[str]
    globals: dict[str, str]
    modules: list[str]
    stub: bool
    defining_cell_failed: DefiningCellFailure
    # Not defined: the top-level definitions named like it that could be it renamed (selfAttention
    # for self_attention), which are never graded in its place without the spec's aliases.
    similar_names: list[str]
    non_answer: bool
    smallest_failing: SmallestCase
    called_by_keyword: bool


# In the label of every case a hidden check draws (grader/judging/checks.py): the details of any check
# that name such a case, or show its figures, are withheld from students like a hidden check's
# (grader/report/view.py decides what a reader sees).
HIDDEN_CASE_MARK = "[hidden case]"
# In the label of a visible check's case drawn like a hidden check's (the same label and shapes,
# values of its own; grader/judging/checks.py): a student would take it for the hidden one, so
# a check whose details name or show such a case is withheld from students too.
SHAPED_AS_HIDDEN_MARK = "[shaped as a hidden case]"
# A terminal colour sequence, as IPython's tracebacks and the grader's terminal use them.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def failing_line_number(error: ErrorRecord) -> int | None:
    """The number of the cell's line that raised, from IPython's traceback (its first "---->"
    marker, which is in the cell itself), else None."""
    for line in ANSI.sub("", error.traceback).splitlines():
        marker = re.match(r"\s*-+>\s*(\d+)\s", line)
        if marker:
            return int(marker.group(1))
    return None


def cell_number(index: int) -> int:
    """A cell's number as a student finds it in the notebook and every message says it: every
    cell counted, from 1. The result keeps the 0-based index as `cell`, and this beside it."""
    return index + 1


@dataclass
class ErrorRecord:
    """Something that went wrong while running or grading a notebook, as a result stores it."""
    cell: int            # index of the cell in the notebook (from 0), -1 for the grader's own code
    kind: ErrorKind
    ename: str
    evalue: str
    traceback: str = ""
    source: str = ""
    # Set by the grader, never from what the kernel says: the kernel died or was stopped
    # during this cell, so the notebook is run again without it.
    kernel_lost: bool = False
    # `cell` as messages number it (from 1), None for the grader's own code: made from `cell`
    # whenever it is set (the runner sets it after the error is made), never read back, so the
    # two cannot disagree.
    cell_number: int | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._number_cell()

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name == "cell":
            self._number_cell()

    def _number_cell(self) -> None:
        super().__setattr__("cell_number", cell_number(self.cell) if self.cell >= 0 else None)

    @property
    def not_graded(self) -> bool:
        """This error kept the submission from being graded at all."""
        return self.kind in NOT_GRADED

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CheckResult:
    name: str
    function: str
    kind: str
    title: str
    status: CheckStatus
    points: float
    max_points: float
    message: str
    diagnosis: str | None = None
    hidden: bool = False
    figures: list[dict] = field(default_factory=list)
    # What the diagnosed mistake means and where to look: said once per mistake, apart from
    # the message, which says what this check observed.
    advice: str = ""

    @property
    def lost_points(self) -> bool:
        return self.status in ("failed", "error")


def unchecked_policy() -> Policy:
    """The policy of a result before (or without) any grading: nothing found, nothing enforced."""
    return {"forbidden": [], "findings": [], "level": "partial"}


@dataclass
class GradeResult:
    submission: str
    assignment: str
    seed: int
    status: Status = "graded"
    score: float = 0.0
    max_score: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    policy: Policy = field(default_factory=unchecked_policy)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    timing: Timing = field(default_factory=lambda: Timing())
    isolation: Isolation = field(default_factory=lambda: Isolation())
    grader_version: str = __version__
    # What the notebook's metadata asked to be graded against, when anything: a request the
    # staff's choice overrides, kept so a mismatch is visible.
    metadata_assignment: str | None = None

    def total(self) -> None:
        self.score = round(sum(c.points for c in self.checks), 6)
        self.max_score = round(sum(c.max_points for c in self.checks), 6)

    @property
    def full_marks(self) -> bool:
        """Every point available was earned; informational (0-point) checks do not count."""
        return self.status == "graded" and self.score >= self.max_score

    @property
    def not_graded(self) -> bool:
        """The submission was not graded at all: it could not be read, or the grader failed."""
        return any(e.not_graded for e in self.errors)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> GradeResult:
        """The inverse of to_json; keys added beside the contract (such as a batch's) are
        ignored. Raises ResultFormatError when `data` is not a result of this form: a stored
        result may come from an older grader, or be damaged."""
        if not isinstance(data, dict):
            raise ResultFormatError("a result is not a JSON object")
        return _record(cls, data, "result")

    def write_json(self, path: Path) -> None:
        write_json(path, self.to_json())


# Reading stored results back: each value is checked against the model's own annotations, so
# the check cannot drift from the model.

@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _record(cls, data: dict, where: str):
    """A dataclass of the model from its JSON object; keys it does not have are ignored."""
    hints = _hints(cls)
    values = {}
    for f in fields(cls):
        if not f.init:
            continue   # made from the other fields (ErrorRecord.cell_number)
        if f.name in data:
            values[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ResultFormatError(f"{where} has no {f.name}")
    return cls(**values)


def _value(tp, value, where: str):
    """`value`, checked against the type `tp`; raises ResultFormatError saying where it is not."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        if value in args and type(value) is type(args[0]):
            return value
    elif origin in (Union, types.UnionType):
        for arm in args:
            try:
                return _value(arm, value, where)
            except ResultFormatError:
                continue
    elif tp is type(None):
        if value is None:
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value   # as stored: JSON writes a whole float's points as an integer
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp in (str, bool):
        if isinstance(value, tp):
            return value
    elif tp is list or origin is list:
        if isinstance(value, list):
            return [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    elif typing.is_typeddict(tp):
        if isinstance(value, dict):
            return _typed_dict(tp, value, where)
    elif tp is dict or origin is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: _value(args[1], v, f"{where}.{k}") for k, v in value.items()} if args else value
    elif is_dataclass(tp):
        if isinstance(value, dict):
            return _record(tp, value, where)
    else:
        raise TypeError(f"the result model has a type the reader does not know: {tp!r}")
    raise ResultFormatError(f"{where} is not {_described(tp)}: {type(value).__name__} {str(value)[:40]!r}")


def _typed_dict(tp, value: dict, where: str) -> dict:
    """A TypedDict's object: its required keys present, each key it knows of its type; a key it
    does not know (written by another version of the grader) is kept as it is."""
    missing = [k for k in tp.__required_keys__ if k not in value]
    if missing:
        raise ResultFormatError(f"{where} has no {missing[0]}")
    hints = _hints(tp)
    return {k: _value(hints[k], v, f"{where}.{k}") if k in hints else v for k, v in value.items()}


def _described(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_described(a) for a in args)
    if tp is type(None):
        return "null"
    if typing.is_typeddict(tp) or tp is dict or origin is dict or is_dataclass(tp):
        return "an object"
    if tp is list or origin is list:
        return "a list"
    return {float: "a number", int: "an integer", str: "text", bool: "true or false"}.get(tp, repr(tp))
