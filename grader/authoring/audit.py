"""`grader audit SPEC`: what a spec's checks make of each known mistake, before students meet it.

For each function of the spec and each known mistake that its convention can make (with
`pairs`, each pair of them too), a computation that makes only that mistake is graded
exactly as a student's function is (grade.judge_computed: the non-answer rule, every check's
judge, hidden checks included), its answer to every call being what the mistake computes on
that call's case (`Convention.predict` with `mistaken_elements`), so no kernel is started;
on a case whose shapes the mistake cannot be computed on (keys from X when the memory is wider),
the call raises, as the student's would.
The reference itself is graded the same way first: a spec on which it loses points is wrong.

The computations work in float64 on each case as it is: an input variant (float32, integer,
Fortran-ordered or non-contiguous inputs) changes what a student's code is given, never what
this audit computes. The `dtypes` and `memory_layout` checks compare a function's answer on
such inputs with its own answer on plain ones, so no known mistake (a computation, whatever the
inputs' layout or dtype) is theirs to catch: a student's truncating integer division or
layout-dependent code is, and the audit cannot make one.
"""
from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from grader.reference.mistakes import computable

from grader.judging.checks import CHECKS, Context, Outcome, Probe
from grader.calling.classes import sent_arguments
from grader.calling.conventions import PART_WORDS
from grader.judging.explain import CORRECT, Explanation, Predictions, explanations, harmless
from grader.grading.function_grading import judge_computed
from grader.calling.returns import Parts, Tolerance, same
from grader.course.spec import Assignment, FunctionSpec

# Where a check's verdict says it caught the computation (an informational check says "info").
CAUGHT = ("failed", "info", "error")
# Checks whose subject no known mistake is about: a mistake is a computation, and these judge
# what a function does to its arguments, which libraries it uses, and whether its answer
# depends on the inputs' layout or dtype, so they never catch one.
BEYOND_MISTAKES = {"inputs_unmodified": "changes to the arguments in place",
                   "forbidden_libraries": "the libraries a function uses",
                   "memory_layout": "the inputs' memory layout", "dtypes": "the inputs' dtypes"}


@dataclass
class Graded:
    """One computation graded with one function's checks."""
    title: str                 # "reference", or the mistakes' titles joined by " and "
    ids: tuple[str, ...]       # the mistakes' ids; () for the reference
    points: float
    max_points: float
    caught_by: list[str]       # the checks whose own verdict was not "passed", in the spec's order
    non_answer: str = ""       # why the non-answer rule withheld every point, or ""
    named: str = ""            # what the diagnosis named, on the checks that caught it
    differs: bool = True       # some call's answer differs from the reference's
    # The checks with points on whose cases it differs in a way they count (an overflow that the
    # softmax without max-subtraction gives is judged by numerical_stability alone).
    differs_on: list[str] = field(default_factory=list)
    raised: str = ""           # "every" or "some" call raised (the mistake cannot be made on its shapes), or ""
    title_shared: bool = False   # another computation of the audit has this title too

    @property
    def label(self) -> str:
        """The title, with the ids where another computation shares it (a keepdims slip with or
        without the max-subtraction: two computations, one name)."""
        return f"{self.title} [{', '.join(self.ids)}]" if self.title_shared else self.title

    @property
    def full_marks(self) -> bool:
        return self.points >= self.max_points

    @property
    def slips_through(self) -> bool:
        """Full marks, though on the cases of a check with points it computes something else
        than the reference: the spec lets it through. (A mistake that differs only where no
        points are at stake, or only by overflowing, as a softmax without max-subtraction
        does, earns its full marks by design.)"""
        return self.full_marks and bool(self.differs_on)


@dataclass
class FunctionAudit:
    name: str
    checks: dict                            # kind -> points, as the spec gives them
    hidden: frozenset
    reference: Graded
    mistakes: list[Graded] = field(default_factory=list)
    non_answers: list[Graded] = field(default_factory=list)   # functions that compute no attention

    @property
    def silent_checks(self) -> list[str]:
        """Checks that catch none of the mistakes, besides those no mistake is about."""
        return [kind for kind in self.checks if kind not in BEYOND_MISTAKES
                and not any(kind in m.caught_by for m in self.mistakes)]

    @property
    def beyond_mistakes(self) -> list[str]:
        return [kind for kind in self.checks if kind in BEYOND_MISTAKES]

    @property
    def let_through(self) -> list[Graded]:
        """Mistakes that earn every point while computing something else where points are at stake."""
        return [m for m in self.mistakes if m.slips_through]

    @property
    def full_marks_by_design(self) -> list[Graded]:
        """Mistakes at full marks whose only differences from the reference no check with points
        counts (an overflowing softmax, which no sheet asks to avoid)."""
        return [m for m in self.mistakes if m.full_marks and m.differs and not m.slips_through]

    @property
    def same_as_reference(self) -> list[Graded]:
        """Mistakes that compute the reference's values on every case of the spec (a mistake
        the convention's inputs cannot show, as a heads axis given ready-split)."""
        return [m for m in self.mistakes if not m.differs]

    @property
    def non_answer_points(self) -> float:
        """The most a non-answer earns here: 0, by the non-answer rule."""
        return max((n.points for n in self.non_answers), default=0.0)

    @property
    def as_non_answers(self) -> list[Graded]:
        """Mistakes that end at or below a non-answer's score (0): a genuine attempt keeps the
        points its checks give, so each of these is either zeroed by the non-answer rule or
        fails every check with points."""
        return [m for m in self.mistakes if m.points <= self.non_answer_points and m.max_points and m.differs]


@dataclass
class Audit:
    assignment: str
    title: str
    seed: int
    pairs: bool
    functions: list[FunctionAudit]

    @property
    def reference_failures(self) -> list[FunctionAudit]:
        return [f for f in self.functions if not f.reference.full_marks]

    @property
    def slipping_through(self) -> list[tuple[str, Graded]]:
        return [(f.name, m) for f in self.functions for m in f.mistakes if m.slips_through]

    @property
    def paid_non_answers(self) -> list[tuple[str, Graded]]:
        return [(f.name, n) for f in self.functions for n in f.non_answers if n.points > 0]

    @property
    def sound(self) -> bool:
        """The reference earns every point, no mistake slips through and no non-answer scores."""
        return not self.reference_failures and not self.slipping_through and not self.paid_non_answers


def _zeros(value, probe: Probe):
    return np.zeros_like(value)


def _noise(value, probe: Probe):
    """Random numbers, drawn anew for each call (from its label, so the audit is repeatable)."""
    return np.random.default_rng(zlib.crc32(probe.label.encode())).normal(size=value.shape)


# Answers that compute no attention, in exactly the shapes and structure the reference returns:
# they pass return_structure and inputs_unmodified, and the noise what no property check holds
# it to, so only the non-answer rule keeps them at 0.
NON_ANSWERS = {"zeros in the expected shapes": _zeros, "random numbers in the expected shapes": _noise}


class _Computation:
    """A student function that computes `explanation` (the reference, or mistakes) on each
    call's case, in float64, and leaves its inputs as they were; with `fill`, one that
    returns `fill(value, probe)` for each value the reference returns instead."""

    def __init__(self, fn: FunctionSpec, explanation: Explanation, predictions: Predictions, tol: Tolerance,
                 fill=None):
        self.fn, self.explanation, self.predictions, self.tol = fn, explanation, predictions, tol
        self.fill = fill
        self.differing: set = set()   # the keys of the probes on which it computes something else
        self.overflowing: set = set()   # those on which it differs only as a harmless softmax slip does
        self.harmless = harmless(fn.convention)
        self.calls, self.raised = 0, 0

    def _same(self, values: Mapping, wanted: Mapping) -> bool:
        return all(part in values and same(values[part], wanted[part], self.tol) for part in wanted)

    def counted(self, probes: list[Probe]) -> bool:
        """Whether it differs on any of these calls in a way the checks count."""
        return any(p.key in self.differing and p.key not in self.overflowing for p in probes)

    def raised_on(self) -> str:
        """On "every" call, "some" or none ("")."""
        return "" if not self.raised else "every" if self.raised == self.calls else "some"

    def outcome(self, probe: Probe) -> Outcome:
        conv = self.fn.convention
        sent = sent_arguments(probe, conv)
        self.calls += 1
        if not all(computable(element, self.explanation.variant) for element in conv.elements(probe.case)):
            # The mistake predicts the reference where it cannot be made; a student's code raises.
            self.differing.add(probe.key)
            self.raised += 1
            return Outcome("error", error=f"the call raises: {self.explanation.title} cannot be computed on "
                                          "these shapes", sent=sent)
        values = self.predictions.parts(conv, self.explanation, probe.case)
        reference = self.predictions.parts(conv, CORRECT, probe.case)
        if self.fill is not None:
            values = {part: [self.fill(v, probe) for v in value] if isinstance(value, list) else
                      self.fill(value, probe) for part, value in reference.items()}
        if not self._same(values, reference):
            self.differing.add(probe.key)
            if any(self._same(values, self.predictions.parts(conv, slip, probe.case)) for slip in self.harmless):
                self.overflowing.add(probe.key)
        returned = ", ".join(PART_WORDS[p] for p in conv.returns if p in values)
        # A part this computation cannot give in the convention's form (each batch element's
        # of another shape) comes back in a form no check can use, as a student's would.
        parts = Parts(values=dict(values), returned=f"what it computes ({returned})")
        for part in conv.returns:
            if part not in values:
                parts.unreadable[part] = "has batch elements of different shapes"
        return Outcome("ok", parts=parts, sent=sent, inputs_after=sent)


def _graded(fn: FunctionSpec, explanation: Explanation, ctx: Context, fill=None, title: str = "") -> Graded:
    computation = _Computation(fn, explanation, ctx.predictions, ctx.tolerance, fill)
    grading = judge_computed(fn, ctx, computation.outcome)
    checks = grading.checks()
    caught = [kind for kind in fn.points if grading.verdicts.get(kind) in CAUGHT]
    named = sorted({c.diagnosis for c in checks if c.diagnosis})
    return Graded(title=title or explanation.title or "reference", ids=tuple(m.id for m in explanation.mistakes),
                  points=sum(c.points for c in checks), max_points=sum(c.max_points for c in checks),
                  caught_by=caught, non_answer=grading.non_answer_reason, named="; ".join(named),
                  differs=bool(computation.differing), raised=computation.raised_on(),
                  differs_on=[kind for kind, points in fn.points.items()
                              if points and computation.counted(grading.probes_of[kind])])


def audit_function(fn: FunctionSpec, seed: int, tolerance: Tolerance, pairs: bool = False) -> FunctionAudit:
    ctx = Context(seed, tolerance, {})
    tried = [e for e in explanations(fn.convention) if pairs or len(e.mistakes) == 1]
    mistakes = [_graded(fn, e, ctx) for e in tried]
    # Two computations may share one name (a keepdims slip with or without the max-subtraction):
    # their rows are told apart by their ids.
    shared = Counter(m.title for m in mistakes)
    for m in mistakes:
        m.title_shared = shared[m.title] > 1
    return FunctionAudit(fn.name, dict(fn.points), fn.hidden, _graded(fn, CORRECT, ctx),
                         mistakes,
                         [_graded(fn, CORRECT, ctx, fill, title) for title, fill in NON_ANSWERS.items()])


def audit(assignment: Assignment, seed: int, pairs: bool = False) -> Audit:
    return Audit(assignment.name, assignment.title, seed, pairs,
                 [audit_function(fn, seed, assignment.tolerance, pairs) for fn in assignment.functions])


def informational(fn: FunctionAudit, kind: str) -> bool:
    """A check that carries no points and is no policy: what it catches costs nothing."""
    return not fn.checks[kind] and not CHECKS[kind].policy
