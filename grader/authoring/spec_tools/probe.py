"""Calling the solution's functions with each candidate convention, in one kernel session: the
notebook runs once, in the same sandbox grading uses, and each candidate is one call on the
grader's own base case (all of a function's calls in one request). A candidate fits when the
call returns values the reference computes for that case; what it returns is read off the
call (returned.py). A function that takes a mask is called once more with a query whose every
key is masked, to learn what such a row gives (the convention's `fully_masked`)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from grader.calling.cases import base_case
from grader.judging.checks import Probe
from grader.calling.classes import made_as
from grader.calling.conventions import Convention, implied_fully_masked, parse_convention
from grader.errors import SpecError
from grader.grade import assignment_kernel
from grader.grading.prober import FunctionProber
from grader.reference.masks import FULLY_MASKED_RULES
from grader.calling.returns import Tolerance, same
from grader.course.spec import Assignment, FunctionSpec
from grader.authoring.spec_tools.candidates import Candidate
from grader.authoring.spec_tools.returned import read_kept, read_returns, why_unread
from grader.authoring.spec_tools.signatures import Signature

# Fits kept per function: the first to earn full marks when graded is chosen, and those after it
# that earn them too are what the output calls undecided.
FITS_KEPT = 4
# Candidates called in one request, simplest first, until FITS_KEPT of them fit.
CHUNK = 32


@dataclass(frozen=True)
class Fit:
    table: dict              # the convention, returns read off the call
    choices: tuple
    rank: int


# How far a candidate got, in order: the reason a function none fits is left out is the
# simplest of those that got furthest (a batched reading whose returns no part is, say, not the
# unbatched one that raised before it).
NOT_CALLED, RAISED, UNREAD, REFUSED = range(4)


@dataclass
class Probed:
    fits: list[Fit] = field(default_factory=list)
    why_none: str = ""       # when no candidate fits: what the one that got furthest did
    furthest: int = -1       # how far that one got (NOT_CALLED ... REFUSED)

    def note(self, stage: int, why: str) -> None:
        """A candidate that did not fit, and why: kept if none before it got as far."""
        if stage > self.furthest:
            self.furthest, self.why_none = stage, why


class KeepingProber(FunctionProber):
    """The grader's prober, keeping each call's value as the kernel sent it: what the function
    returns is read off it rather than through a convention's returns."""

    def __init__(self, *args):
        super().__init__(*args)
        self.values: dict[tuple, dict] = {}
        self.kept: dict[tuple, dict] = {}   # a class's attributes read after the call: name -> value as sent

    def convention_of(self, probe: Probe) -> Convention:
        return getattr(probe, "convention", None) or self.fn.convention

    def request(self, probe: Probe, args: list) -> dict:
        """A class's call also reads back every attribute its methods set on self, to learn
        which part the object keeps in which (the convention's `kept`)."""
        sent = super().request(probe, args)
        read_back = getattr(probe, "read_back", ())
        if read_back and "object" in sent:
            sent["object"] = {**sent["object"], "kept": list(read_back)}
        return sent

    def replied(self, probe: Probe, reply: dict) -> None:
        self.values[probe.key] = reply.get("value", {})
        self.kept[probe.key] = dict(zip(getattr(probe, "read_back", ()), reply.get("kept", [])))


def _spec_of(name: str, table: dict) -> FunctionSpec:
    conv = parse_convention(table, f"{name} (candidate)", name)
    return FunctionSpec(name, conv, conv.param_names, (), None, {}, frozenset())


@dataclass(frozen=True)
class CandidateProbe(Probe):
    """A probe carrying its own candidate convention, so that one request to the kernel calls
    the function once per candidate (the kernel's round trip, not the call, is what costs)."""
    convention: Convention | None = None
    index: int = 0
    read_back: tuple[str, ...] = ()    # a class's attributes to read after the call

    @property
    def key(self) -> tuple:
        return (*super().key, self.index)

    @property
    def candidate(self) -> Convention:
        # A default only because a dataclass's fields after one with a default need one too.
        if self.convention is None:
            raise ValueError("a candidate probe is made with its convention")
        return self.convention

    def arguments(self, conv: Convention) -> list:
        return super().arguments(self.candidate)


async def _call(session, fn: FunctionSpec, probes: Sequence[Probe], settings, deadline: float) -> KeepingProber:
    prober = KeepingProber(session, fn, settings.call_timeout, deadline)
    await prober.run(list(probes))
    return prober


async def _call_each(session, name: str, probes: list[CandidateProbe], settings, deadline: float) -> dict:
    """Each probe's (outcome, value as sent), calling with every candidate: one request per list
    of parameter names (the harness calls by keyword when one in the middle is left out). A
    call that does not finish stops its request, so the calls after it go in another."""
    results: dict[int, tuple] = {}
    groups: dict[tuple, list[CandidateProbe]] = {}
    for probe in probes:
        groups.setdefault(probe.candidate.param_names, []).append(probe)
    for params, pending in groups.items():
        fn = FunctionSpec(name, pending[0].candidate, params, (), None, {}, frozenset())
        while pending and session.alive and time.monotonic() < deadline:
            prober = await _call(session, fn, pending, settings, deadline)
            stopped = next((i for i, p in enumerate(pending) if prober.outcome(p).status in ("timeout", "dead")),
                           len(pending))
            for probe in pending[:stopped + 1]:
                results[probe.index] = (prober.outcome(probe), prober.values.get(probe.key, {}),
                                        prober.kept.get(probe.key, {}))
            pending = pending[stopped + 1:]
    return results


async def _fully_masked(session, fn: FunctionSpec, table: dict, case, settings, deadline, tol) -> dict:
    """`fully_masked` when a row with every key masked gives other than what the mask's form
    implies; {} when it gives that, or nothing the grader knows."""
    if case.mask is not None:
        keep = case.mask.copy()
        keep[0] = False
        emptied = replace(case, mask=keep, label=f"{case.label}, the first query's every key masked")
    elif case.key_mask is not None:   # a key-padding mask alone: every key of the first sequence padded
        emptied = replace(case, key_mask=np.zeros_like(case.key_mask), label=f"{case.label}, every key padded")
    else:
        return {}
    probe = Probe(emptied)
    prober = await _call(session, fn, [probe], settings, deadline)
    outcome = prober.outcome(probe)
    if outcome.status != "ok":
        return {}
    conv = fn.convention
    for rule in FULLY_MASKED_RULES:
        expected = replace(conv, fully_masked=rule).expected_parts(emptied)
        if all(p in outcome.ok_parts.values and same(outcome.ok_parts.values[p], e, tol) for p, e in expected.items()):
            return {} if rule == implied_fully_masked(conv.flat) else {"fully_masked": rule}
    return {}


def _raised(name: str, candidate: Candidate, conv: Convention, outcome) -> str:
    """Why a call failed, with the reading it was called with (each candidate before it failed
    as far, so it is the simplest that got as far) and, for a class, how its object was made."""
    reading = ", ".join(f"`{p['name']}` as {p['role']}" for p in candidate.table["params"])
    error = outcome.error
    if conv.class_call is not None and not error.startswith("constructing "):
        # A unit `Class.backward` is of the class `Class`.
        error = f"on an object made as {made_as(name.split('.', 1)[0], conv, outcome.sent)}, {error}"
    return f"called with {reading} (the simplest reading), {error}"


async def _probe_function(session, signature: Signature, found: list[Candidate], settings, deadline,
                          tol: Tolerance) -> Probed:
    probed = Probed()
    probes = []
    for index, candidate in enumerate(found):
        conv = _spec_of(signature.name, candidate.table).convention
        read_back = signature.self_attributes if conv.class_call is not None else ()
        probes.append(CandidateProbe(conv.prepare(base_case(conv, settings.seed)), convention=conv, index=index,
                                     read_back=read_back))
    called: dict = {}
    for candidate, probe in zip(found, probes):
        if probe.index % CHUNK == 0:
            # The next candidates in one request: most functions fit among their simplest, and
            # the rest are then never called.
            called = await _call_each(session, signature.name, probes[probe.index:probe.index + CHUNK], settings,
                                      deadline)
        if probe.index not in called:
            probed.note(NOT_CALLED, "its calls were not made (the kernel stopped, or time ran out)")
            continue
        outcome, value, kept = called[probe.index]
        if outcome.status != "ok":
            probed.note(RAISED, _raised(signature.name, candidate, probe.candidate, outcome))
            continue
        returns = read_returns(probe.candidate, probe.case, value, tol)
        if returns is None:
            probed.note(UNREAD, why_unread(probe.candidate, probe.case, value, tol))
            continue
        table = {**candidate.table, **returns}
        if kept:
            table.update(read_kept(probe.candidate, probe.case, returns, kept, tol, table["class"]))
        try:
            fn = _spec_of(signature.name, table)
        except SpecError as exc:
            probed.note(REFUSED, str(exc))
            continue
        if fn.convention.masked:
            table.update(await _fully_masked(session, fn, table, probe.case, settings, deadline, tol))
        probed.fits.append(Fit(table, candidate.choices, candidate.rank))
        if len(probed.fits) >= FITS_KEPT:
            break
    return probed


async def probe_all(nb, setup: Assignment, functions: list[tuple[Signature, list[Candidate]]], settings,
                    tol: Tolerance) -> dict[str, Probed]:
    """Each function's candidates that fit, in the notebook as `setup` (its forbidden libraries,
    its support) sets its kernel up."""
    results: dict[str, Probed] = {}
    async with assignment_kernel(nb, setup, settings) as (session, log):
        deadline = time.monotonic() + settings.probe_timeout
        for signature, found in functions:
            results[signature.name] = await _probe_function(session, signature, found, settings, deadline, tol)
    return results
