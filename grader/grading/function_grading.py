"""One function's grading: its checks planned, their calls made (grader/grading/prober.py) or
computed (judge_computed, as `grader audit` grades), the non-answer rule applied, each check
judged and diagnosed, and the smallest failing case found; the hidden checks last. The state
of one function's grading is a FunctionGrading."""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.calling import classes
from grader.course.spec import FunctionSpec
from grader.grading.prober import FunctionProber
from grader.judging import answers, smallest
from grader.judging.checks import (CHECKS, Context, Probe, Verdict, check_context, check_probes, check_title,
                                   evidence_probes, hidden_twins, mark_hidden_twins, results_to_diagnose)
from grader.judging.diagnosis import diagnose
from grader.result import CheckResult, CheckStatus, DefiningCellFailure, FunctionInfo, SmallestCase, cell_number

def _status(verdict: CheckStatus, points: float) -> CheckStatus:
    """A check that did not pass and carries no points is informational: it never shows as a
    failure. (A policy check that finds a rule broken still says "failed"; see the caller.)"""
    return "info" if verdict == "failed" and not points else verdict


def unrun_checks(fn: FunctionSpec, status_for, message: str) -> list[CheckResult]:
    """Every check of `fn` at 0 points without being run, `status_for(points)` its status."""
    return [CheckResult(f"{fn.name}.{kind}", fn.name, kind, check_title(fn, kind), status_for(points), 0.0,
                        points, message, hidden=kind in fn.hidden)
            for kind, points in fn.points.items()]


def not_implemented(fn: FunctionSpec, why: str) -> list[CheckResult]:
    return unrun_checks(fn, lambda points: _status("failed", points), f"Not implemented: {why}.")


def not_graded_for_failed_cell(fn: FunctionSpec, failure: DefiningCellFailure) -> list[CheckResult]:
    # Short: the function's view says once which cell failed and why (view.cell_failure).
    return unrun_checks(fn, lambda points: _status("failed", points),
                         f"Not graded: its defining cell, cell {cell_number(failure['cell'])}, failed.")



@dataclass
class FunctionGrading:
    """One function's grading, made in two steps (see grade_notebook): its checks so far, in
    the spec's order, and what its hidden checks still need."""
    fn: FunctionSpec
    info: FunctionInfo   # what was known of the function before its calls: its description
    results: dict = field(default_factory=dict)   # kind -> CheckResult
    prober: FunctionProber | Computed | None = None   # or what answers its calls without a kernel (judge_computed)
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


def _judge(grading: FunctionGrading, kinds, ctx: Context) -> None:
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


def _withhold(grading: FunctionGrading, checks: list[CheckResult]) -> None:
    """A non-answer's checks score nothing, all of them once any has points (else every check
    already failed, saying why)."""
    if not grading.non_answer_reason:
        return
    if grading.withheld:
        answers.withhold(checks, grading.non_answer_reason)
    elif any(c.points for c in checks):
        grading.withheld = True
        answers.withhold(grading.checks(), grading.non_answer_reason)


def _plan(grading: FunctionGrading, ctx: Context) -> tuple[list[Probe], list[Probe]]:
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


def _judge_visible(grading: FunctionGrading, ctx: Context) -> None:
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


def _hidden(grading: FunctionGrading) -> list[str]:
    return [kind for kind in grading.fn.points if kind in grading.fn.hidden and kind not in grading.results]


def _judge_hidden(grading: FunctionGrading, hidden: list[str], ctx: Context) -> None:
    _judge(grading, hidden, ctx)
    _withhold(grading, [grading.results[kind] for kind in hidden])


class Computed:
    """Calls answered without a kernel: `outcome(probe)` gives each call's Outcome."""

    def __init__(self, outcome):
        self.outcome = outcome


def judge_computed(fn: FunctionSpec, ctx: Context, outcome) -> FunctionGrading:
    """Every check of `fn` judged exactly as grade_notebook judges a function's calls (the
    non-answer rule, the visible checks, then the hidden ones), on the Outcome `outcome(probe)`
    gives for each call instead of the kernel's: `grader audit` grades a computation this way."""
    grading = FunctionGrading(fn, {"found": True}, prober=Computed(outcome))
    _plan(grading, ctx)
    _judge_visible(grading, ctx)
    _judge_hidden(grading, _hidden(grading), ctx)
    return grading


async def grade_visible(session, fn: FunctionSpec, info: FunctionInfo, scan, ctx: Context, call_timeout: float,
                         deadline: float) -> FunctionGrading:
    """The evidence for the non-answer rule, the visible checks and the smallest failing case."""
    grading = FunctionGrading(fn, info)
    name = info.get("name", fn.symbol)
    if not info.get("found") and info.get("defining_cell_failed"):
        grading.results = {c.kind: c for c in not_graded_for_failed_cell(fn, info["defining_cell_failed"])}
        return grading
    if not info.get("found"):
        also = f" (nor {', '.join(fn.aliases)})" if fn.aliases else ""
        grading.results = {c.kind: c for c in not_implemented(
            fn, f"no {classes.kind(fn.convention)} named `{fn.symbol}`{also} is defined after running the notebook")}
        return grading
    if name in scan.stubs:
        grading.results = {c.kind: c for c in not_implemented(fn, f"`{name}` still has the template's "
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


async def grade_hidden(grading: FunctionGrading, ctx: Context) -> list[CheckResult]:
    """The hidden checks, once every call whose result a student may see has been made: the
    function sees a hidden case, and could otherwise carry it into a later visible check's
    message or figures, or into the smallest failing case."""
    hidden = _hidden(grading)
    if hidden and isinstance(grading.prober, FunctionProber):   # judge_computed's calls are all answered
        await grading.prober.run([p for kind in hidden for p in grading.probes_of[kind]])
        _judge_hidden(grading, hidden, ctx)
    return grading.checks()
