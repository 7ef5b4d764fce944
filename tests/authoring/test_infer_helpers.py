"""spec infer leaves a solution's own helpers out (a function another calls, which no Markdown cell
names as a task), so that a student who writes the same step inline is not marked down; a helper
the Markdown names, or any function of a notebook without Markdown, stays a task."""
import nbformat
import pytest

from grader.authoring.spec_tools.helpers import helpers, kept_as_tasks
from grader.authoring.spec_tools.signatures import notebook_functions

SOFTMAX = ("def softmax(s):\n    e = np.exp(s - s.max(axis=-1, keepdims=True))\n"
           "    return e / e.sum(axis=-1, keepdims=True)")
ATTENTION = "def attention(Q, K, V):\n    return softmax(Q @ K.T / np.sqrt(K.shape[1])) @ V"
CLASS = ("class Attention:\n    def forward(self, Q, K, V):\n"
         "        return softmax(Q @ K.T / np.sqrt(K.shape[1])) @ V")


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbformat.v4.new_code_cell(c)
                for c in cells]
    return nb


def _helpers(*cells):
    nb = _nb(*cells)
    return helpers(nb, notebook_functions(nb))


@pytest.mark.parametrize("markdown, left_out", [
    ("md:# Attention\nImplement `attention(Q, K, V)`, the scaled dot-product attention.", True),
    ("md:# Attention\nImplement attention; apply a softmax to the scores.", True),
    ("md:# Attention\nFirst write `softmax`, then `attention`.", False),
    ("md:# Attention\nWrite softmax(x) over the last axis.", False),
])
def test_a_helper_is_left_out_unless_the_markdown_names_it_as_code(markdown, left_out):
    found = _helpers(markdown, "import numpy as np", SOFTMAX, ATTENTION)
    assert ("softmax" in found) == left_out and "attention" not in found
    if left_out:
        assert "attention calls it" in found["softmax"] and "--function softmax" in found["softmax"]


def test_a_helper_a_class_calls_is_one_too_and_a_notebook_without_markdown_names_every_task():
    # the module's own Markdown names it; the softmax it calls is the module's business
    assert "softmax" in _helpers("md:# Lab\nThe `Attention` module.", "import numpy as np", SOFTMAX, CLASS)
    assert _helpers("md:# Lab\nImplement the dot-product attention.", "import numpy as np",
                    "class DotProductAttention:\n    pass") == {}
    assert _helpers("import numpy as np", SOFTMAX, ATTENTION) == {}


def test_a_step_named_in_prose_by_its_words_is_a_task_and_a_called_attention_function_always_is():
    cells = ["md:### (a) Implement the dot-product softmax", "import numpy as np",
             "def dot_product_softmax(scores):\n    return np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)",
             "def attention(Q, K, V):\n    return dot_product_softmax(Q @ K.T) @ V"]
    assert _helpers(*cells) == {}
    assert "dot_product_softmax" in _helpers("md:# Attention", *cells[1:])
    single = ["md:# Heads", "import numpy as np", "def self_attention(X, Wq, Wk, Wv):\n    return X @ Wv",
              "def multi_head(X, Wq, Wk, Wv, H):\n    return self_attention(X, Wq, Wk, Wv)"]
    assert _helpers(*single) == {}   # it computes attention: a task whoever calls it


def test_an_attribute_a_method_sets_is_read_back_only_where_the_markdown_asks_for_it():
    said = _nb("md:# Attention\nStore the weights in `self.attention_scores`; `self.cache` is yours.")
    assert kept_as_tasks(said, ("attention_scores", "attn", "cache")) == ("attention_scores", "cache")
    assert kept_as_tasks(_nb("md:Keep the attention scores on the object."), ("attention_scores", "attn")) == \
        ("attention_scores",)
    assert kept_as_tasks(_nb("import numpy as np"), ("attn",)) == ("attn",)


def test_a_layer_class_another_class_makes_is_a_helper_unless_the_markdown_names_it():
    layer = "class Softmax:\n    def __init__(self, dim=-1):\n        self.dim = dim"
    module = "class Attention:\n    def __init__(self):\n        self.softmax = Softmax(dim=-1)"
    nb = _nb("md:# Lab\nThe `Attention` module.", "import numpy as np", layer, module)
    layers = {"Softmax": 1, "Attention": 3}   # how many parameters each graded method takes
    assert "Softmax" in helpers(nb, notebook_functions(nb), layers)
    assert "Attention" not in helpers(nb, notebook_functions(nb), layers)
    nb = _nb("md:# Lab\nWrite `Softmax` first.", "import numpy as np", layer, module)
    assert helpers(nb, notebook_functions(nb), layers) == {}
