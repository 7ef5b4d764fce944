"""Run a command and measure it: wall seconds, CPU seconds of its whole process tree (every
process it started, and its kernels, also those forked by the shared fork server), and the
peak memory of the grader's own processes (the command and its Python workers, not the
kernels it starts nor the fork server).

The CPU seconds are counted by the Linux kernel where this process may make a cgroup v1
`cpuacct` group (as root): the command runs in a group of its own, and so does any fork server
while it runs, so every process of the run is counted whole, from its fork to its exit, the
kernels' forks, exits and page faults included (`Measured.cpu_counted` is "cgroup").

Elsewhere they are sampled from /proc every 50 ms ("sampled"): a sandboxed kernel is reaped
inside its own PID namespace, so its CPU time never reaches this process's RUSAGE_CHILDREN.
That figure is the larger of the two accounts and misses the last 50 ms of each process: in
the same runs of `grade --workers 2` on a batch of NumPy-only notebooks it was 13 to 15 %
below the cgroup's count (0.29 against 0.34 CPU s a submission, docs/performance.md), and 1 %
below it for bare nbclient. `cpu_sampled` keeps it beside the count. The peak memory is
always sampled."""
import itertools
import json
import os
import re
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# Processes of a grading run that are the student's, not the grader's.
NOT_THE_GRADER = (b"ipykernel", b"kernel_side/launcher.py", b"unshare", b"grader.sandbox.reaper", b"fork_server")


# What makes a course's notebook more than NumPy: its plotting. matplotlib.pyplot costs a fresh
# kernel about 0.5 s to import, which a bare run pays per notebook and the grader's fork server
# once, so a batch of such notebooks flatters the grader's ratio.
PLOTTING = re.compile(r"^[ \t]*(import matplotlib|from matplotlib|%matplotlib|plt\.).*\n?", re.M)


def numpy_only(source: Path, target: Path) -> None:
    """`source` written to `target` without its plotting lines: the same notebook, importing
    NumPy alone."""
    nb = json.loads(source.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        text = "".join(cell["source"]) if isinstance(cell.get("source"), list) else cell.get("source", "")
        cell["source"] = PLOTTING.sub("", text)
    target.write_text(json.dumps(nb), encoding="utf-8")


@dataclass
class Measured:
    seconds: float
    cpu_seconds: float
    peak_grader_mib: float
    cpu_counted: str = "sampled"   # how cpu_seconds were counted: "cgroup" or "sampled"
    cpu_sampled: float = 0.0       # what sampling /proc gave, the cgroup's count or not


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuGroup:
    """A cgroup v1 cpuacct group for one measured run. The fork servers running when it starts
    are moved into it for the run (their kernels are forked there), and every process left in
    it afterwards goes back to the group this process is in."""

    def __init__(self):
        self.path = CPUACCT / f"benchmark-{os.getpid()}-{next(_groups)}"
        self.path.mkdir()
        own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if "cpuacct" in line.split(":", 2)[1].split(",")), "/")
        self.home = CPUACCT / own.lstrip("/")

    @classmethod
    def made(cls) -> "CpuGroup | None":
        """A new group, or None where none can be made (no cgroup v1 cpuacct, not root)."""
        try:
            return cls()
        except OSError:
            return None

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def join_fork_servers(self) -> None:
        """The fork servers running now join the group: what they fork from now on is counted."""
        for server in _fork_servers():
            try:
                self.join(server)
            except OSError:   # it has exited meanwhile
                pass

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        """Move what is left home and remove the group; again while a process left in it is
        still forking or exiting (a group with a process in it cannot be removed)."""
        for attempt in itertools.count():
            for pid in (self.path / "cgroup.procs").read_text().split():
                try:
                    (self.home / "cgroup.procs").write_text(pid)
                except OSError:   # it has exited meanwhile
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                if attempt >= 50:
                    raise
                time.sleep(0.02)


_groups = itertools.count()


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return [int(c) for t in tasks for c in (t / "children").read_text().split()]
    except OSError:
        return []


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])   # utime + stime
    except (OSError, ValueError, IndexError):
        return 0


def _fork_servers() -> list[int]:
    """The fork servers running (their kernels' handlers are their children). Found by a scan of
    every process, which the sampler does once a second, not at every tick: scanning every
    process's environment twenty times a second took a twentieth of a core from the run it measured."""
    found = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and b"fork_server" in Path(entry.path, "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _marked(pid: int, servers: list[int]) -> list[int]:
    """Processes of the kernels the grading run `pid` started: a forked kernel descends from
    the shared fork server, not from the run, and its handler carries the run's sandbox marker."""
    needle = f"SANDBOX_ID={pid}.".encode()
    found = []
    for handler in (c for server in servers for c in _children(server)):
        try:
            if needle in Path(f"/proc/{handler}/environ").read_bytes():
                found.append(handler)
        except OSError:
            continue
    return found


def _tree(pid: int, servers: list[int]) -> list[int]:
    """The run's processes: what it started, and its kernels wherever they were forked."""
    found, todo = set(), [pid, *_marked(pid, servers)]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(_children(p))
    return sorted(found)


def _grader_rss(pid: int) -> int:
    """Resident bytes of the grader process `pid` and its descendants that are the grader's."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes()
            rss_pages = int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if not any(marker in cmdline for marker in NOT_THE_GRADER):
            total += rss_pages * os.sysconf("SC_PAGE_SIZE")
            todo.extend(_children(p))
    return total


def run(command: list, env=None) -> Measured:
    group = CpuGroup.made()
    if group is not None:
        group.join_fork_servers()
    try:
        measured = _run(command, env, group)
    finally:
        if group is not None:
            group.close()
    return measured


def _run(command: list, env, group: CpuGroup | None) -> Measured:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # In its group from the start, before it forks anything.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                               preexec_fn=None if group is None else lambda: group.join(os.getpid()))
    peak = [0]
    ticks: dict[int, int] = {}   # last CPU ticks seen, per process of the tree
    done = threading.Event()

    def sample():
        servers: list[int] = []
        for tick in itertools.count():
            if done.wait(0.05):
                return
            if tick % 20 == 0:   # a server started by the run is found within a second
                servers = _fork_servers()
            peak[0] = max(peak[0], _grader_rss(process.pid))
            for p in _tree(process.pid, servers):
                ticks[p] = max(ticks.get(p, 0), _cpu_ticks(p))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    process.wait()
    done.set()
    sampler.join()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = max(reaped, sum(ticks.values()) / os.sysconf("SC_CLK_TCK"))
    if group is not None:
        return Measured(seconds, group.seconds(), peak[0] / 2**20, "cgroup", sampled)
    return Measured(seconds, sampled, peak[0] / 2**20, cpu_sampled=sampled)
