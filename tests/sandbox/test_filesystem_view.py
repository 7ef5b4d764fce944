"""What a kernel can see and write: an allowlist. A small program runs in the same sandbox a
kernel runs in (same launcher, same policy) and reports what it finds; no kernel is needed."""
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grading_helpers import ROOT
from grader.sandbox import isolation as sandbox
from grader.kernel.session import kernel_environment
from grader.settings import Settings

pytestmark = pytest.mark.sandbox

FULL = sandbox.namespaces_available() and sandbox.unprivileged_ids() is not None

LOOK = r'''
import json, os, sys
places = json.loads(sys.argv[1])
seen = {p: os.path.exists(p) for p in places["hidden"]}
written = {}
for folder in places["readonly"] + places["inside"]:
    try:
        with open(os.path.join(folder, "written-by-the-kernel"), "w") as f:
            f.write("x")
        written[folder] = "written"
    except OSError as exc:
        written[folder] = type(exc).__name__
imports = {}
for module in ("numpy", "scipy", "scipy.special", "grader", "grader.reference.attention"):
    try:
        __import__(module)
        imports[module] = "imported"
    except ImportError as exc:
        imports[module] = str(exc)
print(json.dumps({"seen": seen, "written": written, "imports": imports, "uid": os.getuid()}))
'''



def run_in_sandbox(program: str, argument: str, forbidden=("scipy.special",)) -> tuple[dict, str]:
    """Run `program` as the kernel would be run; returns its JSON report and its folder."""
    workdir = tempfile.mkdtemp(prefix=f"grader-kernel-{sandbox.run_id()}-")
    box = sandbox.Sandbox(Settings(), workdir, sandbox.grader_paths([]), forbidden)
    box.prepare()
    box.give_workdir()
    try:
        done = subprocess.run(box.wrap([sys.executable, "-c", program, argument], None), preexec_fn=box.preexec,
                              env=box.environment(kernel_environment(workdir)), cwd=workdir, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        leftover_in_tmp = sorted(p.name for p in Path(workdir, ".tmp").iterdir())
        return json.loads(done.stdout), leftover_in_tmp
    finally:
        box.cleanup()


@pytest.mark.slow
def test_the_kernel_sees_an_allowlist_and_writes_only_its_folder(outside_tmp):
    if not FULL:
        pytest.skip("namespaces or an unprivileged user are not available here; the result says isolation partial")
    batch, out = outside_tmp / "submissions", outside_tmp / "out"
    for folder in (batch, out):
        folder.mkdir()
    (batch / "alice.ipynb").write_text("{}")
    neighbour = Path(tempfile.mkdtemp(prefix=f"grader-kernel-{sandbox.run_id()}-"))
    (neighbour / "notebook.py").write_text("secret")
    spec = outside_tmp / "assignment.toml"
    spec.write_text("[lms]\n")
    places = {
        "hidden": [str(batch / "alice.ipynb"), str(out), str(ROOT / "reference" / "attention.py"), str(ROOT),
                   str(spec), str(neighbour / "notebook.py"), str(outside_tmp), "/etc/shadow", "/var/log", "/srv",
                   "/sys", "/run"],
        "readonly": ["/", "/usr", "/etc", "/root", sys.prefix, str(out), str(Path.home())],
        "inside": ["/tmp", "/var/tmp", "/dev/shm"],
    }
    # A folder holding the interpreter (a virtual environment in /srv) is on the way to it: seen.
    exposed = [Path(p) for p in sandbox.interpreter_paths()]
    places["hidden"] = [p for p in places["hidden"] if not any(Path(p) in e.parents for e in exposed)]
    try:
        report, in_tmp = run_in_sandbox(LOOK, json.dumps(places))
    finally:
        shutil.rmtree(neighbour)
    assert report["uid"] == sandbox.unprivileged_ids()[0]
    assert {p for p, seen in report["seen"].items() if seen} == set(), report["seen"]
    assert {p for p in places["readonly"] if report["written"][p] == "written"} == set(), report["written"]
    # The usual temporary folders work, but they are one folder inside the kernel's own.
    assert all(report["written"][p] == "written" for p in places["inside"]), report["written"]
    assert "written-by-the-kernel" in in_tmp   # beside the mount point of the kernel's folder itself
    assert not (out / "written-by-the-kernel").exists() and list(batch.iterdir()) == [batch / "alice.ipynb"]


@pytest.mark.slow
def test_a_forbidden_library_is_not_there_to_import():
    if not FULL:
        pytest.skip("namespaces or an unprivileged user are not available here; the result says policy partial")
    pytest.importorskip("scipy.special")
    report, _ = run_in_sandbox(LOOK, json.dumps({"hidden": [], "readonly": [], "inside": []}))
    imports = report["imports"]
    assert imports["numpy"] == imports["scipy"] == "imported"   # what is allowed still works
    assert imports["scipy.special"] == "scipy.special is not available: this assignment forbids it"
    assert imports["grader"] == imports["grader.reference.attention"] == "the grader is not available to submissions"


def test_library_paths_find_packages_and_modules_without_importing_them():
    pytest.importorskip("scipy")
    before = set(sys.modules)
    paths = sandbox.library_paths("scipy.special")
    assert any(p.endswith("/scipy/special") for p in paths), paths
    assert "scipy.special" not in set(sys.modules) - before
    assert any(p.endswith("/json") for p in sandbox.library_paths("json"))
    assert any(p.endswith("/this.py") for p in sandbox.library_paths("this"))
    assert sandbox.library_paths("no_such_library_anywhere") == []
