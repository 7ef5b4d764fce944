"""The grader's own notebook nodes (grader/notebook_nodes.py) are what nbformat would make, and
valid, though built without its validation."""
import nbformat

from grader.notebook_nodes import code_cell, display_output, error_output, notebook
from grader.kernel_side.wire import MIME


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


def test_the_harness_s_payload_as_an_output_is_nbformats_and_valid_whatever_it_holds():
    """Any JSON value the kernel sends under the harness's media type makes a valid output (so
    skipping nbformat's validation of it skips only its cost)."""
    for payload in ({"functions": {}}, [1, "two", None], "text", 3.5, None, {"nested": [{"a": [True]}]}):
        ours, theirs = display_output({MIME: payload}), nbformat.v4.new_output("display_data", data={MIME: payload})
        assert ours == theirs
        nbformat.v4.nbbase.validate(ours, "display_data")


def test_an_error_output_is_nbformats_and_valid():
    fields = {"ename": "ValueError", "evalue": "bad", "traceback": ["line 1", "line 2"]}
    ours, theirs = error_output(**fields), nbformat.v4.new_output("error", **fields)
    assert ours == theirs
    nbformat.v4.nbbase.validate(ours, "error")
