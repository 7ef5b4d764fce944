"""Find the submissions in notebooks, .py files, folders and zip archives, the student each
belongs to, from the naming of LMS exports, and the output folder each gets."""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from .loader import SubmissionError, one_line

SUFFIXES = (".ipynb", ".py")
MAX_ZIP_FILES = 5000
MAX_ZIP_BYTES = 1024 * 2**20
MAX_MEMBER_BYTES = 50 * 2**20
MAX_LABEL_CHARS = 64

# The export naming of each LMS, matched whatever the case (Canvas writes "late" or "LATE").
CANVAS = re.compile(r"^(?P<name>[A-Za-z0-9]+)(?:_late)?_(?P<id>\d+)_(?P<submission>\d+)_.+$", re.IGNORECASE)
MOODLE = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_file_?$", re.IGNORECASE)
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Identity:
    """Who a file belongs to, as an LMS export's naming says."""
    student: str
    name: str = ""            # Canvas's "lastfirst", Moodle's full name; else ""
    lms: str = ""             # canvas | moodle | gradescope | "" (not an export's naming)
    submission: int | None = None   # Canvas's submission id: a later submission has a larger one


@dataclass(frozen=True)
class Submission:
    path: Path                 # the file to grade (an archive's member: its extracted copy)
    source: str                # where it came from: the input file, or the archive's path / the member's name
    student: str
    folder: str                # its own folder in the output (see output_name)
    problem: str | None = None  # why it cannot be graded at all, e.g. a damaged archive member
    identity: Identity | None = None

    @property
    def name(self) -> str:
        """The file's name as shown in results, reports and the CSV."""
        return printable(PurePath(self.source).name)


def printable(text: str) -> str:
    """Text any report can show: undecodable bytes of a file name and control characters
    become replacement marks instead of failing a write later."""
    text = os.fsencode(text).decode("utf-8", "replace")
    return "".join(c if c.isprintable() else "\N{REPLACEMENT CHARACTER}" for c in text)


def output_name(label: str, source: str, digits: int = 12) -> str:
    """A folder name that no input can steer: the label cut down to letters, digits, '.', '_'
    and '-' (never leading with a dot, so never '.', '..' or a hidden folder), then '-' and a
    hash of the source path. The hash keeps two sources apart however alike their labels, and
    since no batch-level file (grades.csv, summary.html, .submissions) ends in such a tail,
    no folder can be one of them."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).lstrip(".")[:MAX_LABEL_CHARS] or "submission"
    return f"{safe}-{hashlib.sha256(os.fsencode(source)).hexdigest()[:digits]}"


def lms_identity(path: PurePath) -> Identity | None:
    """Who an LMS export's naming says this path belongs to, if it does. The folder an LMS
    made for a student decides before any file name inside it, which the student chose: a
    file named like another student's Canvas download stays its uploader's."""
    for parent in path.parents:
        match = MOODLE.match(parent.name)
        if match:
            return Identity(match["id"], match["name"].strip(), "moodle")
        match = GRADESCOPE.match(parent.name)
        if match:
            return Identity(match["id"], "", "gradescope")
    match = CANVAS.match(path.name)
    if match:
        return Identity(match["id"], match["name"], "canvas", int(match["submission"]))
    return None


def lms_student(path: PurePath) -> str | None:
    """The student id an LMS export's naming gives this path, if any."""
    identity = lms_identity(path)
    return identity.student if identity else None


def identity_of(path: PurePath) -> Identity:
    """Canvas: name_userid_submissionid_file; Moodle: Full Name_12345_assignsubmission_file_/...;
    Gradescope export: submission_<id>/...; anything else: the file stem as the id."""
    return lms_identity(path) or Identity(path.stem)


def student_of(path: PurePath) -> str:
    return identity_of(path).student


def _open_zip(archive: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(archive)
    except Exception as exc:  # noqa: BLE001 - a foreign file can fail zipfile in many ways
        raise SubmissionError(f"{archive.name} is not a readable zip archive ({one_line(exc)})") from None


def safe_extract(archive: Path, into: Path) -> list[tuple[PurePosixPath, Path, str | None]]:
    """Extract only notebooks and .py files; refuse path traversal and links; cap size and count.
    Returns (member name, extracted path, why it could not be extracted or None) per member;
    raises SubmissionError when the archive as a whole is unusable."""
    with _open_zip(archive) as zf:
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
            try:
                # Read the whole member first: a damaged one (bad CRC, unsupported method,
                # encrypted) fails here, before anything is written.
                with zf.open(member) as source:
                    data = source.read(MAX_MEMBER_BYTES + 1)[:MAX_MEMBER_BYTES]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                # The member's own date, so that which of a student's files is newest survives
                # the extraction (the duplicate rule reads it: grader/gradebook.py).
                with contextlib.suppress(ValueError, OverflowError, OSError):
                    stamp = time.mktime((*member.date_time, 0, 0, -1))
                    os.utime(target, (stamp, stamp))
                extracted.append((name, target, None))
            except Exception as exc:  # noqa: BLE001 - one damaged member is that member's error only
                extracted.append((name, target, f"{archive.name}: {name} cannot be extracted ({one_line(exc)})"))
        return extracted


def unpacked(archive: Path, unpack_into: Path) -> list[tuple[str, Path, Identity, str | None]]:
    """(source, path, identity, problem) for each notebook in the archive, extracted into a
    folder of the archive's own, so same-named archives of two students stay apart. A member
    is the student's whom its own path names, else whom the archive's path names."""
    source = os.path.abspath(archive)
    try:
        members = safe_extract(archive, unpack_into / output_name(archive.stem, source))
    except SubmissionError as exc:
        return [(source, archive, identity_of(archive), str(exc))]
    owner = lms_identity(archive)
    return [(f"{source}/{name}", path, lms_identity(archive / name) or owner or Identity(name.stem), problem)
            for name, path, problem in sorted(members, key=lambda m: m[0])]


def candidate_files(path: Path, unpack_into: Path) -> list[Path]:
    """The files under an input path, leaving out checkpoints and the archives this batch
    unpacked (when OUTDIR sits inside an input folder)."""
    if not path.is_dir():
        return [path]
    unpacked_here = unpack_into.resolve()
    return sorted(p for p in path.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts
                  and unpacked_here not in p.resolve().parents)


def collect(paths: list[Path], unpack_into: Path) -> tuple[list[Submission], list]:
    """The submissions, and the student ids that more than one of them claims."""
    found = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise SubmissionError(f"no such file or folder: {path}")
        for p in candidate_files(path, unpack_into):
            if p.suffix == ".zip":
                found.extend(unpacked(p, unpack_into))
            elif p.suffix in SUFFIXES:
                found.append((os.path.abspath(p), p, identity_of(p), None))
    submissions, sources, folders = [], set(), set()
    for source, path, identity, problem in found:
        if source in sources:  # the same file named twice, or listed twice in an archive
            continue
        sources.add(source)
        folder = output_name(identity.student, source)
        if folder in folders:  # two sources whose short hashes agree: the full hash parts them
            folder = output_name(identity.student, source, digits=64)
        folders.add(folder)
        identity = Identity(printable(identity.student), printable(identity.name), identity.lms, identity.submission)
        submissions.append(Submission(path, source, identity.student, folder, problem, identity))
    claims: dict[str, list[str]] = {}
    for s in submissions:
        claims.setdefault(s.student, []).append(printable(s.source))
    duplicates = [(student, files) for student, files in claims.items() if len(files) > 1]
    return submissions, duplicates
