"""The errors that stop a command with one line for the user (exit 2, or 3 for the machine's
faults), kept apart from the modules that raise them so the command line can catch them
without importing those."""


class SubmissionError(Exception):
    """The file cannot be graded at all; the message is one line for the user."""


class SpecError(Exception):
    """The spec file is unusable; the message is one line."""


class MachineFault(Exception):
    """The grader's machine cannot run a kernel (ipykernel missing or broken, an unusable
    interpreter, no sandbox where --sandbox asked for it): never a submission's doing, so no
    result is made or kept for it and the command stops; the message is one line naming the cause."""
