"""A hostile student against `check`, `grade` and both LMS entrypoints: every way to reach a
forbidden library, another student's notebook, the reference or the course's spec scores
what a notebook without working functions scores (0), and a correct notebook beside them
keeps full marks. The notebooks are in tests/fixtures/attacks/ (tests/make_attack_fixtures.py)
or written here, where the attack needs a path only the test knows."""
import csv
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grading_helpers import FIXTURES, ROOT, SUBMISSIONS, grade, run_grader
from grader.sandbox import isolation as sandbox
from grader.report.terminal import summary
from grading_helpers.lms_entrypoints import run_entrypoint

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

FULL = sandbox.namespaces_available() and sandbox.unprivileged_ids() is not None
ATTACKS = sorted((FIXTURES / "attacks").glob("*.ipynb"))
FAST = ["--cell-timeout", "10", "--call-timeout", "3"]


@pytest.fixture
def sandboxed():
    if not FULL:
        pytest.skip("namespaces or an unprivileged user are not available here; "
                    "test_without_the_sandbox_the_policy_says_partial covers what the result says")
    pytest.importorskip("scipy.special")



def notebook(*cells: str) -> str:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in ("import numpy as np", *cells)])
    return nbformat.writes(nb)


# Without the sandbox each of these scores 25; see test_without_the_sandbox_the_policy_says_partial.
FROM_THE_REFERENCE = '''
import ast
_source = open({path!r}).read()
_tree = ast.parse(_source)
_namespace = {{"np": np}}
for _node in _tree.body:
    if isinstance(_node, ast.FunctionDef) and _node.name == "softmax_rows":
        exec(compile(ast.Module([_node], []), "reference", "exec"), _namespace)
softmax = lambda s, axis=1: _namespace["softmax_rows"](s)
'''
COPY_A_NEIGHBOUR = '''
import json, glob
for _path in glob.glob({batch!r} + "/*.ipynb"):
    _nb = json.load(open(_path))
    for _cell in _nb["cells"]:
        if _cell["cell_type"] == "code" and "def " in "".join(_cell["source"]):
            exec("".join(_cell["source"]))
with open({out!r} + "/grades.csv", "w") as _f:
    _f.write("submission,score\\nmallory.ipynb,25\\n")
'''


def test_forbidden_library_attacks_in_a_batch(sandboxed, tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    for path in ATTACKS:
        shutil.copy(path, batch / path.name)
    shutil.copy(SUBMISSIONS / "worked_solution.ipynb", batch / "correct.ipynb")
    code, _, err, _ = run_grader(["grade", batch, "-o", tmp_path / "out", "--assignment", "rows", *FAST])
    assert code == 0, err
    rows = {r["submission"]: r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open())}
    assert rows["correct.ipynb"]["score"] == rows["correct.ipynb"]["max_score"] == "25"
    assert {name: float(rows[name]["score"]) for name in (p.name for p in ATTACKS)} == {p.name: 0 for p in ATTACKS}
    result = json.loads(next((tmp_path / "out").glob("computed_import-*/result.json")).read_text())
    assert result["policy"]["level"] == "full"
    assert any("scipy.special is not available" in e["evalue"] for e in result["errors"])


@pytest.mark.parametrize("name", ["computed_import", "default_argument"])
def test_forbidden_library_attacks_in_check(sandboxed, name, tmp_path):
    code, out, err, _ = run_grader(["check", FIXTURES / "attacks" / f"{name}.ipynb", "--assignment", "rows", *FAST,
                                    "--json", tmp_path / "r.json"])
    assert code == 1, err   # graded, points lost
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["score"] == 0 and result["max_score"] == 25, out
    assert "scipy.special is not available: this assignment forbids it" in " ".join(out.split())   # wrapped


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_forbidden_library_and_course_spec_attacks_in_the_lms(sandboxed, platform, tmp_path, outside_tmp):
    for attack in ("patched_harness", "forged_describe_hook"):
        _, results = run_entrypoint(platform, tmp_path / attack, {"hw.ipynb": FIXTURES / "attacks" / f"{attack}.ipynb"})
        assert results["score"] == 0, (attack, results)
        assert not any(t["name"] == "grader error" for t in results["tests"]), results   # graded, not crashed
    # The course's spec sits beside the submission; a cell that raises with its text would put
    # it into the student's own feedback.
    root = outside_tmp
    folder = root / ("source" if platform == "gradescope" else "tests")
    folder.mkdir(mode=0o755)
    spec = folder / "assignment.toml"
    spec.write_text('# course-secret: the hidden cases use seed 4\nname = "course"\n'
                    '[[functions]]\nname = "self_attention"\n'
                    'convention = "rows_single"\n')
    thief = notebook(f"raise RuntimeError(open({str(spec)!r}).read())")
    run_entrypoint(platform, root, {"hw.ipynb": thief})
    for written in (root / "results").rglob("*"):
        if written.is_file():
            assert "course-secret" not in written.read_text(errors="replace"), written


def test_copying_a_neighbour_during_grade(sandboxed, outside_tmp):
    """The batch and its output outside /tmp, where they were once readable by the kernel."""
    batch, out = outside_tmp / "submissions", outside_tmp / "out"
    batch.mkdir()
    shutil.copy(SUBMISSIONS / "worked_solution.ipynb", batch / "alice.ipynb")
    (batch / "mallory.ipynb").write_text(notebook(COPY_A_NEIGHBOUR.format(batch=str(batch), out=str(out))))
    code, _, err, _ = run_grader(["grade", batch, "-o", out, "--assignment", "rows", *FAST])
    assert code == 0, err
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert rows["alice.ipynb"]["score"] == "25" and float(rows["mallory.ipynb"]["score"]) == 0, rows


def test_reading_the_reference_from_the_source_checkout(sandboxed):
    path = ROOT / "reference" / "attention.py"
    assert path.is_file()
    thief = Path(tempfile.mkdtemp()) / "thief.ipynb"
    functions = (FIXTURES / "attacks" / "plain_import.ipynb").read_text()
    nb = nbformat.reads(functions, as_version=4)
    nb.cells[1].source = FROM_THE_REFERENCE.format(path=str(path))   # the reference's softmax instead of scipy's
    nbformat.write(nb, thief)
    try:
        result = grade(thief, "rows")
    finally:
        shutil.rmtree(thief.parent)
    assert result.score == 0
    errors = result.errors
    assert any(e.ename == "FileNotFoundError" and "attention.py" in e.evalue for e in errors), errors


def test_without_the_sandbox_the_policy_says_partial():
    """The same attacks without the sandbox: the grader cannot stop them, and says so."""
    result = grade(FIXTURES / "attacks" / "patched_harness.ipynb", "rows", sandbox=False)
    assert result.policy["level"] == "partial"
    assert "Policy: partial." in summary(result)
