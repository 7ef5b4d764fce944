"""The staff choose the assignment: in `grade` and `lms` a notebook's metadata can neither
pick an easier built-in nor load a spec file of its own; `check` follows it only to a
built-in. Each attack is graded against the staff's assignment, and the request is recorded."""
import csv
import json

import nbformat

import pytest

from grading_helpers import SAMPLES, SUBMISSIONS, run_grader
from grading_helpers.lms_entrypoints import run_entrypoint

pytestmark = pytest.mark.slow

FAST = ["--cell-timeout", "4", "--call-timeout", "2"]
# A spec a student might upload beside the notebook: huge points and tolerances, no limits.
GENEROUS = ('name = "mine"\n[tolerance]\nrtol = 1e9\natol = 1e9\n[policy]\nforbidden = []\n'
            '[[functions]]\nname = "apply_softmax"\nconvention = "softmax_rows"\n'
            '[functions.points]\nrandom_shapes = 1000\n')


def _asking_for(tmp_path, request: str, source=SAMPLES / "two_head_sheet_002.ipynb"):
    nb = nbformat.read(source, as_version=4)
    nb.metadata["grader"] = {"assignment": request}
    path = tmp_path / "hw.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "mine.toml").write_text(GENEROUS)
    return path


def _graded(tmp_path, path, *extra):
    out = tmp_path / "out"
    code, _, err, _ = run_grader(["grade", path, "-o", out, *FAST, *extra], cwd=tmp_path)
    assert code == 0, err
    (row,) = csv.DictReader((out / "grades.csv").open())
    (result_file,) = out.glob("*/result.json")
    return row, json.loads(result_file.read_text())


def test_grade_ignores_an_easier_builtin_in_the_metadata(tmp_path):
    row, result = _graded(tmp_path, _asking_for(tmp_path, "two-head"))
    assert row["assignment"] == "rows" and result["assignment"] == "rows"
    assert float(row["score"]) == 0 and float(row["max_score"]) == 25
    assert result["metadata_assignment"] == "two-head"


def test_grade_never_loads_a_spec_named_in_the_metadata(tmp_path):
    path = _asking_for(tmp_path, str(tmp_path / "mine.toml"))
    row, result = _graded(tmp_path, path, "--assignment", "two-head")
    assert row["assignment"] == "two-head" and float(row["max_score"]) == 23
    assert result["metadata_assignment"] == str(tmp_path / "mine.toml")


def test_lms_ignores_the_metadata(tmp_path):
    """The notebook names the spec it uploaded beside itself, by its real path."""
    for platform, folder in (("gradescope", "submission"), ("prairielearn", "student")):
        root = tmp_path / platform
        nb = nbformat.read(SAMPLES / "two_head_sheet_002.ipynb", as_version=4)
        nb.metadata["grader"] = {"assignment": str(root / folder / "mine.toml")}
        _, results = run_entrypoint(platform, root, {"hw.ipynb": nbformat.writes(nb), "mine.toml": GENEROUS})
        assert results["score"] == 0, platform
        if platform == "gradescope":
            assert sum(t["max_score"] for t in results["tests"]) == 25


def test_check_follows_metadata_only_to_a_builtin(tmp_path):
    path = _asking_for(tmp_path, "two-head")
    code, out, err, _ = run_grader(["check", path, *FAST], cwd=tmp_path)
    assert code == 0 and "(two-head," in out, out + err
    path = _asking_for(tmp_path, str(tmp_path / "mine.toml"))
    code, out, err, _ = run_grader(["check", path, *FAST], cwd=tmp_path)
    assert code == 1 and "(rows," in out and "1000" not in out, out + err


def test_the_readme_demo_is_one_class(tmp_path):
    """submissions/ holds one rows class, so grading it without --assignment is meaningful."""
    for path in SUBMISSIONS.glob("*.ipynb"):
        asked = nbformat.read(path, as_version=4).metadata.get("grader", {}).get("assignment", "rows")
        assert asked == "rows", path.name
