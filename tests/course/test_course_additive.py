"""Additive (Bahdanau) attention, score_ij = v . tanh(q_i W1 + k_j W2), written in a course's
TOML spec: the cases drawn to fit (keys and values of their own length, queries wider than the
keys on the longer cases), a course function written from docs/specs.md's words meeting the
reference, the additive mistakes computed apart from each other and named, the non-answer rule,
and the spec inferred from a worked solution, end to end in a real kernel."""
import subprocess
import sys

import numpy as np
import pytest

from grading_helpers import (FIXTURES, GRADER, ROOT, grade, graded_at_full_marks, own_mistakes_apart,
                             planted_mistakes_named, write_notebook)
from grader.calling import cases
from grader.course.spec import load_assignment, parse
from grader.errors import SpecError
from grader.judging import smallest
from grader.judging.explain import applicable, features

sys.path.insert(0, str(ROOT / "tests"))
from make_additive_fixtures import MISTAKES, OTHERS  # noqa: E402

ADDITIVE = FIXTURES / "additive"
SPEC = "additive"   # a built-in, written in the same TOML as a course's spec
GIVEN = ('params = [{ name = "q", role = "q" }, { name = "k", role = "k" }, { name = "v", role = "v" }, '
         '{ name = "W1", role = "score_wq" }, { name = "W2", role = "score_wk" }, { name = "va", role = "score_v" }]\n')
OWN_MISTAKES = {"additive_tanh_missing", "additive_softmax_wrong_axis", "additive_concatenation_as_sum"}


def _function(text: str):
    return parse('[[functions]]\nname = "attend"\n[functions.convention]\n' + text, "course.toml").functions[0]


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _additive(q, k, v, W1, W2, va):
    """docs/specs.md's words: score_ij = v . tanh(q_i W1 + k_j W2), a softmax over the keys."""
    scores = np.array([[va @ np.tanh(qi @ W1 + kj @ W2) for kj in k] for qi in q])
    weights = _softmax(scores)
    return weights @ v, weights


def _drawn(conv, seed=4):
    return [*cases.random_cases(conv, seed), cases.base_case(conv, seed), cases.integer_case(conv, seed),
            cases.single_head_case(conv, seed), *smallest.candidates(conv, seed)]


def test_a_course_function_written_from_the_docs_words_meets_the_reference():
    conv = _function(GIVEN + 'returns = ["output", "weights"]\n').convention
    widths = set()
    for case in _drawn(conv):
        q, k, v, W1, W2, va = conv.call_arguments(case)
        output, weights = _additive(q, k, v, W1, W2, va)
        expected = conv.expected_parts(case)
        assert np.allclose(output, expected["output"]) and np.allclose(weights, expected["weights"]), case.label
        assert k.shape[0] == v.shape[0] == q.shape[0] + (1 if case.label.startswith(smallest.LABEL) else 2)
        widths.add(q.shape[1] == k.shape[1])
    # Queries as wide as the keys on the shorter cases, wider from N = 7 on.
    assert widths == {True, False}


def test_one_weight_on_the_concatenation_is_w1_above_w2_and_keys_that_are_the_values_are_one_array():
    conv = _function('params = [{ name = "s", role = "q" }, { name = "h", role = "kv" }, '
                     '{ name = "W", role = "score_w" }, { name = "va", role = "score_v" }]\n'
                     'returns = ["output", "weights"]\nvector = true\n').convention
    for case in _drawn(conv):
        s, h, W, va = conv.call_arguments(case)
        assert s.ndim == 1 and W.shape == (s.shape[0] + h.shape[1], va.shape[0]), case.label
        output, weights = _additive(s[None, :], h, h, W[:s.shape[0]], W[s.shape[0]:], va)
        expected = conv.expected_parts(case)
        assert np.allclose(output, expected["output"]) and np.allclose(weights, expected["weights"]), case.label
    framework = _function(GIVEN + 'returns = "output"\nweights = "out_in"\n').convention
    case = cases.base_case(framework, 3)
    q, k, v, W1, W2, va = framework.call_arguments(case)
    assert np.array_equal(W1, case.additive.w1.T) and np.array_equal(va, case.additive.va)
    assert np.allclose(_additive(q, k, v, W1.T, W2.T, va)[0], framework.expected_parts(case)["output"])


def test_additive_attention_has_its_own_features_and_mistakes_and_never_the_dot_product_s():
    conv = _function(GIVEN + 'returns = ["output", "weights"]\n').convention
    assert {"additive", "cross"} <= features(conv) and not {"dot_product", "scaled"} & features(conv)
    named = {m.id for m in applicable(conv)}
    assert OWN_MISTAKES <= named
    assert not {"softmax_wrong_axis", "keys_times_queries", "no_scaling", "keys_values_from_queries"} & named
    rows = load_assignment("rows").functions[0].convention
    assert not OWN_MISTAKES & {m.id for m in applicable(rows)}
    fn = _function(GIVEN + 'returns = ["output", "weights"]\n')
    assert "memory_permutation" in fn.points and "permutation_equivariance" in fn.points


@pytest.mark.parametrize("fn", load_assignment(SPEC).functions, ids=lambda fn: fn.name)
def test_each_additive_mistake_differs_from_the_reference_and_from_the_others(fn):
    """Each mistake computes something of its own on the randomized cases (the concatenation
    read as a sum runs only where queries and keys are equally wide, the shorter cases)."""
    conv = fn.convention
    # One query: its weights' only axis is the keys'.
    own_mistakes_apart(conv, OWN_MISTAKES, skip={"additive_softmax_wrong_axis"} if conv.vector else ())


@pytest.mark.parametrize("text, words", [
    (GIVEN.replace(', { name = "va", role = "score_v" }', "") + 'returns = "output"\n',
     "its score vector (role score_v)"),
    (GIVEN.replace('{ name = "W2", role = "score_wk" }', '{ name = "W", role = "score_w" }') + 'returns = "output"\n',
     "apart (score_wq, score_wk) or as one on [q; k] (score_w), not both"),
    (GIVEN.replace('{ name = "W2", role = "score_wk" }, ', "") + 'returns = "output"\n',
     "needs the query's and the key's weights"),
    (GIVEN + 'returns = "output"\nscaled = true\n', "additive scores are not scaled"),
    ('params = [{ name = "X", role = "x" }, { name = "Wq", role = "wq" }, { name = "Wk", role = "wk" }, '
     '{ name = "Wv", role = "wv" }, { name = "W1", role = "score_wq" }, { name = "W2", role = "score_wk" }, '
     '{ name = "va", role = "score_v" }]\nreturns = "output"\n', "takes the queries, keys and values"),
    (GIVEN.replace('{ name = "va", role = "score_v" }', '{ name = "va", role = "score_v" }, '
                   '{ name = "H", role = "n_heads" }') + 'returns = "output"\n', "additive attention has one head"),
    ('params = [{ name = "q", role = "q" }, { name = "k", role = "k" }, { name = "h", role = "kv" }]\n'
     'returns = "output"\n', "as one array (kv) or apart (k, v), not both"),
    (GIVEN + 'returns = "output"\nbatch = true\nvector = true\n', "vector = true applies to"),
])
def test_an_additive_convention_that_cannot_be_graded_is_refused_in_one_line(text, words):
    with pytest.raises(SpecError) as error:
        _function(text)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_the_docs_example_of_additive_attention_is_the_built_in_s_first_convention():
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("\n## Additive attention\n", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = parse(example, "docs/specs.md").functions[0].convention
    built_in = load_assignment(SPEC).functions[0].convention
    assert [p.role for p in documented.params] == [p.role for p in built_in.params]
    assert documented.returns == built_in.returns and documented.additive


@pytest.mark.slow
def test_the_worked_additive_solutions_earn_full_marks():
    result = graded_at_full_marks(ADDITIVE / "worked.ipynb", SPEC)
    kinds = {c.name for c in result.checks}
    assert {"additive_attention.memory_permutation", "batched_additive_attention.batch_elements",
            "bahdanau_context.random_shapes"} <= kinds


@pytest.mark.slow
@pytest.mark.parametrize("notebook, planted", [("mistakes.ipynb", MISTAKES), ("other_mistakes.ipynb", OTHERS)])
def test_each_planted_additive_mistake_is_named(notebook, planted):
    named = {name: mistake for name, mistake in planted.items() if mistake[2]}
    result, found = planted_mistakes_named(ADDITIVE / notebook, SPEC, named)
    assert all("keys and values" in case["case"] for case in found.values())
    for name in set(planted) - set(named):   # no known mistake: it loses points, still an attempt
        checks = [c for c in result.checks if c.function == name]
        assert any(c.lost_points for c in checks) and not result.functions[name].get("non_answer"), name


@pytest.mark.slow
def test_a_row_handed_back_for_every_query_is_a_non_answer_though_tanh_missing_gives_one(tmp_path):
    """Without its tanh, additive attention gives every query the same row: that row, computed,
    is a known mistake's (the fixture above); the values' mean given to every query is not."""
    path = write_notebook(tmp_path / "mean.ipynb", '''import numpy as np

def additive_attention(queries, keys, values, W_q, W_k, w_v):
    weights = np.full((queries.shape[0], keys.shape[0]), 1.0 / keys.shape[0])
    return weights @ values, weights
''')
    spec = tmp_path / "course.toml"
    named = (GIVEN.replace('"q"', '"queries"', 1).replace('name = "k"', 'name = "keys"')
             .replace('name = "v", role = "v"', 'name = "values", role = "v"')
             .replace('"W1"', '"W_q"').replace('"W2"', '"W_k"').replace('"va"', '"w_v"'))
    spec.write_text('name = "c"\ntitle = "c"\n[[functions]]\nname = "additive_attention"\n'
                    '[functions.convention]\n' + named + 'returns = ["output", "weights"]\n')
    result = grade(path, str(spec))
    assert result.score == 0 and result.functions["additive_attention"].get("non_answer")


def _run(*args):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_infer_describes_additive_attention_and_audit_names_its_mistakes(tmp_path):
    spec = tmp_path / "additive.toml"
    done = _run("spec", "infer", ADDITIVE / "worked.ipynb", "-o", spec, "--title", "Additive attention")
    assert done.returncode == 0, done.stdout + done.stderr
    for words in ("queries=q, keys=k, values=v, W_q=score_wq, W_k=score_wk, w_v=score_v",
                  "W1=score_wq, W2=score_wk, v=score_v; a leading batch axis",
                  "state=q, annotations=kv, W_a=score_w, v_a=score_v; one query, a vector"):
        assert words in done.stdout, done.stdout
    checked = _run("spec", "check", spec, ADDITIVE / "worked.ipynb")
    assert checked.returncode == 0 and "earns every point" in checked.stdout, checked.stdout + checked.stderr
    audited = _run("audit", spec)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    for title in ("tanh missing from the additive score", "concatenation read as a sum (W1 (q + k))",
                  "softmax over the wrong axis (over the queries, not the keys)"):
        assert title in audited.stdout
    planted_mistakes_named(ADDITIVE / "mistakes.ipynb", str(spec), MISTAKES)
