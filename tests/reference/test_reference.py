"""The trusted reference reproduces what the assignment sheets print."""
import numpy as np

from grader.reference import sheets
from grader.reference.attention import attention


def test_sheet_000_printed_tables_single_head():
    result = attention(sheets.sheet_000(1))
    np.testing.assert_array_equal(np.round(result["output"], 1) + 0.0, sheets.SHEET_000_PRINTED_OUTPUT_H1)
    printed = sheets.SHEET_000_PRINTED_WEIGHTS_H1
    # Precision 1 in scientific notation: two significant digits.
    np.testing.assert_allclose(result["heads"][0]["weights"], printed, rtol=0.051)


def test_sheet_000_printed_tables_three_heads():
    result = attention(sheets.sheet_000(3))
    np.testing.assert_array_equal(np.round(result["output"], 1) + 0.0, sheets.SHEET_000_PRINTED_OUTPUT_H3)


def test_sheet_002_scores_and_projection():
    result = attention(sheets.sheet_002())
    for head, printed in zip(result["heads"], sheets.SHEET_002_PRINTED_SCORES):
        np.testing.assert_allclose(head["scores"], printed, rtol=1e-9)
    np.testing.assert_allclose(result["output"], sheets.SHEET_002_PRINTED_RESULT, rtol=1e-9)


def test_sheet_003_true_values():
    output_columns = attention(sheets.sheet_003_multihead())["output"].T
    np.testing.assert_allclose(output_columns[:3], sheets.SHEET_003_TRUE_VALUES_ROWS, atol=5e-4)


def test_sheet_003_single_head_matches_the_sheets_printed_result():
    # "Matrix form self-attention result" printed by seed 003 (unscaled).
    printed = np.array([[0.94744244, 1.64201168, 1.61949281],
                        [-0.24348429, -0.08470004, -0.06641533],
                        [-0.91310441, 4.02764044, 3.96863308],
                        [-0.44522983, 2.18690791, 2.15858316]])
    from dataclasses import replace
    case = replace(sheets.sheet_003_single(scaled=False), scaled=False)
    np.testing.assert_allclose(attention(case)["output"].T, printed, rtol=1e-7)


def test_softmax_is_stable_at_seed_002_magnitudes():
    weights = attention(sheets.sheet_002_head(1))["heads"][0]["weights"]
    assert np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights.sum(axis=1), 1.0)
