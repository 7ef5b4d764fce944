"""Kernels forked from a warm parent: the grader's side of fork_server.py.

One fork server per grading run, started on first use and shared by the processes forked
from the one that started it (batch workers). A kernel is forked only when it gets the same
sandbox a fresh kernel would (Sandbox.why_not_forked) and the warm parent has imported none
of the assignment's forbidden libraries; otherwise, or when the server cannot start, the
kernel starts fresh and the result says so and why (isolation.kernel_start).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path

from .sandbox import Sandbox, namespaces_available, run_id

SERVER_START_SECONDS = 60
REPLY_SECONDS = 10
# The server's own environment: the same threading and plotting settings as the kernels
# (they take effect when it imports numpy and matplotlib), nothing of the grader's.
# Room in the server's environment for a kernel's: /proc/PID/environ of a forked process
# shows the memory the server's environment was in (fork_server.show_environment).
ENVIRONMENT_ROOM = 8192
SERVER_ENVIRONMENT = {"GRADER_ENVIRONMENT_ROOM": "~" * ENVIRONMENT_ROOM, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
                      "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                      "JUPYTER_PLATFORM_DIRS": "1"}


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
    """The server process: its socket, and the modules its warm parent holds once it is ready."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix=f"grader-forkserver-{run_id()}-")   # 0700: root alone connects
        self.path = os.path.join(self.folder, "socket")
        self.modules: list[str] = []
        script = str(resources.files("grader").joinpath("fork_server.py"))
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
        env.update(SERVER_ENVIRONMENT, HOME=self.folder, MPLCONFIGDIR=_matplotlib_cache(self.folder))
        # Its stdin is its lifeline: when every process holding the other end is gone, it exits.
        self.process = subprocess.Popen([sys.executable, "-I", script, self.path], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=self.folder,
                                        start_new_session=True)

    def wait_ready(self) -> None:
        """Once it has imported its modules; raises Unavailable saying why it cannot serve."""
        ready, _, _ = select.select([self.process.stdout], [], [], SERVER_START_SECONDS)
        line = self.process.stdout.readline() if ready else b""
        try:
            hello = json.loads(line)
        except ValueError:
            hello = {}
        if not hello.get("ready"):
            self.process.kill()
            self.process.wait()
            shutil.rmtree(self.folder, ignore_errors=True)
            why = f"its parent had {hello['threads']} threads" if "threads" in hello else "it did not start"
            raise Unavailable(f"the fork server is not available: {why}")
        self.modules = list(hello.get("modules", []))

    def holds_forbidden(self, forbidden) -> list[str]:
        """The forbidden libraries the warm parent imported (a forked kernel would have them)."""
        from .static_scan import matches
        return sorted({hit for m in self.modules if (hit := matches(m, forbidden))})

    def connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(REPLY_SECONDS)
        try:
            conn.connect(self.path)
        except OSError:
            conn.close()
            raise
        return conn


def worth_starting(settings) -> bool:
    """Whether a run with these settings would fork its kernels, as far as can be told before
    the first one: then the server is started early (`grader check`) or before the batch's
    workers, which share it."""
    return bool(settings.sandbox and settings.fork_server and os.geteuid() == 0 and namespaces_available())


_lock = threading.Lock()
_launched: ForkServer | None = None
_server: ForkServer | None = None
_failure = ""


def launch() -> None:
    """Start this run's fork server without waiting for it, so that its imports overlap
    with the grader's own start; it is used (or found unusable) on the first kernel."""
    global _launched, _failure
    with _lock:
        if _launched is None and not _failure:
            try:
                _launched = ForkServer()
            except OSError as exc:
                _failure = f"the fork server is not available: {exc}"


def server() -> ForkServer | None:
    """This run's fork server, ready; None when it could not start."""
    global _server, _failure
    launch()
    with _lock:
        if _server is None and not _failure:
            try:
                _launched.wait_ready()
                _server = _launched
            except (Unavailable, OSError) as exc:
                _failure = str(exc)
        return _server


def choose(sandbox: Sandbox) -> socket.socket | None:
    """A connection to the server to fork this sandbox's kernel from, or None; records on the
    sandbox how its kernel starts and why. A server that has stopped (the machine's OOM
    killer) is not started again: the rest of the run's kernels start fresh."""
    global _failure
    why = sandbox.why_not_forked() or ""
    chosen = None if why else server()
    if not why and chosen is None:
        why = _failure
    if chosen is not None and (held := chosen.holds_forbidden(sandbox.forbidden)):
        why, chosen = f"the warm parent has imported {', '.join(held)}, which this assignment forbids", None
    conn = None
    if chosen is not None:
        try:
            conn = chosen.connect()
        except OSError as exc:
            with _lock:
                _failure = why = f"the fork server stopped ({exc.strerror or exc})"
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
