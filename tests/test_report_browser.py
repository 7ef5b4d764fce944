"""The HTML report opens offline in a real headless Chromium with no console errors."""
import pytest

from conftest import SAMPLES, SUBMISSIONS, chromium_path, grade
from grader.report_html import write_html

pytestmark = pytest.mark.slow

playwright = pytest.importorskip("playwright.sync_api")

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


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
        browser.close()
    assert problems == []
    assert all(url.startswith("file://") for url in requests), requests
    assert score.replace(" ", "") == f"{result.score:g}/{result.max_score:g}"
    functions = len({c.function for c in result.checks})
    assert sections == functions
    assert rows == len(result.checks) + functions   # a table per function, with its header row
    if any(c.figures for c in result.checks):
        assert heatmaps >= 2


def test_class_summary_renders_without_console_errors(tmp_path):
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    from grader.report_html import write_summary
    results = [dict(grade(SUBMISSIONS / n, a).to_json(), student=n) for n, a in
               [("worked_solution.ipynb", "rows"), ("mistake_softmax_axis.ipynb", "rows")]]
    page_path = tmp_path / "summary.html"
    write_summary(results, ["a", "b"], [("x", ["1.ipynb", "2.ipynb"])], [{"a": ["a"], "b": ["b"], "similarity": 0.95}],
                  page_path)
    problems = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=LAUNCH_ARGS)
        page = browser.new_page()
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(page_path.as_uri())
        bars = page.locator("svg rect").count()
        browser.close()
    assert problems == [] and bars == 10


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
