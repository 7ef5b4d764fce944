"""What running a notebook produced: the errors of its cells and of the grader's own code in
the kernel, and the record of the run. The kernel (grader/kernel.py) and the runner
(grader/runner.py) both speak in these terms.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CellError:
    cell: int            # index of the cell in the notebook, -1 for the grader's own code
    kind: str            # error | timeout | memory | kernel_died | deadline
    ename: str
    evalue: str
    traceback: str = ""
    source: str = ""
    # Set by the grader, never from what the kernel says: the kernel died or was stopped
    # during this cell, so the notebook is run again without it.
    kernel_lost: bool = False

    def to_json(self) -> dict:
        return self.__dict__.copy()


@dataclass
class ExecutionLog:
    errors: list[CellError] = field(default_factory=list)
    seconds: float = 0.0
    output_bytes: int = 0
    kernel_alive: bool = True
    leftover_processes: int = 0
    background_stopped: int = 0
    isolation: dict = field(default_factory=dict)
