"""A function whose defining cell failed (it does not parse, it raised before its `def` ran,
its import failed) says once, at the function, which cell failed and why, and each of its
checks only that its defining cell failed; the cell's number is the same in result.json, the
terminal, the HTML report and both LMS results. Notebooks: tests/make_defining_cell_fixtures.py."""
import html
import json
import re

import pytest

from grading_helpers import FIXTURES, grade
from grader.grade import failed_definition
from grader.lms.entrypoints import PLATFORMS
from grader.report.html import render
from grader.result import ErrorRecord
from grader.course.spec import load_assignment
from grader.intake.source_scan import scan
from grader.report.terminal import summary
from grader.report.view import student_feedback_line

NOTEBOOKS = FIXTURES / "defining_cell"
CHECK_MESSAGE = "Not graded: its defining cell, cell 5, failed."
# What the function says once, per notebook: the fifth cell of the notebook (a markdown cell
# comes first) is its index 4.
REASONS = {
    "syntax_error": "cell 5, line 6: SyntaxError: invalid syntax",
    "name_error_before_def": "cell 5, line 1: NameError: name 'use_float64' is not defined",
    "failing_import": "cell 5, line 1: ModuleNotFoundError: No module named 'attention_types'",
    "decorator_from_missing_package": "cell 5, line 1: ModuleNotFoundError: No module named 'attention_speedups'",
    "raises_keyboard_interrupt": "cell 5, line 1: KeyboardInterrupt: ",
}
# Said once, with the cell's error among the notebook's problems: what Python left undefined.
NOT_RUN = "(Python ran nothing after line 1 of this cell, so `self_attention` is not defined)"


def _plain(report: str) -> str:
    """The text a reader of the HTML report sees."""
    return html.unescape(re.sub(r"<[^>]+>", " ", report))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REASONS))
def test_the_function_says_once_which_cell_failed_and_its_checks_only_that_it_failed(name, tmp_path):
    result = grade(NOTEBOOKS / f"{name}.ipynb", "rows")
    reason = REASONS[name]
    self_attention = [c for c in result.checks if c.function == "self_attention"]
    multi_head = [c for c in result.checks if c.function == "multi_head_attention"]
    assert self_attention and all(c.message == CHECK_MESSAGE and c.points == 0 for c in self_attention)
    assert {c.status for c in self_attention} == {"failed", "info"}
    # multi_head_attention, defined in a cell of its own, is graded as usual: full marks.
    assert all(c.status == "passed" for c in multi_head)
    assert result.score == pytest.approx(sum(c.max_points for c in multi_head))

    result.write_json(tmp_path / "result.json")
    stored = json.loads((tmp_path / "result.json").read_text())
    failure = stored["functions"]["self_attention"]["defining_cell_failed"]
    assert failure["cell"] == 4 and any(e["cell"] == 4 for e in stored["errors"])
    if name != "syntax_error" and name != "name_error_before_def":
        [cell_error] = [e for e in stored["errors"] if e["cell"] == 4]
        assert cell_error["evalue"].endswith(NOT_RUN) and json.dumps(stored).count("Python ran nothing") == 1
    assert all(c["message"] == CHECK_MESSAGE for c in stored["checks"] if c["function"] == "self_attention")

    documents = {"terminal": summary(result), "staff terminal": summary(result, staff=True),
                 "report.html": _plain(render(result))}
    for platform in ("gradescope", "prairielearn"):
        documents[platform] = PLATFORMS[platform].render(result, "", 1.0, load_assignment("rows"))
    for where in ("terminal", "staff terminal", "report.html"):
        text = " ".join(documents[where].split())   # the terminal wraps long lines
        assert text.count(reason) == 1, f"{where}: {documents[where]}"
        assert text.count(CHECK_MESSAGE) == len(self_attention), where
        assert "no function named" not in text, where
    gradescope, prairielearn = documents["gradescope"], documents["prairielearn"]
    assert _plain(gradescope["output"]).count(reason) == 1
    assert prairielearn["output"].count(reason) == 1
    for shown in ([t["output"] for t in gradescope["tests"] if t["name"].startswith("self_attention.")],
                  [t["message"] for t in prairielearn["tests"] if t["name"].startswith("self_attention.")]):
        assert shown and all(CHECK_MESSAGE in text for text in shown)
    assert "no function named" not in json.dumps([gradescope, prairielearn])
    # The comment beside the grade in Canvas and Moodle (grader/batch/gradebook.py) says it too.
    assert student_feedback_line(stored).count(reason) == 1


def test_the_cells_that_define_a_function_are_found_whether_or_not_they_parse():
    cells = [(1, "import numpy as np"), (3, "def self_attention(X):\n    return X @"),
             (4, "if flag:\n    def multi_head_attention(X, H):\n        return X"),
             (6, "def helper():\n    pass")]
    found = scan(cells, {"self_attention", "multi_head_attention"})
    assert found.definers == {"self_attention": [3], "multi_head_attention": [4]}
    assert found.unparsable == {3: (2, "SyntaxError", "invalid syntax")}


def test_a_cell_that_does_not_parse_is_described_by_the_grader_not_by_what_the_kernel_said():
    """The kernel's report of a cell's error may be forged; where the grader's own parse of
    the notebook finds the cell is not Python, that is what the function says."""
    assignment = load_assignment("rows")
    fn = next(f for f in assignment.functions if f.name == "self_attention")
    found = scan([(4, "def self_attention(X, Wq, Wk, Wv):\n    return = X\n")], set(fn.names))
    forged = ErrorRecord(4, "error", "MemoryError", "the grader is out of memory", traceback="----> 9 whatever")
    failure = failed_definition(fn, found, [forged])
    assert failure == {"cell": 4, "cell_number": 5, "line": 2, "ename": "SyntaxError", "evalue": "invalid syntax"}


def test_the_error_of_the_last_failed_defining_cell_is_the_reason_without_its_note():
    """Nothing after a cell's failing statement runs: its one error is the reason, told
    without the note of what it left undefined (said once, with the cell's problem)."""
    assignment = load_assignment("rows")
    fn = next(f for f in assignment.functions if f.name == "self_attention")
    source = "from attention_types import Matrix\n\ndef self_attention(X: Matrix, Wq, Wk, Wv):\n    return X\n"
    found = scan([(2, source), (6, source)], set(fn.names))
    errors = [ErrorRecord(2, "error", "ModuleNotFoundError", "old"),
              ErrorRecord(6, "error", "ModuleNotFoundError",
                          "No module named 'attention_types' (Python ran nothing after line 1 of this cell, so "
                          "`self_attention` is not defined)", traceback="----> 1 from attention_types import Matrix")]
    assert failed_definition(fn, found, errors) == {"cell": 6, "cell_number": 7, "line": 1,
                                                    "ename": "ModuleNotFoundError",
                                                    "evalue": "No module named 'attention_types'"}
    assert failed_definition(fn, found, [ErrorRecord(3, "error", "NameError", "x")]) is None


def test_a_definition_named_like_a_missing_graded_function_and_called_as_it_is_suggested():
    """Case, underscores and a slip or two of the graded name, with parameters the convention
    can pass (or, for a class, its graded method); never another graded function, nor a name
    merely sharing a word."""
    from grader.intake.source_scan import renamed_candidates
    source = ("def selfAttention(X, Wq, Wk, Wv):\n    return X\n"
              "def Self_Atention(X, Wq, Wk, Wv, scale=True):\n    return X\n"
              "def self_attention_(X):\n    return X\n"            # too few parameters
              "def attention(X, Wq, Wk, Wv):\n    return X\n"        # another name, not a rename
              "def multihead_attention(X, Wq, Wk, Wv, H):\n    return X\n"
              "class MultiHeadAtention:\n    def forward(self, X):\n        return X\n")
    graded = {"self_attention", "multi_head_attention", "multihead_attention"}
    found = scan([(2, source)], graded)
    assert renamed_candidates(found, "self_attention", graded, 4) == ["selfAttention", "Self_Atention"]
    assert renamed_candidates(found, "multi_head_attention", graded, 5) == []   # multihead_attention is graded too
    assert renamed_candidates(found, "MultiHeadAttention", {"MultiHeadAttention"}, 1, "forward") == \
        ["MultiHeadAtention"]
    assert renamed_candidates(found, "MultiHeadAttention", {"MultiHeadAttention"}, 1, "__call__") == []


@pytest.mark.slow
def test_a_renamed_function_is_not_graded_and_did_you_mean_is_said_once():
    """`selfAttention`, correct and with the same parameters, is not graded as `self_attention`:
    every check says it is not implemented, the function says once "did you mean
    `selfAttention`?", and only the staff read how to grade it under its name (`aliases`)."""
    result = grade(NOTEBOOKS / "renamed.ipynb", "rows")
    assert result.functions["self_attention"]["similar_names"] == ["selfAttention"]
    assert all(c.points == 0 and c.message.startswith("Not implemented") for c in result.checks
               if c.function == "self_attention")
    student, staff = summary(result, width=200), summary(result, staff=True, width=200)
    for text in (student, staff, _plain(render(result)), _plain(render(result, staff=True))):
        assert text.count("Did you mean `selfAttention`?") == 1, text
    assert "aliases" not in student and "aliases" not in _plain(render(result))
    assert 'add aliases = ["selfAttention"] to `self_attention`' in " ".join(staff.split())


def test_a_kernel_cannot_say_a_defining_cell_failed():
    """`defining_cell_failed` is the grader's finding alone: a description of the functions
    that carries one (a replaced harness) is not believed."""
    from grader.kernel.replies import describe_reply
    forged = {"functions": {"self_attention": {"found": False, "defining_cell_failed": {
        "cell": "<script>", "line": 1, "ename": "x", "evalue": "y"}}}, "imported": []}
    described = describe_reply(forged, ["self_attention"])
    assert "defining_cell_failed" not in described["functions"]["self_attention"]


@pytest.mark.slow
def test_the_report_in_a_real_browser_says_it_at_the_function_with_the_problems_cell_number(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from grading_helpers import chromium_path
    from grader.report.html import write_html
    from grading_helpers import LAUNCH_ARGS
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    write_html(grade(NOTEBOOKS / "syntax_error.ipynb", "rows"), tmp_path / "report.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page()
        page.goto((tmp_path / "report.html").as_uri())
        function = page.inner_text("section#self_attention")
        whole = page.inner_text("body")
        browser.close()
    assert function.count(REASONS["syntax_error"]) == 1 and whole.count(REASONS["syntax_error"]) == 1
    assert "cell 5 (def self_attention(X, Wq, Wk, Wv):): SyntaxError" in whole   # the problems list
