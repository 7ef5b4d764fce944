"""Assignment specs: a course's variant of the assignment as a TOML file."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from grader.reference.sheets import FIXED_DATA

from .checks import CHECKS
from .conventions import CONVENTIONS, Convention
from .returns import Tolerance
from .settings import SPEC_SETTINGS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_FORBIDDEN = ("torch", "tensorflow", "jax", "flax", "keras", "scipy.special", "sklearn",
                     "mxnet", "paddle", "transformers")
PENALTIES = ("zero_function", "flag")
MAX_SPEC_BYTES = 1024 * 2**10


class SpecError(Exception):
    """The spec file is unusable; the message is one line."""


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    convention: Convention
    params: tuple[str, ...]
    aliases: tuple[str, ...]
    fixed_data: str | None
    points: dict            # check kind -> points, in running order
    hidden: frozenset

    @property
    def names(self) -> list[str]:
        return [self.name, *self.aliases]


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    functions: tuple[FunctionSpec, ...]
    tolerance: Tolerance
    forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN
    penalty: str = "zero_function"
    source: str = ""
    limits: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, compare=False)


def builtin_dir():
    return resources.files("grader.reference").joinpath("assignments")


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in builtin_dir().iterdir() if p.name.endswith(".toml"))


def _function(raw: dict, where: str) -> FunctionSpec:
    try:
        name = raw["name"]
        conv = CONVENTIONS[raw["convention"]]
    except KeyError as exc:
        raise SpecError(f"{where}: missing or unknown {exc.args[0]!r} (conventions: {', '.join(CONVENTIONS)})") from None
    params = tuple(raw.get("params", conv.params))
    if len(params) != len(conv.params):
        raise SpecError(f"{where}: {name} has {len(params)} params, convention {conv.name} takes {len(conv.params)}")
    fixed = raw.get("fixed_data")
    if fixed is not None and fixed not in FIXED_DATA:
        raise SpecError(f"{where}: unknown fixed_data {fixed!r} (known: {', '.join(FIXED_DATA)})")
    points = {kind: check.default_points for kind, check in CHECKS.items()
              if check.applies(conv, fixed is not None)}
    for kind, value in raw.get("points", {}).items():
        if kind not in CHECKS:
            raise SpecError(f"{where}: unknown check {kind!r} (checks: {', '.join(CHECKS)})")
        if not CHECKS[kind].applies(conv, fixed is not None):
            raise SpecError(f"{where}: check {kind!r} does not apply to {name}")
        points[kind] = float(value)
    for kind in raw.get("skip", []):
        points.pop(kind, None)
    hidden = frozenset(raw.get("hidden", []))
    unknown = hidden - set(CHECKS)
    if unknown:
        raise SpecError(f"{where}: unknown hidden check {sorted(unknown)[0]!r}")
    return FunctionSpec(name, conv, params, tuple(raw.get("aliases", [])), fixed, points, hidden)


def parse(text: str, source: str) -> Assignment:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid TOML (nested too deeply)") from None
    functions = raw.get("functions")
    if not functions:
        raise SpecError(f"{source}: no [[functions]] to grade")
    policy = raw.get("policy", {})
    penalty = policy.get("penalty", "zero_function")
    if penalty not in PENALTIES:
        raise SpecError(f"{source}: policy.penalty must be one of {', '.join(PENALTIES)}")
    tol = raw.get("tolerance", {})
    limits = raw.get("limits", {})
    unknown = set(limits) - set(SPEC_SETTINGS)
    if unknown:
        raise SpecError(f"{source}: unknown limit {sorted(unknown)[0]!r} (limits: {', '.join(SPEC_SETTINGS)})")
    return Assignment(
        name=raw.get("name", Path(source).stem), title=raw.get("title", ""),
        functions=tuple(_function(f, f"{source}: function {i + 1}") for i, f in enumerate(functions)),
        tolerance=Tolerance(float(tol.get("rtol", 1e-5)), float(tol.get("atol", 1e-8))),
        forbidden=tuple(policy.get("forbidden", DEFAULT_FORBIDDEN)), penalty=penalty, source=source,
        limits=dict(limits), raw=raw)


def load_assignment(name_or_path: str) -> Assignment:
    if name_or_path in builtin_names():
        path = builtin_dir().joinpath(f"{name_or_path}.toml")
        return parse(path.read_text(), f"{name_or_path} (built-in)")
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return parse(spec_text(path), str(path))
    raise SpecError(f"unknown assignment {name_or_path!r}; built-in ones: {', '.join(builtin_names())}")


def spec_text(path: Path) -> str:
    """A spec file's text, or a one-line SpecError: a notebook's metadata may name any file."""
    if not path.is_file():
        raise SpecError(f"no such assignment spec file: {path}")
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES // 2**10} KiB, not an assignment spec")
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not an assignment spec (not UTF-8 text)") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None


DEFAULT_ASSIGNMENT = "rows"


def metadata_assignment(nb) -> str | None:
    """What the notebook's metadata `grader.assignment` asks for, as a short string, or None.
    Only ever a request: see staff_assignment and student_assignment."""
    metadata = nb.metadata.get("grader")
    name = metadata.get("assignment") if isinstance(metadata, dict) else None
    return name[:100] if isinstance(name, str) and name else None


def staff_assignment(requested: str | None) -> Assignment:
    """`grade` and `lms`: the staff's --assignment (or course spec), else rows. A notebook can
    neither choose nor change what it is graded against; a different request in its metadata
    is recorded in the result (`metadata_assignment`)."""
    return load_assignment(requested or DEFAULT_ASSIGNMENT)


def student_assignment(nb, requested: str | None) -> Assignment:
    """`grader check`, run by students on their own notebooks: --assignment, else the metadata
    when it names a built-in (never a file: a notebook never loads a spec), else rows."""
    if requested:
        return load_assignment(requested)
    name = metadata_assignment(nb)
    return load_assignment(name if name in builtin_names() else DEFAULT_ASSIGNMENT)
