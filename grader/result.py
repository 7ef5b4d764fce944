"""The one result model: every run, however it ended, produces a valid GradeResult."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader import __version__
from grader.atomic_write import write_json

# Kinds of error that mean the submission was not graded at all: the submission could not be
# read (its author's doing) or the grader failed (the staff's to look into).
NOT_GRADED = ("unreadable", "grader_error")


@dataclass
class ErrorRecord:
    """Something that went wrong while running or grading a notebook, as a result stores it."""
    cell: int            # index of the cell in the notebook, -1 for the grader's own code
    # error | timeout | unresponsive | memory | kernel_died | output_flood | deadline (a cell's);
    # bad_reply (the kernel's answer to the grader); unreadable | grader_error (not graded)
    kind: str
    ename: str
    evalue: str
    traceback: str = ""
    source: str = ""
    # Set by the grader, never from what the kernel says: the kernel died or was stopped
    # during this cell, so the notebook is run again without it.
    kernel_lost: bool = False

    def to_json(self) -> dict:
        return asdict(self)

@dataclass
class CheckResult:
    name: str
    function: str
    kind: str
    title: str
    status: str
    points: float
    max_points: float
    message: str
    diagnosis: str | None = None
    hidden: bool = False
    figures: list = field(default_factory=list)
    # What the diagnosed mistake means and where to look: said once per mistake, apart from
    # the message, which says what this check observed.
    advice: str = ""

    # status: passed | failed | error | info. "info" is a 0-point check that did not pass: it
    # informs and is never shown or counted as a failure.
    @property
    def lost_points(self) -> bool:
        return self.status in ("failed", "error")


@dataclass
class GradeResult:
    submission: str
    assignment: str
    seed: int
    status: str = "graded"               # graded | error | timeout
    score: float = 0.0
    max_score: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    # level: "full" where the forbidden libraries were removed from the kernel's filesystem,
    # "partial" where the policy rests on the static scan and on what the kernel reported.
    policy: dict = field(default_factory=lambda: {"forbidden": [], "findings": [], "level": "partial"})
    functions: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    isolation: dict = field(default_factory=dict)
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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "GradeResult":
        """The inverse of to_json; keys added beside the contract (such as a batch's) are ignored."""
        names = {f for f in cls.__dataclass_fields__}
        result = cls(**{k: v for k, v in data.items() if k in names and k != "checks"})
        check_names = set(CheckResult.__dataclass_fields__)
        result.checks = [CheckResult(**{k: v for k, v in c.items() if k in check_names}) for c in data["checks"]]
        return result

    def write_json(self, path: Path) -> None:
        write_json(path, self.to_json())
