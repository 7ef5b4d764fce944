"""Which seed draws a submission's randomized inputs.

Students know the public seed: `grader check` uses it, so what they see can be reproduced.
Grading draws from seeds they cannot know, so a table of answers for the public inputs is
worth nothing there: `grade` draws one secret seed per output folder (kept, readable by root
only, so a rerun into the same folder resumes with the same inputs) and gives each
submission its own seed derived from it; `lms` draws a fresh one for every run. Every
result records the seed it was graded with, so `grader check --seed N` replays it.
"""
from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from .settings import PUBLIC_SEED

__all__ = ["PUBLIC_SEED", "fresh_seed", "run_seed", "submission_seed"]

SEED_FILE = ".grading-seed"


def fresh_seed() -> int:
    return secrets.randbits(31)


def run_seed(outdir: Path) -> int:
    """The batch's secret seed, kept in OUTDIR so that a rerun grades the same inputs."""
    path = Path(outdir) / SEED_FILE
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        seed = fresh_seed()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as f:
            f.write(f"{seed}\n")
        return seed


def submission_seed(run: int, folder: str) -> int:
    """Each submission's own seed, so that no two students are given the same inputs."""
    return int.from_bytes(hashlib.sha256(f"{run}:{folder}".encode()).digest()[:4], "big") >> 1
