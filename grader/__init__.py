"""Autograder for self-attention assignments in NumPy."""
from pathlib import Path as _Path

__version__ = "0.1.0"

# An installed grader holds reference/ and templates/ as grader.reference and
# grader.templates. In a source checkout they sit beside grader/, so let the package find
# them there too; then `python -m grader.cli` works from the checkout as well.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "reference" / "attention.py").is_file() and (_checkout / "pyproject.toml").is_file():
    __path__.append(str(_checkout))


def load_ipython_extension(ipython):
    """`%load_ext grader` in a notebook: adds `%grade` (see grader/in_notebook.py)."""
    from .in_notebook import register
    register(ipython)


def check(path=None, assignment=None, show=True):
    """Grade the saved notebook this kernel belongs to (or `path`) in a separate, sandboxed
    process, as `grader check` does, and show its report here; returns the result."""
    from .in_notebook import check as check_saved
    return check_saved(path, assignment, show)
