"""Writes tests/fixtures/classes/: a worked notebook for the class-based conventions of
tests/fixtures/classes/course.toml, two with a known mistake in each class, one whose
constructor raises, and one whose forward changes the weights it was given.

Run `python tests/make_class_fixtures.py` after changing a body below; the notebooks are
committed so that a test run never depends on this script.
"""
from pathlib import Path

import nbformat

from make_convention_fixtures import ROW_SOFTMAX, notebook, planted

HERE = Path(__file__).resolve().parent / "fixtures" / "classes"

SOFTMAX = ROW_SOFTMAX

# Each class, worked; MISTAKES replaces one line of it to make the mistake named. The first two
# draw their own random weights when made, as a framework's module does: the grader replaces them.
WORKED = {
    "MultiHeadAttention": '''
class MultiHeadAttention:
    """A module in the framework layout: each W is (out, in), applied as x @ W.T + b."""

    def __init__(self, d_model, num_heads):
        self.num_heads = num_heads
        rng = np.random.default_rng()
        self.W_q, self.W_k, self.W_v, self.W_o = (rng.normal(size=(d_model, d_model)) for _ in range(4))
        self.b_q, self.b_k, self.b_v, self.b_o = (np.zeros(d_model) for _ in range(4))

    def forward(self, x, mask):
        Q = x @ self.W_q.T + self.b_q
        K = x @ self.W_k.T + self.b_k
        V = x @ self.W_v.T + self.b_v
        d = Q.shape[1] // self.num_heads
        heads, weights = [], []
        for h in range(self.num_heads):
            part = slice(h * d, (h + 1) * d)
            scores = Q[:, part] @ K[:, part].T / np.sqrt(d)
            w = softmax(np.where(mask, scores, -1e9))
            heads.append(w @ V[:, part])
            weights.append(w)
        out = np.concatenate(heads, axis=1) @ self.W_o.T + self.b_o
        return out, np.stack(weights)
''',
    "CausalSelfAttention": '''
class CausalSelfAttention:
    def __init__(self, d_model, n_heads):
        self.n_heads = n_heads
        self.init_weights(*(np.random.randn(*shape) for shape in [(d_model, d_model), (d_model,)] * 4))

    def init_weights(self, Wq, bq, Wk, bk, Wv, bv, Wo, bo):
        self.Wq, self.bq, self.Wk, self.bk, self.Wv, self.bv, self.Wo, self.bo = Wq, bq, Wk, bk, Wv, bv, Wo, bo

    def forward(self, x):
        n = x.shape[0]
        Q, K, V = x @ self.Wq + self.bq, x @ self.Wk + self.bk, x @ self.Wv + self.bv
        d = Q.shape[1] // self.n_heads
        future = np.triu(np.ones((n, n), dtype=bool), 1)
        heads = []
        for h in range(self.n_heads):
            part = slice(h * d, (h + 1) * d)
            scores = Q[:, part] @ K[:, part].T / np.sqrt(d)
            heads.append(softmax(np.where(future, -np.inf, scores)) @ V[:, part])
        return np.concatenate(heads, axis=1) @ self.Wo + self.bo
''',
    "SelfAttentionHeads": '''
class SelfAttentionHeads:
    def __init__(self, W_q, W_k, W_v, n_heads):
        self.W_q, self.W_k, self.W_v, self.n_heads = W_q, W_k, W_v, n_heads

    def __call__(self, X):
        Q, K, V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        d = Q.shape[1] // self.n_heads
        outputs, weights = [], []
        for h in range(self.n_heads):
            part = slice(h * d, (h + 1) * d)
            scores = Q[:, part] @ K[:, part].T / np.sqrt(d)
            w = softmax(scores)
            outputs.append(w @ V[:, part])
            weights.append(w)
        return np.concatenate(outputs, axis=1), weights
''',
}

# class -> (line of the worked body, its mistaken replacement, the mistake's title)
MISTAKES = {
    "MultiHeadAttention": ("            w = softmax(np.where(mask, scores, -1e9))",
                           "            w = softmax(scores) * mask", "mask applied after the softmax"),
    "CausalSelfAttention": ("        return np.concatenate(heads, axis=1) @ self.Wo + self.bo",
                            "        return np.concatenate(heads[::-1], axis=1) @ self.Wo + self.bo",
                            "heads concatenated in the wrong order"),
    "SelfAttentionHeads": ("            scores = Q[:, part] @ K[:, part].T / np.sqrt(d)",
                           "            scores = Q[:, part] @ K[:, part].T", "scores not scaled"),
}

# A second mistake for each class, named too.
SECOND_MISTAKES = {
    "MultiHeadAttention": ("        out = np.concatenate(heads, axis=1) @ self.W_o.T + self.b_o",
                           "        out = np.concatenate(heads, axis=1) @ self.W_o.T",
                           "output projection bias missing"),
    "CausalSelfAttention": ("            heads.append(softmax(np.where(future, -np.inf, scores)) @ V[:, part])",
                            "            heads.append(softmax(scores) @ V[:, part])", "causal mask not applied"),
    "SelfAttentionHeads": ("            w = softmax(scores)", "            w = softmax(scores.T).T",
                           "softmax over the wrong axis"),
}

# Right answers, but the constructor raises: every call fails, saying it was the constructor.
CONSTRUCTOR_RAISES = {
    "MultiHeadAttention": ("        self.num_heads = num_heads",
                           "        self.num_heads = num_heads\n        self.reset_parameters()",
                           "constructing MultiHeadAttention"),
}

SCALED_SCORES = "            scores = Q[:, part] @ K[:, part].T / np.sqrt(d)"
UNSCALED_SCORES = "            scores = Q[:, part] @ K[:, part].T"

# Right answers, but forward folds the scaling into the query weights it was given, in place:
# through an attribute, and through the init method's argument.
CHANGES_WEIGHTS = {
    "MultiHeadAttention": WORKED["MultiHeadAttention"].replace(
        "        Q = x @ self.W_q.T + self.b_q\n",
        "        d = self.W_q.shape[0] // self.num_heads\n"
        "        self.W_q /= np.sqrt(d)   # the scaling, folded into the queries once\n"
        "        self.b_q = self.b_q / np.sqrt(d)\n"
        "        Q = x @ self.W_q.T + self.b_q\n").replace(
        SCALED_SCORES, UNSCALED_SCORES),
    "CausalSelfAttention": WORKED["CausalSelfAttention"].replace(
        "        n = x.shape[0]\n",
        "        n = x.shape[0]\n        self.Wq /= np.sqrt(self.Wq.shape[1] // self.n_heads)\n"
        "        self.bq = self.bq / np.sqrt(self.Wq.shape[1] // self.n_heads)\n").replace(
        SCALED_SCORES, UNSCALED_SCORES),
}
# What inputs_unmodified says of each.
CHANGED = {"MultiHeadAttention": "the weights in `self.W_q`",
           "CausalSelfAttention": "the argument `Wq` of `init_weights`"}


def mistaken(mistakes: dict) -> dict:
    return {"softmax": SOFTMAX, **planted(WORKED, mistakes)}


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook({"softmax": SOFTMAX, **WORKED}), HERE / "worked.ipynb")
    nbformat.write(notebook(mistaken(MISTAKES)), HERE / "mistakes.ipynb")
    nbformat.write(notebook(mistaken(SECOND_MISTAKES)), HERE / "second_mistakes.ipynb")
    only = {name: WORKED[name] for name in CONSTRUCTOR_RAISES}
    nbformat.write(notebook({"softmax": SOFTMAX, **planted(only, CONSTRUCTOR_RAISES)}),
                   HERE / "constructor_raises.ipynb")
    assert all(CHANGES_WEIGHTS[name] != WORKED[name] for name in CHANGES_WEIGHTS)
    nbformat.write(notebook({"softmax": SOFTMAX, **CHANGES_WEIGHTS}), HERE / "changes_weights.ipynb")


if __name__ == "__main__":
    main()
