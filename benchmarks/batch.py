"""Batch throughput: `grader grade` with one and two workers, against executing the same
notebooks alone with a fresh nbclient kernel each, sequentially, measured in the same run.
The bare runs are not sandboxed: the batch's hostile notebooks run there as this user, each
in a temporary folder.
Prints submissions per second for each mode and its ratio to the bare execution.

    python benchmarks/batch.py [--count 40]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def mixed_batch(folder: Path, count: int) -> int:
    """Good, broken and hostile notebooks, numbered so every file is its own submission."""
    pool = sorted((ROOT / "submissions").glob("*.ipynb"))
    pool += sorted(p for p in (ROOT / "tests" / "fixtures").glob("*.ipynb")
                   if p.name.startswith(("correct_", "mistake_", "returns_", "transposed_", "reordered_",
                                         "modifies_")) or p.name in HOSTILE)
    pool.append(ROOT / "tests" / "fixtures" / "not_json.ipynb")
    for i in range(count):
        source = pool[i % len(pool)]
        shutil.copy(source, folder / f"s{i:03d}_{source.name}")
    return count


def timed(command: list, env=None) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "GRADER_RUN_ID"}
    with tempfile.TemporaryDirectory() as scratch:
        batch = Path(scratch) / "batch"
        batch.mkdir()
        n = mixed_batch(batch, args.count)
        bare = timed([sys.executable, "-c", BARE, str(batch)], env)
        grader = shutil.which("grader") or "grader"
        modes = {}
        for workers in (1, 2):
            out = Path(scratch) / f"out{workers}"
            modes[workers] = timed([grader, "grade", str(batch), "-o", str(out), "--workers", str(workers),
                                    "--cell-timeout", "5", "--force"], env)
    print(f"submissions: {n} (good, broken and hostile)")
    print(f"bare nbclient, sequential: {n / bare:.2f} submissions/s")
    for workers, seconds in modes.items():
        print(f"grader grade --workers {workers}: {n / seconds:.2f} submissions/s, "
              f"ratio to bare {bare / seconds:.2f}")


if __name__ == "__main__":
    main()
