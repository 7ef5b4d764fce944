"""Batch throughput: `grader grade` with one and two workers, against executing the same
notebooks alone with a fresh nbclient kernel each, sequentially, measured in the same run.
The bare runs are not sandboxed: the batch's hostile notebooks run there as this user, each
in a temporary folder. `--ordinary` grades only correct and mistaken notebooks, as a class
mostly is.

Each batch is measured twice: as the course-like notebooks are (they import matplotlib.pyplot,
which a bare kernel pays for each time and the grader's fork server once) and NumPy-only (the
same notebooks without their plotting lines, measure.numpy_only), the fairer comparison.
`--kinds` picks one; `--runs N` measures each N times and prints the median ratio.
The grader runs with one worker, with two, and with its default (one more than the cores:
a worker waiting on its kernel leaves its core to the others).
Prints, for each, submissions per second, its ratio to the bare execution, CPU seconds
per submission (the whole process tree, kernels included, counted by a cgroup where the
benchmark runs as root, else sampled: see measure.py) and the grader's peak memory.

    python benchmarks/batch.py [--count 40] [--ordinary] [--kinds numpy,course] [--runs 1]
    python benchmarks/batch.py --memory 100,1000   # the grader's peak memory against batch size
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import measure

from grader.batch.pool import default_workers

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ["hostile_os_exit.ipynb", "hostile_sys_exit.ipynb", "hostile_huge_output.ipynb",
           "sandbox_process_flood.ipynb", "sandbox_fake_results.ipynb", "sandbox_thread_output.ipynb"]
BARE = """
import sys, tempfile, nbformat
from pathlib import Path
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
for path in sorted(Path(sys.argv[1]).glob("*")):
    try:
        nb = nbformat.read(path, as_version=4) if path.suffix == ".ipynb" else None
    except Exception:
        continue
    if nb is None:
        continue
    try:
        with tempfile.TemporaryDirectory() as cwd:
            NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=5,
                           resources={"metadata": {"path": cwd}}).execute()
    except (DeadKernelError, Exception):
        pass
"""


KINDS = {"course": "as the course's notebooks are, importing matplotlib.pyplot",
         "numpy": "NumPy-only: the same notebooks without their plotting lines"}


def mixed_batch(folder: Path, count: int, ordinary: bool = False, numpy_only: bool = False) -> int:
    """Good, broken and hostile notebooks (only correct and mistaken ones if `ordinary`),
    numbered so every file is its own submission; without their plotting if `numpy_only`."""
    pool = sorted(p for p in (ROOT / "submissions").glob("*.ipynb") if p.name != "blank_template.ipynb" or not ordinary)
    pool += sorted(p for p in (ROOT / "tests" / "fixtures").glob("*.ipynb")
                   if p.name.startswith(("correct_", "mistake_")) or not ordinary and (
                       p.name.startswith(("returns_", "transposed_", "reordered_", "modifies_")) or p.name in HOSTILE))
    if not ordinary:
        pool.append(ROOT / "tests" / "fixtures" / "not_json.ipynb")
    for i in range(count):
        source = pool[i % len(pool)]
        target = folder / f"s{i:03d}_{source.name}"
        try:
            measure.numpy_only(source, target) if numpy_only else shutil.copy(source, target)
        except (ValueError, KeyError, TypeError, AttributeError):   # not a notebook to strip: as it is
            shutil.copy(source, target)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--ordinary", action="store_true", help="only correct and mistaken notebooks")
    parser.add_argument("--kinds", default="numpy,course", help="which notebooks: numpy, course or both")
    parser.add_argument("--runs", type=int, default=1, help="measure each kind this many times; the median ratio")
    parser.add_argument("--memory", help="SMALL,LARGE: grade ordinary batches of both sizes with two workers and "
                                         "print the grader's peak memory of each and their ratio")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "GRADER_RUN_ID"}
    if args.memory:
        memory_against_size([int(n) for n in args.memory.split(",")], env)
        return
    for kind in args.kinds.split(","):
        ratios: dict[str, list[float]] = {}
        for run in range(args.runs):
            print(f"{kind} ({KINDS[kind]}), run {run + 1}:", flush=True)
            for workers, ratio in one_run(args.count, args.ordinary, kind == "numpy", env).items():
                ratios.setdefault(workers, []).append(ratio)
        if args.runs > 1:
            print(f"{kind}: median ratio to bare of {args.runs} runs: " +
                  ", ".join(f"{w} {statistics.median(r):.2f}" for w, r in ratios.items()), flush=True)


def one_run(count: int, ordinary: bool, numpy_only: bool, env: dict) -> dict[str, float]:
    """Bare sequential execution, then the grader with one worker, two and its default, on one
    batch; prints each and returns the grader's ratio to bare for each."""
    with tempfile.TemporaryDirectory() as scratch:
        batch = Path(scratch) / "batch"
        batch.mkdir()
        n = mixed_batch(batch, count, ordinary, numpy_only)
        bare = measure.run([sys.executable, "-c", BARE, str(batch)], env)
        grader = shutil.which("grader") or "grader"
        modes = {}
        for workers in (1, 2, None):
            out = Path(scratch) / f"out{workers}"
            chosen = ["--workers", str(workers)] if workers else []
            label = f"--workers {workers}" if workers else f"default ({default_workers()} workers)"
            modes[label] = measure.run([grader, "grade", str(batch), "-o", str(out), *chosen,
                                        "--cell-timeout", "5", "--force"], env)
    print(f"  submissions: {n} ({'correct and mistaken' if ordinary else 'good, broken and hostile'})")
    print(f"  bare nbclient, sequential: {n / bare.seconds:.2f} submissions/s, "
          f"{bare.cpu_seconds / n:.2f} CPU s per submission ({bare.cpu_counted})")
    for workers, m in modes.items():
        print(f"  grader grade {workers}: {n / m.seconds:.2f} submissions/s, "
              f"ratio to bare {bare.seconds / m.seconds:.2f}, {m.cpu_seconds / n:.2f} CPU s per submission "
              f"({m.cpu_counted}), "
              f"grader peak {m.peak_grader_mib:.0f} MiB", flush=True)
    return {workers: bare.seconds / m.seconds for workers, m in modes.items()}


def memory_against_size(sizes: list[int], env: dict) -> None:
    """The grader's peak memory (main process and workers, kernels not counted) for ordinary
    batches of each size: it should not grow with the batch."""
    peaks = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            batch = Path(scratch) / "batch"
            batch.mkdir()
            mixed_batch(batch, n, ordinary=True)
            m = measure.run([shutil.which("grader") or "grader", "grade", str(batch), "-o", str(Path(scratch) / "out"),
                             "--workers", "2", "--cell-timeout", "5"], env)
            peaks[n] = m.peak_grader_mib
            print(f"{n} submissions: {n / m.seconds:.2f} submissions/s, grader peak {m.peak_grader_mib:.0f} MiB",
                  flush=True)
    small, large = min(sizes), max(sizes)
    print(f"peak memory ratio, {large} to {small} submissions: {peaks[large] / peaks[small]:.2f}")


if __name__ == "__main__":
    main()
