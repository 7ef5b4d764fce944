"""Fakes of the kernel for tests of the grader's own control flow, one per interface the grader
talks to, in one place (tests/test_kernel_fakes.py holds each to the interface it stands in
for, so a fake cannot drift from the real thing):

- ScriptedKernel: a notebook's kernel as the runner uses it (grader.kernel.runner.NotebookKernel),
  each source doing what a script says, on a clock that moves only when a cell "runs";
- HarnessKernel: the kernel as grading uses it (Kernel.run_code, Kernel.run_calls), with the
  real harness run in this process on a namespace of the test's choosing.

Tests with a real kernel stand beside every test that uses these.
"""
import ast
from dataclasses import dataclass
from types import SimpleNamespace

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
