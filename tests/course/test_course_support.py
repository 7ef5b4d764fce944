"""A course's support modules: homework written as a module of the course's own package
(`from .activation import Softmax`), graded through a spec in TOML alone with the package it
imports; the modules checked when the spec is read, read-only for the kernel, never the
student's code, and shipped with the Gradescope zip. End to end in a real kernel."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, GRADER, ROOT, grade, own_run_environment, write_notebook
from grader.student import in_notebook
from grader.lms import entrypoints as lms
from grader.lms import gradescope_zip as lms_package
from grader.errors import SpecError
from grader.batch.similarity import fingerprint
from grader.course.spec import load_assignment, parse
from grader.course.support_modules import MAX_SUPPORT_BYTES

sys.path.insert(0, str(ROOT / "tests"))
from make_support_fixtures import MISTAKES, WRONG_SOFTMAX  # noqa: E402
from grading_helpers.unprivileged import WAYS, as_a_course_machine  # noqa: E402
from grading_helpers import wait_for  # noqa: E402

HERE = FIXTURES / "support"
COURSE = HERE / "course"
SPEC = COURSE / "assignment.toml"
FUNCTIONS = '''
[[functions]]
name = "self_attention"
convention = "rows_single"
'''


def _digests(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _course(tmp_path: Path, support: str, files: dict | None = None) -> Path:
    """A spec in tmp_path/course with `support` as its [support] table, beside the fixture's package."""
    course = tmp_path / "course"
    shutil.copytree(COURSE / "support", course / "support")
    for name, text in (files or {}).items():
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        (course / name).write_text(text)
    spec = course / "assignment.toml"
    spec.write_text(f"[support]\n{support}\n{FUNCTIONS}")
    return spec


def _failed(result) -> list:
    return [(c.name, c.message) for c in result.checks if c.status not in ("passed", "info")]


def test_the_support_table_reads_the_course_package_once_with_where_each_module_goes():
    support = load_assignment(str(SPEC)).support
    assert support.package == "mytorch" and support.top_level_names() == ["mytorch"]
    assert [(f.shipped_as, f.module_path) for f in support.files] == [
        ("support/mytorch/__init__.py", "mytorch/__init__.py"),
        ("support/mytorch/activation.py", "mytorch/activation.py"),
        ("support/mytorch/utils.py", "mytorch/utils.py")]
    assert support.files[1].data == (COURSE / "support/mytorch/activation.py").read_bytes()


def test_the_package_beside_the_folder_the_grader_runs_in_is_no_installed_module(monkeypatch):
    """`python -m grader.cli check` run from the course's folder: its own `mytorch` is found there."""
    monkeypatch.chdir(COURSE / "support")
    monkeypatch.syspath_prepend("")
    assert load_assignment(str(SPEC)).support.package == "mytorch"


def test_a_list_of_files_makes_a_package_and_without_a_package_they_are_top_level_modules(tmp_path):
    listed = _course(tmp_path, 'package = "course_nn"\npath = ["support/mytorch/utils.py"]')
    support = load_assignment(str(listed)).support
    assert [f.module_path for f in support.files] == ["course_nn/__init__.py", "course_nn/utils.py"]
    flat = _course(tmp_path / "flat", 'path = ["support/mytorch/activation.py", "support/mytorch/utils.py"]')
    support = load_assignment(str(flat)).support
    assert support.package is None and support.top_level_names() == ["activation", "utils"]
    assert support.file_names() == {"activation.py", "utils.py"}


@pytest.mark.parametrize("table, files, words", [
    ('package = "mytorch"', {}, "missing path"),
    ('path = "support/mytorch"', {}, "support/mytorch/__init__.py makes a package: name it"),
    ('path = "support/nothing"', {}, "support/nothing does not exist"),
    ('path = "/etc"', {}, "relative to the spec's folder"),
    ('path = "../outside"', {"../outside/m.py": ""}, "is not inside the spec's folder"),
    ('path = "support/mytorch"\nextra = 1', {}, "unknown key 'extra'"),
    ('path = "support/mytorch"\npackage = "my-torch"', {}, "is not a Python module name"),
    ('path = "support/mytorch"\npackage = "class"', {}, "is not a Python module name"),
    ('path = "support/mytorch"\npackage = "torch"', {}, "a library the spec's policy forbids"),
    ('path = "support/mytorch"\npackage = "numpy"', {}, "would hide the module the kernel needs"),
    ('path = "support/mytorch"\npackage = "json"', {}, "would hide the module the kernel needs"),
    ('path = "support/mytorch"\npackage = "nbformat"', {}, "would hide the installed module"),
    ('path = "support/mytorch"\npackage = "mytorch"', {"support/mytorch/notes.txt": "x"},
     "support/mytorch/notes.txt is not a .py file"),
    ('path = "support/mytorch"\npackage = "mytorch"', {"support/mytorch/bad.py": "def f(:\n"},
     "support/mytorch/bad.py, line 1:"),
    ('path = "support/mytorch"\npackage = "mytorch"', {"support/mytorch/fast.py": "import scipy.special\n"},
     "support/mytorch/fast.py, line 1, imports scipy.special, which [policy] forbidden lists"),
    ('path = "support/mytorch"\npackage = "mytorch"', {"support/mytorch/big.py": "#" * (MAX_SUPPORT_BYTES + 1)},
     "too large"),
    ('path = ["support/mytorch/utils.py", "support/mytorch/utils.py"]\npackage = "m"', {}, "two files would be"),
])
def test_a_support_table_that_cannot_be_shipped_is_one_line_naming_why(tmp_path, table, files, words):
    spec = _course(tmp_path, table, files)
    with pytest.raises(SpecError) as error:
        load_assignment(str(spec))
    message = str(error.value)
    assert "\n" not in message and "[support]" in message and words in message, message


def test_links_out_of_the_spec_folder_are_refused_and_a_spec_without_a_file_has_no_support(tmp_path):
    secret = tmp_path / "staff" / "solution.py"
    secret.parent.mkdir()
    secret.write_text("SOLUTION = 1\n")
    spec = _course(tmp_path, 'path = "support/mytorch"\npackage = "mytorch"')
    os.symlink(secret, spec.parent / "support/mytorch/solution.py")
    with pytest.raises(SpecError, match="support/mytorch/solution.py is a link out of the spec's folder"):
        load_assignment(str(spec))
    os.remove(spec.parent / "support/mytorch/solution.py")
    os.symlink(secret.parent, spec.parent / "support/linked")
    spec.write_text(f'[support]\npath = "support/linked"\n{FUNCTIONS}')
    with pytest.raises(SpecError, match="support/linked is not inside the spec's folder"):
        load_assignment(str(spec))
    with pytest.raises(SpecError, match=r"\[support\] needs a spec file"):
        parse(f'[support]\npath = "x"\n{FUNCTIONS}', "text")


def test_the_course_modules_are_not_the_student_s_code_for_similarity():
    """Similarity compares the functions a submission defines; the course's are in no submission."""
    names = {"self_attention", "multi_head_attention", "split_heads", "merge_heads", "Softmax"}
    assert set(fingerprint(HERE / "worked.py", names)) == {"self_attention", "multi_head_attention"}


@pytest.mark.slow
def test_a_module_of_the_course_package_with_relative_imports_earns_full_marks():
    result = grade(HERE / "worked.py", str(SPEC))
    assert result.status == "graded" and not result.errors, result.errors
    assert not _failed(result) and result.score == result.max_score == 18
    assert result.isolation["level"] == "full", result.isolation
    # What the student's functions reach of the course's package is named, never forbidden.
    assert "mytorch.activation" in result.functions["self_attention"]["modules"]
    assert result.policy["findings"] == []


@pytest.mark.slow
def test_a_notebook_importing_the_package_by_its_name_earns_full_marks():
    result = grade(HERE / "notebook.ipynb", str(SPEC))
    assert result.status == "graded" and not result.errors, result.errors
    assert not _failed(result) and result.score == result.max_score == 18


@pytest.mark.slow
def test_each_planted_mistake_in_the_package_module_is_named():
    result = grade(HERE / "mistakes.py", str(SPEC))
    assert not result.errors, result.errors
    for function, (_, _, title) in MISTAKES.items():
        checks = [c for c in result.checks if c.function == function]
        assert any(c.lost_points for c in checks), function
        assert any(title in (c.diagnosis or "") for c in checks), (function, {c.diagnosis for c in checks})


@pytest.mark.slow
def test_a_function_the_course_defines_is_never_graded_as_the_student_s(tmp_path):
    """A submission that imports a graded function from the course's package (which defines one
    to build on) has not written it: it is not found, whatever it computes."""
    spec = _course(tmp_path, 'path = "support/mytorch"\npackage = "mytorch"',
                   {"support/mytorch/given.py": (HERE / "worked.py").read_text()})
    submission = tmp_path / "attention.py"
    submission.write_text("from .given import self_attention, multi_head_attention\n")
    result = grade(submission, str(spec))
    checks = [c for c in result.checks if c.function == "self_attention"]
    assert checks and all(c.points == 0 for c in checks)
    assert result.functions["self_attention"]["found"] is False
    assert "no function named `self_attention` is defined" in checks[0].message


@pytest.mark.slow
def test_the_notebook_folder_cannot_shadow_the_course_package():
    """Attack: before anything imports `mytorch`, the submission writes a `mytorch` of its own
    (a wrong Softmax) into its working folder, where an upload's files land and which Python
    searches first. The course's package still comes first: full marks, with the right Softmax.
    Fails on a design that only appends the course's folder to the import path."""
    result = grade(HERE / "shadow.py", str(SPEC))
    assert not result.errors, result.errors
    assert not _failed(result) and result.score == result.max_score


@pytest.mark.slow
def test_the_kernel_cannot_change_the_course_modules_for_itself_or_the_next_submission():
    """Attack: rewrite, remove, add to and move away the course's modules from inside the kernel.
    Every attempt fails (the last cell of overwrite.py raises if anything changed, which would
    be a cell error); the next submission, graded after it, still imports the course's own
    Softmax, and the course's folder is unchanged. Fails on a design that copies the modules
    into the kernel's writable folder, or shares one copy between kernels."""
    before = _digests(COURSE)
    attacker = grade(HERE / "overwrite.py", str(SPEC))
    assert not attacker.errors, attacker.errors
    assert attacker.score == attacker.max_score == 18
    victim = grade(HERE / "worked.py", str(SPEC), _fresh="after the attacker")
    assert not victim.errors and victim.score == victim.max_score
    assert _digests(COURSE) == before


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(p) for p in ("capsh", "setpriv", "unshare")),
                    reason="switching users and dropping capabilities needs root, capsh, setpriv and unshare")
@pytest.mark.parametrize("way", WAYS)
def test_without_namespaces_landlock_keeps_the_course_modules_read_only(way, outside_tmp):
    """The same attack where the kernel has no mount namespace (an LMS container, or the grader
    run by a user who cannot switch users): Landlock gives the course's copy a read-only rule,
    outside the kernel's writable folder."""
    from grader.kernel_side import landlock
    if landlock.abi() < 1:
        pytest.skip("no Landlock here")
    course, out = outside_tmp / "course", outside_tmp / "out"
    shutil.copytree(COURSE, course)
    shutil.copy(HERE / "overwrite.py", outside_tmp / "overwrite.py")
    command = [*WAYS[way], *GRADER, "check", str(outside_tmp / "overwrite.py"),
               "--assignment", str(course / "assignment.toml"), "--json", str(out / "result.json")]
    out.mkdir()
    out.chmod(0o777)
    done = subprocess.run(as_a_course_machine(command), capture_output=True, text=True, timeout=600,
                          env=own_run_environment(), cwd=str(outside_tmp))
    result = json.loads((out / "result.json").read_text())
    assert "landlock" in result["isolation"]["active"] and "pid namespace" in result["isolation"]["missing"]
    assert result["errors"] == [] and result["score"] == result["max_score"] == 18, (done.stderr[-2000:],
                                                                                      result["errors"])
    assert _digests(course) == _digests(COURSE)


def test_the_gradescope_zip_ships_the_spec_with_its_support_modules():
    shipped = dict(lms_package.course_files(str(SPEC)))
    assert shipped == {"assignment.toml": SPEC.read_bytes(),
                       **{f"support/mytorch/{n}": (COURSE / "support/mytorch" / n).read_bytes()
                          for n in ("__init__.py", "activation.py", "utils.py")}}
    assert lms_package.course_files("rows")[0][0] == "assignment.toml" and lms_package.course_files(None) == []


@pytest.mark.slow
def test_an_upload_s_copy_of_the_course_package_is_neither_the_submission_nor_imported(tmp_path):
    """Gradescope, as its autograder zip lays out the course: the student uploads their whole
    package, a course module changed to a wrong Softmax among it. The one file of their own is
    graded, with the course's own modules."""
    root = tmp_path / "autograder"
    for name, data in lms_package.course_files(str(SPEC)):
        (root / "source" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "source" / name).write_bytes(data)
    upload = root / "submission" / "mytorch"
    upload.mkdir(parents=True)
    shutil.copy(HERE / "worked.py", upload / "attention.py")
    (upload / "activation.py").write_text(WRONG_SOFTMAX)
    shutil.copy(COURSE / "support/mytorch/utils.py", upload / "utils.py")
    (upload / "__init__.py").write_text("")
    assert lms.find_submission(root / "submission", {"activation.py", "utils.py", "__init__.py"}) == \
        upload / "attention.py"
    done = subprocess.run([*GRADER, "lms", "gradescope", "--root", str(root)], capture_output=True,
                          text=True, timeout=300, env=own_run_environment())
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 18, results["output"]


@pytest.mark.slow
def test_a_student_checks_the_package_notebook_from_inside_it_against_the_course_spec(monkeypatch):
    """%grade --assignment course/assignment.toml, named from the notebook's folder."""
    monkeypatch.chdir(HERE)
    result, summary, _ = in_notebook.run_check(HERE / "notebook.ipynb", "course/assignment.toml")
    assert result["score"] == result["max_score"] == 18 and result["errors"] == [], summary


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_killed_grader_leaves_no_copy_of_the_course_modules(tmp_path):
    """The kernel's copy goes with the grader, however it dies: its watchdog removes it."""
    submission = tmp_path / "attention.py"
    submission.write_text((HERE / "worked.py").read_text() + "\n# %%\nimport time\ntime.sleep(120)\n")
    grader = subprocess.Popen([*GRADER, "check", str(submission), "--assignment", str(SPEC),
                               "--cell-timeout", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=own_run_environment())
    copies = lambda: list(Path(tempfile.gettempdir()).glob(f"grader-kernel-{grader.pid}-course-*"))  # noqa: E731
    try:
        wait_for(lambda: any((c / "mytorch" / "utils.py").exists() for c in copies()), 60, "the course's copy")
    finally:
        grader.kill()
        grader.wait()
    wait_for(lambda: not copies(), 30, "the course's copy removed")


@pytest.mark.slow
def test_a_class_is_graded_with_the_course_modules_and_graded_again_when_one_changes(tmp_path):
    """`grader grade`: each worker gets the modules with the spec's text (it may not have the
    course's folder), and a stored result is stale once a module changes, though the spec's
    text has not."""
    course, batch, out = tmp_path / "course", tmp_path / "batch", tmp_path / "out"
    shutil.copytree(COURSE, course)
    batch.mkdir()
    for name in ("worked.py", "mistakes.py", "overwrite.py"):
        shutil.copy(HERE / name, batch / name)
    command = [*GRADER, "grade", str(batch), "-o", str(out), "--assignment",
               str(course / "assignment.toml"), "--workers", "2"]

    def scores():
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=own_run_environment())
        assert done.returncode == 0, done.stderr[-2000:]
        rows = (out / "grades.csv").read_text().splitlines()
        header = rows[0].split(",")
        return {r.split(",")[0]: r.split(",")[header.index("score")] for r in rows[1:]}, done.stdout
    graded, _ = scores()
    assert graded == {"worked": "18", "mistakes": "10", "overwrite": "18"}
    (course / "support/mytorch/activation.py").write_text(WRONG_SOFTMAX)
    graded, said = scores()
    assert "0 unchanged" in said, said
    assert graded["worked"] != "18" and graded["overwrite"] != "18"


@pytest.mark.slow
def test_a_student_folder_holding_their_whole_package_is_one_submission(tmp_path):
    """`grader grade` of a class whose folders hold each student's package: the copies of the
    course's modules beside their module (one changed to a wrong Softmax) are neither graded
    as submissions, nor imported."""
    package = tmp_path / "batch" / "alice" / "mytorch"
    package.mkdir(parents=True)
    shutil.copy(HERE / "worked.py", package / "attention.py")
    shutil.copy(COURSE / "support/mytorch/utils.py", package / "utils.py")
    (package / "activation.py").write_text(WRONG_SOFTMAX)
    (package / "__init__.py").write_text("")
    out = tmp_path / "out"
    done = subprocess.run([*GRADER, "grade", str(tmp_path / "batch"), "-o", str(out), "--assignment",
                           str(SPEC)], capture_output=True, text=True, timeout=300, env=own_run_environment())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 graded" in done.stdout, done.stdout
    rows = (out / "grades.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("alice,") and ",18,18" in rows[1], rows


# A course's own layers (its support package), written for this test from the usual handout
# description: Linear(in, out) keeps W (out x in) and b, applied as A @ W.T + b, and
# Softmax(dim) normalises along dim. The student's MultiHeadAttention builds on them, takes its
# weights through init_weights and attends from query to key and value.
LAYERS = '''import numpy as np


class Linear:
    def __init__(self, in_features, out_features):
        self.W = np.zeros((out_features, in_features))
        self.b = np.zeros(out_features)

    def init_weights(self, W, b):
        self.W, self.b = W, b

    def forward(self, A):
        return A @ self.W.T + self.b


class Softmax:
    def __init__(self, dim=-1):
        self.dim = dim

    def forward(self, Z):
        e = np.exp(Z - Z.max(axis=self.dim, keepdims=True))
        return e / e.sum(axis=self.dim, keepdims=True)
'''
LAYERED_ATTENTION = '''class MultiHeadAttention:
    def __init__(self, embed_dim, num_heads):
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.q_proj, self.k_proj = Linear(embed_dim, embed_dim), Linear(embed_dim, embed_dim)
        self.v_proj, self.out_proj = Linear(embed_dim, embed_dim), Linear(embed_dim, embed_dim)
        self.softmax = Softmax(dim=-1)

    def init_weights(self, Wq, bq, Wk, bk, Wv, bv, Wo, bo):
        for layer, W, b in ((self.q_proj, Wq, bq), (self.k_proj, Wk, bk), (self.v_proj, Wv, bv),
                            (self.out_proj, Wo, bo)):
            layer.init_weights(W, b)

    def forward(self, query, key, value):
        q, k, v = self.q_proj.forward(query), self.k_proj.forward(key), self.v_proj.forward(value)
        d = self.embed_dim // self.num_heads
        heads = []
        for h in range(self.num_heads):
            part = slice(h * d, (h + 1) * d)
            w = self.softmax.forward(q[..., part] @ np.swapaxes(k[..., part], -1, -2) / np.sqrt(d))
            heads.append(w @ v[..., part])
        return self.out_proj.forward(np.concatenate(heads, axis=-1))'''


@pytest.mark.slow
def test_a_class_built_from_the_course_s_own_layers_is_inferred_graded_and_its_mistake_named(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.grade import grade_path
    expect_slow()
    (tmp_path / "mytorch").mkdir()
    (tmp_path / "mytorch" / "__init__.py").write_text("")
    (tmp_path / "mytorch" / "nn.py").write_text(LAYERS)

    def notebook(name: str, source: str) -> Path:
        return write_notebook(tmp_path / name, "import numpy as np\nfrom mytorch.nn import Linear, Softmax", source,
                              title="Attention from the course's layers")
    spec = tmp_path / "course.toml"
    inferred = infer(notebook("solution.ipynb", LAYERED_ATTENTION), spec, TEST_SETTINGS,
                     support=tmp_path / "mytorch")
    assert inferred.score[0] == inferred.score[1] > 0, inferred.left_out
    table = inferred.functions["MultiHeadAttention"].table
    assert table["class"]["init"]["method"] == "init_weights"
    assert [p["role"] for p in table["params"]] == ["x", "key_tokens", "value_tokens"]
    spec.write_text(inferred.text)
    mistaken = LAYERED_ATTENTION.replace("Softmax(dim=-1)", "Softmax(dim=-2)")
    wrong_axis = grade_path(notebook("wrong_axis.ipynb", mistaken), load_assignment(str(spec)), TEST_SETTINGS)
    assert wrong_axis.score < wrong_axis.max_score
    assert any(c.diagnosis and "softmax over the wrong axis" in c.diagnosis for c in wrong_axis.checks), \
        [(c.name, c.diagnosis) for c in wrong_axis.checks]
