"""Assignment specs: a course's variant of the assignment as a TOML file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from grader.reference.sheets import FIXED_DATA

from grader.course.check_rules import CHECK_RULES
from grader.errors import SpecError
from grader.calling.conventions import CONVENTIONS, Convention, parse_convention
from grader.calling.returns import Tolerance
from grader.settings import SPEC_SETTINGS, validated_limits
from grader.course.support_modules import Support, read_support
from grader.course.sheet_data import CourseSheet, SheetFile, SheetFiles, is_course_sheet, read_sheet
from grader.toml_text import load_toml

DEFAULT_FORBIDDEN = ("torch", "tensorflow", "jax", "flax", "keras", "scipy.special", "sklearn",
                     "mxnet", "paddle", "transformers")
PENALTIES = ("zero_function", "flag")
MAX_SPEC_BYTES = 1024 * 2**10


# Every key a spec may have, table by table: a misspelt one (`[tolerence]`, `point = 3`)
# is an error naming it, never silently ignored.
SCHEMA = {
    "": ("name", "title", "functions", "tolerance", "policy", "limits", "lms", "support"),
    "functions": ("name", "convention", "params", "aliases", "fixed_data", "points", "skip", "hidden"),
    "tolerance": ("rtol", "atol"),
    "policy": ("forbidden", "penalty"),
    "lms": ("hidden_visibility",),
    "limits": SPEC_SETTINGS,
}
TABLES = ("tolerance", "policy", "lms", "limits")


def _known_keys(table, allowed: tuple, where: str) -> dict:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: must be a table")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(allowed)})")
    return table


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    convention: Convention
    params: tuple[str, ...]
    aliases: tuple[str, ...]
    fixed_data: str | None  # a built-in sheet's name, or the course's own file(s) as the spec gives them
    points: dict            # check kind -> points, in running order
    hidden: frozenset
    sheet: CourseSheet | None = None   # the course's own data, read from its file(s) (sheet_data.py)

    @property
    def symbol(self) -> str:
        """The name the notebook defines: a unit named `Class.method` (a class's backward,
        graded apart from its forward) is the class `Class`."""
        return self.name.split(".", 1)[0]

    @property
    def names(self) -> list[str]:
        return [self.symbol, *self.aliases]


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    functions: tuple[FunctionSpec, ...]
    tolerance: Tolerance
    forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN
    penalty: str = "zero_function"
    source: str = ""
    source_file: str = ""   # the spec's file, when it is not a built-in: kept from the kernel's view
    limits: dict = field(default_factory=dict)
    support: Support | None = None   # the course's own modules the submission may import
    sheet_files: tuple[SheetFile, ...] = ()   # the .npz files its fixed_data names, as read
    # When Gradescope shows students its hidden checks ([lms] hidden_visibility).
    hidden_visibility: str = "after_published"
    builtin: bool = False   # one of reference/assignments/, whose words are its sheets' (H = 1)
    raw: dict = field(default_factory=dict, compare=False)


# Gradescope's visibility settings of a test, for the checks a spec hides (its results format).
HIDDEN_VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


def builtin_dir():
    return resources.files("grader.reference").joinpath("assignments")


def _builtin_texts() -> set[str]:
    return {p.read_text() for p in builtin_dir().iterdir() if p.name.endswith(".toml")}


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in builtin_dir().iterdir() if p.name.endswith(".toml"))


def _convention(raw: dict, name: str, where: str) -> tuple[Convention, tuple[str, ...]]:
    """The function's convention, a built-in one by name or a table inline, and the names of
    its parameters (a built-in one's may be renamed with `params`)."""
    declared = raw.get("convention")
    if isinstance(declared, dict):
        if "params" in raw:
            raise SpecError(f"{where}: {name}: params go inside its inline convention, each with its role")
        conv = parse_convention(declared, f"{name} (inline)", f"{where}: {name}: convention")
        return conv, conv.param_names
    if declared is None:
        raise SpecError(f"{where}: {name}: missing convention (a built-in one's name or a table inline)")
    if not isinstance(declared, str) or declared not in CONVENTIONS:
        raise SpecError(f"{where}: {name}: convention: unknown {declared!r:.60} "
                        f"(built-in: {', '.join(CONVENTIONS)}; or a table inline)")
    conv = CONVENTIONS[declared]
    params = raw.get("params", conv.param_names)
    if not isinstance(params, list | tuple) or not all(isinstance(p, str) and p.isidentifier() for p in params):
        raise SpecError(f"{where}: {name}: params must be a list of parameter names")
    if len(params) != len(conv.params):
        raise SpecError(f"{where}: {name} has {len(params)} params, convention {conv.name} takes {len(conv.params)}")
    return conv, tuple(params)


def _fixed_data(raw: dict, conv: Convention, name: str, where: str, files: SheetFiles):
    """(fixed_data's name, the course's own sheet or None): a built-in sheet by name, checked
    to fit the convention, or the course's own file(s) read for it."""
    fixed = raw.get("fixed_data")
    if is_course_sheet(fixed):
        sheet = read_sheet(fixed, conv, files, f"{where}: {name}")
        return sheet.name, sheet
    if fixed is not None and fixed not in FIXED_DATA:
        raise SpecError(f"{where}: unknown fixed_data {fixed!r:.80} (known: {', '.join(FIXED_DATA)}; or the "
                        "course's own: a .npz file beside the spec)")
    for case in FIXED_DATA[fixed]() if fixed is not None else ():
        misfit = conv.misfit(case)
        if misfit:
            raise SpecError(f"{where}: {name}: fixed_data {fixed!r} does not fit its convention: {misfit}")
    return fixed, None


def _function(raw: dict, where: str, files: SheetFiles) -> FunctionSpec:
    name = raw.get("name") if isinstance(raw, dict) else None
    named = isinstance(name, str) and all(part.isidentifier() for part in name.split(".", 1))
    # A misspelt key is said with the function's name, as every other error of a function is.
    _known_keys(raw, SCHEMA["functions"], f"{where}: {name}" if named else where)
    if not named or not isinstance(name, str):
        raise SpecError(f"{where}: missing or invalid 'name' (a Python function or class name, or "
                        "Class.method)")
    conv, params = _convention(raw, name, where)
    if "." in name and (conv.class_call is None or name.split(".", 1)[1] != conv.class_call.method):
        raise SpecError(f"{where}: {name}: a name Class.method names a class's method graded on its own; its "
                        f"convention's class table must have method = \"{name.split('.', 1)[1]}\"")
    fixed, sheet = _fixed_data(raw, conv, name, where, files)
    points = {kind: rule.default_points for kind, rule in CHECK_RULES.items()
              if rule.applies(conv, fixed is not None)}
    for kind, value in raw.get("points", {}).items():
        if kind not in CHECK_RULES:
            raise SpecError(f"{where}: unknown check {kind!r} (checks: {', '.join(CHECK_RULES)})")
        if not CHECK_RULES[kind].applies(conv, fixed is not None):
            raise SpecError(f"{where}: check {kind!r} does not apply to {name}")
        points[kind] = float(value)
    for kind in raw.get("skip", []):
        points.pop(kind, None)
    hidden = frozenset(raw.get("hidden", []))
    unknown = hidden - set(CHECK_RULES)
    if unknown:
        raise SpecError(f"{where}: unknown hidden check {sorted(unknown)[0]!r}")
    return FunctionSpec(name, conv, params, tuple(raw.get("aliases", [])), fixed, points, hidden, sheet)


def _tolerance(table: dict, where: str) -> Tolerance:
    """Tolerance's own defaults, replaced by what the spec gives."""
    for key, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecError(f"{where}: tolerance.{key} must be a non-negative number, not {value!r}"[:200])
    return Tolerance(**{key: float(value) for key, value in table.items()})


def parse(text: str, source: str, folder: Path | None = None, support: Support | None = None,
          sheet_files: dict[str, bytes] | None = None) -> Assignment:
    """The spec in `text`; `folder` is the spec file's, which its [support] paths and fixed_data
    files are relative to, unless `support` and `sheet_files` give them as they were read there
    (a batch's worker has not the folder)."""
    raw = load_toml(text, source)
    _known_keys(raw, SCHEMA[""], source)
    for table in TABLES:
        _known_keys(raw.get(table, {}), SCHEMA[table], f"{source}: [{table}]")
    functions = raw.get("functions")
    if not functions or not isinstance(functions, list):
        raise SpecError(f"{source}: no [[functions]] to grade")
    policy = raw.get("policy", {})
    penalty = policy.get("penalty", "zero_function")
    if penalty not in PENALTIES:
        raise SpecError(f"{source}: policy.penalty must be one of {', '.join(PENALTIES)}")
    tol = raw.get("tolerance", {})
    try:
        limits = validated_limits(raw.get("limits", {}), source)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    forbidden = tuple(policy.get("forbidden", DEFAULT_FORBIDDEN))
    hidden_visibility = raw.get("lms", {}).get("hidden_visibility", "after_published")
    if hidden_visibility not in HIDDEN_VISIBILITIES:
        raise SpecError(f"{source}: lms.hidden_visibility must be one of {', '.join(HIDDEN_VISIBILITIES)}, "
                        f"not {hidden_visibility!r}"[:300])
    if "support" not in raw:
        support = None
    elif support is None:
        if folder is None:
            raise SpecError(f"{source}: [support] needs a spec file, whose folder holds the modules")
        support = read_support(raw["support"], folder, source, forbidden)
    files = SheetFiles(folder, sheet_files)
    parsed = tuple(_function(f, f"{source}: function {i + 1}", files) for i, f in enumerate(functions))
    return Assignment(
        name=raw.get("name", Path(source).stem), title=raw.get("title", ""),
        functions=parsed, tolerance=_tolerance(tol, source),
        forbidden=forbidden, penalty=penalty, source=source, limits=limits, support=support,
        sheet_files=tuple(files.read.values()), hidden_visibility=hidden_visibility, raw=raw)


def load_assignment(name_or_path: str) -> Assignment:
    if name_or_path in builtin_names():
        path = builtin_dir().joinpath(f"{name_or_path}.toml")
        return replace(parse(path.read_text(), f"{name_or_path} (built-in)"), builtin=True)
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        text = spec_text(path)
        # A built-in shipped as a file (`lms package --assignment rows`) keeps the built-in's words.
        return replace(parse(text, str(path), path.resolve().parent), source_file=str(path.resolve()),
                       builtin=text in _builtin_texts())
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
