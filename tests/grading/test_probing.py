"""Without a Jupyter kernel: how a function's calls reach the kernel (all of them in one
request) and how what comes back, or does not, becomes one outcome per probe. The fake kernel
runs the real harness in this process, on the functions a submission defines, and can cut a
run of calls short or tamper with its replies the way a hostile notebook could."""
import asyncio
import time
from contextlib import asynccontextmanager

import pytest

from grading_helpers import FIXTURES
from kernel_fakes import HarnessKernel
from grader.judging import answers
from grader import grade
from grader.judging.checks import CHECKS, Context, evidence_probes
from grader.kernel.run_record import ExecutionLog
from grader.grading.prober import NO_REPLY, TIME_USED_UP, FunctionProber
from grader.intake.notebook import load_submission
from grader.result import ErrorRecord
from grader.settings import Settings
from grader.course.spec import load_assignment

# The submission's softmax overflows on the large-score probe here, as it does in a kernel.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ROWS = load_assignment("rows")
SELF_ATTENTION = ROWS.functions[0]
CALL_TIMEOUT = 2.0


def submission_namespace(path=FIXTURES / "correct_script.py") -> dict:
    """What a kernel's namespace holds once the submission's cells have run."""
    namespace = {}
    for cell in load_submission(path).cells:
        if cell.cell_type == "code":
            exec(cell.source, namespace)
    return namespace


def context() -> Context:
    return Context(20261122, ROWS.tolerance, {})


def all_probes(fn, ctx):
    """Every call grading makes of `fn`, in its order: the non-answer rule's evidence, the
    attempt probes, then the checks'."""
    return [*evidence_probes(fn, ctx), *answers.attempt_probes(fn.convention, ctx.seed),
            *(p for kind in fn.points for p in CHECKS[kind].probes(fn, ctx))]


def probed(monkeypatch, deadline_in: float = 60.0, **fake):
    """A prober for self_attention, run on every probe of its checks; returns (prober, kernel)."""
    kernel = HarnessKernel(monkeypatch, submission_namespace(), **fake)
    prober = FunctionProber(kernel, SELF_ATTENTION, CALL_TIMEOUT, time.monotonic() + deadline_in)
    asyncio.run(prober.run(all_probes(SELF_ATTENTION, context())))
    return prober, kernel


def outcomes(prober) -> list:
    return [prober.outcome(p) for p in prober.calls]


def test_a_submission_makes_one_request_per_function(monkeypatch):
    """The whole grading of a correct submission: the description of its functions, then one
    request for all the calls of each function, and full marks as before."""
    kernel = HarnessKernel(monkeypatch, submission_namespace())

    @asynccontextmanager
    async def executed(*args, **kwargs):
        yield kernel, ExecutionLog()
    monkeypatch.setattr(grade, "executed_notebook", executed)
    nb = load_submission(FIXTURES / "correct_script.py")
    result = asyncio.run(grade.grade_notebook(nb, ROWS, Settings(call_timeout=CALL_TIMEOUT), "correct_script.py"))
    assert [r[0] for r in kernel.requests] == ["describe", "call_many", "call_many"]
    ctx = Context(result.seed, ROWS.tolerance, {})
    for (_, count, call_timeout, _), fn in zip(kernel.requests[1:], ROWS.functions):
        assert count == len({p.key for p in all_probes(fn, ctx)}) and call_timeout == CALL_TIMEOUT
    assert result.score == result.max_score == 25


def test_each_probe_is_called_once_evidence_first(monkeypatch):
    prober, kernel = probed(monkeypatch)
    ctx = context()
    evidence = evidence_probes(SELF_ATTENTION, ctx)
    assert [p.key for p in prober.calls[:len(evidence)]] == [p.key for p in evidence]
    assert len({p.key for p in prober.calls}) == len(prober.calls)
    assert {p.key for p in prober.calls} == {p.key for p in all_probes(SELF_ATTENTION, ctx)}
    assert all(o.status == "ok" for o in outcomes(prober))


def test_a_late_call_times_out_and_the_later_ones_are_not_made(monkeypatch):
    timeout = ErrorRecord(-1, "timeout", "Timeout", "a call ran past its time and was interrupted")
    prober, _ = probed(monkeypatch, cut=(3, timeout, False))
    results = outcomes(prober)
    assert [o.status for o in results[:3]] == ["ok"] * 3
    assert (results[3].status, results[3].error) == ("timeout", "the call did not finish within 2 s")
    late = prober.calls[3].label
    assert all((o.status, o.error) == ("timeout", f"not made: an earlier call of this function ({late}) did not "
                                                  "finish within 2 s") for o in results[4:])
    assert results[3].sent and all(o.sent for o in results[4:]), "the arguments are still reported"


def test_a_call_that_gets_its_kernel_stopped_times_out_as_well(monkeypatch):
    unresponsive = ErrorRecord(-1, "unresponsive", "Unresponsive", "still running", kernel_lost=True)
    prober, kernel = probed(monkeypatch, cut=(0, unresponsive, False))
    results = outcomes(prober)
    assert results[0].error == "the call did not finish within 2 s" and not kernel.alive
    assert all("not made: an earlier call" in o.error for o in results[1:])


def test_calls_past_the_submissions_time_are_not_made(monkeypatch):
    timeout = ErrorRecord(-1, "timeout", "Timeout", "a call ran past its time and was interrupted")
    prober, _ = probed(monkeypatch, cut=(5, timeout, True))
    results = outcomes(prober)
    assert (results[5].status, results[5].error) == (
        "timeout", "the call was stopped when the time for calling this submission's functions ran out")
    assert all((o.status, o.error) == ("timeout", TIME_USED_UP) for o in results[6:])


def test_no_request_once_the_submissions_time_is_used_up(monkeypatch):
    prober, kernel = probed(monkeypatch, deadline_in=-1.0)
    assert kernel.requests == []
    assert all((o.status, o.error) == ("timeout", TIME_USED_UP) for o in outcomes(prober))


def test_a_kernel_that_dies_during_a_call(monkeypatch):
    died = ErrorRecord(-1, "kernel_died", "KernelDied", "the Python process died", kernel_lost=True)
    prober, _ = probed(monkeypatch, cut=(2, died, False))
    results = outcomes(prober)
    assert [o.status for o in results[:2]] == ["ok", "ok"]
    assert (results[2].status, results[2].error) == ("dead", "the kernel died during the call (os._exit, a crash "
                                                             "or a segfault)")
    assert all((o.status, o.error) == ("dead", f"not made: the kernel died during an earlier call of this function "
                                               f"({prober.calls[2].label})") for o in results[3:])


def test_no_request_to_a_kernel_that_is_gone(monkeypatch):
    kernel = HarnessKernel(monkeypatch, submission_namespace())
    kernel.alive = False
    prober = FunctionProber(kernel, SELF_ATTENTION, CALL_TIMEOUT, time.monotonic() + 60)
    asyncio.run(prober.run(all_probes(SELF_ATTENTION, context())))
    assert kernel.requests == []
    assert {(o.status, o.error) for o in outcomes(prober)} == {
        ("dead", "not made: the kernel had stopped before this function was called")}


def test_calls_that_got_no_reply(monkeypatch):
    """A run whose code raised before replying for every call (a replaced harness)."""
    error = ErrorRecord(-1, "error", "AttributeError", "no call_many")
    prober, _ = probed(monkeypatch, cut=(1, error, False))
    results = outcomes(prober)
    assert results[0].status == "ok"
    assert {(o.status, o.error) for o in results[1:]} == {
        ("error", "the call could not be made (AttributeError: no call_many)")}


def test_a_run_that_ended_without_every_reply_is_the_notebook_s_doing(monkeypatch):
    """A run whose code ended without an error, but without a reply for every call: the reply
    channel loses nothing written to it, so the harness was changed, and the calls without a
    reply are errors of the submission, never a verdict drawn from the silence."""
    prober, _ = probed(monkeypatch, cut=(1, None, False))
    results = outcomes(prober)
    assert results[0].status == "ok"
    assert {(o.status, o.error) for o in results[1:]} == {
        ("error", f"the call could not be made (NoReply: {NO_REPLY})")}


class LosingKernel(HarnessKernel):
    """A kernel whose first `lost` descriptions of the functions never reach the grader."""

    def __init__(self, monkeypatch, namespace, lost: int):
        super().__init__(monkeypatch, namespace)
        self.lost = lost

    async def run_code(self, code: str, timeout: float):
        payload, error = await super().run_code(code, timeout)
        self.lost -= 1
        return (None, None) if self.lost >= 0 else (payload, error)


@pytest.mark.parametrize("lost", [1, grade.DESCRIBE_ATTEMPTS])
def test_a_lost_description_is_asked_again_and_never_read_as_no_functions(monkeypatch, lost):
    kernel = LosingKernel(monkeypatch, submission_namespace(), lost)

    @asynccontextmanager
    async def executed(*args, **kwargs):
        yield kernel, ExecutionLog()
    monkeypatch.setattr(grade, "executed_notebook", executed)
    nb = load_submission(FIXTURES / "correct_script.py")
    result = asyncio.run(grade.grade_notebook(nb, ROWS, Settings(call_timeout=CALL_TIMEOUT), "correct_script.py"))
    assert not any("no function named" in c.message for c in result.checks)
    if lost < grade.DESCRIBE_ATTEMPTS:   # found on the next request, and graded
        assert [r[0] for r in kernel.requests] == ["describe"] * (lost + 1) + ["call_many"] * 2
        assert result.status == "graded" and result.score == 25
        return
    assert [r[0] for r in kernel.requests] == ["describe"] * lost
    assert result.status == "error" and [e.kind for e in result.errors] == ["grader_error"]
    assert "the description of the functions, asked for 3 times" in result.errors[0].evalue
    assert len(result.checks) == sum(len(f.points) for f in ROWS.functions)
    assert all(c.status == "error" and c.message.startswith("Not graded: the kernel's replies to the grader were lost")
               for c in result.checks)


@pytest.mark.parametrize("tamper", [
    lambda replies: replies[1:] + replies[:1],                          # each reply one place early
    lambda replies: replies[::-1],                                       # backwards
    lambda replies: [dict(r, index=str(r["index"])) for r in replies],   # indices that are not numbers
    lambda replies: [dict(r, index=True) if r["index"] == 1 else r for r in replies],
])
def test_replies_out_of_order_are_malformed(monkeypatch, tamper):
    prober, _ = probed(monkeypatch, tamper=tamper)
    results = outcomes(prober)
    bad = [o for o in results if o.status != "ok"]
    assert bad and all(o.status == "error" and "reply to the grader was malformed" in o.error for o in bad)
    shuffled = tamper([{"index": i} for i in range(len(results))])
    for position, (o, reply) in enumerate(zip(results, shuffled)):
        assert (o.status == "ok") == (type(reply["index"]) is int and reply["index"] == position)


def test_every_check_a_spec_may_name_is_judged_and_no_other():
    """The checks' rules (course/check_rules.py, which a spec is read against) and how each is
    judged (judging/checks.py) are one table by name: a rule without its judge, or a judge
    without its rule, would be a check a spec names that never runs, or one it cannot name."""
    from grader.course.check_rules import CHECK_RULES
    from grader.judging import checks
    assert list(checks.CHECKS) == list(CHECK_RULES)
    assert set(checks._PROBES_AND_JUDGES) == set(CHECK_RULES)
    assert all(checks.CHECKS[name].rule is rule for name, rule in CHECK_RULES.items())
