"""The precision a returned value shows (grader/judging/explain.py, precision_of): rounded to a
few decimals, held in a few significant bits, or neither. Each test first asks the most it
allows, and answers "neither" at once for a float64 result; these tests hold that shortcut to
the answer of trying every number of decimals and bits in turn."""
import numpy as np
import pytest

from grader.judging.explain import REDUCED_BITS, ROUNDED_DECIMALS, Precision, precision_of


def exhaustive(value) -> Precision | None:
    """precision_of without the shortcut: every number of decimals, then every number of bits."""
    entries = np.asarray(value, dtype=np.float64).ravel()
    entries = entries[np.isfinite(entries)]
    if np.count_nonzero(entries) < 2:
        return None
    spacing = 2 * np.abs(np.spacing(entries.astype(np.asarray(value).dtype))).astype(np.float64)
    for decimals in range(ROUNDED_DECIMALS.stop):
        if np.all(np.abs(entries - np.round(entries, decimals)) <= spacing):
            return Precision(decimals=decimals) if decimals in ROUNDED_DECIMALS else None
    mantissas = np.frexp(entries)[0]
    for bits in range(1, 54):
        shifted = np.ldexp(mantissas, bits)
        if np.array_equal(shifted, np.round(shifted)):
            return Precision(bits=bits) if bits in REDUCED_BITS else None
    return None


def attention_like(rng, shape=(5, 7)) -> np.ndarray:
    scores = rng.standard_normal(shape) * 3
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def values(seed: int) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    a = attention_like(rng)
    made = [("float64", a), ("float64 output", a @ rng.standard_normal((7, 3))),
            ("integers", rng.integers(-5, 5, (4, 4)).astype(float)), ("one-hot", np.eye(5)),
            ("float32", a.astype(np.float32)), ("float16", a.astype(np.float16).astype(np.float64)),
            ("bfloat16", (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)),
            ("float32 rounded", np.round(a, 3).astype(np.float32)),
            ("noise on rounded", np.round(a, 4) + 1e-12 * rng.standard_normal(a.shape))]
    made += [(f"rounded to {d}", np.round(a * 10 ** (d % 3), d)) for d in range(0, 9)]
    return made


@pytest.mark.parametrize("seed", range(25))
def test_the_shortcut_gives_every_value_the_precision_trying_them_all_gives(seed):
    for name, value in values(seed):
        assert precision_of(value) == exhaustive(value), name


def test_what_each_kind_of_value_shows():
    shown = dict((name, precision_of(value)) for name, value in values(0))
    assert shown["float64"] is None and shown["float64 output"] is None
    assert shown["integers"] is None and shown["one-hot"] is None
    assert shown["float16"] == Precision(bits=11) and shown["bfloat16"] == Precision(bits=8)
    assert shown["float32"] == Precision(bits=24)
    assert shown["rounded to 4"] == Precision(decimals=4) and shown["float32 rounded"] == Precision(decimals=3)
