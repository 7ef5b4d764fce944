"""What a terminal may be given of a text that came from a notebook or its kernel.

Error messages, tracebacks, function and file names are the student's to choose, and a
terminal obeys the control sequences in what it prints: an OSC 52 sequence writes the
reader's clipboard, a carriage return or a cursor movement overwrites the grader's own lines
with a fake "Score: 25 / 25", a bidi override reorders what is shown. Every such character is
shown instead as its escape (`\\x1b`, `\\r`, `\\u202e`), on a terminal and in a pipe alike,
since a piped log is read on a terminal later. This module is the one home of that rule;
the grader adds its own colours only after it has applied it.
"""
from __future__ import annotations

import dataclasses
import re

# C0 and C1 controls but the newline and the tab, DEL, the line and paragraph separators,
# the bidirectional marks, embeddings, overrides and isolates, and lone surrogates (which
# cannot even be encoded for the terminal).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                    "\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, one_line: bool = False) -> str:
    """`text` with every character a terminal would act on shown as its escape; with
    `one_line`, its newlines too, so that it cannot start a line of its own."""
    text = UNSAFE.sub(_escape, str(text))
    return text.replace("\n", "\\n") if one_line else text


def printable_data(value):
    """`value` with every text in it made printable: strings, and the strings inside dicts,
    lists, tuples and dataclasses (a result's view), keys included."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_data(k): printable_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(printable_data(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: printable_data(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value
