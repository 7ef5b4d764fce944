"""Every setting, declared once with its type, default and help; the CLI and the settings
table of docs/settings.md are both derived from this list."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    help: str
    commands: tuple = ("check", "grade", "lms")
    # False for settings that only say where output goes or how a batch runs; every other
    # setting can change a result, so a batch regrades when it changes.
    shapes_result: bool = True
    # A limit on one submission's kernel: part of Limits, the only settings that reach the
    # kernel and the sandbox; `in_spec` ones may also be set in a spec's [limits] table.
    limit: bool = False
    in_spec: bool = True
    # The smallest value accepted, for a number that must not be negative but may be 0.
    minimum: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def validated(self, value: Any) -> Any:
        """`value` as this setting's type, or a ValueError saying in a few words what is wrong:
        a number must be a number (not a quoted one, nor true/false) and a limit positive."""
        if self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    (self.type is int and not isinstance(value, int)):
                raise ValueError(f"must be {'an integer' if self.type is int else 'a number'}, not {value!r}"[:120])
            if isinstance(value, float) and not math.isfinite(value) or (self.limit and value <= 0):
                raise ValueError(f"must be a positive number, not {value!r}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"must be at least {self.minimum:g}, not {value!r}")
            return self.type(value)
        if self.type is bool and not isinstance(value, bool):
            raise ValueError(f"must be true or false, not {value!r}"[:120])
        return value

    def from_text(self, text: str) -> Any:
        """The command line's conversion: the declared type, then the same checks as a spec."""
        try:
            value = self.type(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{self.flag} must be {'an integer' if self.type is int else 'a number'}, "
                                             f"not {text!r}") from None
        try:
            return self.validated(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{self.flag} {exc}") from None


# The seed students know: `grader check` uses it; `grade` and `lms` draw secret ones (seeds.py).
PUBLIC_SEED = 20261122

# Each setting is one field below: its name, its type (the annotation), its default and its
# help (setting()); Limits holds the limits on one submission's kernel, the only settings
# that reach the kernel and the sandbox (their `in_spec` ones a spec's [limits] may set too),
# and Settings adds every other. SETTINGS, the command line and docs/settings.md come from them.


def setting(default: Any, help: str, commands: tuple = ("check", "grade", "lms"), shapes_result: bool = True,
            in_spec: bool = True, minimum: float | None = None) -> Any:
    """A field of Limits or Settings with the rest of its declaration (see Setting)."""
    return field(default=default, metadata={"help": help, "commands": commands, "shapes_result": shapes_result,
                                            "in_spec": in_spec, "minimum": minimum})


@dataclass(frozen=True)
class Limits:
    """What one submission's kernel may do and use: all that reaches the kernel and the sandbox."""
    cell_timeout: float = setting(30.0, 'seconds one notebook cell may run before it is interrupted')
    interrupt_grace: float = setting(5.0,
            'CPU seconds a cell or call may use after its interrupt before the kernel is stopped (4 times as long'
            ' on the clock while it waits without computing); the notebook then runs again in a new kernel '
            'without that cell')
    notebook_timeout: float = setting(300.0, 'seconds the whole notebook may run')
    call_timeout: float = setting(10.0, 'seconds one call of a student function may run')
    probe_timeout: float = setting(120.0,
            "seconds all calls of one submission's functions may take together; calls past it are not made and "
            'their checks fail')
    startup_timeout: float = setting(60.0, "seconds a kernel and the grader's code in it may take to start")
    output_limit: int = setting(1000000, 'characters of output the whole notebook may print; the rest is discarded')
    cell_output_limit: int = setting(200000, 'characters of output one cell may print; the rest is discarded')
    sandbox: bool | None = setting(None,
            'isolate the kernel (limits, namespaces, cgroups, unprivileged user); when omitted, as far as the '
            'machine allows it; --sandbox requires all of it and stops with exit 3 where the machine cannot give '
            'it; --no-sandbox runs the kernel as a plain subprocess', in_spec=False)
    fork_server: bool = setting(True,
            'start each kernel by forking a warm parent that has already imported ipykernel, numpy and '
            'matplotlib, into the same sandbox a fresh kernel gets; where that sandbox or the server is not '
            'available, kernels start fresh and the result says why', shapes_result=False, in_spec=False)
    memory_limit: int = setting(2048, 'MiB of memory one submission may use')
    max_processes: int = setting(64, 'processes one submission may run at once')
    cpu_limit: float = setting(600.0, "seconds of CPU time one submission's kernel may use")
    cpu_cores: float = setting(1.0,
            "cores one submission's processes may keep busy together (a cgroup CPU quota), so that a neighbour "
            'graded at the same time keeps its share')
    folder_limit: int = setting(256,
            "MiB the kernel's folder may hold (its home, working and temporary folder, and its /tmp, /var/tmp and"
            ' /dev/shm, which lie inside it); writing more fails with "No space left on device"')


@dataclass(frozen=True)
class Settings(Limits):
    """Every setting of a run: the limits, then what only the grader process reads."""
    assignment: str | None = setting(None,
            'built-in assignment name (see `grader assignments`) or path to a TOML spec; when omitted, `rows` '
            "(`check` alone follows a notebook's metadata `grader.assignment` naming a built-in)")
    seed: int = setting(PUBLIC_SEED,
            'seed of the randomized inputs (any size, such as the 128-bit seeds of grading), recorded in the '
            "staff's result so a run can be replayed and shown to students only when it is this public one; when "
            'omitted, `check` uses it while `grade` derives a secret one for each submission from a secret kept '
            "in the output folder and the submission's bytes, and `lms` draws one per run", minimum=0)
    json: Path | None = setting(None, 'write the result as JSON to this path', commands=('check',), shapes_result=False)
    html: Path | None = setting(None, 'write the self-contained HTML report to this path',
            commands=('check',), shapes_result=False)
    watch: bool = setting(False, 'grade again each time the file is saved, printing only what changed (Ctrl-C stops)',
            commands=('check',), shapes_result=False)
    staff: bool = setting(False, "show hidden checks' messages (teaching staff view)", commands=('check', 'grade'))
    workers: int | None = setting(None,
            'submissions graded at once, each in its own kernel (none: one more than the number of cores)',
            commands=('grade',), shapes_result=False)
    overrides: Path | None = setting(None,
            'CSV of staff overrides (student, score or points, reason), applied to grades.csv and the gradebook '
            'exports and kept in OUTDIR for later runs', commands=('grade',), shapes_result=False)
    lms_assignment: str | None = setting(None,
            "the assignment's column in the Canvas gradebook export, as Canvas names it (e.g. 'Homework 3 "
            "(1234)'; none: the assignment's title)", commands=('grade',), shapes_result=False)
    force: bool = setting(False, 'regrade submissions whose results are up to date',
            commands=('grade',), shapes_result=False)
    scheduler: str | None = setting(None,
            "the address of an existing Dask cluster's scheduler to grade on instead of local workers: "
            'tls://HOST:PORT with the --tls-* files, or tcp://127.0.0.1:PORT on this machine',
            commands=('grade',), shapes_result=False)
    connect_timeout: float = setting(30.0, 'seconds to wait for the Dask cluster given by --scheduler',
            commands=('grade',), shapes_result=False)
    tls_ca_file: Path | None = setting(None,
            "the Dask cluster's CA certificate (PEM), which every scheduler, worker and client certificate of the"
            ' cluster is signed by', commands=('grade',), shapes_result=False)
    tls_cert: Path | None = setting(None, "this machine's certificate (PEM) for the Dask cluster, signed by its CA",
            commands=('grade',), shapes_result=False)
    tls_key: Path | None = setting(None, 'the private key (PEM) of --tls-cert',
            commands=('grade',), shapes_result=False)
    insecure_scheduler: bool = setting(False,
            "send work to an unencrypted --scheduler address that is not this machine's loopback (whoever reaches"
            ' it can run code on the workers): only on a network the staff alone reach',
            commands=('grade',), shapes_result=False)
    root: Path | None = setting(None,
            "the platform's folder (none: /autograder for gradescope, /grade for prairielearn)",
            commands=('lms',), shapes_result=False)

    @property
    def limits(self) -> Limits:
        """The settings that reach the kernel."""
        return Limits(**{f.name: getattr(self, f.name) for f in fields(Limits)})


_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "Path": Path}


def _declared(f, limit: bool) -> Setting:
    """A field's Setting: its type is the annotation's, `X | None` read as X."""
    kind = _TYPES[str(f.type).split(" | ")[0]]
    return Setting(f.name, kind, f.default, limit=limit, **f.metadata)


_LIMIT_NAMES = {f.name for f in fields(Limits)}
SETTINGS: tuple[Setting, ...] = tuple(_declared(f, f.name in _LIMIT_NAMES) for f in fields(Settings))
BY_NAME = {s.name: s for s in SETTINGS}
# Settings an assignment spec may set in its [limits] table; the command line still wins.
SPEC_SETTINGS = tuple(s.name for s in SETTINGS if s.limit and s.in_spec)


def validated_limits(limits: dict, where: str) -> dict:
    """A spec's [limits] table, whose keys the spec's schema has already held to
    SPEC_SETTINGS, each value checked against its setting; a ValueError names the first key
    whose value is of the wrong type."""
    checked = {}
    for key, value in limits.items():
        try:
            checked[key] = BY_NAME[key].validated(value)
        except ValueError as exc:
            raise ValueError(f"{where}: limits.{key} {exc}") from None
    return checked


def default_text(s: Setting) -> str:
    """A default as the help and the settings table say it; an unset switch is decided by the
    machine (only `sandbox` is one)."""
    if s.type is bool:
        return {True: "on", False: "off", None: "where available"}[s.default]
    return str(s.default)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option defaults to None on the command line, so an explicit value can be told
    from the declared default (which a spec's [limits] may replace)."""
    for s in SETTINGS:
        if command not in s.commands:
            continue
        shown = f" (default: {default_text(s)})"
        if s.type is bool:
            parser.add_argument(s.flag, dest=s.name, action=argparse.BooleanOptionalAction, default=None,
                                help=s.help + shown)
        else:
            parser.add_argument(s.flag, dest=s.name, type=s.from_text if s.type in (int, float) else s.type,
                                default=None, metavar=s.type.__name__.upper(),
                                help=s.help + (shown if s.default is not None else ""))


def explicit_values(ns: argparse.Namespace) -> dict:
    """The settings the command line gave explicitly."""
    return {s.name: getattr(ns, s.name) for s in SETTINGS if getattr(ns, s.name, None) is not None}


def settings_from(explicit: dict, spec_limits: dict | None = None) -> Settings:
    """Declared defaults, then a spec's [limits], then what the command line gave."""
    chosen = {s.name: s.default for s in SETTINGS}
    chosen.update({k: v for k, v in (spec_limits or {}).items() if k in SPEC_SETTINGS})
    chosen.update(explicit)
    return Settings(**chosen)


def from_namespace(ns: argparse.Namespace, spec_limits: dict | None = None) -> Settings:
    return settings_from(explicit_values(ns), spec_limits)


def markdown_table() -> str:
    rows = ["| option | type | default | commands | spec `[limits]` | what it does |",
            "| --- | --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        default = default_text(s) if s.type is bool else "none" if s.default is None else f"`{s.default}`"
        in_spec = f"`{s.name}`" if s.name in SPEC_SETTINGS else ""
        rows.append(f"| `{s.flag}` | {s.type.__name__} | {default} | {', '.join(s.commands)} | {in_spec} | {s.help} |")
    return "\n".join(rows)
