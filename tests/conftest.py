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


def grade(path: Path, assignment: str, _fresh=None, **overrides):
    """Grade once per (file, assignment, settings); `_fresh` names a grading that must not
    share its result with others (the test changes the environment around it)."""
    key = (str(path), assignment, tuple(sorted(overrides.items())), _fresh)
    if key not in _graded:
        settings = Settings(**{**TEST_SETTINGS.__dict__, **overrides})
        _graded[key] = grade_path(path, load_assignment(assignment), settings)
    return _graded[key]


@pytest.fixture
def grade_file():
    return grade


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def sandbox_processes() -> list[int]:
    """Live processes started for any submission (they all carry the sandbox marker)."""
    from grader.sandbox import MARKER
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and any(v.startswith(MARKER.encode() + b"=")
                                            for v in (entry / "environ").read_bytes().split(b"\0")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
