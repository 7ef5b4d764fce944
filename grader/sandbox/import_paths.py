"""Where the kernel's interpreter can import from, found in the grader process without importing
anything: the sandbox puts stubs over the forbidden libraries and every copy of the grader
found there.

A kernel can append any folder it can read to sys.path, so its own search path is not enough:
the roots also hold the grader's user site folder, the site folders of every Python
installation the kernel sees (the base interpreter's, even for a venv made without them; the
distribution's dist-packages and /usr/local's, under /usr, which the kernel always sees), the
standard library folders, the folders .pth files add, and the folders setuptools' editable
installs map module names to (their finder, not sys.path, names those).
"""
from __future__ import annotations

import ast
import functools
import glob
import os
import re
import site
import sys
from importlib.machinery import all_suffixes
from grader import syntax_tree

# Prefixes of the installations the kernel sees besides its own interpreter's: the system's
# (launcher.SYSTEM binds all of /usr).
SYSTEM_PREFIXES = ("/usr", "/usr/local")
# Inside a prefix: the standard library and site folders of any Python version.
SITE_PATTERNS = ("lib*/python*", "lib*/python*/site-packages", "lib*/python*/dist-packages")
EDITABLE_FINDER = re.compile(r"\bimport\s+(__editable__\w*finder)\b")
DISTRIBUTION = re.compile(r"^attention[-_]grader-[^/]*\.(dist-info|egg-info)$", re.IGNORECASE)
# A copy of the grader's reference, whatever the package holding it is called.
REFERENCE_FILES = ("attention.py", "mistakes.py")


def _folder(path: str) -> str | None:
    return os.path.realpath(path) if path and os.path.isdir(path) else None


def _pth_entries(site_folder: str) -> tuple[list[str], dict[str, list[str]]]:
    """What the .pth files of a site folder add: folders, and editable modules' locations."""
    folders: list[str] = []
    mapped: dict[str, list[str]] = {}
    for pth in sorted(glob.glob(os.path.join(glob.escape(site_folder), "*.pth"))):
        try:
            lines = open(pth, encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                for finder in EDITABLE_FINDER.findall(line):
                    for name, location in _editable_mapping(os.path.join(site_folder, finder + ".py")).items():
                        mapped.setdefault(name, []).append(location)
            elif folder := _folder(os.path.join(site_folder, line)):
                folders.append(folder)
    return folders, mapped


def pth_folders(site_folders: list[str]) -> list[str]:
    """The folders the .pth files of these site folders put on the search path."""
    return [folder for site_folder in site_folders for folder in _pth_entries(site_folder)[0]]


def _editable_mapping(finder_file: str) -> dict[str, str]:
    """The MAPPING (top-level name -> folder or file) of a setuptools editable finder, read
    from its source: importing it would run the installation's code in the grader."""
    try:
        tree = syntax_tree.parse(open(finder_file, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else \
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and target.id == "MAPPING" and value is not None:
            try:
                mapping = ast.literal_eval(value)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}
    return {}


def interpreter_prefixes() -> list[str]:
    return sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p})


@functools.lru_cache(maxsize=1)
def search() -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """(every import root, editable installs' (name, locations)); looked up once per run:
    the installation does not change while it grades."""
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else ""
    roots: list[str] = [f for entry in [*sys.path, user_site] if (f := _folder(entry))]
    for prefix in [*interpreter_prefixes(), *SYSTEM_PREFIXES]:
        for pattern in SITE_PATTERNS:
            roots += [f for found in sorted(glob.glob(os.path.join(glob.escape(prefix), pattern)))
                      if (f := _folder(found))]
    mapped: dict[str, list[str]] = {}
    for root in list(dict.fromkeys(roots)):
        folders, editable = _pth_entries(root)
        roots += folders
        for name, locations in editable.items():
            mapped.setdefault(name, []).extend(locations)
    return (tuple(dict.fromkeys(roots)),
            tuple((name, tuple(dict.fromkeys(locations))) for name, locations in sorted(mapped.items())))


def import_roots() -> list[str]:
    return list(search()[0])


def module_paths(module: str) -> list[str]:
    """Every package folder or module file the kernel could import as `module`."""
    return list(_module_paths(module))


@functools.lru_cache(maxsize=None)
def _module_paths(module: str) -> tuple[str, ...]:
    parts = module.split(".")
    roots, editable = search()
    bases = [os.path.join(root, *parts) for root in roots]
    for name, locations in editable:
        if name == parts[0]:
            for location in locations:
                stem = location[:-len(".py")] if location.endswith(".py") else location
                bases.append(os.path.join(stem, *parts[1:]))
    found = {os.path.realpath(c) for base in bases for c in [base, *(base + s for s in all_suffixes())]
             if os.path.exists(c)}
    return tuple(sorted(found))


@functools.lru_cache(maxsize=1)
def grader_copies() -> tuple[str, ...]:
    """Every copy of the grader in the import roots, whatever it is called: a package or
    `reference` folder holding the reference's files, an installed distribution's top-level
    packages, and a root that is itself a source tree or unpacked sdist of the grader."""
    found: set[str] = set(module_paths("grader"))
    roots, editable = search()
    for _, locations in editable:
        for location in locations:
            if _holds_reference(location):
                found.add(os.path.realpath(location))
    for root in roots:
        if _is_source_tree(root):
            found.add(root)
            continue
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(root, entry)
            if DISTRIBUTION.match(entry):
                found |= _installed_packages(root, path)
            elif _holds_reference(path):
                found.add(os.path.realpath(path))
    return tuple(sorted(found))


def _holds_reference(folder: str) -> bool:
    """A copy of the reference (`folder` is one) or a package holding one (`folder/reference`);
    a folder that is no package (a site folder inside a standard library root) holds none."""
    def is_reference(candidate: str) -> bool:
        return all(os.path.isfile(os.path.join(candidate, f)) for f in REFERENCE_FILES)
    nested = os.path.join(folder, "reference")
    return is_reference(folder) or os.path.isfile(os.path.join(folder, "__init__.py")) and is_reference(nested)


def _is_source_tree(root: str) -> bool:
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8", errors="replace") as f:
            project = f.read(4096)
    except OSError:
        return False
    return bool(re.search(r'^name\s*=\s*["\']attention[-_]grader["\']', project, re.MULTILINE))


def _installed_packages(root: str, distribution: str) -> set[str]:
    """The top-level packages and modules an installed distribution of the grader put in `root`."""
    names: set[str] = set()
    for listing in ("top_level.txt", "RECORD", "installed-files.txt"):
        try:
            lines = open(os.path.join(distribution, listing), encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            first = line.split(",", 1)[0].strip().replace("\\", "/").split("/", 1)[0]
            if first and not first.startswith(".") and not DISTRIBUTION.match(first) and "__pycache__" != first:
                names.add(first)
    # Packages only: a top-level module file it lists is its editable finder or similar, which
    # the kernel's own start may import.
    return {os.path.realpath(p) for name in names if os.path.isdir(p := os.path.join(root, name))}
