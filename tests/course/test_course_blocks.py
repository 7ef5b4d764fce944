"""The transformer block around attention, and its parts graded on their own (a layer norm, the
position-wise feed-forward network, a post-LN encoder block, GPT-2's causal pre-LN decoder block),
written in a course's TOML spec: functions written from docs/specs.md's words meet the reference,
the block mistakes are computed apart from each other and named, the spec is inferred from a
worked solution, end to end in a real kernel."""
import math
import subprocess
import sys

import numpy as np
import pytest

from grading_helpers import FIXTURES, GRADER, ROOT, graded_at_full_marks, planted_mistakes_named, own_mistakes_apart
from grader.calling import cases
from grader.course.spec import load_assignment, parse
from grader.errors import SpecError
from grader.judging import smallest
from grader.judging.explain import applicable, features

sys.path.insert(0, str(ROOT / "tests"))
from make_block_fixtures import MISTAKES, OTHERS  # noqa: E402

BLOCKS = FIXTURES / "blocks"
SPEC = "blocks"
OWN_MISTAKES = {"layer_norm_wrong_axis", "layer_norm_eps_outside", "layer_norm_unbiased", "layer_norm_no_affine",
                "residual_around_attention_missing", "residual_around_feed_forward_missing",
                "pre_and_post_ln_swapped", "activation_missing", "other_gelu", "relu_for_gelu", "gelu_for_relu"}


def _function(text: str):
    return parse('[[functions]]\nname = "unit"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _norm(x, gamma, beta, eps=1e-5):
    """docs/specs.md: (x - mean) / sqrt(var + eps) * gamma + beta over each token's features."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu_tanh(h):
    return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


def _attention(x, W_q, W_k, W_v, W_o, heads, causal):
    n = x.shape[0]
    d = W_q.shape[1] // heads
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    out = []
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        s = q[:, cols] @ k[:, cols].T / np.sqrt(d)
        if causal:
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        out.append(w / w.sum(axis=-1, keepdims=True) @ v[:, cols])
    return np.concatenate(out, axis=1) @ W_o


def _drawn(conv, seed=4):
    return [*cases.random_cases(conv, seed), cases.base_case(conv, seed), cases.integer_case(conv, seed),
            *smallest.candidates(conv, seed)]


@pytest.mark.parametrize("fn", load_assignment(SPEC).functions[:3], ids=lambda fn: fn.name)
def test_units_written_from_the_docs_words_meet_the_reference(fn):
    conv = fn.convention

    def computed(x, *rest):
        if conv.unit == "layer_norm":
            return _norm(x, *rest)
        if conv.unit == "feed_forward":
            W1, b1, W2, b2 = rest
            return np.maximum(0, x @ W1 + b1) @ W2 + b2
        W_q, W_k, W_v, W_o, W1, b1, W2, b2, g1, be1, g2, be2, heads = rest
        h = _norm(x + _attention(x, W_q, W_k, W_v, W_o, heads, False), g1, be1)
        return _norm(h + np.maximum(0, h @ W1 + b1) @ W2 + b2, g2, be2)

    for case in _drawn(conv):
        arguments = conv.call_arguments(case)
        assert np.allclose(computed(*arguments), conv.expected_parts(case)["output"]), case.label


def test_the_decoder_block_in_dicts_of_dicts_meets_the_reference():
    conv = load_assignment(SPEC).functions[3].convention
    assert conv.unit == "pre_ln" and conv.causal and conv.activation == "gelu_tanh" and conv.projection_bias
    for case in _drawn(conv):
        x, mlp, attn, ln_1, ln_2, n_head = conv.call_arguments(case)
        w_qkv, b_qkv = attn["c_attn"]["w"], attn["c_attn"]["b"]
        width = w_qkv.shape[1] // 3
        h = _norm(x, ln_1["g"], ln_1["b"])
        # Biases folded into the projections: an extra input column of ones.
        ones = np.hstack([h, np.ones((h.shape[0], 1))])
        packed = np.vstack([w_qkv, b_qkv[None, :]])
        W = [packed[:, i * width:(i + 1) * width] for i in range(3)]
        attended = _attention(ones, *W, np.eye(width), n_head, True) @ attn["c_proj"]["w"] + attn["c_proj"]["b"]
        x = x + attended
        out = x + _gelu_tanh(_norm(x, ln_2["g"], ln_2["b"]) @ mlp["c_fc"]["w"] + mlp["c_fc"]["b"]) \
            @ mlp["c_proj"]["w"] + mlp["c_proj"]["b"]
        assert np.allclose(out, conv.expected_parts(case)["output"]), case.label


def test_a_layer_norm_reading_the_tokens_gets_a_token_whose_variance_is_below_eps():
    conv = load_assignment(SPEC).functions[0].convention
    case = cases.base_case(conv, 3)
    assert case.x[-1].var() < conv.eps < case.x[0].var()
    assert "norm_of_tokens" not in features(load_assignment(SPEC).functions[2].convention)   # post-LN


def test_units_have_their_own_features_mistakes_and_checks():
    functions = {fn.name: fn for fn in load_assignment(SPEC).functions}
    named = {name: {m.id for m in applicable(fn.convention)} for name, fn in functions.items()}
    assert named["layer_norm"] == {"layer_norm_wrong_axis", "layer_norm_eps_outside", "layer_norm_unbiased",
                                   "layer_norm_no_affine"}
    assert named["feed_forward"] == {"activation_missing", "gelu_for_relu"}
    assert {"residual_around_attention_missing", "pre_and_post_ln_swapped", "no_scaling"} <= named["encoder_block"]
    assert {"other_gelu", "relu_for_gelu", "causal_ignored", "layer_norm_eps_outside"} <= named["transformer_block"]
    assert not OWN_MISTAKES & {m.id for m in applicable(load_assignment("rows").functions[0].convention)}
    assert "numerical_stability" not in functions["layer_norm"].points
    assert {"permutation_equivariance", "numerical_stability"} <= set(functions["encoder_block"].points)
    assert "causal_future" in functions["transformer_block"].points


@pytest.mark.parametrize("fn", load_assignment(SPEC).functions, ids=lambda fn: fn.name)
def test_each_block_mistake_differs_from_the_reference_and_from_the_others(fn):
    own_mistakes_apart(fn.convention, OWN_MISTAKES)


@pytest.mark.parametrize("text, words", [
    ('params = [{ name = "x", role = "x" }, { name = "g", role = "ln_gamma" }]\nreturns = "output"\n',
     "layer norm needs role 'ln_beta' too"),
    ('params = [{ name = "x", role = "x" }, { name = "g", role = "ln_gamma" }, { name = "b", role = "ln_beta" }, '
     '{ name = "W1", role = "ff_w1" }]\nreturns = "output"\n', "is not a part of layer norm"),
    ('params = [{ name = "x", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }, { name = "g", role = "ln1_gamma" }]\nreturns = "output"\n',
     "belongs to a transformer block: give block"),
    ('params = [{ name = "x", role = "x" }, { name = "g", role = "ln_gamma" }, { name = "b", role = "ln_beta" }]\n'
     'returns = ["output", "weights"]\n', "layer norm returns the output only"),
    ('params = [{ name = "x", role = "x" }, { name = "g", role = "ln_gamma" }, { name = "b", role = "ln_beta" }]\n'
     'returns = "output"\neps = 2\n', "eps must be a number between 0 and 1"),
    ('params = [{ name = "x", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }]\nreturns = "output"\nactivation = "relu"\n', "activation applies to"),
    ('params = [{ name = "x", role = "x" }, { name = "W1", role = "ff_w1" }, { name = "b1", role = "ff_b1" }, '
     '{ name = "W2", role = "ff_w2" }, { name = "b2", role = "ff_b2" }]\nreturns = "output"\nactivation = "tanh"\n',
     "activation must be one of"),
])
def test_a_block_convention_that_cannot_be_graded_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_the_docs_example_of_a_block_is_the_built_in_encoder_block():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("\n## Transformer blocks\n", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = parse(example, "docs/specs.md").functions[0].convention
    built_in = load_assignment(SPEC).functions[2].convention
    assert documented.params == built_in.params and documented.unit == built_in.unit == "post_ln"


@pytest.mark.slow
def test_the_worked_block_solutions_earn_full_marks():
    result = graded_at_full_marks(BLOCKS / "worked.ipynb", SPEC)
    assert {"transformer_block.causal_future", "encoder_block.permutation_equivariance",
            "layer_norm.random_shapes"} <= {c.name for c in result.checks}


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes.ipynb", MISTAKES), ("other_mistakes.ipynb", OTHERS)])
def test_each_planted_block_mistake_is_named(notebook, planted):
    planted_mistakes_named(BLOCKS / notebook, SPEC, {n: m for n, m in planted.items() if m[2]})


def _run(*args):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_infer_describes_each_unit_and_audit_names_their_mistakes(tmp_path):
    spec = tmp_path / "blocks.toml"
    done = _run("spec", "infer", BLOCKS / "worked.ipynb", "-o", spec, "--title", "Blocks")
    assert done.returncode == 0, done.stdout + done.stderr
    for words in ("layer_norm: x=x, gamma=ln_gamma, beta=ln_beta; returns output",
                  "feed_forward: x=x, W1=ff_w1, b1=ff_b1, W2=ff_w2, b2=ff_b2; returns output",
                  "gamma2=ln2_gamma, beta2=ln2_beta, num_heads=n_heads; a post-LN block",
                  "ln_1=a dict of g=ln1_gamma and b=ln1_beta",
                  "mlp=a dict of c_proj=(a dict of w=ff_w2 and b=ff_b2) and c_fc=(a dict of w=ff_w1 and b=ff_b1)",
                  "a pre-LN block (x + f(LN(x))); activation gelu_tanh; causal mask built inside"):
        assert words in done.stdout, done.stdout
    assert "left out gelu" in done.stdout and "additive" not in done.stdout.split("left out gelu", 1)[1].split("\n")[0]
    checked = _run("spec", "check", spec, BLOCKS / "worked.ipynb")
    assert checked.returncode == 0 and "earns every point" in checked.stdout, checked.stdout + checked.stderr
    audited = _run("audit", spec)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    for title in ("residual connection around attention missing", "eps added outside the square root",
                  "layer norms in the other order (pre-LN and post-LN swapped)"):
        assert title in audited.stdout
    planted_mistakes_named(BLOCKS / "mistakes.ipynb", str(spec), MISTAKES)
