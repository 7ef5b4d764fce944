"""`%load_ext attention_grader`, or `import attention_grader; attention_grader.check()`: the
grader's notebook extension under the distribution's own name.

A kernel puts its working folder, the notebook's, first on its import path, so a grader.py
there (a course's helper, a %%writefile cell) is what `import grader` and `%load_ext grader`
find. This module imports the installed package past that folder, and leaves `import grader`
to the notebook's own grader.py.
"""
from __future__ import annotations

import importlib
import os
import sys


def _is_the_grader(module) -> bool:
    return hasattr(module, "__path__") and hasattr(module, "load_ipython_extension")


def _notebook_helper():
    """The grader's in-notebook module, imported with the working folder off the import path;
    whatever `grader` the notebook had imported stays its own."""
    theirs = {name: module for name, module in sys.modules.items() if name == "grader" or name.startswith("grader.")}
    if _is_the_grader(theirs.get("grader")):
        return importlib.import_module("grader.student.in_notebook")
    folder = os.path.realpath(os.getcwd())
    path = list(sys.path)
    for name in theirs:
        del sys.modules[name]
    sys.path[:] = [p for p in path if os.path.realpath(p or ".") != folder]
    try:
        helper = importlib.import_module("grader.student.in_notebook")
    finally:
        # The helper keeps what it imported; `import grader` stays the notebook's to resolve.
        sys.path[:] = path
        for name in [n for n in sys.modules if n == "grader" or n.startswith("grader.")]:
            del sys.modules[name]
        sys.modules.update(theirs)
    return helper


def load_ipython_extension(ipython):
    """Adds `%grade` (see grader/student/in_notebook.py)."""
    _notebook_helper().register(ipython)


def check(path=None, assignment=None, show=True):
    """Grade the saved notebook this kernel belongs to (or `path`) in a separate, sandboxed
    process, as `grader check` does, and show its report here; returns the result."""
    return _notebook_helper().check(path, assignment, show)
