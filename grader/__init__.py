"""Autograder for self-attention assignments in NumPy."""
from pathlib import Path as _Path

__version__ = "0.1.0"

# An installed grader holds reference/ and templates/ as grader.reference and
# grader.templates. In a source checkout they sit beside grader/, so let the package find
# them there too; then `python -m grader.cli` works from the checkout as well.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "reference" / "attention.py").is_file() and (_checkout / "pyproject.toml").is_file():
    __path__.append(str(_checkout))
