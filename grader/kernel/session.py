"""One submission's kernel: started in its own sandboxed folder with the grading harness
loaded, given one piece of code at a time, and stopped with everything it left behind. A
piece of code may make a run of calls whose replies the grader times one by one, on its own
clock (Kernel.run_calls).

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
import json
import marshal
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, cast

from grader.notebook_nodes import code_cell, notebook
from nbclient.exceptions import DeadKernelError

from grader import kernel_side
from grader.kernel_side import wire
from grader.errors import MachineFault
from grader.result import ErrorRecord
from grader.kernel_side.wire import MIME
from grader.kernel.reply_channel import ReplyChannel
from grader.kernel.client import MAX_MESSAGE_BYTES, BoundedKernelClient, CappedClient, default_kernel_manager
from grader.sandbox.isolation import Sandbox, grader_paths, run_id, scrubbed_environment
from grader.settings import Limits

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HARNESS_MODULE = "_attention_grader_harness"
# How long after a cell's reply its outputs may go on arriving, at most (outputs and replies
# travel on different channels). They end sooner: at the kernel's idle status, when the channel
# falls quiet (grader/kernel/client.py: OUTPUT_GAP), or when it was cut. A fixed short wait lost a busy
# machine's last outputs, the harness's replies among them.
IOPUB_TIMEOUT = 30
# The signals that end a kernel from outside it: the machine's out-of-memory killer, a
# supervisor stopping processes, an administrator. The kernel's own code ends it otherwise: by
# exiting, by crashing (SIGSEGV, SIGABRT, SIGBUS, SIGFPE) or at its CPU time limit (SIGXCPU,
# which counts CPU seconds, never the wall-clock time a busy machine stretches); and its memory
# limit kills it with SIGKILL, which the grader tells apart by its memory cgroup's count.
FROM_OUTSIDE = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP})
# After an interrupt, the grace is counted in the CPU seconds the submission's processes use
# (Kernel._within_grace); one that waits without computing gets this many times the grace on
# the grader's clock. How often the grader looks:
IDLE_GRACE_FACTOR = 4
GRACE_POLL_SECONDS = 0.2
HARNESS = f"__import__('sys').modules[{HARNESS_MODULE!r}]"
# The kernel's own configuration, in its profile. Its history is kept in memory only (In, _i,
# _ih and %history of the session work as ever), with no SQLite database: a kernel lives for
# one submission. nbclient would otherwise ask for an in-memory database on the kernel's
# command line, which makes ipykernel parse it with every option of every configurable class
# (fork_server.launch takes the fast way only for a command line of `-f CONNECTION_FILE`).
KERNEL_CONFIG = {"HistoryManager": {"enabled": False}}
# The line of a kernel's log that says why it died: the exception that ended it.
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit)\b")


class KernelKilled(Exception):
    """A kernel was killed from outside, by the machine and not by the submission's code (see
    FROM_OUTSIDE): the grading is the machine's to do again, never a death to hold against the
    submission. `str()` says how it ended."""


def exit_signal(status: int | None) -> int | None:
    """The signal that ended a kernel, from the exit status its grader sees: negative for a
    process the grader started itself and `unshare`, which die of their child's signal, and
    128 plus the signal from the launcher, which reports its kernel's death (see
    launcher.supervise), directly or through the fork server's handler."""
    if status is None:
        return None
    if status < 0:
        return -status
    return status - 128 if status > 128 else None


def clean_traceback(lines: list[str], limit: int = 4000) -> str:
    text = ANSI.sub("", "\n".join(lines))
    return text if len(text) <= limit else text[:limit] + "\n[traceback truncated]"


def kernel_environment(workdir: str) -> dict:
    """A scrubbed environment: nothing of the grader's own variables reaches the kernel."""
    return scrubbed_environment(HOME=workdir, TMPDIR=workdir, IPYTHONDIR=os.path.join(workdir, ".ipython"))


@functools.lru_cache(maxsize=None)
def module_source(name: str) -> str:
    """A grader module's source, as the kernel is sent it; read once per grading run."""
    return Path(kernel_side.path_of(name)).read_text()


def harness_source() -> str:
    return module_source("harness.py")


@functools.lru_cache(maxsize=8)
def compiled(source: str, name: str) -> bytes:
    """A module's code as the kernel loads it, compiled once per grading process: the kernel
    runs the grader's own interpreter (OwnKernelSpec), so it takes the code object as it is
    (marshal) instead of compiling the module's source again at every start, about ten times
    as long."""
    return marshal.dumps(compile(source, name, "exec"))


@dataclass
class CallsEnd:
    """How a run of calls (Kernel.run_calls) ended: the first `finished` calls' payloads were
    delivered; `error` says why the run stopped before the others', or is None when the code
    ran to its end; `out_of_time` when what stopped it was the whole run's time, not one call's."""

    finished: int
    error: ErrorRecord | None = None
    out_of_time: bool = False


class Arrivals:
    """The payloads of a run of calls as the grader receives them: each is handed on with its
    position and stamped on the grader's clock, the first `count` only (the kernel may write
    more), and none once the grader has stopped waiting for them."""

    def __init__(self, count: int, deliver: Callable[[int, object], None], started: float):
        self.count, self.deliver = count, deliver
        self.received = 0
        self.last = started   # when the latest payload arrived, or the run started
        self.closed = False

    def __call__(self, payload) -> None:
        if self.closed or self.received >= self.count:
            return
        self.last = time.monotonic()
        self.received += 1
        self.deliver(self.received - 1, payload)


class Kernel:
    """One kernel in a fresh temporary folder, for one submission. `async with Kernel(...)`
    starts it, or raises having removed whatever the start got to: MachineFault, in one line,
    when the kernel or the harness did not start, since no code of the submission has run in
    it yet; leaving the block stops it and counts in `leftover_processes` what had to be killed."""

    def __init__(self, limits: Limits, kernel_manager_factory=default_kernel_manager, forbidden: tuple[str, ...] = (),
                 hidden_files: tuple[str, ...] = (), support=None, output_wait: int = IOPUB_TIMEOUT):
        self.limits = limits
        # How long a cell's outputs may go on arriving after its reply (IOPUB_TIMEOUT), in whole
        # seconds, as nbclient takes it.
        self.output_wait = output_wait
        self.kernel_manager_factory = kernel_manager_factory
        self.forbidden = forbidden
        self.hidden_files = hidden_files
        self.support = support    # a support.Support: the course's modules, or None
        self.course_folder: str | None = None
        self.alive = False
        self.leftover_processes = 0
        self.workdir: str | None = None
        self.sandbox: Sandbox | None = None
        self.km: Any = None    # a jupyter_client kernel manager, from kernel_manager_factory
        self.client: CappedClient | None = None
        self.replies: ReplyChannel | None = None
        self.kernel_log: IO[bytes] | None = None
        self._setup: Any = None     # nbclient's context for the running kernel, once entered
        self._reply = None

    async def __aenter__(self) -> "Kernel":
        self.workdir = tempfile.mkdtemp(prefix=f"grader-kernel-{run_id()}-")
        if self.support is not None:
            # Beside the kernel's folder, not in it: the kernel may write anywhere in its own.
            self.course_folder = tempfile.mkdtemp(prefix=f"grader-kernel-{run_id()}-course-")
        try:
            await self._start()
        except BaseException as exc:
            await self.__aexit__(None, None, None)   # whatever the start got to, it is stopped and removed
            if isinstance(exc, Exception) and not isinstance(exc, MachineFault):
                raise MachineFault(f"a kernel could not start ({sys.executable}): {type(exc).__name__}: "
                                   f"{exc}") from None
            raise
        return self

    def _sandbox(self) -> Sandbox:
        if self.sandbox is None:
            raise RuntimeError("the kernel's sandbox is made when it starts")
        return self.sandbox

    def _client(self) -> CappedClient:
        if self.client is None:
            raise RuntimeError("the kernel's client is made when it starts")
        return self.client

    def _replies(self) -> ReplyChannel:
        if self.replies is None:
            raise RuntimeError("the kernel's reply channel is made when it starts")
        return self.replies

    def _workdir(self) -> str:
        if self.workdir is None:
            raise RuntimeError("the kernel's folder is made when it starts")
        return self.workdir

    async def _start(self) -> None:
        self.sandbox = Sandbox(self.limits, self._workdir(), grader_paths(self.hidden_files), self.forbidden,
                               self.course_folder)
        self.sandbox.prepare()
        if self.support is not None:
            self.support.write(self.course_folder)
        if self.limits.sandbox is True and (missing := self.sandbox.report()["missing"]):
            raise MachineFault(f"--sandbox asks for the whole sandbox, and this machine cannot give the kernel "
                               f"its {', '.join(missing)}")
        self.replies = ReplyChannel(self._workdir())
        self._write_startup_file()
        self.sandbox.give_workdir()
        # The kernel's own stderr goes to a file outside its reach, for when it fails to start.
        self.kernel_log = tempfile.TemporaryFile()
        self.km = self.kernel_manager_factory(self.workdir, self.sandbox)
        self.client = CappedClient(notebook(), km=self.km, kernel_name="python3", allow_errors=True,
                                   interrupt_on_timeout=True, iopub_timeout=self.output_wait,
                                   shutdown_kernel="immediate",
                                   ipython_hist_file="",   # no argument for it: KERNEL_CONFIG
                                   # nbclient takes whole seconds only
                                   startup_timeout=math.ceil(self.limits.startup_timeout),
                                   on_cell_executed=self._remember_reply)
        setup = self.client.async_setup_kernel(
            cwd=self.workdir, env=self.sandbox.environment(kernel_environment(self._workdir())),
            preexec_fn=self.sandbox.preexec, stdout=subprocess.DEVNULL, stderr=self.kernel_log)
        try:
            await setup.__aenter__()
        except Exception as exc:  # noqa: BLE001 - whatever stopped the start, it is reported in one line
            # nbclient registers its exit hook before the start and removes it only when its
            # context exits, which a failed start never does: the hook would fail at exit.
            atexit.unregister(self.client._cleanup_kernel)
            raise MachineFault(f"a kernel could not start ({sys.executable}): {self._why_it_died(exc)}") from None
        self._setup = setup
        self.alive = True
        # IPython runs its startup files before the kernel answers its first request, which
        # nbclient's start has waited for: a harness that loaded has said so by now.
        if self._replies().take(1) != [{"ready": True}]:
            raise MachineFault(f"the grading harness could not start in a kernel ({sys.executable}): "
                               f"{self._why_it_died(RuntimeError('it did not load'))}")

    def _why_it_died(self, exc: Exception) -> str:
        """What the kernel's log says ended it (the exception, else its last line), or `exc`."""
        if self.kernel_log is None:
            return str(exc)
        self.kernel_log.seek(0)
        lines = [line.strip() for line in self.kernel_log.read()[-4000:].decode(errors="replace").splitlines()
                 if line.strip()]
        said = [line for line in lines if EXCEPTION_LINE.match(line)] or lines[-1:]
        return f"{exc}: {said[-1][:300]}" if said else str(exc)

    def _write_startup_file(self) -> None:
        """The harness loads as an IPython startup file: before the first cell, and outside
        IPython's per-cell wrapping of the output streams, which would undo the output cap.
        Beside it, the kernel's configuration (KERNEL_CONFIG)."""
        profile = os.path.join(self._workdir(), ".ipython", "profile_default")
        startup = os.path.join(profile, "startup")
        os.makedirs(startup)
        with open(os.path.join(profile, "ipython_kernel_config.json"), "w") as f:
            json.dump(KERNEL_CONFIG, f)
        wire_source = module_source("wire.py")
        with open(os.path.join(startup, "00-grader-harness.py"), "w") as f:
            f.write("import types as _t, sys as _s, marshal as _ma\n"
                    f"_m = _t.ModuleType({wire.KERNEL_MODULE!r})\n"
                    f"exec(_ma.loads({compiled(wire_source, '<grader-wire>')!r}), _m.__dict__)\n"
                    "_s.modules[_m.__name__] = _m\n"
                    f"_m = _t.ModuleType({HARNESS_MODULE!r})\n"
                    f"exec(_ma.loads({compiled(harness_source(), '<grader-harness>')!r}), _m.__dict__)\n"
                    f"_s.modules[_m.__name__] = _m\n"
                    f"_m.install({int(self.limits.cell_output_limit)}, {int(self.limits.output_limit)})\n"
                    f"_m.open_replies({self._replies().path!r})\n"
                    f"_m.explain_unavailable({self._unavailable()!r})\n"
                    f"{self._course_line()}"
                    "_m.ready()\n"
                    "del _t, _s, _ma, _m\n")

    def _course_line(self) -> str:
        """The startup line that makes the course's support modules importable, if it has any."""
        if self.support is None:
            return ""
        return f"_m.use_course({self.course_folder!r}, {self.support.package!r}, {self.support.top_level_names()!r})\n"

    def _unavailable(self) -> dict:
        """Why each library the kernel cannot read is not there, where no stub says it (Landlock);
        the messages of the stubs launcher.build_root puts there under namespaces."""
        if not self._sandbox().landlock:
            return {}
        return {"grader": "the grader is not available to submissions",
                **{m: f"{m} is not available: this assignment forbids it" for m in self.forbidden}}

    async def __aexit__(self, *exc) -> None:
        self.alive = False
        try:
            if self._setup is not None:
                await self._setup.__aexit__(None, None, None)
            # nbclient shuts down only kernels it started itself; this one came from the factory.
            if self.client is not None and self.client.kc is not None:
                self.client.kc.stop_channels()
            if self.km is not None:
                if self.sandbox is not None:
                    # What runs beside the kernel, ended while the launcher still holds it:
                    # without a PID namespace, the kernel's end would orphan it to init.
                    self.leftover_processes += self.sandbox.end_beside_kernel(self._launched_pid())
                await self.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001 - a dead, killed or never started kernel may fail to shut down cleanly
            pass
        finally:
            if self.sandbox is not None:
                self.leftover_processes += len(self.sandbox.cleanup())
            else:
                for folder in (self.workdir, self.course_folder):
                    if folder:
                        shutil.rmtree(folder, ignore_errors=True)
            if self.kernel_log is not None:
                self.kernel_log.close()
            if self.replies is not None:
                self.replies.close()

    @property
    def output_bytes(self) -> int:
        """What the notebook's cells printed or displayed: counted, never kept."""
        return self.client.output_bytes if self.client else 0

    def isolation(self) -> dict:
        return self._sandbox().report()

    async def run_cell(self, source: str, timeout: float) -> ErrorRecord | None:
        """Run a notebook cell's code (in the kernel's history, as Jupyter would); returns
        what went wrong, with `cell` -1: the caller knows which cell it was."""
        error, _ = await self._execute(source, timeout, probe=False)
        return error

    async def run_code(self, code: str, timeout: float):
        """Run grader code in the kernel; returns (last harness payload or None, ErrorRecord or None)."""
        error, payload = await self._execute(code, timeout, probe=True)
        return payload, error

    async def run_calls(self, code: str, count: int, call_timeout: float, total_timeout: float,
                        on_payload: Callable[[int, object], None], metadata: dict | None = None) -> CallsEnd:
        """Run grader code that makes `count` calls in turn and writes one harness payload to
        the reply channel as each finishes; `on_payload(position, payload)` gets each of the
        first `count` as it arrives; `metadata` goes with the code's execute request, as data
        the code can read (the calls' requests: IPython then parses only the code). The grader
        times the calls itself, by when their payloads arrive: when none comes within
        `call_timeout` seconds of the previous one (or of the start), or the run's
        `total_timeout` is spent, it interrupts the kernel, ignores whatever arrives after
        that, and stops the kernel if it is still busy `interrupt_grace` seconds later."""
        if not self.alive:
            return CallsEnd(0, self._gone())
        started = time.monotonic()
        arrivals = Arrivals(count, on_payload, started)
        cell = code_cell(code)
        replies = self._replies()
        replies.listen(arrivals, count)
        cast(BoundedKernelClient, self._client().kc).next_request_metadata = metadata
        try:
            # No nbclient timeout: the grader's clock alone decides when a call has run too long.
            sent = asyncio.ensure_future(self._send(cell, None, None, history=False, probe=True))
            passed = await self._wait_for_calls(sent, arrivals, replies, call_timeout, started + total_timeout)
            if passed is None:
                # Whatever the harness wrote was written before its code ended.
                replies.read()
                return CallsEnd(arrivals.received, await self._ended(sent, cell) or self._unreadable(replies))
            arrivals.closed = True
            return CallsEnd(arrivals.received, await self._stop_calls(sent), out_of_time=passed == "total")
        finally:
            replies.stop()
            cast(BoundedKernelClient, self._client().kc).next_request_metadata = None

    @staticmethod
    async def _wait_for_calls(sent: asyncio.Future, arrivals: Arrivals, replies: ReplyChannel, call_timeout: float,
                              end: float) -> str | None:
        """Wait for the run's code to end: None once it has, else the limit that passed first,
        "call" (no payload for `call_timeout` seconds) or "total" (the clock reached `end`)."""
        while True:
            call_limit = arrivals.last + call_timeout
            limit = min(call_limit, end)
            done, _ = await asyncio.wait({sent}, timeout=max(0.0, limit - time.monotonic()))
            if done:
                return None
            # A payload may have arrived meanwhile and moved the call's limit on.
            replies.read()
            if time.monotonic() >= min(arrivals.last + call_timeout, end):
                return "call" if arrivals.last + call_timeout <= end else "total"

    @staticmethod
    def _unreadable(replies: ReplyChannel) -> ErrorRecord | None:
        """The run's code ended, but what came on the reply channel was not the harness's
        replies: the notebook wrote there (its code runs in the writing process)."""
        if replies.broken is None:
            return None
        return ErrorRecord(-1, "error", "RepliesUnreadable",
                           f"the grader could not read the calls' replies ({replies.broken}): the notebook wrote "
                           f"to the grader's reply channel")

    async def _stop_calls(self, sent: asyncio.Future) -> ErrorRecord:
        """Interrupt a run of calls that ran past its time. The kernel has settled when the
        run's code ends within the grace; one still running then (a call that ignores or
        swallows the interrupt and goes on, or a long BLAS call) gets the kernel stopped."""
        grace = self.limits.interrupt_grace
        try:
            await self.km.interrupt_kernel()
        except Exception:  # noqa: BLE001 - a kernel that died meanwhile is found below
            pass
        if not await self._within_grace(sent, grace):
            sent.cancel()
            await asyncio.gather(sent, return_exceptions=True)
            await self._kill()
            return ErrorRecord(-1, "unresponsive", "Unresponsive",
                               f"a call was still running {grace:g} s after its interrupt; the kernel was stopped",
                               kernel_lost=True)
        return await self._lost(sent) or ErrorRecord(-1, "timeout", "Timeout",
                                                     "a call ran past its time and was interrupted")

    async def _ended(self, sent: asyncio.Future, cell) -> ErrorRecord | None:
        """What went wrong with a run of calls whose code ended by itself, if anything."""
        return await self._lost(sent) or self._cell_error(cell)

    async def _lost(self, sent: asyncio.Future) -> ErrorRecord | None:
        """Whether the kernel was lost while `sent` ran: it died, or cut its output channel."""
        try:
            sent.result()
        except DeadKernelError:
            return await self._died(self.limits.interrupt_grace)
        return await self._flooded()

    def _launched_pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        return pid if isinstance(pid, int) else None

    async def stop_background(self) -> int:
        """Stop what the notebook left running beside the kernel, so that probing is not
        starved by it; returns how many processes were stopped."""
        stopped = self._sandbox().stop_background(self.km.provisioner.pid)
        if stopped:
            await self.run_code(f"{HARNESS}.reap()", timeout=10)
        return stopped

    def _memory_message(self, what: str) -> str:
        return f"memory limit exceeded ({self.limits.memory_limit} MiB): {what}"

    def _remember_reply(self, cell, cell_index, execute_reply):
        self._reply = execute_reply

    async def _send(self, cell, timeout: float | None, wait: float | None, history: bool, probe: bool) -> dict:
        """Hand `cell` to nbclient as the only cell of a notebook of its own and wait at most
        `wait` seconds (None: as long as it takes) for the kernel's reply. nbclient interrupts
        the kernel after `timeout` (None: never); a probe keeps the harness's payloads, a
        notebook cell's are only counted as output."""
        self._client().nb = notebook([cell])
        self._client().timeout = None if timeout is None else max(1, int(round(timeout)))
        self._client().iopub_timeout = self.output_wait
        if timeout is not None:
            self._client().error_on_timeout = {"ename": "Timeout", "evalue": f"interrupted after {timeout:.0f} s"}
        self._client().probing = probe
        self._reply = None
        await asyncio.wait_for(self._client().async_execute_cell(cell, 0, store_history=history), wait)
        return self._reply or {}

    @staticmethod
    def _timed_out(reply: dict) -> bool:
        """nbclient gave up waiting and interrupted the kernel. Its own timeout reply has no
        header; a real reply from the kernel (which the notebook could forge, with ename
        "Timeout") always has one."""
        content = reply.get("content", {})
        return "header" not in reply and content.get("status") == "error" and content.get("ename") == "Timeout"

    async def _settles(self, grace: float) -> bool:
        """Whether the kernel answers a no-op within the grace after an interrupt (see
        _within_grace). nbclient reports a timeout as soon as it sends the interrupt; a cell
        that ignores SIGINT (or a long BLAS call) keeps the kernel busy, and every later cell
        would time out behind it."""
        # No nbclient timeout: the grace decides (see _within_grace).
        answered = asyncio.ensure_future(self._send(code_cell("pass"), None, None, history=False,
                                                    probe=False))
        if not await self._within_grace(answered, grace):
            answered.cancel()
            await asyncio.gather(answered, return_exceptions=True)
            return False
        try:
            reply = answered.result()
        except DeadKernelError:
            return False
        return reply.get("content", {}).get("status") == "ok"

    async def _within_grace(self, task: asyncio.Future, grace: float) -> bool:
        """Whether `task`, code the kernel was interrupted in (or the no-op sent after it), ends
        within the grace. The grace is the kernel's own time: the CPU seconds its processes use
        after the interrupt, which a busy machine does not spend however slowly it lets the
        kernel handle the interrupt, while a kernel that ignores it and computes on spends it as
        fast as it runs. One that waits without computing gets IDLE_GRACE_FACTOR times the
        grace on the grader's clock."""
        used_before = self._sandbox().cpu_used()
        give_up = time.monotonic() + IDLE_GRACE_FACTOR * grace
        while True:
            done, _ = await asyncio.wait({task}, timeout=GRACE_POLL_SECONDS)
            if done:
                return True
            if time.monotonic() >= give_up or self._sandbox().cpu_used() - used_before >= grace:
                return False

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
            return self._gone(), None
        cell = code_cell(source)
        error = await self._run(cell, timeout, probe)
        payloads = [o["data"][MIME] for o in cell.outputs
                    if o.get("output_type") == "display_data" and MIME in o.get("data", {})]
        return error, (payloads[-1] if payloads else None)

    async def _run(self, cell, timeout: float, probe: bool) -> ErrorRecord | None:
        grace = self.limits.interrupt_grace
        try:
            # Past nbclient's own time for the cell (whole seconds) and its wait for the cell's
            # last outputs: when this wait runs out, the cell ignored its interrupt.
            reply = await self._send(cell, timeout, math.ceil(timeout) + self.output_wait + grace, history=not probe,
                                     probe=probe)
        except asyncio.TimeoutError:
            return await self._unresponsive(grace)
        except DeadKernelError:
            return await self._died(grace)
        flooded = await self._flooded()
        if flooded:
            return flooded
        if self._timed_out(reply):
            if not await self._settles(grace):
                await self._kill()
                return ErrorRecord(-1, "unresponsive", "Unresponsive",
                                   f"the cell ran longer than {timeout:.0f} s and was still running {grace:g} s "
                                   "after its interrupt; the kernel was stopped", kernel_lost=True)
            return ErrorRecord(-1, "timeout", "Timeout",
                               f"the cell ran longer than {timeout:.0f} s and was interrupted")
        return self._cell_error(cell)

    @staticmethod
    def _gone() -> ErrorRecord:
        return ErrorRecord(-1, "kernel_died", "KernelDied", "the kernel is no longer running")

    async def _unresponsive(self, grace: float) -> ErrorRecord:
        await self._kill()
        return ErrorRecord(-1, "unresponsive", "Unresponsive",
                           f"still running {grace:g} s after an interrupt; the kernel was stopped", kernel_lost=True)

    async def _exit_status(self) -> int | None:
        """The kernel's exit status as the grader's own process sees it, None while it runs."""
        provisioner = getattr(self.km, "provisioner", None)
        try:
            return None if provisioner is None else await provisioner.poll()
        except Exception:  # noqa: BLE001 - a provisioner that cannot tell says nothing
            return None

    async def _died(self, grace: float) -> ErrorRecord:
        """nbclient says the kernel died under the code. Only the kernel's own process decides:
        one that still runs was given up on by the grader's wait (nbclient reports a wait
        cancelled as a death); one killed from outside is the machine's doing (KernelKilled);
        otherwise its memory limit, or its own code, ended it."""
        status = await self._exit_status()
        if status is None:
            return await self._unresponsive(grace)
        self.alive = False
        if self._sandbox().memory_exceeded():
            return ErrorRecord(-1, "memory", "MemoryLimit", self._memory_message("the kernel was stopped"),
                               kernel_lost=True)
        if (ended_by := exit_signal(status)) in FROM_OUTSIDE:
            raise KernelKilled(f"a kernel was killed from outside ({signal.Signals(ended_by).name}), "
                               "not by the submission's code")
        return ErrorRecord(-1, "kernel_died", "KernelDied",
                           "the Python process running the notebook died (os._exit, a crash, a segfault "
                           "or the CPU time limit)", kernel_lost=True)

    async def _flooded(self) -> ErrorRecord | None:
        """A message over the size limit cut the kernel's output channel: the kernel is stopped."""
        # The kernel manager's client is a BoundedKernelClient (default_kernel_manager sets its client_factory).
        if not cast(BoundedKernelClient, self._client().kc).output_lost():
            return None
        await self._kill()
        return ErrorRecord(-1, "output_flood", "OutputLimit",
                           f"the notebook sent a message larger than {MAX_MESSAGE_BYTES // 2**20} MiB; "
                           "the grader does not read such messages and stopped the kernel", kernel_lost=True)

    def _cell_error(self, cell) -> ErrorRecord | None:
        """The error the code raised, if it raised one."""
        for out in cell.outputs:
            if out.get("output_type") == "error" and out.get("ename") == "MemoryError":
                return ErrorRecord(-1, "memory", "MemoryError", self._memory_message("the cell raised MemoryError"),
                                   clean_traceback(out.get("traceback", [])))
            if out.get("output_type") == "error":
                return ErrorRecord(-1, "error", out.get("ename", ""), str(out.get("evalue", ""))[:1000],
                                   clean_traceback(out.get("traceback", [])))
        return None
