"""Calling one function in the kernel: all of its calls in one request, each reply validated
and turned into an Outcome as it arrives, timed on the grader's clock. `grader spec infer`
builds on it (the `convention_of`, `request` and `replied` hooks)."""
from __future__ import annotations

import time
from types import SimpleNamespace

from grader.calling import classes
from grader.calling.returns import canonical_parts
from grader.course.spec import FunctionSpec
from grader.judging.checks import Outcome, Probe
from grader.kernel import replies as payloads
from grader.kernel.session import HARNESS, CallsEnd, Kernel
from grader.kernel_side import wire
from grader.result import ErrorRecord

TIME_USED_UP = "not made: the time for calling this submission's functions was used up"
NO_REPLY = "the grader's harness ended without replying to every call: the notebook changed it"

class FunctionProber:
    """Makes all of one function's calls in one request to the kernel, and turns the reply to
    each call into an Outcome as it arrives."""

    def __init__(self, session: Kernel, fn: FunctionSpec, call_timeout: float, deadline: float):
        self.session, self.fn, self.call_timeout = session, fn, call_timeout
        self.deadline = deadline   # time.monotonic() past which no call is made, for the whole submission
        self.calls: list[Probe] = []
        self.sent: list[list] = []      # each call's arguments, as the grader sent them
        self.outcomes: dict[tuple, Outcome] = {}
        self.by_keyword = False

    def outcome(self, probe: Probe) -> Outcome:
        return self.outcomes[probe.key]

    def convention_of(self, probe: Probe):
        """The convention a probe's call is made in: the function's (`grader spec infer` calls
        one function in many candidate conventions, and says so here)."""
        return self.fn.convention

    def request(self, probe: Probe, args: list) -> dict:
        """What the harness is sent for one call."""
        return {"names": self.fn.names, "params": list(self.fn.params),
                **classes.request(self.convention_of(probe), args, probe.variant.layout),
                "return_inputs": probe.return_inputs}

    async def run(self, probes: list[Probe]) -> None:
        """Call the function once per distinct probe (checks share some), in the order given,
        and wait for every call's outcome."""
        distinct: dict[tuple, Probe] = {}
        for probe in probes:
            distinct.setdefault(probe.key, probe)
        self.calls = list(distinct.values())
        self.sent = [classes.sent_arguments(p, self.convention_of(p)) for p in self.calls]
        if not self.calls:
            return
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return self._fill(0, ("timeout", TIME_USED_UP))
        if not self.session.alive:
            return self._fill(0, ("dead", "not made: the kernel had stopped before this function was called"))
        requests = [self.request(p, args) for p, args in zip(self.calls, self.sent)]
        # The requests go as data beside a one-line call: IPython parses only that line.
        end = await self.session.run_calls(f"{HARNESS}.call_sent()", len(requests), self.call_timeout,
                                           remaining, self._received, metadata={wire.CALLS_KEY: requests})
        if end.finished < len(self.calls) and end.error is None and self.session.alive:
            # The calls' code ran to its end without an error, and the reply channel loses
            # nothing written to it (a pipe, read to its end): the harness did not write a reply
            # for every call, so the notebook changed it.
            end = CallsEnd(end.finished, ErrorRecord(-1, "error", "NoReply", NO_REPLY))
        if end.finished < len(self.calls):
            current, later = self._stopped(end, self.calls[end.finished].label)
            self._without_reply(end.finished, current)
            self._fill(end.finished + 1, later)

    def _without_reply(self, index: int, outcome: tuple[str, str]) -> None:
        """Call `index` gets the outcome (status, message) of a call without a usable reply."""
        self.outcomes[self.calls[index].key] = Outcome(outcome[0], error=outcome[1], sent=self.sent[index])

    def _fill(self, start: int, outcome: tuple[str, str]) -> None:
        for index in range(start, len(self.calls)):
            self._without_reply(index, outcome)

    def _stopped(self, end: CallsEnd, label: str) -> tuple[tuple[str, str], tuple[str, str]]:
        """The outcomes (status, message) of the call under way when a run of calls stopped,
        whose label is `label`, and of the calls after it, which were not made."""
        kind = end.error.kind if end.error else None
        if kind in ("timeout", "unresponsive") and end.out_of_time:
            return (("timeout", "the call was stopped when the time for calling this submission's functions ran out"),
                    ("timeout", TIME_USED_UP))
        if kind in ("timeout", "unresponsive"):
            return (("timeout", f"the call did not finish within {self.call_timeout:.0f} s"),
                    ("timeout", f"not made: an earlier call of this function ({label}) did not finish within "
                                f"{self.call_timeout:g} s"))
        if kind == "kernel_died":
            return (("dead", "the kernel died during the call (os._exit, a crash or a segfault)"),
                    ("dead", f"not made: the kernel died during an earlier call of this function ({label})"))
        # The code ended, or raised, before replying for every call (the harness was replaced),
        # or the kernel was lost some other way.
        detail = f"{end.error.ename}: {end.error.evalue}" if end.error else "no reply"
        failed = ("error", f"the call could not be made ({detail})")
        if self.session.alive:
            return failed, failed   # each later call would have failed the same way
        return failed, ("dead", f"not made: the kernel was stopped during an earlier call of this function ({label})")

    def _received(self, index: int, payload) -> None:
        """The reply to call `index`, which the kernel may have forged or reordered."""
        try:
            reply = payloads.indexed_call_reply(payload, index)
        except payloads.BadReply as exc:
            self._without_reply(index, ("error", f"the kernel's reply to the grader was malformed ({exc})"))
        else:
            self.outcomes[self.calls[index].key] = self._outcome(reply, self.sent[index])
            self.replied(self.calls[index], reply)

    def replied(self, probe: Probe, reply: dict) -> None:
        """A hook, called with each call's reply once it is validated and its outcome kept
        (`grader spec infer` keeps the values as sent, to read what a function returns)."""

    def _outcome(self, reply: dict, args: list) -> Outcome:
        if not reply.get("found"):
            kind = classes.kind(self.fn.convention)
            return Outcome("missing", error=f"no {kind} named `{self.fn.symbol}` is defined", sent=args)
        self.by_keyword = self.by_keyword or bool(reply.get("by_keyword"))
        if "error" in reply:
            e = reply["error"]
            where = f" ({e['where'][-1]})" if e.get("where") else ""
            said = classes.raised(self.fn.symbol, self.fn.convention, e.get("step"), args)
            return Outcome("error", error=f"{said} {e['type']}: {e['message']}{where}", sent=args)
        inputs_after = None
        if "inputs_after" in reply:
            inputs_after = [_argument_after(item) for item in reply["inputs_after"]]
        parts = canonical_parts(self.fn.convention, reply.get("value", {}), reply.get("kept"))
        return Outcome("ok", parts=parts, sent=args,
                       inputs_after=inputs_after)


def _argument_after(item: dict):
    """An argument as the kernel says it was after the call: an array, a list, a dict or an
    object (a SimpleNamespace, which comes back as a mapping typed so: wire.encode_given) of
    them (per-head or packed weights), or None where it cannot be read as one."""
    try:
        if item.get("kind") == "array":
            return wire.decode_array(item)
    except wire.BadValue:
        return None
    if item.get("kind") == "sequence":
        return [_argument_after(i) for i in item["items"]]
    if item.get("kind") == "mapping":
        items = dict(zip(item["keys"], (_argument_after(i) for i in item["items"])))
        return SimpleNamespace(**items) if item.get("type") == "SimpleNamespace" else items
    return None
