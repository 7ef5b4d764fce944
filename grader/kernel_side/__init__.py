"""Code that runs outside the grader process and is loaded there by its path, never imported
as part of the grader: the harness inside the student's kernel (harness), the warm parent that
forks kernels (fork_server), process 1 of a kernel's sandbox (launcher) with its Landlock and
keyring steps (landlock, keyrings), and the array format both ends speak (wire). The grader
imports landlock, keyrings and wire too; none of these files imports the grader.
"""

from pathlib import Path


def path_of(name: str) -> str:
    """Where one of these files is, for a process that loads it by its path."""
    return str(Path(__file__).resolve().parent / name)
