"""Isolation of one submission's kernel: resource limits, namespaces (or, without them,
Landlock), cgroups, a size-limited folder, an unprivileged user, keyrings of its own, and
afterwards the removal of every process it started, by the grader or, should the grader be
killed first, by its watchdog.

Each mechanism is used where the machine allows it; the result records which were active,
and grading goes on with "isolation: partial" where some are missing.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import pwd
import resource
import select
import shutil
import signal
import site
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from grader import kernel_side
from grader.sandbox import import_paths as importable
from grader.kernel_side import keyrings
from grader.kernel_side import landlock
from grader.sandbox.leftovers import (MARKER, cgroup_pids, descendants, marked_processes, parent_of, remove_leftovers,
                                      remove_quietly, start_time_of, stop_then_kill)
from grader.sandbox.reaper import watchdog

PR_SET_PDEATHSIG = 1
# A kernel maps about 1 GiB of address space (libraries, thread stacks) before it holds any
# data; the address-space limit allows for that on top of the memory limit itself, which the
# memory cgroup enforces exactly where there is one.
ADDRESS_SPACE_HEADROOM = 2**30
UNPRIVILEGED_USER = "nobody"
UNSHARE = ("unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--net", "--ipc", "--uts")
# What "isolation: full" means; anything missing from it makes the isolation partial.
REQUIRED = ("memory limit", "process limit", "cpu limit", "cpu share", "folder quota", "pid namespace",
            "network namespace", "filesystem allowlist", "unprivileged user", "scrubbed environment",
            "private keyring")
# With the filesystem allowlist (namespaces or Landlock), the forbidden libraries are not
# there for the kernel to import: the policy is enforced. Without it, it rests on a scan of
# the notebook and on what the kernel reports, which a submission can hide: the policy is partial.
ENFORCES_POLICY = "filesystem allowlist"
CPU_PERIOD_MICROSECONDS = 100_000   # the kernel's default period of CPU quotas
# The CPU time limit sends SIGXCPU, which ends a Python process that does not handle it: the
# submission's own doing. Linux sends SIGKILL instead where the hard limit equals the soft one,
# and a SIGKILL is what the grader reads as the machine's (kernel.FROM_OUTSIDE): so the hard
# limit, for a kernel that handles SIGXCPU and goes on, is this many CPU seconds later.
CPU_HARD_LIMIT_EXTRA = 5
MS_NOSUID, MS_NODEV = 2, 4
# Switching to the unprivileged user takes these capabilities (bits of CapEff), and handing it
# the kernel's folder CAP_CHOWN; root has them unless a container dropped them.
CAP_CHOWN, CAP_SETGID, CAP_SETUID = 0, 6, 7
# Of the grader's environment, only what programs need to run (and OpenBLAS's CPU settings,
# read when numpy is imported) reaches a kernel or the fork server.
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "SYSTEMROOT")
# The kernel's threading and plotting settings; the fork server gets them too, since they
# take effect when it imports numpy and matplotlib for the kernels it forks.
KERNEL_SETTINGS = {"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                   "PYDEVD_DISABLE_FILE_VALIDATION": "1", "JUPYTER_PLATFORM_DIRS": "1"}


def scrubbed_environment(**own: str) -> dict:
    """A scrubbed environment: nothing of the grader's own variables, then `own`."""
    return {**{k: os.environ[k] for k in KEPT_VARIABLES if k in os.environ}, **KERNEL_SETTINGS, **own}
_libc = ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    try:
        done = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _capabilities() -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return 0


@functools.lru_cache(maxsize=1)
def unprivileged_ids() -> tuple[int, int] | None:
    """The unprivileged user's ids, where this process may switch a kernel to them: not only
    as full root, but wherever it holds CAP_SETUID, CAP_SETGID and CAP_CHOWN (root in a
    container without CAP_SYS_ADMIN)."""
    held = _capabilities()
    if not all(held >> cap & 1 for cap in (CAP_CHOWN, CAP_SETGID, CAP_SETUID)):
        return None
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup directory for a v1 controller, or the v2 one ('')."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller and controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controller
        elif not controller and controllers == "":
            base = Path("/sys/fs/cgroup")
            if not (base / "cgroup.controllers").exists():
                return None
        else:
            continue
        directory = base / path.lstrip("/")
        return directory if directory.is_dir() else None
    return None


class Cgroup:
    """A child cgroup for one kernel (v1 memory, pids and cpu controllers, or v2)."""

    def __init__(self, name: str, memory_bytes: int, max_processes: int, cpu_cores: float):
        self.dirs: dict[str, Path] = {}
        v2 = _own_cgroup("")
        # A quota, not a weight: it holds whatever else runs on the machine and however the
        # cgroups above are weighted, so a submission's processes together never get more
        # than `cpu_cores` cores, however many of them spin.
        quota = max(1000, int(cpu_cores * CPU_PERIOD_MICROSECONDS))
        wanted = ({"memory": ("memory.max", memory_bytes), "pids": ("pids.max", max_processes),
                   "cpu": ("cpu.max", f"{quota} {CPU_PERIOD_MICROSECONDS}")} if v2 else
                  {"memory": ("memory.limit_in_bytes", memory_bytes), "pids": ("pids.max", max_processes),
                   "cpu": ("cpu.cfs_quota_us", quota)})
        for controller, (limit_file, value) in wanted.items():
            parent = v2 if v2 else _own_cgroup(controller)
            if parent is None:
                continue
            directory = parent / name
            try:
                directory.mkdir(exist_ok=True)
                (directory / limit_file).write_text(str(value))
            except OSError:
                if directory not in self.dirs.values():   # v2: other controllers share it
                    remove_quietly(directory)
                continue
            self.dirs[controller] = directory

    def join(self) -> None:
        """Called in the kernel's launcher process before exec: move it into the cgroup."""
        for directory in set(self.dirs.values()):
            (directory / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> set[int]:
        return cgroup_pids(self.dirs.values())

    def wait_until_empty(self, seconds: float) -> None:
        """Wait, at most `seconds`, until no process is left in the cgroup. Under v2 its
        cgroup.events wakes a poll when that changes (it is opened before the check, so a
        change in between still wakes it); under v1 it is checked every 20 ms."""
        deadline = time.monotonic() + seconds
        events = [d / "cgroup.events" for d in set(self.dirs.values()) if (d / "cgroup.events").exists()]
        while (remaining := deadline - time.monotonic()) > 0:
            if not events:
                if not self.pids():
                    return
                time.sleep(0.02)
                continue
            with open(events[0], "rb") as changes:
                if not self.pids():
                    return
                watch = select.poll()
                watch.register(changes, select.POLLPRI)
                watch.poll(min(remaining, 0.1) * 1000)   # the bound: should a change go unsaid

    def memory_exceeded(self) -> bool:
        directory = self.dirs.get("memory")
        if directory is None:
            return False
        for name in ("memory.oom_control", "memory.events"):
            try:
                counts = dict(line.split() for line in (directory / name).read_text().splitlines() if line.strip())
            except (OSError, ValueError):
                continue
            if "oom_kill" in counts:
                return int(counts["oom_kill"]) > 0
        try:
            return int((directory / "memory.failcnt").read_text().strip() or 0) > 0
        except (OSError, ValueError):
            return False


def mount_tmpfs(folder: str, megabytes: int) -> bool:
    """Put a tmpfs of `megabytes` on the folder, so what is written there fails with ENOSPC
    past that size; False where mounting is not allowed (not root, no CAP_SYS_ADMIN)."""
    options = f"size={megabytes}m,mode=0700".encode()
    return _libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0


def _cpu_ticks(pid: int) -> int:
    """The CPU time a process has used (user and system), in clock ticks; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return 0


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    return landlock.abi()


def interpreter_paths() -> list[str]:
    """What the kernel's interpreter reads: its executable, standard library and packages, and
    the folders its site folders' .pth files add (the kernel's interpreter adds them too)."""
    return list(_interpreter_paths())


@functools.lru_cache(maxsize=1)
def _interpreter_paths() -> tuple[str, ...]:
    # Looked up once per run, as import_paths.search is: the installation does not change
    # while it grades, and each kernel's policy and sandbox ask for them.
    sites = site.getsitepackages()
    paths = {os.path.dirname(os.path.realpath(sys.executable)), sys.prefix, sys.base_prefix, *sites,
             *importable.pth_folders(sites)}
    return tuple(sorted(os.path.realpath(p) for p in paths if os.path.isdir(p)))


def library_paths(module: str) -> list[str]:
    """Where the kernel's interpreter could find `module` (a package folder or a module file),
    in any folder it could import from (grader/sandbox/import_paths.py), found without importing anything."""
    return importable.module_paths(module)


def reachable_by_others(path: str) -> bool:
    parts = Path(path).resolve().parts
    return all(os.stat(Path(*parts[:i])).st_mode & 0o001 for i in range(1, len(parts)))


def grader_paths(extra: Iterable[str]) -> list[str]:
    """Everything of the grader's the kernel must not read: its package, the reference, the
    templates, a source checkout, and the assignment spec."""
    paths = {str(Path(str(resources.files(p)))) for p in ("grader", "grader.reference", "grader.templates")}
    paths |= set(importable.grader_copies())   # other installed copies, under any name the kernel could import
    paths |= {str(Path(p).resolve()) for p in extra if p}
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "reference").is_dir():
        paths.add(str(checkout))
    return sorted(paths)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hidden_around(hidden: Iterable[str], kept: Iterable[str]) -> list[str]:
    """The hidden paths, each folder that holds a kept path (the interpreter, its packages,
    the kernel's folder) replaced by its entries that are not on the way to one, recursively:
    a virtual environment made inside a source checkout stays readable while the checkout's
    own files are hidden. Being kept itself does not uncover a hidden path (a legacy editable
    install names the checkout in a .pth file): only the ways to kept paths inside it are left."""
    kept = sorted({os.path.realpath(k) for k in kept if k})
    found: list[str] = []

    def carve(path: str, top: bool) -> None:
        if not top and path in kept:
            return   # a way's end
        if not any(_inside(k, path) and k != path for k in kept):
            found.append(path)
            return
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            return   # unreadable to the grader's user: not a way to a kept path either
        for entry in map(functools.partial(os.path.join, path), entries):
            if os.path.islink(entry) and any(_inside(k, real := os.path.realpath(entry)) or _inside(real, k)
                                             for k in kept):
                continue   # a link to a kept path (a venv's lib64): what it leads to is decided there
            carve(entry, False)

    for path in hidden:
        carve(os.path.realpath(path), True)
    return sorted(set(found))


def run_id() -> str:
    """The PID of the grader process that started this run; batch workers inherit it."""
    return os.environ.setdefault("GRADER_RUN_ID", str(os.getpid()))


# Every marker handed out by this process, so its own submissions' processes can be found.
CREATED_MARKERS: list[str] = []


class Sandbox:
    """The isolation of one kernel, which owns its folder: the sandbox removes it in cleanup()."""

    def __init__(self, limits, workdir: str, hidden: Sequence[str] = (), forbidden: tuple[str, ...] = (),
                 course_folder: str | None = None):
        self.enabled = limits.sandbox is not False   # None: as far as the machine allows
        self.fork_wanted = limits.fork_server
        self.memory_bytes = int(limits.memory_limit * 2**20)
        self.max_processes = limits.max_processes
        self.cpu_seconds = max(1, int(limits.cpu_limit))
        self.cpu_cores = limits.cpu_cores
        self.folder_megabytes = limits.folder_limit
        self.workdir = workdir
        # The course's support modules (grader/course/support_modules.py): the kernel reads them, never writes.
        self.course_folder = course_folder
        # The grading run first, so the processes of one run's submissions can be told apart.
        self.marker = f"{run_id()}.{uuid.uuid4().hex}"
        CREATED_MARKERS.append(self.marker)
        self.hidden = list(hidden)
        self.forbidden = tuple(forbidden)
        self.active: list[str] = ["scrubbed environment"]
        self.cgroup: Cgroup | None = None
        self.folder_mounted = False
        self.watched: str | None = None   # the key this process's watchdog knows the leftovers by
        self.launched_pid: int | None = None   # the kernel's launcher, once the grader has asked after it
        # How the kernel was started: "forked" from the warm parent, or "fresh", and why.
        self.kernel_start = ("fresh", "")
        self.namespaces = self.enabled and namespaces_available()
        # Where namespaces are not available, Landlock gives the kernel the same allowlist.
        self.landlock = self.enabled and not self.namespaces and landlock_abi() >= 1
        self.keyrings = self.enabled and keyrings.supported()
        self.ids = unprivileged_ids() if self.enabled else None
        if self.ids and not self.namespaces and not all(map(reachable_by_others, interpreter_paths())):
            self.ids = None

    def prepare(self) -> None:
        """Before anything is written to the kernel's folder: its quota and the cgroups, then
        a watchdog that removes them, the folder and the kernel's processes should this
        process die without cleanup() (SIGKILL, out of memory)."""
        if self.enabled:
            self._limit()
        self.watched = watchdog().watch(self.leftovers())

    def _limit(self) -> None:
        # Named after the run as well, so that what a run leaves behind can be told apart.
        self.cgroup = Cgroup(f"grader-{self.marker.replace('.', '-')[:32]}", self.memory_bytes, self.max_processes,
                             self.cpu_cores)
        self.folder_mounted = mount_tmpfs(self.workdir, self.folder_megabytes)
        self.active.append("memory limit")
        self.active.append("cpu limit")
        if "pids" in self.cgroup.dirs or self.ids:
            self.active.append("process limit")
        if "memory" in self.cgroup.dirs:
            self.active.append("memory cgroup")
        if "cpu" in self.cgroup.dirs:
            self.active.append("cpu share")
        if self.folder_mounted:
            self.active.append("folder quota")
        if self.namespaces:
            self.active += ["pid namespace", "network namespace", "filesystem allowlist"]
        elif self.landlock:
            # The mechanism is named: it holds the filesystem, and TCP only, not the whole network.
            self.active += ["filesystem allowlist", "landlock"]
            if landlock.denies_tcp(landlock_abi()):
                self.active.append("no tcp")
        if self.ids:
            self.active.append("unprivileged user")
        if self.keyrings:
            self.active.append("private keyring")

    def give_workdir(self) -> None:
        """Once the grader has written its files there: the kernel's folder to the unprivileged user."""
        if not self.ids:
            return
        for root, dirs, files in os.walk(self.workdir):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, *self.ids)

    def cgroup_holds_everything(self) -> bool:
        """Whether the kernel's cgroups alone hold all its processes, so that finding them needs
        no scan of every process's environment for the marker: the kernel joins them before it
        starts, and runs as the unprivileged user, who cannot move a process out of a cgroup the
        grader made."""
        return bool(self.cgroup and self.cgroup.dirs and self.ids)

    def leftovers(self) -> dict:
        """What remove_leftovers() takes away after this kernel."""
        cgroups = [str(d) for d in set(self.cgroup.dirs.values())] if self.cgroup else []
        return {"marker": self.marker, "cgroups": cgroups,
                "mounts": [self.workdir] if self.folder_mounted else [],
                "folders": [self.workdir, *([self.course_folder] if self.course_folder else [])]}

    def environment(self, env: dict) -> dict:
        return {**env, MARKER: self.marker}

    def launcher_policy(self, connection_file: str | None) -> dict:
        """What the launcher (launcher.py) builds the kernel's process and filesystem from."""
        exposed = interpreter_paths()
        kept = [*exposed, self.workdir, *([self.course_folder] if self.course_folder else [])]
        return {"workdir": self.workdir, "hide": hidden_around(self.hidden, kept), "expose": exposed,
                "course": self.course_folder,
                "forbidden": {m: library_paths(m) for m in self.forbidden},
                "mount": self.namespaces, "landlock": self.landlock, "keyrings": self.keyrings,
                "connection_file": connection_file,
                "uid": self.ids[0] if self.ids else None, "gid": self.ids[1] if self.ids else None}

    def launched_through_launcher(self) -> bool:
        return self.enabled and bool(self.namespaces or self.ids or self.landlock or self.keyrings)

    def wrap(self, command: list[str], connection_file: str) -> list[str]:
        if not self.launched_through_launcher():
            return command
        launcher = kernel_side.path_of("launcher.py")
        prefix = list(UNSHARE) + ["--"] if self.namespaces else []
        return [*prefix, sys.executable, "-I", "-S", launcher, json.dumps(self.launcher_policy(connection_file)),
                *command]

    def why_not_forked(self) -> str | None:
        """Why a kernel forked from the warm parent would not get this sandbox, or None. The
        forked kernel is found by its cgroup alone: its /proc environment is the parent's,
        without this sandbox's marker."""
        if not self.fork_wanted:
            return "--no-fork-server"
        if not self.enabled:
            return "the sandbox is off"
        if not (self.namespaces and self.ids):
            return "namespaces and an unprivileged user are needed"
        if not (self.cgroup and self.cgroup.dirs):
            return "a cgroup is needed to follow the kernel's processes"
        return None

    def fork_request(self, connection_file: str, env: dict, arguments: list[str]) -> dict:
        """What the fork server needs to put a kernel into this sandbox: what preexec() and
        the launcher do for a fresh kernel, and the kernel's own command-line arguments."""
        return {"policy": self.launcher_policy(connection_file), "rlimits": self.rlimits(),
                "cgroups": sorted(str(d) for d in set(self.cgroup.dirs.values())) if self.cgroup else [],
                "env": env, "cwd": self.workdir, "arguments": arguments}

    @staticmethod
    def die_with_parent() -> None:
        """Ask the kernel to SIGKILL this process when its parent dies."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass

    def rlimits(self) -> list[tuple[int, int, int]]:
        """The kernel's resource limits (kind, soft, hard), inherited by everything it starts."""
        address_space = self.memory_bytes + ADDRESS_SPACE_HEADROOM
        limits = [(resource.RLIMIT_AS, address_space, address_space),
                  (resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + CPU_HARD_LIMIT_EXTRA),
                  (resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_FSIZE, 256 * 2**20, 256 * 2**20)]
        if self.ids and not (self.cgroup and "pids" in self.cgroup.dirs):
            limits.append((resource.RLIMIT_NPROC, self.max_processes, self.max_processes))
        return limits

    def preexec(self) -> None:
        """In the launched process, before exec: limits, inherited by everything it starts;
        and death with the grader, so a killed grader leaves no kernel behind."""
        if not self.enabled:
            return
        self.die_with_parent()
        for kind, soft, hard in self.rlimits():
            try:
                resource.setrlimit(kind, (soft, hard))
            except (ValueError, OSError):
                pass
        if self.cgroup:
            self.cgroup.join()

    def memory_exceeded(self) -> bool:
        return bool(self.cgroup and self.cgroup.memory_exceeded())

    def stop_background(self, launched_pid: int | None) -> int:
        """Kill what the notebook left running besides the kernel, so that probing is not
        starved by it (and, before the kernel is shut down, so that nothing outlives it);
        returns how many processes were stopped."""
        if not launched_pid:
            return 0
        self.launched_pid = launched_pid
        keep = {launched_pid}
        # unshare -> launcher -> kernel, or launcher -> kernel
        for _ in range(int(self.namespaces) + int(self.launched_through_launcher())):
            # The oldest child: orphans adopted by the launcher, even forks of the kernel
            # itself, started later.
            children = [p for p in self._running() if parent_of(p) in keep and p not in keep]
            keep |= set(sorted(children, key=start_time_of)[:1])
        return len(stop_then_kill(lambda: self._running() - keep))

    def end_beside_kernel(self, launched_pid: int | None) -> int:
        """Just before the kernel is shut down: stop and kill every process of the submission
        below its launcher, the kernel included (it is shut down next anyway), while the
        launcher still holds them: without a PID namespace the kernel's end would otherwise
        orphan them to init (inside one, the namespace's end kills them). Returns how many
        there were besides the kernel."""
        if not launched_pid or self.namespaces:
            return 0
        self.launched_pid = launched_pid
        oldest = sorted((p for p in self._running() if parent_of(p) == launched_pid), key=start_time_of)[:1]
        return len(stop_then_kill(lambda: self._running() - {launched_pid}) - set(oldest))

    def _running(self) -> set[int]:
        """The submission's processes: its cgroups' where they alone hold them all
        (cgroup_holds_everything), otherwise also every process carrying its marker and every
        process below its launcher (a child subreaper without a PID namespace), which holds
        whatever left its session and emptied its environment."""
        if self.cgroup is not None and self.cgroup_holds_everything():
            return self.cgroup.pids()
        below = descendants(self.launched_pid) if self.launched_pid and not self.namespaces else set()
        return (self.cgroup.pids() if self.cgroup else set()) | set(marked_processes(self.marker)) | below

    def cpu_used(self) -> float:
        """The CPU seconds the submission's running processes have used, read from /proc by
        the grader (never from the kernel), the processes found as everything else finds them."""
        return sum(map(_cpu_ticks, self._running())) / os.sysconf("SC_CLK_TCK")

    def cleanup(self) -> list[int]:
        """Kill whatever the submission left running, then remove its cgroups and folder;
        returns what had to be killed. The kernel's own processes get a moment to finish
        exiting first."""
        if self.cgroup is not None and self.cgroup_holds_everything():
            self.cgroup.wait_until_empty(1.0)
        else:
            deadline = time.monotonic() + 1.0
            while self._running() and time.monotonic() < deadline:
                time.sleep(0.02)
        # The watchdog, should the grader be killed, also looks for the marker: it runs once.
        leftovers = remove_leftovers(**{**self.leftovers(),
                                        **({"marker": None} if self.cgroup_holds_everything() else {})})
        if self.watched:
            watchdog().release(self.watched)
            self.watched = None
        return sorted(leftovers)

    def report(self) -> dict:
        missing = [m for m in REQUIRED if m not in self.active]
        how, why = self.kernel_start
        return {"level": "full" if not missing else "partial", "active": self.active, "missing": missing,
                "kernel_start": how + (f" ({why})" if why else "")}
