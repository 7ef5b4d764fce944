"""The smallest failing case: found on small integer inputs, runnable as printed, and never
given away by a hidden check."""
import numpy as np
import nbformat
import pytest

from grading_helpers import SUBMISSIONS, grade, planted_mistakes_named, write_notebook
from grader.judging import smallest
from grader.judging.checks import Outcome, Probe
from grader.calling.classes import sent_arguments
from grader.calling.conventions import CONVENTIONS, parse_convention
from grader.calling.returns import canonical_parts
from grader.kernel import replies as payloads
from grader.kernel_side.wire import encode_value
from grader.reference.attention import attention
from grader.result import CheckResult, GradeResult
from grader.report.view import result_view


def test_candidates_are_small_integer_cases_smallest_first():
    for conv in CONVENTIONS.values():
        cases = smallest.candidates(conv, 1)
        sizes = [(c.x.size, len(c.heads)) for c in cases]
        assert cases and sizes[0][0] <= 2 and max(s for s, _ in sizes) <= 18, conv.name
        assert [s for s, _ in sizes] == sorted(s for s, _ in sizes) or conv.heads != "one", conv.name
        for c in cases:
            arrays = [c.x, *(a for h in c.heads for a in (h.wq, h.wk, h.wv, h.bq, h.bk, h.bv) if a is not None)]
            assert all(np.array_equal(a, np.round(a)) and np.abs(a).max() <= 2 for a in arrays), conv.name


def test_a_case_label_says_in_words_which_of_the_cases_of_one_size_it_is():
    """Each size is tried with two sets of values: the label a student reads says which, with
    no bare "#2" to decode."""
    labels = [c.label.removeprefix(smallest.LABEL).strip() for c in smallest.candidates(CONVENTIONS["rows_single"], 1)]
    assert labels[:2] == ["N = 1, D = 1, H = 1", "N = 1, D = 1, H = 1, the second set of values tried at this size"]
    assert not any("#" in label for conv in CONVENTIONS.values() for c in smallest.candidates(conv, 1)
                   for label in [c.label])


def test_no_case_is_looked_for_or_shown_when_only_hidden_checks_failed():
    failed_hidden = [CheckResult("f.random_shapes", "f", "random_shapes", "Random", "failed", 0, 3, "x", hidden=True)]
    assert not smallest.wanted(failed_hidden)
    result = GradeResult(submission="s", assignment="rows", seed=1, checks=failed_hidden,
                         functions={"f": {"smallest_failing": {"case": "N = 1", "code": "f(1)"}}})
    assert result_view(result).by_function[0].smallest_failing is None
    assert result_view(result, staff=True).by_function[0].smallest_failing is not None


# A lab's cells: its weights as globals, then attention reading them, the scaling forgotten.
LAB_WEIGHTS = """rng = np.random.default_rng(0)
Wq, Wk, Wv = (rng.normal(size=(4, 3)) for _ in range(3))"""
LAB_UNSCALED = """def self_attention(X):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    w = np.exp(Q @ K.T - (Q @ K.T).max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ V"""
LAB_GLOBALS = {"Wq": "wq", "Wk": "wk", "Wv": "wv"}


def test_the_cell_of_a_function_reading_globals_assigns_them_as_the_grader_set_them():
    """Pasted into the lab's notebook, whose own Wq is another shape, the cell computes what the
    grader saw: it assigns the globals first, and the result records them."""
    conv = parse_convention({"params": [{"name": "X", "role": "x"}], "returns": "output", "globals": LAB_GLOBALS},
                            "t", "t")
    probe = Probe(smallest.candidates(conv, 1)[2])
    sent = sent_arguments(probe, conv)
    graded_in: dict = {"np": np, **dict(zip(LAB_GLOBALS, sent[1:]))}
    exec(LAB_UNSCALED, graded_in)
    returned = graded_in["self_attention"](sent[0])
    outcome = Outcome("ok", parts=canonical_parts(conv, payloads.encoded_value(encode_value(returned))), sent=sent)
    found = smallest.cell("self_attention", ("X",), probe, outcome, conv, by_keyword=False)
    assert list(found["globals"]) == ["Wq", "Wk", "Wv"]
    assert found["globals"]["Wq"] == smallest._literal(sent[1])
    code = found["code"]
    assert code.index("Wq = ") < code.index("self_attention(X)")
    notebook: dict = {"np": np}
    exec(LAB_WEIGHTS, notebook)
    exec(LAB_UNSCALED, notebook)
    exec(code, notebook)
    assert np.allclose(notebook["self_attention"](notebook["X"]), returned)


@pytest.mark.slow
def test_a_lab_reading_globals_gets_a_smallest_case_that_runs_in_its_own_notebook(tmp_path):
    spec = tmp_path / "lab.toml"
    spec.write_text('name = "lab"\ntitle = "Lab"\n[[functions]]\nname = "self_attention"\n'
                    '[functions.convention]\nparams = [{ name = "X", role = "x" }]\nreturns = "output"\n'
                    'globals = { Wq = "wq", Wk = "wk", Wv = "wv" }\n')
    path = write_notebook(tmp_path / "lab.ipynb", "import numpy as np", LAB_WEIGHTS, LAB_UNSCALED)
    result, found = planted_mistakes_named(path, str(spec), {"self_attention": (None, None, "scores not scaled")})
    case = found["self_attention"]
    assert list(case["globals"]) == ["Wq", "Wk", "Wv"]
    assert all(f"{name} = {value}" in case["code"] for name, value in case["globals"].items())
    assert result.to_json()["functions"]["self_attention"]["smallest_failing"]["globals"] == case["globals"]


@pytest.mark.slow
def test_the_printed_cell_reproduces_the_failure():
    """Run the printed cell against the notebook's own function: it returns what the comment
    says, which differs from the reference on those inputs."""
    result = grade(SUBMISSIONS / "mistake_softmax_axis.ipynb", "rows")
    found = result.functions["self_attention"]["smallest_failing"]
    assert found["case"].startswith(("N = 1,", "N = 2,", "N = 3,"))
    nb = nbformat.read(SUBMISSIONS / "mistake_softmax_axis.ipynb", as_version=4)
    space = {"np": np}
    exec(next(c.source for c in nb.cells if c.source.startswith("def self_attention")), space)
    exec(found["code"], space)
    output, weights = space["self_attention"](space["X"], space["Wq"], space["Wk"], space["Wv"])
    assert f"{output[0, 0]:.4f}".rstrip("0") in found["code"]
    from grader.reference.attention import Case, Head
    expected = attention(Case(x=space["X"], heads=(Head(space["Wq"], space["Wk"], space["Wv"]),)))["output"]
    assert not np.allclose(output, expected)
    assert "smallest_failing" not in result.functions["multi_head_attention"] or \
        result.functions["multi_head_attention"]["smallest_failing"]["code"].count("multi_head_attention(") == 1


@pytest.mark.slow
def test_a_function_whose_failures_are_all_hidden_gets_no_case(tmp_path):
    spec = tmp_path / "all_hidden.toml"
    spec.write_text('[[functions]]\nname = "self_attention"\nconvention = "rows_single"\n'
                    'hidden = ["fixed", "random_shapes", "weights_distribution", "permutation_equivariance", '
                    '"memory_layout", "dtypes", "inputs_unmodified", "return_structure", "numerical_stability"]\n')
    result = grade(SUBMISSIONS / "mistake_softmax_axis.ipynb", str(spec))
    assert result.score < result.max_score
    assert "smallest_failing" not in result.functions["self_attention"]
