"""Writes tests/fixtures/support/: a course whose homework is a module of its own small package
`mytorch` (course/support/mytorch: activation.py with a Softmax layer, utils.py with
split_heads and merge_heads), its spec course/assignment.toml, and the students' files: the
worked attention.py, written with relative imports as a module of that package; the same with
one planted mistake in each function; a notebook that imports the package by its name; and two
that attack the course's modules (rewrite them in the kernel, shadow them from the notebook's
folder).

Run `python tests/make_support_fixtures.py` after changing a text below; the files are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import planted

HERE = Path(__file__).resolve().parent / "fixtures" / "support"
COURSE = HERE / "course"

SPEC = '''# Homework written inside the course's own package: attention.py imports its siblings
# (`from .activation import Softmax`, `from .utils import split_heads`), which the course ships.
name = "course-support"
title = "Attention inside the course's mytorch package"

[support]
package = "mytorch"
path = "support/mytorch"

[[functions]]
name = "self_attention"
[functions.convention]
description = "one head, tokens as rows; returns (output, weights)"
params = [{ name = "X", role = "x" }, { name = "W_q", role = "wq" }, { name = "W_k", role = "wk" },
          { name = "W_v", role = "wv" }]
returns = ["output", "weights"]

[[functions]]
name = "multi_head_attention"
[functions.convention]
description = "fused weights split into heads by the course's split_heads, output projection W_o"
params = [{ name = "X", role = "x" }, { name = "W_q", role = "wq" }, { name = "W_k", role = "wk" },
          { name = "W_v", role = "wv" }, { name = "W_o", role = "wo" }, { name = "n_heads", role = "n_heads" }]
returns = "output"
'''

SUPPORT = {
    "__init__.py": '"""mytorch: the course\'s own small framework; the homework sits beside it."""\n',
    "activation.py": '''"""The course's activation layers."""
import numpy as np


class Softmax:
    """Softmax along one axis (the last by default), as the course's layers apply it."""

    def __init__(self, axis=-1):
        self.axis = axis

    def forward(self, x):
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return e / e.sum(axis=self.axis, keepdims=True)
''',
    "utils.py": '''"""Reshaping helpers the course gives its students."""


def split_heads(x, n_heads):
    """N x (H * d) -> H x N x d: head h is the h-th block of d columns."""
    n, width = x.shape
    return x.reshape(n, n_heads, width // n_heads).transpose(1, 0, 2)


def merge_heads(x):
    """H x N x d -> N x (H * d), the inverse of split_heads."""
    h, n, d = x.shape
    return x.transpose(1, 0, 2).reshape(n, h * d)
''',
}

HEADER = '''"""mytorch/attention.py: attention built from the course's layers."""
import numpy as np

from .activation import Softmax
from .utils import merge_heads, split_heads
'''

# Each function, worked; MISTAKES replaces one line of it to make the mistake named.
WORKED = {
    "self_attention": '''
def self_attention(X, W_q, W_k, W_v):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    weights = Softmax().forward(Q @ K.T / np.sqrt(K.shape[1]))
    return weights @ V, weights
''',
    "multi_head_attention": '''
def multi_head_attention(X, W_q, W_k, W_v, W_o, n_heads):
    Q, K, V = (split_heads(X @ W, n_heads) for W in (W_q, W_k, W_v))
    weights = Softmax().forward(Q @ K.transpose(0, 2, 1) / np.sqrt(Q.shape[-1]))
    return merge_heads(weights @ V) @ W_o
''',
}

# function -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "self_attention": ("    weights = Softmax().forward(Q @ K.T / np.sqrt(K.shape[1]))",
                       "    weights = Softmax(axis=0).forward(Q @ K.T / np.sqrt(K.shape[1]))",
                       "softmax over the wrong axis"),
    "multi_head_attention": ("    return merge_heads(weights @ V) @ W_o", "    return merge_heads(weights @ V)",
                             "output projection missing"),
}

# A Softmax that is wrong (it normalises the columns): whichever submission imports it loses points.
WRONG_SOFTMAX = SUPPORT["activation.py"].replace("def __init__(self, axis=-1):", "def __init__(self, axis=0):")

# The worked solution, after trying to rewrite, replace, remove and add to the course's modules
# in the kernel's view. Its last cell fails if the package it sees changed (a changed mode alone
# is no change: it is the kernel's own copy, thrown away after it).
OVERWRITE = '''"""mytorch/attention.py, which also tries to change the course's modules for whoever comes next."""
import errno
import os

from . import activation

WRONG_SOFTMAX = {wrong!r}
course_package = os.path.dirname(activation.__file__)
module = activation.__file__


def course_files():
    found = {{}}
    for here, _, files in os.walk(os.path.dirname(course_package)):
        for name in files:
            with open(os.path.join(here, name), "rb") as f:
                found[os.path.join(here, name)] = f.read()
    return found


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


BEFORE = course_files()
ATTEMPTS = {{}}
for what, attempt in [
        ("rewrite activation.py", lambda: _write(module, WRONG_SOFTMAX)),
        ("make activation.py writable", lambda: os.chmod(module, 0o666)),
        ("rewrite it then", lambda: _write(module, WRONG_SOFTMAX)),
        ("remove activation.py", lambda: os.remove(module)),
        ("add a module", lambda: _write(os.path.join(course_package, "evil.py"), "")),
        ("move the package away", lambda: os.rename(course_package, course_package + ".old")),
        ("move the course folder away", lambda: os.rename(os.path.dirname(course_package),
                                                          os.path.dirname(course_package) + ".old"))]:
    try:
        attempt()
        ATTEMPTS[what] = "done"
    except OSError as exc:
        ATTEMPTS[what] = errno.errorcode.get(exc.errno, type(exc).__name__)
'''

OVERWRITE_CHECK = '''
if course_files() != BEFORE:
    raise RuntimeError(f"changed the course's modules: {{ATTEMPTS}}")
'''

# Before anything imports the package: a `mytorch` of the student's own, with the wrong Softmax,
# in the notebook's folder (where an upload's files would be, and first on Python's usual path).
SHADOW = '''"""mytorch/attention.py, shipped with its own copy of the course's package."""
import os

os.makedirs("mytorch", exist_ok=True)
for name, text in (("__init__.py", ""), ("activation.py", {wrong!r}), ("utils.py", {utils!r})):
    with open(os.path.join("mytorch", name), "w") as f:
        f.write(text)
'''

NOTEBOOK_IMPORTS = '''import numpy as np

from mytorch.activation import Softmax
from mytorch.utils import merge_heads, split_heads'''


def module(*parts: str) -> str:
    return "\n".join(part.strip("\n") + "\n" for part in parts)


def cells(*parts: str) -> str:
    """A .py file of several cells: each part after a `# %%` marker."""
    return "".join(f"# %%\n{part.strip()}\n\n" for part in parts)


def main():
    package = COURSE / "support" / "mytorch"
    package.mkdir(parents=True, exist_ok=True)
    (COURSE / "assignment.toml").write_text(SPEC)
    for name, text in SUPPORT.items():
        (package / name).write_text(text)
    (HERE / "worked.py").write_text(module(HEADER, *WORKED.values()))
    (HERE / "mistakes.py").write_text(module(HEADER, *planted(WORKED, MISTAKES).values()))
    (HERE / "overwrite.py").write_text(cells(OVERWRITE.format(wrong=WRONG_SOFTMAX), module(HEADER, *WORKED.values()),
                                             OVERWRITE_CHECK.format()))
    (HERE / "shadow.py").write_text(cells(SHADOW.format(wrong=WRONG_SOFTMAX, utils=SUPPORT["utils.py"]),
                                          module(HEADER, *WORKED.values())))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(NOTEBOOK_IMPORTS)]
    nb.cells += [nbformat.v4.new_code_cell(body.strip()) for body in WORKED.values()]
    for number, cell in enumerate(nb.cells):   # the same file every time the script runs
        cell.id = f"cell-{number}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, HERE / "notebook.ipynb")


if __name__ == "__main__":
    main()
