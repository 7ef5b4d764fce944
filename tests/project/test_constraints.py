"""The constraints files agree with pyproject.toml: constraints.txt pins every dependency at a
version it allows (CI and the images install from it), and constraints-oldest.txt pins each
at exactly the lower bound pyproject claims (CI's second run installs from it)."""
from __future__ import annotations

import re
import sys

import pytest

from grading_helpers import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:>=\s*([0-9][^,;\s]*))?\s*(?:;\s*(.+))?$")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^;\s]*)\s*(?:;\s*(.+))?$")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text: str) -> tuple[int, ...]:
    """A release's numbers, without trailing zeros (1.24 and 1.24.0 are one version)."""
    parts = [int(part) for part in re.findall(r"\d+", text)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def declared() -> dict[str, str]:
    """Each dependency of the package and its extras -> its lower bound."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for line in [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]:
        match = REQUIREMENT.match(line.strip())
        assert match and match.group(2), f"{line!r} in pyproject.toml has no lower bound"
        found[_name(match.group(1))] = match.group(2)
    return found


def pins(name: str) -> dict[str, list[tuple[str, str | None]]]:
    """A constraints file's exact pins: package -> [(version, marker)]."""
    found: dict[str, list] = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = PIN.match(line)
            assert match, f"{name}: {line!r} is not an exact pin"
            found.setdefault(_name(match.group(1)), []).append((match.group(2), match.group(3)))
    return found


@pytest.mark.parametrize("package", sorted(declared()))
def test_constraints_pin_each_dependency_at_a_version_pyproject_allows(package):
    pinned = pins("constraints.txt")
    assert package in pinned, f"constraints.txt does not pin {package}"
    for version, _ in pinned[package]:
        assert _version(version) >= _version(declared()[package]), (package, version)


@pytest.mark.parametrize("package", sorted(declared()))
def test_the_oldest_constraints_pin_each_dependency_at_its_lower_bound(package):
    pinned = pins("constraints-oldest.txt")
    assert [_version(v) for v, _ in pinned.get(package, [])] == [_version(declared()[package])], \
        f"constraints-oldest.txt must pin {package}=={declared()[package]}, the lower bound in pyproject.toml"


def test_both_images_and_the_zip_install_the_grader_with_the_pinned_versions():
    """setup.sh gives its pip the constraints.txt beside it; each image stage that runs it
    copies constraints.txt there (the Gradescope zip ships it: tests/lms/test_lms_package.py)."""
    setup = (ROOT / "lms" / "setup.sh").read_text()
    assert '-c "$SOURCE/constraints.txt"' in setup
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [line for line in text.splitlines() if line.startswith("RUN") and "setup.sh" in line]
    folders = [re.search(r"bash (\S+)/setup\.sh", line).group(1) for line in runs]
    copies = [line for line in text.splitlines() if line.startswith("COPY") and "constraints.txt" in line]
    assert len(runs) == 2 and all(any(c.rstrip("/").endswith(folder) and "setup.sh" in c for c in copies)
                                  for folder in folders), (runs, copies)
