"""Run a notebook top to bottom in a real Jupyter kernel, then run probe code in it.

Errors are recorded and execution goes on; a cell that runs too long is interrupted; a
kernel that dies or ignores interrupts ends the run and is said to have done so. Only error
outputs and the harness's payloads are kept, so a cell that prints hundreds of megabytes
costs the grader no memory.
"""
from __future__ import annotations

import ast
import asyncio
import os
import re
import subprocess
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from importlib import resources

import nbformat
from nbclient.exceptions import DeadKernelError

from . import wire
from .harness import MIME
from .kernel_client import MAX_MESSAGE_BYTES, CappedClient, default_kernel_manager
from .sandbox import Sandbox, grader_paths, run_id
from .settings import Limits
from .static_scan import python_source

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HARNESS_MODULE = "_attention_grader_harness"
HARNESS = f"__import__('sys').modules[{HARNESS_MODULE!r}]"


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


def clean_traceback(lines: list[str], limit: int = 4000) -> str:
    text = ANSI.sub("", "\n".join(lines))
    return text if len(text) <= limit else text[:limit] + "\n[traceback truncated]"


def kernel_environment(workdir: str) -> dict:
    """A scrubbed environment: nothing of the grader's own variables reaches the kernel."""
    keep = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "SYSTEMROOT")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, IPYTHONDIR=os.path.join(workdir, ".ipython"),
               MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYDEVD_DISABLE_FILE_VALIDATION="1", JUPYTER_PLATFORM_DIRS="1")
    return env


CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)")


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def remaining_statements(source: str, error: CellError) -> str | None:
    """The cell's source after the top-level statement that raised, or None."""
    match = CELL_LINE.search(error.traceback)
    if not match:
        return None
    line = int(match.group(1))
    try:
        tree = ast.parse(python_source(source))
    except SyntaxError:
        return None
    later = [stmt for stmt in tree.body if stmt.lineno > line]
    # Only definitions are worth rescuing; statements that use the failed one's results would
    # just fail again.
    if not any(isinstance(s, DEFINITIONS) for s in later):
        return None
    later = [s.lineno for s in later]
    return "\n".join(source.splitlines()[later[0] - 1:])


def harness_source() -> str:
    return resources.files("grader").joinpath("harness.py").read_text()


class KernelSession:
    """One kernel in a fresh temporary directory, for one submission."""

    def __init__(self, limits: Limits, kernel_manager_factory=default_kernel_manager, forbidden: tuple[str, ...] = (),
                 hidden_files: tuple[str, ...] = ()):
        self.limits = limits
        self.hidden_files = hidden_files
        self.forbidden = forbidden
        self.cell_timeout = limits.cell_timeout
        self.notebook_timeout = limits.notebook_timeout
        self.kernel_manager_factory = kernel_manager_factory
        self.alive = False
        self.log = ExecutionLog()

    async def __aenter__(self) -> "KernelSession":
        self.workdir = tempfile.mkdtemp(prefix=f"grader-kernel-{run_id()}-")
        self.sandbox = Sandbox(self.limits, self.workdir, grader_paths(self.hidden_files), self.forbidden)
        self.sandbox.prepare()
        self._write_startup_file()
        self.sandbox.give_workdir()
        self.client = CappedClient(nbformat.v4.new_notebook(),
                                   km=self.kernel_manager_factory(self.workdir, self.sandbox),
                                   kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                                   iopub_timeout=2, shutdown_kernel="immediate",
                                   startup_timeout=self.limits.startup_timeout,
                                   on_cell_executed=self._remember_reply)
        # The kernel's own stderr goes to a file outside its reach, for when it fails to start.
        self.kernel_log = tempfile.TemporaryFile()
        self._kernel = self.client.async_setup_kernel(
            cwd=self.workdir, env=self.sandbox.environment(kernel_environment(self.workdir)),
            preexec_fn=self.sandbox.preexec, stdout=subprocess.DEVNULL, stderr=self.kernel_log)
        try:
            await self._kernel.__aenter__()
        except Exception as exc:  # noqa: BLE001 - whatever stopped the start, the folder and cgroups go
            self.kernel_log.seek(0)
            tail = self.kernel_log.read()[-600:].decode(errors="replace").strip().splitlines()[-3:]
            self.sandbox.cleanup()
            raise RuntimeError(f"the kernel did not start ({exc}): {' | '.join(tail)}") from None
        self.alive = True
        payload, error = await self.run_code(f"{HARNESS}.ready()", timeout=self.limits.startup_timeout)
        if not payload:
            await self.__aexit__(None, None, None)   # the kernel is up: stop it and clean up
            detail = f"{error.ename}: {error.evalue}" if error else "it did not load"
            raise RuntimeError(f"could not start the grading harness: {detail}")
        return self

    def _write_startup_file(self) -> None:
        """The harness loads as an IPython startup file: before the first cell, and outside
        IPython's per-cell wrapping of the output streams, which would undo the output cap."""
        startup = os.path.join(self.workdir, ".ipython", "profile_default", "startup")
        os.makedirs(startup)
        wire_source = resources.files("grader").joinpath("wire.py").read_text()
        with open(os.path.join(startup, "00-grader-harness.py"), "w") as f:
            f.write("import types as _t, sys as _s\n"
                    f"_m = _t.ModuleType({wire.KERNEL_MODULE!r})\n"
                    f"exec(compile({wire_source!r}, '<grader-wire>', 'exec'), _m.__dict__)\n"
                    "_s.modules[_m.__name__] = _m\n"
                    f"_m = _t.ModuleType({HARNESS_MODULE!r})\n"
                    f"exec(compile({harness_source()!r}, '<grader-harness>', 'exec'), _m.__dict__)\n"
                    f"_s.modules[_m.__name__] = _m\n"
                    f"_m.install({int(self.limits.cell_output_limit)}, {int(self.limits.output_limit)})\n"
                    "del _t, _s, _m\n")

    async def __aexit__(self, *exc) -> None:
        try:
            await self._kernel.__aexit__(None, None, None)
            # nbclient shuts down only kernels it started itself; this one came from the factory.
            if self.client.kc is not None:
                self.client.kc.stop_channels()
            await self.client.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001 - a dead or killed kernel may fail to shut down cleanly
            pass
        finally:
            self.log.leftover_processes += len(self.sandbox.cleanup())
            self.kernel_log.close()

    def _memory_message(self, what: str) -> str:
        return f"memory limit exceeded ({self.limits.memory_limit} MiB): {what}"

    def _remember_reply(self, cell, cell_index, execute_reply):
        self._reply = execute_reply

    def _timed_out(self) -> bool:
        """nbclient gave up waiting and interrupted the kernel. Its own timeout reply has no
        header; a real reply from the kernel (which the notebook could forge, with ename
        "Timeout") always has one."""
        reply = self._reply or {}
        content = reply.get("content", {})
        return "header" not in reply and content.get("status") == "error" and content.get("ename") == "Timeout"

    async def _settles(self, grace: float) -> bool:
        """Whether the kernel answers a no-op within `grace` seconds of an interrupt. nbclient
        reports a timeout as soon as it sends the interrupt; a cell that ignores SIGINT (or a
        long BLAS call) keeps the kernel busy, and every later cell would time out behind it."""
        notebook = self.client.nb
        probe = nbformat.v4.new_code_cell("pass")
        self.client.nb = nbformat.v4.new_notebook(cells=[probe])
        self.client.timeout = max(1, int(round(grace)))
        self._reply = None
        try:
            await asyncio.wait_for(self.client.async_execute_cell(probe, 0, store_history=False), grace + 2)
        except (asyncio.TimeoutError, DeadKernelError):
            return False
        finally:
            self.client.nb = notebook
        return (self._reply or {}).get("content", {}).get("status") == "ok"

    async def _kill(self) -> None:
        self.alive = False
        try:
            await self.client.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001
            pass

    async def _execute(self, cell, index: int, timeout: float):
        """Execute one cell; returns (reply content or None, CellError or None)."""
        grace = self.limits.interrupt_grace
        self.client.timeout = max(1, int(round(timeout)))
        self.client.error_on_timeout = {"ename": "Timeout", "evalue": f"interrupted after {timeout:.0f} s"}
        self._reply = None
        try:
            await asyncio.wait_for(self.client.async_execute_cell(cell, max(index, 0), store_history=index >= 0),
                                   timeout + grace)
        except asyncio.TimeoutError:
            await self._kill()
            return None, CellError(index, "unresponsive", "Unresponsive",
                                   f"still running {grace:g} s after an interrupt; the kernel was stopped",
                                   kernel_lost=True)
        except DeadKernelError:
            self.alive = False
            if self.sandbox.memory_exceeded():
                return None, CellError(index, "memory", "MemoryLimit", self._memory_message("the kernel was stopped"),
                                       kernel_lost=True)
            return None, CellError(index, "kernel_died", "KernelDied",
                                   "the Python process running the notebook died (os._exit, a crash, a segfault "
                                   "or the CPU time limit)", kernel_lost=True)
        if self.client.kc.output_lost():
            await self._kill()
            return None, CellError(index, "output_flood", "OutputLimit",
                                   f"the notebook sent a message larger than {MAX_MESSAGE_BYTES // 2**20} MiB; "
                                   "the grader does not read such messages and stopped the kernel", kernel_lost=True)
        reply = (self._reply or {}).get("content", {})
        if self._timed_out():
            if not await self._settles(grace):
                await self._kill()
                return reply, CellError(index, "unresponsive", "Unresponsive",
                                        f"the cell ran longer than {timeout:.0f} s and was still running {grace:g} s "
                                        "after its interrupt; the kernel was stopped", kernel_lost=True)
            return reply, CellError(index, "timeout", "Timeout",
                                    f"the cell ran longer than {timeout:.0f} s and was interrupted")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") == "MemoryError":
                return reply, CellError(index, "memory", "MemoryError",
                                        self._memory_message("the cell raised MemoryError"),
                                        clean_traceback(out.get("traceback", [])))
            if out.get("output_type") == "error":
                return reply, CellError(index, "error", out.get("ename", ""), str(out.get("evalue", ""))[:1000],
                                        clean_traceback(out.get("traceback", [])))
        return reply, None

    async def run_notebook(self, nb, skip=frozenset()) -> ExecutionLog:
        self.client.nb = nb
        self.client.probing = False
        started = time.monotonic()
        deadline = started + self.notebook_timeout
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip() or index in skip:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.alive:
                if self.alive:
                    self.log.errors.append(CellError(index, "deadline", "Deadline",
                                                     f"the notebook's {self.notebook_timeout:.0f} s were used up; "
                                                     "this and later cells did not run", source=cell.source))
                break
            await self._run_cell(cell, index, deadline)
        self.log.seconds = time.monotonic() - started
        self.log.output_bytes = self.client.output_bytes
        self.log.kernel_alive = self.alive
        if self.alive:
            self.log.background_stopped = self.sandbox.stop_background(self.client.km.provisioner.pid)
            if self.log.background_stopped:
                await self.run_code(f"{HARNESS}.reap()", timeout=10)
        return self.log

    async def _run_cell(self, cell, index: int, deadline: float) -> None:
        """Run a cell; when a statement raises, record it and run the rest of the cell from the
        next top-level statement, so an error early in a cell does not lose the functions
        defined after it."""
        source = cell.source
        while True:
            _, error = await self._execute(cell, index, min(self.cell_timeout, deadline - time.monotonic()))
            cell.outputs = []
            if not error:
                return
            error.source = source
            self.log.errors.append(error)
            rest = remaining_statements(cell.source, error) if error.kind == "error" else None
            if not rest or deadline - time.monotonic() <= 0:
                return
            error.evalue += " (the rest of the cell was run after the failing statement)"
            cell = nbformat.v4.new_code_cell(rest)
            self.client.nb.cells[index] = cell

    async def run_code(self, code: str, timeout: float):
        """Run grader code in the kernel; returns (last harness payload or None, CellError or None)."""
        if not self.alive:
            return None, CellError(-1, "kernel_died", "KernelDied", "the kernel is no longer running")
        cell = nbformat.v4.new_code_cell(code)
        self.client.nb = nbformat.v4.new_notebook(cells=[cell])
        self.client.probing = True
        _, error = await self._execute(cell, -1, timeout)
        payloads = [o["data"][MIME] for o in cell.outputs
                    if o.get("output_type") == "display_data" and MIME in o.get("data", {})]
        return (payloads[-1] if payloads else None), error


MAX_RESTARTS = 2


@asynccontextmanager
async def executed_notebook(nb, limits: Limits, kernel_manager_factory=default_kernel_manager,
                            forbidden: tuple[str, ...] = (), hidden_files: tuple[str, ...] = ()):
    """Yield (session, log) after running the notebook. A cell that kills the kernel is
    recorded, and the notebook runs again in a new kernel without it (at most MAX_RESTARTS
    times, within the same overall deadline), so one fatal cell does not cost every function.
    Once the context exits, log.leftover_processes counts what every attempt left running.
    The `forbidden` libraries, and the grader's own files with `hidden_files`, are removed
    from the kernel's view where the sandbox can."""
    started = time.monotonic()
    skipped: set[int] = set()
    earlier: list[ExecutionLog] = []
    while True:
        remaining = max(1.0, limits.notebook_timeout - (time.monotonic() - started))
        async with KernelSession(replace(limits, notebook_timeout=remaining), kernel_manager_factory,
                                 forbidden, hidden_files) as session:
            log = await session.run_notebook(nb, frozenset(skipped))
            fatal = [e for e in log.errors if e.kernel_lost and e.cell >= 0]
            if fatal and len(skipped) < MAX_RESTARTS and time.monotonic() - started < limits.notebook_timeout:
                fatal[-1].evalue += "; the notebook was run again in a new kernel without this cell"
                skipped.add(fatal[-1].cell)
                earlier.append(log)
                continue
            log.errors = [e for old in earlier for e in old.errors] + log.errors
            log.seconds = time.monotonic() - started
            log.isolation = session.sandbox.report()
            yield session, log
        log.leftover_processes += sum(old.leftover_processes for old in earlier)
        return
