"""The notebook nodes the grader writes itself: a code cell for each of its requests (a run of
calls, a cell of the student's run again without part of it) and the notebook nbclient holds
them in. As nbformat.v4's new_code_cell and new_notebook make them, less their validation
against the notebook schema, which costs about a millisecond each (tens per submission) and
can only pass for nodes built this way; a student's notebook is still read and validated by
nbformat (grader/intake/notebook.py)."""
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
