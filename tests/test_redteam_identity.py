"""Identity forgeries the first attack tests did not try: a file name the student chose that
moves where an LMS's name is read, and a name below an LMS's folder in a path the staff give."""
import os
import zipfile
from pathlib import Path

import pytest

from grader.errors import SubmissionError
from grader.intake.discover import collect, identity_of


def _zip(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _students(paths, tmp_path) -> list[tuple[str, str]]:
    submissions, _ = collect(paths, tmp_path / "unpacked")
    return sorted((s.student, os.path.relpath(s.source, tmp_path)) for s in submissions)


def test_a_moodle_file_name_the_student_chose_cannot_move_the_id(tmp_path):
    """Moodle without folders names a file "Full Name_N_assignsubmission_file_" and then the
    student's own file name; Mallory (222) names hers like Bob's (333) download."""
    forged = "Mallory X_222_assignsubmission_file_x_333_assignsubmission_file_hw.ipynb"
    download = _zip(tmp_path / "moodle.zip", {"Bob Smith_333_assignsubmission_file_hw.ipynb": "{}", forged: "{}"})
    assert _students([download], tmp_path) == [("222", f"moodle.zip/{forged}"),
                                               ("333", "moodle.zip/Bob Smith_333_assignsubmission_file_hw.ipynb")]
    assert identity_of(Path(forged)).name == "Mallory X"


def test_a_canvas_file_name_the_student_chose_cannot_read_as_a_moodle_one(tmp_path):
    """Canvas appends the student's own file name after the ids: one that carries Moodle's
    naming must not make the whole name a Moodle download of another student."""
    forged = "mallory_222_101_a_333_assignsubmission_file_x.ipynb"
    download = _zip(tmp_path / "submissions.zip", {"bobsmith_333_100_hw.ipynb": "{}", forged: "{}"})
    assert [s for s, _ in _students([download], tmp_path)] == ["222", "333"]
    assert identity_of(Path(forged)).lms == "canvas"


def test_a_path_the_staff_give_takes_its_outermost_lms_name(tmp_path):
    """A TA names files below the LMS's folders (a glob such as moodle/**/*.ipynb): the folder
    Moodle or Gradescope made decides, never a subfolder or file name inside it."""
    files = ["moodle/Mallory X_222_assignsubmission_file_/bobsmith_333_999999_hw.ipynb",
             "moodle/Mallory X_222_assignsubmission_file_/Bob Smith_333_assignsubmission_file_/hw.ipynb",
             "moodle/Mallory X_222_assignsubmission_file_/submission_333/hw.ipynb",
             "export/submission_222/submission_333/hw.ipynb",
             "export/submission_222/Bob Smith_333_assignsubmission_file_hw.ipynb"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    assert [s for s, _ in _students([tmp_path / name for name in files], tmp_path)] == ["222"] * len(files)
    inner = tmp_path / "moodle/Mallory X_222_assignsubmission_file_/Bob Smith_333_assignsubmission_file_"
    assert [s for s, _ in _students([inner], tmp_path)] == ["222"]
    # What the LMS made alone still decides as before.
    assert identity_of(Path("canvas/bobsmith_333_100_hw.ipynb")).student == "333"
    assert identity_of(Path("moodle/Bob Smith_333_assignsubmission_file_/hw.ipynb")).student == "333"


def test_a_folder_swapped_for_a_link_after_the_file_was_found_is_not_followed(tmp_path):
    """A drop folder students may write while a batch runs: between finding Mallory's file and
    reading it, her folder becomes a link to the course's; the grader, which may read the
    course's files, must not read the course's file of the same name as hers."""
    from grader.batch.stored import planned_key
    from grader.course.spec import load_assignment
    course, drop = tmp_path / "course", tmp_path / "drop"
    (drop / "mallory").mkdir(parents=True)
    course.mkdir()
    (course / "attention.ipynb").write_text("COURSE SOLUTION")
    (drop / "mallory" / "attention.ipynb").write_text("mallory's own")
    submissions, _ = collect([drop], tmp_path / "unpacked")
    (s,) = submissions
    assignment = load_assignment("rows")
    key = planned_key(s, assignment, lambda s, content: {})   # what the batch reads, when it reads it
    (drop / "mallory").rename(drop / "old")
    os.symlink(course, drop / "mallory")
    with pytest.raises(SubmissionError, match="replaced by another file after it was found"):
        planned_key(s, assignment, lambda s, content: {})
    (drop / "mallory").unlink()
    (drop / "old").rename(drop / "mallory")
    assert planned_key(s, assignment, lambda s, content: {}) == key
