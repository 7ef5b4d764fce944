"""The one shape of "could not grade": whatever stopped a submission from being graded (an
unreadable file in a batch, no notebook in an LMS folder, a fault in the grader), the result
names the assignment and has its checks, so every row of a class has the same maximum."""
import json

import jsonschema
import pytest

from grader.grade import not_graded
from grader.result import CheckResult, ErrorRecord, GradeResult, ResultFormatError
from grader.course.spec import load_assignment, parse
from grading_helpers import ROOT


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


SCHEMA = json.loads((ROOT / "tests" / "schemas" / "result.json").read_text())


def every_field_result() -> GradeResult:
    """A result with every key the model can write, each optional one included."""
    checks = [CheckResult("f.fixed", "f", "fixed", "Sheet data", "failed", 0, 3, "off by 2.", diagnosis="no scaling",
                          hidden=True, figures=[{"case": "sheet", "student": [[0.5, 0.5]]}], advice="divide"),
              CheckResult("f.dtypes", "f", "dtypes", "dtypes", "info", 0.0, 0, "float32 drifts")]
    errors = [ErrorRecord(3, "kernel_died", "KernelDied", "gone", "tb", "import os", kernel_lost=True),
              ErrorRecord(-1, "bad_reply", "BadReply", "malformed")]
    result = GradeResult(
        "hw.ipynb", "rows", 7, status="error", checks=checks, errors=errors,
        policy={"forbidden": ["torch"], "findings": [{"source": "static", "module": "torch", "cell": 1,
                                                      "cell_number": 2, "line": 2},
                                                     {"source": "static", "module": "grader", "cell": 1,
                                                      "cell_number": 2, "line": 3, "kind": "grader_import"},
                                                     {"source": "runtime", "module": "torch"}],
                "level": "full", "penalty": "zero_function"},
        functions={"f": {"found": True, "name": "f", "params": ["X"], "globals": {"D": "6"}, "modules": ["numpy"],
                         "stub": False, "non_answer": False, "smallest_failing": {"case": "N = 1", "code": "f(1)",
                                                                      "globals": {"Wq": "np.array([[1.0]])"}},
                         "called_by_keyword": True},
                   "g": {"found": False, "stub": False,
                         "defining_cell_failed": {"cell": 4, "cell_number": 5, "line": None, "ename": "SyntaxError",
                                                  "evalue": "bad"}}},
        timing={"execution": 1.5, "probing": 0.25, "output_characters": 10, "grader_cells": [2],
                "grader_cell_numbers": [3], "total": 2.0},
        isolation={"level": "partial", "active": ["landlock"], "missing": ["network namespace"],
                   "kernel_start": "forked", "leftover_processes_killed": 1, "background_processes_stopped": 0},
        metadata_assignment="columns")
    result.total()
    return result


def test_every_field_of_a_result_reads_back_exactly_and_matches_its_schema():
    data = every_field_result().to_json()
    jsonschema.validate(data, SCHEMA)
    text = json.dumps(data)
    assert json.dumps(GradeResult.from_json(json.loads(text)).to_json()) == text   # key order included
    assert GradeResult.from_json(data) == every_field_result()


def test_keys_beside_the_contract_are_ignored_and_an_older_results_absent_keys_read():
    """A batch's row adds keys of its own; a not-graded result has no penalty, timing or isolation."""
    data = not_graded("hw.ipynb", load_assignment("rows"), 7, "unreadable", "SubmissionError", "no JSON").to_json()
    row = dict(data, student="111", batch_key="k", graded_at=1.5, override={"score": 3, "reason": "r"})
    assert GradeResult.from_json(row).to_json() == data
    assert "penalty" not in data["policy"] and data["timing"] == {} and data["isolation"] == {}
    jsonschema.validate(data, SCHEMA)


def test_every_cell_a_result_names_is_also_numbered_from_1_as_the_messages_number_it():
    """`cell` stays the 0-based index the LMS results and gradebooks read; `cell_number` beside
    it is the number a student finds in the notebook and in every message."""
    from grader.grade import failed_definition
    from grader.intake.source_scan import scan
    from grader.report.view import where
    error = ErrorRecord(1, "error", "SyntaxError", "unmatched ')'", source="def self_attention(X):")
    assert error.to_json()["cell"] == 1 and error.to_json()["cell_number"] == 2
    assert where(error).startswith("cell 2")
    assert ErrorRecord(-1, "bad_reply", "BadReply", "malformed").to_json()["cell_number"] is None
    placed = ErrorRecord(-1, "error", "NameError", "x")
    placed.cell = 5   # as the runner places a cell's error once it knows the cell
    assert placed.to_json()["cell_number"] == 6
    rows = load_assignment("rows")
    parsed = scan([(0, "import numpy as np"), (1, "def self_attention(X, Wq, Wk, Wv):\n    return X)\n")],
                  {"self_attention"})
    failure = failed_definition(rows.functions[0], parsed, [error])
    assert failure is not None and (failure["cell"], failure["cell_number"]) == (1, 2)
    # A stored cell_number is never trusted over the index it is made from.
    data = every_field_result().to_json()
    data["errors"][0]["cell_number"] = 99
    assert GradeResult.from_json(data).errors[0].cell_number == 4
    jsonschema.validate(every_field_result().to_json(), SCHEMA)


@pytest.mark.parametrize("damage, where", [
    (lambda d: d.update(score="25"), "result.score"),
    (lambda d: d.update(status="passed"), "result.status"),
    (lambda d: d.update(checks="none"), "result.checks"),
    (lambda d: d["checks"][1].pop("points"), "result.checks[1] has no points"),
    (lambda d: d["checks"][0].update(hidden="yes"), "result.checks[0].hidden"),
    (lambda d: d["errors"][0].update(kind="ok"), "result.errors[0].kind"),
    (lambda d: d["errors"][0].update(cell=True), "result.errors[0].cell"),
    (lambda d: d["policy"].pop("level"), "result.policy has no level"),
    (lambda d: d["policy"]["findings"][0].update(source="kernel"), "result.policy.findings[0].source"),
    (lambda d: d["functions"]["f"].update(globals={"D": 6}), "result.functions.f.globals.D"),
    (lambda d: d["functions"]["g"].pop("found"), "result.functions.g has no found"),
    (lambda d: d["timing"].update(total=None), "result.timing.total"),
    (lambda d: d["isolation"].update(active="landlock"), "result.isolation.active"),
    (lambda d: d.pop("submission"), "result has no submission"),
])
def test_a_damaged_result_is_refused_in_one_line_saying_where(damage, where):
    data = every_field_result().to_json()
    damage(data)
    with pytest.raises(ResultFormatError) as refused:
        GradeResult.from_json(data)
    assert str(refused.value).startswith(where) and "\n" not in str(refused.value)


@pytest.mark.parametrize("data", [None, [], "result", 3])
def test_a_result_that_is_not_an_object_is_refused(data):
    with pytest.raises(ResultFormatError):
        GradeResult.from_json(data)


def test_not_graded_is_said_by_the_errors_kinds():
    graded = every_field_result()
    assert not graded.not_graded and not any(e.not_graded for e in graded.errors)
    failed = not_graded("hw.ipynb", "rows", 1, "grader_error", "GraderError", "boom")
    assert failed.not_graded and failed.errors[0].not_graded
