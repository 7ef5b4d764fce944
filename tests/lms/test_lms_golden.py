"""Both LMS results files, whole, for a course that hides checks; and nothing of a hidden check
but its name, title, status and points reaches a student, in any document.

The course (tests/fixtures/lms/assignment.toml) hides checks of the rows assignment;
submissions/mistake_global_D.ipynb fails some of them with a diagnosis. Each platform's
results.json, without what changes from run to run, must equal
tests/fixtures/lms/<platform>.json. After a deliberate change to the results, regenerate
those files and review the diff before committing:

    PYTHONPATH=tests python tests/lms/test_lms_golden.py
"""
import html
import json
import re
import shutil
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, SUBMISSIONS, run_grader
from grading_helpers.lms_entrypoints import FAST, run_entrypoint

pytestmark = pytest.mark.slow

COURSE = FIXTURES / "lms" / "assignment.toml"
NOTEBOOK = SUBMISSIONS / "mistake_global_D.ipynb"
SEED = ["--seed", "20261122"]
SPEC_FOLDERS = {"gradescope": "source", "prairielearn": "tests"}
PLATFORMS = sorted(SPEC_FOLDERS)
# A diagnosis only hidden checks give on this notebook: it must reach the staff alone.
HIDDEN_DIAGNOSIS = "reads notebook globals (D)"


def expected_path(platform: str) -> Path:
    return FIXTURES / "lms" / f"{platform}.json"


def run_course(platform: str, root: Path) -> tuple[dict, str]:
    """The platform's results.json and report.html for the notebook under the course spec."""
    (root / SPEC_FOLDERS[platform]).mkdir(parents=True)
    shutil.copy(COURSE, root / SPEC_FOLDERS[platform] / "assignment.toml")
    done, results = run_entrypoint(platform, root, {"attention.ipynb": NOTEBOOK}, extra=SEED)
    assert done.returncode == 0, done.stderr
    return results, (root / "results" / "report.html").read_text()


def stable(results: dict) -> dict:
    """The results without what differs between runs and machines: the time taken, and the
    isolation level the summary names (full as root with namespaces, partial otherwise)."""
    data = {k: v for k, v in results.items() if k != "execution_time"}
    data["output"] = re.sub(r"isolation \w+", "isolation LEVEL", data["output"])
    return data


def run_check(folder: Path, *staff) -> dict:
    """`grader check` as a student (or with --staff) runs it: terminal, JSON and HTML."""
    folder.mkdir()
    code, out, err, _ = run_grader(["check", NOTEBOOK, "--assignment", COURSE, *SEED, *FAST, *staff,
                                    "--json", folder / "r.json", "--html", folder / "r.html"])
    assert code == 1, err
    return {"terminal": out, "json": json.loads((folder / "r.json").read_text()),
            "html": (folder / "r.html").read_text()}


def plain(document) -> str:
    """A document as words: for JSON every string in it, for HTML the text with its escapes
    undone; line breaks and wrapping ignored."""
    if isinstance(document, (dict, list)):
        return " ".join(plain(v) for v in (document.values() if isinstance(document, dict) else document))
    return " ".join(html.unescape(document).split()) if isinstance(document, str) else ""


@pytest.fixture(scope="module")
def course_runs(tmp_path_factory):
    return {platform: run_course(platform, tmp_path_factory.mktemp(platform)) for platform in PLATFORMS}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_whole_results_file_is_the_expected_one(platform, course_runs):
    results, _ = course_runs[platform]
    assert stable(results) == json.loads(expected_path(platform).read_text()), \
        ("results.json changed; if on purpose, run `PYTHONPATH=tests python tests/lms/test_lms_golden.py` and "
         "review the diff")


def test_hidden_checks_reach_the_staff_alone(course_runs, tmp_path):
    staff = run_check(tmp_path / "staff", "--staff")
    student = run_check(tmp_path / "student")
    hidden = [c for c in staff["json"]["checks"] if c["hidden"]]
    # What hidden checks say, less what a visible check says word for word too (the hidden
    # weights_distribution of self_attention passes with the visible one's message).
    said_openly = {text for c in staff["json"]["checks"] if not c["hidden"] for text in (c["message"], c["diagnosis"])}
    secrets = {text for c in hidden for text in (c["message"], c["diagnosis"]) if text} - said_openly
    assert HIDDEN_DIAGNOSIS in secrets and len(secrets) >= 4

    shown_to_students = {f"check {kind}": document for kind, document in student.items()}
    for platform, (results, report) in course_runs.items():
        shown_to_students[f"{platform} results.json"] = results
        shown_to_students[f"{platform} report.html"] = report
    for where, document in shown_to_students.items():
        leaked = [s for s in secrets if plain(s) in plain(document)]
        assert not leaked, f"{where} shows what hidden checks withhold: {leaked}"

    # The staff's report lists the checks not passed with their messages, as the terminal does.
    failed = {text for c in hidden if c["status"] != "passed" for text in (c["message"], c["diagnosis"])}
    for where, shown in (("json", secrets), ("html", secrets & failed)):
        missing = [s for s in shown if plain(s) not in plain(staff[where])]
        assert not missing, f"--staff {where} lacks {missing}"
    # The terminal gives messages only for checks not passed.
    missing = [c["message"] for c in hidden
               if c["status"] != "passed" and plain(c["message"]) not in plain(staff["terminal"])]
    assert not missing and HIDDEN_DIAGNOSIS in staff["terminal"]


if __name__ == "__main__":
    # Regenerate the expected files: run both entrypoints as the test does.
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        for platform in PLATFORMS:
            results, _ = run_course(platform, Path(scratch) / platform)
            expected_path(platform).write_text(json.dumps(stable(results), indent=2, ensure_ascii=False) + "\n")
            print(f"wrote {expected_path(platform)}")
