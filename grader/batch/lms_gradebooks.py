"""Gradebook files an LMS imports as they are, for the students whose ids came from its export.

Canvas (Grades > Import): the columns of Canvas's own gradebook export, "Student", "ID",
"SIS User ID", "SIS Login ID", "Section", then one column per assignment, named as Canvas
names it ("Homework 3 (1234)" matches the existing assignment with id 1234; a new name makes a
new assignment), and the "Points Possible" row Canvas's export carries under the header.
Canvas matches a row by "ID", its user id, which is the number a Canvas submissions download
puts after the student's name (name_userid_attachmentid_file). Canvas's importer
(app/models/gradebook_importer.rb) reads an empty cell as a change that clears the grade, and
a row whose ID it does not know as a new student: so the file leaves out a student who could
not be graded (Canvas keeps their grade) and an anonymous one ("anon_<id>": the download of
an assignment that hides names carries no user id to match).

Moodle (assignment > Upload grading worksheet), as its importer reads the offline grading
worksheet (mod/assign/feedback/offline/importgradeslib.php and locallib.php): it finds the
columns "Identifier", "Grade" and "Last modified (grade)" by their names (and refuses a file
without any one of them), and the feedback columns by their plugins' names ("Feedback
comments"). "Identifier" is "Participant N", N being the participant's unique id in that
assignment, the number "Download all submissions" puts in each folder name (Full
Name_N_assignsubmission_file_). A row whose "Last modified (grade)" is more than a minute older
than the grade Moodle holds is skipped, grade and feedback, so a grade the staff changed in
Moodle after the grading wins; the time is read with PHP's strtotime. A row with an empty Grade
keeps its grade but still replaces its feedback, so a file that could not be graded, and has no
override, has no row at all. Full name and Maximum Grade are there for the person importing.
"""
from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.atomic_write import write_atomically
from grader.batch.gradebook import StudentRow, cell, number
from grader.intake.discover import CANVAS_LMS, MOODLE_LMS

CANVAS_FILE = "canvas_gradebook.csv"
MOODLE_FILE = "moodle_grading_worksheet.csv"


def _csv(rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def canvas_left_out(s: StudentRow) -> str:
    """Why Canvas's gradebook file leaves this student out, or "" (see the module docstring)."""
    if s.student.lower().startswith("anon_"):
        return "anonymous (the download carries no user id)"
    if s.final_score is None:
        return "not graded (Canvas keeps the grade it has)"
    return ""


def canvas(students: list[StudentRow], column: str, max_score: float) -> str:
    rows = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", cell(column)],
            ["Points Possible", "", "", "", "", number(max_score)]]
    rows += [[cell(s.name), cell(s.student), "", "", "", number(s.final_score)] for s in students
             if not canvas_left_out(s)]
    return _csv(rows)


# The worksheet's columns as Moodle's English language pack names them, in the order of its own
# download; the importer finds them by these names.
MOODLE_COLUMNS = ("Identifier", "Full name", "Grade", "Maximum Grade", "Last modified (grade)", "Feedback comments")
PARTICIPANT = "Participant "   # the importer strips this many characters to get the unique id
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def moodle_time(seconds: float) -> str:
    """A time as Moodle's worksheet writes it (userdate's "Monday, 23 November 2026, 1:05 PM",
    in English whatever the machine's locale), in UTC and saying so: PHP's strtotime then reads
    the same moment whatever the Moodle server's time zone."""
    t = time.gmtime(seconds)
    hour = t.tm_hour % 12 or 12
    return (f"{DAYS[t.tm_wday]}, {t.tm_mday} {MONTHS[t.tm_mon - 1]} {t.tm_year}, "
            f"{hour}:{t.tm_min:02d} {'AM' if t.tm_hour < 12 else 'PM'} UTC")


def feedback(s: StudentRow) -> str:
    """The student view's line (grader/report/view.py), then the staff's override. A file that could
    not be graded has a row only through an override, and its feedback says it was not graded."""
    said = "Not autograded: the file could not be graded." if s.status == "error" else s.feedback
    if not s.override:
        return said
    return f"{said} Adjusted by the staff ({s.override['change']}): {s.override['reason']}."


def decided_at(s: StudentRow, outdir: Path) -> float:
    """When this row's grade was decided: the grading of the file that counts (a result from
    before the time was kept: its file's date), or the override, whichever is later."""
    graded = s.graded_at
    if graded is None:
        try:
            graded = (Path(outdir) / s.folder / "result.json").stat().st_mtime
        except OSError:
            graded = time.time()
    given = (s.override or {}).get("given_at") or 0.0
    return max(graded, given)


def moodle(students: list[StudentRow], max_score: float, outdir: Path) -> str:
    rows = [list(MOODLE_COLUMNS)]
    rows += [[PARTICIPANT + cell(s.student), cell(s.name), number(s.final_score), number(max_score),
              moodle_time(decided_at(s, outdir)), cell(feedback(s))]
             for s in students if s.final_score is not None]
    return _csv(rows)


@dataclass(frozen=True)
class Gradebook:
    """An LMS's gradebook file: for the students whose ids came from its download (their
    identity's `lms`, grader/intake/discover.py), its name, its text, and why it leaves a
    student out (said, so that no one drops out of the gradebook unnoticed)."""
    lms: str
    file: str
    text: Callable[[list[StudentRow], str, float, Path], str]   # (students, column, max score, OUTDIR)
    left_out: Callable[[StudentRow], str] = lambda student: ""


# Every gradebook the grader writes: a new LMS is one entry, beside its download's names.
GRADEBOOKS = (
    Gradebook(CANVAS_LMS, CANVAS_FILE, lambda students, column, max_score, outdir: canvas(students, column, max_score),
              canvas_left_out),
    Gradebook(MOODLE_LMS, MOODLE_FILE, lambda students, column, max_score, outdir: moodle(students, max_score, outdir)),
)


def write_exports(students: list[StudentRow], outdir: Path, column: str, max_score: float) -> list[Gradebook]:
    """Write each LMS's file when some of the students' ids came from its download; returns the
    gradebooks written."""
    written = []
    for book in GRADEBOOKS:
        mine = [s for s in students if s.lms == book.lms]
        if mine:
            write_atomically(Path(outdir) / book.file, book.text(mine, column, max_score, outdir))
            written.append(book)
    return written
