"""`grader spec infer` says what it decided: each function or class it leaves out comes with
the convention it could not express, in the words of the spec reference (docs/specs.md: its
roles, `params`, `keys`, `returns`, `construct`, `method`), so that course staff know what to
write by hand."""
import subprocess
from pathlib import Path

import nbformat
import numpy as np
import pytest

from grading_helpers import GRADER, expect_slow
from grader.authoring.spec_tools.candidates import candidates, class_table
from grader.authoring.spec_tools.infer import ADDITIVE
from grader.authoring.spec_tools.probe import NOT_CALLED, RAISED, REFUSED, UNREAD, Probed
from grader.authoring.spec_tools.returned import why_unread
from grader.authoring.spec_tools.signatures import (notebook_class_signatures, notebook_functions,
                                                    uncallable_functions)
from grader.calling import cases
from grader.calling.classes import made_as, sent_arguments
from grader.judging.checks import Probe
from grader.calling.conventions import RETURN_NAMES, parse_convention
from grader.calling.params import ROLES
from grader.calling.returns import Tolerance
from grader.kernel_side.wire import encode_value
from grader.reference.attention import attention


def _nb(*cells: str):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def _why(source: str) -> str:
    (signature,) = notebook_functions(_nb(source))
    found = candidates(signature)
    assert not found.found
    return found.why_none


def test_a_parameter_no_role_is_known_by_lists_the_roles_and_what_to_write():
    why = _why("def score(Q, K, alpha):\n    return Q")
    assert "its parameter `alpha` has a name no role is known by (roles: " + ", ".join(ROLES) + ")" in why
    assert '`{ name = "alpha", role = ... }`' in why and "a default to leave it out" in why


def test_a_dict_read_by_no_key_or_by_keys_no_role_is_named_like_says_to_write_its_keys():
    why = _why("def f(x, params):\n    return x @ params")
    assert "`params` would hold weights (a dict or an object), but the function reads no key or attribute of it " \
           "by name" in why
    assert 'params["W_q"]' in why and "**params" in why and "`keys = { KEY = ROLE, ... }`" in why
    why = _why('def f(x, params):\n    return x @ params["alpha"]')
    assert "`params` is read as a dict or an object, but none of the keys it reads (alpha) is named like a role " \
           "(x, memory" in why


def test_a_reading_the_spec_refuses_says_which_reading_and_the_spec_s_rule():
    # A memory without the projections keys and values are made by: no reading is a convention.
    why = _why("def f(x, memory):\n    return x")
    assert why.startswith("no reading of its parameters is a convention the spec can write: read as `x` as x, "
                          "`memory` as memory, "), why


def test_a_constructor_parameter_without_a_role_lists_the_construct_roles():
    signatures, _ = notebook_class_signatures(_nb(
        "class A:\n    def __init__(self, d_model, alpha):\n        pass\n"
        "    def forward(self, x):\n        return x"))
    table, why = class_table(signatures[0])
    assert table is None
    assert why.startswith("its constructor's parameter `alpha` has a name no role is known by (a `construct` role: "
                          "d_model, d_k, n_heads, scale, causal, wq"), why
    assert "by hand in the class table's `construct`" in why


def test_a_constructor_s_axis_with_a_default_is_left_to_it_and_a_size_named_dim_is_read_as_one():
    signatures, _ = notebook_class_signatures(_nb(
        "class Softmax:\n    def __init__(self, dim=-1):\n        self.dim = dim\n"
        "    def forward(self, x):\n        return x",
        "class Norm:\n    def __init__(self, d_model, axis=None):\n        pass\n"
        "    def forward(self, x):\n        return x",
        "class Block:\n    def __init__(self, dim, num_heads=2):\n        pass\n"
        "    def forward(self, x):\n        return x",
        "class Wide:\n    def __init__(self, dim=512):\n        pass\n"
        "    def forward(self, x):\n        return x"))
    tables = {s.name: class_table(s)[0] for s in signatures}
    assert tables["Softmax"] == {"method": "forward"}
    assert tables["Norm"]["construct"] == [{"name": "d_model", "role": "d_model"}]
    assert tables["Block"]["construct"] == [{"name": "dim", "role": "d_model"},
                                            {"name": "num_heads", "role": "n_heads"}]
    assert tables["Wide"]["construct"] == [{"name": "dim", "role": "d_model"}]


def test_a_class_graded_through_another_method_is_told_to_name_it():
    _, why = notebook_class_signatures(_nb(
        "class Attention:\n    def attend(self, x):\n        return x\n    def show(self):\n        pass",
        "class Nothing:\n    pass",
        "class Starred:\n    def __init__(self, *sizes):\n        pass\n    def forward(self, x):\n        return x"))
    assert why["Attention"].endswith('name the method it is graded through by hand, `method = "attend"` in the '
                                     "convention's class table (its methods: attend)")
    assert why["Nothing"] == "a class with no forward (or __call__) method taking arguments"
    assert "as the class table's `construct` passes them" in why["Starred"]


def test_a_function_the_grader_cannot_call_is_said_and_not_silently_dropped():
    nb = _nb("def stacked(*arrays):\n    return arrays",
             "def keyed(x, *, w):\n    return x @ w",
             "def fine(x, *, w=None):\n    return x",
             "def redefined(*a):\n    pass\ndef redefined(x):\n    return x")
    why = uncallable_functions(nb)
    assert set(why) == {"stacked", "keyed"}
    assert why["stacked"].startswith("it takes *arrays, and a convention's `params` name each parameter in order")
    assert why["keyed"].startswith("its keyword-only parameter `w` has no default")


def test_what_came_back_unread_says_which_item_is_no_part_in_the_words_of_returns():
    conv = parse_convention({"params": [{"name": "Q", "role": "q"}, {"name": "K", "role": "k"},
                                        {"name": "V", "role": "v"}], "returns": "output"}, "t", "t")
    case = conv.prepare(cases.base_case(conv, 7))
    head = attention(case)["heads"][0]
    tol = Tolerance()
    parts = f"none of the parts `returns` may name ({', '.join(RETURN_NAMES)})"
    said = why_unread(conv, case, encode_value((head["output"], head["weights"], head["q"] + 1)), tol)
    assert said.startswith(f"no reading of its returns matched: on {case.label} it returned a 3-tuple: item 1 "), said
    assert "is the output; item 2 " in said and "is the attention weights; item 3 (ndarray (5, " in said
    assert said.endswith(parts)
    said = why_unread(conv, case, encode_value((head["output"], head["output"])), tol)
    assert said.endswith("is the output again")
    said = why_unread(conv, case, encode_value({"a": head["q"] + 1}), tol)
    assert said.endswith(f"and no value of it is one of the parts `returns` may name ({', '.join(RETURN_NAMES)})")
    assert why_unread(conv, case, encode_value(np.zeros(3)), tol).endswith(f"ndarray (3,), {parts}")


def test_the_reason_is_the_simplest_of_the_readings_that_got_furthest():
    """An unbatched reading that raises on batched code is tried before the batched one whose
    returns no part is: the reason is the second's, the first to get as far."""
    probed = Probed()
    probed.note(RAISED, "called with `query` as x (the simplest reading), the call raised ValueError")
    probed.note(RAISED, "a later reading raised too")
    assert probed.why_none.startswith("called with `query` as x")
    probed.note(UNREAD, "no reading of its returns matched: item 2 is none of the parts")
    probed.note(NOT_CALLED, "its calls were not made")
    probed.note(UNREAD, "a later reading whose returns were no part either")
    assert probed.why_none == "no reading of its returns matched: item 2 is none of the parts"
    probed.note(REFUSED, "the spec refuses it")
    assert probed.why_none == "the spec refuses it"


def test_how_an_object_was_made_is_said_from_what_the_grader_sent():
    conv = parse_convention({"params": [{"name": "x", "role": "x"}], "returns": "output", "class": {
        "method": "forward", "construct": [{"name": "d_model", "role": "d_model"}],
        "init": {"method": "init_weights", "params": [{"name": "Wq", "role": "wq"}, {"name": "Wk", "role": "wk"},
                                                      {"name": "Wv", "role": "wv"}]}}}, "t", "t")
    probe = Probe(conv.prepare(cases.base_case(conv, 7)))
    assert made_as("Attention", conv, sent_arguments(probe, conv)) == \
        "Attention(d_model=6), then init_weights(Wq, Wk, Wv)"
    held = parse_convention({"params": [{"name": "x", "role": "x"}], "returns": "output", "class": {
        "method": "forward", "attributes": {"W_q": "wq", "W_k": "wk", "W_v": "wv"}}}, "t", "t")
    probe = Probe(held.prepare(cases.base_case(held, 7)))
    assert made_as("Attention", held, sent_arguments(probe, held)) == \
        "Attention() with self.W_q, self.W_k, self.W_v set"


# Additive attention whose parameters' names say no role: left out, with the roles to give.
ADDITIVE_CELL = '''def additive_attention(query, keys, alpha, beta, gamma):
    e = np.tanh(query @ alpha + keys @ beta) @ gamma
    a = np.exp(e - e.max())
    return a / a.sum()
'''
# The same, its parameters named as Bahdanau's W1, W2 and v: inferred (one query, a vector).
NAMED_ADDITIVE_CELL = ADDITIVE_CELL.replace("additive_attention", "bahdanau").replace("alpha", "W1") \
    .replace("beta", "W2").replace("gamma", "v")


# Batched attention returning each key's weight summed over the queries, which is no part:
# its unbatched readings raise on `B, L, E = query.shape` before its batched ones are tried.
POOLED_CELL = '''def pooled(query, key, value, W_q, W_k, W_v):
    B, L, E = query.shape
    q, k, v = query @ W_q, key @ W_k, value @ W_v
    s = q @ k.transpose(0, 2, 1) / np.sqrt(k.shape[-1])
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return w @ v, w.sum(axis=1)
'''
# Course layers: a softmax over an axis given to the constructor with a default (an axis, left
# to it), and one whose axis has no default (read as a size: what it raised says how it was made).
LAYERS_CELL = '''class Softmax:
    def __init__(self, dim=-1):
        self.dim = dim

    def forward(self, x):
        e = np.exp(x - x.max(axis=self.dim, keepdims=True))
        return e / e.sum(axis=self.dim, keepdims=True)


class Narrowing:
    def __init__(self, dim):
        self.dim = dim

    def forward(self, x):
        e = np.exp(x - x.max(axis=self.dim, keepdims=True))
        return e / e.sum(axis=self.dim, keepdims=True)
'''


@pytest.mark.slow
def test_infer_prints_each_reason_in_the_spec_s_words(tmp_path):
    expect_slow()
    nb = _nb("import numpy as np",
             "def attention(Q, K, V):\n    s = Q @ K.T / np.sqrt(K.shape[1])\n"
             "    w = np.exp(s - s.max(1, keepdims=True))\n    w = w / w.sum(1, keepdims=True)\n    return w @ V, w",
             ADDITIVE_CELL, NAMED_ADDITIVE_CELL,
             "def stacked(*arrays):\n    return arrays",
             "def triple(Q, K, V):\n    out, w = attention(Q, K, V)\n    return out, w, Q + 1",
             "class Layer:\n    def attend(self, Q, K, V):\n        return attention(Q, K, V)",
             POOLED_CELL, LAYERS_CELL)
    solution = tmp_path / "solution.ipynb"
    nbformat.write(nb, solution)
    done = subprocess.run([*GRADER, "spec", "infer", str(solution), "-o", str(tmp_path / "spec.toml")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    said = {line.split(":")[0].removeprefix("  left out "): line for line in done.stdout.splitlines()
            if line.startswith("  left out ")}
    assert set(said) == {"additive_attention", "stacked", "triple", "Layer", "pooled", "Narrowing"}, done.stdout
    assert "parameter `alpha` has a name no role is known by (roles: x, memory" in said["additive_attention"]
    # Returning the weights only, its keys need not be the values: the plainest reading is kept.
    assert "bahdanau: query=q, keys=k, W1=score_wq, W2=score_wk, v=score_v; one query, a vector; returns " \
           "weights" in done.stdout
    assert said["additive_attention"].endswith(ADDITIVE), said["additive_attention"]
    assert "it takes *arrays, and a convention's `params` name each parameter in order" in said["stacked"]
    assert "no reading of its returns matched" in said["triple"] and "item 3 (ndarray" in said["triple"]
    assert f"({', '.join(RETURN_NAMES)})" in said["triple"]
    assert '`method = "attend"`' in said["Layer"]
    assert ADDITIVE not in said["triple"] and ADDITIVE not in said["stacked"]
    # Batched: its unbatched readings raise first, its batched ones return what no part is.
    assert "no reading of its returns matched: on N = 5, D = 6, B = 3" in said["pooled"], said["pooled"]
    assert "is none of the parts" in said["pooled"] and "raised" not in said["pooled"], said["pooled"]
    # A size read for `dim` (no default): the reason says how the object was made.
    assert "on an object made as Narrowing(dim=6), Narrowing.forward(x) raised AxisError" in said["Narrowing"]
    # `dim=-1` is an axis, left to its default: the layer is a softmax over the last axis.
    assert "Softmax: an object made as (), holding no weights; its forward takes x=scores" in done.stdout
    assert Path(tmp_path / "spec.toml").is_file()
