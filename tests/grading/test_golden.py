"""Every fixture and sample notebook, graded through a real kernel, against its golden verdict."""
import json
import re

import jsonschema
import pytest

from grading_helpers import ROOT, grade, sandbox_processes
from golden import load
from grader.result import GradeResult

pytestmark = pytest.mark.slow

ENTRIES = load()

# Error kinds that depend on the machine, not the notebook: on a busy machine the kernel's own
# output queue may drop the flood's oversized message before the grader could see it, and
# then there is no output_flood to record. Either way the grade must be the same. (Its flooding
# cell does seconds of work, 800 MB through the kernel's serializer: its entry gives it a cell
# timeout of a minute, so that a busy machine cannot turn that work into a timeout. Likewise the
# notebooks whose cell ignores its interrupt: the kernel is stopped after a grace and the
# notebook run again, all within the notebook's time, which their entries make five minutes.)
MACHINE_DEPENDENT_KINDS = {"hostile_message_flood.ipynb": {"output_flood"}}


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["path"].split("/")[-1] for e in ENTRIES])
def test_golden_verdict(entry, golden_graded):
    result = grade(ROOT / entry["path"], entry["assignment"], **entry.get("settings", {}))
    checks = {c.name: c for c in result.checks}
    # On a failure, what went wrong in the grading: the status alone does not say.
    assert result.status == entry["status"], [(e.kind, e.cell, e.evalue) for e in result.errors]
    assert result.score == pytest.approx(entry["score"])
    assert result.max_score == pytest.approx(entry["max_score"])
    optional = MACHINE_DEPENDENT_KINDS.get(entry["path"].split("/")[-1], set())
    kinds = {e.kind for e in result.errors}
    assert sorted(kinds - optional) == sorted(set(entry["error_kinds"]) - optional)
    for name, check in checks.items():
        assert check.status == entry["not_passed"].get(name, "passed"), f"{name}: {check.message}"
    assert set(entry["not_passed"]) <= set(checks)
    assert {c.name: c.diagnosis for c in result.checks if c.diagnosis} == entry["diagnoses"]
    for name, words in entry["messages"].items():
        said = f"{checks[name].message} {checks[name].advice}"   # what it saw, and what that means
        assert words in said, f"{name}: {said}"
    for check in result.checks:
        said = f"{check.message} {check.advice}"
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", said) if s]
        assert len(sentences) == len(set(sentences)), f"{check.name} repeats itself: {said}"
        assert not ("at index" in said and "largest difference is at" in said), f"{check.name} locates twice: {said}"
    assert sandbox_processes() == [], "a process of the submission is still running"


RESULT_SCHEMA = json.loads((ROOT / "tests" / "schemas" / "result.json").read_text())


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["path"].split("/")[-1] for e in ENTRIES])
def test_golden_result_reads_back_unchanged_and_matches_the_schema(entry, golden_graded):
    """result.json, `--json` and the LMS results are the result's JSON: read back through the
    typed model, each golden result's JSON is the same text, key order included."""
    data = grade(ROOT / entry["path"], entry["assignment"], **entry.get("settings", {})).to_json()
    text = json.dumps(data)
    jsonschema.validate(json.loads(text), RESULT_SCHEMA)
    assert json.dumps(GradeResult.from_json(json.loads(text)).to_json()) == text
