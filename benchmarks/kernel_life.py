"""One kernel's life, part by part: its start, each of a notebook's cells, its stop, in CPU
seconds of the grader's process and of the kernel's side (the fork server, the handler, the
launcher, the kernel), against a bare jupyter_client kernel's life with the same cells,
alternately in the same run.

The kernel's side is counted whole by a cgroup v1 cpuacct group (measure.CpuGroup): this
process and the running fork server join it, and every process forked for a kernel is
counted from its fork to its exit. It needs root; elsewhere the script says so and exits.
The cells are those of submissions/worked_solution.ipynb without its plotting lines.

    python benchmarks/kernel_life.py [--lives 20]
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import measure

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.kernel.session import Kernel  # noqa: E402
from grader.settings import Limits  # noqa: E402

PARTS = ("start", "a cell", "stop")


def cells() -> list[str]:
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "worked.ipynb"
        measure.numpy_only(ROOT / "submissions" / "worked_solution.ipynb", target)
        nb = json.loads(target.read_text())
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in nb["cells"] if c["cell_type"] == "code"]
    return [s for s in sources if s.strip()]


class Clock:
    """CPU seconds of this process and of the whole group since the last reading."""

    def __init__(self, group: measure.CpuGroup):
        self.group = group
        self.last = (time.process_time(), group.seconds())

    def lap(self) -> tuple[float, float]:
        now = (time.process_time(), self.group.seconds())
        own, whole = now[0] - self.last[0], now[1] - self.last[1]
        self.last = now
        return own, whole - own


async def grader_life(clock: Clock, sources: list[str]) -> dict:
    laps: dict = {}
    clock.lap()
    kernel = Kernel(Limits())
    await kernel.__aenter__()
    laps["start"] = clock.lap()
    try:
        for source in sources:
            await kernel.run_cell(source, 30)
        laps["cells"] = clock.lap()
    finally:
        await kernel.__aexit__(None, None, None)
    laps["stop"] = clock.lap()
    return laps


async def bare_life(clock: Clock, sources: list[str]) -> dict:
    from jupyter_client.manager import start_new_async_kernel
    laps: dict = {}
    clock.lap()
    with tempfile.TemporaryDirectory() as cwd:
        km, kc = await start_new_async_kernel(kernel_name="python3", cwd=cwd, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
        laps["start"] = clock.lap()
        try:
            for source in sources:
                await kc.execute_interactive(source, timeout=30, output_hook=lambda msg: None)
            laps["cells"] = clock.lap()
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
        laps["stop"] = clock.lap()
    return laps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lives", type=int, default=20, help="kernel lives of each kind, alternately")
    args = parser.parse_args()
    group = measure.CpuGroup.made()
    if group is None:
        sys.exit("kernel_life.py counts the kernel's side with a cgroup v1 cpuacct group: run it as root")
    sources = cells()
    try:
        group.join(os.getpid())
        group.join_fork_servers()
        clock = Clock(group)
        lives: dict[str, list[dict]] = {"grader": [], "bare": []}
        for life in range(args.lives + 1):
            for kind in (("grader", "bare") if life % 2 else ("bare", "grader")):
                laps = asyncio.run((grader_life if kind == "grader" else bare_life)(clock, sources))
                if life:   # the first of each starts what the rest find running (the fork server)
                    lives[kind].append(laps)
    finally:
        group.close()
    print(f"{args.lives} lives of each kind, {len(sources)} cells each (worked_solution.ipynb, NumPy-only); "
          "CPU ms, medians")
    print(f"{'part':<8} {'grader: its process':>20} {'kernel side':>12} {'bare: client':>13} {'kernel':>8} "
          f"{'ratio grader / bare':>20}")
    totals = {}
    for part in PARTS:
        key = "cells" if part == "a cell" else part
        per = len(sources) if part == "a cell" else 1
        row = []
        for kind in ("grader", "bare"):
            own = statistics.median(laps[key][0] for laps in lives[kind]) / per
            side = statistics.median(laps[key][1] for laps in lives[kind]) / per
            row += [own, side]
            totals[kind] = totals.get(kind, 0.0) + (own + side) * per
        ratio = (row[0] + row[1]) / (row[2] + row[3])
        print(f"{part:<8} {row[0] * 1000:>20.1f} {row[1] * 1000:>12.1f} {row[2] * 1000:>13.1f} "
              f"{row[3] * 1000:>8.1f} {ratio:>20.2f}")
    print(f"a whole life: grader {totals['grader'] * 1000:.0f} ms, bare {totals['bare'] * 1000:.0f} ms, "
          f"ratio {totals['grader'] / totals['bare']:.2f}")


if __name__ == "__main__":
    main()
