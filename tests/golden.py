"""Golden verdicts for the fixture and sample notebooks: tests/fixtures/expected.json.

Each entry names a notebook, its assignment, any settings it is graded with, the result
status and score, and the status of
every check that is not `passed` (all others must pass), with words its message must contain.
`python tests/golden.py` prints the current verdicts in that form, for review before editing
the golden file by hand.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "fixtures" / "expected.json"


def load():
    return json.loads(EXPECTED.read_text())


def verdict(result) -> dict:
    return {"status": result.status, "score": result.score, "max_score": result.max_score,
            "not_passed": {c.name: c.status for c in result.checks if c.status != "passed"},
            "error_kinds": sorted({e.kind for e in result.errors}),
            "diagnoses": {c.name: c.diagnosis for c in result.checks if c.diagnosis}}


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from grading_helpers import ROOT, grade
    current = {}
    for entry in load():
        current[entry["path"]] = verdict(grade(ROOT / entry["path"], entry["assignment"], **entry.get("settings", {})))
    print(json.dumps(current, indent=1))
