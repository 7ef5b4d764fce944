"""The one shape of "could not grade": whatever stopped a submission from being graded (an
unreadable file in a batch, no notebook in an LMS folder, a fault in the grader), the result
names the assignment and has its checks, so every row of a class has the same maximum."""
from grader.grade import not_graded
from grader.result import GradeResult
from grader.course.spec import load_assignment, parse


def test_not_graded_keeps_the_assignment_and_its_maximum():
    rows = load_assignment("rows")
    result = not_graded("hw.ipynb", rows, 7, "unreadable", "SubmissionError", "not valid JSON (line 1)\nmore")
    assert (result.assignment, result.seed, result.status) == ("rows", 7, "error")
    assert result.score == 0 and result.max_score == 25
    assert {c.status for c in result.checks} == {"error"}
    assert all(c.message == "Not graded: not valid JSON (line 1)" for c in result.checks)   # first line only
    (error,) = result.errors
    assert error.not_graded and error.evalue == "not valid JSON (line 1)\nmore" and error.cell == -1
    assert GradeResult.from_json(result.to_json()) == result


def test_a_course_spec_is_named_by_its_name_not_its_path(tmp_path):
    spec = parse('name = "week-3"\n[[functions]]\nname = "self_attention"\nconvention = "rows_single"\n',
                 str(tmp_path / "course.toml"))
    assert not_graded("hw.ipynb", spec, 1, "grader_error", "GraderError", "boom").assignment == "week-3"


def test_without_an_assignment_there_are_no_checks():
    result = not_graded("(no submission)", "course.toml", 0, "grader_error", "GraderError", "not valid TOML")
    assert result.checks == [] and result.max_score == 0 and result.assignment == "course.toml"
