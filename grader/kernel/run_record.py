"""What running a notebook produced: the errors of its cells and of the grader's own code in
the kernel (each a result's ErrorRecord), and the record of the run. The kernel
(grader/kernel/session.py) and the runner (grader/kernel/runner.py) both speak in these terms.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.result import ErrorRecord


@dataclass
class ExecutionLog:
    errors: list[ErrorRecord] = field(default_factory=list)
    seconds: float = 0.0
    output_bytes: int = 0
    kernel_alive: bool = True
    leftover_processes: int = 0
    background_stopped: int = 0
    isolation: dict = field(default_factory=dict)
    grader_cells: list[int] = field(default_factory=list)   # left out: the grader's own (grader/intake/own_cells.py)
