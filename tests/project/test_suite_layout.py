"""The suite's own layout: its helpers are a package of their own, found through `pythonpath`
(pyproject.toml), so the tests import them under any of pytest's import modes, not only under
the default `prepend` mode that puts each test's folder on the path."""
import re
import subprocess
import sys

import pytest

from grading_helpers import ROOT


@pytest.mark.slow
def test_the_tests_import_their_helpers_under_the_importlib_mode():
    files = ["tests/project/test_import_graph.py", "tests/course/test_course_backward.py",
             "tests/grading/test_probing.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
                           "--import-mode=importlib", *files], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "error" not in done.stdout.splitlines()[-1]


# Beside the grader's own stages, the folder for the project as a whole: its command line,
# docs, packaging, install locations and import structure.
WHOLE_PROJECT = "project"


def test_every_test_file_sits_in_the_folder_of_the_stage_it_tests():
    stages = {p.name for p in (ROOT / "grader").iterdir() if (p / "__init__.py").is_file()}
    misplaced = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                 if p.parent.parent != ROOT / "tests" or p.parent.name not in stages | {WHOLE_PROJECT}]
    assert not misplaced, f"not in tests/<stage>/: {misplaced}"


def test_no_test_file_imports_another():
    """What several files share is in tests/grading_helpers/, where a reader looks for it; a
    test file imported by another runs its module code twice and breaks under importlib mode."""
    importing = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                 if re.search(r"^\s*(from|import) test_", p.read_text(), re.MULTILINE)]
    assert not importing, importing
