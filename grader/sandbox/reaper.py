"""What a grader process owns is removed even if that process is killed.

A parent-death signal does not hold for a kernel: dropping to the unprivileged user clears
it, and it cannot remove folders or cgroups anyway. So each grader process has one watchdog:
a small process holding the read end of a pipe from it. Before the grader creates something
that must not outlive it (a kernel with its processes, cgroups and folder, or a batch task's
folder), it tells the watchdog what (`watch`); once it has removed them itself, it says so
(`release`). If the pipe closes, the grader has exited or died, and the watchdog removes
whatever it was never told was released (leftovers.remove_leftovers), then exits.

One watchdog per process rather than one per thing owned: starting an interpreter costs
about 0.02 to 0.05 CPU s, twice per submission in a batch. A process forked from the grader
(a batch worker) starts its own on first use: the parent's pipe is closed in the child, so
the parent's watchdog still hears when the parent dies.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The grader's own package, found from its folder: -I -S keep the watchdog's start quick
# and independent of the environment, and the package needs nothing beyond the standard library.
START = "import sys; sys.path.insert(0, sys.argv[1]); from grader.sandbox.reaper import main; main()"


class Watchdog:
    """This process's watchdog, started on first use; `watchdog()` returns it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipe: int | None = None
        self._process: subprocess.Popen | None = None
        self._owned: dict[str, dict] = {}   # what the watchdog removes should this process die

    def watch(self, leftovers: dict) -> str:
        """From now on, `leftovers` (remove_leftovers' arguments) are removed should this
        process die before release(key)."""
        key = uuid.uuid4().hex
        with self._lock:
            self._owned[key] = leftovers
            self._send({"watch": key, "leftovers": leftovers})
        return key

    def release(self, key: str) -> None:
        """This process has removed them itself: the watchdog forgets them."""
        with self._lock:
            if self._owned.pop(key, None) is not None:
                self._send({"release": key})

    def _send(self, message: dict) -> None:
        if self._pipe is not None:
            try:
                _write_all(self._pipe, _line(message))
                return
            except BrokenPipeError:   # the watchdog itself was killed: a new one is told everything
                self._close()
        self._start()

    def _start(self) -> None:
        read, write = os.pipe()
        try:
            # A session of its own: a signal to the grader's process group (Ctrl-C, a CI job
            # being cancelled) does not stop it before it could clean up.
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", START, str(Path(__file__).resolve().parents[2])],
                stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._pipe = write
        _write_all(write, b"".join(_line({"watch": key, "leftovers": leftovers})
                                   for key, leftovers in self._owned.items()))

    def _close(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        if self._process is not None:
            self._process.poll()   # reaped if it has exited
            self._process = None

    def _forget_in_child(self) -> None:
        """In a forked child: the parent's pipe and what the parent owns are the parent's."""
        self._lock = threading.Lock()
        self._owned = {}
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        self._process = None


def _line(message: dict) -> bytes:
    """A message to the watchdog: one line of JSON (json.dumps writes no newline inside)."""
    return json.dumps(message).encode() + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=_WATCHDOG._forget_in_child)


def watchdog() -> Watchdog:
    return _WATCHDOG


@contextmanager
def temporary_folder(prefix: str) -> Iterator[str]:
    """A temporary folder that is removed even if this process is killed while it exists."""
    folder = tempfile.mkdtemp(prefix=prefix)
    key = _WATCHDOG.watch({"folders": [folder]})
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        _WATCHDOG.release(key)


def main() -> None:
    """The watchdog process: keep what it is told to watch until the pipe closes, then
    remove whatever was not released. A line cut short (the grader killed while writing it)
    is ignored."""
    owned: dict[str, dict] = {}
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "watch" in message:
            owned[message["watch"]] = message["leftovers"]
        else:
            owned.pop(message.get("release"), None)
    if owned:
        from grader.sandbox.leftovers import remove_leftovers
        for leftovers in owned.values():
            remove_leftovers(**leftovers)
