"""The grader's own check cells (`%load_ext grader`, `%grade`, as the README tells students to
write them) are left out of a grading and never counted as the student's problem; anything
else, even beside them in a cell, is the student's code and runs."""
import json

import pytest

from grading_helpers import SUBMISSIONS, grade
from grader.intake.own_cells import grader_lines, is_grader_cell, without_grader_lines
from grader.report.html import render, timing_text

README_CELL = "%load_ext grader\n%grade"


@pytest.mark.parametrize("source", [
    README_CELL,
    "%load_ext attention_grader\n%grade",
    "%grade my_notebook.ipynb",
    "  %grade --assignment columns  ",
    "# check my work before submitting\n%load_ext grader\n\n%grade --assignment course.toml\n",
    "import grader; grader.check()",                         # the README's Python form
    "import grader\ngrader.check()",
    "import attention_grader\nattention_grader.check('my_notebook.ipynb')",
])
def test_the_readmes_check_cells_are_the_graders_own(source):
    assert is_grader_cell(source)
    assert all(line.startswith("#") or not line.strip() for line in without_grader_lines(source).splitlines())


@pytest.mark.parametrize("source", [
    "%load_ext grader\nW = 3",                               # student code beside it
    "%grade {__import__('os').system('true')}",              # IPython evaluates {…} before the magic runs
    "%grade $answer",                                        # and $name
    "%grade; x = 1",
    "%load_ext graderx",
    "%load_ext autoreload\n%autoreload 2",
    "x = '''\n%grade\n'''",                                  # a string's text, not a line of the cell
    "if True:\n    %grade",                                  # inside a block
    "%%capture\n%grade",                                     # the body of a cell magic
    "%load_ext grader\ndef f(:\n    pass",                   # the cell does not parse: run as it is
    "import grader",                                         # an import alone: the static scan's business
    "grader.check()",                                        # a `grader` of the student's own
    "import grader as g; g.check()",
    "import grader; x = grader.reference",
    "import grader\ngrader.check(open('answers.txt').read())",  # code in its arguments
    "def f():\n    import grader\n    grader.check()",
    "",
])
def test_anything_else_is_the_students(source):
    assert not is_grader_cell(source)


def test_a_mixed_cell_keeps_its_code_and_its_line_numbers():
    source = "%load_ext grader\nW = 3\n%grade\ny = '''\n%grade\n'''"
    assert grader_lines(source) == [0, 2]
    assert without_grader_lines(source) == "# %load_ext grader\nW = 3\n# %grade\ny = '''\n%grade\n'''"
    assert without_grader_lines("W = 3") == "W = 3"


def test_the_timing_line_names_the_cells_left_out():
    assert "left out cell 13: the grader's own" in timing_text({"execution": 1.0, "grader_cells": [12]})
    assert "left out cells 3, 9: the grader's own" in timing_text({"grader_cells": [2, 8]})
    assert "left out" not in timing_text({"execution": 1.0})


def with_cells(tmp_path, *sources, name="kept.ipynb"):
    """The worked solution with the given code cells after it, as a student's saved file."""
    nb = json.loads((SUBMISSIONS / "worked_solution.ipynb").read_text())
    for i, source in enumerate(sources):
        nb["cells"].append({"cell_type": "code", "id": f"added-{i}", "metadata": {}, "execution_count": None,
                            "outputs": [], "source": source})
    path = tmp_path / name
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.slow
def test_a_notebook_that_keeps_the_readmes_cells_is_graded_without_them(tmp_path):
    """Official grading (the secret seed, the staff view) of the worked solution with the
    README's cell at the top and at the end: full marks, no problem listed, and the report's
    timing line says which cells were left out."""
    nb = json.loads((SUBMISSIONS / "worked_solution.ipynb").read_text())
    first = {"cell_type": "code", "id": "check-top", "metadata": {}, "execution_count": None, "outputs": [],
             "source": README_CELL}
    nb["cells"].insert(1, first)
    nb["cells"].append(dict(first, id="check-end", source="%load_ext grader\n%grade --assignment rows"))
    path = tmp_path / "kept.ipynb"
    path.write_text(json.dumps(nb))
    result = grade(path, "rows", seed=987654)
    assert result.errors == []
    assert result.full_marks
    assert result.timing["grader_cells"] == [1, len(nb["cells"]) - 1]
    for staff in (False, True):
        page = render(result, staff=staff)
        assert "Problems while running the notebook" not in page
        assert f"left out cells 2, {len(nb['cells'])}: the grader&#39;s own" in page


@pytest.mark.slow
def test_the_students_code_beside_the_graders_lines_runs(tmp_path):
    """A cell that starts with the grader's lines and goes on with the student's code runs
    that code (its error is the student's, on the line they see), and the grader's lines in it
    are never a problem."""
    path = with_cells(tmp_path, "%load_ext grader\nraise ValueError('the student code ran')\n%grade")
    result = grade(path, "rows")
    assert [(e.cell, e.ename, e.evalue) for e in result.errors] == [(12, "ValueError", "the student code ran")]
    assert "line 2" in result.errors[0].traceback
    assert "grader_cells" not in result.timing


@pytest.mark.slow
def test_the_readmes_python_form_is_left_out_and_never_a_finding(tmp_path):
    """`import grader; grader.check()`, the README's other form, is the grader's own cell too:
    not run (so no ImportError), and no "imports the grader" policy finding; `import grader`
    with anything else still is one."""
    path = with_cells(tmp_path, "import grader; grader.check()")
    result = grade(path, "rows")
    assert result.errors == [] and result.full_marks
    assert not [f for f in result.policy["findings"] if f.get("kind") == "grader_import"]
    other = with_cells(tmp_path, "import grader\nprint(grader.__file__)", name="other.ipynb")
    assert [f for f in grade(other, "rows").policy["findings"] if f.get("kind") == "grader_import"]


def test_the_graders_lines_in_letters_python_reads_as_the_same_are_still_the_graders():
    """Python reads an identifier in its NFKC form: `import ｇrader` imports grader, so a cell
    without the letters "grade" is not thereby free of the grader's lines."""
    source = "import \uff47rader; \uff47rader.check()"
    assert grader_lines(source) == grader_lines("import grader; grader.check()") == [0]
