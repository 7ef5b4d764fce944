"""Isolation without namespaces: where the grader cannot create them (not root, or root
without CAP_SYS_ADMIN, as in many LMS containers), Landlock gives the kernel the filesystem
allowlist and denies it TCP, and the kernel still drops to the unprivileged user wherever the
grader holds CAP_SETUID and CAP_SETGID. The real grader runs here as root with CAP_SYS_ADMIN
dropped (capsh) and as the unprivileged user (setpriv)."""
import glob
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import nbformat
import pytest

from grading_helpers import SUBMISSIONS, expect_slow
from grading_helpers.unprivileged import WAYS, grade_without_namespaces, private_ancestors
from grader.kernel_side import landlock
from grader.sandbox import isolation as sandbox
from grader.sandbox import leftovers

ABI = landlock.abi()
needs_landlock = pytest.mark.skipif(ABI < 4, reason="Landlock with TCP rules (ABI 4) is not available here")

# Each cell raises RuntimeError when its attack worked; otherwise the error that stopped it.
ATTACKS = {
    "course": "print(open({course!r}).read())\nraise RuntimeError('read the course file')",
    "output": "open({out!r} + '/planted.txt', 'w').write('x')\nraise RuntimeError('wrote into the output folder')",
    "tcp": "import socket\nsocket.create_connection(('127.0.0.1', {port}), 5)\nraise RuntimeError('connected')",
    "forbidden": "import scipy.special\nraise RuntimeError('imported a forbidden library')",
    # The run's id in the kernel's environment is the grader's PID: its environment and command
    # line name the course's folders, and, as the same user, the kernel could kill it.
    "environ": "import os\ngrader = int(os.environ['SANDBOX_ID'].split('.')[0])\n"
               "print(open(f'/proc/{{grader}}/environ').read())\nraise RuntimeError('read the grader environment')",
    "signal": "import os, signal\ngrader = int(os.environ['SANDBOX_ID'].split('.')[0])\n"
              "os.kill(grader, signal.SIGKILL)\nraise RuntimeError('killed the grader')",
}


def test_a_folder_holding_a_denied_path_is_split_into_its_entries(tmp_path):
    site = tmp_path / "site-packages"
    for folder in ("allowed", "scipy/special", "scipy/linalg", "__pycache__"):
        (site / folder).mkdir(parents=True)
    for file in ("scipy/__init__.py", "single.py", "other.py", "__pycache__/single.cpython-311.pyc",
                 "__pycache__/other.cpython-311.pyc"):
        (site / file).write_text("")
    denied = [str(site / "scipy" / "special"), str(site / "single.py")]
    rules = dict(landlock.plan([str(site)], [str(tmp_path / "work")], denied))
    read = landlock.READ
    assert rules == {str(site): landlock.READ_DIR, str(site / "allowed"): read, str(site / "other.py"): read,
                     str(site / "scipy"): landlock.READ_DIR, str(site / "scipy" / "__init__.py"): read,
                     str(site / "scipy" / "linalg"): read, str(site / "__pycache__"): landlock.READ_DIR,
                     str(site / "__pycache__" / "other.cpython-311.pyc"): read,
                     str(tmp_path / "work"): landlock.WRITE}


@pytest.mark.slow
@needs_landlock
def test_a_restricted_process_reads_only_what_the_rules_allow(tmp_path):
    """In a child process: Landlock holds even for root, for reading, writing and TCP."""
    allowed, denied, work = tmp_path / "lib", tmp_path / "lib" / "forbidden", tmp_path / "work"
    for folder in (denied, work):
        folder.mkdir(parents=True)
    (allowed / "ok.py").write_text("ok")
    (denied / "secret.py").write_text("secret")
    listener = socket.create_server(("127.0.0.1", 0))
    # The child can read no more of the standard library: what its connection needs is loaded
    # before it (getaddrinfo may encode the host with the idna codec, which no earlier test
    # need have loaded).
    "127.0.0.1".encode("idna")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        report = {}
        try:
            import sys
            ruleset = landlock.ruleset([str(allowed), os.path.dirname(os.path.realpath(sys.executable))], [str(work)],
                                       [str(denied)])
            landlock.restrict(ruleset)
            for name, attempt in (("ok", lambda: (allowed / "ok.py").read_text()),
                                  ("secret", lambda: (denied / "secret.py").read_text()),
                                  ("write", lambda: (work / "new").write_text("x")),
                                  ("outside", lambda: (tmp_path / "new").write_text("x")),
                                  ("tcp", lambda: socket.create_connection(listener.getsockname(), 2))):
                try:
                    attempt()
                    report[name] = "done"
                except OSError as exc:
                    report[name] = type(exc).__name__
        finally:
            os.write(write, json.dumps(report).encode())
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    listener.close()
    report = json.loads(os.read(read, 65536))
    assert report == {"ok": "done", "secret": "PermissionError", "write": "done", "outside": "PermissionError",
                      "tcp": "PermissionError"}, report


@pytest.mark.slow
@pytest.mark.sandbox
@needs_landlock
@pytest.mark.parametrize("way", WAYS)
def test_without_namespaces_landlock_confines_the_kernel(way, outside_tmp):
    expect_slow()
    pytest.importorskip("scipy.special")
    if os.geteuid() != 0 or not all(shutil.which(p) for p in ("capsh", "setpriv", "unshare")):
        pytest.skip("switching users and dropping capabilities needs root, capsh, setpriv and unshare")
    if private_ancestors() and not sandbox.namespaces_available():
        pytest.skip("the interpreter is in a private folder and no mount namespace can open it")
    course, batch, out, home = (outside_tmp / n for n in ("course", "batch", "out", "home"))
    for folder in (course, batch, out, home):
        folder.mkdir()
    # Every user may read the course's file and write the output folder: only the sandbox
    # stands between them and the kernel.
    (course / "assignment-secret.txt").write_text("course-secret")
    for folder in (out, home):
        folder.chmod(0o777)
    accepted = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    values = {"course": str(course / "assignment-secret.txt"), "out": str(out), "port": listener.getsockname()[1]}
    nb.cells += [nbformat.v4.new_code_cell(f"# {name}\n" + code.format(**values)) for name, code in ATTACKS.items()]
    nbformat.write(nb, batch / "mallory.ipynb")
    try:
        done = grade_without_namespaces(way, batch, out, home)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = glob.glob(str(out / "*" / "result.json"))
    result = json.loads(Path(path).read_text())
    outcomes = {name: [(e["ename"], e["evalue"]) for e in result["errors"] if e["source"].startswith(f"# {name}\n")]
                for name in ATTACKS}
    for name in ("course", "output", "tcp", "environ", "signal"):
        assert [ename for ename, _ in outcomes[name]] == ["PermissionError"], (name, outcomes[name])
    assert outcomes["forbidden"] == [("ImportError", "scipy.special is not available: this assignment forbids it")]
    assert accepted == [] and not (out / "planted.txt").exists()
    assert "course-secret" not in json.dumps(result)
    assert result["score"] == result["max_score"] == 25
    isolation = result["isolation"]
    assert {"landlock", "filesystem allowlist", "no tcp"} <= set(isolation["active"]), isolation
    assert isolation["level"] == "partial" and "network namespace" in isolation["missing"]
    assert result["policy"]["level"] == "full"
    # Root without CAP_SYS_ADMIN still switches the kernel to the unprivileged user.
    expected = "active" if way == "without CAP_SYS_ADMIN" else "missing"
    assert "unprivileged user" in isolation[expected], isolation


@pytest.mark.slow
@needs_landlock
def test_without_a_pid_namespace_the_kernel_dies_with_its_launcher(monkeypatch):
    """Nothing else takes the kernel with its launcher there (the grader's watchdog acts only
    when the grader dies): killing the launcher kills the kernel."""
    import asyncio
    import signal
    import time

    from grader.kernel.session import Kernel
    from grader.settings import Limits
    monkeypatch.setattr(sandbox, "namespaces_available", lambda: False)   # as in a container

    async def run():
        async with Kernel(Limits(fork_server=False)) as kernel:
            assert "landlock" in kernel.isolation()["active"]
            launcher = kernel.km.provisioner.pid
            (child,) = [p for p in kernel.sandbox._running() if leftovers.parent_of(p) == launcher]
            os.kill(launcher, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(child):
                await asyncio.sleep(0.05)
            return _alive(child)
    assert asyncio.run(run()) is False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@needs_landlock
def test_a_kernel_left_as_root_has_no_capabilities(monkeypatch):
    """Where `nobody` cannot read the interpreter, a kernel without namespaces stays root:
    Landlock holds its files, and it keeps none of root's capabilities, which Landlock does
    not hold (a raw socket sees the machine's traffic; a device node reads its disk)."""
    import asyncio

    from grader.kernel.session import Kernel
    from grader.settings import Limits
    if os.geteuid() != 0:
        pytest.skip("only a grader running as root leaves a kernel as root")
    monkeypatch.setattr(sandbox, "namespaces_available", lambda: False)   # as in a container
    monkeypatch.setattr(sandbox, "unprivileged_ids", lambda: None)        # nobody cannot read the interpreter

    async def run():
        async with Kernel(Limits(fork_server=False)) as kernel:
            assert "unprivileged user" in kernel.isolation()["missing"]
            return [await kernel.run_cell(cell, 30) for cell in (
                "import os\nassert os.getuid() == 0",
                "import socket\nsocket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
                "import os, stat\nos.mknod('disk', stat.S_IFBLK | 0o600, os.makedev(7, 0))")]
    still_root, sniff, device = asyncio.run(run())
    assert still_root is None
    assert sniff is not None and sniff.ename == "PermissionError", sniff
    assert device is not None and device.ename == "PermissionError", device


# A process that leaves everything the grader could know it by: it double-forks, leaves the
# kernel's session and runs another interpreter with an empty environment (no sandbox marker).
ESCAPE = """import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/usr/bin/python3", ["/usr/bin/python3", "-c", "import time; time.sleep(600)", {token!r}], {{}})
    os._exit(0)
os.wait()
"""
# Its launcher, which adopts such a process, ended by the kernel: Landlock's signal scope
# (ABI 6) keeps the kernel from signalling a process outside its domain.
KILL_LAUNCHER = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nraise RuntimeError('killed its launcher')"


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.sandbox
@needs_landlock
@pytest.mark.parametrize("way", WAYS)
def test_without_namespaces_nothing_the_kernel_starts_outlives_its_grading(way, outside_tmp):
    """Unprivileged, without cgroups or a PID namespace: a process that double-forks, calls
    setsid() and re-executes an interpreter with an empty environment is still found (below
    the kernel's launcher, a child subreaper) and killed before the grader exits, and counted
    (as left in the background once the notebook has run, or as left over at the kernel's end)."""
    expect_slow()
    if os.geteuid() != 0 or not all(shutil.which(p) for p in ("capsh", "setpriv", "unshare")):
        pytest.skip("switching users and dropping capabilities needs root, capsh, setpriv and unshare")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 to re-execute")
    if private_ancestors() and not sandbox.namespaces_available():
        pytest.skip("the interpreter is in a private folder and no mount namespace can open it")
    batch, out, home = (outside_tmp / n for n in ("batch", "out", "home"))
    for folder in (batch, out, home):
        folder.mkdir()
    for folder in (out, home):
        folder.chmod(0o777)
    token = f"escapee-{os.getpid()}-{way.replace(' ', '-')}"
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(ESCAPE.format(token=token)))
    if ABI >= 6:
        nb.cells.append(nbformat.v4.new_code_cell(KILL_LAUNCHER))
    nbformat.write(nb, batch / "mallory.ipynb")
    try:
        done = grade_without_namespaces(way, batch, out, home)
        left = _processes_with(token)
    finally:
        leftovers.kill(_processes_with(token))
    assert done.returncode == 0, done.stderr[-2000:]
    assert left == [], "a process of the submission outlived its grading"
    (path,) = glob.glob(str(out / "*" / "result.json"))
    result = json.loads(Path(path).read_text())
    isolation = result["isolation"]
    assert isolation["background_processes_stopped"] + isolation["leftover_processes_killed"] >= 1, isolation
    assert result["score"] == result["max_score"] == 25
    if ABI >= 6:
        [error] = [e for e in result["errors"] if "killed its launcher" in e["source"]]
        assert error["ename"] == "PermissionError", error
