"""Checking from inside a notebook: the notebook file is found the way each front end tells
it, the saved file is graded in a separate process, and the report is shown in a frame."""
import os
import shutil

import pytest

from grading_helpers import SUBMISSIONS, expect_slow
from grader.student.in_notebook import NOT_FOUND, CheckError, Report, notebook_path


def test_the_notebook_is_the_one_named_else_the_one_the_front_end_names(tmp_path):
    for name in ("hw.ipynb", "other.ipynb"):
        (tmp_path / name).write_text("{}")
    assert notebook_path("other.ipynb", {}, {}, tmp_path) == tmp_path / "other.ipynb"
    vscode = {"__vsc_ipynb_file__": str(tmp_path / "hw.ipynb")}
    assert notebook_path(None, vscode, {}, tmp_path) == tmp_path / "hw.ipynb"
    # Jupyter Server names it relative to its own root, which need not be the kernel's folder.
    assert notebook_path(None, {}, {"JPY_SESSION_NAME": "course/week3/hw.ipynb"}, tmp_path) == tmp_path / "hw.ipynb"
    assert notebook_path(None, {"__session__": str(tmp_path / "other.ipynb")}, {}, tmp_path) == \
        tmp_path / "other.ipynb"
    with pytest.raises(CheckError, match="cannot tell which notebook"):
        notebook_path(None, {}, {}, tmp_path)   # two notebooks and no word from the front end
    (tmp_path / "other.ipynb").unlink()
    assert notebook_path(None, {}, {}, tmp_path) == tmp_path / "hw.ipynb"   # the only one
    with pytest.raises(CheckError, match="no such file"):
        notebook_path("missing.ipynb", {}, {}, tmp_path)
    assert "grader.check(" in NOT_FOUND


def test_check_as_a_cells_last_line_echoes_one_line_under_the_report(tmp_path, monkeypatch):
    """`import grader; grader.check()` as a cell's last line: the report is shown, and the value
    IPython echoes under it is one line, not the whole result; the value is still the result."""
    from IPython.core.formatters import PlainTextFormatter
    from grader.student import in_notebook
    (tmp_path / "hw.ipynb").write_text("{}")
    whole = {"submission": "hw.ipynb", "score": 6.0, "max_score": 25, "status": "graded",
             "checks": [{"name": f"f.check{i}", "message": "x" * 200} for i in range(200)]}
    monkeypatch.setattr(in_notebook, "run_check", lambda path, assignment: (whole, "summary", "<p>page</p>"))
    echoed = in_notebook.check(tmp_path / "hw.ipynb", show=False)
    assert echoed == whole and echoed["score"] == 6.0
    for shown in (repr(echoed), PlainTextFormatter()(echoed)):
        assert shown == "<grader result of hw.ipynb: 6 / 25 points, graded; the report is shown above, " \
                        "the whole result is this dict>"


def test_the_report_is_framed_so_its_page_cannot_reach_the_notebook():
    page = '<html><body><p class="x">"quoted" & <b>bold</b></p><script>alert(1)</script></body></html>'
    bundle = Report({}, "summary text", page, "Graded hw.ipynb")._repr_mimebundle_()
    frame = bundle["text/html"]
    assert '<iframe sandbox=""' in frame and "<script>" not in frame and "&quot;quoted&quot;" in frame
    assert bundle["text/plain"].endswith("summary text")


def run_in_kernel(folder, code: str, env: dict | None = None) -> tuple[list, str]:
    """Run `code` in a real ipykernel started in `folder`; (display data, stderr text)."""
    import jupyter_client
    expect_slow()
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3", cwd=str(folder),
                                                     env={**os.environ, **(env or {})})
    try:
        msg_id = kc.execute(code)
        shown, errors = [], []
        while True:
            msg = kc.get_iopub_msg(timeout=300)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                break
            if kind in ("display_data", "execute_result"):
                shown.append(content["data"])
            elif kind == "stream" and content["name"] == "stderr":
                errors.append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))
        return shown, "".join(errors)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_grade_magic_grades_the_saved_file_not_the_kernels_state(tmp_path):
    shutil.copy(SUBMISSIONS / "mistake_softmax_axis.ipynb", tmp_path / "hw.ipynb")
    # The kernel's own state says nothing: a correct-looking function defined only in the
    # kernel (never saved) changes nothing, since the saved file is what is graded.
    code = ("import numpy as np\n"
            "def self_attention(X, Wq, Wk, Wv):\n    return None\n"
            "%load_ext grader\n%grade\n")
    shown, errors = run_in_kernel(tmp_path, code, {"JPY_SESSION_NAME": "somewhere/else/hw.ipynb"})
    assert errors == ""
    assert len(shown) == 1
    assert "10 / 25" in shown[0]["text/html"] and "<iframe" in shown[0]["text/html"]
    assert "Graded hw.ipynb as last saved" in shown[0]["text/plain"]
    assert "Smallest failing case" in shown[0]["text/plain"]


@pytest.mark.slow
def test_check_returns_the_result_and_says_in_one_line_when_it_cannot_run(tmp_path):
    shutil.copy(SUBMISSIONS / "worked_solution.ipynb", tmp_path / "mine.ipynb")
    (tmp_path / "second.ipynb").write_text("{}")
    code = ("import grader\n"
            "r = grader.check('mine.ipynb', show=False)\n"
            "print(r['score'], r['max_score'], file=__import__('sys').stderr)\n"
            "assert grader.check() is None\n")
    shown, errors = run_in_kernel(tmp_path, code)
    assert shown == []
    lines = errors.strip().splitlines()
    assert [float(v) for v in lines[0].split()] == [25, 25]
    assert lines[1].startswith("grader: cannot tell which notebook") and len(lines) == 2


@pytest.mark.slow
def test_grade_magic_is_not_hidden_by_a_grader_py_in_the_notebooks_folder(tmp_path):
    """A course's helper or a %%writefile cell may leave a grader.py beside the notebook: the
    check still runs the installed grader, never that file."""
    shutil.copy(SUBMISSIONS / "mistake_softmax_axis.ipynb", tmp_path / "hw.ipynb")
    code = ("%load_ext grader\n"
            "open('grader.py', 'w').write('import sys\\nsys.exit(\"the folder\\'s own grader.py ran\")\\n')\n"
            "%grade hw.ipynb\n")
    shown, errors = run_in_kernel(tmp_path, code)
    assert errors == ""
    assert len(shown) == 1 and "10 / 25" in shown[0]["text/plain"]
    assert (tmp_path / "grader.py").exists()


@pytest.mark.slow
def test_a_folder_whose_grader_py_hides_the_package_still_checks_with_attention_grader(tmp_path):
    """With a grader.py beside the notebook, `import grader` is that file (the kernel's folder
    comes first); `%load_ext attention_grader` still adds %grade, and the notebook's own
    `import grader` stays its file."""
    shutil.copy(SUBMISSIONS / "mistake_softmax_axis.ipynb", tmp_path / "hw.ipynb")
    (tmp_path / "grader.py").write_text("COURSE_HELPER = 'the folder\\'s own grader.py'\n")
    code = ("%load_ext attention_grader\n%grade\n"
            "import grader, attention_grader\n"
            "grader.COURSE_HELPER, attention_grader.check(show=False)['score']\n")
    shown, errors = run_in_kernel(tmp_path, code)
    assert errors == ""
    assert len(shown) == 2 and "10 / 25" in shown[0]["text/plain"]
    assert shown[1]["text/plain"] == '("the folder\'s own grader.py", 10.0)'

