"""A function given a scale flag (role scale, as a lab's `DotProductAttention(query, key, value,
mask, scale=True)` takes one) is told not to scale on one randomized case, so that ignoring the
flag is wrong there and named; everywhere else the flag is True."""
import numpy as np
import pytest

from grading_helpers import grade, write_notebook
from grader.calling import cases
from grader.course.spec import parse
from grader.judging.explain import Explanation, Predictions, applicable

CONVENTION = ('params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" }, '
              '{ name = "scale", role = "scale" }]\nreturns = "output"\n')
SPEC = 'name = "lab"\ntitle = "Lab"\n[[functions]]\nname = "attend"\n[functions.convention]\n' + CONVENTION


def _conv():
    return parse(SPEC, "course.toml").functions[0].convention


def _attend(Q, K, V, scale):
    s = Q @ K.T / (np.sqrt(K.shape[1]) if scale else 1.0)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True) @ V


def test_one_randomized_case_passes_the_flag_false_and_expects_unscaled_attention():
    conv = _conv()
    drawn = cases.random_cases(conv, 6)
    flags = [conv.call_arguments(c)[3] for c in drawn]
    assert flags.count(False) == 1 and drawn[cases.SCALE_OFF_CASE].label.endswith("scale = False")
    for case in drawn:
        assert np.allclose(_attend(*conv.call_arguments(case)), conv.expected_parts(case)["output"]), case.label
    assert all(conv.call_arguments(c)[3] for c in (cases.base_case(conv, 6), cases.integer_case(conv, 6)))


def test_ignoring_the_flag_is_a_mistake_of_its_own_that_shows_only_where_it_is_false():
    conv = _conv()
    (ignored,) = [m for m in applicable(conv) if m.id == "scale_flag_ignored"]
    predictions = Predictions()
    drawn = cases.random_cases(conv, 6)
    differs = [not np.allclose(predictions.parts(conv, Explanation((ignored,), ignored.variant), c)["output"],
                               conv.expected_parts(c)["output"]) for c in drawn]
    assert differs == [i == cases.SCALE_OFF_CASE for i in range(len(drawn))]
    plain = parse(SPEC.replace(', { name = "scale", role = "scale" }', ""), "c.toml").functions[0].convention
    assert "scale_flag_ignored" not in {m.id for m in applicable(plain)}


@pytest.mark.slow
@pytest.mark.parametrize("scaling, score_lost, named", [
    ("np.sqrt(K.shape[1]) if scale else 1.0", False, None),
    ("np.sqrt(K.shape[1])", True, "scale flag ignored (scaled when told not to)"),
])
def test_a_function_ignoring_its_flag_loses_the_randomized_points(tmp_path, scaling, score_lost, named):
    path = write_notebook(tmp_path / "lab.ipynb", f'''import numpy as np

def attend(Q, K, V, scale=True):
    s = Q @ K.T / ({scaling})
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True) @ V
''')
    spec = tmp_path / "lab.toml"
    spec.write_text(SPEC)
    result = grade(path, str(spec))
    checks = {c.kind: c for c in result.checks}
    assert (checks["random_shapes"].status == "failed") == score_lost
    assert checks["random_shapes"].diagnosis == named
    assert not result.functions["attend"].get("non_answer")
