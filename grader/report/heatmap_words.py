"""The heatmaps in words: what a reader who cannot tell the colours apart (or uses a screen
reader) learns from them instead, made from the numbers the heatmaps show and the mistake the
report names. Rows are queries and columns keys, as in every figure (grader/judging/checks.py
weight_heatmaps: the canonical form, tokens as rows)."""
from __future__ import annotations


def shown(value) -> str:
    """A weight as its heatmap cell shows it."""
    return "nan" if value is None else f"{value:.2f}"


def figure_sentence(figure: dict) -> str:
    """One sentence on a figure: whether the student's weights match the expected ones as
    shown, and where they differ most."""
    yours, expected = figure["student"], figure["expected"]
    cells = [(q, k, a, e) for q, (row_a, row_e) in enumerate(zip(yours, expected))
             for k, (a, e) in enumerate(zip(row_a, row_e))]
    differ = [c for c in cells if shown(c[2]) != shown(c[3])]
    title = figure["title"][:1].upper() + figure["title"][1:]
    if not differ:
        return f"{title}: all {len(cells)} match the expected (to two decimals)."
    broken = [c for c in differ if c[2] is None or c[3] is None]
    q, k, a, e = max(differ, key=lambda c: float("inf") if c in broken else abs(c[2] - c[3]))
    sentence = (f"{title}: {len(differ)} of {len(cells)} differ from the expected, most at query {q + 1}, "
                f"key {k + 1} (yours {shown(a)}, expected {shown(e)})")
    if broken:
        sentence += f"; {len(broken)} {'is' if len(broken) == 1 else 'are'} NaN or inf"
    return sentence + "."


def heatmaps_in_words(check) -> str:
    """The text alternative of a function's heatmaps (`check` is the view of the check that
    shows them): a sentence per figure, then the mistake that check names, which the picture
    is evidence of."""
    sentences = [figure_sentence(f) for f in check.figures]
    if check.diagnosis:
        sentences.append(f"{'Likely mistake' if check.lost_points else 'Also noticed (no points)'}: "
                         f"{check.diagnosis}.")
    return " ".join(sentences)
