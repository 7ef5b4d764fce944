"""Kernels forked from a warm parent: the grader's side of fork_server.py.

One fork server per installation, started by the first run that needs it and shared by the
runs after it (a student's next check, a batch's workers, concurrent batches); it exits
after IDLE_SECONDS without a kernel. A kernel is forked only when it gets the same
sandbox a fresh kernel would (Sandbox.why_not_forked) and the warm parent has imported none
of the assignment's forbidden libraries; otherwise, or when the server cannot start, the
kernel starts fresh and the result says so and why (isolation.kernel_start).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader import kernel_side
from grader.sandbox.isolation import Sandbox, interpreter_paths, namespaces_available, scrubbed_environment
from grader.settings import Settings

SERVER_START_SECONDS = 60
# The files the server runs: the launcher loads the other two by their paths.
SERVER_CODE = ("fork_server.py", "launcher.py", "keyrings.py", "landlock.py")
REPLY_SECONDS = 10
# How long a server stays without a kernel to fork: long enough for a student's next check or
# a TA's next batch to find it warm.
IDLE_SECONDS = 600
# Room in the server's environment for a kernel's: /proc/PID/environ of a forked process
# shows the memory the server's environment was in (fork_server.show_environment).
ENVIRONMENT_ROOM = 8192


def _matplotlib_cache(fallback: str) -> str:
    """Where the server's matplotlib keeps its font list between runs (building it takes a
    quarter of a second): the grader's own cache folder, which no kernel sees."""
    folder = Path.home() / ".cache" / "attention-grader" / "matplotlib"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return os.path.join(fallback, "matplotlib")
    return str(folder)


class Unavailable(Exception):
    """The fork server could not start; kernels start fresh."""


class ForkServer:
    """A running server, as its hello file describes it: its process, socket and the modules
    its warm parent holds."""

    def __init__(self, folder: Path, hello: dict):
        self.folder = folder
        self.path = str(folder / "socket")
        self.pid = int(hello["pid"])
        self.modules = [str(m) for m in hello.get("modules", [])]
        self._held: dict[tuple[str, ...], list[str]] = {}

    def holds_forbidden(self, forbidden) -> list[str]:
        """The forbidden libraries the warm parent imported (a forked kernel would have them).
        Asked at every kernel's start with the assignment's list; its thousand modules are
        looked through once per list."""
        key = tuple(forbidden)
        if key not in self._held:
            from grader.intake.source_scan import matches
            self._held[key] = sorted({hit for m in self.modules if (hit := matches(m, key))})
        return list(self._held[key])

    def connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(REPLY_SECONDS)
        try:
            conn.connect(self.path)
        except OSError:
            conn.close()
            raise
        return conn


def server_folder() -> Path:
    """The folder of the server for this installation: one per interpreter, fork server code
    and state of the installed packages (a package installed or upgraded changes its
    folder's time), so a server never hands out kernels from code that has since changed.
    Private to this user: whoever can connect gets kernels started as root."""
    key = hashlib.sha256(sys.executable.encode())
    for name in SERVER_CODE:
        key.update(Path(kernel_side.path_of(name)).read_bytes())
    for entry in interpreter_paths():   # what the server imports from (it runs with -I)
        key.update(f"{entry}:{os.stat(entry).st_mtime_ns}".encode())
    base = Path(tempfile.gettempdir()) / f"attention-grader-{os.getuid()}"
    folder = base / key.hexdigest()[:16]
    for path in (base, folder):
        path.mkdir(exist_ok=True, mode=0o700)
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise Unavailable(f"the fork server is not available: {path} is not a folder private to this user")
    return folder


def _running(folder: Path) -> bool:
    """Whether a server holds the folder's lock (it does for its whole life)."""
    with open(folder / "lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _start(folder: Path) -> None:
    script = kernel_side.path_of("fork_server.py")
    env = scrubbed_environment(HOME=str(folder), MPLCONFIGDIR=_matplotlib_cache(str(folder)),
                               GRADER_ENVIRONMENT_ROOM="~" * ENVIRONMENT_ROOM)
    with open(folder / "server.log", "ab") as log:
        # A session of its own, no terminal and no pipe from this process: it outlives the run.
        subprocess.Popen([sys.executable, "-I", script, str(folder), str(IDLE_SECONDS)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=folder, start_new_session=True)


def worth_starting(settings: Settings) -> bool:
    """Whether a run with these settings would fork its kernels, as far as can be told before
    the first one: then the server is started early (`grader check`) or before the batch's
    workers."""
    return bool(settings.sandbox is not False and settings.fork_server and os.geteuid() == 0 and namespaces_available())


_lock = threading.Lock()
_server: ForkServer | None = None
_failure = ""


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, Unavailable) else f"the fork server is not available: {exc}"


def launch() -> Path | None:
    """Start the server if none is running, without waiting for it, so that its imports
    overlap with the grader's own start; returns its folder, or None when it cannot start."""
    global _failure
    with _lock:
        if _failure:
            return None
        try:
            folder = server_folder()
            if _server is None and not _running(folder):
                _start(folder)
            return folder
        except (Unavailable, OSError) as exc:
            _failure = _why(exc)
            return None


def server(restart: bool = False) -> ForkServer | None:
    """The running server, started if need be; None when it cannot start. With `restart`,
    the one found before has stopped (the machine's OOM killer): find or start another."""
    global _server, _failure
    with _lock:
        if restart:
            _server = None
        if _server is not None:
            return _server
    folder = launch()
    with _lock:
        if _server is None and folder is not None and not _failure:
            try:
                _server = _wait_ready(folder)
            except (Unavailable, OSError) as exc:
                _failure = _why(exc)
        return _server


def _answers(found: ForkServer) -> bool:
    """Whether the server accepts connections (a hello left by a killed server does not)."""
    try:
        found.connect().close()
    except OSError:
        return False
    return True


def _wait_ready(folder: Path) -> ForkServer:
    """The server once it has said it is ready; its lock is held from its first moment."""
    started = time.monotonic()
    while True:
        running = _running(folder)
        try:
            hello = json.loads((folder / "hello.json").read_text())
        except (OSError, ValueError):
            hello = None
        if running and hello and _answers(found := ForkServer(folder, hello)):
            return found
        waited = time.monotonic() - started
        if not running and waited > 2:
            log = (folder / "server.log").read_bytes()[-300:].decode(errors="replace").strip().splitlines()
            raise Unavailable(f"the fork server is not available: it did not start ({log[-1] if log else 'no log'})")
        if waited > SERVER_START_SECONDS:
            raise Unavailable(f"the fork server is not available: not ready within {SERVER_START_SECONDS} s")
        time.sleep(0.02)


def choose(sandbox: Sandbox) -> socket.socket | None:
    """A connection to the server to fork this sandbox's kernel from, or None; records on the
    sandbox how its kernel starts and why. A server found stopped (the machine's OOM killer)
    is started again once."""
    why = sandbox.why_not_forked() or ""
    conn = None
    for attempt in range(0 if why else 2):
        chosen = server(restart=attempt > 0)
        if chosen is None:
            why = _failure
            break
        if held := chosen.holds_forbidden(sandbox.forbidden):
            why = f"the warm parent has imported {', '.join(held)}, which this assignment forbids"
            break
        try:
            conn = chosen.connect()
            break
        except OSError as exc:
            why = f"the fork server stopped ({exc.strerror or exc})"
    sandbox.kernel_start = ("forked", "") if conn else ("fresh", why)
    return conn


def read_message(buffer: bytearray) -> dict | None:
    """One length-prefixed message from the server, taken off `buffer`, or None when it is not
    all there yet."""
    if len(buffer) < 4:
        return None
    (size,) = struct.unpack("!I", buffer[:4])
    if size > 4096:
        raise ValueError("the fork server sent an oversized message")
    if len(buffer) < 4 + size:
        return None
    message = json.loads(bytes(buffer[4:4 + size]))
    del buffer[:4 + size]
    return message


def send_request(conn: socket.socket, request: dict, fds: list[int]) -> None:
    data = json.dumps(request).encode()
    conn.sendall(struct.pack("!I", len(data)))
    socket.send_fds(conn, [data], fds)
