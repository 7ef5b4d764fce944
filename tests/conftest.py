import shutil
from pathlib import Path

import pytest

from grader.grade import grade_path
from grader.settings import Settings
from grader.spec import load_assignment

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SUBMISSIONS = ROOT / "submissions"
# Short limits keep the hostile fixtures quick; they are still real interrupts and timeouts.
TEST_SETTINGS = Settings(cell_timeout=4.0, call_timeout=2.0, notebook_timeout=60.0)

_graded = {}


def grade(path: Path, assignment: str, **overrides):
    key = (str(path), assignment, tuple(sorted(overrides.items())))
    if key not in _graded:
        settings = Settings(**{**TEST_SETTINGS.__dict__, **overrides})
        _graded[key] = grade_path(path, load_assignment(assignment), settings)
    return _graded[key]


@pytest.fixture
def grade_file():
    return grade


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")
