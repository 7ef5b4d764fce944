"""Cells that are not Python (magics, shell escapes, help) are read as IPython reads them, by
IPython's own transformer loaded without the rest of IPython."""
from __future__ import annotations

import subprocess
import sys

import pytest

from grader.intake import source_scan

CELLS = ["%matplotlib inline\nimport numpy as np\n",
         "!pip install numpy\nx = 1\n",
         "%%time\ny = [i for i in range(3)]\n",
         "np.exp?\n",
         "    indented = 1\n",
         "files = !ls\nprint(files)\n",
         "%load_ext autoreload\n%autoreload 2\ndef f(x):\n    return x\n"]


@pytest.mark.parametrize("cell", CELLS)
def test_a_cell_that_is_not_python_reads_as_ipython_reads_it(cell):
    from IPython.core.inputtransformer2 import TransformerManager
    assert source_scan.python_source(cell) == TransformerManager().transform_cell(cell)
    # ... through the module loaded on its own, not the usual import's
    assert type(source_scan._transformer()).__module__ == source_scan.TRANSFORMER_MODULE


@pytest.mark.slow
def test_scanning_a_notebook_with_magics_does_not_import_ipython():
    code = ("import sys\n"
            "from grader.intake.source_scan import scan\n"
            f"found = scan(list(enumerate({CELLS!r})), {{'f'}}, {{}})\n"
            "print('f' in found.definitions, 'IPython' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


@pytest.mark.parametrize("cell", ["x = __ｉmport__('scipy')",
                                  "from importlib import ｉmport_module\nｉmport_module('scipy')"])
def test_an_import_written_with_a_letter_python_reads_as_ascii_is_found(cell):
    """The scan walks only the cells whose text can hold an import (source_scan.may_hold); a
    name with a fullwidth letter is that name to Python (NFKC), so non-ASCII text is walked."""
    assert (0, 1 if "__" in cell else 2, "scipy") in source_scan.scan([(0, cell)], set()).imports


def test_a_graded_function_defined_with_a_letter_python_reads_as_ascii_is_found():
    scan = source_scan.scan([(0, "X = [[1.0, 2.0]]"), (1, "def ｓelf_attention(x):\n    return x")], {"self_attention"})
    assert scan.definers == {"self_attention": [1]}
