"""The data printed on the assignment sheets, as canonical cases.

Each sheet's own matrices are reproduced exactly (seed 003's are regenerated with the same
legacy RandomState calls the sheet makes), and converted to tokens-as-rows form.
"""
from __future__ import annotations

import numpy as np

from .attention import Case, Head

# Seeds 000/001: N = 5 tokens, D = 6.
SHEET_000_X = np.array([
    [0.7, -0.8, -1.2, -1.0, -0.0, -0.3],
    [2.7, 0.1, 1.6, 1.8, 1.5, 0.3],
    [0.1, 2.6, -0.1, -1.3, -0.5, -0.7],
    [1.1, 1.5, 1.0, -0.5, 0.4, 0.4],
    [-0.7, -0.7, 0.7, -1.5, -0.8, 1.0],
])
SHEET_000_WQ = np.array([
    [-1.7, 1.6, 0.9, -0.5, 0.4, -1.0],
    [-0.4, 1.0, -0.3, 1.0, 0.5, 1.1],
    [0.4, -0.9, -1.0, 0.5, -1.4, 0.0],
    [0.3, 1.4, -1.2, 0.2, 0.1, 1.6],
    [-0.8, 0.8, -0.7, -1.3, 0.3, 0.8],
    [1.1, 0.3, -1.5, -2.3, 2.2, -0.7],
])
SHEET_000_WK = np.array([
    [0.3, -0.4, -1.3, 0.3, -1.7, 1.1],
    [-2.3, -1.1, 0.6, -1.2, 2.2, 0.3],
    [1.1, -0.4, -0.5, 1.9, -1.1, -1.2],
    [-0.4, 1.0, -1.7, 0.0, -3.3, -1.4],
    [-0.9, -1.1, -1.0, 1.4, 1.3, 1.2],
    [-0.7, 0.4, 0.4, -1.4, -0.2, -0.5],
])
SHEET_000_WV = np.array([
    [-0.1, 0.7, 1.0, -0.1, 1.6, 0.9],
    [0.4, -1.0, -0.7, -0.6, -0.9, -0.1],
    [-0.4, 0.5, -1.4, 0.1, 0.6, 0.4],
    [1.4, -1.3, -1.3, -0.6, 1.6, -0.2],
    [-0.4, -0.6, -1.4, -1.0, 0.4, -0.8],
    [0.2, 0.5, 0.4, -0.5, 1.4, 2.3],
])

# What the worked solution (seed 000) prints with precision 1.
SHEET_000_PRINTED_OUTPUT_H1 = np.array([
    [-0.7, -0.9, 0.5, 0.1, -5.5, -1.1],
    [-0.4, 0.6, 0.6, -0.6, 2.0, 0.5],
    [0.3, -0.1, -2.4, -1.9, 4.9, 1.8],
    [-0.7, -0.7, 0.4, -0.1, -4.5, -0.7],
    [-2.0, 3.3, 2.1, 1.6, -1.3, 2.8],
])
SHEET_000_PRINTED_OUTPUT_H3 = np.array([
    [-0.7, -0.9, 0.7, 0.2, -1.5, 2.9],
    [-1.1, 0.9, -3.9, -2.9, -3.0, -0.5],
    [-0.7, -0.9, 1.6, 1.2, 5.8, 1.5],
    [-0.7, -0.7, -3.8, -2.8, -5.1, -0.9],
    [-0.2, 0.3, 1.0, 0.2, -1.3, 3.0],
])
SHEET_000_PRINTED_WEIGHTS_H1 = np.array([
    [4.9e-07, 4.0e-14, 9.9e-01, 1.7e-05, 6.1e-03],
    [4.8e-01, 3.6e-01, 1.5e-01, 2.1e-02, 4.0e-04],
    [1.9e-02, 5.8e-01, 9.4e-02, 2.8e-01, 3.2e-02],
    [3.0e-02, 1.2e-02, 8.5e-01, 9.9e-02, 1.1e-02],
    [4.7e-04, 7.3e-03, 1.6e-02, 4.0e-02, 9.4e-01],
])


def fused_case(x, wq, wk, wv, n_heads: int, label: str, wo=None) -> Case:
    """Split fused D x (H*d_k) matrices into H contiguous column blocks, one per head."""
    blocks = [np.split(w, n_heads, axis=1) for w in (wq, wk, wv)]
    heads = tuple(Head(q, k, v) for q, k, v in zip(*blocks))
    return Case(x=np.asarray(x), heads=heads, wo=wo, label=label)


def sheet_000(n_heads: int = 1) -> Case:
    return fused_case(SHEET_000_X, SHEET_000_WQ, SHEET_000_WK, SHEET_000_WV, n_heads,
                      f"assignment sheet data, H = {n_heads}")


# Seed 002: integer X, two heads with their own 4 x 3 matrices, output projection W_0.
SHEET_002_X = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
_A = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [1.0, 1.1, 1.2]])
SHEET_002_HEADS = (
    Head(wq=_A,
         wk=np.array([[0.3, 0.2, 0.1], [0.6, 0.5, 0.4], [0.9, 0.8, 0.7], [1.2, 1.1, 1.0]]),
         wv=np.array([[0.7, 0.8, 0.9], [0.4, 0.5, 0.6], [0.1, 0.2, 0.3], [1.3, 1.4, 1.5]])),
    Head(wq=_A + 0.1,
         wk=np.array([[0.4, 0.3, 0.2], [0.7, 0.6, 0.5], [1.0, 0.9, 0.8], [1.3, 1.2, 1.1]]),
         wv=np.array([[0.9, 1.0, 1.1], [0.6, 0.7, 0.8], [0.3, 0.4, 0.5], [1.4, 1.5, 1.6]])),
)
SHEET_002_W0 = np.arange(1, 25).reshape(6, 4) / 10.0
SHEET_002_PRINTED_SCORES = (
    np.array([[109.69655115, 251.95565747], [251.95565747, 578.59734577]]),
    np.array([[139.14141487, 324.35538123], [324.35538123, 756.0286305]]),
)
SHEET_002_PRINTED_RESULT = np.array([[155.96, 169.04, 182.12, 195.2]] * 2)


def sheet_002(with_projection: bool = True) -> Case:
    return Case(x=SHEET_002_X, heads=SHEET_002_HEADS,
                wo=SHEET_002_W0 if with_projection else None,
                label="sheet 002 data (scores up to 756)")


def sheet_002_head(i: int) -> Case:
    return Case(x=SHEET_002_X, heads=(SHEET_002_HEADS[i],), label=f"sheet 002 data, head {i + 1}")


def _columns_case(x_cols, head_params, omega_c=None, scaled=True, label="") -> Case:
    """Convert the column-major sheet's parameters (omega: d x D, beta: d x 1) to rows."""
    heads = tuple(Head(wq=oq.T, wk=ok.T, wv=ov.T, bq=bq[:, 0], bk=bk[:, 0], bv=bv[:, 0])
                  for (ov, oq, ok, bv, bq, bk) in head_params)
    return Case(x=x_cols.T, heads=heads, wo=None if omega_c is None else omega_c.T,
                scaled=scaled, label=label)


def sheet_003_single(scaled: bool) -> Case:
    n, d = 3, 4
    rng = np.random.RandomState(3)
    all_x = [rng.normal(size=(d, 1)) for _ in range(n)]
    rng = np.random.RandomState(0)
    omega_q, omega_k, omega_v = (rng.normal(size=(d, d)) for _ in range(3))
    beta_q, beta_k, beta_v = (rng.normal(size=(d, 1)) for _ in range(3))
    return _columns_case(np.hstack(all_x), [(omega_v, omega_q, omega_k, beta_v, beta_q, beta_k)],
                         scaled=scaled, label="sheet 003 data (N = 3, D = 4)")


def sheet_003_multihead() -> Case:
    n, d, h_d = 6, 8, 4
    x = np.random.RandomState(3).normal(size=(d, n))
    rng = np.random.RandomState(0)
    params = []
    for _ in range(2):
        omega_q, omega_k, omega_v = (rng.normal(size=(h_d, d)) for _ in range(3))
        beta_q, beta_k, beta_v = (rng.normal(size=(h_d, 1)) for _ in range(3))
        params.append((omega_v, omega_q, omega_k, beta_v, beta_q, beta_k))
    omega_c = rng.normal(size=(d, d))
    return _columns_case(x, params, omega_c, label="sheet 003 data (N = 6, D = 8, two heads)")


# The "True values" seed 003 prints beside its own (wrong) answer: the first 7 of 8 rows of
# the D x N output, at precision 3.
SHEET_003_TRUE_VALUES_ROWS = np.array([
    [-21.207, -5.373, -20.933, -9.179, -11.319, -17.812],
    [-1.995, 7.906, -10.516, 3.452, 9.863, -7.24],
    [5.479, 1.115, 9.244, 0.453, 5.656, 7.089],
])

# Seed 004: ten one-hot-ish token embeddings, heads chosen by projection matrices.
SHEET_004_X = np.array([
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.1, 1.0, 0.2, 0.0, 0.0, 0.1, 0.0],
    [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.1, 1.0, 0.2, 0.0, 0.0, 0.3, 0.0],
    [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.1, 0.0],
    [0.0, 0.0, 0.4, 0.0, 0.0, 1.0, 0.1, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.4, 1.0],
    [0.0, 0.0, 0.2, 0.0, 0.4, 0.0, 1.0, 0.0],
])
SHEET_004_HEAD_DIMS = ([2], [1, 3], [4, 6, 7], [2, 5])


def _selection(dims, input_dim=8) -> np.ndarray:
    w = np.zeros((input_dim, len(dims)))
    w[dims, np.arange(len(dims))] = 1.0
    return w


def sheet_004() -> list[Case]:
    eye = np.eye(8)
    cases = [Case(x=SHEET_004_X, heads=(Head(eye, eye, eye),), label="sheet 004 tokens, identity projections")]
    for dims in SHEET_004_HEAD_DIMS:
        w = _selection(dims)
        cases.append(Case(x=SHEET_004_X, heads=(Head(w, w, w),), label=f"sheet 004 tokens, head on dims {dims}"))
    return cases


FIXED_DATA = {
    "sheet_000": lambda: [sheet_000(1)],
    "sheet_000_heads": lambda: [sheet_000(1), sheet_000(3)],
    "sheet_002": lambda: [sheet_002_head(0), sheet_002_head(1)],
    "sheet_003_single": lambda: [sheet_003_single(scaled=True)],
    "sheet_003_multihead": lambda: [sheet_003_multihead()],
    "sheet_004": sheet_004,
}
