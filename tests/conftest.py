"""pytest's hooks and fixtures for the whole suite; the helpers tests import are in
tests/grading_helpers/."""
import os
from pathlib import Path

import pytest

from grading_helpers import ROOT, _current, grade, grade_many


def pytest_runtest_setup(item):
    """Whether the test is `slow`, known before any of its fixtures is made (a module-scoped
    fixture that grades is made at the first test that asks for it); and the `sandbox`
    marker's promise (pyproject.toml): its tests are skipped, not failed, where the machine
    cannot make the full sandbox (no root, no unshare, no user to drop to)."""
    _current["slow"] = item.get_closest_marker("slow") is not None
    if item.get_closest_marker("sandbox") is not None:
        from grader.sandbox.isolation import namespaces_available, unprivileged_ids
        if not namespaces_available() or unprivileged_ids() is None:
            pytest.skip("needs the full sandbox (root, unshare, a user to drop to), which this machine lacks")


@pytest.fixture(autouse=True)
def _kernels_only_in_slow_tests(request, monkeypatch):
    """A test that starts a kernel or any other process must be marked `slow`, so that
    `pytest -m "not slow"` is the quick subset it claims to be (no kernel, no process, nothing
    left running): elsewhere, doing so fails."""
    _current["slow"] = request.node.get_closest_marker("slow") is not None
    if not _current["slow"]:
        import subprocess

        from grader.kernel.session import Kernel

        async def refuse(self):
            pytest.fail("this test starts a Jupyter kernel: mark it @pytest.mark.slow")

        def refuse_process(self, args, *more, **options):
            pytest.fail(f"this test starts a process ({args!r:.80}): mark it @pytest.mark.slow")

        def refuse_fork():
            pytest.fail("this test forks a process: mark it @pytest.mark.slow")
        monkeypatch.setattr(Kernel, "__aenter__", refuse)
        monkeypatch.setattr(subprocess.Popen, "__init__", refuse_process)
        monkeypatch.setattr(os, "fork", refuse_fork)


@pytest.fixture(scope="session")
def golden_graded():
    """Every notebook with a golden verdict, graded once for the whole run. Only slow tests
    request it; it runs before their own set-up, so it says so itself."""
    from golden import load
    _current["slow"] = True
    # Hostile notebooks first: they wait out timeouts, and the short ones fill in beside them.
    entries = sorted(load(), key=lambda e: not Path(e["path"]).name.startswith(("hostile_", "sandbox_")))
    grade_many([(ROOT / e["path"], e["assignment"], e.get("settings", {})) for e in entries])


@pytest.fixture
def grade_file():
    return grade


@pytest.fixture
def outside_tmp():
    """A folder outside /tmp that every user may read, as a course's submissions, outputs and
    LMS folders often are: the kernel's user could read it, were it not for the sandbox."""
    import os
    import shutil
    import tempfile
    parent = next((p for p in ("/srv", "/opt", "/var/lib") if os.access(p, os.W_OK)), str(Path.home()))
    folder = Path(tempfile.mkdtemp(prefix="grader-test-", dir=parent))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
