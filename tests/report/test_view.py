"""The one visibility view: what a student, and what the staff, may see of a result, and
every rendering made from it (no kernel: a result built by hand)."""
import json

from grader.lms.entrypoints import PLATFORMS
from grader.report.html import render
from grader.result import CheckResult, ErrorRecord, GradeResult
from grader.report.terminal import summary
from grader.report.view import HIDDEN_NOTE, result_view

SECRET_MESSAGE = "On random N = 4, D = 6: largest difference 0.77 at index (2, 0)."
SECRET_DIAGNOSIS = "scores not scaled"
SECRET_ADVICE = "Divide the scores by sqrt(d_k) before the softmax."
SECRET_FIGURE = {"title": "attention weights", "case": "random N = 4", "student": [[0.123456]],
                 "expected": [[0.654321]]}


def example() -> GradeResult:
    result = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, checks=[
        CheckResult("f.fixed", "f", "fixed", "Sheet data", "failed", 0, 3, "Off by 2.86.",
                    diagnosis="softmax over the wrong axis"),
        CheckResult("f.random_shapes", "f", "random_shapes", "Random shapes", "failed", 0, 3, SECRET_MESSAGE,
                    diagnosis=SECRET_DIAGNOSIS, hidden=True, figures=[SECRET_FIGURE], advice=SECRET_ADVICE),
        CheckResult("f.dtypes", "f", "dtypes", "dtypes", "passed", 1, 1, "Fine on float32.", hidden=True),
        CheckResult("f.numerical_stability", "f", "numerical_stability", "Large scores", "info", 0, 0,
                    "Overflows on large scores.", diagnosis="softmax without max-subtraction overflows"),
    ])
    result.total()
    return result


def test_a_student_sees_of_a_hidden_check_only_its_name_title_status_and_points():
    shown = {c.name: c for c in result_view(example()).checks}
    hidden = shown["f.random_shapes"]
    assert (hidden.title, hidden.status, hidden.points, hidden.max_points) == ("Random shapes", "failed", 0, 3)
    assert (hidden.message, hidden.diagnosis, hidden.figures, hidden.withheld) == (HIDDEN_NOTE, None, [], True)
    assert shown["f.dtypes"].message == HIDDEN_NOTE
    assert shown["f.fixed"].message == "Off by 2.86." and not shown["f.fixed"].withheld


def test_the_staff_see_everything_and_their_json_is_the_result():
    result = example()
    view = result_view(result, staff=True)
    assert not any(c.withheld for c in view.checks)
    assert view.to_json() == result.to_json()
    assert ("f", SECRET_DIAGNOSIS) in view.likely_mistakes


def test_informational_checks_are_never_failures_or_mistakes():
    for staff in (False, True):
        view = result_view(example(), staff)
        assert "f.numerical_stability" not in [c.name for c in view.failures]
        assert all("overflows" not in mistake for _, mistake in view.likely_mistakes)


def test_no_rendering_for_students_shows_what_a_hidden_check_withholds():
    result = example()
    documents = {"terminal": summary(result), "html": render(result),
                 "json": json.dumps(result_view(result).to_json())}
    for name, platform in PLATFORMS.items():
        documents[name] = json.dumps(platform.render(result, "", 1.0, None))
    for where, text in documents.items():
        for secret in (SECRET_MESSAGE, SECRET_DIAGNOSIS, SECRET_ADVICE, "0.12", "0.65"):
            assert secret not in text, f"{where} shows {secret!r}"
        assert "softmax over the wrong axis" in text, where   # a visible check's diagnosis is shown
    staff = {"terminal": summary(result, staff=True), "html": render(result, staff=True)}
    for where, text in staff.items():
        assert SECRET_MESSAGE in text and SECRET_DIAGNOSIS in text and SECRET_ADVICE in text, where
    assert "0.12" in staff["html"], "the staff's report lacks the hidden check's heatmap"


def test_a_function_sums_its_checks_and_names_the_first_mistake_its_reader_may_see():
    result = example()
    result.checks[0].diagnosis = None   # the visible failure names no mistake; the hidden one does
    student, = result_view(result).by_function
    staff, = result_view(result, staff=True).by_function
    assert (student.name, student.points, student.max_points, student.passed) == ("f", 1, 7, False)
    assert student.main_mistake is None           # the hidden check's diagnosis stays hidden
    assert staff.main_mistake == SECRET_DIAGNOSIS
    assert len(staff.checks) == 4                  # the informational check belongs to it, with no points


def two_functions() -> GradeResult:
    advice = "Your weights are normalised down each column."
    checks = []
    for fn in ("f", "g"):
        checks += [CheckResult(f"{fn}.fixed", fn, "fixed", "Sheet data", "failed", 0, 3, f"{fn}: off by 2.86.",
                               diagnosis="softmax over the wrong axis", advice=advice),
                   CheckResult(f"{fn}.dtypes", fn, "dtypes", "dtypes", "failed", 0, 1, f"{fn}: off on float32.",
                               diagnosis="softmax over the wrong axis", advice=advice),
                   CheckResult(f"{fn}.inputs_unmodified", fn, "inputs_unmodified", "Inputs", "passed", 1, 1, "")]
    result = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, checks=checks,
                         errors=[ErrorRecord(
                             cell=4, kind="error", ename="NameError", evalue="name 'Q' is not defined",
                             traceback="\x1b[0;31mNameError\x1b[0m\nCell In[3], line 2\n      1 x = 1\n"
                                       "\x1b[0;32m----> 2\x1b[0m y = Q @ K\n", source="x = 1\ny = Q @ K")])
    result.total()
    return result


def test_the_terminal_groups_by_function_and_explains_each_mistake_once():
    text = summary(two_functions(), width=100)
    lines = text.splitlines()
    assert text.count("Your weights are normalised down each column.") == 1
    assert "the same mistake as in f" in text
    assert [line.split(":")[0] for line in lines if line and not line.startswith(" ")][1:3] == ["f", "g"]
    assert sum(1 for line in lines if line.lstrip().startswith("FAIL")) == 4   # one line per check
    assert "cell 5 (y = Q @ K): NameError" in text       # the notebook's own cell number and failing line
    closing = lines[lines.index(next(line for line in lines if line.startswith("Score:"))):]
    assert closing[0].startswith("Score: 2 / 10 points")
    assert any("Likely mistakes: f: softmax over the wrong axis; g: softmax over the wrong axis" in line
               for line in closing)
    assert any(line.startswith("Look first at: f (softmax over the wrong axis, 4 points lost)") for line in closing)
    assert "\x1b[" not in text


AXIS_ADVICE = "Your weights are normalised down each column."
SCALE_ADVICE = "Divide the scores by sqrt(d_k)."


def one_finding_said_twice() -> GradeResult:
    """Two mistakes made together, named as a pair by the checks that lost points; the
    informational check names one of the two (f), or the pair itself placed first (g), and h's
    names a finding of its own."""
    pair = "softmax over the wrong axis and scores not scaled"
    checks = []
    for fn, informational in (("g", (pair, f"{AXIS_ADVICE} {SCALE_ADVICE}")),
                              ("f", ("softmax over the wrong axis", AXIS_ADVICE)),
                              ("h", ("softmax without max-subtraction overflows", "Subtract each row's maximum."))):
        stability = CheckResult(f"{fn}.numerical_stability", fn, "numerical_stability", "Large scores", "info", 0, 0,
                                "NaN on large scores.", diagnosis=informational[0], advice=informational[1])
        fixed = CheckResult(f"{fn}.fixed", fn, "fixed", "Sheet data", "failed", 0, 3, "Off by 2.86.", diagnosis=pair,
                            advice=f"{AXIS_ADVICE} {SCALE_ADVICE}")
        checks += [stability, fixed] if fn == "g" else [fixed, stability]
    result = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, checks=checks)
    result.total()
    return result


def test_also_noticed_never_repeats_the_likely_mistake():
    """A 0-point check's finding that the likely mistake already names (the same mistake, or one
    of the pair) is not said again as "also noticed", in the report or in the terminal; one the
    likely mistake does not name still is."""
    view = result_view(one_finding_said_twice())
    assert [fn.mistakes for fn in view.by_function] == [
        [("softmax over the wrong axis and scores not scaled", f"{AXIS_ADVICE} {SCALE_ADVICE}", False)]] * 2 + [
        [("softmax over the wrong axis and scores not scaled", f"{AXIS_ADVICE} {SCALE_ADVICE}", False),
         ("softmax without max-subtraction overflows", "Subtract each row's maximum.", True)]]
    page = render(one_finding_said_twice())
    assert page.count("Also noticed") == 1 and "Also noticed (no points): softmax without max-subtraction" in page
    text = summary(one_finding_said_twice(), width=200)
    assert text.count(AXIS_ADVICE) == 1 and "softmax without max-subtraction overflows: Subtract" in text


def test_a_renamed_function_is_hinted_once_and_only_the_staff_read_of_aliases():
    missing = "Not implemented: no function named `f` is defined after running the notebook."
    result = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, checks=[
        CheckResult(f"f.{kind}", "f", kind, kind, "failed", 0, 1, missing) for kind in ("fixed", "dtypes")],
        functions={"f": {"found": False, "stub": False, "similar_names": ["F"]}})
    result.total()
    student, staff = summary(result, width=300), summary(result, staff=True, width=300)
    assert student.count("Did you mean `F`? Only a definition named `f` is graded: rename yours to `f`.") == 1
    assert "aliases" not in student and "aliases" not in render(result)
    assert staff.count('add aliases = ["F"] to `f`') == 1 and render(result, staff=True).count("aliases = [") == 1


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from grader.report.terminal import use_colour

    class Terminal:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Terminal(True)) and not use_colour(Terminal(False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Terminal(True))
    coloured = summary(two_functions(), colour=True)
    assert "\x1b[31mFAIL" in coloured and "\x1b[32mok" in coloured


def test_the_lms_texts_name_the_mistake_per_function_and_no_file_a_student_cannot_open():
    for name, platform in PLATFORMS.items():
        shown = platform.render(two_functions(), "", 1.0, None)
        text = json.dumps(shown)
        assert "report.html" not in text and "results.json" not in text, name
        assert text.count("Your weights are normalised down each column.") >= 1, name
        assert "cell 5 (y = Q @ K)" in shown["output"], name


def test_a_student_sees_no_seed_but_the_public_one():
    from grader.settings import PUBLIC_SEED
    grading = example()
    grading.seed = 2 ** 127 + 12345   # a grading seed: it would tell the grading's inputs
    documents = {"terminal": summary(grading), "html": render(grading),
                 "json": json.dumps(result_view(grading).to_json())}
    for name, platform in PLATFORMS.items():
        documents[name] = json.dumps(platform.render(grading, "", 1.0, None))
    for where, text in documents.items():
        assert str(grading.seed) not in text, f"{where} shows the grading seed"
    assert result_view(grading).seed is None
    assert str(grading.seed) in summary(grading, staff=True) and str(grading.seed) in render(grading, staff=True)
    checking = example()
    checking.seed = PUBLIC_SEED   # `grader check`: students may replay what they see
    assert f"seed {PUBLIC_SEED}" in summary(checking) and f"--seed {PUBLIC_SEED}" in render(checking)


def test_a_visible_check_showing_a_hidden_case_is_withheld_from_students():
    """The guard behind the rule that checks share no case across the hidden line
    (tests/judging/test_hidden_cases.py): were a visible check ever given a hidden check's case, its
    label's mark would withhold what it says from students."""
    from grader.result import HIDDEN_CASE_MARK
    result = example()
    leaked = dict(SECRET_FIGURE, case=f"random N = 4 {HIDDEN_CASE_MARK}")
    result.checks.append(CheckResult("f.weights_distribution", "f", "weights_distribution", "Weights", "failed", 0, 1,
                                     f"On random N = 4 {HIDDEN_CASE_MARK}: row 0 sums to 2.", figures=[leaked]))
    student = {c.name: c for c in result_view(result).checks}["f.weights_distribution"]
    assert student.withheld and student.figures == [] and student.message == HIDDEN_NOTE
    assert "0.65" not in render(result) and "sums to 2" not in summary(result)
    assert "sums to 2" in summary(result, staff=True)


def test_the_feedback_line_for_an_lms_says_only_what_a_student_may_see():
    from grader.grade import not_graded
    from grader.report.view import student_feedback_line
    result = example()
    result.seed = 2 ** 127 + 12345
    line = student_feedback_line(result)
    assert line == "Autograded 1 / 7. Likely mistakes: f: softmax over the wrong axis."
    assert student_feedback_line(result.to_json()) == line   # a batch's row, as result.json holds it
    for secret in (SECRET_DIAGNOSIS, SECRET_MESSAGE, SECRET_ADVICE, str(result.seed)):
        assert secret not in line
    broken = not_graded("hw.ipynb", "rows", 5, "unreadable", "SubmissionError", "hw.ipynb is not a notebook: no cells")
    assert student_feedback_line(broken) == "Not graded: hw.ipynb is not a notebook: no cells"


def test_a_process_compiles_the_report_template_once_and_each_reader_still_gets_their_own_page():
    from grader.report.html import _environment
    first = render(example())
    template = _environment().get_template("report.html.j2")
    staff = render(example(), staff=True)
    assert _environment().get_template("report.html.j2") is template
    assert render(example()) == first and SECRET_MESSAGE not in first and SECRET_MESSAGE in staff


def test_a_visible_check_showing_a_case_shaped_as_a_hidden_one_is_withheld_but_keeps_its_verdict():
    """A visible case with a hidden case's label and shapes (its values its own) reads to a
    student as the hidden case (tests/judging/test_hidden_twins.py): what names it is withheld, with a
    note of its own, and the check's status and points stay."""
    from grader.report.view import SHAPED_AS_HIDDEN_NOTE
    from grader.result import SHAPED_AS_HIDDEN_MARK
    result = example()
    twin = dict(SECRET_FIGURE, case=f"random N = 4 {SHAPED_AS_HIDDEN_MARK}")
    result.checks.append(CheckResult("f.weights_distribution", "f", "weights_distribution", "Weights", "failed", 0, 1,
                                     f"On random N = 4 {SHAPED_AS_HIDDEN_MARK}: row 0 sums to 2.", figures=[twin]))
    student = {c.name: c for c in result_view(result).checks}["f.weights_distribution"]
    assert (student.status, student.points, student.hidden) == ("failed", 0, False)
    assert student.withheld and student.figures == [] and student.message == SHAPED_AS_HIDDEN_NOTE
    assert "random N = 4" not in render(result) and "sums to 2" not in summary(result)
    assert "sums to 2" in summary(result, staff=True)


def test_a_share_of_a_check_shows_to_two_decimals_in_every_rendering():
    """6 of 11 gradients right earns 6/11 of a check: every place a person reads points says
    1.64 (report/view.py's shown), never 1.63636; the gradebooks keep the score itself."""
    from grader.report.view import student_feedback_line
    result = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, checks=[
        CheckResult("f.fixed", "f", "fixed", "Sheet data", "failed", 3 * 6 / 11, 3, "dq, dk wrong.")])
    result.total()
    documents = {"terminal": summary(result), "html": render(result), "feedback line": student_feedback_line(result)}
    for name, platform in PLATFORMS.items():   # their words; their score fields are the gradebook's
        documents[name] = " ".join(_words(platform.render(result, "", 1.0, None)))
    for where, text in documents.items():
        assert "1.64" in text and "1.636" not in text, where
    assert round(result.to_json()["score"], 4) == 1.6364   # kept as scored, not as shown


def _words(data) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        data = list(data.values())
    return [w for item in data for w in _words(item)] if isinstance(data, list) else []
