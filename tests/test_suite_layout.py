"""The suite's own layout: its helpers are a package of their own, found through `pythonpath`
(pyproject.toml), so the tests import them under any of pytest's import modes, not only under
the default `prepend` mode that puts each test's folder on the path."""
import subprocess
import sys

import pytest

from grading_helpers import ROOT


@pytest.mark.slow
def test_the_tests_import_their_helpers_under_the_importlib_mode():
    files = ["tests/test_import_graph.py", "tests/test_course_backward.py", "tests/test_probing.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
                           "--import-mode=importlib", *files], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "error" not in done.stdout.splitlines()[-1]
