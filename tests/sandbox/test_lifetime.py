"""Everything a grader process owns dies with it, however it dies: a `grader check` or a
batch worker killed with SIGKILL leaves no process, folder, mount or cgroup of its
submission behind."""
import csv
import os
import signal
import subprocess
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, GRADER, own_run_environment, sandbox_processes, wait_for
from grader.sandbox.isolation import MARKER

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

SLEEPER = FIXTURES / "sandbox_sleeps_with_child.ipynb"


def _stat_field(pid: int, index: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[index]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int(_stat_field(int(entry.name), 1)) == pid:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        frontier = [c for p in frontier for c in children(p)]
        found += frontier
    return found


def environment_of(pid: int) -> dict:
    pairs = (v.split(b"=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in v)
    return {k.decode(): v.decode() for k, v in pairs}


def marker_of(pid: int) -> str:
    marker = environment_of(pid).get(MARKER)
    if marker is None:
        raise AssertionError(f"process {pid} carries no sandbox marker")
    return marker


def processes_with(marker: str) -> list[int]:
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def markers_of(grader_pid: int) -> set[str]:
    """The sandbox markers of the kernels graded in the run of the grader process `grader_pid`."""
    return {marker_of(p) for p in sandbox_processes(grader_pid=grader_pid)}


def owned_by(marker: str) -> dict:
    """What the kernel with this sandbox marker owns: its marker, folder and cgroups, read from
    the kernel's own processes."""
    launched = processes_with(marker)[0]
    cgroups = []
    for line in Path(f"/proc/{launched}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "grader-" in path:
            unified = Path("/sys/fs/cgroup/cgroup.controllers").exists()
            v2 = Path("/sys/fs/cgroup") if unified else Path("/sys/fs/cgroup/unified")
            base = Path("/sys/fs/cgroup") / controllers.split(",")[0] if controllers else v2
            cgroups.append(base / path.lstrip("/"))
    # The kernel's HOME is its folder (its working directory is not: it lies in the kernel's
    # own filesystem, which the grader's cannot name).
    home = environment_of(launched)["HOME"]
    return {"marker": marker, "workdir": home, "cgroups": cgroups}


def gone(owned: dict) -> bool:
    return (not processes_with(owned["marker"]) and not os.path.exists(owned["workdir"])
            and not mounted(owned["workdir"]) and not any(c.exists() for c in owned["cgroups"]))


def mounted(folder: str) -> bool:
    return any(line.split()[1] == folder for line in Path("/proc/mounts").read_text().splitlines())


def sleeping_child(marker_prefix: str) -> list[int]:
    """The notebook's child process (`time.sleep(3600)` in a process of its own) once running."""
    found = []
    for pid in sandbox_processes(grader_pid=int(marker_prefix)):
        try:
            if b"time.sleep(3600)" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def assert_gone_soon(owned: dict, seconds: float = 5.0):
    try:
        wait_for(lambda: gone(owned), seconds, "everything of the killed grader's submission removed")
    except AssertionError:
        raise AssertionError({"processes": processes_with(owned["marker"]), "workdir": os.path.exists(owned["workdir"]),
                              "mounted": mounted(owned["workdir"]),
                              "cgroups": [str(c) for c in owned["cgroups"] if c.exists()]}) from None


def start_grader(args: list) -> subprocess.Popen:
    return subprocess.Popen([*GRADER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=own_run_environment())


def test_killed_check_leaves_nothing(tmp_path):
    grader = start_grader(["check", SLEEPER, "--cell-timeout", "60"])
    try:
        wait_for(lambda: sleeping_child(str(grader.pid)), 30, "the notebook's child process started")
        (marker,) = markers_of(grader.pid)
        owned = owned_by(marker)
        assert len(processes_with(owned["marker"])) >= 3   # at least the launcher, the kernel and its child
    finally:
        grader.kill()
        grader.communicate()
    assert_gone_soon(owned)
    assert sandbox_processes(grader_pid=grader.pid) == []
    assert not list(Path("/tmp").glob(f"grader-kernel-{grader.pid}-*"))


def test_killed_batch_worker_leaves_nothing_and_the_batch_completes(tmp_path):
    """The killed worker's watchdog removes its kernel; the pool, broken by the kill, stops the
    other worker, whose kernel goes as well; the batch grades both again."""
    batch = tmp_path / "batch"
    batch.mkdir()
    for name in ("first.ipynb", "second.ipynb"):
        (batch / name).write_bytes(SLEEPER.read_bytes())
    out = tmp_path / "out"
    grader = start_grader(["grade", batch, "-o", out, "--workers", "2", "--cell-timeout", "8", "--call-timeout", "2"])
    try:
        wait_for(lambda: len(sleeping_child(str(grader.pid))) == 2, 60, "both notebooks' child processes started")
        kernels = [owned_by(marker) for marker in markers_of(grader.pid)]
        assert len(kernels) == 2
        worker = next(p for p in children(grader.pid) if children(p) and b"fork_server" not in
                      Path(f"/proc/{p}/cmdline").read_bytes())
        os.kill(worker, signal.SIGKILL)
        for kernel in kernels:
            assert_gone_soon(kernel)
        _, err = grader.communicate(timeout=120)
    finally:
        grader.kill()
    assert grader.returncode == 0, err
    rows = {r["submission"]: r for r in csv.DictReader((out / "grades.csv").open())}
    assert set(rows) == {"first.ipynb", "second.ipynb"}
    # Each sleeps in one cell, which is interrupted; the rest of the notebook is a correct one.
    assert all(r["score"] == r["max_score"] for r in rows.values()), rows
    assert sandbox_processes(grader_pid=grader.pid) == []
    leftovers = [*Path("/tmp").glob(f"grader-kernel-{grader.pid}-*"), *Path("/tmp").glob(f"grader-task-{grader.pid}-*")]
    assert leftovers == []
