"""Adapters: every convention's arguments, fed to a plain implementation of that convention
written here from the assignment sheets, give back the canonical reference."""
import numpy as np
import pytest

from grader.calling import cases
from grader.kernel import replies as payloads
from grader.calling.conventions import CONVENTIONS
from grader.calling.returns import Tolerance, canonical_parts, compare
from grader.kernel_side.wire import encode_value


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _columns(X, ov, oq, ok, bv, bq, bk, scaled):
    Q, K, V = oq @ X + bq, ok @ X + bk, ov @ X + bv
    s = Q.T @ K / (np.sqrt(Q.shape[0]) if scaled else 1)
    return V @ _softmax(s).T


def _rows_single(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    w = _softmax(Q @ K.T / np.sqrt(K.shape[1]))
    return w @ V, w


def _rows_multi(X, Wq, Wk, Wv, H):
    parts = [_rows_single(X, *(W[:, i] for W in (Wq, Wk, Wv))) for i in np.split(np.arange(Wq.shape[1]), H)]
    return np.concatenate([p[0] for p in parts], axis=1), [p[1] for p in parts]


def _qkv_multi(Q, K, V, n):
    blocks = [np.split(M, n, axis=1) for M in (Q, K, V)]
    return np.concatenate([_softmax(q @ k.T / np.sqrt(q.shape[1])) @ v for q, k, v in zip(*blocks)], axis=1)


def _two_columns(X, *args):
    h1, h2, oc = args[:6], args[6:12], args[12]
    return oc @ np.vstack([_columns(X, *h1, True), _columns(X, *h2, True)])


IMPLEMENTATIONS = {
    "rows_single": _rows_single,
    "rows_multi": _rows_multi,
    "columns_single_unscaled": lambda *a: _columns(*a, scaled=False),
    "columns_single_scaled": lambda *a: _columns(*a, scaled=True),
    "columns_multi_two": _two_columns,
    "scores": lambda Q, K: Q @ K.T / np.sqrt(K.shape[1]),
    "softmax_rows": _softmax,
    "sdpa": lambda Q, K, V: (lambda s: (s, _softmax(s), _softmax(s) @ V))(Q @ K.T / np.sqrt(K.shape[1])),
    "qkv_projections": lambda X, a, b, c: (X @ a, X @ b, X @ c),
    "qkv_single": lambda Q, K, V: _softmax(Q @ K.T / np.sqrt(K.shape[1])) @ V,
    "qkv_multi": _qkv_multi,
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_convention_round_trip(name):
    conv = CONVENTIONS[name]
    assert set(IMPLEMENTATIONS) == set(CONVENTIONS)
    for case in cases.random_cases(conv, seed=7):
        returned = IMPLEMENTATIONS[name](*conv.call_arguments(case))
        parts = canonical_parts(conv, payloads.encoded_value(encode_value(returned)))
        assert not parts.problems
        for part, expected in conv.expected_parts(case).items():
            assert compare(parts.values[part], expected, Tolerance()) is None, (name, case.label, part)


def test_large_score_case_reaches_seed_002_magnitudes():
    for conv in CONVENTIONS.values():
        assert cases.max_score(cases.large_score_case(conv, 3)) >= cases.LARGE_SCORE


def test_random_shapes_cover_the_required_variety():
    shapes = cases.RANDOM_SHAPES
    assert any(n != d for n, d, _ in shapes)
    assert any(n == 1 for n, _, _ in shapes)
    assert any(n == 64 for n, _, _ in shapes)
    assert len({h for _, _, h in shapes if h > 1}) >= 2
    assert all(d % h == 0 for _, d, h in shapes)


def test_features_come_from_what_a_convention_declares_not_its_name():
    from dataclasses import replace

    from grader.judging.explain import features
    for conv in CONVENTIONS.values():
        assert features(replace(conv, name="renamed")) == features(conv), conv.name
    # A softmax helper's scores are a dot product's as far as its course says: not additive.
    assert features(CONVENTIONS["softmax_rows"]) == {"softmax", "tokens_as_rows", "dot_product", "attention_output"}
    assert "projections" in features(CONVENTIONS["rows_single"]) and "softmax" not in features(CONVENTIONS["scores"])


def test_a_convention_s_kept_hash_never_travels_to_another_process():
    """A convention keeps its hash once computed (it keys the judging's caches). Pickled for a
    Dask worker, it arrives without it: strings hash differently there, and a kept hash would
    make it miss every cache it keys, and every set it is looked up in."""
    import pickle

    conv = CONVENTIONS["rows_single"]
    hash(conv)
    arrived = pickle.loads(pickle.dumps(conv))
    assert "_hash" not in vars(arrived)
    assert arrived == conv and hash(arrived) == hash(conv) and {conv: 1}.get(arrived) == 1
