"""Grade one submission: scan, execute, probe, judge, score."""
from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

from grader.judging import answers
from grader.calling import classes
from grader.kernel import replies as payloads
from grader.judging import smallest
from grader.intake import source_scan as static_scan
from grader.kernel_side import wire
from grader.judging.checks import (CHECKS, Context, Outcome, Probe, Verdict, check_context, check_probes,
                                   check_title, evidence_probes, hidden_twins, mark_hidden_twins, results_to_diagnose)
from grader.judging.diagnosis import diagnose
from grader.errors import MachineFault
from grader.kernel.session import HARNESS, HARNESS_MODULE, CallsEnd, Kernel, KernelKilled
from grader.kernel.client import default_kernel_manager
from grader.intake.notebook import code_cells, load_submission
from grader.result import (CheckResult, CheckStatus, DefiningCellFailure, ErrorKind, ErrorRecord, Finding,
                           FunctionInfo, GradeResult, SmallestCase, Timing, cell_number,
                           failing_line_number)
from grader.kernel.runner import NOT_RUN_NOTE, executed_notebook
from grader.sandbox.isolation import ENFORCES_POLICY
from grader.calling.returns import canonical_parts
from grader.course.spec import Assignment, FunctionSpec, metadata_assignment



# Importing these from a submission is flagged: the grader and its reference are off limits.
GRADER_MODULES = ("grader", "attention_grader", "reference", HARNESS_MODULE, wire.KERNEL_MODULE)


TIME_USED_UP = "not made: the time for calling this submission's functions was used up"
# A reply the kernel sent that never reached the grader: ZMQ drops the kernel's messages when
# the grader's queue is full, which a notebook flooding its output channel (a thread that
# prints on and on) brings about. The grader cannot tell what the reply said, so no verdict is
# drawn from its absence: the description is asked for again, and a submission whose replies
# stay lost is not graded (a grader-side error the staff see, never a 0 stored as a score).
DESCRIBE_ATTEMPTS = 3
# A grading whose kernel the machine killed (kernel.KernelKilled) is done again from the start,
# this many times in all; a submission it keeps happening to is not graded, never given a death.
GRADING_ATTEMPTS = 3
REPLY_LOST = ("the kernel's replies to the grader were lost on the way ({what}): its output channel was "
              "flooded with messages, so the submission was not graded, rather than graded on replies the grader "
              "never received")


class RepliesLost(Exception):
    """What the grader asked the kernel for did not reach it: `str()` says what was lost."""


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
            # The calls' code ran to its end without an error, so the harness replied to every
            # call: the replies that did not come were lost on the way.
            raise RepliesLost(f"{len(self.calls) - end.finished} of the {len(self.calls)} replies to the calls of "
                              f"{self.fn.name}")
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


def _status(verdict: CheckStatus, points: float) -> CheckStatus:
    """A check that did not pass and carries no points is informational: it never shows as a
    failure. (A policy check that finds a rule broken still says "failed"; see the caller.)"""
    return "info" if verdict == "failed" and not points else verdict


def _unrun_checks(fn: FunctionSpec, status_for, message: str) -> list[CheckResult]:
    """Every check of `fn` at 0 points without being run, `status_for(points)` its status."""
    return [CheckResult(f"{fn.name}.{kind}", fn.name, kind, check_title(fn, kind), status_for(points), 0.0,
                        points, message, hidden=kind in fn.hidden)
            for kind, points in fn.points.items()]


def _not_implemented(fn: FunctionSpec, why: str) -> list[CheckResult]:
    return _unrun_checks(fn, lambda points: _status("failed", points), f"Not implemented: {why}.")


def _not_graded_for_failed_cell(fn: FunctionSpec, failure: DefiningCellFailure) -> list[CheckResult]:
    # Short: the function's view says once which cell failed and why (view.cell_failure).
    return _unrun_checks(fn, lambda points: _status("failed", points),
                         f"Not graded: its defining cell, cell {cell_number(failure['cell'])}, failed.")


def failed_definition(fn: FunctionSpec, scan, errors: list[ErrorRecord]) -> DefiningCellFailure | None:
    """Why `fn`, not defined after the notebook ran, was not: the error of the last cell whose
    source defines it (the cell did not parse, or raised before its `def` ran, as after a
    failed import: Python runs nothing after the failing statement), as {"cell", "line",
    "ename", "evalue"}; None when no such cell failed. A cell that does not parse is described
    as the grader's own parse of the file finds it."""
    cells = {cell for name in fn.names for cell in scan.definers.get(name, [])}
    failed = [e for e in errors if e.cell in cells]
    if not failed:
        return None
    error = next(e for e in failed if e.cell == failed[-1].cell)
    if error.cell in scan.unparsable:
        line, ename, evalue = scan.unparsable[error.cell]
    else:
        line, ename, evalue = failing_line_number(error), error.ename, error.evalue
    # One line: the cell's own entry under the notebook's problems has the rest.
    first = (NOT_RUN_NOTE.sub("", evalue).strip().splitlines() or [""])[0][:200]
    return {"cell": error.cell, "cell_number": cell_number(error.cell), "line": line, "ename": ename[:100],
            "evalue": first}


def renamed_definitions(fn: FunctionSpec, scan, assignment: Assignment) -> list[str]:
    """What a function the notebook does not define may have been renamed to: top-level
    definitions named like it that can be called as it is (grader/intake/source_scan.py). A
    hint for the student and for the staff's `aliases`, never graded in its place."""
    graded_names = {name for f in assignment.functions for name in f.names}
    method = fn.convention.class_call.method if fn.convention.class_call else None
    return static_scan.renamed_candidates(scan, fn.symbol, graded_names, len(fn.params), method)


def not_graded(submission: str, assignment: Assignment | str, seed: int, kind: ErrorKind, ename: str,
               why: str) -> GradeResult:
    """The one result of a submission that could not be graded at all: `why` as its only
    error (`kind` "unreadable" when the submission is at fault, "grader_error" when the grader
    or the course's setup is), and, when the assignment is known, each of its checks as an
    error saying why, so the result has the same maximum score as every other."""
    first_line = (why.strip().splitlines() or [ename])[0][:500]   # checks never carry a traceback
    name = assignment.name if isinstance(assignment, Assignment) else assignment
    result = GradeResult(submission=submission, assignment=name, seed=seed, status="error")
    result.errors.append(ErrorRecord(-1, kind, ename, why[:2000]))
    functions = assignment.functions if isinstance(assignment, Assignment) else ()
    message = f"Not graded: {first_line}"
    result.checks = [c for fn in functions for c in _unrun_checks(fn, lambda points: "error", message)]
    result.total()
    return result


def _forbidden_uses(fn: FunctionSpec, info: FunctionInfo, scan, forbidden) -> list[str]:
    modules = list(info.get("modules", [])) + scan.function_imports.get(info.get("name", fn.symbol), [])
    return sorted({hit for m in modules if (hit := static_scan.matches(m, forbidden))})


@dataclass
class _Grading:
    """One function's grading, made in two steps (see grade_notebook): its checks so far, in
    the spec's order, and what its hidden checks still need."""
    fn: FunctionSpec
    info: FunctionInfo   # what was known of the function before its calls: its description
    results: dict = field(default_factory=dict)   # kind -> CheckResult
    prober: FunctionProber | _Computed | None = None   # or what answers its calls without a kernel (judge_computed)
    contexts: dict = field(default_factory=dict)
    probes_of: dict = field(default_factory=dict)
    evidence_for: list = field(default_factory=list)   # the non-answer rule's evidence
    attempt_for: list = field(default_factory=list)    # and its probes around one case
    non_answer_reason: str = ""   # why the function is a non-answer, or ""
    withheld: bool = False        # whether its checks' points were withheld as a non-answer's
    verdicts: dict = field(default_factory=dict)   # kind -> its check's own status, before any withholding
    # What its calls showed, each None when they were not made that far.
    non_answer: bool | None = None
    smallest_failing: SmallestCase | None = None
    called_by_keyword: bool | None = None

    def checks(self) -> list[CheckResult]:
        return [self.results[kind] for kind in self.fn.points if kind in self.results]

    def function_info(self) -> FunctionInfo:
        """The function's entry in the result: its description, then what its calls showed."""
        info = FunctionInfo(**self.info)
        if self.non_answer is not None:
            info["non_answer"] = self.non_answer
        if self.smallest_failing is not None:
            info["smallest_failing"] = self.smallest_failing
        if self.called_by_keyword is not None:
            info["called_by_keyword"] = self.called_by_keyword
        return info


def _earned(points: float, status: CheckStatus, verdict: Verdict) -> float:
    """All of a passed check's points; of a failed one, the share its verdict gives (a comparing
    check pays the parts returned right when others were not returned); else none."""
    if status == "passed":
        return points
    return points * verdict.earned if status == "failed" else 0.0


def _judge(grading: _Grading, kinds, ctx: Context) -> None:
    fn, prober = grading.fn, grading.prober
    assert prober is not None, "a function is judged only once its calls are planned"
    for kind in kinds:
        points, check = fn.points[kind], CHECKS[kind]
        outcomes = [(p, prober.outcome(p)) for p in grading.probes_of[kind]]
        diagnosis, advice = None, ""
        try:
            verdict = check.judge(fn, grading.contexts[kind], outcomes)
            if not grading.non_answer_reason:   # a non-answer's checks say so, all of them (_withhold)
                verdict = _on_answers(verdict, fn, points, outcomes, ctx)
            if verdict.status == "failed":
                ordinary = results_to_diagnose([(p, prober.outcome(p)) for p in grading.evidence_for], verdict)
                diagnosis, note = diagnose(fn, kind, results_to_diagnose(outcomes, verdict), ctx.tolerance,
                                           grading.info, ctx.predictions, verdict.message, ordinary)
                if diagnosis:
                    advice = note.strip()
                else:
                    verdict.message += note
        except Exception as exc:  # noqa: BLE001 - one unjudgeable result must not sink the others
            verdict = Verdict("error", f"The grader could not judge what the function returned "
                                       f"({type(exc).__name__}: {exc}).")
        status = _status(verdict.status, points) if not check.policy else verdict.status
        grading.verdicts[kind] = status
        grading.results[kind] = CheckResult(f"{fn.name}.{kind}", fn.name, kind, check_title(fn, kind), status,
                                            _earned(points, status, verdict), points, verdict.message,
                                            diagnosis=diagnosis, hidden=kind in fn.hidden, figures=verdict.figures,
                                            advice=advice)


def _on_answers(verdict, fn: FunctionSpec, points: float, outcomes, ctx: Context):
    """A check with points passes only on what computes attention: a property holds for zeros,
    uniform weights or an argument too, so where the check's own calls got one of these (and
    attention gives none there), it proves nothing, whatever the function did on other calls."""
    if verdict.status != "passed" or not points:
        return verdict
    why = answers.trivial_answer(fn.convention, outcomes, ctx.tolerance, ctx.predictions)
    if why is None:
        return verdict
    return Verdict("failed", f"{why[0].upper()}{why[1:]}, which is not attention: the property checked here holds "
                             "for such a value too.")


def _withhold(grading: _Grading, checks: list[CheckResult]) -> None:
    """A non-answer's checks score nothing, all of them once any has points (else every check
    already failed, saying why)."""
    if not grading.non_answer_reason:
        return
    if grading.withheld:
        answers.withhold(checks, grading.non_answer_reason)
    elif any(c.points for c in checks):
        grading.withheld = True
        answers.withhold(grading.checks(), grading.non_answer_reason)


def _plan(grading: _Grading, ctx: Context) -> tuple[list[Probe], list[Probe]]:
    """Each check's context and probes; returns the probes of the non-answer rule to call before
    the visible checks' (its evidence, then the attempt probes of the first attempt case) and
    those to call after them (the other attempt cases). A function that answers only its first
    calls is then judged a non-answer, and one that runs out of time is still judged on what it
    computes (unexplained skips an attempt case none of whose calls was made)."""
    fn = grading.fn
    grading.contexts = {kind: check_context(ctx, kind in fn.hidden) for kind in fn.points}
    drawn = {kind: check_probes(kind, fn, grading.contexts[kind]) for kind in fn.points}
    # A visible case with a hidden one's label is marked, so that students read nothing of it.
    twins = hidden_twins(fn, ctx, [p for kind in fn.hidden if kind in drawn for p in drawn[kind]])
    grading.probes_of = {kind: probes if kind in fn.hidden else mark_hidden_twins(probes, twins)
                         for kind, probes in drawn.items()}
    grading.evidence_for = mark_hidden_twins(evidence_probes(fn, ctx), twins)
    grading.attempt_for = answers.attempt_probes(fn.convention, ctx.seed)
    first, *later = answers.attempt_groups(fn.convention, grading.attempt_for)
    return [*grading.evidence_for, *first], [p for group in later for p in group]


def _visible(fn: FunctionSpec) -> list[str]:
    return [kind for kind in fn.points if kind not in fn.hidden]


def _judge_visible(grading: _Grading, ctx: Context) -> None:
    """The non-answer rule on its probes (see _plan), then the visible checks, once their calls
    are made."""
    fn, prober = grading.fn, grading.prober
    assert prober is not None, "a function is judged only once its calls are planned"
    evidence = [(p, prober.outcome(p)) for p in grading.evidence_for]
    attempts = [(p, prober.outcome(p)) for p in grading.attempt_for]
    why = answers.unexplained(fn.convention, evidence, attempts, ctx.tolerance, ctx.predictions)
    grading.non_answer = why is not None
    grading.non_answer_reason = why or ""
    _judge(grading, _visible(fn), ctx)
    _withhold(grading, grading.checks())


def _hidden(grading: _Grading) -> list[str]:
    return [kind for kind in grading.fn.points if kind in grading.fn.hidden and kind not in grading.results]


def _judge_hidden(grading: _Grading, hidden: list[str], ctx: Context) -> None:
    _judge(grading, hidden, ctx)
    _withhold(grading, [grading.results[kind] for kind in hidden])


class _Computed:
    """Calls answered without a kernel: `outcome(probe)` gives each call's Outcome."""

    def __init__(self, outcome):
        self.outcome = outcome


def judge_computed(fn: FunctionSpec, ctx: Context, outcome) -> _Grading:
    """Every check of `fn` judged exactly as grade_notebook judges a function's calls (the
    non-answer rule, the visible checks, then the hidden ones), on the Outcome `outcome(probe)`
    gives for each call instead of the kernel's: `grader audit` grades a computation this way."""
    grading = _Grading(fn, {"found": True}, prober=_Computed(outcome))
    _plan(grading, ctx)
    _judge_visible(grading, ctx)
    _judge_hidden(grading, _hidden(grading), ctx)
    return grading


async def _grade_visible(session, fn: FunctionSpec, info: FunctionInfo, scan, ctx: Context, call_timeout: float,
                         deadline: float) -> _Grading:
    """The evidence for the non-answer rule, the visible checks and the smallest failing case."""
    grading = _Grading(fn, info)
    name = info.get("name", fn.symbol)
    if not info.get("found") and info.get("defining_cell_failed"):
        grading.results = {c.kind: c for c in _not_graded_for_failed_cell(fn, info["defining_cell_failed"])}
        return grading
    if not info.get("found"):
        also = f" (nor {', '.join(fn.aliases)})" if fn.aliases else ""
        grading.results = {c.kind: c for c in _not_implemented(
            fn, f"no {classes.kind(fn.convention)} named `{fn.symbol}`{also} is defined after running the notebook")}
        return grading
    if name in scan.stubs:
        grading.results = {c.kind: c for c in _not_implemented(fn, f"`{name}` still has the template's "
                                                                   "placeholder body")}
        return grading
    prober = grading.prober = FunctionProber(session, fn, call_timeout, deadline)
    rule_first, rule_later = _plan(grading, ctx)
    # The evidence for the non-answer rule is called for first, so that a slow function which
    # runs out of probing time is still judged on what it computes; the rest of it last.
    await prober.run([*rule_first, *(p for kind in _visible(fn) for p in grading.probes_of[kind]), *rule_later])
    _judge_visible(grading, ctx)
    found = await smallest.find(prober, fn, ctx, grading.checks(), name)
    grading.smallest_failing = found
    grading.called_by_keyword = prober.by_keyword
    return grading


async def _grade_hidden(grading: _Grading, ctx: Context) -> list[CheckResult]:
    """The hidden checks, once every call whose result a student may see has been made: the
    function sees a hidden case, and could otherwise carry it into a later visible check's
    message or figures, or into the smallest failing case."""
    hidden = _hidden(grading)
    if hidden and isinstance(grading.prober, FunctionProber):   # judge_computed's calls are all answered
        await grading.prober.run([p for kind in hidden for p in grading.probes_of[kind]])
        _judge_hidden(grading, hidden, ctx)
    return grading.checks()


def _apply_penalty(checks: list[CheckResult], fn: FunctionSpec, uses: list[str], penalty: str) -> None:
    if not uses or penalty != "zero_function":
        return
    for c in checks:
        if c.function == fn.name and c.points:
            c.points = 0.0
            c.message += f" (Points withheld: the function uses {', '.join(uses)}.)"


def assignment_kernel(nb, assignment: Assignment, settings, kernel_manager_factory=default_kernel_manager):
    """`async with` it for (session, log): the notebook run in a sandboxed kernel set up for
    the assignment (its forbidden libraries and its own file out of view, its course support
    modules importable), the one way both
    grading and `grader spec infer`'s probing see a notebook."""
    return executed_notebook(nb, settings.limits, kernel_manager_factory, assignment.forbidden,
                             hidden_files(assignment), support=assignment.support)


def hidden_files(assignment: Assignment) -> tuple[str, ...]:
    """The course's files the kernel must not read: the spec's (it names hidden checks) and the
    .npz files of its fixed_data."""
    return tuple(p for p in (assignment.source_file, *(f.real_path for f in assignment.sheet_files)) if p)


async def grade_notebook(nb, assignment: Assignment, settings, submission: str,
                         kernel_manager_factory=default_kernel_manager) -> GradeResult:
    result = GradeResult(submission=submission, assignment=assignment.name, seed=settings.seed,
                         metadata_assignment=metadata_assignment(nb))
    started = time.monotonic()
    graded_names = {n for f in assignment.functions for n in f.names}
    scan = static_scan.scan(code_cells(nb), graded_names, _methods(assignment))
    runtime_findings: list[Finding] = []
    async with assignment_kernel(nb, assignment, settings, kernel_manager_factory) as (session, log):
        result.errors = list(log.errors)
        probing_started = time.monotonic()
        functions = {f.name: f.names for f in assignment.functions}
        try:
            described, runtime_findings = await _describe_functions(session, result, assignment, scan, settings,
                                                                    functions)
            await _grade_functions(session, result, assignment, scan, settings, described, probing_started)
        except RepliesLost as lost:
            _not_graded_for_lost_replies(result, assignment, str(lost))
        probing = round(time.monotonic() - probing_started, 3)
    result.isolation = {**log.isolation, "leftover_processes_killed": log.leftover_processes,
                        "background_processes_stopped": log.background_stopped}
    level: Literal["full", "partial"] = "full" if ENFORCES_POLICY in log.isolation.get("active", []) else "partial"
    result.policy = {"forbidden": list(assignment.forbidden),
                     "findings": _static_findings(scan, assignment) + runtime_findings,
                     "level": level, "penalty": assignment.penalty}
    if any(e.kind == "deadline" for e in result.errors):
        result.status = "timeout"
    elif not log.kernel_alive or result.status == "error":
        result.status = "error"
    result.timing = _timing(log, probing, started)
    result.total()
    return result


def _static_findings(scan, assignment: Assignment) -> list[Finding]:
    """The policy's findings in the notebook's source: imports of a forbidden library or of the grader."""
    findings: list[Finding] = []
    for cell, line, module in scan.imports:
        hit = static_scan.matches(module, assignment.forbidden)
        finding: Finding = {"source": "static", "module": hit or "", "cell": cell, "cell_number": cell_number(cell),
                            "line": line}
        if hit and finding not in findings:   # `from m import a, b` names m three times
            findings.append(finding)
        if static_scan.matches(module, GRADER_MODULES):
            findings.append({"source": "static", "module": module, "cell": cell, "cell_number": cell_number(cell),
                             "line": line, "kind": "grader_import"})
    return findings


def _timing(log, probing: float, started: float) -> Timing:
    timing: Timing = {"execution": round(log.seconds, 3), "probing": probing, "output_characters": log.output_bytes}
    if log.grader_cells:
        timing["grader_cells"] = log.grader_cells
        timing["grader_cell_numbers"] = [cell_number(cell) for cell in log.grader_cells]
    timing["total"] = round(time.monotonic() - started, 3)
    return timing


def _methods(assignment: Assignment, by_name: bool = True) -> dict:
    """The method graded of each class-based function: by each name it may have (for the
    static scan), or by the function's own name (for the harness's description)."""
    found: dict = {}
    for fn in assignment.functions:
        call = fn.convention.class_call
        if call is None:
            continue
        for name in fn.names if by_name else [fn.name]:
            # A class graded as two units (its forward, and its backward after it) is a
            # template's stub by the first unit's method.
            found.setdefault(name, call.method)
    return found


async def _described(session, functions: dict, forbidden, timeout: float, methods: dict):
    """The harness's description of the graded functions, as (payload or None, ErrorRecord or
    None). Asked again while it is lost; RepliesLost when it stays lost."""
    for _ in range(DESCRIBE_ATTEMPTS):
        # The methods only where a class is graded: the call is otherwise as it always was.
        extra = f", {methods!r}" if methods else ""
        described, error = await session.run_code(f"{HARNESS}.describe({functions!r}, {list(forbidden)!r}{extra})",
                                                  timeout)
        # The code ran to its end without an error, so the harness did publish its reply.
        if described is not None or error is not None or not session.alive:
            return described, error
    raise RepliesLost(f"the description of the functions, asked for {DESCRIBE_ATTEMPTS} times")


def _not_graded_for_lost_replies(result: GradeResult, assignment: Assignment, what: str) -> None:
    """The result of a submission whose replies were lost: what running the notebook found is
    kept, and every check is an error saying why it was not graded (as in not_graded)."""
    lost = not_graded(result.submission, assignment, result.seed, "grader_error", "RepliesLost",
                      REPLY_LOST.format(what=what))
    result.checks, result.status = lost.checks, "error"
    result.errors.extend(lost.errors)


async def _describe_functions(session, result: GradeResult, assignment: Assignment, scan, settings,
                              functions: dict) -> tuple[dict[str, FunctionInfo], list[Finding]]:
    """What the grader knows of each graded function before calling it (the harness's
    description, checked, and the grader's own findings), and the watched modules the kernel
    reports imported; a malformed description is an error of the result. Raises RepliesLost."""
    reply, error = await _described(session, functions, assignment.forbidden, settings.call_timeout,
                                    _methods(assignment, by_name=False))
    try:
        described = payloads.describe_reply(reply, list(functions)) if reply else None
    except payloads.BadReply as exc:
        result.errors.append(ErrorRecord(-1, "bad_reply", "BadReply",
                                         f"the kernel's description of the functions was malformed ({exc}); "
                                         "was the grader's harness replaced?"))
        described = None
    described = described or {"functions": {}, "imported": []}
    if error and not described["functions"]:
        result.status = "error"
    infos: dict[str, FunctionInfo] = {}
    for fn in assignment.functions:
        info = described["functions"].get(fn.name, FunctionInfo(found=False)).copy()
        info["stub"] = info.get("name", fn.symbol) in scan.stubs
        info.pop("defining_cell_failed", None)   # the grader's finding alone, never the kernel's
        declared = {p.name for p in fn.convention.global_params}
        if declared and isinstance(info.get("globals"), dict):
            # The globals the spec says it reads its weights from are the convention, not a mistake.
            info["globals"] = {k: v for k, v in info["globals"].items() if k not in declared}
        if not info.get("found") and (failure := failed_definition(fn, scan, result.errors)):
            info["defining_cell_failed"] = failure
        elif not info.get("found") and (renamed := renamed_definitions(fn, scan, assignment)):
            info["similar_names"] = renamed
        infos[fn.name] = info
    runtime: list[Finding] = [{"source": "runtime", "module": module} for module in described.get("imported", [])]
    return infos, runtime


async def _grade_functions(session, result: GradeResult, assignment: Assignment, scan, settings,
                           described: dict[str, FunctionInfo], probing_started: float) -> None:
    """Call and judge each function described; its checks and its entry in the result's
    functions are the result's. Raises RepliesLost."""
    result.functions = dict(described)   # kept as described should the replies be lost
    uses = {fn.name: _forbidden_uses(fn, described[fn.name], scan, assignment.forbidden) for fn in assignment.functions}
    ctx = Context(settings.seed, assignment.tolerance, uses, builtin_words=assignment.builtin)
    # Every function's visible checks before any hidden one (see _grade_hidden).
    gradings = [await _grade_visible(session, fn, described[fn.name], scan, ctx, settings.call_timeout,
                                     probing_started + settings.probe_timeout) for fn in assignment.functions]
    for grading in gradings:
        checks = await _grade_hidden(grading, ctx)
        _apply_penalty(checks, grading.fn, uses[grading.fn.name], assignment.penalty)
        result.checks.extend(checks)
    result.functions = {g.fn.name: g.function_info() for g in gradings}


def grade_path(path: Path, assignment: Assignment, settings, **kw) -> GradeResult:
    """Grade a file; raises SubmissionError when the file cannot be read as a submission, and
    MachineFault when this machine cannot run its kernel."""
    nb = load_submission(path)
    for _ in range(GRADING_ATTEMPTS):
        try:
            # A copy each time: running a notebook rewrites the cells it ran only in part.
            return asyncio.run(grade_notebook(copy.deepcopy(nb), assignment, settings, Path(path).name, **kw))
        except MachineFault:
            raise   # no result: the submission is not at fault, nor is it graded
        except KernelKilled as exc:
            killed = exc   # the machine's doing: graded again from the start
        except Exception as exc:  # noqa: BLE001 - a grader fault still yields a valid result
            return not_graded(Path(path).name, assignment, settings.seed, "grader_error", type(exc).__name__,
                              f"grading could not finish: {type(exc).__name__}: {exc}")
    return not_graded(Path(path).name, assignment, settings.seed, "grader_error", "KernelKilled",
                      f"grading could not finish: {killed}, in each of {GRADING_ATTEMPTS} attempts")
