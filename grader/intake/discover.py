"""Find the submissions in notebooks, .py files, folders and zip archives, the student each
belongs to, and the output folder each gets.

Whose file it is comes only from names the staff or the LMS made: the path the staff gave,
and, inside a folder the staff gave or an LMS's download zip, the name of each top-level
entry (Canvas's file name, Moodle's or Gradescope's folder, else the entry's own name).
Nothing inside one student's upload (their zip's members, their subfolders) is ever read as
a name: a member named like another student's download stays its uploader's.

Nothing a student uploaded vanishes: an entry of an LMS's download, or a student's archive,
with nothing gradable in it is a row saying so (unless the student has a file graded), and an
LMS's download given inside a folder, where it would be one student's, stops the batch.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import stat
import time
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import Iterable, NamedTuple

from grader.intake.notebook import SubmissionError, link_outside, one_line

SUFFIXES = (".ipynb", ".py")
ARCHIVE = ".zip"
MAX_ZIP_FILES = 5000
MAX_ZIP_BYTES = 1024 * 2**20
MAX_MEMBER_BYTES = 50 * 2**20
MAX_LABEL_CHARS = 64

# The export naming of each LMS, matched whatever the case (Canvas writes "LATE", older
# downloads "late"). Canvas (lib/content_zipper.rb): the student's sortable name, lower-cased
# and cut to word characters (letters and marks of any script, digits, "_": is_canvas_name),
# "LATE" for a late submission, the user id (or "anon_" and the anonymous id when the
# assignment hides names), then the attachment id and the file's own name. Like Canvas's own
# upload of marked files, the first two numbers are the ids.
CANVAS = re.compile(r"^(?P<name>[^\s/\\]+?)_(?P<late>late_)?(?P<id>\d+)_(?P<attachment>\d+)_.+$", re.IGNORECASE)
CANVAS_ANONYMOUS = re.compile(r"^(?P<late>late_)?(?P<id>anon_[A-Za-z0-9]+)_(?P<attachment>\d+)_.+$", re.IGNORECASE)
# Moodle (mod/assign): a folder "Full Name_N_assignsubmission_file" (with a trailing "_" before
# Moodle 4), or, when the teacher turned folders off, "Full Name_N_assignsubmission_file_NAME".
# Moodle turns every "_" of the name into a space, so the name holds none: NAME, which the
# student chose ("x_333_assignsubmission_file_hw.ipynb"), can never move where the id is read.
MOODLE = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_file_?$", re.IGNORECASE)
MOODLE_FLAT = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_file_.+$", re.IGNORECASE)
# Gradescope's export: assignment_<id>_export/submission_<id>/...
GRADESCOPE = re.compile(r"^submission_(?P<id>\d+)$", re.IGNORECASE)
GRADESCOPE_EXPORT = re.compile(r"^assignment_\d+_export$", re.IGNORECASE)
# The LMSs whose downloads say who each submission is (Identity.lms), by these keys; a batch
# writes a gradebook for each that has one (grader/batch/lms_gradebooks.py, GRADEBOOKS).
CANVAS_LMS, MOODLE_LMS, GRADESCOPE_LMS = "canvas", "moodle", "gradescope"
LMS_NAMES = {CANVAS_LMS: "Canvas", MOODLE_LMS: "Moodle", GRADESCOPE_LMS: "Gradescope"}

# The error of an upload that holds nothing the grader reads: its row says why, so a student
# who uploaded only a zip inside a zip, or a PDF, is seen in grades.csv instead of missing.
NESTED_ARCHIVE = ("nothing gradable in the upload: a nested archive (an archive inside a student's archive "
                  "is not opened)")
NO_SUBMISSION_FILE = "nothing gradable in the upload: no notebook (.ipynb) or .py file"


@dataclass(frozen=True)
class Identity:
    """Who a file belongs to, as the names the staff or an LMS made say."""
    student: str
    name: str = ""            # Canvas's "lastfirst", Moodle's full name; else ""
    lms: str = ""             # canvas | moodle | gradescope | "" (not an export's naming)
    attachment: int | None = None   # Canvas's attachment id (the number after the user id)
    # Canvas's "LATE" in the file's name: Canvas's own flag, set where the LMS made the name.
    # Moodle's download names hold only the full name, the participant id and the plugin
    # (mod/assign/classes/downloader.php), Gradescope's only the submission id: theirs stay False.
    late: bool = False


@dataclass(frozen=True)
class Submission:
    path: Path                 # the file to grade (an archive's member: its extracted copy)
    source: str                # where it came from: the input file, or the archive's path / the member's name
    student: str
    folder: str                # its own folder in the output (see output_name)
    problem: str | None = None  # why it cannot be graded at all, e.g. a damaged archive member
    identity: Identity | None = None
    found_as: tuple[int, int] | None = None   # the file's (device, inode) when found: read only if still that file
    nothing_gradable: bool = False   # an upload with nothing to grade: its row is its error (see Found)

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


def named_file(name: str) -> Identity | None:
    """Who an LMS's name for a file (a Canvas download, a flat Moodle download) says it is."""
    match = MOODLE_FLAT.match(name)
    if match:
        return Identity(match["id"], match["name"].strip(), MOODLE_LMS)
    match = CANVAS_ANONYMOUS.match(name)
    if match:
        return Identity(match["id"], "", CANVAS_LMS, int(match["attachment"]), bool(match["late"]))
    match = CANVAS.match(name)
    if match and is_canvas_name(match["name"]):
        # NFC: a name extracted on macOS arrives decomposed (e and a combining mark for é).
        return Identity(match["id"], unicodedata.normalize("NFC", match["name"]), CANVAS_LMS, int(match["attachment"]),
                        bool(match["late"]))
    return None


def is_canvas_name(name: str) -> bool:
    """Canvas keeps only word characters of a name: letters and marks of any script, digits, "_"."""
    return all(c == "_" or unicodedata.category(c)[0] in "LMN" for c in name)


def named_folder(name: str) -> Identity | None:
    """Who an LMS's folder for one student (Moodle's, Gradescope's) says it is."""
    match = MOODLE.match(name)
    if match:
        return Identity(match["id"], match["name"].strip(), MOODLE_LMS)
    match = GRADESCOPE.match(name)
    if match:
        return Identity(match["id"], "", GRADESCOPE_LMS)
    return None


def given_identity(path: PurePath, is_folder: bool = False) -> Identity | None:
    """What a path the staff gave says about whose it is: the outermost of its folders that an
    LMS made for one student, else a file's own LMS name. Outermost: below an LMS's folder,
    every name (a subfolder, the file's own) is the student's, who may name it like another's
    (Mallory X_222_assignsubmission_file_/bobsmith_333_9_hw.ipynb is 222's)."""
    path = PurePath(path)
    for folder in reversed(([path] if is_folder else []) + list(path.parents)):
        found = named_folder(folder.name)
        if found:
            return found
    return None if is_folder else named_file(path.name)


def identity_of(path: PurePath) -> Identity:
    """A file given by the staff: its LMS naming (Canvas name_userid_attachmentid_file; Moodle
    Full Name_N_assignsubmission_file/...; Gradescope submission_<id>/...), else its stem."""
    return given_identity(path) or Identity(PurePath(path).stem)


def student_of(path: PurePath) -> str:
    return identity_of(path).student


def outermost(parts: tuple[str, ...]) -> tuple[str, bool]:
    """(the top-level name that decides whose an entry is, whether it is the file itself),
    looking through Gradescope's export folder, which holds every student's."""
    if len(parts) > 2 and GRADESCOPE_EXPORT.match(parts[0]):
        parts = parts[1:]
    return parts[0], len(parts) == 1


def entry_identity(name: str, is_file: bool) -> Identity:
    """A top-level entry of a folder the staff gave or of an LMS's download: its LMS name,
    else its own name (a file's stem: alice.zip and alice/ are alice's)."""
    if is_file:
        return named_file(name) or Identity(PurePath(name).stem)
    return named_folder(name) or Identity(name)


def is_lms_named(name: str, is_file: bool) -> bool:
    return (named_file(name) if is_file else named_folder(name)) is not None


def member_name(info: zipfile.ZipInfo) -> str:
    """A member's name as its maker wrote it. Without the UTF-8 flag, Python reads the bytes as
    cp437, but Linux's zip (a TA re-zipping a download) writes UTF-8 bytes without the flag:
    such a name is read as UTF-8 when its bytes are valid UTF-8."""
    if info.flag_bits & 0x800:
        return info.filename
    try:
        return info.filename.encode("cp437").decode("utf-8")
    except UnicodeError:
        return info.filename


def within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def resolved(path: Path, boundary: Path | None) -> tuple[Path, str | None]:
    """(the file to read, why it must not be read): a symbolic link is followed only when its
    target stays inside the submission (`boundary`, resolved; None: the file alone, so any
    link leaves it). The file is read later with O_NOFOLLOW (grader/intake/notebook.py), so a link put
    in its place meanwhile is refused, not followed."""
    if not os.path.islink(path):
        return path, None
    real = os.path.realpath(path)
    if boundary is None or not within(real, str(boundary)):
        return path, link_outside(printable(path.name))
    return Path(real), None


def safe_extract(archive: Path, into: Path) -> list[tuple[PurePosixPath, Path, str | None]]:
    """Extract only notebooks, .py files and zip archives; refuse path traversal and links; cap
    size and count. Returns (member name, extracted path, why it could not be extracted or
    None) per member; raises SubmissionError when the archive as a whole is unusable."""
    try:
        zf = zipfile.ZipFile(archive)
    except Exception as exc:  # noqa: BLE001 - a foreign file can fail zipfile in many ways
        raise SubmissionError(f"{archive.name} is not a readable zip archive ({one_line(exc)})") from None
    with zf:
        members = zf.infolist()
        if len(members) > MAX_ZIP_FILES:
            raise SubmissionError(f"{archive.name} holds more than {MAX_ZIP_FILES} files")
        if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
        extracted: list[tuple[PurePosixPath, Path, str | None]] = []
        for member in members:
            name = PurePosixPath(member_name(member))
            is_link = stat.S_ISLNK(member.external_attr >> 16)
            wanted = name.suffix in SUFFIXES or name.suffix == ARCHIVE
            if member.is_dir() or is_link or not wanted or member.file_size > MAX_MEMBER_BYTES:
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
                # the extraction (the duplicate rule reads it: grader/batch/gradebook.py).
                with contextlib.suppress(ValueError, OverflowError, OSError):
                    stamp = time.mktime((*member.date_time, 0, 0, -1))
                    os.utime(target, (stamp, stamp))
                extracted.append((name, target, None))
            except Exception as exc:  # noqa: BLE001 - one damaged member is that member's error only
                extracted.append((name, target, f"{archive.name}: {name} cannot be extracted ({one_line(exc)})"))
        return extracted


class Found(NamedTuple):
    """A submission as found, before it has a folder of its own in the output."""
    source: str            # where it came from (Submission.source)
    path: Path             # the file to read
    identity: Identity     # whose it is
    problem: str | None    # why it cannot be graded, or None
    # An upload with nothing gradable (NESTED_ARCHIVE, NO_SUBMISSION_FILE): its row is kept only
    # for a student who has no other file, since beside their notebook (a PDF of it, say) it
    # would be an error row the duplicate rule could count instead of the notebook.
    nothing_gradable: bool = False


def nothing_gradable(source: str, path: Path, identity: Identity, nested_archive: bool) -> Found:
    return Found(source, path, identity, NESTED_ARCHIVE if nested_archive else NO_SUBMISSION_FILE, True)


def is_safe_member_name(name: PurePosixPath) -> bool:
    return not name.is_absolute() and ".." not in name.parts and "__MACOSX" not in name.parts


def listed_members(archive: Path) -> list[PurePosixPath]:
    """The names of an archive's files (not its folders), as its maker wrote them, without
    extracting anything; names that could leave the archive, and macOS's resource forks, left out."""
    with zipfile.ZipFile(archive) as zf:
        names = [PurePosixPath(member_name(m)) for m in zf.infolist() if not m.is_dir()]
    return [name for name in names if name.parts and is_safe_member_name(name)]


def download_students(entries: Iterable[tuple[str, ...]]) -> dict[str, str]:
    """student id -> LMS, for the students that the top-level names of `entries` (the parts of
    each path that could be graded) make when every one of those names is an LMS's; else {}:
    what holds them is one student's."""
    tops = {outermost(parts) for parts in entries}
    if not tops or not all(is_lms_named(*top) for top in tops):
        return {}
    students = {}
    for top in sorted(tops):
        identity = entry_identity(*top)
        students[identity.student] = identity.lms
    return students


def unpacked(archive: Path, unpack_into: Path, owner: Identity | None, source: str | None = None) -> list[Found]:
    """The notebooks in an archive, extracted into a folder of the archive's own, so same-named
    archives of two students stay apart. `owner`: whose the whole archive is (a student's
    upload); None: an archive the staff gave as it is, which is an LMS's download when every
    top-level entry holding a notebook carries an LMS's naming (in_download), else one
    student's archive, named after it. A student's archive with nothing gradable in it is one
    row saying so: archives inside it stay shut, so a zip in a zip is that row."""
    source = source or os.path.abspath(archive)
    try:
        members = safe_extract(archive, unpack_into / output_name(archive.stem, source))
    except SubmissionError as exc:
        return [Found(source, archive, owner or Identity(archive.stem), str(exc))]
    if owner is None and download_students(name.parts for name, _, _ in members):
        return in_download(archive, source, members, unpack_into)
    owner = owner or Identity(archive.stem)
    found = [Found(f"{source}/{name}", path, owner, problem)
             for name, path, problem in sorted(members, key=lambda m: m[0]) if name.suffix != ARCHIVE]
    nested = any(name.suffix == ARCHIVE for name, _, _ in members)
    return found or [nothing_gradable(source, archive, owner, nested)]


def in_download(archive: Path, source: str, members: list, unpack_into: Path) -> list[Found]:
    """An LMS's download: each top-level entry is its student's, an archive among a student's
    files is opened as theirs, and an entry with nothing gradable (a PDF alone) is a row saying
    so. safe_extract keeps only what could be graded, so the entries are read from the list of
    the archive's names."""
    by_entry: dict[tuple[str, bool], list] = {top: [] for top in lms_entries(archive)}
    for member in sorted(members, key=lambda m: m[0]):
        by_entry.setdefault(outermost(member[0].parts), []).append(member)
    found: list[Found] = []
    for top, theirs in sorted(by_entry.items()):
        identity = entry_identity(*top)
        from_entry = [f for name, path, problem in theirs
                      for f in student_file(f"{source}/{name}", path, identity, problem, unpack_into)]
        found += from_entry or [nothing_gradable(f"{source}/{top[0]}", archive, identity, nested_archive=False)]
    return found


def lms_entries(archive: Path) -> set[tuple[str, bool]]:
    """The top-level entries of an LMS's download that carry an LMS's name, whatever they hold."""
    try:
        names = listed_members(archive)
    except Exception:  # noqa: BLE001 - safe_extract read it just now; what it found still stands
        return set()
    return {top for top in {outermost(name.parts) for name in names} if is_lms_named(*top)}


def student_file(source: str, path: Path, identity: Identity, problem: str | None, unpack_into: Path) -> list[Found]:
    """A file of one student's upload, or the files of an archive of theirs (opened as theirs)."""
    if path.suffix != ARCHIVE or problem:
        return [Found(source, path, identity, problem)]
    return unpacked(path, unpack_into, identity, source)


def files_under(entry: Path, skip: Path) -> list[Path]:
    """The notebooks, .py files and archives in a top-level entry, never entering a linked
    folder; checkpoints and the archives this batch unpacked (when OUTDIR sits inside an
    input folder) left out. A linked file is listed: whether it is read is resolved's to say."""
    wanted = (*SUFFIXES, ARCHIVE)
    if not is_folder(entry):
        return [entry] if entry.suffix in wanted else []
    found = []
    for folder, subfolders, files in os.walk(entry):   # followlinks=False: a linked folder is not entered
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders
                               if d != ".ipynb_checkpoints" and os.path.realpath(here / d) != str(skip))
        found += [here / f for f in sorted(files) if PurePath(f).suffix in wanted]
    return found


def top_entries(root: Path, skip: Path) -> list[Path]:
    """The entries of a folder the staff gave, each one student's, looking through Gradescope's
    export folder; OUTDIR, when it sits inside, and checkpoints left out."""
    entries = []
    for entry in sorted(root.iterdir()):
        if os.path.realpath(entry) == str(skip) or entry.name == ".ipynb_checkpoints":
            continue
        if GRADESCOPE_EXPORT.match(entry.name) and is_folder(entry):
            entries += sorted(entry.iterdir())
        else:
            entries.append(entry)
    return entries


def in_folder(folder: Path, unpack_into: Path) -> list[Found]:
    """A folder the staff gave: one student's when its own name or a folder above it is an
    LMS's folder for one student; else each top-level entry is one student's (an LMS's name
    for it, else its own name). An entry an LMS named that holds nothing gradable is a row
    saying so; an entry of the staff's naming that holds an LMS's download stops the batch
    (refuse_a_download_inside)."""
    root = Path(os.path.abspath(folder))   # a folder the staff named may be a link; nothing inside it is followed out
    skip = Path(os.path.realpath(unpack_into))
    owner = given_identity(folder, is_folder=True)
    found: list[Found] = []
    for entry in top_entries(root, skip):
        paths = files_under(entry, skip)
        lms_named = is_lms_named(entry.name, not is_folder(entry))
        if owner is None and not lms_named:
            refuse_a_download_inside(entry, paths)
        identity = owner or entry_identity(entry.name, not is_folder(entry))
        # A link may point anywhere inside what is this student's, never further.
        boundary = Path(os.path.realpath(root if owner else entry)) if owner or is_folder(entry) else None
        theirs = []
        for path in paths:
            file = one_file(path, boundary, identity)
            theirs += student_file(file.source, file.path, identity, file.problem, unpack_into)
        if not theirs and owner is None and lms_named:
            theirs = [nothing_gradable(str(entry), entry, identity, nested_archive=False)]
        found += theirs
    # A link to a file of the submission is that file, graded once under its own name.
    files = {os.path.realpath(f.path) for f in found if f.source == str(f.path)}
    return [f for f in found if f.source == str(f.path) or str(f.path) not in files]


def refuse_a_download_inside(entry: Path, paths: list[Path]) -> None:
    """A zip or folder at the top of a folder the staff gave, named by the staff or a student
    (not an LMS), is one student's, whatever it holds, so that a student's own zip never names
    others. One whose top-level entries all carry an LMS's names, of two or more students, is
    that LMS's download given one level too deep (a TA put Moodle's zip in a folder): graded
    as one student's, the class would be one row; read as the download, a student's zip could
    take others' rows. So the batch stops, saying to give it itself."""
    students = download_students(gradable_parts(entry, paths))
    if len(students) < 2:
        return
    lms = " and ".join(sorted({LMS_NAMES[lms] for lms in students.values()}))
    raise SubmissionError(f"{printable(str(entry))} holds the uploads of {len(students)} students under {lms}'s "
                          f"names, so it is the download itself, not one student's upload: name it instead of "
                          f"its folder (grader grade {printable(shlex.quote(str(entry)))} ...)")


def gradable_parts(entry: Path, paths: list[Path]) -> list[tuple[str, ...]]:
    """The path, inside a top-level entry, of each file in it that could be graded, as parts:
    a folder's files (`paths`, from files_under), or a zip's members (listed, not extracted)."""
    if is_folder(entry):
        return [path.relative_to(entry).parts for path in paths]
    if entry.suffix != ARCHIVE or entry.is_symlink():   # a linked zip is never read (resolved)
        return []
    try:
        names = listed_members(entry)
    except Exception:  # noqa: BLE001 - a damaged zip is its student's error row (unpacked)
        return []
    return [name.parts for name in names if name.suffix in (*SUFFIXES, ARCHIVE)]


def is_folder(path: Path) -> bool:
    """A folder itself, not a link to one."""
    return path.is_dir() and not path.is_symlink()


def one_file(path: Path, boundary: Path | None, identity: Identity) -> Found:
    real, problem = resolved(path, boundary)
    return Found(os.path.abspath(path), real, identity, problem)


def given(path: Path, unpack_into: Path) -> list[Found]:
    """The submissions in one path the staff gave."""
    if path.is_dir():
        return in_folder(path, unpack_into)
    if path.suffix not in (*SUFFIXES, ARCHIVE):
        return []
    owner = given_identity(path)
    # A file the staff named is the whole submission: a link there leaves it.
    found = one_file(path, None, owner or Identity(path.stem))
    if path.suffix == ARCHIVE and found.problem is None:
        return unpacked(path, unpack_into, owner)
    return [found]


def file_id(path: Path) -> tuple[int, int] | None:
    """Which file `path` is now. Between finding a file and reading it, which in a batch may be
    minutes, a student who can write the input folder could put a link in place of a folder on
    the way to it (O_NOFOLLOW guards only the file's own name): the file read must still be this
    one (grader/intake/notebook.py)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def collect(paths: list[Path], unpack_into: Path, course_files=frozenset()) -> tuple[list[Submission], list]:
    """The submissions, and the student ids that more than one of them claims. A file named like
    one of the course's support modules (`course_files`: activation.py), in a student's folder or
    archive with their package, is the course's: never a submission (see lms.find_submission)."""
    found: list[Found] = []
    for path in paths:
        path = Path(path)
        if not os.path.lexists(path):
            raise SubmissionError(f"no such file or folder: {path}")
        named = os.path.abspath(path)   # a file the staff name is graded, whatever its name
        found.extend(f for f in given(path, unpack_into)
                     if f.source == named or PurePath(f.source).name not in course_files)
    submissions, sources, folders = [], set(), set()
    for source, path, identity, problem, empty in without_needless_stand_ins(found):
        if source in sources:  # the same file named twice, or listed twice in an archive
            continue
        sources.add(source)
        folder = output_name(identity.student, source)
        if folder in folders:  # two sources whose short hashes agree: the full hash parts them
            folder = output_name(identity.student, source, digits=64)
        folders.add(folder)
        identity = Identity(printable(identity.student), printable(identity.name), identity.lms, identity.attachment,
                            identity.late)
        submissions.append(Submission(path, source, identity.student, folder, problem, identity, file_id(path), empty))
    claims: dict[str, list[str]] = {}
    for s in submissions:
        claims.setdefault(s.student, []).append(printable(s.source))
    duplicates = [(student, files) for student, files in claims.items() if len(files) > 1]
    return submissions, duplicates


def without_needless_stand_ins(found: list[Found]) -> list[Found]:
    """The rows of uploads with nothing gradable, only for students who have no other file."""
    have_files = {f.identity.student for f in found if not f.nothing_gradable}
    return [f for f in found if not f.nothing_gradable or f.identity.student not in have_files]
