"""What a grader process owns is removed even if that process is killed.

A parent-death signal does not hold for a kernel: dropping to the unprivileged user clears
it, and it cannot remove folders or cgroups anyway. So for each thing it owns (a kernel with
its processes, cgroups and folder, or a batch task's folder), the grader starts a watchdog: a
small process holding the read end of a pipe from the grader. The grader says "done" once it
has removed them itself; if the pipe closes without that, the grader died, and the watchdog
removes them (leftovers.remove_leftovers) and exits.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

DONE = b"done"
# The grader's own package, found from its folder: -I -S keep the watchdog's start quick
# and independent of the environment, and the package needs nothing beyond the standard library.
START = "import sys; sys.path.insert(0, sys.argv[1]); from grader.sandbox.reaper import main; main(sys.argv[2])"


class Watchdog:
    def __init__(self, leftovers: dict):
        read, write = os.pipe()
        self._pipe: int | None = write   # None once released
        try:
            # A session of its own: a signal to the grader's process group (Ctrl-C, a CI job
            # being cancelled) does not stop it before it could clean up.
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", START, str(Path(__file__).resolve().parents[2]),
                 json.dumps(leftovers)], stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)

    def release(self) -> None:
        """The grader has removed everything itself: the watchdog exits without acting."""
        if self._pipe is None:
            return
        try:
            os.write(self._pipe, DONE)
        finally:
            os.close(self._pipe)
            self._pipe = None
        self._process.wait()


@contextmanager
def temporary_folder(prefix: str):
    """A temporary folder that is removed even if this process is killed while it exists."""
    folder = tempfile.mkdtemp(prefix=prefix)
    watchdog = Watchdog({"folders": [folder]})
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        watchdog.release()


def main(leftovers: str) -> None:
    """The watchdog process: wait for the grader to say done or to die."""
    heard = sys.stdin.buffer.read()   # until the pipe closes
    if heard != DONE:
        from grader.sandbox.leftovers import remove_leftovers
        remove_leftovers(**json.loads(leftovers))
