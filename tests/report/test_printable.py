"""grader/report/printable.py, the one home of what a terminal may be given of a student's text."""
from dataclasses import dataclass

from grader.report.printable import printable, printable_data


def test_every_control_a_terminal_obeys_is_shown_as_its_escape():
    assert printable("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"        # OSC 52: the clipboard
    assert printable("ok\rScore: 25 / 25") == "ok\\x0dScore: 25 / 25"       # overwrite the line
    assert printable("abc\u202edef") == "abc\\u202edef"                     # bidi override
    assert printable("tab\tand\nnewline") == "tab\tand\nnewline"            # kept as they are
    assert printable("two\nlines", one_line=True) == "two\\nlines"


@dataclass
class _Shown:
    name: str
    points: float


def test_data_is_made_printable_inside_and_keys_too():
    data = {"\x1bkey": [("a\rb", 1), _Shown("\x07", 2.0)]}
    assert printable_data(data) == {"\\x1bkey": [("a\\x0db", 1), _Shown("\\x07", 2.0)]}
