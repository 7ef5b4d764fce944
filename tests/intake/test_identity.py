"""Whose file it is, and which file: only the names the staff or an LMS made decide a
submission's student (never a name inside a student's own upload), Canvas names in any script
and anonymous ones, zip names written without the UTF-8 flag, and symbolic links, which are
never followed out of a submission by `grader grade`, `grader check` or the LMS entrypoints."""
import csv
import io
import json
import os
import shutil
import subprocess
import unicodedata
import zipfile
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, ROOT, SUBMISSIONS, run_grader
from grader.errors import SubmissionError
from grader.batch.lms_gradebooks import CANVAS_FILE, MOODLE_FILE
from grader.intake.discover import collect, identity_of, student_of
from grader.lms.entrypoints import find_submission

FAST = ["--cell-timeout", "4", "--call-timeout", "2", "--workers", "2", "--seed", "7"]
GOOD = SUBMISSIONS / "worked_solution.ipynb"        # 25 / 25
BLANK = SUBMISSIONS / "blank_template.ipynb"        # 0 / 25
SCALING = SUBMISSIONS / "mistake_no_scaling.ipynb"  # 12 / 25
OUTSIDE = "is a symbolic link to a file outside the submission"
SECRET = "COURSE-ONLY-LINE-5d1e9"


def _zip(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data.read_bytes() if isinstance(data, Path) else data)
    return path


def _found(paths, tmp_path) -> list[tuple[str, str]]:
    """(student, the source's path below tmp_path) of every submission found."""
    submissions, _ = collect(paths, tmp_path / "unpacked")
    return sorted((s.student, os.path.relpath(s.source, tmp_path)) for s in submissions)


def _csv(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


# --- Whose file it is: the outermost LMS-made name -------------------------------------------

def test_a_name_inside_a_canvas_students_zip_is_not_an_identity(tmp_path):
    mallory = _zip(tmp_path / "mallory.zip", {"bobsmith_333_999999_hw.ipynb": "{}", "sub/carol_444_1_x.py": "x"})
    download = _zip(tmp_path / "submissions.zip", {"bobsmith_333_100_hw.ipynb": "{}",
                                                   "mallory_222_101_hw.zip": mallory})
    assert _found([download], tmp_path) == [
        ("222", "submissions.zip/mallory_222_101_hw.zip/bobsmith_333_999999_hw.ipynb"),
        ("222", "submissions.zip/mallory_222_101_hw.zip/sub/carol_444_1_x.py"),
        ("333", "submissions.zip/bobsmith_333_100_hw.ipynb")]
    # The same download extracted into a folder by the TA.
    folder = tmp_path / "canvas"
    folder.mkdir()
    (folder / "bobsmith_333_100_hw.ipynb").write_text("{}")
    (folder / "mallory_222_101_hw.zip").write_bytes(mallory.read_bytes())
    assert [s for s, _ in _found([folder], tmp_path)] == ["222", "222", "333"]


def test_a_subfolder_named_like_another_students_moodle_or_gradescope_folder_is_not_an_identity(tmp_path):
    moodle = _zip(tmp_path / "moodle.zip", {
        "Bob Smith_333_assignsubmission_file_/hw.ipynb": "{}",
        "Mallory X_222_assignsubmission_file_/Bob Smith_333_assignsubmission_file_/hw.ipynb": "{}",
        "Mallory X_222_assignsubmission_file_/submission_999/hw.ipynb": "{}"})
    assert [s for s, _ in _found([moodle], tmp_path)] == ["222", "222", "333"]
    gradescope = _zip(tmp_path / "gradescope.zip", {
        "assignment_5_export/submission_999/hw.ipynb": "{}",
        "assignment_5_export/submission_111/submission_999/hw.ipynb": "{}",
        "assignment_5_export/submission_metadata.yml": "{}"})
    assert [s for s, _ in _found([gradescope], tmp_path)] == ["111", "999"]
    # A folder the staff name is the student's whatever is inside it.
    inner = tmp_path / "export" / "submission_111" / "Bob Smith_333_assignsubmission_file_"
    inner.mkdir(parents=True)
    (inner / "bobsmith_333_999999_hw.ipynb").write_text("{}")
    assert [s for s, _ in _found([tmp_path / "export"], tmp_path)] == ["111"]
    assert [s for s, _ in _found([tmp_path / "export" / "submission_111"], tmp_path)] == ["111"]


def test_ta_named_archives_and_folders_are_one_student_each(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    _zip(folder / "alice.zip", {"attention.ipynb": "{}"})
    _zip(folder / "bob.zip", {"attention.ipynb": "{}", "old/attention.ipynb": "{}"})
    (folder / "carol").mkdir()
    (folder / "carol" / "attention.ipynb").write_text("{}")
    (folder / "dave.ipynb").write_text("{}")
    assert [s for s, _ in _found([folder], tmp_path)] == ["alice", "bob", "bob", "carol", "dave"]
    # Named one by one, too: an archive whose entries are not an LMS's is one student's.
    assert [s for s, _ in _found([folder / "alice.zip", folder / "bob.zip"], tmp_path)] == ["alice", "bob", "bob"]
    forged = _zip(tmp_path / "eve.zip", {"attention.ipynb": "{}", "bobsmith_333_9_hw.ipynb": "{}"})
    assert [s for s, _ in _found([forged], tmp_path)] == ["eve", "eve"]
    # A folder the staff name may be a link of theirs: it is followed, and the students are the same.
    os.symlink(folder, tmp_path / "current")
    assert [s for s, _ in _found([tmp_path / "current"], tmp_path)] == ["alice", "bob", "bob", "carol", "dave"]


def test_canvas_names_in_any_script_anonymous_and_late():
    assert student_of(Path("müllerzoë_12345_67890_hw.ipynb")) == "12345"
    assert identity_of(Path(unicodedata.normalize("NFD", "müllerzoë_12345_67890_hw.ipynb"))).name == "müllerzoë"
    assert identity_of(Path("शर्माअनु_12345_67890_hw.ipynb")).student == "12345"   # marks of any script
    assert student_of(Path("hw-1_2_3_notes.ipynb")) == "hw-1_2_3_notes"   # Canvas keeps no "-": not its name
    assert student_of(Path("o_brienann_LATE_12345_67890_my_hw_2.ipynb")) == "12345"
    assert student_of(Path("anon_Xb3kP_67890_hw.ipynb")) == "anon_Xb3kP"
    assert student_of(Path("LATE_anon_Xb3kP_67890_hw.ipynb")) == "anon_Xb3kP"
    assert student_of(Path("Jörg Müller_4242_assignsubmission_file_hw.ipynb")) == "4242"   # Moodle without folders
    assert student_of(Path("Jörg Müller_4242_assignsubmission_file/hw.ipynb")) == "4242"   # Moodle 4's folders


def test_only_canvass_own_late_mark_makes_a_file_late():
    """Late is Canvas's "LATE" where Canvas puts it, before the user id; never a word of the
    file's own name, which the student chose, nor of a Moodle, Gradescope or staff name."""
    assert identity_of(Path("o_brienann_LATE_12345_67890_my_hw_2.ipynb")).late
    assert identity_of(Path("o_brienann_late_12345_67890_hw.ipynb")).late   # older downloads
    assert identity_of(Path("LATE_anon_Xb3kP_67890_hw.ipynb")).late
    for name in ("obrienann_12345_67890_hw.ipynb", "obrienann_12345_67890_LATE_hw.ipynb",
                 "anon_Xb3kP_67890_late_1_2_hw.ipynb", "late_12345_67890_hw.ipynb",
                 "Late Ann_4242_assignsubmission_file_LATE_1_2_hw.ipynb",
                 "Late Ann_4242_assignsubmission_file/x_LATE_1_2_hw.ipynb", "submission_77/x_LATE_1_2_hw.ipynb",
                 "LATE_1_2_hw.ipynb"):
        assert not identity_of(Path(name)).late, name


@pytest.mark.slow
def test_zip_names_written_without_the_utf8_flag_are_read_as_utf8(tmp_path):
    """Linux's zip writes a name's UTF-8 bytes without the flag, which Python reads as cp437."""
    from grader.intake.discover import member_name
    name = "Jörg Müller_4242_assignsubmission_file_/hw.ipynb"
    placeholder = "x" * len(name.encode())   # ASCII, so zipfile sets no flag; then the UTF-8 bytes go in its place
    archive = _zip(tmp_path / "moodle.zip", {placeholder: "{}"})
    archive.write_bytes(archive.read_bytes().replace(placeholder.encode(), name.encode()))
    with zipfile.ZipFile(archive) as zf:
        (info,) = zf.infolist()
        assert not info.flag_bits & 0x800 and info.filename != name   # what Python alone makes of it
        assert member_name(info) == name
    submissions, _ = collect([archive], tmp_path / "unpacked")
    assert [(s.student, s.identity.name) for s in submissions] == [("4242", "Jörg Müller")]
    if shutil.which("zip"):   # and Info-ZIP's own output, where the machine has it
        folder = tmp_path / "download" / "Jörg Müller_4242_assignsubmission_file"
        folder.mkdir(parents=True)
        (folder / "hw.ipynb").write_text("{}")
        subprocess.run(["zip", "-qr", tmp_path / "rezipped.zip", "."], cwd=tmp_path / "download", check=True,
                       env={**os.environ, "LC_ALL": "C.UTF-8"})
        submissions, _ = collect([tmp_path / "rezipped.zip"], tmp_path / "unpacked")
        assert [(s.student, s.identity.name) for s in submissions] == [("4242", "Jörg Müller")]


@pytest.mark.slow
def test_a_student_cannot_take_another_students_grade_in_any_gradebook(tmp_path):
    """Mallory's upload names Bob's file (Canvas), folder (Moodle) or submission (Gradescope)
    with a newer id or date: Bob keeps his own grade in grades.csv, the Canvas gradebook and
    the Moodle worksheet. TA-named archives holding the same file name stay two students."""
    canvas = tmp_path / "canvas"
    canvas.mkdir()
    (canvas / "bobsmith_333_100_hw.ipynb").write_bytes(GOOD.read_bytes())
    _zip(canvas / "mallory_222_101_hw.zip", {"bobsmith_333_999999_hw.ipynb": BLANK})
    moodle = _zip(tmp_path / "moodle.zip", {
        "Bob Smith_444_assignsubmission_file_/hw.ipynb": GOOD,
        "Mallory X_555_assignsubmission_file_/Bob Smith_444_assignsubmission_file_/hw.ipynb": BLANK})
    gradescope = tmp_path / "gradescope"
    (gradescope / "submission_666").mkdir(parents=True)
    (gradescope / "submission_777" / "submission_666").mkdir(parents=True)
    (gradescope / "submission_666" / "hw.ipynb").write_bytes(GOOD.read_bytes())
    (gradescope / "submission_777" / "submission_666" / "hw.ipynb").write_bytes(BLANK.read_bytes())
    ta = tmp_path / "ta"
    ta.mkdir()
    _zip(ta / "alice.zip", {"attention.ipynb": GOOD})
    _zip(ta / "bob.zip", {"attention.ipynb": SCALING})
    out = tmp_path / "out"
    code, stdout, stderr, _ = run_grader(["grade", canvas, moodle, gradescope, ta, "-o", out, *FAST])
    assert code == 0, stderr
    rows = {r["student"]: r for r in _csv(out / "grades.csv")}
    assert sorted(rows) == ["222", "333", "444", "555", "666", "777", "alice", "bob"]
    for victim in ("333", "444", "666"):
        assert rows[victim]["score"] == "25" and rows[victim]["duplicates"] == "", rows[victim]
    for attacker in ("222", "555", "777"):
        assert rows[attacker]["score"] == "0", rows[attacker]
    assert rows["333"]["submission"] == "bobsmith_333_100_hw.ipynb"
    assert (rows["alice"]["score"], rows["bob"]["score"]) == ("25", "12")
    canvas_rows = {r[1]: r for r in csv.reader(io.StringIO((out / CANVAS_FILE).read_text()))}
    assert canvas_rows["333"][5] == "25" and canvas_rows["222"][5] == "0"
    moodle_rows = {r["Identifier"]: r for r in _csv(out / MOODLE_FILE)}
    assert moodle_rows["Participant 444"]["Grade"] == "25" and moodle_rows["Participant 555"]["Grade"] == "0"


@pytest.mark.slow
def test_canvas_students_named_in_any_script_or_anonymous_stay_in_the_gradebooks(tmp_path):
    """A non-ASCII name counts as Canvas's; an anonymous student is in grades.csv, and the
    Canvas file, which cannot match them, says it leaves them out; so it does for a file that
    could not be graded, whose empty cell would clear the grade Canvas has."""
    download = _zip(tmp_path / "submissions.zip", {
        "müllerzoë_12345_67890_hw.ipynb": GOOD, "anon_Xb3kP_67891_hw.ipynb": SCALING,
        "leeann_222_67892_hw.ipynb": FIXTURES / "not_json.ipynb"})
    out = tmp_path / "out"
    code, _, stderr, _ = run_grader(["grade", download, "-o", out, *FAST])
    assert code == 0, stderr
    rows = {r["student"]: r for r in _csv(out / "grades.csv")}
    assert (rows["12345"]["name"], rows["12345"]["score"]) == ("müllerzoë", "25")
    assert rows["anon_Xb3kP"]["score"] == "12" and rows["222"]["status"] == "error"
    canvas = list(csv.reader(io.StringIO((out / CANVAS_FILE).read_text())))
    assert [r[1] for r in canvas[2:]] == ["12345"] and canvas[2][0] == "müllerzoë"
    assert f"{CANVAS_FILE} leaves out anon_Xb3kP: anonymous" in stderr
    assert f"{CANVAS_FILE} leaves out 222: not graded" in stderr


# --- Symbolic links: never followed out of the submission -------------------------------------

@pytest.fixture
def course(outside_tmp):
    """The course's files beside the submissions: a solution anyone could read and a file
    only root may read, whose first line must never reach a result."""
    (outside_tmp / "solution.ipynb").write_bytes(GOOD.read_bytes())
    secret = outside_tmp / "secret.py"
    secret.write_text(f"{SECRET} = 1\n")
    secret.chmod(0o600)
    return outside_tmp


def _outputs(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
                     and p.suffix in (".json", ".html", ".csv"))


def test_a_link_in_a_folder_is_followed_only_within_its_students_entry(tmp_path):
    batch = tmp_path / "batch"
    (batch / "ann" / "src").mkdir(parents=True)
    (batch / "ann" / "src" / "hw.ipynb").write_text("{}")
    os.symlink("src/hw.ipynb", batch / "ann" / "link.ipynb")               # hers: graded once, as hw.ipynb
    (batch / "bo").mkdir()
    os.symlink(batch / "ann" / "src" / "hw.ipynb", batch / "bo" / "copy.ipynb")   # Ann's: not Bo's to submit
    os.symlink(batch / "ann" / "src" / "hw.ipynb", batch / "top.ipynb")    # a top-level link is a submission alone
    submissions, _ = collect([batch], tmp_path / "unpacked")
    found = sorted((s.student, s.name, s.problem or "") for s in submissions)
    assert found == [("ann", "hw.ipynb", ""), ("bo", "copy.ipynb", f"copy.ipynb {OUTSIDE}"),
                     ("top", "top.ipynb", f"top.ipynb {OUTSIDE}")]


@pytest.mark.slow
def test_grade_never_follows_a_link_out_of_a_submission(tmp_path, course):
    batch = tmp_path / "batch"
    mallory = batch / "submission_222"
    (mallory / "work").mkdir(parents=True)
    os.symlink(course / "solution.ipynb", mallory / "solution.ipynb")
    os.symlink(course / "secret.py", mallory / "notes.py")
    os.symlink(course, mallory / "course")                     # a linked folder is never entered
    os.symlink("hop.ipynb", mallory / "chain.ipynb")           # a link to a link that leaves
    os.symlink(course / "solution.ipynb", mallory / "hop.ipynb")
    bob = batch / "submission_333"
    bob.mkdir()
    (bob / "hw.ipynb").write_bytes(BLANK.read_bytes())
    os.symlink(bob / "hw.ipynb", mallory / "bobs.ipynb")       # inside the batch, outside her submission
    carol = batch / "submission_444"
    (carol / "work").mkdir(parents=True)
    (carol / "work" / "attention.ipynb").write_bytes(SCALING.read_bytes())
    os.symlink("work/attention.ipynb", carol / "attention.ipynb")   # inside: graded, once
    (batch / "submission_555").mkdir()
    os.mkfifo(batch / "submission_555" / "pipe.ipynb")         # never blocks the grader
    out = tmp_path / "out"
    code, stdout, stderr, _ = run_grader(["grade", batch, "-o", out, *FAST])
    assert code == 0, stderr
    results = [json.loads(p.read_text()) for p in out.glob("*/result.json")]
    theirs = {r["submission"]: r for r in results if r["student"] == "222"}
    assert sorted(theirs) == ["bobs.ipynb", "chain.ipynb", "hop.ipynb", "notes.py", "solution.ipynb"]
    for name, result in theirs.items():
        assert result["status"] == "error" and result["score"] == 0, name
        assert result["errors"][0]["evalue"] == f"{name} {OUTSIDE}"
    assert [(r["submission"], r["score"]) for r in results if r["student"] == "444"] == [("attention.ipynb", 12)]
    rows = {r["student"]: r for r in _csv(out / "grades.csv")}
    assert rows["222"]["score"] == "" and rows["333"]["score"] == "0" and rows["444"]["score"] == "12"
    assert rows["555"]["status"] == "error"
    assert SECRET not in _outputs(out) + stdout + stderr


@pytest.mark.slow
def test_a_link_named_to_grade_or_check_is_refused_in_one_line(tmp_path, course):
    link = tmp_path / "attention.ipynb"
    os.symlink(course / "solution.ipynb", link)
    code, stdout, stderr, _ = run_grader(["check", link, "--seed", "7"])
    assert code == 2 and stderr.strip() == f"grader: error: attention.ipynb {OUTSIDE}", stderr
    secret_link = tmp_path / "notes.py"
    os.symlink(course / "secret.py", secret_link)
    out = tmp_path / "out"
    code, stdout, stderr, _ = run_grader(["grade", link, secret_link, "-o", out, *FAST])
    assert code == 0, stderr
    rows = {r["submission"]: r for r in _csv(out / "grades.csv")}
    assert rows["attention.ipynb"]["status"] == rows["notes.py"]["status"] == "error"
    assert all(json.loads(p.read_text())["errors"][0]["evalue"].endswith(OUTSIDE) for p in out.glob("*/result.json"))
    assert SECRET not in _outputs(out) + stdout + stderr


@pytest.mark.slow
@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_lms_entrypoints_never_follow_a_link_out_of_the_submission(platform, tmp_path):
    from grading_helpers.lms_entrypoints import FOLDERS, run_entrypoint
    root = tmp_path / "root"
    course = root / ("source" if platform == "gradescope" else "tests")
    course.mkdir(parents=True)
    (course / "solution.ipynb").write_bytes(GOOD.read_bytes())
    (course / "secret.py").write_text(f"{SECRET} = 1\n")
    (course / "secret.py").chmod(0o600)
    submission = root / FOLDERS[platform]
    submission.mkdir()
    os.symlink(course / "solution.ipynb", submission / "solution.ipynb")
    done, results = run_entrypoint(platform, root, {})
    assert done.returncode == 0, done.stderr
    text = json.dumps(results)
    assert f"solution.ipynb {OUTSIDE}" in text
    assert (results["score"] == 0) if platform == "gradescope" else (results["gradable"] is False)
    # A .py link to a root-only course file and a linked course folder: neither is read.
    (submission / "solution.ipynb").unlink()
    os.symlink(course / "secret.py", submission / "notes.py")
    os.symlink(course, submission / "course")
    done, results = run_entrypoint(platform, root, {})
    assert f"notes.py {OUTSIDE}" in json.dumps(results)
    assert SECRET not in _outputs(root / "results") + done.stdout + done.stderr


def test_a_link_inside_the_lms_submission_is_that_file(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "attention.ipynb").write_text("{}")
    os.symlink("src/attention.ipynb", tmp_path / "hw.ipynb")
    assert find_submission(tmp_path) == (tmp_path / "src" / "attention.ipynb").resolve()
    os.symlink(ROOT / "README.md", tmp_path / "readme.py")   # a link out is left alone when a notebook is there
    assert find_submission(tmp_path).name == "attention.ipynb"


def test_a_link_put_in_the_files_place_after_it_was_found_is_refused(tmp_path):
    """Between finding a file and reading it, a link swapped in is not followed (O_NOFOLLOW),
    and a FIFO is refused without blocking (open, then fstat)."""
    from grader.intake.notebook import read_submission
    target = tmp_path / "hw.ipynb"
    os.symlink(ROOT / "README.md", target)
    with pytest.raises(SubmissionError, match=f"hw.ipynb {OUTSIDE}"):
        read_submission(target)
    os.mkfifo(tmp_path / "pipe.ipynb")
    with pytest.raises(SubmissionError, match="not a file"):
        read_submission(tmp_path / "pipe.ipynb")
