"""Every setting, declared once with its type, default and help; the CLI and the README's
settings table are both derived from this list."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, make_dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    help: str
    commands: tuple = ("check", "grade")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    Setting("assignment", str, None,
            "built-in assignment name (see `grader assignments`) or path to a TOML spec; "
            "when omitted, the notebook's metadata `grader.assignment`, else `rows`"),
    Setting("seed", int, 20261122, "seed of the randomized inputs; recorded in the result so a run can be replayed"),
    Setting("cell_timeout", float, 30.0, "seconds one notebook cell may run before it is interrupted"),
    Setting("notebook_timeout", float, 300.0, "seconds the whole notebook may run"),
    Setting("call_timeout", float, 10.0, "seconds one call of a student function may run"),
    Setting("output_limit", int, 1_000_000, "characters of output the whole notebook may print; the rest is discarded"),
    Setting("cell_output_limit", int, 200_000, "characters of output one cell may print; the rest is discarded"),
    Setting("json", Path, None, "write the result as JSON to this path", ("check",)),
    Setting("html", Path, None, "write the self-contained HTML report to this path", ("check",)),
    Setting("staff", bool, False, "show hidden checks' messages (teaching staff view)"),
)

Settings = make_dataclass("Settings", [(s.name, s.type, s.default) for s in SETTINGS], frozen=True)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    for s in SETTINGS:
        if command not in s.commands:
            continue
        if s.type is bool:
            parser.add_argument(s.flag, dest=s.name, action="store_true", default=s.default, help=s.help)
        else:
            parser.add_argument(s.flag, dest=s.name, type=s.type, default=s.default,
                                metavar=s.type.__name__.upper(),
                                help=f"{s.help} (default: {s.default})" if s.default is not None else s.help)


def from_namespace(ns: argparse.Namespace) -> "Settings":
    return Settings(**{f.name: getattr(ns, f.name) for f in fields(Settings) if hasattr(ns, f.name)})


def markdown_table() -> str:
    rows = ["| option | type | default | commands | what it does |", "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        default = "off" if s.type is bool else ("none" if s.default is None else f"`{s.default}`")
        rows.append(f"| `{s.flag}` | {s.type.__name__} | {default} | {', '.join(s.commands)} | {s.help} |")
    return "\n".join(rows)
