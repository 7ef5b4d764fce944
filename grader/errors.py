"""The errors that stop a command with one line for the user (exit 2), kept apart from the
modules that raise them so the command line can catch them without importing those."""


class SubmissionError(Exception):
    """The file cannot be graded at all; the message is one line for the user."""


class SpecError(Exception):
    """The spec file is unusable; the message is one line."""
