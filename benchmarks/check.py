"""Seconds per notebook for `grader check`, against executing the same notebook alone with
a fresh nbclient kernel, measured in the same run. Prints the ratio (grader / bare run).
After the first check, the fork server is warm, as it is for a student's next check.

    python benchmarks/check.py [--repeat 3] [NOTEBOOK ...]
"""
import argparse
import statistics
import sys
from pathlib import Path

import measure

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "submissions" / "worked_solution.ipynb", ROOT / "submissions" / "mistake_softmax_axis.ipynb",
           ROOT / "tests" / "fixtures" / "samples" / "columns_sheet_003.ipynb",
           ROOT / "tests" / "fixtures" / "samples" / "qkv_correct.ipynb"]
BARE = ("import sys, nbformat\nfrom nbclient import NotebookClient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "NotebookClient(nb, kernel_name='python3', allow_errors=True, timeout=30).execute()\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    grader, bare = [], []
    for _ in range(args.repeat):
        for nb in args.notebooks:
            # Interleaved, so drift on a shared machine hits both alike.
            bare.append(measure.run([sys.executable, "-c", BARE, str(nb)]))
            grader.append(measure.run([sys.executable, "-m", "grader.cli", "check", str(nb)]))
    g, b = (statistics.median(m.seconds for m in runs) for runs in (grader, bare))
    gc, bc = (statistics.median(m.cpu_seconds for m in runs) for runs in (grader, bare))
    print(f"notebooks: {len(args.notebooks)} x {args.repeat} runs (medians)")
    print(f"bare nbclient execution: {b:.2f} s per notebook, {bc:.2f} CPU s")
    print(f"grader check:            {g:.2f} s per notebook, {gc:.2f} CPU s, "
          f"peak {max(m.peak_grader_mib for m in grader):.0f} MiB")
    print(f"ratio grader / bare:     {g / b:.2f}")
    print(f"first grader check of the run (it starts the fork server when none is running): "
          f"{grader[0].seconds:.2f} s, {grader[0].cpu_seconds:.2f} CPU s")


if __name__ == "__main__":
    main()
