"""`grader lms package gradescope`: the autograder zip Gradescope builds its image from, unpacked
and installed as Gradescope does (its setup.sh in a fresh virtual environment whose packages
come from the package registry), then its run_autograder grading a submission."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
from packaging.requirements import Requirement

from grading_helpers import FIXTURES, ROOT, SUBMISSIONS, own_run_environment, run_grader
from grader import __version__

COURSE = FIXTURES / "lms" / "assignment.toml"   # a course that hides some checks
FAST = ["--cell-timeout", "10", "--call-timeout", "5"]


def unpack_as_gradescope(archive: Path, root: Path) -> None:
    """/autograder as Gradescope lays it out: the zip in source/ (modes kept), run_autograder
    copied beside it, the student's files in submission/, an empty results/."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = root / "source" / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            target.chmod((info.external_attr >> 16) & 0o777)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "results").mkdir()


@pytest.mark.slow
def test_the_zip_installs_and_grades_in_a_fresh_gradescope_layout(tmp_path, outside_tmp):
    archive = tmp_path / "autograder.zip"
    code, stdout, stderr, _ = run_grader(["lms", "package", "gradescope", "--assignment", COURSE, "-o", archive])
    assert code == 0, stderr
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        assert zf.read("assignment.toml") == COURSE.read_bytes()
        assert zf.read("setup.sh") == (ROOT / "lms" / "setup.sh").read_bytes()
        assert zf.read("constraints.txt") == (ROOT / "constraints.txt").read_bytes()
    assert {"setup.sh", "run_autograder", "assignment.toml", "constraints.txt"} <= set(names)
    assert [n for n in names if n.endswith(".whl")] == [f"attention_grader-{__version__}-py3-none-any.whl"]

    root = outside_tmp / "autograder"
    unpack_as_gradescope(archive, root)
    shutil.copy(SUBMISSIONS / "worked_solution.ipynb", root / "submission" / "attention.ipynb")
    home = outside_tmp / "grader-home"
    # Nothing of this checkout's environment: a fresh interpreter's venv, PATH without ours.
    env = {k: v for k, v in own_run_environment().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", PYTHON=sys._base_executable, GRADER_HOME=str(home))
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], capture_output=True, text=True, env=env,
                           cwd=root / "source", timeout=1200)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    installed = subprocess.run([str(home / "bin" / "python"), "-I", "-c", "import grader; print(grader.__file__)"],
                               capture_output=True, text=True, env=env, cwd=root)
    assert installed.stdout.startswith(str(home)), "the grader is not the one installed from the zip's wheel"
    # Every dependency at the version CI tested (constraints.txt), not PyPI's newest.
    pinned = {r.name: str(r.specifier)[2:] for line in (ROOT / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")
              and ((r := Requirement(line)).marker is None or r.marker.evaluate())}
    frozen = subprocess.run([str(home / "bin" / "python"), "-m", "pip", "freeze"], capture_output=True, text=True,
                            env=env).stdout.splitlines()
    versions = dict(line.split("==") for line in frozen if "==" in line)
    for name in ("numpy", "nbclient", "ipykernel", "pyzmq"):
        assert versions[name] == pinned[name], (name, versions[name], pinned[name])
    assert os.stat(root / "source" / "assignment.toml").st_mode & 0o077 == 0, "the course's spec is readable by all"
    # Installed from a wheel, the grader has no source to build another from, and says so.
    again = subprocess.run([str(home / "bin" / "grader"), "lms", "package", "gradescope", "-o", str(tmp_path / "x")],
                           capture_output=True, text=True, env=env, cwd=root)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        "grader: error: grader lms package builds the grader's wheel from the project's source: run it from a "
        "checkout of attention-grader (pip install -e .)"]

    graded = subprocess.run([str(root / "run_autograder"), "--root", str(root), *FAST], capture_output=True,
                            text=True, env=env, cwd=root, timeout=600)
    assert graded.returncode == 0, graded.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, json.loads((ROOT / "tests" / "schemas" / "gradescope.json").read_text()))
    assert results["score"] == 25, results["output"]
    visibility = {t["name"]: t["visibility"] for t in results["tests"]}
    assert visibility["self_attention.random_shapes"] == "after_due_date"   # the zip's course spec was used

    # The PrairieLearn image installs the grader with the same setup.sh; its entrypoint finds it.
    grade = outside_tmp / "grade"
    (grade / "student").mkdir(parents=True)
    shutil.copy(SUBMISSIONS / "mistake_softmax_axis.ipynb", grade / "student" / "attention.ipynb")
    graded = subprocess.run(["bash", str(ROOT / "lms" / "prairielearn_entrypoint"), "--root", str(grade), *FAST],
                            capture_output=True, text=True, env=env, cwd=grade, timeout=600)
    assert graded.returncode == 0, graded.stderr[-2000:]
    results = json.loads((grade / "results" / "results.json").read_text())
    jsonschema.validate(results, json.loads((ROOT / "tests" / "schemas" / "prairielearn.json").read_text()))
    assert results["gradable"] is True and 0 < results["score"] < 1
    assert "softmax over the wrong axis" in results["output"]


@pytest.mark.slow
@pytest.mark.parametrize("spec, words", [("nope", "unknown assignment 'nope'"), ("missing.toml", "no such")])
def test_a_bad_course_spec_is_one_line_and_no_zip(tmp_path, spec, words):
    archive = tmp_path / "autograder.zip"
    code, _, stderr, _ = run_grader(["lms", "package", "gradescope", "--assignment", spec, "-o", archive])
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and words in stderr
    assert not archive.exists()
