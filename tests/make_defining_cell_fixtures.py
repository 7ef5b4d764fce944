"""Writes tests/fixtures/defining_cell/: notebooks whose cell defining `self_attention` fails
(it does not parse, a NameError before its `def` keeps the `def` from running, an import
fails and so does the `def` that needs it) or defines it under another name (`selfAttention`,
which the notebook then calls), while
`multi_head_attention`, defined in a later cell of its own, works. The cell that fails is
cell 5 of the notebook (a markdown cell comes first); its golden verdicts are in
tests/fixtures/expected.json.

Run `python tests/make_defining_cell_fixtures.py` after changing a source below; the notebooks
are committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent / "fixtures" / "defining_cell"

DATA = '''N, D = 5, 6
rng = np.random.default_rng(0)
X = rng.standard_normal((N, D))
Wq, Wk, Wv = (rng.standard_normal((D, D)) for _ in range(3))'''

SELF_ATTENTION = '''def self_attention(X, Wq, Wk, Wv):
    Q = X @ Wq
    K = X @ Wk
    V = X @ Wv

    d_k = K.shape[1]
    scores = Q @ K.T / np.sqrt(d_k)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights = e / e.sum(axis=1, keepdims=True)
    return weights @ V, weights'''

# Defined apart from self_attention, so that it is graded whatever became of that cell.
MULTI_HEAD = '''def multi_head_attention(X, Wq, Wk, Wv, H):
    outputs, all_weights = [], []
    for idx in np.split(np.arange(Wk.shape[1]), H):
        Q, K, V = X @ Wq[:, idx], X @ Wk[:, idx], X @ Wv[:, idx]
        scores = Q @ K.T / np.sqrt(len(idx))
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights = e / e.sum(axis=1, keepdims=True)
        outputs.append(weights @ V)
        all_weights.append(weights)
    return np.concatenate(outputs, axis=1), all_weights'''

# The source of cell 5 (index 4) in each notebook.
DEFINING_CELLS = {
    # line 6: `d_k = = K.shape[1]`
    "syntax_error": SELF_ATTENTION.replace("d_k = K.shape[1]", "d_k = = K.shape[1]"),
    # line 1 raises NameError before the def, which is in its block, so the def never runs
    "name_error_before_def": "if use_float64:\n" + "\n".join("    " + line if line else line
                                                             for line in SELF_ATTENTION.splitlines()),
    # line 1 fails, and as in Python nothing after it runs: the def (line 3) never does
    "failing_import": "from attention_types import Matrix\n\n" + SELF_ATTENTION.replace(
        "def self_attention(X, Wq, Wk, Wv):", "def self_attention(X: Matrix, Wq, Wk, Wv):"),
    # line 1 fails; the decorated def after it never runs, decorated or not
    "decorator_from_missing_package": "from attention_speedups import jit\n\n@jit\n" + SELF_ATTENTION,
    # the cell interrupts itself at line 1 (no timeout did): nothing after it runs either
    "raises_keyboard_interrupt": "raise KeyboardInterrupt\n\n" + SELF_ATTENTION,
    # runs: the function is correct, under a name of the student's own
    "renamed": SELF_ATTENTION.replace("def self_attention(", "def selfAttention("),
}
# The name the notebook calls its self-attention by, where it is not `self_attention`.
CALLED_AS = {"renamed": "selfAttention"}


def notebook(defining_cell: str, called_as: str = "self_attention"):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("## Self-attention"),
        nbformat.v4.new_code_cell("import numpy as np"),
        nbformat.v4.new_code_cell(DATA),
        nbformat.v4.new_markdown_cell("### (a) Self-attention"),
        nbformat.v4.new_code_cell(defining_cell),
        nbformat.v4.new_code_cell(f"output, weights = {called_as}(X, Wq, Wk, Wv)"),
        nbformat.v4.new_markdown_cell("### (b) Multi-head attention"),
        nbformat.v4.new_code_cell(MULTI_HEAD),
        nbformat.v4.new_code_cell("print(multi_head_attention(X, Wq, Wk, Wv, 3)[0].shape)"),
    ]
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index}"   # stable ids: the committed files do not change on each run
    return nb


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    for name, source in DEFINING_CELLS.items():
        nbformat.write(notebook(source, CALLED_AS.get(name, "self_attention")), HERE / f"{name}.ipynb")
