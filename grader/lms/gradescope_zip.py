"""The Gradescope autograder zip: `grader lms package gradescope [--assignment SPEC] -o autograder.zip`.

Gradescope builds the autograder's image from a zip holding `setup.sh` and `run_autograder` at
its root: it unpacks the zip into /autograder/source, runs setup.sh there once as root, and
copies run_autograder to /autograder/run_autograder, which it runs for each submission
(Gradescope's autograder specifications). Ours holds:

    setup.sh, run_autograder                 the project's lms/ scripts
    constraints.txt                          the dependencies' versions CI tested, which setup.sh installs
    attention_grader-VERSION-py3-none-any.whl    the grader, which is not on PyPI
    assignment.toml                          the course's spec, when --assignment names one
    support/mytorch/*.py (say)               its [support] modules, where the spec names them
    sheet.npz (say)                          its own sheet data, the .npz files its fixed_data names

The wheel is built from the project's source, so the command runs from a checkout of the
project (an editable install, or an install from a local folder that still exists).
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from grader.errors import SubmissionError
from grader.course.spec import builtin_dir, builtin_names, load_assignment, spec_text

DISTRIBUTION = "attention-grader"
SCRIPTS = ("setup.sh", "run_autograder")
SOURCES = ("pyproject.toml", "README.md", "grader", "reference", "templates")   # what the wheel is built from
# The versions of the dependencies CI tested: an image rebuilt mid-term gets the same ones.
CONSTRAINTS = "constraints.txt"
SPEC_NAME = "assignment.toml"   # where grader lms gradescope looks for the course's spec


def project_root() -> Path:
    """The project's source folder: the one this grader was imported from, else the local
    folder pip installed it from; a SubmissionError when neither is a checkout."""
    candidates = [Path(__file__).resolve().parents[2]]
    try:
        origin = json.loads(metadata.distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
    except metadata.PackageNotFoundError:
        origin = {}
    url = urlparse(str(origin.get("url", "")))
    if url.scheme == "file":
        candidates.append(Path(unquote(url.path)))
    for root in candidates:
        if all((root / name).exists() for name in (*SOURCES, CONSTRAINTS)) and \
                all((root / "lms" / s).is_file() for s in SCRIPTS):
            return root
    raise SubmissionError("grader lms package builds the grader's wheel from the project's source: run it from a "
                          "checkout of attention-grader (pip install -e .)")


def build_wheel(root: Path, folder: Path) -> Path:
    """The grader's wheel, built by pip from a copy of the sources it needs, so that the
    checkout gets no build folder and the wheel nothing else."""
    copy = folder / "source"
    copy.mkdir()
    for name in SOURCES:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    # With the build backend installed here, no network is needed; else (or when it cannot make
    # a wheel, as setuptools before 70.1 cannot without the wheel package) pip fetches one into
    # an isolated build environment.
    tries = ([["--no-build-isolation"]] if importlib.util.find_spec("setuptools") else []) + [[]]
    for isolation in tries:
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "--quiet",
                               "-w", str(folder / "wheel"), str(copy)], capture_output=True, text=True)
        wheels = sorted((folder / "wheel").glob("attention_grader-*.whl"))
        if done.returncode == 0 and len(wheels) == 1:
            return wheels[0]
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    why = next((line for line in lines if line.lower().startswith("error")), lines[-1] if lines else "no wheel")
    raise SubmissionError(f"building the grader's wheel failed: {why}")


def course_files(requested: str | None) -> list[tuple[str, bytes]]:
    """The spec to ship, checked as the grader will read it, its support modules and its
    fixed_data files, each as (name in the zip, bytes): at the same place beside the spec as in
    the course's folder, so that the spec finds them there. None of them for the default assignment."""
    if not requested:
        return []
    assignment = load_assignment(requested)   # a SpecError names what is wrong, before anything is written
    if requested in builtin_names():
        return [(SPEC_NAME, builtin_dir().joinpath(f"{requested}.toml").read_bytes())]
    support = assignment.support.files if assignment.support else ()
    # The bytes the spec was checked with, never the file read again.
    return [(SPEC_NAME, spec_text(Path(requested)).encode("utf-8")),
            *((f.shipped_as, f.data) for f in support if f.shipped_as),
            *((f.shipped_as, f.data) for f in assignment.sheet_files)]


def _add(archive: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16   # a regular file with these permissions
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def gradescope_zip(output: Path, requested: str | None) -> list[str]:
    """Write the autograder zip to `output` (replaced whole, or not at all); returns its members."""
    course = course_files(requested)
    root = project_root()
    with tempfile.TemporaryDirectory(prefix="attention-grader-package-") as folder:
        wheel = build_wheel(root, Path(folder))
        partial = Path(folder) / "autograder.zip"
        with zipfile.ZipFile(partial, "w") as archive:
            for script in SCRIPTS:
                _add(archive, script, (root / "lms" / script).read_bytes(), 0o755)
            _add(archive, wheel.name, wheel.read_bytes(), 0o644)
            _add(archive, CONSTRAINTS, (root / CONSTRAINTS).read_bytes(), 0o644)
            for name, data in course:
                _add(archive, name, data, 0o644)
            members = archive.namelist()
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(partial), str(output))
    return members
