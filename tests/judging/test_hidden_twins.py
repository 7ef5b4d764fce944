"""A visible check shows nothing of a case with a hidden check's label and shapes.

A hidden check draws its cases from a seed of its own, but in the same families as the visible
checks: the visible `weights_distribution` and `masked_keys_zero_weight` judge the randomized
shapes of `random_shapes` too. The attack: under a secret seed, with `random_shapes` hidden, a
function right on the base case (N = 5) and wrong elsewhere fails the visible check on
"random N = 4, D = 6, H = 2", which the student would read, with its expected weights, as the
hidden check's case. Graded here without a kernel (grading.function_grading.judge_computed, as `grader audit`
does), and rendered as a student reads it: the JSON of `grader check`, the HTML report, the
terminal summary, both LMS results files and the one line of LMS feedback.
"""
import html
import json
from dataclasses import replace

import numpy as np

from grader.course.spec import load_assignment, parse
from grader.grading.function_grading import judge_computed
from grader.calling.classes import sent_arguments
from grader.calling.returns import Parts
from grader.judging.checks import Context, Outcome, Verdict
from grader.judging.explain import CORRECT, explanations
from grader.judging.seeds import submission_seed
from grader.lms.entrypoints import PLATFORMS
from grader.report.html import render
from grader.report.terminal import summary
from grader.report.view import result_view, student_feedback_line
from grader.result import GradeResult

# What `grader grade` gives one student's notebook: a seed from the batch's secret.
SECRET_SEED = submission_seed(0x5EC12E7, "alice", b"the notebook's bytes")
BASE_TOKENS = 5   # the base case's N: the attack computes right there, and only there

ROWS_MULTI = '''name = "hidden-twins"
[[functions]]
name = "multi_head_attention"
convention = "rows_multi"
hidden = ["random_shapes"]
'''


def computing(fn, ctx: Context, elsewhere, right_on: int | None):
    """A function that computes attention on `right_on` tokens and the explanation `elsewhere`
    on any other number, as a student's code can (it sees only the shapes)."""
    conv = fn.convention

    def outcome(probe):
        explanation = CORRECT if probe.case.n == right_on else elsewhere
        values = dict(ctx.predictions.parts(conv, explanation, probe.case))
        sent = sent_arguments(probe, conv)
        return Outcome("ok", parts=Parts(values=values, returned="what it computes"), sent=sent, inputs_after=sent)
    return outcome


def graded(fn, elsewhere, tolerance, right_on: int | None = BASE_TOKENS):
    ctx = Context(SECRET_SEED, tolerance, {})
    grading = judge_computed(fn, ctx, computing(fn, ctx, elsewhere, right_on))
    result = GradeResult(submission="attention.ipynb", assignment="hidden-twins", seed=SECRET_SEED,
                         checks=grading.checks())
    result.total()
    return grading, result


def mistake(fn, mistake_id: str):
    return next(e for e in explanations(fn.convention) if [m.id for m in e.mistakes] == [mistake_id])


def student_documents(result: GradeResult) -> dict[str, str]:
    """Everything a student reads of the result, as plain text (HTML unescaped)."""
    documents = {"json": json.dumps(result_view(result).to_json()), "html": html.unescape(render(result)),
                 "terminal": summary(result), "feedback": student_feedback_line(result)}
    for name, platform in PLATFORMS.items():
        documents[name] = json.dumps(platform.render(result, "", 1.0, None))
    return documents


def hidden_labels(grading, kind: str) -> list[str]:
    """The words that name each case of the hidden check `kind` and hold its shapes: its label
    without the mark and without what the course's convention adds ("random N = 4, D = 6,
    H = 2", not "... with a mask [hidden case]")."""
    return [p.case.label.split(" [")[0].split(" with ")[0] for p in grading.probes_of[kind]]


def hidden_matrices(result: GradeResult, kind: str) -> list[np.ndarray]:
    return [np.array(f[side], dtype=float) for c in result.checks if c.kind == kind
            for f in c.figures for side in ("expected", "student")]


def assert_nothing_shown_of(grading, result: GradeResult, hidden_kind: str) -> None:
    labels = hidden_labels(grading, hidden_kind)
    for where, text in student_documents(result).items():
        named = [label for label in labels if label in text]
        assert not named, f"the student's {where} names the hidden {hidden_kind} cases {named}"
    shown = [np.array(f[side], dtype=float) for c in result_view(result).checks
             for f in c.figures for side in ("expected", "student")]
    for matrix in hidden_matrices(result, hidden_kind):
        assert not any(m.shape == matrix.shape and np.allclose(m, matrix) for m in shown)


def test_the_visible_weights_distribution_shows_nothing_of_a_hidden_random_shapes_case():
    fn = parse(ROWS_MULTI, "hidden-twins.toml").functions[0]
    doubled = mistake(fn, "softmax_denominator_broadcast")   # weights that do not sum to 1
    grading, result = graded(fn, doubled, parse(ROWS_MULTI, "x").tolerance)
    assert "random N = 4, D = 6, H = 2" in hidden_labels(grading, "random_shapes")   # the case the issue names
    staff = {c.kind: c for c in result.checks}
    # The attack works: the visible check fails on a case drawn like a hidden one, with heatmaps.
    assert staff["weights_distribution"].status == "failed" and staff["weights_distribution"].figures
    assert "random N = 4, D = 6, H = 2" in staff["weights_distribution"].message
    assert_nothing_shown_of(grading, result, "random_shapes")
    student = {c.kind: c for c in result_view(result).checks}
    # Its verdict and points are the student's all the same; only its details are withheld.
    assert (student["weights_distribution"].status, student["weights_distribution"].points) == ("failed", 0)
    assert student["weights_distribution"].withheld and not student["weights_distribution"].hidden


def test_the_visible_masked_keys_check_shows_nothing_of_a_hidden_random_shapes_case():
    assignment = load_assignment("masks")
    fn = next(f for f in assignment.functions if f.name == "masked_attention")
    fn = replace(fn, hidden=frozenset({"random_shapes"}))
    grading, result = graded(fn, mistake(fn, "mask_ignored"), assignment.tolerance)
    staff = {c.kind: c for c in result.checks}
    assert staff["masked_keys_zero_weight"].status == "failed"
    assert staff["weights_distribution"].status == "passed"   # the ignored mask still gives a distribution
    assert_nothing_shown_of(grading, result, "random_shapes")
    student = {c.kind: c for c in result_view(result).checks}
    assert (student["masked_keys_zero_weight"].status, student["masked_keys_zero_weight"].points) == ("failed", 0)


def test_hiding_a_check_of_the_base_case_alone_withholds_no_visible_details():
    """The base case is every check's: a hidden return_structure leaves the visible checks that
    fail on it as they were."""
    fn = parse(ROWS_MULTI.replace('"random_shapes"', '"return_structure"'), "x").functions[0]
    grading, result = graded(fn, mistake(fn, "softmax_wrong_axis"), parse(ROWS_MULTI, "x").tolerance, right_on=None)
    student = {c.kind: c for c in result_view(result).checks}
    assert student["weights_distribution"].status == "failed" and not student["weights_distribution"].withheld
    assert "N = 5, D = 6" in student["weights_distribution"].message


def test_a_shown_verdict_is_diagnosed_on_its_own_cases_alone():
    """Where a visible check's shown verdict locates its largest difference, or which mistake
    it names, is drawn from none of its cases shaped as a hidden one."""
    from grader.judging.checks import results_to_diagnose
    fn = parse(ROWS_MULTI, "hidden-twins.toml").functions[0]
    ctx = Context(SECRET_SEED, parse(ROWS_MULTI, "x").tolerance, {})
    grading = judge_computed(fn, ctx, computing(fn, ctx, mistake(fn, "no_scaling"), right_on=None))
    probes = grading.probes_of["weights_distribution"]
    results = [(p, Outcome("ok")) for p in probes]
    own = [(p, o) for p, o in results if "[" not in p.label]
    assert own and len(own) < len(results)
    assert results_to_diagnose(results, Verdict("failed", f"On {own[0][0].label}: ...")) == own
    assert results_to_diagnose(results, Verdict("failed", f"On {probes[-1].label}: ...")) == results
