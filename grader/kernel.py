"""One submission's kernel: started in its own sandboxed folder with the grading harness
loaded, given one piece of code at a time, and stopped with everything it left behind.

Whatever goes wrong while a piece of code runs comes back as a ErrorRecord, never as an
exception: the code raised, ran past its timeout and was interrupted, ignored the interrupt,
ran out of memory, killed the kernel, or sent more than the grader reads. Only what the
grader itself saw decides which (the kernel's process died, or it did not answer after the
interrupt); an error the code raises under one of those names is an ordinary error.
"""
from __future__ import annotations

import asyncio
import atexit
import functools
import math
import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources

import nbformat
from nbclient.exceptions import DeadKernelError

from . import wire
from .result import ErrorRecord
from .harness import MIME
from .kernel_client import MAX_MESSAGE_BYTES, CappedClient, default_kernel_manager
from .sandbox import Sandbox, grader_paths, run_id
from .settings import Limits

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HARNESS_MODULE = "_attention_grader_harness"
HARNESS = f"__import__('sys').modules[{HARNESS_MODULE!r}]"


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


@functools.lru_cache(maxsize=None)
def module_source(name: str) -> str:
    """A grader module's source, as the kernel is sent it; read once per grading run."""
    return resources.files("grader").joinpath(name).read_text()


def harness_source() -> str:
    return module_source("harness.py")


class Kernel:
    """One kernel in a fresh temporary folder, for one submission. `async with Kernel(...)`
    starts it, or raises having removed whatever the start got to (RuntimeError, in one line,
    when the kernel or the harness did not start); leaving the block stops it and counts in
    `leftover_processes` what had to be killed."""

    def __init__(self, limits: Limits, kernel_manager_factory=default_kernel_manager, forbidden: tuple[str, ...] = (),
                 hidden_files: tuple[str, ...] = ()):
        self.limits = limits
        self.kernel_manager_factory = kernel_manager_factory
        self.forbidden = forbidden
        self.hidden_files = hidden_files
        self.alive = False
        self.leftover_processes = 0
        self.workdir: str | None = None
        self.sandbox: Sandbox | None = None
        self.km = None
        self.client: CappedClient | None = None
        self.kernel_log = None
        self._setup = None     # nbclient's context for the running kernel, once entered
        self._reply = None

    async def __aenter__(self) -> "Kernel":
        self.workdir = tempfile.mkdtemp(prefix=f"grader-kernel-{run_id()}-")
        try:
            await self._start()
        except BaseException:
            await self.__aexit__(None, None, None)   # whatever the start got to, it is stopped and removed
            raise
        return self

    async def _start(self) -> None:
        self.sandbox = Sandbox(self.limits, self.workdir, grader_paths(self.hidden_files), self.forbidden)
        self.sandbox.prepare()
        self._write_startup_file()
        self.sandbox.give_workdir()
        # The kernel's own stderr goes to a file outside its reach, for when it fails to start.
        self.kernel_log = tempfile.TemporaryFile()
        self.km = self.kernel_manager_factory(self.workdir, self.sandbox)
        self.client = CappedClient(nbformat.v4.new_notebook(), km=self.km, kernel_name="python3", allow_errors=True,
                                   interrupt_on_timeout=True, iopub_timeout=2, shutdown_kernel="immediate",
                                   # nbclient takes whole seconds only
                                   startup_timeout=math.ceil(self.limits.startup_timeout),
                                   on_cell_executed=self._remember_reply)
        setup = self.client.async_setup_kernel(
            cwd=self.workdir, env=self.sandbox.environment(kernel_environment(self.workdir)),
            preexec_fn=self.sandbox.preexec, stdout=subprocess.DEVNULL, stderr=self.kernel_log)
        try:
            await setup.__aenter__()
        except Exception as exc:  # noqa: BLE001 - whatever stopped the start, it is reported in one line
            # nbclient registers its exit hook before the start and removes it only when its
            # context exits, which a failed start never does: the hook would fail at exit.
            atexit.unregister(self.client._cleanup_kernel)
            raise RuntimeError(f"the kernel did not start ({exc}): {self._kernel_log_tail()}") from None
        self._setup = setup
        self.alive = True
        payload, error = await self.run_code(f"{HARNESS}.ready()", timeout=self.limits.startup_timeout)
        if not payload:
            detail = f"{error.ename}: {error.evalue}" if error else "it did not load"
            raise RuntimeError(f"could not start the grading harness: {detail}")

    def _kernel_log_tail(self) -> str:
        self.kernel_log.seek(0)
        return " | ".join(self.kernel_log.read()[-600:].decode(errors="replace").strip().splitlines()[-3:])

    def _write_startup_file(self) -> None:
        """The harness loads as an IPython startup file: before the first cell, and outside
        IPython's per-cell wrapping of the output streams, which would undo the output cap."""
        startup = os.path.join(self.workdir, ".ipython", "profile_default", "startup")
        os.makedirs(startup)
        wire_source = module_source("wire.py")
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
        self.alive = False
        try:
            if self._setup is not None:
                await self._setup.__aexit__(None, None, None)
            # nbclient shuts down only kernels it started itself; this one came from the factory.
            if self.client is not None and self.client.kc is not None:
                self.client.kc.stop_channels()
            if self.km is not None:
                await self.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001 - a dead, killed or never started kernel may fail to shut down cleanly
            pass
        finally:
            if self.sandbox is not None:
                self.leftover_processes += len(self.sandbox.cleanup())
            elif self.workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if self.kernel_log is not None:
                self.kernel_log.close()

    @property
    def output_bytes(self) -> int:
        """What the notebook's cells printed or displayed: counted, never kept."""
        return self.client.output_bytes if self.client else 0

    def isolation(self) -> dict:
        return self.sandbox.report()

    async def run_cell(self, source: str, timeout: float) -> ErrorRecord | None:
        """Run a notebook cell's code (in the kernel's history, as Jupyter would); returns
        what went wrong, with `cell` -1: the caller knows which cell it was."""
        error, _ = await self._execute(source, timeout, probe=False)
        return error

    async def run_code(self, code: str, timeout: float):
        """Run grader code in the kernel; returns (last harness payload or None, ErrorRecord or None)."""
        error, payload = await self._execute(code, timeout, probe=True)
        return payload, error

    async def stop_background(self) -> int:
        """Stop what the notebook left running beside the kernel, so that probing is not
        starved by it; returns how many processes were stopped."""
        stopped = self.sandbox.stop_background(self.km.provisioner.pid)
        if stopped:
            await self.run_code(f"{HARNESS}.reap()", timeout=10)
        return stopped

    def _memory_message(self, what: str) -> str:
        return f"memory limit exceeded ({self.limits.memory_limit} MiB): {what}"

    def _remember_reply(self, cell, cell_index, execute_reply):
        self._reply = execute_reply

    async def _send(self, cell, timeout: float, wait: float, history: bool, probe: bool) -> dict:
        """Hand `cell` to nbclient as the only cell of a notebook of its own and wait at most
        `wait` seconds for the kernel's reply. nbclient interrupts the kernel after `timeout`;
        a probe keeps the harness's payloads in the cell's outputs, a notebook cell's are only
        counted as output."""
        self.client.nb = nbformat.v4.new_notebook(cells=[cell])
        self.client.timeout = max(1, int(round(timeout)))
        self.client.error_on_timeout = {"ename": "Timeout", "evalue": f"interrupted after {timeout:.0f} s"}
        self.client.probing = probe
        self._reply = None
        await asyncio.wait_for(self.client.async_execute_cell(cell, 0, store_history=history), wait)
        return self._reply or {}

    @staticmethod
    def _timed_out(reply: dict) -> bool:
        """nbclient gave up waiting and interrupted the kernel. Its own timeout reply has no
        header; a real reply from the kernel (which the notebook could forge, with ename
        "Timeout") always has one."""
        content = reply.get("content", {})
        return "header" not in reply and content.get("status") == "error" and content.get("ename") == "Timeout"

    async def _settles(self, grace: float) -> bool:
        """Whether the kernel answers a no-op within `grace` seconds of an interrupt. nbclient
        reports a timeout as soon as it sends the interrupt; a cell that ignores SIGINT (or a
        long BLAS call) keeps the kernel busy, and every later cell would time out behind it."""
        try:
            reply = await self._send(nbformat.v4.new_code_cell("pass"), grace, grace + 2, history=False, probe=False)
        except (asyncio.TimeoutError, DeadKernelError):
            return False
        return reply.get("content", {}).get("status") == "ok"

    async def _kill(self) -> None:
        self.alive = False
        try:
            await self.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001
            pass

    async def _execute(self, source: str, timeout: float, probe: bool):
        """Run one piece of code; returns (ErrorRecord or None, last harness payload or None).
        A payload that arrived before the kernel died or hung is still returned."""
        if not self.alive:
            return ErrorRecord(-1, "kernel_died", "KernelDied", "the kernel is no longer running"), None
        cell = nbformat.v4.new_code_cell(source)
        error = await self._run(cell, timeout, probe)
        payloads = [o["data"][MIME] for o in cell.outputs
                    if o.get("output_type") == "display_data" and MIME in o.get("data", {})]
        return error, (payloads[-1] if payloads else None)

    async def _run(self, cell, timeout: float, probe: bool) -> ErrorRecord | None:
        grace = self.limits.interrupt_grace
        try:
            reply = await self._send(cell, timeout, timeout + grace, history=not probe, probe=probe)
        except asyncio.TimeoutError:
            await self._kill()
            return ErrorRecord(-1, "unresponsive", "Unresponsive",
                             f"still running {grace:g} s after an interrupt; the kernel was stopped", kernel_lost=True)
        except DeadKernelError:
            self.alive = False
            if self.sandbox.memory_exceeded():
                return ErrorRecord(-1, "memory", "MemoryLimit", self._memory_message("the kernel was stopped"),
                                 kernel_lost=True)
            return ErrorRecord(-1, "kernel_died", "KernelDied",
                             "the Python process running the notebook died (os._exit, a crash, a segfault "
                             "or the CPU time limit)", kernel_lost=True)
        if self.client.kc.output_lost():
            await self._kill()
            return ErrorRecord(-1, "output_flood", "OutputLimit",
                             f"the notebook sent a message larger than {MAX_MESSAGE_BYTES // 2**20} MiB; "
                             "the grader does not read such messages and stopped the kernel", kernel_lost=True)
        if self._timed_out(reply):
            if not await self._settles(grace):
                await self._kill()
                return ErrorRecord(-1, "unresponsive", "Unresponsive",
                                 f"the cell ran longer than {timeout:.0f} s and was still running {grace:g} s "
                                 "after its interrupt; the kernel was stopped", kernel_lost=True)
            return ErrorRecord(-1, "timeout", "Timeout",
                               f"the cell ran longer than {timeout:.0f} s and was interrupted")
        for out in cell.outputs:
            if out.get("output_type") == "error" and out.get("ename") == "MemoryError":
                return ErrorRecord(-1, "memory", "MemoryError", self._memory_message("the cell raised MemoryError"),
                                 clean_traceback(out.get("traceback", [])))
            if out.get("output_type") == "error":
                return ErrorRecord(-1, "error", out.get("ename", ""), str(out.get("evalue", ""))[:1000],
                                 clean_traceback(out.get("traceback", [])))
        return None
