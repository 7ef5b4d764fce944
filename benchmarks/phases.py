"""Where one submission's CPU goes, phase by phase, in a batch worker grading ordinary notebooks.

Grades the ordinary notebooks of `benchmarks/batch.py --ordinary` one after another in this
process, as a batch worker does (`grade_task`, then the result's JSON and its HTML report as
the batch's main process writes them), with the fork server warm. Each notebook has a seed of
its own, as in a batch (`grader/batch/run.py`, `seeded`): what the judging computes from a
seed's cases is then computed for each submission, as a batch's worker computes it, not found
from an earlier one's. Measured per submission:

- the grader: this process's CPU time (all its threads), without a profiler; then split
  into its parts by the shares a second, profiled pass gives each group of modules (a
  profiler slows Python code more than C code, so the shares are approximate);
- the kernel's side: the CPU time of the submission's processes (the fork server's handler,
  the launcher, the kernel), read from /proc by the sandbox (`Sandbox.cpu_used`) when the
  kernel is ready, when the notebook has run, and just before the sandbox is cleaned up;
- where a cpuacct cgroup can be made (measure.CpuGroup, as root): the whole pass counted by it,
  this process and the fork server with everything it forks, which the reads above miss part
  of (the fork server's forks, the kernels' exits); the estimate below then rests on it;
- the baseline, in the same run: executing the same notebooks with bare nbclient, each in a
  fresh kernel (the process tree's CPU time, as `benchmarks/batch.py` measures it).

    python benchmarks/phases.py [--count 24] [--kind numpy]
"""
import argparse
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import measure  # noqa: E402
from batch import BARE, mixed_batch  # noqa: E402

from grader import grade  # noqa: E402
from grader.batch.tasks import grade_task  # noqa: E402
from grader.judging.seeds import fresh_seed, submission_seed  # noqa: E402
from grader.kernel.session import Kernel  # noqa: E402
from grader.report.html import write_html  # noqa: E402
from grader.result import GradeResult  # noqa: E402

# The grader's modules by what they do; the first match of a profiled function's file wins.
GROUPS = [
    ("report: HTML and JSON", ("grader/report/", "jinja2", "markupsafe", "json/")),
    ("judging: probes, reference, comparison, diagnosis", ("grader/judging/", "grader/calling/", "/reference/",
                                                           "numpy")),
    ("sandbox and watchdog: limits, cgroups, folders, cleanup", ("grader/sandbox/",)),
    ("kernel messages: nbclient, jupyter_client, ZMQ, asyncio", ("grader/kernel/", "nbclient", "jupyter_client",
                                                                 "zmq", "asyncio", "tornado", "traitlets",
                                                                 "selectors", "dateutil", "hmac", "uuid")),
    ("reading the notebook, static scan", ("grader/intake/", "nbformat", "fastjsonschema", "jsonschema", "ast")),
]
OTHER = "other (the grading's own flow, the standard library)"


class KernelCpu:
    """The CPU seconds of one submission's kernel processes at each point, read by the grader."""

    def __init__(self):
        self.points: list[dict[str, float]] = []
        self.current: dict[str, float] = {}

    def install(self):
        recorder = self
        enter, describe, leave = Kernel.__aenter__, grade._describe_functions, Kernel.__aexit__

        async def entered(kernel):
            session = await enter(kernel)
            recorder.current = {"ready": kernel._sandbox().cpu_used()}
            return session

        async def described(session, *args, **kw):
            recorder.current["cells run"] = session._sandbox().cpu_used()
            return await describe(session, *args, **kw)

        async def left(kernel, *exc):
            # Before the kernel is shut down: afterwards its processes, and their CPU times, are gone.
            recorder.current["calls made"] = kernel._sandbox().cpu_used()
            recorder.points.append(recorder.current)
            recorder.current = {}
            return await leave(kernel, *exc)

        Kernel.__aenter__, grade._describe_functions, Kernel.__aexit__ = entered, described, left


def grade_all(notebooks: list[Path], out: Path) -> None:
    """Each notebook graded as a batch grades it: with a seed of its own, from a secret of the
    pass's own, so that no pass finds what an earlier one computed for its cases."""
    secret = fresh_seed()
    for path in notebooks:
        content = path.read_bytes()
        row = grade_task(path.name, content, None, {"seed": submission_seed(secret, path.stem, content)})
        folder = out / path.stem
        folder.mkdir()
        (folder / "result.json").write_text(json.dumps(row))
        write_html(GradeResult.from_json(row), folder / "report.html", staff=False)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bare_cpu(folder: Path) -> float:
    before = children_cpu()
    subprocess.run([sys.executable, "-c", BARE, str(folder)], check=True, capture_output=True)
    return children_cpu() - before


def group_of(filename: str) -> str:
    return next((name for name, parts in GROUPS if any(p in filename for p in parts)), OTHER)


def grouped(profile: cProfile.Profile) -> dict[str, float]:
    """Each group's own CPU time; a built-in function's (a C function: `~` as its file) goes
    to the groups of its callers, in the shares each caller spent in it."""
    totals: dict[str, float] = defaultdict(float)
    other: dict[str, float] = defaultdict(float)
    for (filename, line, function), (_, _, tottime, _, callers) in pstats.Stats(profile).stats.items():
        if filename == "~" and callers:
            spent = {caller: edge[2] for caller, edge in callers.items()}
            whole = sum(spent.values()) or 1.0
            shares = [(caller, tottime * seconds / whole) for caller, seconds in spent.items()]
        else:
            shares = [((filename, line, function), tottime)]
        for (where, _, name), seconds in shares:
            group = group_of(where)
            totals[group] += seconds
            if group == OTHER:
                other[f"{where}:{name}"] += seconds
    if os.environ.get("PHASES_OTHER"):
        for name, seconds in sorted(other.items(), key=lambda item: -item[1])[:25]:
            print(f"  {seconds:.3f} {name}")
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--kind", choices=["numpy", "course"], default="numpy",
                        help="NumPy-only notebooks, or as the course's are (importing matplotlib.pyplot)")
    args = parser.parse_args()
    os.environ.pop("GRADER_RUN_ID", None)
    recorder = KernelCpu()
    recorder.install()
    with tempfile.TemporaryDirectory() as scratch:
        batch = Path(scratch) / "batch"
        batch.mkdir()
        mixed_batch(batch, args.count, ordinary=True, numpy_only=args.kind == "numpy")
        notebooks = sorted(batch.glob("*.ipynb"))
        warm = Path(scratch) / "warm"
        warm.mkdir()
        grade_all(notebooks[:2], warm)   # the fork server started and warm, the modules imported
        recorder.points.clear()

        plain = Path(scratch) / "plain"
        plain.mkdir()
        group = measure.CpuGroup.made()   # this process and the fork server, as batch.py counts a run
        if group is not None:
            group.join(os.getpid())
            group.join_fork_servers()
        try:
            cpu, wall = time.process_time(), time.perf_counter()
            grade_all(notebooks, plain)
            grader_cpu = (time.process_time() - cpu) / len(notebooks)
            wall = (time.perf_counter() - wall) / len(notebooks)
            counted = None if group is None else group.seconds() / len(notebooks)
        finally:
            if group is not None:
                group.close()
        points = list(recorder.points)

        profiled = Path(scratch) / "profiled"
        profiled.mkdir()
        profile = cProfile.Profile(time.process_time)   # CPU time: waiting on the kernel costs none
        profile.runcall(grade_all, notebooks, profiled)
        shares = grouped(profile)
        baseline = bare_cpu(batch) / len(notebooks)

    kernel = {
        "kernel start: the handler, the launcher, ipykernel's application and shell, the harness":
            sum(p["ready"] for p in points) / len(points),
        "the notebook's cells": sum(p["cells run"] - p["ready"] for p in points) / len(points),
        "the probe calls": sum(p["calls made"] - p["cells run"] for p in points) / len(points),
    }
    profiled_total = sum(shares.values())
    print(f"{len(notebooks)} ordinary notebooks, one after another in one worker; "
          f"{len(points)} kernels measured; wall {wall:.2f} s per submission")
    print(f"{'where':<90} {'CPU s':>7}")
    for name, seconds in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"{'grader: ' + name:<90} {grader_cpu * seconds / profiled_total:>7.3f}")
    for name, seconds in kernel.items():
        print(f"{'kernel side: ' + name:<90} {seconds:>7.3f}")
    total = grader_cpu + sum(kernel.values())
    print(f"{'in all':<90} {total:>7.3f}")
    if counted is not None:
        # The per-process reads above miss what happens outside those moments: the fork
        # server's forks, the kernels' exits, and whatever ran after the last read.
        print(f"{'in all, counted by a cpuacct cgroup (forks, exits and all, as batch.py counts)':<90} "
              f"{counted:>7.3f}")
        print(f"{'  of which the reads above do not see':<90} {counted - total:>7.3f}")
        total = counted
    print(f"{'bare nbclient, a fresh kernel per notebook (the baseline)':<90} {baseline:>7.3f}")
    print(f"two cores at this CPU per submission: {2 / total:.1f} submissions/s, "
          f"{baseline / total:.1f}x the baseline's sequential rate (CPU-bound estimate)")


if __name__ == "__main__":
    main()
