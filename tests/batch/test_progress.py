"""grader/batch/progress.py: a batch's progress, one line per submission in a log and one line
rewritten in place on a terminal, with the student's file name made printable."""
import io

from grader.batch.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_a_line_per_submission():
    log = io.StringIO()
    progress = Progress(2, log)
    progress.step("a.ipynb: 25/25 graded")
    progress.step("b\x1b[2J.ipynb: 0/25 graded")
    progress.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[############............] 1/2 ")
    assert lines[1].startswith("[########################] 2/2 ") and "b\\x1b[2J.ipynb" in lines[1]


def test_a_terminal_gets_one_line_rewritten_and_ended_once():
    screen = _Terminal()
    progress = Progress(3, screen)
    for name in ("a", "b", "c"):
        progress.step(name)
    progress.close()
    text = screen.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
