"""`grader grade` on a mixed LMS export: zips, naming, duplicates, resuming, the summary."""
import csv
import io
import stat
import zipfile
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, SUBMISSIONS, run_grader, sandbox_processes
from grader.intake.discover import collect, student_of

pytestmark = pytest.mark.slow

FAST = ["--cell-timeout", "4", "--call-timeout", "2", "--workers", "2"]


def test_student_ids_from_lms_export_names():
    assert student_of(Path("doejane_12345_67890_attention.ipynb")) == "12345"
    assert student_of(Path("doejane_LATE_12345_67890_attention.ipynb")) == "12345"
    assert student_of(Path("Jane Doe_4242_assignsubmission_file_/hw.ipynb")) == "4242"
    assert student_of(Path("export/submission_987654/hw.ipynb")) == "987654"
    assert student_of(Path("my_notebook.ipynb")) == "my_notebook"


def _zip(path: Path, members: dict, links=()):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")


def test_zip_extraction_is_safe(tmp_path):
    archive = tmp_path / "export.zip"
    good = (SUBMISSIONS / "worked_solution.ipynb").read_bytes()
    _zip(archive, {"../escape.ipynb": good, "/abs/escape.py": "x = 1", "ok/doejane_1_2_hw.ipynb": good,
                   "notes.txt": "ignored"}, links=["ok/link.ipynb"])
    submissions, duplicates = collect([archive], tmp_path / "unpacked")
    # Its entries carry no LMS's naming, so the archive is one student's, named after it.
    assert [s.student for s in submissions] == ["export"]
    assert not (tmp_path / "escape.ipynb").exists()
    assert all((tmp_path / "unpacked") in s.path.parents for s in submissions)
    assert duplicates == []


def test_batch_of_an_lms_export(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    good = (SUBMISSIONS / "worked_solution.ipynb").read_bytes()
    (export / "doejane_111_1_hw.ipynb").write_bytes(good)
    (export / "doejane_111_2_hw_resubmitted.ipynb").write_bytes((SUBMISSIONS / "mistake_no_scaling.ipynb").read_bytes())
    moodle = export / "Ann Lee_222_assignsubmission_file_"
    moodle.mkdir()
    (moodle / "attention.ipynb").write_bytes((FIXTURES / "not_json.ipynb").read_bytes())
    _zip(tmp_path / "more.zip", {"submission_333/hw.ipynb": (FIXTURES / "correct_einsum_batched.ipynb").read_bytes()})
    out = tmp_path / "out"

    code, stdout, stderr, pid = run_grader(["grade", export, tmp_path / "more.zip", "-o", out, *FAST])
    assert code == 0, stderr
    assert "duplicate student id 111" in stderr
    rows = list(csv.DictReader(io.StringIO((out / "grades.csv").read_text())))
    assert sorted(r["student"] for r in rows) == ["111", "222", "333"]   # one row per student
    by_file = {r["submission"]: r for r in rows}
    # Canvas's later submission (id 2) counts, whatever it scores; the note says so.
    assert by_file["doejane_111_2_hw_resubmitted.ipynb"]["score"] == "12"
    assert "latest of 2 files (by Canvas attachment id)" in by_file["doejane_111_2_hw_resubmitted.ipynb"]["duplicates"]
    assert "doejane_111_1_hw.ipynb" in by_file["doejane_111_2_hw_resubmitted.ipynb"]["duplicates"]
    assert by_file["attention.ipynb"]["status"] == "error" and by_file["attention.ipynb"]["name"] == "Ann Lee"
    assert by_file["hw.ipynb"]["score"] == by_file["hw.ipynb"]["max_score"]
    summary = (out / "summary.html").read_text()
    assert "<svg" in summary and "1</b> with several files" in summary and "scores not scaled" in summary
    assert len(list(out.glob("111-*/report.html"))) == 2 and len(list(out.glob("111-*/result.json"))) == 2
    assert sandbox_processes(grader_pid=pid) == []

    code, stdout, _, _ = run_grader(["grade", export, tmp_path / "more.zip", "-o", out, *FAST])
    assert code == 0 and "1 graded, 3 unchanged" in stdout  # the error result is graded again
    code, stdout, _, _ = run_grader(["grade", export, "-o", out, "--force", *FAST])
    assert code == 0 and "3 graded" in stdout
    # Three files of two students: a row each.
    assert len(list(csv.DictReader(io.StringIO((out / "grades.csv").read_text())))) == 2


def test_unusable_batch_arguments(tmp_path):
    code, _, stderr, _ = run_grader(["grade", tmp_path / "nothing-here", "-o", tmp_path / "out"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "no such file or folder" in stderr


def test_similarity_sees_through_renaming_and_comments(tmp_path):
    from grader.intake.notebook import notebook_from_python
    from grader.batch.similarity import fingerprint, similar_pairs
    import nbformat
    original = ("import numpy as np\n# %%\ndef self_attention(X, Wq, Wk, Wv):\n    Q, K, V = X @ Wq, X @ Wk, X @ Wv\n"
                "    s = Q @ K.T / np.sqrt(K.shape[1])\n    w = np.exp(s - s.max(1, keepdims=True))\n"
                "    w = w / w.sum(1, keepdims=True)\n    return w @ V, w\n")
    renamed = ("import numpy as np\n# %%\ndef self_attention(inputs, a, b, c):\n    '''My own work.'''\n"
               "    # project\n    q, k, v = inputs @ a, inputs @ b, inputs @ c\n"
               "    scores = q @ k.T / np.sqrt(k.shape[1])\n\n    e = np.exp(scores - scores.max(1, keepdims=True))\n"
               "    e = e / e.sum(1, keepdims=True)\n    return e @ v, e\n")
    different = ("import numpy as np\n# %%\ndef self_attention(X, Wq, Wk, Wv):\n"
                 "    return np.einsum('qk,kv->qv', np.ones((len(X), len(X))) / len(X), X @ Wv), None\n")
    paths = {}
    for name, source in [("a", original), ("b", renamed), ("c", different)]:
        paths[name] = tmp_path / f"{name}.ipynb"
        nbformat.write(notebook_from_python(source), paths[name])
    prints = [(n, fingerprint(p, {"self_attention"})) for n, p in paths.items()]
    pairs = similar_pairs(prints)
    assert pairs == [{"a": ["a", "b"], "b": [], "similarity": 1.0, "shared": ["self_attention"]}]


def test_similarity_compares_each_distinct_submission_once_and_names_each_group_once():
    from grader.batch.similarity import similar_pairs
    base = "def self_attention(a, b, c, d):\n    return softmax(a @ b @ (a @ c).T) @ (a @ d)\n"
    near = base.replace("softmax", "soft_max")
    items = [(f"same{i}", base) for i in range(3)] + [("near", near), ("blank", ""), ("other", "x = 1\n" * 40)]
    groups = similar_pairs(items)
    assert groups[0] == {"a": ["same0", "same1", "same2"], "b": [], "similarity": 1.0, "shared": []}
    assert [(g["a"], g["b"]) for g in groups[1:]] == [(["same0", "same1", "same2"], ["near"])]
    assert 0.9 <= groups[1]["similarity"] < 1.0
