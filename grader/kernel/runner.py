"""Run a notebook top to bottom in a kernel: the control flow, apart from the kernel itself.

Errors are recorded and execution goes on with the next cell; as in Python, nothing after a
cell's failing statement runs, and the error says which definitions that left out; each cell
gets the per-cell timeout or what is left of the notebook's deadline; a cell that loses the
kernel is skipped when the notebook is run again in a new one.
The kernel is reached only through NotebookKernel, so all of this can be tried against a
scripted kernel; grader/kernel/session.py is the real one.
"""
from __future__ import annotations

import ast
import re
import time
from contextlib import asynccontextmanager
from typing import Callable, Protocol

from grader.errors import MachineFault
from grader.kernel.run_record import ExecutionLog
from grader.result import ErrorRecord
from grader.kernel.session import Kernel
from grader.kernel.client import default_kernel_manager
from grader.intake.own_cells import is_grader_cell, without_grader_lines
from grader.settings import Limits
from grader.intake.source_scan import python_source
from grader import syntax_tree

MAX_RESTARTS = 2
# A kernel that does not start is the machine's doing (no code of the submission has run in
# it yet): a busy machine can make a start fail once, so it is tried again, this many times in all.
START_ATTEMPTS = 3
# nbclient never ran a cell with this tag, and the grader has always run notebooks through it.
SKIP_TAG = "skip-execution"
CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class NotebookKernel(Protocol):
    """What running a notebook needs of a kernel; `async with` starts and stops it."""

    alive: bool                 # false once the kernel died or was stopped
    leftover_processes: int     # once stopped: what had to be killed

    @property
    def output_bytes(self) -> int:
        """What the cells printed so far."""

    async def __aenter__(self) -> "NotebookKernel": ...

    async def __aexit__(self, *exc) -> None: ...

    async def run_cell(self, source: str, timeout: float) -> ErrorRecord | None:
        """What went wrong running `source` (its `cell` is filled in by the runner), or None."""

    async def stop_background(self) -> int:
        """Stop the processes the notebook left running; returns how many."""


def left_undefined(source: str, error: ErrorRecord) -> tuple[int, list[str]] | None:
    """(the failing line, the functions and classes of the cell's top level that Python did
    not define because that line raised), from the grader's own parse of the cell; None when
    the line is not known or nothing was left undefined. The line comes from the kernel's
    traceback, which a submission can forge: it only chooses what its own error says."""
    match = CELL_LINE.search(error.traceback)
    if not match:
        return None
    line = int(match.group(1))
    try:
        tree = syntax_tree.parse(python_source(source))
    except SyntaxError:
        return None
    # The failing statement too: a def whose decorator or defaults raised defines nothing.
    names = [stmt.name for stmt in tree.body if isinstance(stmt, DEFINITIONS) and (stmt.end_lineno or 0) >= line]
    return (line, names) if names else None


# The note, as found again at the end of an error's message.
NOT_RUN_NOTE = re.compile(r" \(Python ran nothing after line \d+ of this cell, so .* not defined\)$", re.DOTALL)


def not_run_note(line: int, names: list[str]) -> str:
    """Said once, after the error of the statement that left `names` undefined."""
    listed = ", ".join(f"`{n}`" for n in names)
    verb = "is" if len(names) == 1 else "are"
    return f" (Python ran nothing after line {line} of this cell, so {listed} {verb} not defined)"


class NotebookRunner:
    """Runs a notebook's code cells, in order, in one kernel, within `notebook_timeout`
    seconds from the first cell; `clock` is a monotonic clock in seconds."""

    def __init__(self, kernel: NotebookKernel, cell_timeout: float, notebook_timeout: float,
                 clock: Callable[[], float] = time.monotonic):
        self.kernel = kernel
        self.cell_timeout = cell_timeout
        self.notebook_timeout = notebook_timeout
        self.clock = clock
        self.log = ExecutionLog()

    async def run(self, nb, skip=frozenset()) -> ExecutionLog:
        """Run every code cell but those in `skip`, until the kernel is lost or the deadline
        passes (recorded once, as a "deadline" error at the first cell that did not run)."""
        started = self.clock()
        deadline = started + self.notebook_timeout
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip() or index in skip:
                continue
            if is_grader_cell(cell.source):   # %load_ext grader / %grade: the grader is not in the kernel
                self.log.grader_cells.append(index)
                continue
            if not self.kernel.alive:
                break
            if deadline - self.clock() <= 0:
                self.log.errors.append(ErrorRecord(index, "deadline", "Deadline",
                                                 f"the notebook's {self.notebook_timeout:.0f} s were used up; "
                                                 "this and later cells did not run", source=cell.source))
                break
            if SKIP_TAG in cell.get("metadata", {}).get("tags", []):
                continue
            await self._run_cell(nb, index, deadline)
        self.log.seconds = self.clock() - started
        self.log.output_bytes = self.kernel.output_bytes
        self.log.kernel_alive = self.kernel.alive
        if self.kernel.alive:
            self.log.background_stopped = await self.kernel.stop_background()
        return self.log

    async def _run_cell(self, nb, index: int, deadline: float) -> None:
        """Run a cell; when a statement raises, record it, naming the definitions after it that
        Python therefore never made: what is graded is what Python defined."""
        original = nb.cells[index].source
        source = without_grader_lines(original)
        error = await self.kernel.run_cell(source, min(self.cell_timeout, deadline - self.clock()))
        if not error:
            return
        error.cell, error.source = index, original
        if error.kind == "error" and (undefined := left_undefined(source, error)):
            error.evalue += not_run_note(*undefined)
        self.log.errors.append(error)


@asynccontextmanager
async def run_with_restarts(nb, cell_timeout: float, notebook_timeout: float,
                            start_kernel: Callable[[], NotebookKernel], clock: Callable[[], float] = time.monotonic):
    """Yield (kernel, log) after running the notebook in a kernel from `start_kernel`. A cell
    that loses the kernel is recorded, and the notebook runs again in a new kernel without it
    (at most MAX_RESTARTS times, within the same overall deadline), so one fatal cell does
    not cost every function; the log holds the last attempt's errors and the cells that lost
    the earlier kernels, in cell order. Once the context
    exits, log.leftover_processes counts what every attempt's kernel left running."""
    started = clock()
    skipped: set[int] = set()
    earlier: list[ExecutionLog] = []
    while True:
        remaining = max(1.0, notebook_timeout - (clock() - started))
        async with started_kernel(start_kernel) as kernel:
            log = await NotebookRunner(kernel, cell_timeout, remaining, clock).run(nb, frozenset(skipped))
            fatal = [e for e in log.errors if e.kernel_lost and e.cell >= 0]
            may_run_again = bool(fatal) and len(skipped) < MAX_RESTARTS
            again = may_run_again and clock() - started < notebook_timeout
            if again:
                fatal[-1].evalue += "; the notebook was run again in a new kernel without this cell"
                skipped.add(fatal[-1].cell)
            else:
                if may_run_again:   # only the notebook's time stood in the way
                    _no_time_to_run_again(nb, fatal[-1], notebook_timeout, log)
                # Of the earlier attempts, only the cells that lost their kernels: every other
                # error was met again in this attempt.
                lost = [e for old in earlier for e in old.errors if e.kernel_lost and e.cell in skipped]
                log.errors = sorted(lost + log.errors, key=lambda e: e.cell)
                log.seconds = clock() - started
                yield kernel, log
        log.leftover_processes += kernel.leftover_processes
        if not again:
            log.leftover_processes += sum(old.leftover_processes for old in earlier)
            return
        earlier.append(log)


def _no_time_to_run_again(nb, fatal: ErrorRecord, notebook_timeout: float, log: ExecutionLog) -> None:
    """A cell lost the kernel when the notebook's time was used up, so it is not run again
    without that cell: the cells after it did not run for want of time (a deadline, as when
    the time runs out between cells), not because of the lost kernel alone."""
    later = [i for i, cell in enumerate(nb.cells) if i > fatal.cell and cell.cell_type == "code"]
    if later and not any(e.kind == "deadline" for e in log.errors):
        log.errors.append(ErrorRecord(later[0], "deadline", "Deadline",
                                      f"the notebook's {notebook_timeout:.0f} s were used up before it could be "
                                      "run again without the cell that stopped its kernel; this and later cells "
                                      "did not run",
                                      source=nb.cells[later[0]].source))


@asynccontextmanager
async def started_kernel(start_kernel: Callable[[], NotebookKernel]):
    """A kernel from `start_kernel`, started, and stopped when the context exits. A start that
    fails (MachineFault) is tried again with a new kernel, START_ATTEMPTS times in all; the
    last one's failure is raised."""
    for attempt in range(1, START_ATTEMPTS + 1):
        kernel = start_kernel()
        try:
            await kernel.__aenter__()
        except MachineFault:
            if attempt == START_ATTEMPTS:
                raise
            continue
        break
    try:
        yield kernel
    finally:
        await kernel.__aexit__(None, None, None)


@asynccontextmanager
async def executed_notebook(nb, limits: Limits, kernel_manager_factory=default_kernel_manager,
                            forbidden: tuple[str, ...] = (), hidden_files: tuple[str, ...] = (), support=None):
    """Yield (kernel, log) after running the notebook in sandboxed kernels (see
    run_with_restarts), with the sandbox's isolation report in the log. The `forbidden`
    libraries, and the grader's own files with `hidden_files`, are removed from the kernel's
    view where the sandbox can; the course's `support` modules are given to it read-only."""
    def start_kernel() -> Kernel:
        return Kernel(limits, kernel_manager_factory, forbidden, hidden_files, support)
    async with run_with_restarts(nb, limits.cell_timeout, limits.notebook_timeout, start_kernel) as (kernel, log):
        log.isolation = kernel.isolation()
        yield kernel, log
