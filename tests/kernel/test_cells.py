"""The grader's own notebook nodes (grader/kernel/cells.py) are what nbformat would make, and
valid, though built without its validation."""
import nbformat

from grader.kernel.cells import code_cell, notebook


def test_a_code_cell_is_nbformats_and_valid():
    ours, theirs = code_cell("x = 1"), nbformat.v4.new_code_cell("x = 1")
    assert ours.keys() == theirs.keys() and ours.id != theirs.id
    assert {k: v for k, v in ours.items() if k != "id"} == {k: v for k, v in theirs.items() if k != "id"}
    nbformat.validate(notebook([ours, code_cell("")]))


def test_a_notebook_is_nbformats_and_valid():
    assert notebook() == nbformat.v4.new_notebook()
    cells = [code_cell("a"), code_cell("b")]
    made = notebook(cells)
    assert made.cells == cells and made.cells is not cells
    nbformat.validate(made)
