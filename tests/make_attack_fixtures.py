"""Writes tests/fixtures/attacks/: notebooks that try to use a forbidden library without the
grader noticing. Each is a correct `rows` implementation whose softmax comes from
scipy.special; only the way it reaches scipy differs. In the sandbox the library is not
there at all, so each must score what a notebook without working functions scores (0).

Run `python tests/make_attack_fixtures.py` after changing an attack below; the notebooks
are committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent / "fixtures" / "attacks"

FUNCTIONS = '''
def self_attention(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    weights = softmax(Q @ K.T / np.sqrt(K.shape[1]), axis=1)
    return weights @ V, weights

def multi_head_attention(X, Wq, Wk, Wv, H):
    outputs, weights = [], []
    for idx in np.split(np.arange(Wk.shape[1]), H):
        out, w = self_attention(X, Wq[:, idx], Wk[:, idx], Wv[:, idx])
        outputs.append(out)
        weights.append(w)
    return np.concatenate(outputs, axis=1), weights
'''

HARNESS = "next(m for n, m in sys.modules.items() if 'grader' in n and hasattr(m, 'describe'))"

# The cells before the functions: each gets `softmax` from scipy.special its own way.
ATTACKS = {
    # The plain use, for comparison.
    "plain_import": ["from scipy.special import softmax"],
    # A computed import the static scan cannot see, then no trace in sys.modules.
    "computed_import": ['''
import importlib, sys
softmax = importlib.import_module("sci" + "py." + "spe" + "cial").softmax
for name in [n for n in sys.modules if n.split(".")[0] == "sci" + "py"]:
    del sys.modules[name]
'''],
    # After every cell, including the grader's, a forged description of the functions.
    "forged_describe_hook": ['''
import sys, json
from IPython.display import display
from scipy.special import softmax

def _forge(result):
    if "describe(" in (result.info.raw_cell or ""):
        forged = {"functions": {n: {"found": True, "name": n, "params": ["X", "Wq", "Wk", "Wv"],
                                    "globals": {}, "modules": []}
                                for n in ("self_attention", "multi_head_attention")}, "imported": []}
        display({"application/vnd.attention-grader+json": forged}, raw=True)

get_ipython().events.register("post_run_cell", _forge)
'''],
    # The grader's in-kernel module, patched to report no modules and no imports.
    "patched_harness": [f'''
import sys
from scipy.special import softmax
_harness = {HARNESS}
_describe = _harness.describe
def _quiet(functions, watched):
    return _describe(functions, [])
_harness.describe = _quiet
_harness._references = lambda value, seen: ({{}}, set())
'''],
    # Every later cell, the grader's probes among them, rewritten before it runs.
    "input_transformer": ['''
from scipy.special import softmax
def _rewrite(lines):
    return [line.replace("'scipy.special'", "'nothing.here'") for line in lines]
get_ipython().input_transformers_post.append(_rewrite)
'''],
    # The library bound as a default argument: no global of the function names it.
    "default_argument": [],
    # Not an import at all: the library's source read from disk and run.
    "source_file": ['''
import importlib.util, os
_path = os.path.join(os.path.dirname(importlib.util.find_spec("scipy").origin), "special", "_logsumexp.py")
_namespace = {}
exec(compile(open(_path).read(), "_logsumexp", "exec"), _namespace)
softmax = _namespace["softmax"]
'''],
}

# The library bound when the function is defined, under the name its body uses.
DEFAULT_ARGUMENT = FUNCTIONS.replace(
    "def self_attention(X, Wq, Wk, Wv):",
    'def self_attention(X, Wq, Wk, Wv, softmax=__import__("scipy.special", fromlist=["softmax"]).softmax):')


def notebook(cells: list[str]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c.strip()) for c in cells]
    return nb


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for name, cells in ATTACKS.items():
        functions = DEFAULT_ARGUMENT if name == "default_argument" else FUNCTIONS
        nb = notebook(["import numpy as np", *cells, functions])
        nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
