"""Writes tests/fixtures/charge/: the worked notebook with one mistake each, to show that a
mistake is charged once (a wrong value by the checks that compare values, never again by
memory_layout or dtypes, which compare a function with its own answers), that those two still
catch what they are about, and that a correct output returned alone earns the output's share.
Their golden verdicts are in tests/fixtures/expected.json.

Run `python tests/make_charge_fixtures.py` after changing an edit below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "tests" / "fixtures" / "charge"
WORKED = ROOT / "submissions" / "worked_solution.ipynb"

# name -> the edits made to the worked notebook: (text as written, the same text changed)
EDITS = {
    # The scaling line left out: the values are wrong, nothing about layouts or dtypes is.
    "no_scaling_rows": [("    scores /= np.sqrt(d_k)\n", "")],
    # Normalised down each column: wrong weights, on every layout and dtype alike.
    "softmax_axis_rows": [("np.sum(exp_scores, axis=1, keepdims=True)", "np.sum(exp_scores, axis=0, keepdims=True)")],
    # Both functions return the output alone, as do the notebook's own cells that call them.
    "output_alone_rows": [
        ("    return output, attention_weights", "    return output"),
        ("output, attention_weights = self_attention(X, Wq, Wk, Wv)", "output = self_attention(X, Wq, Wk, Wv)"),
        ('\nprint("Self-Attention Matrix:\\n", attention_weights)', ""),
        ("output, weights = self_attention(X, Wq[:, idx], Wk[:, idx], Wv[:, idx])",
         "output = self_attention(X, Wq[:, idx], Wk[:, idx], Wv[:, idx])"),
        ("        head_weights.append(weights)\n", ""),
        ("    return output, head_weights", "    return output"),
    ],
    # X copied through its bytes in memory order: a Fortran-ordered X is read transposed.
    "memory_order_rows": [("    Q = X @ Wq\n",
                           '    X = np.frombuffer(X.tobytes(order="A"), dtype=X.dtype).reshape(X.shape)\n'
                           "    Q = X @ Wq\n")],
    # The output kept in an array of X's dtype: integer inputs truncate it.
    "integer_output_rows": [("    output = attention_weights @ V\n",
                             "    output = np.zeros((X.shape[0], V.shape[1]), dtype=X.dtype)\n"
                             "    output[:] = attention_weights @ V\n")],
}


def edited(edits: list[tuple[str, str]]):
    """The worked notebook with each edit made where its text occurs, exactly once."""
    nb = nbformat.read(WORKED, as_version=4)
    for text, changed in edits:
        found = [c for c in nb.cells if c.cell_type == "code" and text in c.source]
        assert len(found) == 1 and found[0].source.count(text) == 1, text
        found[0].source = found[0].source.replace(text, changed)
    return nb


def all_fixtures() -> dict:
    return {f"{name}.ipynb": edited(edits) for name, edits in EDITS.items()}


if __name__ == "__main__":
    HERE.mkdir(parents=True, exist_ok=True)
    for name, nb in all_fixtures().items():
        nbformat.write(nb, HERE / name)
        print(HERE / name)
