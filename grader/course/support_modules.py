"""A course's support modules: the files of its own package (`mytorch/activation.py`,
`mytorch/utils.py`) that homework written inside that package imports, shipped with the spec.

The spec's `[support]` table names them (`path`: a folder or a list of `.py` files, relative
to the spec's folder; `package`: the package they form, if any). They are read once, when the
spec is, and checked here; each kernel gets its own read-only copy of these bytes (kernel.py,
launcher.py), never the course's folder, and the grader never counts them as the
student's code: they are not in the notebook, and the harness skips a function they define.
"""
from __future__ import annotations

import importlib.machinery
import keyword
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SpecError
from grader.intake.source_scan import imported_modules, matches
from grader import syntax_tree

MAX_SUPPORT_BYTES = 1024 * 2**10
MAX_SUPPORT_FILES = 200
KEYS = ("package", "path")
# Folders of compiled copies a course's checkout may hold beside its modules: never shipped.
SKIPPED_FOLDERS = ("__pycache__",)
# The names the kernel itself must import as they are installed: the harness and the wire
# format need these, and the grader is never importable there.
RESERVED = ("grader", "numpy", "IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "tornado")


@dataclass(frozen=True)
class SupportFile:
    shipped_as: str   # where it is, relative to the spec's folder (how `lms package` ships it)
    module_path: str  # where the kernel finds it, relative to the course folder: mytorch/activation.py
    data: bytes


@dataclass(frozen=True)
class Support:
    package: str | None
    files: tuple[SupportFile, ...]

    def top_level_names(self) -> list[str]:
        """The names the kernel can import them under: the package, or each top-level module."""
        if self.package:
            return [self.package]
        return sorted({_module_name(f.module_path).split(".")[0] for f in self.files})

    def file_names(self) -> set[str]:
        """The modules' file names (activation.py): an upload's files of these names are the course's."""
        return {Path(f.module_path).name for f in self.files}

    def write(self, folder: str) -> None:
        """The kernel's copy, in `folder` (the grader's own): readable by every user, the
        kernel's one included, and writable by none but the grader's user (which removes it
        afterwards; the sandbox keeps the kernel from writing it even as that user)."""
        os.chmod(folder, 0o755)
        for file in self.files:
            target = os.path.join(folder, file.module_path)
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            with open(target, "xb") as out:
                out.write(file.data)
            os.chmod(target, 0o444)


def _module_name(module_path: str) -> str:
    parts = Path(module_path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _files_of(entry: str, spec_folder: Path, where: str) -> list[tuple[Path, str, str]]:
    """(real path, path relative to the spec's folder as given, path relative to `entry`) of
    each file `entry` names, checked to lie in the spec's folder tree once every link is resolved."""
    if not isinstance(entry, str) or not entry or Path(entry).is_absolute():
        raise SpecError(f"{where}: path must be a folder or .py file relative to the spec's folder, not {entry!r:.80}")
    given = spec_folder / entry
    if not os.path.lexists(given):
        raise SpecError(f"{where}: {entry} does not exist")
    real = Path(os.path.realpath(given))
    if not _inside(real, spec_folder):
        raise SpecError(f"{where}: {entry} is not inside the spec's folder ({spec_folder})")
    if real.is_file():
        return [(real, os.path.normpath(entry), real.name)]
    if not real.is_dir():
        raise SpecError(f"{where}: {entry} is neither a file nor a folder")
    found = []
    for here, folders, files in os.walk(real):   # a linked folder is not entered
        folders[:] = sorted(d for d in folders if d not in SKIPPED_FOLDERS)
        for name in sorted(files):
            path = Path(here) / name
            target = Path(os.path.realpath(path))
            if not _inside(target, spec_folder):
                raise SpecError(f"{where}: {path.relative_to(spec_folder)} is a link out of the spec's folder")
            relative = str(path.relative_to(real))
            found.append((target, os.path.normpath(os.path.join(entry, relative)), relative))
        for name in folders:
            if os.path.islink(Path(here) / name):
                raise SpecError(f"{where}: {(Path(here) / name).relative_to(spec_folder)} is a linked folder")
    return found


def _check_name(name: str, where: str, forbidden: tuple[str, ...]) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise SpecError(f"{where}: {name!r:.60} is not a Python module name")
    if matches(name, forbidden):
        raise SpecError(f"{where}: {name!r} is a library the spec's policy forbids")
    if name in RESERVED or name in sys.stdlib_module_names or name in sys.builtin_module_names:
        raise SpecError(f"{where}: {name!r} would hide the module the kernel needs under that name")
    # Installed where the kernel would find it, not in the folder the grader was started from
    # (`python -m` puts that first), where a course's own package may well be.
    installed = [p for p in sys.path if p and os.path.realpath(p) != os.path.realpath(os.getcwd())]
    if importlib.machinery.PathFinder.find_spec(name, installed) is not None:
        raise SpecError(f"{where}: {name!r} would hide the installed module of that name")


def _check_source(file: SupportFile, where: str, forbidden: tuple[str, ...]) -> None:
    try:
        tree = syntax_tree.parse(file.data.decode("utf-8"), file.shipped_as)
    except UnicodeDecodeError:
        raise SpecError(f"{where}: {file.shipped_as} is not UTF-8 text") from None
    except SyntaxError as exc:
        raise SpecError(f"{where}: {file.shipped_as}, line {exc.lineno}: {exc.msg}") from None
    for line, module in imported_modules(tree):
        # The kernel cannot import a forbidden library, the course's modules included: keep the
        # library out of the module, or out of [policy] forbidden, which then allows it to all.
        if hit := matches(module, forbidden):
            raise SpecError(f"{where}: {file.shipped_as}, line {line}, imports {hit}, which [policy] forbidden "
                            "lists: the kernel could not import it")


def read_support(table, spec_folder: Path, where: str, forbidden: tuple[str, ...]) -> Support:
    """The `[support]` table's modules, read and checked, or a one-line SpecError."""
    where = f"{where}: [support]"
    if not isinstance(table, dict):
        raise SpecError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    package = table.get("package")
    if package is not None:
        if not isinstance(package, str):
            raise SpecError(f"{where}: package must be a module name")
        _check_name(package, f"{where} package", forbidden)
    paths = table.get("path")
    if paths is None:
        raise SpecError(f"{where}: missing path (a folder or a list of .py files, relative to the spec's folder)")
    spec_folder = Path(os.path.realpath(spec_folder))
    entries = [paths] if isinstance(paths, str) else paths if isinstance(paths, list) and paths else None
    if entries is None:
        raise SpecError(f"{where}: path must be a folder or a list of .py files")
    files: dict[str, SupportFile] = {}
    total = 0
    for entry in entries:
        for real, shipped_as, relative in _files_of(entry, spec_folder, where):
            if real.suffix != ".py":
                raise SpecError(f"{where}: {shipped_as} is not a .py file")
            module_path = str(Path(package or "", relative))
            if module_path == "__init__.py":
                raise SpecError(f"{where}: {shipped_as} makes a package: name it with package = ...")
            if module_path in files:
                raise SpecError(f"{where}: two files would be {module_path}")
            with open(real, "rb") as source:
                data = source.read(MAX_SUPPORT_BYTES + 1)
            total += len(data)
            if total > MAX_SUPPORT_BYTES or len(files) >= MAX_SUPPORT_FILES:
                raise SpecError(f"{where}: too large: more than {MAX_SUPPORT_BYTES // 2**10} KiB or "
                                f"{MAX_SUPPORT_FILES} files in all")
            files[module_path] = SupportFile(shipped_as, module_path, data)
    if package and f"{package}/__init__.py" not in files:
        files[f"{package}/__init__.py"] = SupportFile("", f"{package}/__init__.py", b"")   # a regular package
    support = Support(package, tuple(files[k] for k in sorted(files)))
    for file in support.files:
        _check_source(file, where, forbidden)
    if not package:
        for name in support.top_level_names():
            _check_name(name, f"{where} module", forbidden)
    return support
