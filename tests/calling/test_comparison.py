"""The one comparison rule (grader/calling/returns.py), used by the checks, the diagnosis and the
non-answer rule: tolerance relative to the expected value, shapes first, and NaN or inf only
where the expected value has NaN or inf."""
import numpy as np
import pytest

from grader.calling.returns import Tolerance, compare, largest_difference, same

TOL = Tolerance(rtol=1e-3, atol=1e-6)
NAN, INF = np.nan, np.inf

# (actual, expected, the same?)
PAIRS = [
    (np.array([1.0, 2.0]), np.array([1.0, 2.0]), True),
    (np.array([1.0 + 0.9e-3]), np.array([1.0]), True),            # within atol + rtol * |expected|
    (np.array([1.0 + 1.1e-3]), np.array([1.0]), False),
    (np.array([1000.0]), np.array([1001.0]), True),                # relative to the expected value ...
    (np.array([0.0]), np.array([0.5e-6]), True),                   # ... and absolute near zero
    (np.array([0.0]), np.array([2e-6]), False),
    (np.array([1, 2]), np.array([1.0, 2.0]), True),                # compared as float64, whatever the dtype
    (np.array([1.0, 2.0], dtype=np.float32), np.array([1.0, 2.0]), True),
    (np.array([[1.0, 2.0]]), np.array([1.0, 2.0]), False),         # shapes first
    (np.array([NAN, 1.0]), np.array([NAN, 1.0]), True),            # non-finite where expected non-finite
    (np.array([INF, -INF]), np.array([NAN, NAN]), True),           # ... whichever non-finite value it is
    (np.array([NAN, 1.0]), np.array([0.0, 1.0]), False),           # never where a finite value is expected
    (np.array([INF]), np.array([1e308]), False),
    (np.array([0.0, 1.0]), np.array([NAN, 1.0]), False),           # nor a finite value where none is
    (np.array([NAN, 2.0]), np.array([NAN, 1.0]), False),           # and the finite places still count
]


@pytest.mark.parametrize("actual, expected, equal", PAIRS)
def test_the_rule(actual, expected, equal):
    assert same(actual, expected, TOL) is equal
    assert (compare(actual, expected, TOL) is None) is equal
    if actual.shape == expected.shape:
        assert (largest_difference(actual, expected, TOL) is None) is equal


def test_the_tolerance_is_relative_to_the_expected_value():
    half = Tolerance(rtol=0.5, atol=0.0)
    assert same(np.array([1.0]), np.array([2.0]), half)
    assert not same(np.array([2.0]), np.array([1.0]), half)


def test_per_head_lists_are_the_same_head_by_head():
    heads = [np.eye(2), np.ones((2, 2))]
    assert same([h.copy() for h in heads], heads, TOL)
    assert not same(heads[:1], heads, TOL)
    assert not same(np.stack(heads), heads, TOL)
    assert not same(heads, np.stack(heads), TOL)
    assert compare([heads[0], heads[0]], heads, TOL).startswith("of head 2 differs from the reference")
    assert compare(heads[:1], heads, TOL) == "has 1 head, expected 2"
    assert compare(np.stack(heads), heads, TOL) == "is not a list of per-head arrays"


def test_the_largest_difference_is_the_entry_furthest_outside_its_tolerance():
    expected = np.array([[1.0, 1000.0], [0.0, 0.0]])
    actual = np.array([[1.5, 1000.9], [0.0, 0.2]])   # 0.9 off where 1.0 is allowed
    assert largest_difference(actual, expected, TOL) == ((0, 0), 0.5)
    actual[1, 1] = NAN
    assert largest_difference(actual, expected, TOL)[0] == (1, 1)   # a value that is not finite comes first
    assert largest_difference(expected.copy(), expected, TOL) is None


def test_what_compare_says():
    expected = np.arange(6.0).reshape(2, 3)
    assert compare(expected + 1e-9, expected, TOL) is None
    assert compare(expected.T, expected, TOL) == "is transposed: shape 3x2, expected 2x3"
    assert compare(expected[:, :2], expected, TOL) == "has shape 2x2, expected 2x3"
    assert compare(expected[:, :2], expected, TOL, columns=True) == "has shape 2x2, expected 3x2"
    wrong = expected.copy()
    wrong[1, 0] += 0.5
    assert compare(wrong, expected, TOL) == "differs from the reference: largest difference 0.5 at index (1, 0)"
    assert compare(wrong, expected, TOL, columns=True).endswith("at index (0, 1)")
    wrong[0, 2] = NAN
    assert compare(wrong, expected, TOL) == "contains NaN or inf"
    square = np.arange(9.0).reshape(3, 3)
    assert compare(square.T, square, TOL) == "is transposed"


def test_a_comparison_names_what_it_compares_against():
    wrong, expected = np.array([[1.0, 2.0], [3.5, 4.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])
    assert compare(wrong, expected, TOL, against="the original order's result, permuted") == \
        "differs from the original order's result, permuted: largest difference 0.5 at index (1, 0)"


@pytest.mark.parametrize("seed", range(40))
def test_the_shortcuts_of_same_give_the_rule_s_answer(seed):
    """`same` answers most comparisons before looking at non-finite places; on values with
    NaN, inf, overflowing differences, entries just inside and just outside their tolerance,
    it answers as the rule itself (every entry's excess) does."""
    rng = np.random.default_rng(seed)
    special = np.array([NAN, INF, -INF, 0.0, 1e308, -1e308, 1.0])
    for _ in range(50):
        shape = tuple(rng.integers(1, 4, size=rng.integers(1, 3)))
        expected = rng.normal(size=shape) * 10.0 ** rng.integers(-8, 8)
        actual = expected + (TOL.atol + TOL.rtol * np.abs(expected)) * rng.choice([0.0, 0.5, 0.99, 1.01, 3.0],
                                                                                  size=shape)
        for value in (expected, actual):
            where = rng.random(shape) < rng.choice([0.0, 0.2, 0.6])
            value[where] = rng.choice(special, size=int(where.sum()))
        finite_a, finite_e = np.isfinite(actual), np.isfinite(expected)
        with np.errstate(invalid="ignore", over="ignore"):
            outside = np.abs(actual - expected) > TOL.atol + TOL.rtol * np.abs(expected)
        rule = not np.any(np.where(finite_a & finite_e, outside, finite_a != finite_e))
        assert same(actual, expected, TOL) == rule, (actual, expected)
