"""Removing what a submission left behind: the processes it started (found through its cgroups
or the marker in their environment), its cgroups, mounts and folders. Used by the sandbox after
each kernel, and by the reaper when the grader was killed before it could; the standard library
only, so the reaper's bare interpreter (-I -S) loads it quickly.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import time
from pathlib import Path

MARKER = "SANDBOX_ID"   # in the environment of every process a sandbox starts: SANDBOX_ID=<marker>
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def cgroup_pids(directories) -> set[int]:
    found = set()
    for directory in set(directories):
        try:
            found |= {int(p) for p in (Path(directory) / "cgroup.procs").read_text().split()}
        except OSError:
            pass
    return found


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def kill_until_gone(find) -> set[int]:
    """Kill what find() returns until it returns nothing (a second at most); returns all killed."""
    killed: set[int] = set()
    for _ in range(50):
        pids = set(find())
        if not pids:
            break
        killed |= pids
        kill(pids)
        time.sleep(0.02)
    return killed


def descendants(root: int) -> set[int]:
    """Every process below `root` in the process tree, read from /proc: with the kernel's
    launcher a child subreaper, a process that double-forks and leaves its session and
    environment behind is still one of them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (parent := parent_of(int(entry))) is not None:
            children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def stop_then_kill(find) -> set[int]:
    """Stop (SIGSTOP) what find() returns until it returns nothing new, then kill it all: a
    stopped process forks no more, so a process that forks as fast as it can is not left
    behind by a kill that came between its fork and its child's."""
    stopped: set[int] = set()
    for _ in range(50):
        new = set(find()) - stopped
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        stopped |= new
    kill(stopped)
    return stopped


def remove_quietly(directory: Path) -> None:
    try:
        Path(directory).rmdir()
    except OSError:
        pass


def unmount(folder: str) -> None:
    # Detached: the kernel's mount namespace may hold a copy until its last process is gone.
    _libc.umount2(folder.encode(), MNT_DETACH)


def remove_leftovers(marker: str | None = None, cgroups=(), mounts=(), folders=()) -> set[int]:
    """Kill every process of a submission (in its cgroups or carrying its marker), then remove
    its cgroups, mounts and folders; returns what was killed. The grader does this after each
    kernel, and its watchdog when the grader was killed before it could."""
    killed = kill_until_gone(lambda: cgroup_pids(cgroups) | set(marked_processes(marker) if marker else ()))
    for directory in cgroups:
        remove_quietly(directory)
    for folder in mounts:
        unmount(folder)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return killed


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def start_time_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def marked_processes(marker: str) -> list[int]:
    """Processes whose environment carries this sandbox's marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
