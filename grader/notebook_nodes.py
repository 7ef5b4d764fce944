"""The notebook nodes the grader writes itself: a code cell for each of its requests (a run of
calls, a cell of the student's run again without part of it), the notebook nbclient holds
them in, the outputs it keeps of a cell (the harness's payload, the first error), and the
notebook a `.py` submission becomes (grader/intake/notebook.py). As
nbformat.v4's new_code_cell, new_notebook and new_output make them, less their validation
against the notebook schema, which costs about a millisecond each (tens per submission),
compiling the schema first (a twentieth of a `grader check`), and can only pass for nodes
built this way: a payload under the harness's JSON media type may be any JSON value, and an
error's fields are made text first. A student's `.ipynb` is read without it too
(grader/intake/notebook.py)."""
from __future__ import annotations

from nbformat import NotebookNode
from nbformat.corpus.words import generate_corpus_id as random_cell_id
from nbformat.v4.nbbase import nbformat, nbformat_minor


def code_cell(source: str) -> NotebookNode:
    return NotebookNode(id=random_cell_id(), cell_type="code", metadata=NotebookNode(), execution_count=None,
                        source=source, outputs=[])


def notebook(cells: list[NotebookNode] | None = None) -> NotebookNode:
    return NotebookNode(nbformat=nbformat, nbformat_minor=nbformat_minor, metadata=NotebookNode(),
                        cells=list(cells or []))


def display_output(data: dict) -> NotebookNode:
    return NotebookNode(output_type="display_data", data=NotebookNode(data), metadata=NotebookNode())


def error_output(ename: str, evalue: str, traceback: list[str]) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=traceback)
