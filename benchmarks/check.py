"""Seconds per notebook for `grader check`, against executing the same notebook alone with
a fresh nbclient kernel, measured in the same run. Prints the ratio (grader / bare run).
After the first check, the fork server is warm, as it is for a student's next check.

It also grades the worked solution against the built-in `rows` assignment's spec and against
the same assignment written as a course would, every convention inline in its spec (the
built-in tables of reference/conventions.toml copied under each function), both as spec files
in one folder, and prints that ratio too: a convention from a course's TOML costs what a
built-in one does. (A spec file, unlike a built-in's name, is also hidden from the kernel:
both sides pay that alike.)

Each notebook is checked as it is (it imports matplotlib.pyplot, which a bare kernel pays for
each time and the fork server once) and NumPy-only (measure.numpy_only); `--kinds` picks one.

    python benchmarks/check.py [--repeat 3] [--kinds numpy,course] [NOTEBOOK ...]
"""
import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

import measure

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "submissions" / "worked_solution.ipynb", ROOT / "submissions" / "mistake_softmax_axis.ipynb",
           ROOT / "tests" / "fixtures" / "samples" / "columns_sheet_003.ipynb",
           ROOT / "tests" / "fixtures" / "samples" / "qkv_correct.ipynb"]
BARE = ("import sys, nbformat\nfrom nbclient import NotebookClient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "NotebookClient(nb, kernel_name='python3', allow_errors=True, timeout=30).execute()\n")


def inline_spec(builtin: str) -> str:
    """The built-in assignment's spec with each function's convention written inline, as a
    course's spec would have it (the built-ins' parameter names are the conventions' own)."""
    tables = {}
    text = (ROOT / "reference" / "conventions.toml").read_text()
    for match in re.finditer(r"^\[conventions\.(\w+)\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S):
        tables[match[1]] = match[2].strip()
    spec = (ROOT / "reference" / "assignments" / f"{builtin}.toml").read_text()
    blocks = spec.split("[[functions]]")
    out = [blocks[0]]
    for block in blocks[1:]:
        name = re.search(r'^convention = "(\w+)"$', block, re.M)[1]
        block = re.sub(r'^(convention|params) = .*$\n', "", block, flags=re.M)
        out.append(f"[[functions]]{block.rstrip()}\n\n[functions.convention]\n{tables[name]}\n\n")
    return "".join(out)


def spec_against_builtin(repeat: int) -> None:
    worked = ROOT / "submissions" / "worked_solution.ipynb"
    with tempfile.TemporaryDirectory() as folder:
        spec, named = Path(folder) / "rows-inline.toml", Path(folder) / "rows.toml"
        spec.write_text(inline_spec("rows"))
        named.write_text((ROOT / "reference" / "assignments" / "rows.toml").read_text())
        check = [sys.executable, "-m", "grader.cli", "check", str(worked), "--assignment"]
        builtin, inline = [], []
        for _ in range(repeat):
            builtin.append(measure.run([*check, str(named)]))
            inline.append(measure.run([*check, str(spec)]))
    b, i = (statistics.median(m.seconds for m in runs) for runs in (builtin, inline))
    bc, ic = (statistics.median(m.cpu_seconds for m in runs) for runs in (builtin, inline))
    print(f"built-in conventions:    {b:.2f} s, {bc:.2f} CPU s per check; the same conventions inline in a spec: "
          f"{i:.2f} s, {ic:.2f} CPU s")
    # CPU time is what a busy machine shifts least: the same work costs the same CPU.
    print(f"ratio spec / built-in:   {i / b:.2f} (wall), {ic / bc:.2f} (CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--kinds", default="numpy,course", help="which notebooks: numpy, course or both")
    args = parser.parse_args()
    for kind in args.kinds.split(","):
        with tempfile.TemporaryDirectory() as folder:
            notebooks = args.notebooks
            if kind == "numpy":
                notebooks = [Path(folder) / f"{i}_{nb.name}" for i, nb in enumerate(args.notebooks)]
                for nb, target in zip(args.notebooks, notebooks):
                    measure.numpy_only(nb, target)
            print(f"{kind} notebooks:")
            compare(notebooks, args.repeat)
    spec_against_builtin(args.repeat)


def compare(notebooks: list[Path], repeat: int) -> None:
    grader, bare = [], []
    for _ in range(repeat):
        for nb in notebooks:
            # Interleaved, so drift on a shared machine hits both alike.
            bare.append(measure.run([sys.executable, "-c", BARE, str(nb)]))
            grader.append(measure.run([sys.executable, "-m", "grader.cli", "check", str(nb)]))
    g, b = (statistics.median(m.seconds for m in runs) for runs in (grader, bare))
    gc, bc = (statistics.median(m.cpu_seconds for m in runs) for runs in (grader, bare))
    print(f"notebooks: {len(notebooks)} x {repeat} runs (medians; CPU {grader[0].cpu_counted})")
    print(f"bare nbclient execution: {b:.2f} s per notebook, {bc:.2f} CPU s")
    print(f"grader check:            {g:.2f} s per notebook, {gc:.2f} CPU s, "
          f"peak {max(m.peak_grader_mib for m in grader):.0f} MiB")
    print(f"ratio grader / bare:     {g / b:.2f}")
    print(f"first grader check of the run (it starts the fork server when none is running): "
          f"{grader[0].seconds:.2f} s, {grader[0].cpu_seconds:.2f} CPU s")


if __name__ == "__main__":
    main()
