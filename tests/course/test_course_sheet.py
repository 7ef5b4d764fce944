"""A course's own sheet data: `fixed_data` naming a .npz file beside the spec, whose arrays (by
role, in the convention's layouts) become the cases the `fixed` check compares on, called by
the course's own words. Read and checked with the spec, one line for anything wrong; sent to a
batch's workers and shipped in the Gradescope zip; graded end to end in a real kernel, where a
student reads the course's words and never the built-in sheets'."""
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from grading_helpers import grade, graded_at_full_marks, write_notebook
from grader.batch.resume import batch_key
from grader.batch.tasks import grade_task, spec_for_task
from grader.course.sheet_data import MAX_SHEET_BYTES
from grader.course.spec import load_assignment, parse
from grader.errors import SpecError
from grader.judging.checks import CHECKS, Context, check_probes, check_title
from grader.calling.returns import Tolerance
from grader.lms import entrypoints as lms
from grader.lms import gradescope_zip as lms_package
from grader.reference import sheets
from grader.reference.attention import attention
from grader.report.html import render
from grader.report.terminal import summary
from grader.settings import Settings

LABEL = "the worked example in section 2"
RNG = np.random.default_rng(7)
# The course's example, as its function takes it: weights (out, in), applied as x @ W.T.
EXAMPLE = {"x": RNG.normal(size=(4, 5)).round(1), "wq": RNG.normal(size=(3, 5)).round(1),
           "wk": RNG.normal(size=(3, 5)).round(1), "wv": RNG.normal(size=(2, 5)).round(1)}
COURSE_SPEC = f'''name = "week5"
title = "Week 5: attention"

[[functions]]
name = "attend"
fixed_data = {{ file = "data/example.npz", label = "{LABEL}" }}
[functions.convention]
params = [{{ name = "X", role = "x" }}, {{ name = "W_q", role = "wq" }}, {{ name = "W_k", role = "wk" }},
          {{ name = "W_v", role = "wv" }}]
weights = "out_in"
returns = ["output", "weights"]
'''
ROWS = '[[functions]]\nname = "self_attention"\nconvention = "rows_single"\nfixed_data = {fixed}\n'


def _npz(path: Path, **arrays) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


def _course(tmp_path: Path, spec: str = COURSE_SPEC, **arrays) -> Path:
    _npz(tmp_path / "course" / "data" / "example.npz", **(arrays or EXAMPLE))
    path = tmp_path / "course" / "assignment.toml"
    path.write_text(spec)
    return path


def _rows_spec(tmp_path: Path, fixed: str, convention: str = "rows_single") -> Path:
    path = tmp_path / "assignment.toml"
    path.write_text(ROWS.format(fixed=fixed).replace("rows_single", convention))
    return path


def _sheet000(**more) -> dict:
    return {"x": sheets.SHEET_000_X, "wq": sheets.SHEET_000_WQ, "wk": sheets.SHEET_000_WK,
            "wv": sheets.SHEET_000_WV, **more}


def _same_case(a, b) -> None:
    assert np.array_equal(a.x, b.x) and len(a.heads) == len(b.heads)
    for mine, theirs in zip(a.heads, b.heads):
        for name in ("wq", "wk", "wv", "bq", "bk", "bv"):
            x, y = getattr(mine, name), getattr(theirs, name)
            assert (x is None and y is None) or np.allclose(x, y), name
    assert (a.wo is None) == (b.wo is None) and (a.wo is None or np.allclose(a.wo, b.wo))


# Reading: the arrays become canonical cases, in the convention's own layouts.

def test_a_npz_beside_the_spec_is_the_fixed_check_s_data_called_by_the_course_s_words(tmp_path):
    spec = load_assignment(str(_course(tmp_path)))
    fn, = spec.functions
    case, = fn.sheet.cases
    # Weights given (out, in) as the function takes them are x @ W's transposes.
    assert np.array_equal(case.x, EXAMPLE["x"]) and np.array_equal(case.heads[0].wq, EXAMPLE["wq"].T)
    assert fn.fixed_data == "data/example.npz" and "fixed" in fn.points
    assert check_title(fn, "fixed") == "The worked example in section 2"
    assert check_title(fn, "random_shapes") == CHECKS["random_shapes"].title
    labels = [p.label for p in check_probes("fixed", fn, Context(1, Tolerance()))]
    assert labels == [LABEL, f"random values in the shapes of {LABEL}"]
    # A built-in sheet keeps its own title and labels.
    builtin, = parse(ROWS.format(fixed='"sheet_000"'), "rows").functions
    assert builtin.sheet is None and check_title(builtin, "fixed") == "Data from the assignment sheet"
    assert [p.label for p in check_probes("fixed", builtin, Context(1, Tolerance()))][0] == \
        "assignment sheet data, H = 1"


def test_a_bare_file_name_gets_a_neutral_label_and_seed_000_s_arrays_its_cases(tmp_path):
    _npz(tmp_path / "sheet.npz", **_sheet000())
    fn, = load_assignment(str(_rows_spec(tmp_path, '"sheet.npz"'))).functions
    _same_case(fn.sheet.cases[0], sheets.sheet_000(1))
    assert fn.sheet.label == "the assignment's example data"
    assert not re.search(r"sheet|seed|H = ", check_title(fn, "fixed"))


def test_tokens_as_columns_and_column_biases_read_as_seed_003_s_own_arrays(tmp_path):
    """Seed 003's data as its functions take it (X is D x N, omegas d x D, betas d x 1) is its
    built-in sheet exactly."""
    n, d = 3, 4
    rng = np.random.RandomState(3)
    x = np.hstack([rng.normal(size=(d, 1)) for _ in range(n)])
    rng = np.random.RandomState(0)
    omega_q, omega_k, omega_v = (rng.normal(size=(d, d)) for _ in range(3))
    beta_q, beta_k, beta_v = (rng.normal(size=(d, 1)) for _ in range(3))
    _npz(tmp_path / "s003.npz", x=x, wq=omega_q, wk=omega_k, wv=omega_v, bq=beta_q, bk=beta_k, bv=beta_v)
    fn, = load_assignment(str(_rows_spec(tmp_path, '"s003.npz"', "columns_single_scaled"))).functions
    _same_case(fn.sheet.cases[0], sheets.sheet_003_single(scaled=True))


def test_heads_come_numbered_or_fused_with_n_heads_and_several_files_are_several_cases(tmp_path):
    _npz(tmp_path / "h1.npz", **_sheet000())
    _npz(tmp_path / "h3.npz", **_sheet000(n_heads=np.array(3)))
    blocks = {f"{w}{h + 1}": np.split(m, 3, axis=1)[h] for w, m in
              (("wq", sheets.SHEET_000_WQ), ("wk", sheets.SHEET_000_WK), ("wv", sheets.SHEET_000_WV)) for h in range(3)}
    _npz(tmp_path / "numbered.npz", x=sheets.SHEET_000_X, **blocks)
    fixed = '{ file = ["h1.npz", "h3.npz", "numbered.npz"], label = "the examples of lecture 4" }'
    fn, = load_assignment(str(_rows_spec(tmp_path, fixed, "rows_multi"))).functions
    one, fused, numbered = fn.sheet.cases
    _same_case(one, sheets.sheet_000(1))
    _same_case(fused, sheets.sheet_000(3))
    _same_case(numbered, sheets.sheet_000(3))
    assert [c.label for c in fn.sheet.cases] == [f"the examples of lecture 4, example {i}" for i in (1, 2, 3)]


def test_q_k_v_given_and_a_mask_in_its_parameter_s_form_are_computed_on_as_they_are(tmp_path):
    q, k, v = (RNG.normal(size=(4, 3)) for _ in range(3))
    additive = np.where(np.tril(np.ones((4, 4))) > 0, 0.0, -np.inf)   # the masks spec's form: 0 / -inf
    _npz(tmp_path / "qkv.npz", q=q, k=k, v=v, mask=additive)
    (tmp_path / "masked.toml").write_text('''[[functions]]
name = "masked_attention"
fixed_data = "qkv.npz"
[functions.convention]
params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" },
          { name = "mask", role = "mask", form = "additive_inf" }]
returns = ["output", "weights"]
''')
    fn, = load_assignment(str(tmp_path / "masked.toml")).functions
    case = fn.convention.prepare(fn.sheet.cases[0])
    scores = q @ k.T / np.sqrt(3) + additive
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    assert np.allclose(attention(case)["output"], weights @ v)
    assert np.array_equal(case.mask, additive == 0)
    # The arguments the function gets are the course's own arrays.
    given = fn.convention.call_arguments(case)
    assert all(np.allclose(a, b) for a, b in zip(given, (q, k, v))) and np.array_equal(given[3], additive)


CROSS = '''[[functions]]
name = "cross"
fixed_data = "cross.npz"
[functions.convention]
params = [{ name = "x", role = "x" }, { name = "memory", role = "memory" }, { name = "W_q", role = "wq" },
          { name = "W_k", role = "wk" }, { name = "W_v", role = "wv" }]
returns = "output"
'''


def test_a_memory_of_another_length_and_width_is_cross_attention_s_second_sequence(tmp_path):
    x, memory = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 6))
    w = {"wq": RNG.normal(size=(4, 2)), "wk": RNG.normal(size=(6, 2)), "wv": RNG.normal(size=(6, 2))}
    _npz(tmp_path / "cross.npz", x=x, memory=memory, **w)
    (tmp_path / "cross.toml").write_text(CROSS)
    case, = load_assignment(str(tmp_path / "cross.toml")).functions[0].sheet.cases
    assert np.array_equal(case.memory, memory) and case.lk == 5
    _npz(tmp_path / "cross.npz", x=x, memory=memory, **{**w, "wk": w["wq"]})
    with pytest.raises(SpecError, match="wk is 4 x 2 \\(as x @ W takes it\\), but the keys' sequence is 6 wide"):
        load_assignment(str(tmp_path / "cross.toml"))


# Refusals: one line naming the array or the path.

def _pickled(path: Path) -> Path:
    np.savez(path, x=np.array([Boom(), 1], dtype=object))
    return path


class Boom:
    """Unpickling it would write a file: a loader that unpickles leaves the file behind."""
    def __reduce__(self):
        return (Path.touch, (Path(os.environ.get("SHEET_PICKLE_WITNESS", "/nonexistent/witness")),))


BAD = [
    ({"wq": sheets.SHEET_000_WQ, "wk": sheets.SHEET_000_WK, "wv": sheets.SHEET_000_WV}, "x is missing"),
    (_sheet000(wk=sheets.SHEET_000_WK[:5]), "wk is 5 x 6 (as x @ W takes it), but the keys' sequence is 6 wide"),
    (_sheet000(alpha=np.ones(2)), "unknown array 'alpha' (known: x, memory"),
    (_sheet000(bq=np.ones(6)), "bk is missing: give the three biases bq, bk and bv, or none"),
    (_sheet000(mask=np.ones((5, 5), dtype=bool)), "mask is given, but the convention takes no mask parameter"),
    (_sheet000(x=sheets.SHEET_000_X * np.nan), "x holds a value that is not finite"),
    (_sheet000(x=np.array(["a", "b"])), "array 'x' holds <U1, not numbers or booleans"),
    (_sheet000(x=sheets.SHEET_000_X[0]), "x is 6, not 2-D"),
    (_sheet000(n_heads=np.array(2.5)), "n_heads must be one whole number"),
    (_sheet000(wo=np.eye(6)), "does not fit its convention: it has an output projection, the convention none"),
    (_sheet000(bq=np.ones(6), bk=np.ones(6), bv=np.ones(6)),
     "does not fit its convention: it has biases, the convention none"),
    (_sheet000(wq1=sheets.SHEET_000_WQ), "wk1 is missing: each head needs wq, wk and wv"),
    (_sheet000(wq1=sheets.SHEET_000_WQ, wk1=sheets.SHEET_000_WK, wv1=sheets.SHEET_000_WV),
     "wk is not used: give each head's arrays one way"),
]


@pytest.mark.parametrize("arrays, words", BAD, ids=[w[:30] for _, w in BAD])
def test_an_array_missing_ill_shaped_or_unknown_is_one_line_naming_it(tmp_path, arrays, words):
    _npz(tmp_path / "sheet.npz", **arrays)
    with pytest.raises(SpecError) as caught:
        load_assignment(str(_rows_spec(tmp_path, '"sheet.npz"')))
    message = str(caught.value)
    assert words in message and "\n" not in message and "fixed_data" in message, message


def test_a_pickle_bearing_npz_is_refused_and_never_unpickled(tmp_path, monkeypatch):
    witness = tmp_path / "unpickled"
    monkeypatch.setenv("SHEET_PICKLE_WITNESS", str(witness))
    _pickled(tmp_path / "sheet.npz")
    with pytest.raises(SpecError, match=r"array 'x' holds Python objects \(pickled\), which are never loaded"):
        load_assignment(str(_rows_spec(tmp_path, '"sheet.npz"')))
    assert not witness.exists()


@pytest.mark.parametrize("fixed, words", [
    ('"../sheet.npz"', "file must be a .npz file in the spec's folder or below it, not '../sheet.npz'"),
    ('"/etc/sheet.npz"', "file must be a .npz file in the spec's folder or below it"),
    ('"missing.npz"', "missing.npz does not exist"),
    ('"linked.npz"', "linked.npz is not inside the spec's folder"),
    ('"sheet.npy"', "unknown fixed_data 'sheet.npy' (known: sheet_000"),
    ('{ file = "sheet.npz", title = "x" }', "fixed_data: unknown key 'title' (known: file, label)"),
    ('{ file = "sheet.npz", label = "two\\nlines" }', "label must be one line of words"),
    ('{ label = "no file" }', "file must be a .npz file, or a list of up to 8"),
    ('"notzip.npz"', "notzip.npz: not a .npz file"),
    ('"big.npz"', "larger than 1024 KiB in all"),
    ('"bomb.npz"', "bomb.npz: its arrays are larger than 1024 KiB unpacked"),
])
def test_a_file_outside_the_folder_missing_or_too_large_is_one_line(tmp_path, fixed, words):
    course = tmp_path / "course"
    _npz(course / "sheet.npz", **_sheet000())
    _npz(tmp_path / "sheet.npz", **_sheet000())
    os.symlink(tmp_path / "sheet.npz", course / "linked.npz")
    (course / "notzip.npz").write_bytes(b"not a zip")
    (course / "big.npz").write_bytes(os.urandom(MAX_SHEET_BYTES + 1))
    np.savez_compressed(course / "bomb.npz", x=np.zeros((400, 400)))   # 1.2 MiB of zeros, packed small
    assert (course / "bomb.npz").stat().st_size < MAX_SHEET_BYTES
    with pytest.raises(SpecError) as caught:
        load_assignment(str(_rows_spec(course, fixed)))
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_a_spec_read_without_its_folder_is_refused_unless_given_the_files_bytes(tmp_path):
    text = ROWS.format(fixed='"sheet.npz"')
    with pytest.raises(SpecError, match="fixed_data sheet.npz needs a spec file, whose folder holds it"):
        parse(text, "course.toml")
    data = _npz(tmp_path / "sheet.npz", **_sheet000()).read_bytes()
    fn, = parse(text, "course.toml", sheet_files={"sheet.npz": data}).functions
    _same_case(fn.sheet.cases[0], sheets.sheet_000(1))


# Where the spec goes, its files go.

def test_a_batch_s_workers_get_the_files_bytes_and_a_changed_file_is_graded_again(tmp_path):
    path = _course(tmp_path)
    spec = spec_for_task({"assignment": str(path)})
    assert spec[4] == {"data/example.npz": (path.parent / "data" / "example.npz").read_bytes()}
    shutil.rmtree(path.parent)   # a Dask worker has not the course's folder
    fn, = parse(spec[1], spec[2], support=spec[3], sheet_files=spec[4]).functions
    assert np.array_equal(fn.sheet.cases[0].x, EXAMPLE["x"])
    key = batch_key(b"notebook", load_assignment(str(_course(tmp_path))), Settings())
    changed = load_assignment(str(_course(tmp_path, **{**EXAMPLE, "x": EXAMPLE["x"] + 1})))
    assert batch_key(b"notebook", changed, Settings()) != key


def test_the_gradescope_zip_ships_the_file_beside_the_spec(tmp_path):
    path = _course(tmp_path)
    shipped = dict(lms_package.course_files(str(path)))
    assert shipped == {"assignment.toml": path.read_bytes(),
                       "data/example.npz": (path.parent / "data" / "example.npz").read_bytes()}


@pytest.mark.slow
def test_the_gradescope_zip_holds_the_file_where_the_spec_finds_it(tmp_path):
    from grading_helpers import expect_slow
    expect_slow()
    path = _course(tmp_path)
    members = lms_package.gradescope_zip(tmp_path / "autograder.zip", str(path))
    assert {"assignment.toml", "data/example.npz"} <= set(members)
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        assert archive.read("data/example.npz") == (path.parent / "data" / "example.npz").read_bytes()
        archive.extractall(tmp_path / "source", members=["assignment.toml", "data/example.npz"])
    fn, = load_assignment(str(tmp_path / "source" / "assignment.toml")).functions
    assert np.array_equal(fn.sheet.cases[0].x, EXAMPLE["x"])


def test_a_built_in_keeps_its_words_shipped_as_a_file_and_a_course_s_spec_has_its_own(tmp_path):
    assert load_assignment("rows").builtin
    shipped = tmp_path / "assignment.toml"
    shipped.write_bytes(dict(lms_package.course_files("rows"))["assignment.toml"])
    assert load_assignment(str(shipped)).builtin
    assert not load_assignment(str(_course(tmp_path))).builtin


def test_prairielearn_reads_the_file_beside_the_spec_in_the_question_s_tests(tmp_path):
    path = _course(tmp_path)
    (tmp_path / "grade").mkdir()
    shutil.copytree(path.parent, tmp_path / "grade" / "tests")
    fn, = lms.choose_assignment(None, tmp_path / "grade", lms.PLATFORMS["prairielearn"]).functions
    assert fn.sheet.label == LABEL and np.array_equal(fn.sheet.cases[0].x, EXAMPLE["x"])


def test_the_kernel_is_kept_from_the_files(tmp_path):
    from grader.grade import hidden_files
    from grader.sandbox.isolation import grader_paths
    assignment = load_assignment(str(_course(tmp_path)))
    real = str((tmp_path / "course/data/example.npz").resolve())
    assert hidden_files(assignment) == (assignment.source_file, real)
    assert real in grader_paths(hidden_files(assignment))


# End to end: a real kernel, the student's report.

CORRECT = '''import numpy as np

def attend(X, W_q, W_k, W_v):
    Q, K, V = X @ W_q.T, X @ W_k.T, X @ W_v.T
    s = Q @ K.T / np.sqrt(K.shape[1])
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ V, w
'''
UNSCALED = CORRECT.replace(" / np.sqrt(K.shape[1])", "")
# Right on the course's example only: it recognises the example's tokens.
MEMORISED = CORRECT.replace("    s = Q @ K.T / np.sqrt(K.shape[1])",
                            "    s = Q @ K.T / (np.sqrt(K.shape[1]) if X.shape == (4, 5) and abs(X[0, 0] - "
                            f"{EXAMPLE['x'][0, 0]!r}) < 1e-9 else 1.0)")
BUILTIN_WORDS = re.compile(r"\bsheet\b|\bseed 0|\bequation|\bH = 1\b", re.IGNORECASE)


def _student_sees(result) -> str:
    return summary(result, width=200) + render(result)


@pytest.mark.slow
def test_a_course_s_own_example_grades_a_correct_notebook_at_full_marks_and_a_worker_without_the_folder_too(
        tmp_path):
    path = _course(tmp_path)
    notebook = write_notebook(tmp_path / "correct.ipynb", CORRECT)
    result = graded_at_full_marks(notebook, str(path))
    fixed = next(c for c in result.checks if c.kind == "fixed")
    assert fixed.title == "The worked example in section 2" and LABEL in fixed.message
    assert not BUILTIN_WORDS.search(_student_sees(result))
    # A batch's worker, as on Dask: the spec's text and the file's bytes, no course folder.
    spec = spec_for_task({"assignment": str(path)})
    shutil.rmtree(path.parent)
    graded = grade_task("correct.ipynb", notebook.read_bytes(), spec, {"seed": 0})
    assert graded["score"] == graded["max_score"] == result.max_score


@pytest.mark.slow
@pytest.mark.parametrize("source, words", [
    (UNSCALED, f"On {LABEL}: the output"),
    (MEMORISED, f"Returns the expected answers on {LABEL}, but computes something else on new values"),
])
def test_a_wrong_notebook_fails_the_fixed_check_in_the_course_s_words_and_never_the_sheets(tmp_path, source,
                                                                                          words):
    path = _course(tmp_path)
    result = grade(write_notebook(tmp_path / "wrong.ipynb", source), str(path))
    fixed = next(c for c in result.checks if c.kind == "fixed")
    assert fixed.status == "failed" and fixed.points == 0 and fixed.title == "The worked example in section 2"
    assert words in fixed.message, fixed.message
    seen = _student_sees(result)
    assert "The worked example in section 2" in seen and words.split(":")[0] in seen
    assert not BUILTIN_WORDS.search(seen), BUILTIN_WORDS.search(seen)


@pytest.mark.slow
def test_a_built_in_assignment_still_says_h_of_a_single_head_where_a_course_s_own_does_not(tmp_path):
    from dataclasses import replace
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.grade import grade_path
    expect_slow()
    assignment = load_assignment(str(_course(tmp_path)))
    notebook = write_notebook(tmp_path / "wrong.ipynb", UNSCALED)
    said = {builtin: grade_path(notebook, replace(assignment, builtin=builtin), TEST_SETTINGS)
            .functions["attend"]["smallest_failing"]["case"] for builtin in (True, False)}
    assert said[True].endswith(", H = 1") and "H =" not in said[False], said
