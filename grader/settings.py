"""Every setting, declared once with its type, default and help; the CLI and the README's
settings table are both derived from this list."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, make_dataclass
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

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


# The seed students know: `grader check` uses it; `grade` and `lms` draw secret ones (seeds.py).
PUBLIC_SEED = 20261122

SETTINGS: tuple[Setting, ...] = (
    Setting("assignment", str, None,
            "built-in assignment name (see `grader assignments`) or path to a TOML spec; when omitted, "
            "`rows` (`check` alone follows a notebook's metadata `grader.assignment` naming a built-in)"),
    Setting("seed", int, PUBLIC_SEED, "seed of the randomized inputs, recorded in every result so a run can be replayed; "
            "when omitted, `check` uses this public one while `grade` draws a secret one per output folder (and per "
            "student) and `lms` one per run"),
    Setting("cell_timeout", float, 30.0, "seconds one notebook cell may run before it is interrupted"),
    Setting("interrupt_grace", float, 5.0, "seconds a cell or call may go on after its interrupt before the kernel "
            "is stopped; the notebook then runs again in a new kernel without that cell"),
    Setting("notebook_timeout", float, 300.0, "seconds the whole notebook may run"),
    Setting("call_timeout", float, 10.0, "seconds one call of a student function may run"),
    Setting("probe_timeout", float, 120.0, "seconds all calls of one submission's functions may take together; "
            "calls past it are not made and their checks fail"),
    Setting("output_limit", int, 1_000_000, "characters of output the whole notebook may print; the rest is discarded"),
    Setting("cell_output_limit", int, 200_000, "characters of output one cell may print; the rest is discarded"),
    Setting("sandbox", bool, True, "isolate the kernel (limits, namespaces, cgroups, unprivileged user) where the "
            "machine allows it; --no-sandbox runs it as a plain subprocess"),
    Setting("memory_limit", int, 2048, "MiB of memory one submission may use"),
    Setting("max_processes", int, 64, "processes one submission may run at once"),
    Setting("cpu_limit", float, 600.0, "seconds of CPU time one submission's kernel may use"),
    Setting("cpu_cores", float, 1.0, "cores one submission's processes may keep busy together (a cgroup CPU quota), "
            "so that a neighbour graded at the same time keeps its share"),
    Setting("folder_limit", int, 256, "MiB the kernel's folder (its home, working and temporary folder) and its "
            "private /tmp, /var/tmp and /dev/shm may each hold; writing more fails with \"No space left on device\""),
    Setting("json", Path, None, "write the result as JSON to this path", ("check",), shapes_result=False),
    Setting("html", Path, None, "write the self-contained HTML report to this path", ("check",), shapes_result=False),
    Setting("staff", bool, False, "show hidden checks' messages (teaching staff view)", ("check", "grade")),
    Setting("workers", int, None, "submissions graded at once, each in its own kernel (none: the number of cores)",
            ("grade",), shapes_result=False),
    Setting("force", bool, False, "regrade submissions whose results are up to date", ("grade",), shapes_result=False),
    Setting("scheduler", str, None, "tcp://HOST:PORT of an existing Dask cluster to grade on instead of local workers",
            ("grade",), shapes_result=False),
    Setting("root", Path, None, "the platform's folder (none: /autograder for gradescope, /grade for prairielearn)",
            ("lms",), shapes_result=False),
)

Settings = make_dataclass("Settings", [(s.name, s.type, s.default) for s in SETTINGS], frozen=True)


# Settings an assignment spec may set in its [limits] table; the command line still wins.
SPEC_SETTINGS = ("cell_timeout", "notebook_timeout", "call_timeout", "output_limit", "cell_output_limit",
                 "memory_limit", "max_processes", "cpu_limit", "cpu_cores", "folder_limit")


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option defaults to None on the command line, so an explicit value can be told
    from the declared default (which a spec's [limits] may replace)."""
    for s in SETTINGS:
        if command not in s.commands:
            continue
        shown = f" (default: {'on' if s.default is True else 'off' if s.default is False else s.default})"
        if s.type is bool:
            parser.add_argument(s.flag, dest=s.name, action=argparse.BooleanOptionalAction, default=None,
                                help=s.help + shown)
        else:
            parser.add_argument(s.flag, dest=s.name, type=s.type, default=None, metavar=s.type.__name__.upper(),
                                help=s.help + (shown if s.default is not None else ""))


def explicit_values(ns: argparse.Namespace) -> dict:
    """The settings the command line gave explicitly."""
    return {s.name: getattr(ns, s.name) for s in SETTINGS if getattr(ns, s.name, None) is not None}


def settings_from(explicit: dict, spec_limits: dict | None = None) -> "Settings":
    """Declared defaults, then a spec's [limits], then what the command line gave."""
    chosen = {s.name: s.default for s in SETTINGS}
    chosen.update({k: v for k, v in (spec_limits or {}).items() if k in SPEC_SETTINGS})
    chosen.update(explicit)
    return Settings(**chosen)


def from_namespace(ns: argparse.Namespace, spec_limits: dict | None = None) -> "Settings":
    return settings_from(explicit_values(ns), spec_limits)


def markdown_table() -> str:
    rows = ["| option | type | default | commands | what it does |", "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        default = ({True: "on", False: "off"}[s.default] if s.type is bool
                   else "none" if s.default is None else f"`{s.default}`")
        rows.append(f"| `{s.flag}` | {s.type.__name__} | {default} | {', '.join(s.commands)} | {s.help} |")
    return "\n".join(rows)
