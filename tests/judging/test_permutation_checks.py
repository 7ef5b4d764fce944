"""The permutation checks judge what the student returned: a part whose permuted axis does not
run over the tokens (or the memory's rows, or the key and value inputs') fails the check with
its shape, never ends it as the grader's error."""
import numpy as np
import pytest

from grading_helpers import FIXTURES, grade
from grader.calling.returns import Parts, Tolerance
from grader.course.spec import builtin_names, load_assignment
from grader.judging.checks import CHECKS, Context, Outcome, check_probes

SEED = 20261122
KINDS = ("permutation_equivariance", "memory_permutation", "key_value_permutation")


def _axes_of(fn, kind):
    conv = fn.convention
    return conv.token_axes if kind == "permutation_equivariance" else conv.memory_axes


def _functions():
    """Every built-in function with a permutation check that moves one of its returned parts
    (a cross-attention returning its output alone has nothing the memory's order moves)."""
    return [pytest.param(fn, kind, id=f"{name}-{fn.name}-{kind}")
            for name in builtin_names() for fn in load_assignment(name).functions
            for kind in KINDS if kind in fn.points and any(_axes_of(fn, kind)(part) for part in fn.convention.returns)]


def _short_by_one(value, axes):
    """The value with one index fewer on the first permuted axis: a return that does not run
    over what the check permutes."""
    if isinstance(value, list):
        return [_short_by_one(v, axes) for v in value]
    return np.delete(value, 0, axis=axes[0]) if axes else value


@pytest.mark.parametrize("fn,kind", _functions())
def test_a_part_whose_permuted_axis_is_short_fails_with_its_shape(fn, kind):
    ctx = Context(seed=SEED, tolerance=Tolerance())
    conv = fn.convention
    axes_of = _axes_of(fn, kind)
    probes = check_probes(kind, fn, ctx)
    parts = [conv.expected_parts(p.case) for p in probes]
    short = [part for part in parts[0] if axes_of(part)]
    parts[0] = {part: _short_by_one(value, axes_of(part)) if part == short[0] else value
                for part, value in parts[0].items()}
    results = [(p, Outcome("ok", parts=Parts(values=v), sent=p.arguments(conv))) for p, v in zip(probes, parts)]
    verdict = CHECKS[kind].judge(fn, ctx, results)
    assert verdict.status == "failed"
    assert "has shape" in verdict.message and "should run over" in verdict.message


@pytest.mark.slow
def test_heads_split_over_tokens_fail_the_permutation_check_on_an_uneven_split():
    # Seed 13 draws N = 5 tokens for two heads: split over tokens, the heads get 3 and 2 rows.
    result = grade(FIXTURES / "mistake_heads_over_tokens.ipynb", "rows", seed=13)
    check = next(c for c in result.checks if c.name == "multi_head_attention.permutation_equivariance")
    assert check.status == "failed", check.message
    assert "should run over the 5 tokens" in check.message
