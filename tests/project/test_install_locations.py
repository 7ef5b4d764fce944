"""The grader installed where courses install it grades the worked solution to full marks:
the kernel sees its interpreter and packages wherever they live (a venv under /tmp, whose
folder the sandbox gives the kernel a private copy of; /home; /opt; an interpreter under
/root, a folder only root may enter; the system's own prefix)."""
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from grading_helpers import SUBMISSIONS
from grader.sandbox import isolation as sandbox
from interpreters import (BASE_PYTHON, BASE_SITE_PACKAGES, build_wheel, copy_tracked, interpreter_environment,
                          make_venv, run_check, stop_fork_server)

pytestmark = pytest.mark.slow

FULL = sandbox.namespaces_available() and sandbox.unprivileged_ids() is not None
WORKED = SUBMISSIONS / "worked_solution.ipynb"
SYSTEM_PYTHON = Path("/usr/bin/python3")
# What the grader needs besides itself (pyproject.toml's dependencies).
DEPENDENCIES = ("numpy", "nbformat", "nbclient", "ipykernel", "jupyter_client", "pyzmq", "jinja2", "matplotlib")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def folder_in(parent: str):
    """A fresh folder in `parent` that every user may enter, as an installation's is."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="grader-install-", dir=parent))
    folder.chmod(0o755)
    return folder


def assert_full_marks(python: Path, tmp_path: Path, *options: str, env: dict | None = None,
                      notebook: Path = WORKED, cwd: Path | None = None) -> dict:
    code, out, err, result = run_check(python, notebook, tmp_path / "r.json", *options, env=env, cwd=cwd)
    assert code == 0, (out[-2000:], err[-2000:])
    assert result["score"] == result["max_score"] == 25, result["errors"]
    if notebook == WORKED:
        assert result["errors"] == []
    if FULL:
        assert result["isolation"]["level"] == "full", result["isolation"]
    return result


@pytest.mark.parametrize("parent", ["/tmp", "/var/tmp", "/home", "/opt"])
@pytest.mark.parametrize("start", ["fresh", "forked"])
def test_a_venv_in_each_location_grades_to_full_marks(parent, start, wheel, tmp_path):
    folder = folder_in(parent)
    python = folder / "venv" / "bin" / "python"
    try:
        python = make_venv(folder / "venv", wheel)
        result = assert_full_marks(python, tmp_path, *(["--no-fork-server"] if start == "fresh" else []))
        if FULL:
            assert result["isolation"]["kernel_start"].startswith(start)
    finally:
        if start == "forked":
            stop_fork_server(python)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("parent", ["/tmp", "/opt"])
@pytest.mark.parametrize("start", ["fresh", "forked"])
def test_a_checkout_with_its_venv_inside_grades_from_its_root(parent, start, wheel, tmp_path):
    """As the README's first command leaves a clone (`.venv` inside it), `python -m grader.cli`
    run from its root grades with the checkout's grader: the sandbox hides the checkout but
    for the way to the venv's interpreter and packages. The checkout's reference stays out of
    the kernel's reach."""
    checkout = copy_tracked(folder_in(parent) / "attention-grader")
    python = checkout / ".venv" / "bin" / "python"
    reference = checkout / "reference" / "attention.py"
    notebook = tmp_path / "reads_the_reference.ipynb"
    nb = nbformat.read(WORKED, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(f"print(open({str(reference)!r}).read()[:200])"))
    nbformat.write(nb, notebook)
    try:
        python = make_venv(checkout / ".venv", wheel)
        result = assert_full_marks(python, tmp_path, *(["--no-fork-server"] if start == "fresh" else []),
                                   notebook=notebook, cwd=checkout)
        [error] = result["errors"]
        assert error["ename"] in ("FileNotFoundError", "PermissionError"), error
        assert "def " not in json.dumps(result), "the checkout's reference reached the kernel"
        if FULL:
            assert result["isolation"]["kernel_start"].startswith(start)
    finally:
        if start == "forked":
            stop_fork_server(python)
        shutil.rmtree(checkout.parent, ignore_errors=True)


def test_the_pyenv_interpreter_under_root_grades_to_full_marks(wheel, tmp_path):
    """pyenv's interpreter itself, in /root (mode 0700), as the kernel's: the grader from the
    wheel is put first on the grader's path alone (the kernel's environment is scrubbed)."""
    if not str(BASE_PYTHON).startswith("/root/"):
        pytest.skip(f"the suite's base interpreter is {BASE_PYTHON}, not one under /root")
    if not (BASE_SITE_PACKAGES / "ipykernel").is_dir():
        pytest.skip("the suite's base interpreter holds no ipykernel of its own (the suite runs in a venv)")
    target = tmp_path / "grader-only"
    subprocess.run([str(BASE_PYTHON), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
                    "--target", str(target), str(wheel)], check=True, capture_output=True)
    env = interpreter_environment(PYTHONPATH=str(target))
    assert_full_marks(BASE_PYTHON, tmp_path, "--no-fork-server", env=env)


def test_a_venv_of_the_system_interpreter_grades_to_full_marks(wheel, tmp_path):
    """The distribution's python3 (prefix /usr), in a venv under /opt holding every dependency."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no system python3")
    folder = folder_in("/opt")
    try:
        made = subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(folder / "venv")], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"the system python3 cannot make a venv: {made.stderr.strip()[-200:]}")
        python = folder / "venv" / "bin" / "python"
        installed = subprocess.run([str(python), "-m", "pip", "install", "-q", *DEPENDENCIES, str(wheel)],
                                   capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            pytest.skip(f"the grader's dependencies could not be installed: {installed.stderr.strip()[-300:]}")
        assert_full_marks(python, tmp_path, "--no-fork-server")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
