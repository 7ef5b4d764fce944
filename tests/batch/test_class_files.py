"""grader/batch/class_files.py: the gradebook column an LMS imports, given once and kept for
the runs after it, and the assignment's full marks."""
from grader.batch.class_files import LMS_COLUMN, assignment_max, lms_column
from grader.course.spec import load_assignment


def test_the_lms_column_given_once_is_kept_for_later_runs(tmp_path):
    rows = load_assignment("rows")
    assert lms_column(tmp_path, None, rows) == (rows.title or rows.name)   # none given: the title
    assert lms_column(tmp_path, "Homework 3 (1234)", rows) == "Homework 3 (1234)"
    assert lms_column(tmp_path, None, rows) == "Homework 3 (1234)"          # a later run, say with overrides
    (tmp_path / LMS_COLUMN).write_text("[not a column]")
    assert lms_column(tmp_path, None, rows) == (rows.title or rows.name)   # a damaged file is not trusted


def test_full_marks_are_every_function_s_points():
    assert assignment_max(load_assignment("rows")) == 25   # the built-in rows sheet: 25 points, in grades.csv
