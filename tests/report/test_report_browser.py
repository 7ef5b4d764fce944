"""The HTML report opens offline in a real headless Chromium with no console errors."""
import pytest

from grading_helpers import LAUNCH_ARGS, SAMPLES, SUBMISSIONS, chromium_path, grade
from grader.report.html import write_html

pytestmark = pytest.mark.slow

playwright = pytest.importorskip("playwright.sync_api")



@pytest.mark.parametrize("name, assignment", [("mistake_softmax_axis.ipynb", "rows"),
                                              ("columns_sheet_003.ipynb", "columns"),
                                              ("blank_template.ipynb", "rows")])
def test_report_renders_without_console_errors_or_fetches(tmp_path, name, assignment):
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    result = grade((SAMPLES if assignment == "columns" else SUBMISSIONS) / name, assignment)
    page_path = tmp_path / "report.html"
    write_html(result, page_path)
    problems, requests = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page()
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_path.as_uri())
        score = page.inner_text(".score")
        rows = page.locator("table.checks > tbody > tr").count()
        sections = page.locator("section.function").count()
        heatmaps = page.locator("table.heat").count()
        violations, _ = axe_violations(page)
        browser.close()
    assert violations == []   # WCAG 2.1 AA: a wide cell that scrolls is reachable from the keyboard
    assert problems == []
    assert all(url.startswith("file://") for url in requests), requests
    assert score.replace(" ", "") == f"{result.score:g}/{result.max_score:g}"
    functions = len({c.function for c in result.checks})
    assert sections == functions
    assert rows == len(result.checks) + functions   # a table per function, with its header row
    if any(c.figures for c in result.checks):
        assert heatmaps >= 2


HOSTILE_NAMES = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>']
# Why a file was not graded, as the summary shows it: it quotes the file's name, which the
# student chose, so it is hostile text too; and one long word, which must wrap, not scroll.
HOSTILE_REASON = '<img src=x onerror=alert(3)>.ipynb is not a notebook: ' + "x" * 300


def a_class(tmp_path):
    """About thirty students from a few really graded notebooks, two with hostile names, one
    with a second file that does not count, one overridden, one not graded (with a hostile
    reason), one whose file Canvas marked late and one with a cell stopped at its timeout.
    Every row goes through the batch's summary_row, as in `grader grade`."""
    from grader.batch.gradebook import summary_row
    from grader.batch.gradebook import class_rows
    from grader.intake.discover import Identity, Submission
    from grader.grade import not_graded
    from grader.course.spec import load_assignment
    names = ("worked_solution.ipynb", "mistake_softmax_axis.ipynb", "mistake_global_D.ipynb",
             "mistake_no_scaling.ipynb")
    graded = [grade(SUBMISSIONS / n, "rows").to_json() for n in names]
    broken = summary_row(not_graded("broken.ipynb", load_assignment("rows"), 1, "unreadable", "SubmissionError",
                                    HOSTILE_REASON).to_json())
    graded = [summary_row(row) for row in graded]
    # The grader's record of a cell it interrupted (grader/kernel/session.py), on a file otherwise graded.
    stopped = {"cell": 9, "kind": "timeout", "ename": "Timeout", "evalue": "the cell ran longer than 30 s and was "
               "interrupted", "traceback": "", "source": "while True:\n    pass"}
    timed_out = summary_row(dict(graded[0], errors=[stopped]))
    submissions, rows = [], {}
    for i in range(30):
        name = HOSTILE_NAMES[i] if i < len(HOSTILE_NAMES) else f"Student {i}"
        student = "7" if i >= 28 else str(1000 + i)   # two files of student 7
        folder = f"s{i}"
        path = tmp_path / f"{folder}.ipynb"
        path.write_text("{}")
        submissions.append(Submission(path, str(path), student, folder,
                                      identity=Identity(student, name, "canvas", i, late=i == 6)))
        rows[folder] = broken if i == 5 else timed_out if i == 8 else graded[i % len(graded)]
    overrides = {"1003": {"student": "1003", "score": 20.0, "reason": "late penalty waived", "file": "o.csv"}}
    students, decisions = class_rows(submissions, rows, ["self_attention", "multi_head_attention"], overrides)
    people = {s.folder: {"student": s.student, "name": s.identity.name, "submission": s.name,
                         "counts": decisions[s.folder][0]} for s in submissions}
    similar = [{"a": ["s0", "s4"], "b": [], "similarity": 1.0, "shared": ["self_attention"]},
               {"a": ["s1"], "b": ["s2"], "similarity": 0.95, "shared": []}]
    return students, rows, people, similar


def test_class_summary_reads_in_a_minute_in_a_real_browser(tmp_path):
    """Header, histogram, per-function pass rates, mistakes counted per student with links, a
    sortable student table, similar groups with names; no console errors, no fetches, no
    horizontal scroll at 1280 px, and hostile names shown as text."""
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    from grader.report.html import write_summary
    students, rows, people, similar = a_class(tmp_path)
    page_path = tmp_path / "summary.html"
    write_summary(students, rows, people, similar, page_path,
                  {"assignment": "Homework 3", "seed": 42, "version": "9.9", "date": "2026-11-23 10:00 UTC"})
    problems, requests, dialogs = [], [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(page_path.as_uri())
        header = page.inner_text("p.meta") + page.inner_text("ul.counts")
        bars = page.locator("svg rect").count()
        functions = page.locator("section h2:has-text('Functions') + table tr").count()
        width = page.evaluate("document.documentElement.scrollWidth")
        score_cells = "[...document.querySelectorAll('table.students tbody tr')].map(r => r.cells[2].dataset.value)"
        before = page.evaluate(score_cells)
        page.click("table.students th:has-text('Score')")
        ascending = page.evaluate(score_cells)
        page.click("table.students th:has-text('Score')")
        descending = page.evaluate(score_cells)
        names = page.inner_text("table.students")
        mistakes = page.inner_text("h2:has-text('Most common mistakes') + table")
        status_of = "([...document.querySelectorAll('table.students tbody tr')]" \
                    ".map(r => [r.cells[0].innerText, r.cells[3].innerText]))"
        statuses = dict(page.evaluate(status_of))
        problems_list = page.inner_text("ul.problems")
        injected = page.locator("ul.problems img, table.students img").count()
        page.screenshot(path=str(tmp_path / "summary.png"), full_page=True)
        browser.close()
    assert problems == [] and dialogs == []
    assert all(url.startswith("file://") for url in requests), requests
    assert width <= 1280
    for words in ("2026-11-23", "seed 42", "grader 9.9", "29 students", "30 files", "1 errors", "1 overrides",
                  "1 with several files", "1 with a cell stopped at its timeout", "1 late"):
        assert words in header, words
    assert bars == 10 and functions == 3
    assert len(before) == 29   # one row per student
    numbers = [float(v) for v in ascending]
    assert numbers == sorted(numbers) and [float(v) for v in descending] == sorted(numbers, reverse=True)
    assert HOSTILE_NAMES[0] in names and HOSTILE_NAMES[1] in names
    assert statuses["1006"] == "graded late" and statuses["1005"] == "error" and statuses["1007"] == "graded"
    assert f"error: {HOSTILE_REASON[:200]}…" in problems_list and injected == 0   # one line, as text
    assert "graded: cell 10 (while True:): the cell ran longer than 30 s and was interrupted" in problems_list
    # Per student: the wrong-axis notebook was given to 7 students (every fourth of 29, less the broken one).
    axis = next(line for line in mistakes.splitlines() if "softmax over the wrong axis" in line)
    assert "\t7\t" in axis
    assert (tmp_path / "summary.png").stat().st_size > 20_000


def test_a_two_mistake_multi_head_report_is_compact(tmp_path):
    """One section per function with its diagnosis first, every head's heatmaps side by side
    with a legend, informational checks quiet, and the whole page about three screens tall."""
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    result = grade(SUBMISSIONS / "mistake_global_D.ipynb", "rows")
    assert len({c.diagnosis for c in result.checks if c.status == "failed" and c.diagnosis}) == 2
    page_path = tmp_path / "report.html"
    write_html(result, page_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_path.as_uri())
        height = page.evaluate("document.documentElement.scrollHeight")
        width = page.evaluate("document.documentElement.scrollWidth")
        first_in_section = page.evaluate(
            "[...document.querySelectorAll('section.function')].map(s => s.children[1].className)")
        head_rows = page.evaluate("[...document.querySelectorAll('section.function')].map(s => "
                                  "[...s.querySelectorAll('.figures')].map(r => r.querySelectorAll('figure').length))")
        legends = page.locator(".legend .bar").count()
        info_colour = page.evaluate("getComputedStyle(document.querySelector('tr.info td')).color")
        footer = page.inner_text("p.meta >> nth=-1")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert width <= 1280
    assert height <= 3 * 900, f"{height} px tall"
    assert first_in_section == ["diagnosis", "diagnosis"]   # the diagnosis comes first
    assert head_rows[1] == [3, 3]   # three heads: yours side by side, expected side by side
    assert legends == 2
    assert info_colour == "rgb(110, 119, 129)"
    assert "output_characters" not in footer and "ran the notebook in" in footer
    assert (tmp_path / "report.png").stat().st_size > 10_000


# The built-in rows assignment with two of its checks hidden, as a course may write it.
HIDDEN_COURSE = '''name = "rows-hidden"
[[functions]]
name = "self_attention"
convention = "rows_single"
fixed_data = "sheet_000"
hidden = ["random_shapes", "dtypes"]

[[functions]]
name = "multi_head_attention"
convention = "rows_multi"
fixed_data = "sheet_000_heads"
hidden = ["random_shapes", "dtypes"]
'''
SERIOUS = ("serious", "critical")


def axe_violations(page) -> list[dict]:
    """axe-core's serious and critical violations of every rule it has (WCAG 2.1 A and AA
    among them), and the ids of the rules the page passed: proof that it checked something."""
    from axe_playwright_python.sync_playwright import Axe
    found = Axe().run(page, options={"resultTypes": ["violations", "passes"]}).response
    serious = [{"rule": v["id"], "impact": v["impact"], "where": [n["target"] for n in v["nodes"][:3]],
                "why": v["nodes"][0]["failureSummary"]} for v in found["violations"] if v["impact"] in SERIOUS]
    return serious, {p["id"] for p in found["passes"]}


def test_the_report_passes_axe_with_heatmaps_failures_and_hidden_checks(tmp_path):
    """WCAG 2.1 AA (axe-core): a two-mistake multi-head report with heatmaps, failed checks and
    hidden ones, as a student and as the staff see it; every heatmap a captioned table whose
    weights a screen reader reads with their query and key; every check's status in words."""
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    course = tmp_path / "rows_hidden.toml"
    course.write_text(HIDDEN_COURSE)
    result = grade(SUBMISSIONS / "mistake_global_D.ipynb", str(course))
    assert any(c.hidden and c.status == "failed" for c in result.checks)
    pages = {}
    for reader in ("student", "staff"):
        pages[reader] = tmp_path / f"{reader}.html"
        write_html(result, pages[reader], staff=reader == "staff")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        for reader, path in pages.items():
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(path.as_uri())
            violations, passed = axe_violations(page)
            assert violations == [], (reader, violations)
            assert {"color-contrast", "th-has-data-cells", "landmark-one-main"} <= passed
            tables = page.locator("table.heat").count()
            assert tables >= 8   # one head's pair for self_attention, three for multi_head_attention
            assert page.get_by_role("table", name="Yours: attention weights, head 2").count() == 1
            five_tokens = page.eval_on_selector_all("table.heat", "ts => ts.filter(t => t.rows.length == 6).length")
            assert five_tokens and page.get_by_role("rowheader", name="query 5", exact=True).count() == five_tokens
            assert page.get_by_role("columnheader", name="key 5", exact=True).count() == five_tokens
            # Every table: a caption, a header per key and per query, a number in every other cell.
            shapes = page.eval_on_selector_all("table.heat", """ts => ts.map(t => [t.caption.innerText.length > 0,
                t.querySelectorAll("th[scope=col]").length, t.querySelectorAll("th[scope=row]").length,
                t.rows.length - 1, t.querySelectorAll("td").length - 1])""")
            assert all(caption and keys * queries == cells and queries == rows
                       for caption, keys, queries, rows, cells in shapes), shapes
            statuses = page.eval_on_selector_all("table.checks td.status", "cells => cells.map(c => c.innerText)")
            assert len(statuses) == len(result.checks)
            assert {s.lower() for s in statuses} <= {"passed", "failed", "error", "info"}
        browser.close()


def test_the_heatmaps_say_in_words_what_they_show(tmp_path):
    """Below each function's heatmaps, a sentence per head from the numbers shown (how many
    weights differ, where the most and by how much) and the likely mistake the report names."""
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    import numpy as np
    result = grade(SUBMISSIONS / "mistake_global_D.ipynb", "rows")
    page_path = tmp_path / "report.html"
    write_html(result, page_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page()
        page.goto(page_path.as_uri())
        words = page.eval_on_selector_all("section.function .in-words", "ps => ps.map(p => p.innerText)")
        browser.close()
    shown = next(c for c in result.checks if c.function == "self_attention" and c.figures
                 and c.status == "failed")
    figure = shown.figures[0]
    yours, expected = np.round(np.array(figure["student"]), 2), np.round(np.array(figure["expected"]), 2)
    q, k = np.unravel_index(np.argmax(np.abs(yours - expected)), yours.shape)
    assert words[0].startswith(f"Attention weights: {int((yours != expected).sum())} of {yours.size} differ from the "
                               f"expected, most at query {q + 1}, key {k + 1} "
                               f"(yours {yours[q, k]:.2f}, expected {expected[q, k]:.2f}).")
    assert words[0].endswith(f"Likely mistake: {shown.diagnosis}.")
    assert [w.count("head") for w in words[1:]] == [3]


def test_the_class_summary_passes_axe_and_sorts_from_the_keyboard(tmp_path):
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    from grader.report.html import write_summary
    students, rows, people, similar = a_class(tmp_path)
    page_path = tmp_path / "summary.html"
    write_summary(students, rows, people, similar, page_path,
                  {"assignment": "Homework 3", "seed": 42, "version": "9.9", "date": "2026-11-23 10:00 UTC"})
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(page_path.as_uri())
        violations, passed = axe_violations(page)
        histogram = page.get_by_role("img").get_attribute("aria-label")
        page.focus("table.students th button:has-text('Score')")
        page.keyboard.press("Enter")
        sort = page.get_attribute("table.students th:has-text('Score')", "aria-sort")
        scores = page.evaluate("[...document.querySelectorAll('table.students tbody tr')]"
                               ".map(r => Number(r.cells[2].dataset.value))")
        browser.close()
    assert violations == []
    assert {"color-contrast", "landmark-one-main", "svg-img-alt"} <= passed
    assert "7 from 90 to 100 %" in histogram   # the bars' numbers, not only their picture
    assert sort == "ascending" and scores == sorted(scores)
