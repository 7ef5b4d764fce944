"""The heatmaps' text alternative and colours: from the numbers shown, readable at WCAG AA."""
import pytest

from grader.report.heatmap_words import figure_sentence, heatmaps_in_words
from grader.report.html import _heat_rgb, _luminance, heat_text_colour


def contrast(a: float, b: float) -> float:
    light, dark = max(a, b), min(a, b)
    return (light + 0.05) / (dark + 0.05)


@pytest.mark.parametrize("value", [None, -1.0, 2.0, *(i / 100 for i in range(101))])
def test_every_cells_text_has_aa_contrast_on_its_colour(value):
    text = (0, 0, 0) if heat_text_colour(value) == "#000" else (255, 255, 255)
    assert contrast(_luminance(text), _luminance(_heat_rgb(value))) >= 4.5


def test_a_figure_says_how_many_weights_differ_and_where_the_most():
    figure = {"title": "attention weights, head 2", "student": [[0.5, 0.5], [0.1, None]],
              "expected": [[0.5, 0.5], [0.9, 0.1]]}
    assert figure_sentence(figure) == ("Attention weights, head 2: 2 of 4 differ from the expected, most at query 2, "
                                       "key 2 (yours nan, expected 0.10); 1 is NaN or inf.")
    figure["student"] = [[0.5, 0.5], [0.11, 0.1]]
    assert figure_sentence(figure).endswith("most at query 2, key 1 (yours 0.11, expected 0.90).")


def check_view(figures, status="failed", diagnosis="scores not scaled"):
    from grader.report.view import CheckView
    return CheckView("f.fixed", "f", "fixed", "Sheet data", status, 0, 3, "", diagnosis, False, figures, "", False)


def test_weights_equal_as_shown_match_and_the_checks_mistake_closes_the_words():
    figure = {"title": "attention weights", "student": [[0.501, 0.499]], "expected": [[0.5, 0.5]]}
    assert heatmaps_in_words(check_view([figure])) == (
        "Attention weights: all 2 match the expected (to two decimals). Likely mistake: scores not scaled.")
    assert heatmaps_in_words(check_view([figure], "info", "softmax overflows")).endswith(
        "Also noticed (no points): softmax overflows.")
    assert "mistake" not in heatmaps_in_words(check_view([figure], diagnosis=None))
