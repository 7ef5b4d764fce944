"""A batch on a busy machine grades as on a quiet one: `grader grade` of the same folder, with
the same seed, once as the machine is and once beside BUSY busy processes per core, then
the two compared.

The folder holds copies of the bundled submissions and the test fixtures' notebooks (good,
mistaken and hostile: os._exit, a segfault, a memory bomb, a process flood, output floods),
numbered so that every file is its own submission. Notebooks that only wait out a timeout
(an infinite loop, a cell that ignores its interrupt) are left out unless --long: their
verdict does not depend on the machine, and each costs half a minute.

Prints, for each run: its time, how many kernels died, how many submissions the machine
failed (a grader error, or a batch stopped by a machine fault); then every submission whose
verdict (status, score, each check's status and points, the kinds of its errors) differs
between the runs (an over-size message that a flood's full queue dropped in one run is counted
apart: see flooded()), and whether all agree. Exit status 0 when they all agree and the busy run
lost no kernel and no submission to the machine that the quiet run did not.

    python benchmarks/load_batch.py [--count 256] [--busy 4] [--workers N] [--long]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# Notebooks whose verdict is a timeout: each waits out --cell-timeout or more.
WAITS = ("hostile_ignores_interrupt", "hostile_infinite_loop_cell", "hostile_infinite_loop_function",
         "sandbox_cpu_spinners", "sandbox_sleeps_with_child")
SEED = "20261123"
BUSY_LOOP = "while True: pass"


def pool(long: bool) -> list[Path]:
    notebooks = sorted((ROOT / "submissions").glob("*.ipynb")) + sorted(FIXTURES.glob("*.ipynb"))
    return [p for p in notebooks if long or not p.name.startswith(WAITS)]


def build(folder: Path, count: int, long: bool) -> None:
    sources = pool(long)
    for i in range(count):
        source = sources[i % len(sources)]
        shutil.copy(source, folder / f"s{i:03d}_{source.name}")


def busy(per_core: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(per_core * (os.cpu_count() or 1))]


def grade(folder: Path, out: Path, workers: int | None) -> tuple[float, int, str]:
    """One `grader grade` run; returns (seconds, exit status, its last line of output)."""
    command = [sys.executable, "-m", "grader.cli", "grade", str(folder), "-o", str(out), "--seed", SEED]
    if workers:
        command += ["--workers", str(workers)]
    env = {k: v for k, v in os.environ.items() if k != "GRADER_RUN_ID"}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return time.monotonic() - started, done.returncode, lines[-1] if lines else ""


def results(out: Path) -> dict[str, dict]:
    found = {}
    for path in out.glob("*/result.json"):
        data = json.loads(path.read_text())
        found[data["submission"]] = data
    return found


def verdict(result: dict) -> tuple:
    """What a grading decided: never its timing or its messages' wording, nor whether a flood's
    over-size message reached the grader (see flooded)."""
    return (result["status"], result["score"],
            tuple((c["name"], c["status"], c.get("points")) for c in result["checks"]),
            tuple(e["kind"] for e in result["errors"] if e["kind"] != "output_flood"))


def flooded(result: dict) -> bool:
    """Whether a message over the grader's size limit reached it. The kernel's output socket
    (ZMQ publish-subscribe) drops what its subscriber has not taken once its queue is full: a
    notebook that sends hundreds of megabytes and then one message over the limit has that
    last message delivered when the grader keeps up, and dropped, as if never sent, when a busy
    grader does not. Counted apart from the verdict, which it leaves alone when the flooding
    cell defines nothing later cells need (as in the flood fixture)."""
    return any(e["kind"] == "output_flood" for e in result["errors"])


def deaths(found: dict) -> int:
    return sum(e["kind"] == "kernel_died" for r in found.values() for e in r["errors"])


def machine_failed(found: dict) -> int:
    return sum(any(e["kind"] == "grader_error" for e in r["errors"]) for r in found.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--busy", type=int, default=4, help="busy processes per core beside the second run")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--long", action="store_true", help="also notebooks that wait out a timeout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "batch"
        folder.mkdir()
        build(folder, args.count, args.long)
        runs = {}
        for name in ("quiet", "busy"):
            loops = busy(args.busy) if name == "busy" else []
            try:
                seconds, status, last = grade(folder, Path(scratch) / name, args.workers)
            finally:
                for loop in loops:
                    loop.send_signal(signal.SIGKILL)
                    loop.wait()
            found = results(Path(scratch) / name)
            runs[name] = found
            print(f"{name}: {len(found)}/{args.count} graded in {seconds:.0f} s (exit {status}), "
                  f"{deaths(found)} kernel deaths, {machine_failed(found)} machine errors"
                  + (f", beside {len(loops)} busy processes" if loops else "") + (f"; {last}" if status else ""),
                  flush=True)
        quiet, loaded = runs["quiet"], runs["busy"]
        differ = [name for name in sorted(quiet) if name not in loaded or verdict(quiet[name]) != verdict(loaded[name])]
        for name in differ:
            print(f"  differs: {name}: {verdict(quiet[name])[:2]} quiet, "
                  f"{verdict(loaded[name])[:2] if name in loaded else 'not graded'} busy")
        shed = [name for name in sorted(quiet) if name in loaded and flooded(quiet[name]) != flooded(loaded[name])]
        if shed:
            print(f"  an over-size message reached the grader in one run only (dropped by the kernel's output socket "
                  f"in the other): {len(shed)} submissions, {', '.join(shed[:5])}{' ...' if len(shed) > 5 else ''}")
        agree = not differ and len(quiet) == len(loaded) == args.count
        extra_deaths = deaths(loaded) - deaths(quiet)
        extra_faults = machine_failed(loaded) - machine_failed(quiet)
        print(f"kernel deaths beyond the quiet run's: {extra_deaths}; machine errors beyond it: {extra_faults}; "
              f"every verdict the same: {'yes' if agree else f'no, {len(differ)} differ'}")
        return 0 if agree and extra_deaths <= 0 and extra_faults <= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
