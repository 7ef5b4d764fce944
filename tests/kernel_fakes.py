"""Fakes of the kernel for tests of the grader's own control flow, one per interface the grader
talks to, in one place (tests/kernel/test_kernel_fakes.py holds each to the interface it stands in
for, so a fake cannot drift from the real thing):

- ScriptedKernel: a notebook's kernel as the runner uses it (grader.kernel.runner.NotebookKernel),
  each source doing what a script says, on a clock that moves only when a cell "runs";
- HarnessKernel: the kernel as grading uses it (Kernel.run_code, Kernel.run_calls), with the
  real harness run in this process on a namespace of the test's choosing;
- NotebookClientFake, FakeManager, FakeSandbox: what grader.kernel.session.Kernel drives beneath
  it (nbclient's NotebookClient with its kernel client, jupyter_client's kernel manager and
  its provisioner, the sandbox), behaving as nbclient does, as in nbclient's own tests.

Tests with a real kernel stand beside every test that uses these.
"""
import ast
import asyncio
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import nbformat
from nbclient.exceptions import DeadKernelError

from grader.kernel.session import CallsEnd
from grader.kernel_side import harness
from grader.result import ErrorRecord


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Step:
    """What running one source does in the scripted kernel."""
    seconds: float = 1.0
    error: tuple = ()         # ErrorRecord arguments after `cell`; a fresh error each run
    dies: bool = False        # the kernel is lost during it
    lost: bool = False


class ScriptedKernel:
    """Runs nothing: each source does what `script` says (by default, takes a second and
    succeeds), and every call is recorded as (source, timeout)."""

    def __init__(self, clock: Clock, script: dict, leftover: int = 0, background: int = 0, alive: bool = True):
        self.clock, self.script = clock, script
        self.leftover, self.background = leftover, background
        self.alive = alive
        self.output_bytes = 0
        self.leftover_processes = 0
        self.ran: list[tuple[str, float]] = []
        self.entered = self.exited = False
        self.background_asked = False

    async def __aenter__(self):
        self.entered = True
        return self

    async def __aexit__(self, *exc):
        self.exited = True
        self.alive = False
        self.leftover_processes = self.leftover

    async def run_cell(self, source: str, timeout: float):
        assert self.alive, "a cell was sent to a kernel that is not running"
        self.ran.append((source, timeout))
        step = self.script.get(source, Step())
        self.clock.now += step.seconds
        self.output_bytes += len(source)
        if step.dies:
            self.alive = False
        return ErrorRecord(-1, *step.error, kernel_lost=step.lost) if step.error else None

    async def stop_background(self) -> int:
        self.background_asked = True
        return self.background

    @property
    def sources(self) -> list[str]:
        return [source for source, _ in self.ran]


def arguments(code: str, function: str) -> list:
    """The arguments of the harness function the grader's code calls."""
    call = ast.parse(code).body[0].value
    assert isinstance(call, ast.Call) and call.func.attr == function
    return [ast.literal_eval(a) for a in call.args]


class HarnessKernel:
    """The methods of grader.kernel.session.Kernel that grading uses, with the real harness run in
    this process. `cut` = (finished, error, out_of_time) ends a run of calls early, as
    Kernel.run_calls reports it; `tamper` rewrites a run's payloads before they are handed on;
    every request is recorded in `requests`."""

    def __init__(self, monkeypatch, namespace: dict, cut=None, tamper=None):
        self.alive = True
        self.output_bytes = 0
        self.requests: list[tuple] = []
        self.cut, self.tamper = cut, tamper
        self.published: list = []
        monkeypatch.setattr(harness, "get_ipython", lambda: SimpleNamespace(user_ns=namespace))
        monkeypatch.setattr(harness, "_publish", lambda data: self.published.append(data[harness.MIME]))
        monkeypatch.setattr(harness, "_reply", lambda payload: self.published.append(payload))

    async def run_code(self, code: str, timeout: float):
        self.requests.append(("describe", *arguments(code, "describe")))
        self.published = []
        harness.describe(*arguments(code, "describe"))
        return self.published[-1], None

    async def run_calls(self, code: str, count: int, call_timeout: float, total_timeout: float, on_payload,
                        metadata: dict):
        assert arguments(code, "call_sent") == []
        requests = metadata[harness.wire.CALLS_KEY]
        self.requests.append(("call_many", count, call_timeout, total_timeout))
        assert len(requests) == count
        self.published = []
        harness.call_many(requests)
        replies = self.tamper(self.published) if self.tamper else self.published
        finished, error, out_of_time = self.cut or (count, None, False)
        for position, payload in enumerate(replies[:min(finished, count)]):   # Kernel.run_calls drops the rest
            on_payload(position, payload)
        if error is not None and error.kernel_lost:
            self.alive = False
        return CallsEnd(min(finished, count, len(replies)), error, out_of_time)


def error_output(ename: str, evalue: str = "bad") -> dict:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                  traceback=["\x1b[31mCell In[2], line 1\x1b[0m", f"{ename}: {evalue}"])


HEADER = {"msg_id": "1", "msg_type": "execute_reply"}


@dataclass
class Calls:
    """A run of calls as the fake kernel makes it, step by step: a number is seconds of work,
    "dies" ends the kernel (os._exit), anything else is a payload published. The grader's interrupt ends
    the run as a KeyboardInterrupt would, unless the run `swallows` it and goes on."""

    steps: list
    swallows: bool = False
    published: list = field(default_factory=list)


class NotebookClientFake:
    """nbclient as the adapter uses it: each source does what `script` says, "pass" (the
    adapter's check that an interrupted kernel settled) answers by default, and every call's
    settings are recorded. As nbclient does, it says the kernel died (DeadKernelError) when
    the kernel's process ended ("dies": os._exit(1); "killed": SIGKILL from outside) and when
    its wait for a reply is cancelled, although the kernel then still runs."""

    def __init__(self, script: dict):
        self.script = script
        self.calls: list[dict] = []
        self.output_bytes = 0
        self.lost = False
        self.kc = self
        self.on_cell_executed = None
        self.reply_fd: int | None = None   # the write end of the kernel's reply channel
        self.interrupted: asyncio.Event | None = None
        self.exit_status: int | None = None   # the kernel's process, as its provisioner sees it

    def output_lost(self) -> bool:
        return self.lost

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        self.calls.append({"source": cell.source, "timeout": self.timeout, "history": store_history,
                           "probing": self.probing, "index": cell_index,
                           "in_notebook": self.nb.cells[cell_index] is cell})
        action = self.script.get(cell.source, "ok")
        reply = {"header": HEADER, "content": {"status": "ok"}}
        if isinstance(action, Calls):
            reply = await self._make_calls(action, cell)
            self.on_cell_executed(cell=cell, cell_index=cell_index, execute_reply=reply)
            return cell
        if action in ("dies", "killed"):
            self.exit_status = 1 if action == "dies" else 128 + 9
            raise DeadKernelError("Kernel died")
        if action == "hangs":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                raise DeadKernelError("Kernel died") from None
        if action == "times out":   # nbclient's own reply once it has interrupted the kernel
            reply = {"content": {**self.error_on_timeout, "status": "error"}}
        elif isinstance(action, dict):   # outputs the kernel sent
            cell.outputs = [action]
            if action["output_type"] == "error":
                reply = {"header": HEADER, "content": {"status": "error", "ename": action["ename"]}}
        self.on_cell_executed(cell=cell, cell_index=cell_index, execute_reply=reply)
        return cell

    async def _make_calls(self, run: Calls, cell) -> dict:
        self.interrupted = asyncio.Event()
        for step in run.steps:
            if step == "dies":
                self.exit_status = 1
                raise DeadKernelError("Kernel died")
            if not isinstance(step, (int, float)):
                run.published.append(step)
                os.write(self.reply_fd, harness.wire.frame(step))
            elif run.swallows:
                await asyncio.sleep(step)
            else:
                try:
                    await asyncio.wait_for(self.interrupted.wait(), step)
                except asyncio.TimeoutError:
                    continue
                cell.outputs = [error_output("KeyboardInterrupt", "")]
                return {"header": HEADER, "content": {"status": "error", "ename": "KeyboardInterrupt"}}
        return {"header": HEADER, "content": {"status": "ok"}}


class FakeProvisioner:
    def __init__(self, manager: "FakeManager"):
        self.manager = manager

    async def poll(self) -> int | None:
        return self.manager.client.exit_status


class FakeManager:
    def __init__(self):
        self.shutdowns = 0
        self.interrupts = 0
        self.client: NotebookClientFake | None = None
        self.provisioner = FakeProvisioner(self)

    async def shutdown_kernel(self, now=False, restart=False):
        self.shutdowns += 1

    async def interrupt_kernel(self):
        self.interrupts += 1
        if self.client.interrupted is not None:
            self.client.interrupted.set()


class FakeSandbox:
    def __init__(self, memory_exceeded=False):
        self.exceeded = memory_exceeded

    def memory_exceeded(self) -> bool:
        return self.exceeded

    def cpu_used(self) -> float:
        return 0.0   # the fake kernel's work is waiting: its grace runs on the grader's clock
