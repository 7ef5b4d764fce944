"""The heatmaps' text alternative and colours: from the numbers shown, readable at WCAG AA."""
import pytest

from grader.heatmap_words import figure_sentence, heatmaps_in_words
from grader.report_html import _heat_rgb, _luminance, heat_text_colour


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
    assert figure_sentence(figure) == ("Attention weights, head 2: 2 of 4 of your weights differ from the expected "
                                       "ones; the most at query 2, key 2: yours nan, expected 0.10 (1 entry is NaN "
                                       "or inf).")
    figure["student"] = [[0.5, 0.5], [0.11, 0.1]]
    assert figure_sentence(figure).endswith("the most at query 2, key 1: yours 0.11, expected 0.90.")


def test_weights_equal_as_shown_match_and_the_likely_mistake_closes_the_words():
    figure = {"title": "attention weights", "student": [[0.501, 0.499]], "expected": [[0.5, 0.5]]}
    mistakes = [("reads notebook globals (D)", "advice", True), ("scores not scaled", "advice", False)]
    assert heatmaps_in_words([figure], mistakes) == (
        "Attention weights: yours match the expected weights in all 2 entries (to two decimals). "
        "The report's likely mistake: scores not scaled.")
    assert "likely mistake" not in heatmaps_in_words([figure], [])
