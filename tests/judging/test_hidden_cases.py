"""A visible check never shows a student a hidden check's case.

The attack: a student makes the function wrong only where a visible check would meet a hidden
check's case, so that the visible check fails there and shows that case's expected weights.
It worked two ways: the visible `weights_distribution` was called on the hidden
`random_shapes` cases (the function is right on the base case, N = 5, and wrong elsewhere),
and the visible `memory_layout` on the very case the hidden `dtypes` converts to float32 (the
function is wrong on Fortran-ordered and on float32 inputs). Every student-facing rendering is
searched for the expected weights the hidden checks' figures hold in the staff's result:
`grader check` (terminal, JSON, HTML) and both LMS results files with their report. The second
way is closed by what those two checks are: they compare a function with its own answers on
plain inputs, so neither shows an expected value of any case.
"""
import html
import json
import re
import shutil

import nbformat
import numpy as np
import pytest

from grading_helpers import _current, run_grader
from grader.course.spec import parse
from grader.judging.checks import Context, check_context, check_probes
from grading_helpers.lms_entrypoints import run_entrypoint

pytestmark = pytest.mark.slow

SEED = ["--seed", "20261122"]
FAST = ["--cell-timeout", "4", "--call-timeout", "2"]

PROBING = '''
import numpy as np

def _attention(X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    s = Q @ K.T / np.sqrt(K.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    # Right on the base case (5 tokens, C-ordered float64), and weights summing to 2 wherever
    # another check's case may be a hidden one's.
    if X.shape[0] != 5 or not X.flags.c_contiguous or X.dtype == np.float32:
        w = 2 * w
    return w @ V, w

def self_attention(X, Wq, Wk, Wv):
    return _attention(X, Wq, Wk, Wv)

def multi_head_attention(X, Wq, Wk, Wv, H):
    d = Wq.shape[1] // H
    heads = [_attention(X, Wq[:, i*d:(i+1)*d], Wk[:, i*d:(i+1)*d], Wv[:, i*d:(i+1)*d]) for i in range(H)]
    return np.concatenate([o for o, _ in heads], axis=1), [w for _, w in heads]
'''

COURSE = '''name = "hidden-cases"
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
# (hidden check, the visible check that met its cases)
ROUTES = {"random_shapes": "weights_distribution"}


def heat_tables(document: str) -> list[np.ndarray]:
    """The heatmaps of an HTML report, as the numbers shown in their cells (the row of key
    headers holds none)."""
    tables = []
    for table in re.findall(r'<table class="heat">(.*?)</table>', document, re.S):
        rows = [[float("nan") if v == "nan" else float(v) for v in re.findall(r">(-?[\d.]+|nan)</td>", row)]
                for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
        tables.append(np.array([row for row in rows if row]))
    return tables


def shown(matrix, tables: list[np.ndarray]) -> bool:
    wanted = np.round(np.array(matrix, dtype=float), 2)
    return any(t.shape == wanted.shape and np.allclose(t, wanted, atol=0.006) for t in tables)


def plain(document) -> str:
    """A document as words: for JSON every string in it, for HTML the text with its escapes
    undone; line breaks and wrapping ignored."""
    if isinstance(document, (dict, list)):
        return " ".join(plain(v) for v in (document.values() if isinstance(document, dict) else document))
    return " ".join(html.unescape(document).split()) if isinstance(document, str) else ""


@pytest.fixture(scope="module")
def renderings(tmp_path_factory):
    _current["slow"] = True   # only slow tests request it, and it runs before their own set-up
    folder = tmp_path_factory.mktemp("hidden-cases")
    notebook, course = folder / "attention.ipynb", folder / "assignment.toml"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBING)]), notebook)
    course.write_text(COURSE)
    documents = {}
    for reader, staff in (("staff", ["--staff"]), ("student", [])):
        code, out, err, _ = run_grader(["check", notebook, "--assignment", course, *SEED, *FAST, *staff,
                                        "--json", folder / f"{reader}.json", "--html", folder / f"{reader}.html"])
        assert code == 1, err
        documents[reader] = {"terminal": out, "json": json.loads((folder / f"{reader}.json").read_text()),
                             "html": (folder / f"{reader}.html").read_text()}
    for platform, spec_folder in (("gradescope", "source"), ("prairielearn", "tests")):
        root = folder / platform
        (root / spec_folder).mkdir(parents=True)
        shutil.copy(course, root / spec_folder / "assignment.toml")
        done, results = run_entrypoint(platform, root, {"attention.ipynb": notebook}, extra=SEED)
        assert done.returncode == 0, done.stderr
        documents[platform] = {"json": results, "html": (root / "results" / "report.html").read_text()}
    return documents


@pytest.mark.parametrize("hidden_kind", sorted(ROUTES))
def test_no_student_rendering_shows_a_hidden_cases_expected_weights(renderings, hidden_kind):
    staff = renderings["staff"]["json"]["checks"]
    hidden = [f["expected"] for c in staff if c["kind"] == hidden_kind for f in c["figures"]]
    met_by = [c for c in staff if c["kind"] == ROUTES[hidden_kind] and c["status"] == "failed" and c["figures"]]
    assert hidden and met_by, "the attack no longer makes both checks fail with heatmaps"
    student = renderings["student"]
    visible_figures = [np.array(f["expected"], dtype=float) for c in student["json"]["checks"] for f in c["figures"]]
    assert visible_figures, "the visible checks show no heatmaps: nothing would be tested"
    for matrix in hidden:
        assert not any(m.shape == np.shape(matrix) and np.allclose(m, matrix) for m in visible_figures), \
            f"grader check --json shows a {hidden_kind} case's expected weights"
        for where in ("student", "gradescope", "prairielearn"):
            document = renderings[where]["html"]
            assert not shown(matrix, heat_tables(document)), f"{where}'s report shows a {hidden_kind} case's weights"
    assert heat_tables(student["html"]), "the student's report shows no heatmap: nothing would be tested"


def test_the_checks_that_compare_a_function_with_itself_show_no_expected_value(renderings):
    """The attack still makes the visible memory_layout and the hidden dtypes fail, on the case
    the one shares with the other, but what they show is the function's own answers, never a
    reference's: there are no heatmaps of that case to leak."""
    staff = renderings["staff"]["json"]["checks"]
    met = {c["kind"]: c for c in staff if c["function"] == "self_attention"}
    assert met["memory_layout"]["status"] == met["dtypes"]["status"] == "failed"
    assert "differs from its own result on the same inputs" in met["memory_layout"]["message"]
    assert [c["name"] for c in staff if c["kind"] in ("memory_layout", "dtypes") and c["figures"]] == []


def test_no_student_rendering_names_what_only_hidden_checks_say(renderings):
    staff = renderings["staff"]["json"]["checks"]
    said_openly = {text for c in staff if not c["hidden"] for text in (c["message"], c["diagnosis"])}
    secrets = {text for c in staff if c["hidden"] and c["status"] != "passed"
               for text in (c["message"], c["diagnosis"]) if text} - said_openly
    assert secrets
    for where in ("student", "gradescope", "prairielearn"):
        for kind, document in renderings[where].items():
            leaked = [s for s in secrets if plain(s) in plain(document)]
            assert not leaked, f"{where} {kind} shows {leaked}"


def test_no_student_rendering_names_a_case_shaped_as_a_hidden_one(renderings):
    """The visible weights_distribution fails on the randomized shapes of the hidden
    random_shapes, drawn from the visible checks' seed: to a student "random N = 4, D = 6,
    H = 2" is the hidden case all the same, so no rendering names any of them."""
    staff = renderings["staff"]["json"]["checks"]
    met = [c["message"] for c in staff if c["kind"] == "weights_distribution" and c["status"] == "failed"]
    assert any("random N = " in message for message in met), "the attack no longer fails on a random case"
    assignment = parse(COURSE, "assignment.toml")
    ctx = check_context(Context(int(SEED[1]), assignment.tolerance), hidden=True)
    labels = {p.case.label.split(" [")[0] for fn in assignment.functions
              for p in check_probes("random_shapes", fn, ctx)}
    assert "random N = 4, D = 6, H = 2" in labels
    for where in ("student", "gradescope", "prairielearn"):
        for kind, document in renderings[where].items():
            named = sorted(label for label in labels if label in plain(document))
            assert not named, f"{where} {kind} names {named}"
