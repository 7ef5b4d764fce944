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

Moodle (assignment > Upload grading worksheet): the offline grading worksheet, matched on
"Identifier", "Participant N", where N is the number Moodle's "Download all submissions" puts
in each folder name (Full Name_N_assignsubmission_file_); "Grade" is read as the new grade.
Full name, Maximum Grade and Feedback comments are there for the person importing.

A Moodle student whose file could not be graded, and has no override, gets an empty cell:
Moodle then leaves that grade as it is.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from .files import write_atomically
from .gradebook import StudentRow, cell, number

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


def feedback(s: StudentRow) -> str:
    mistakes = "; ".join(f"{f['name']}: {f['mistake']}" for f in s.functions if f["mistake"])
    parts = [f"Autograded {number(s.score)} / {number(s.max_score)}"] + ([mistakes] if mistakes else [])
    if s.override:
        parts.append(f"adjusted by the staff ({s.override['change']}): {s.override['reason']}")
    return ". ".join(parts) + "."


def moodle(students: list[StudentRow], max_score: float) -> str:
    rows = [["Identifier", "Full name", "Grade", "Maximum Grade", "Feedback comments"]]
    rows += [[f"Participant {cell(s.student)}", cell(s.name), number(s.final_score), number(max_score),
              cell(feedback(s))] for s in students]
    return _csv(rows)


def write_exports(students: list[StudentRow], outdir: Path, column: str, max_score: float) -> list[str]:
    """Write each LMS's file when some of the students' ids came from its export; returns the
    names written."""
    written = []
    from_canvas = [s for s in students if s.lms == "canvas"]
    if from_canvas:
        write_atomically(Path(outdir) / CANVAS_FILE, canvas(from_canvas, column, max_score))
        written.append(CANVAS_FILE)
    from_moodle = [s for s in students if s.lms == "moodle"]
    if from_moodle:
        write_atomically(Path(outdir) / MOODLE_FILE, moodle(from_moodle, max_score))
        written.append(MOODLE_FILE)
    return written
