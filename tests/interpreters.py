"""Real interpreters set up where courses install the grader: a venv made with `python -m venv`
and this checkout's grader installed into it from a wheel, as `pip install .` does."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from grading_helpers import ROOT, expect_slow, own_run_environment

# The interpreter the test suite's interpreter was made from (pyenv's, under /root, here): the
# suite's own where it runs outside a venv, as CI once ran it.
BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
BASE_SITE_PACKAGES = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
    / "site-packages"
# Where the suite's own packages are (ipykernel, nbformat, scipy): the venv's that the README's
# commands make, or the base's where the suite runs without one.
OWN_SITE_PACKAGES = Path(sysconfig.get_path("purelib"))
IN_A_VENV = OWN_SITE_PACKAGES.resolve() != BASE_SITE_PACKAGES.resolve()
# What a kernel imports first: a venv holding its own copy of these makes the kernel import
# them from wherever the venv lies.
KERNEL_PACKAGES = ("IPython", "ipykernel", "ipykernel_launcher.py")


def copy_package(source: Path, target: Path) -> None:
    """A copy of a package folder or module file, hard-linked where it can be (the suite's own
    packages are large, and a test's venv only reads them)."""
    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    if source.is_dir():
        shutil.copytree(source, target, copy_function=link, symlinks=True)
    else:
        link(source, target)


def copy_tracked(target: Path) -> Path:
    """A clean copy of this checkout: the files git does not ignore, as a fresh clone has them
    (a leftover build/ folder would add files the checkout no longer has)."""
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_symlink():   # grader/reference -> ../reference: a link still
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(ROOT / name), target / name)
        elif name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def build_wheel(folder: Path) -> Path:
    """This checkout's grader as a wheel, built from a clean copy of it."""
    source = copy_tracked(folder / "source")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(source)],
                   check=True, capture_output=True)
    return next(folder.glob("attention_grader-*.whl"))


def make_venv(where: Path, wheel: Path, base: Path = BASE_PYTHON, own_copies=KERNEL_PACKAGES,
              system_site_packages: bool = True) -> Path:
    """A venv at `where` made from `base`, with the grader installed from `wheel` and its own
    copy of `own_copies` from the suite's packages; returns its interpreter. With
    `system_site_packages` it sees the suite's packages: the base's, or, where the suite runs
    in a venv of its own, that venv's, named in a .pth file."""
    options = ["--system-site-packages"] if system_site_packages else []
    subprocess.run([str(base), "-m", "venv", *options, "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    # --ignore-installed: a grader installed in the base interpreter must not satisfy this one.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True, capture_output=True, env=interpreter_environment())
    site_packages = site_packages_of(python)
    if system_site_packages and IN_A_VENV:
        (site_packages / "suite-packages.pth").write_text(f"{OWN_SITE_PACKAGES}\n")
    for name in own_copies:
        copy_package(OWN_SITE_PACKAGES / name, site_packages / name)
    return python


def site_packages_of(python: Path) -> Path:
    found = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return Path(found)


def interpreter_environment(**extra: str) -> dict:
    """The environment of a grader run by another interpreter: nothing of this venv's."""
    env = {k: v for k, v in own_run_environment().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    return {**env, **extra}


def run_check(python: Path, notebook: Path, out: Path, *options: str, env: dict | None = None,
              cwd: Path | None = None):
    """`grader check` run by `python` as `python -m grader.cli`, from `cwd` (a folder without a
    grader in it unless given); returns (returncode, stdout, stderr, result or None)."""
    expect_slow()
    done = subprocess.run([str(python), "-m", "grader.cli", "check", str(notebook), "--json", str(out), *options],
                          capture_output=True, text=True, timeout=600, cwd=cwd or tempfile.gettempdir(),
                          env=env or interpreter_environment())
    result = json.loads(out.read_text()) if out.is_file() else None
    return done.returncode, done.stdout, done.stderr, result


def stop_fork_server(python: Path) -> None:
    """Stop the fork servers runs of `python` left (each waits ten minutes for more kernels):
    every server whose hello file names a process of that interpreter. There may be several,
    since a server's folder changes with the state of the installed packages."""
    base = Path(tempfile.gettempdir()) / f"attention-grader-{os.getuid()}"
    for hello in base.glob("*/hello.json"):
        try:
            pid = int(json.loads(hello.read_text())["pid"])
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if command == str(python):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass


def make_venv_without_base(where: Path, wheel: Path, leave_out: tuple[str, ...] = ("scipy",)) -> Path:
    """A venv made without the base's site-packages, as `python -m venv` makes one by default,
    holding the suite's packages but `leave_out` (and the grader, installed from `wheel`): the
    base's own are links (the kernel sees the base's folder), a venv's are copies."""
    python = make_venv(where, wheel, own_copies=(), system_site_packages=False)
    site_packages = site_packages_of(python)
    skipped = (*leave_out, "grader", "attention_grader", "__pycache__", "_distutils_hack", "distutils-precedence",
               "suite-packages")
    for entry in OWN_SITE_PACKAGES.iterdir():
        if entry.name.startswith(skipped) or entry.suffix == ".pth" or (site_packages / entry.name).exists():
            continue
        if IN_A_VENV:
            copy_package(entry, site_packages / entry.name)
        else:
            (site_packages / entry.name).symlink_to(entry)
    return python


def off_path_folder(python: Path) -> Path:
    """A folder the kernel of a venv made without the base's packages sees but does not search:
    the base's site-packages, or inside a venv the suite runs in (whose base holds nothing),
    the venv's own standard library folder, which the base's stands in for on sys.path."""
    if not IN_A_VENV:
        return BASE_SITE_PACKAGES
    return site_packages_of(python).parent
