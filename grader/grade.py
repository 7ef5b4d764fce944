"""Grade one submission: scan, execute, probe, judge, score."""
from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Literal

from grader.intake import source_scan as static_scan
from grader.kernel_side import wire
from grader.judging.checks import Context
from grader.errors import MachineFault
from grader.grading.function_grading import grade_hidden, grade_visible, unrun_checks
from grader.kernel import replies as payloads
from grader.kernel.session import HARNESS, HARNESS_MODULE, KernelKilled
from grader.kernel.client import default_kernel_manager
from grader.intake.notebook import code_cells, load_submission
from grader.result import (CheckResult, DefiningCellFailure, ErrorKind, ErrorRecord, Finding, FunctionInfo,
                           GradeResult, Timing, cell_number, failing_line_number)
from grader.kernel.runner import NOT_RUN_NOTE, executed_notebook
from grader.sandbox.isolation import ENFORCES_POLICY
from grader.course.spec import Assignment, FunctionSpec, metadata_assignment


class RepliesLost(Exception):
    """What the grader asked the kernel for did not reach it: `str()` says what was lost."""


# Importing these from a submission is flagged: the grader and its reference are off limits.
GRADER_MODULES = ("grader", "attention_grader", "reference", HARNESS_MODULE, wire.KERNEL_MODULE)


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
    result.checks = [c for fn in functions for c in unrun_checks(fn, lambda points: "error", message)]
    result.total()
    return result


def _forbidden_uses(fn: FunctionSpec, info: FunctionInfo, scan, forbidden) -> list[str]:
    modules = list(info.get("modules", [])) + scan.function_imports.get(info.get("name", fn.symbol), [])
    return sorted({hit for m in modules if (hit := static_scan.matches(m, forbidden))})


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
        # The code ran to its end without an error, so the harness did publish its description.
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
    # Every function's visible checks before any hidden one (see grade_hidden).
    gradings = [await grade_visible(session, fn, described[fn.name], scan, ctx, settings.call_timeout,
                                     probing_started + settings.probe_timeout) for fn in assignment.functions]
    for grading in gradings:
        checks = await grade_hidden(grading, ctx)
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
