"""Autograder for self-attention assignments in NumPy."""

__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """`%load_ext grader` in a notebook: adds `%grade` (see grader/student/in_notebook.py)."""
    from grader.student.in_notebook import register
    register(ipython)


def check(path=None, assignment=None, show=True):
    """Grade the saved notebook this kernel belongs to (or `path`) in a separate, sandboxed
    process, as `grader check` does, and show its report here; returns the result."""
    from grader.student.in_notebook import check as check_saved
    return check_saved(path, assignment, show)
