"""Identity forgeries the first attack tests did not try: a file name the student chose that
moves where an LMS's name is read, and a name below an LMS's folder in a path the staff give.
Then what a download must never lose or merge: an upload with nothing gradable is a row saying
so, and an LMS's download given one level too deep stops the batch instead of becoming one
student."""
import csv
import io
import json
import os
import zipfile
from pathlib import Path

import nbformat
import pytest

from grading_helpers import run_grader
from grader.batch.lms_gradebooks import CANVAS_FILE
from grader.cli import main
from grader.errors import SubmissionError
from grader.intake.discover import collect, identity_of
from grader.intake.notebook import notebook_from_python


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
    from grader.batch.resume import planned_key
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


# --- An upload with nothing gradable is a row ------------------------------------------------

NESTED = "nothing gradable in the upload: a nested archive"
NO_SUBMISSION_FILE = "nothing gradable in the upload: no notebook (.ipynb) or .py file"


def _zip_in_a_zip(tmp_path: Path) -> bytes:
    inner = _zip(tmp_path / "inner.zip", {"hw.ipynb": "{}"})
    return _zip(tmp_path / "outer.zip", {"inner.zip": inner.read_bytes()}).read_bytes()


def _rows(paths, tmp_path) -> dict[str, tuple[str, str]]:
    """student -> (the file that is their row, its problem), for students with one row each."""
    submissions, _ = collect(paths, tmp_path / "unpacked")
    assert len({s.student for s in submissions}) == len(submissions), [s.source for s in submissions]
    return {s.student: (s.name, s.problem or "") for s in submissions}


def test_a_canvas_upload_holding_only_a_zip_inside_a_zip_is_a_row_saying_so(tmp_path):
    """Lee Ann (222) uploads a zip whose only member is another zip: archives inside a
    student's archive stay shut, and her upload left no row at all."""
    nested = _zip_in_a_zip(tmp_path)
    download = _zip(tmp_path / "submissions.zip", {"bobsmith_333_100_hw.ipynb": "{}", "leeann_222_101_hw.zip": nested})
    rows = _rows([download], tmp_path)
    assert sorted(rows) == ["222", "333"]
    assert rows["222"][0] == "leeann_222_101_hw.zip" and rows["222"][1].startswith(NESTED)
    # The download extracted into a folder, and a student's zip the staff name beside other files.
    folder = tmp_path / "canvas"
    folder.mkdir()
    (folder / "bobsmith_333_100_hw.ipynb").write_text("{}")
    (folder / "leeann_222_101_hw.zip").write_bytes(nested)
    assert _rows([folder], tmp_path)["222"][1].startswith(NESTED)
    (tmp_path / "ann.zip").write_bytes(nested)
    assert _rows([tmp_path / "ann.zip", folder / "bobsmith_333_100_hw.ipynb"], tmp_path)["ann"][1].startswith(NESTED)


@pytest.mark.slow
def test_a_zip_inside_a_zip_reaches_grades_csv_and_the_canvas_gradebook_says_it_leaves_it_out(tmp_path):
    download = _zip(tmp_path / "submissions.zip", {
        "bobsmith_333_100_hw.ipynb": nbformat.writes(notebook_from_python("x = 1\n")),
        "leeann_222_101_hw.zip": _zip_in_a_zip(tmp_path)})
    out = tmp_path / "out"
    code, _, stderr, _ = run_grader(["grade", download, "-o", out, "--cell-timeout", "4", "--call-timeout", "2",
                                     "--workers", "1", "--seed", "7"])
    assert code == 0, stderr
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}
    assert sorted(rows) == ["222", "333"]
    assert (rows["222"]["status"], rows["222"]["submission"]) == ("error", "leeann_222_101_hw.zip")
    (result,) = [json.loads(p.read_text()) for p in out.glob("222-*/result.json")]
    assert result["errors"][0]["evalue"].startswith(NESTED)
    assert f"{CANVAS_FILE} leaves out 222: not graded" in stderr


def test_an_lms_entry_with_only_a_pdf_is_a_row_and_a_pdf_beside_a_notebook_is_not(tmp_path):
    """Carol uploads only a PDF, in Moodle's, Canvas's and Gradescope's downloads, zipped or
    extracted: she is in grades.csv, as an error. Dan uploads his notebook and a PDF of it:
    his notebook is his row, with no error row beside it that could count instead."""
    moodle = _zip(tmp_path / "moodle.zip", {
        "Bob Smith_333_assignsubmission_file_/hw.ipynb": "{}",
        "Carol Day_444_assignsubmission_file_/report.pdf": "%PDF",
        "Dan Ro_555_assignsubmission_file_/hw.ipynb": "{}", "Dan Ro_555_assignsubmission_file_/hw.pdf": "%PDF"})
    canvas = _zip(tmp_path / "canvas.zip", {
        "bobsmith_333_100_hw.ipynb": "{}", "daycarol_444_101_report.pdf": "%PDF",
        "rodan_555_102_hw.ipynb": "{}", "rodan_555_103_hw.pdf": "%PDF"})
    gradescope = _zip(tmp_path / "gradescope.zip", {
        "assignment_5_export/submission_333/hw.ipynb": "{}", "assignment_5_export/submission_444/report.pdf": "%PDF",
        "assignment_5_export/submission_555/hw.ipynb": "{}", "assignment_5_export/submission_555/hw.pdf": "%PDF",
        "assignment_5_export/submission_metadata.yml": "{}"})
    for download, carol in [(moodle, "Carol Day_444_assignsubmission_file_"), (canvas, "daycarol_444_101_report.pdf"),
                            (gradescope, "submission_444")]:
        rows = _rows([download], tmp_path)
        assert sorted(rows) == ["333", "444", "555"], download.name
        assert rows["444"] == (carol, NO_SUBMISSION_FILE) and rows["555"][0].endswith(".ipynb")
        extracted = tmp_path / download.stem
        with zipfile.ZipFile(download) as zf:
            zf.extractall(extracted)
        rows = _rows([extracted], tmp_path)
        assert rows["444"] == (carol, NO_SUBMISSION_FILE) and rows["555"][0].endswith(".ipynb"), download.name
    # Only the LMS's entries are students: the staff's notes beside them stay nobody's row.
    (tmp_path / "moodle" / "notes.txt").write_text("to do")
    assert sorted(_rows([tmp_path / "moodle"], tmp_path)) == ["333", "444", "555"]


# --- An LMS's download one level too deep is never one student ---------------------------------

MOODLE_CLASS = {"Ann Lee_222_assignsubmission_file_/hw.ipynb": "{}",
                "Bob Smith_333_assignsubmission_file_/hw.ipynb": "{}",
                "Carol Day_444_assignsubmission_file_/attention.py": "x = 1"}


def test_moodles_download_zip_inside_a_folder_stops_the_batch_in_one_line(tmp_path, capsys):
    """A TA puts Moodle's download in a folder and grades the folder: the zip, one student's by
    the folder rule, would make the whole class one row named "submissions"."""
    hw3 = tmp_path / "hw3"
    hw3.mkdir()
    download = _zip(hw3 / "submissions.zip", MOODLE_CLASS)
    with pytest.raises(SubmissionError) as refused:
        collect([hw3], tmp_path / "unpacked")
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"{download} holds the uploads of 3 students under Moodle's names")
    assert f"grader grade {download}" in said
    assert main(["grade", str(hw3), "-o", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "name it instead of its folder" in lines[0]
    assert not (tmp_path / "out" / "grades.csv").exists()
    # Named itself, it is the download, as the docs say; and a student's own zip in a folder
    # that names one other student stays the student's.
    assert [s for s, _ in _students([download], tmp_path)] == ["222", "333", "444"]
    _zip(hw3 / "submissions.zip", {"Bob Smith_333_assignsubmission_file_/hw.ipynb": "{}"})
    assert [s for s, _ in _students([hw3], tmp_path)] == ["submissions"]


def test_a_download_extracted_into_a_subfolder_or_zipped_by_gradescope_is_never_one_student(tmp_path):
    """The same mistake one way further: the TA extracts Moodle's zip into course/hw3 (or
    Canvas's into course/canvas), or keeps Gradescope's export zip in course/, and grades
    course/. A student's own folder or zip that names several other students is refused the
    same way, never read as theirs."""
    course = tmp_path / "course"
    for name, data in MOODLE_CLASS.items():
        (course / "hw3" / name).parent.mkdir(parents=True, exist_ok=True)
        (course / "hw3" / name).write_text(data)
    with pytest.raises(SubmissionError, match="hw3 holds the uploads of 3 students under Moodle's names"):
        collect([course], tmp_path / "unpacked")
    (course / "hw3").rename(tmp_path / "hw3")
    (course / "canvas").mkdir()
    (course / "canvas" / "bobsmith_333_100_hw.ipynb").write_text("{}")
    (course / "canvas" / "leeann_222_101_hw.py").write_text("x = 1")
    with pytest.raises(SubmissionError, match="canvas holds the uploads of 2 students under Canvas's names"):
        collect([course], tmp_path / "unpacked")
    (course / "canvas").rename(tmp_path / "canvas")
    _zip(course / "export.zip", {"assignment_5_export/submission_111/hw.ipynb": "{}",
                                 "assignment_5_export/submission_222/hw.zip": "not opened to decide",
                                 "assignment_5_export/submission_metadata.yml": "{}"})
    with pytest.raises(SubmissionError, match="export.zip holds the uploads of 2 students under Gradescope's"):
        collect([course], tmp_path / "unpacked")
    # Named themselves, each is its LMS's download.
    assert [s for s, _ in _students([tmp_path / "hw3"], tmp_path)] == ["222", "333", "444"]
    assert [s for s, _ in _students([tmp_path / "canvas"], tmp_path)] == ["222", "333"]
