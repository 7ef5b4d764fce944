"""Which seed draws a submission's randomized inputs, and who may know it.

Students know the public seed: `grader check` uses it, so what they see can be reproduced.
Grading draws from seeds they cannot know or guess, so a table of answers is worth nothing
there: `grade` draws one secret per output folder (kept, readable by root only) and derives
each submission's seed from it, the submission's folder and the bytes of its file, so that a
resubmission (other bytes, even at the same path) never gets the inputs of an earlier
grading, while a rerun of the same bytes resumes with the same ones; `lms` draws a fresh
seed for every run. Seeds have SEED_BITS bits, far too many to find by trying them against
what a report shows. Every result records its seed for the staff (`grader check --seed N`
replays it); the student view shows only the public one (grader/report/view.py).
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

from grader.settings import PUBLIC_SEED

__all__ = ["PUBLIC_SEED", "SEED_BITS", "fresh_seed", "hidden_cases_seed", "run_secret", "submission_seed"]

SEED_BITS = 128
SECRET_FILE = ".grading-secret"
SECRET_FORMAT = re.compile(rf"[0-9a-f]{{{SEED_BITS // 4}}}")


def fresh_seed() -> int:
    return secrets.randbits(SEED_BITS)


def _derived(*parts: bytes) -> int:
    """SEED_BITS bits of a hash of `parts`, each length-prefixed so no two lists collide."""
    digest = hashlib.sha256(b"".join(len(p).to_bytes(8, "big") + p for p in parts)).digest()
    return int.from_bytes(digest[:SEED_BITS // 8], "big")


def _kept_secret(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text, 16) if SECRET_FORMAT.fullmatch(text) else None


def run_secret(outdir: Path) -> int:
    """The batch's secret, kept in OUTDIR (root only) so that a rerun grades the same inputs.
    Two runs starting on the same OUTDIR at once agree on one secret: the new one is written
    whole to a file of its own and linked into place only if no secret is there yet. A kept
    value of another form (such as an older, shorter seed) is replaced by a new one."""
    path = Path(outdir) / SECRET_FILE
    kept = _kept_secret(path)
    if kept is not None:
        return kept
    secret = fresh_seed()
    draft = path.with_name(f"{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as f:
            f.write(f"{secret:0{SEED_BITS // 4}x}\n")
        try:
            os.link(draft, path)          # atomic, and fails if another run got there first
        except FileExistsError:
            kept = _kept_secret(path)
            if kept is not None:
                return kept
            os.replace(draft, path)       # an unusable old file: ours replaces it
    finally:
        draft.unlink(missing_ok=True)
    return secret


def submission_seed(secret: int, folder: str, content: bytes) -> int:
    """A submission's own seed: no two students share inputs, and a file with other bytes gets
    other inputs, whatever its name."""
    return _derived(b"submission", str(secret).encode(), folder.encode(), hashlib.sha256(content).digest())


def hidden_cases_seed(seed: int) -> int:
    """The seed a hidden check draws its cases from: apart from the visible checks' seed, so
    that no visible check is ever given (and shows) a hidden check's case."""
    return _derived(b"hidden", str(seed).encode())
