"""Find the submissions in notebooks, .py files, folders and zip archives, and the student
each belongs to, from the naming of LMS exports."""
from __future__ import annotations

import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .loader import SubmissionError

SUFFIXES = (".ipynb", ".py")
MAX_ZIP_FILES = 5000
MAX_ZIP_BYTES = 1024 * 2**20
MAX_MEMBER_BYTES = 50 * 2**20

CANVAS = re.compile(r"^(?P<name>[A-Za-z0-9]+)(?:_LATE)?_(?P<id>\d+)_\d+_.+$")
MOODLE = re.compile(r"^.+_(?P<id>\d+)_assignsubmission_file_?$")
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$")


@dataclass(frozen=True)
class Submission:
    path: Path
    student: str
    folder: str          # unique folder name in the output


def student_of(path: Path) -> str:
    """Canvas: name_userid_submissionid_file; Moodle: Full Name_12345_assignsubmission_file_/...;
    Gradescope export: submission_<id>/...; anything else: the file stem."""
    match = CANVAS.match(path.name)
    if match:
        return match["id"]
    for parent in path.parents:
        for pattern in (MOODLE, GRADESCOPE):
            match = pattern.match(parent.name)
            if match:
                return match["id"]
    return path.stem


def safe_extract(archive: Path, into: Path) -> list[Path]:
    """Extract only notebooks and .py files; refuse path traversal and links; cap size and count."""
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile:
        raise SubmissionError(f"{archive.name} is not a readable zip archive") from None
    with zf:
        members = zf.infolist()
        if len(members) > MAX_ZIP_FILES:
            raise SubmissionError(f"{archive.name} holds more than {MAX_ZIP_FILES} files")
        if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
        extracted = []
        for member in members:
            name = PurePosixPath(member.filename)
            is_link = stat.S_ISLNK(member.external_attr >> 16)
            if member.is_dir() or is_link or name.suffix not in SUFFIXES or member.file_size > MAX_MEMBER_BYTES:
                continue
            if name.is_absolute() or ".." in name.parts or "__MACOSX" in name.parts:
                continue
            target = into.joinpath(*name.parts)
            if into.resolve() not in target.resolve().parents:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as source, open(target, "wb") as sink:
                sink.write(source.read(MAX_MEMBER_BYTES + 1)[:MAX_MEMBER_BYTES])
            extracted.append(target)
        return extracted


def collect(paths: list[Path], unpack_into: Path) -> tuple[list[Submission], list]:
    """The submissions, and the student ids that more than one of them claims."""
    files = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise SubmissionError(f"no such file or folder: {path}")
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts)
        else:
            found = [path]
        for p in found:
            if p.suffix == ".zip":
                files.extend(sorted(safe_extract(p, unpack_into / p.stem)))
            elif p.suffix in SUFFIXES:
                files.append(p)
    seen: dict[str, list[Path]] = {}
    submissions = []
    for p in files:
        student = student_of(p)
        seen.setdefault(student, []).append(p)
        n = len(seen[student])
        submissions.append(Submission(p, student, student if n == 1 else f"{student}-{n}"))
    duplicates = [(s, [str(p) for p in ps]) for s, ps in seen.items() if len(ps) > 1]
    return submissions, duplicates
