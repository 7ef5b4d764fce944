"""A notebook's text never drives the reader's terminal: the control sequences in its error
messages, tracebacks, names and file names reach neither `grader check` (on a terminal or
piped), `grader grade` nor `grader check --watch` as such; they are shown as escapes."""
import re
import shutil
import subprocess

import nbformat
import pytest

from grading_helpers import GRADER, SUBMISSIONS, own_run_environment, run_grader
from grader.result import CheckResult, ErrorRecord, GradeResult
from grader.report.terminal import summary
from grader.report.view import result_view
from grader.student.regrade_on_save import changes, watch

# What a terminal acts on: C0 controls but newline and tab, DEL, C1 controls, the line and
# paragraph separators and the bidi controls.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# OSC 52 writes the reader's clipboard; the rest erases the line and writes a score over it.
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4vKg==\x07"
FAKE_SCORE = "\r\x1b[2KScore: 25 / 25"
EVIL = CLIPBOARD + FAKE_SCORE + "\u202e\x9b31m"
GRADER_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def hostile_notebook(folder, name="hw.ipynb"):
    """A correct solution, then a cell that raises with the control sequences, and a
    multi-head function that raises them when called."""
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(f"raise ValueError({EVIL!r} + '\\nScore: 25 / 25')"))
    # The raw characters in the source itself too, where the failing line is read from (but
    # the carriage return, which would end the line there).
    raw = EVIL.replace("\r", "\\r")
    nb.cells.append(nbformat.v4.new_code_cell("def multi_head_attention(X, Wq, Wk, Wv, H):\n"
                                              f"    raise RuntimeError('{raw}')\n"))
    path = folder / name
    nbformat.write(nb, path)
    return path


def assert_nothing_for_the_terminal(text: str, colour: bool = False) -> None:
    if colour:
        text = GRADER_COLOUR.sub("", text)
    assert not CONTROLS.search(text), [line for line in text.splitlines() if CONTROLS.search(line)][:3]
    assert not any(line.startswith("Score: 25") for line in text.splitlines())


@pytest.mark.slow
def test_check_piped_shows_the_notebooks_control_sequences_as_escapes(tmp_path):
    code, out, err, _ = run_grader(["check", hostile_notebook(tmp_path), "--cell-timeout", "4"])
    assert code == 1, out + err
    assert_nothing_for_the_terminal(out + err)
    assert "\\x1b]52;c;" in out and "\\x0d\\x1b[2KScore" in out   # shown, escaped, never acted on
    assert "the call raised RuntimeError: \\x1b]52;c;" in out
    assert sum(line.startswith("Score: ") for line in out.splitlines()) == 1


@pytest.mark.slow
def test_check_on_a_terminal_adds_only_its_own_colours(tmp_path):
    """On a terminal (a pseudo-terminal here) the grader colours its summary: those are the
    only escape sequences that reach it, a control file name included."""
    import os
    import pty
    path = hostile_notebook(tmp_path, "hw\x1b]0;owned\x07\u202e.ipynb")
    primary, secondary = pty.openpty()
    process = subprocess.Popen([*GRADER, "check", str(path), "--cell-timeout", "4"], stdout=secondary,
                               stderr=secondary, env={k: v for k, v in own_run_environment().items()
                                                      if k != "NO_COLOR"})
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:   # the terminal's other end closed: the grader has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=300) == 1
    text = b"".join(chunks).decode()
    assert GRADER_COLOUR.search(text)   # it is coloured: the terminal was seen as one
    assert_nothing_for_the_terminal(text.replace("\r\n", "\n"), colour=True)
    assert "hw\\x1b]0;owned\\x07\\u202e.ipynb" in text


@pytest.mark.slow
def test_grade_shows_nothing_of_the_notebooks_control_sequences(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    hostile_notebook(inputs, "evil\x1b]52;c;AAAA\x07\r\u202e.ipynb")
    shutil.copy(SUBMISSIONS / "worked_solution.ipynb", inputs / "ok.ipynb")
    code, out, err, _ = run_grader(["grade", inputs, "-o", tmp_path / "out", "--cell-timeout", "4"])
    assert code == 0, out + err
    assert_nothing_for_the_terminal(out + err)
    assert "2 graded" in out


def test_the_summary_escapes_every_text_from_the_notebook():
    """Names, messages, errors, globals and the file name, on a terminal (coloured) and not."""
    result = GradeResult(submission=f"hw{EVIL}.ipynb", assignment="rows", seed=1, checks=[
        CheckResult("f.fixed", "f", "fixed", "Sheet", "failed", 0, 3, f"the call raised ValueError: {EVIL}"),
        CheckResult("f.dtypes", "f", "dtypes", "dtypes", "error", 0, 1, EVIL, diagnosis=EVIL, advice=EVIL)],
        errors=[ErrorRecord(2, "error", f"Err{EVIL}", f"{EVIL}\nScore: 25 / 25", f"---> 1 raise X('{EVIL}')",
                            source=f"x = '{EVIL}'")],
        functions={"f": {"found": True, "name": "f", "globals": {"D": repr(EVIL)}}})
    result.total()
    for colour in (False, True):
        text = summary(result, colour=colour, width=100)
        assert_nothing_for_the_terminal(text, colour=colour)
        assert "\\x1b]52;c;" in text


def test_watch_escapes_what_changed_and_keeps_each_change_to_its_line(tmp_path):
    error = ErrorRecord(0, "error", "ValueError", f"{EVIL}\nScore: 25 / 25")
    before = GradeResult(submission="hw.ipynb", assignment="rows", seed=1)
    after = GradeResult(submission="hw.ipynb", assignment="rows", seed=1, errors=[error])
    lines = changes(result_view(before), result_view(after))
    assert len(lines) == 2 and lines[1].startswith("  new problem: cell 1: ValueError: \\x1b]52;c;")
    assert_nothing_for_the_terminal("\n".join(lines))
    said = []
    path = tmp_path / f"hw{CLIPBOARD}\r\x1b[2K\u202e.ipynb"
    path.write_text("{}")
    results = iter([before, after])
    calls = iter([False, True])

    def save_then_stop():
        path.write_text('{"saved": 2}')
        return next(calls)
    watch(path, lambda: next(results), lambda r: summary(r), lambda r: result_view(r), said.append,
          stop=save_then_stop, poll=0)
    assert_nothing_for_the_terminal("\n".join(said))
    assert any("new problem" in s for s in said)
