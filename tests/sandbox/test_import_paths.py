"""Every folder the kernel could import from is searched for the forbidden libraries and for
copies of the grader, not only the grader's own search path: the base interpreter's
site-packages of a venv made without them (which the kernel sees, and can put on sys.path
itself), a second copy of the reference under any name, and a forbidden library installed in
editable mode, which only setuptools' finder names. Each attack would score 25 without it."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from grading_helpers import FIXTURES, ROOT
from grader.sandbox import isolation as sandbox
from interpreters import (OWN_SITE_PACKAGES, build_wheel, copy_package, make_venv_without_base, off_path_folder,
                          run_check, site_packages_of, stop_fork_server)

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

FAST = ["--cell-timeout", "10", "--call-timeout", "3", "--assignment", "rows"]
STUBBED_LIBRARY = "scipy.special is not available: this assignment forbids it"
STUBBED_GRADER = "the grader is not available to submissions"
# As tests/fixtures/attacks/computed_import.ipynb and patched_harness.ipynb together: neither
# the static scan nor the kernel's report sees the import, so only the stub can stop it.
HIDDEN_IMPORT = """
import importlib, sys
{before}
softmax = importlib.import_module("sci" + "py." + "spe" + "cial").softmax
for name in [n for n in sys.modules if n.split(".")[0] == "sci" + "py"]:
    del sys.modules[name]
_harness = next(m for n, m in sys.modules.items() if "grader" in n and hasattr(m, "describe"))
_describe = _harness.describe
_harness.describe = lambda functions, watched: _describe(functions, [])
_harness._references = lambda value, seen: (dict(), set())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not (sandbox.namespaces_available() and sandbox.unprivileged_ids()):
        pytest.skip("namespaces or an unprivileged user are not available here")
    if not (OWN_SITE_PACKAGES / "scipy" / "special").is_dir():
        pytest.skip("the suite's interpreter has no scipy")
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def venv(wheel):
    folder = Path(tempfile.mkdtemp(prefix="grader-venv-"))
    folder.chmod(0o755)
    python = make_venv_without_base(folder / "venv", wheel)
    yield python
    stop_fork_server(python)
    shutil.rmtree(folder, ignore_errors=True)


def attack(tmp_path: Path, softmax_from: str) -> Path:
    """The functions of tests/fixtures/attacks/plain_import.ipynb with `softmax` taken from elsewhere."""
    nb = nbformat.read(FIXTURES / "attacks" / "plain_import.ipynb", as_version=4)
    nb.cells[1].source = softmax_from
    path = tmp_path / "attack.ipynb"
    nbformat.write(nb, path)
    return path


def assert_stopped(python: Path, notebook: Path, tmp_path: Path, message: str) -> None:
    code, out, err, result = run_check(python, notebook, tmp_path / "r.json", *FAST)
    assert code == 1, (out[-2000:], err[-2000:])
    assert result["policy"]["level"] == "full"
    assert result["score"] == 0, (result["errors"], result["policy"])
    assert any(message in e["evalue"] for e in result["errors"]), result["errors"]


def test_the_base_interpreters_scipy_is_stubbed_for_a_venv_made_without_it(venv, tmp_path):
    """The venv does not search the base's site-packages (or, where the suite runs in a venv,
    its own standard library folder, given a scipy), but its kernel sees them."""
    off_path = off_path_folder(venv)
    if not (off_path / "scipy").exists():
        copy_package(OWN_SITE_PACKAGES / "scipy", off_path / "scipy")
    notebook = attack(tmp_path, HIDDEN_IMPORT.format(before=f"sys.path.append({str(off_path)!r})"))
    assert_stopped(venv, notebook, tmp_path, STUBBED_LIBRARY)


@pytest.mark.parametrize("copy", ["reference", "old_grader/reference"])
def test_a_second_copy_of_the_reference_is_stubbed(venv, copy, tmp_path):
    """As an unpacked sdist leaves it (a top-level `reference`), or inside a package of another name."""
    target = site_packages_of(venv) / copy
    shutil.copytree(ROOT / "reference", target)
    if copy.startswith("old_grader/"):
        (target.parent / "__init__.py").write_text("")
    module = copy.replace("/", ".") + ".attention"
    notebook = attack(tmp_path, f"from {module} import softmax_rows\n"
                                "softmax = lambda scores, axis=1: softmax_rows(scores)")
    assert_stopped(venv, notebook, tmp_path, STUBBED_GRADER)


def test_a_forbidden_library_installed_in_editable_mode_is_stubbed(venv, tmp_path):
    """`pip install -e` of a project holding `scipy/special`: setuptools' editable finder, not
    sys.path, says where it is, in a folder the kernel sees (inside the venv)."""
    project = venv.parent.parent / "src" / "myscipy"
    (project / "scipy" / "special").mkdir(parents=True)
    (project / "scipy" / "__init__.py").write_text("")
    (project / "scipy" / "special" / "__init__.py").write_text(
        "import numpy as np\n\ndef softmax(x, axis=None):\n"
        "    e = np.exp(x - np.max(x, axis=axis, keepdims=True))\n"
        "    return e / e.sum(axis=axis, keepdims=True)\n")
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=68"]\n'
                                            'build-backend = "setuptools.build_meta"\n'
                                            '[project]\nname = "myscipy"\nversion = "1.0"\n'
                                            '[tool.setuptools]\npackages = ["scipy", "scipy.special"]\n')
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv), "install", "-q", "--no-deps", "-e",
                    str(project)], check=True, capture_output=True)
    finders = list(site_packages_of(venv).glob("__editable__*finder.py"))
    assert finders, "setuptools named the folder on a .pth path, not through its finder"
    notebook = attack(tmp_path, HIDDEN_IMPORT.format(before=""))
    assert_stopped(venv, notebook, tmp_path, STUBBED_LIBRARY)
