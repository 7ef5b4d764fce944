"""Kernels forked from the warm parent (grader/kernel_side/fork_server.py): each gets the sandbox a fresh
kernel gets, none sees what another did, the parent holds nothing of the grader's, and where
forking is not possible kernels start fresh and the result says why. The hostile notebooks of
test_attacks.py run against forked kernels too: forking is the default."""
import asyncio
import os
import signal
import struct
import time
from pathlib import Path

import pytest

from grading_helpers import SUBMISSIONS, grade
from grader.kernel import forked as forked_kernels
from grader.sandbox import isolation as sandbox
from grader.kernel.session import Kernel
from grader.settings import Limits

FULL = sandbox.namespaces_available() and sandbox.unprivileged_ids() is not None
WORKED = SUBMISSIONS / "worked_solution.ipynb"
# A line of the reference implementation, looked for in two halves, so that the search itself
# never puts the whole line into the memory it searches.
NEEDLE = ("def softmax_", "rows(scores: np.ndarray)")


def _message(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


def test_a_message_from_the_fork_server_is_read_only_once_it_is_whole():
    buffer = bytearray(_message(b'{"pid": 12}') + _message(b'{"exit": 0}')[:5])
    assert forked_kernels.read_message(buffer) == {"pid": 12}
    assert forked_kernels.read_message(buffer) is None
    buffer += _message(b'{"exit": 0}')[5:]
    assert forked_kernels.read_message(buffer) == {"exit": 0}
    with pytest.raises(ValueError):
        forked_kernels.read_message(bytearray(struct.pack("!I", 10**6)))


def _run(limits: Limits, *cells: str, forbidden=()):
    """Run cells in one kernel; returns (how it started, [error or None for each cell])."""
    async def run():
        async with Kernel(limits, forbidden=forbidden) as kernel:
            errors = [await kernel.run_cell(c, 30) for c in cells]
            return kernel.isolation(), errors
    return asyncio.run(run())


def _memory_holds(pid: str, first: str, second: str) -> bool:
    """Whether the readable memory of process `pid` holds `first` directly followed by `second`.
    Also sent to a kernel, to search its own memory ("self"), which it reads with ctypes: as the
    unprivileged user it may not open /proc/self/mem."""
    import ctypes
    mem = None if pid == "self" else open(f"/proc/{pid}/mem", "rb", 0)
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "r" not in perms or end - start > 2**30 or line.rstrip().endswith(("[vvar]", "[vsyscall]",
                                                                                      "[vvar_vclock]")):
                    continue
                if mem is None:
                    chunk = ctypes.string_at(start, end - start)
                else:
                    try:
                        mem.seek(start)
                        chunk = mem.read(end - start)
                    except (OSError, ValueError, OverflowError):
                        continue
                at = chunk.find(first.encode())
                while at >= 0:
                    if chunk[at + len(first):at + len(first) + len(second)] == second.encode():
                        return True
                    at = chunk.find(first.encode(), at + 1)
        return False
    finally:
        if mem is not None:
            mem.close()


needs_full_sandbox = pytest.mark.skipif(not FULL, reason="forking needs namespaces and an unprivileged user")


@pytest.mark.slow
@needs_full_sandbox
def test_a_forked_kernel_gets_the_same_sandbox_as_a_fresh_one_and_the_same_grade():
    forked = grade(WORKED, "rows")
    fresh = grade(WORKED, "rows", fork_server=False)
    assert forked.isolation["kernel_start"] == "forked"
    assert fresh.isolation["kernel_start"] == "fresh (--no-fork-server)"
    assert forked.isolation["active"] == fresh.isolation["active"]
    assert forked.isolation["level"] == "full"
    assert (forked.score, forked.max_score) == (fresh.score, fresh.max_score) == (fresh.max_score, 25)
    assert [c.status for c in forked.checks] == [c.status for c in fresh.checks]


@pytest.mark.slow
@needs_full_sandbox
def test_a_kernel_never_sees_what_an_earlier_kernel_changed():
    """Kernels are forked from the pristine parent, never from one another: what one changes
    in the modules they all start with, or in its memory, is gone in the next."""
    limits = Limits()
    # numpy.linalg.norm, not json.dumps: without orjson, the kernel's own messages go through json.dumps
    isolation, errors = _run(limits, "import numpy, numpy.linalg\nnumpy.left_behind = 'first'\n"
                                     "numpy.linalg.norm = None\nsecret = 'only in the first kernel'")
    assert isolation["kernel_start"] == "forked" and errors == [None]
    isolation, errors = _run(limits, "import numpy, numpy.linalg\nassert not hasattr(numpy, 'left_behind')\n"
                                     "assert numpy.linalg.norm([3, 4]) == 5\nassert 'secret' not in globals()")
    assert isolation["kernel_start"] == "forked" and errors == [None], errors


@pytest.mark.slow
@needs_full_sandbox
def test_neither_the_warm_parent_nor_a_forked_kernel_holds_the_reference():
    """The parent never imports the grader: the reference's code is in the grader's memory,
    not in the parent's, and so not in a kernel's, which reads its own memory here."""
    server = forked_kernels.server()
    assert server is not None
    grader_pid = str(os.getpid())
    import inspect

    import grader.reference.attention
    source = inspect.getsource(grader.reference.attention)   # the search finds it where it is
    assert _memory_holds(grader_pid, *NEEDLE) and source
    assert not _memory_holds(str(server.pid), *NEEDLE)
    own_memory = inspect.getsource(_memory_holds) + f"\nassert not _memory_holds('self', {NEEDLE[0]!r}, {NEEDLE[1]!r})"
    isolation, errors = _run(Limits(), own_memory)
    assert isolation["kernel_start"] == "forked" and errors == [None], errors


@pytest.mark.slow
@needs_full_sandbox
def test_an_assignment_forbidding_a_warm_module_gets_fresh_kernels_without_it():
    isolation, errors = _run(Limits(), "import matplotlib", forbidden=("matplotlib",))
    assert isolation["kernel_start"] == ("fresh (the warm parent has imported matplotlib, which this assignment "
                                         "forbids)")
    assert errors[0] is not None and "matplotlib is not available" in errors[0].evalue


@pytest.fixture
def own_fork_server(monkeypatch):
    """This test's own view of the fork server: what others have found is left alone."""
    for name, value in (("_server", None), ("_failure", "")):
        monkeypatch.setattr(forked_kernels, name, value)


@pytest.mark.slow
@needs_full_sandbox
def test_a_fork_server_found_stopped_is_started_again(own_fork_server):
    """A server that has stopped (the machine's OOM killer): the next kernel finds it gone,
    starts another and is forked from it; kernels never fall back for good on one loss."""
    stopped = forked_kernels.server()
    os.kill(stopped.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while forked_kernels._running(stopped.folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    result = grade(WORKED, "rows", _fresh="fork server stopped")
    assert (result.score, result.max_score) == (25, 25)
    assert result.isolation["kernel_start"] == "forked"
    assert forked_kernels.server().pid != stopped.pid


@pytest.mark.slow
def test_when_the_fork_server_cannot_start_kernels_start_fresh_and_the_result_says_why(own_fork_server, monkeypatch):
    def cannot_start(folder):
        raise OSError("no interpreter for it")
    monkeypatch.setattr(forked_kernels, "_running", lambda folder: False)
    monkeypatch.setattr(forked_kernels, "_start", cannot_start)
    result = grade(WORKED, "rows", _fresh="no fork server")
    assert (result.score, result.max_score) == (25, 25)
    why = "fresh (the fork server is not available: no interpreter for it)"
    assert result.isolation["kernel_start"] == (why if FULL else result.isolation["kernel_start"])
    assert result.isolation["kernel_start"].startswith("fresh")


@pytest.mark.slow
@needs_full_sandbox
def test_the_fork_server_outlives_a_check_for_the_next_one():
    """A student's next `grader check` finds the server warm: the same one serves both."""
    from grading_helpers import run_grader
    first = forked_kernels.server()
    code, out, err, _ = run_grader(["check", WORKED])
    assert code == 0, err
    assert forked_kernels.server().pid == first.pid and forked_kernels._running(first.folder)


@pytest.mark.slow
@needs_full_sandbox
def test_the_fork_server_answers_only_its_own_user(tmp_path):
    """Another user on the machine cannot ask the server for a kernel (it would run as root
    until it drops privileges): the socket's folder is the grader's alone, and the server
    checks who connects."""
    server = forked_kernels.server()
    assert all(Path(f).stat().st_mode & 0o077 == 0 for f in (server.folder, server.folder.parent))
    nobody = sandbox.unprivileged_ids()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(nobody[1])
            os.setuid(nobody[0])
            conn = forked_kernels.socket.socket(forked_kernels.socket.AF_UNIX)
            conn.connect(server.path)
            os._exit(1)
        except PermissionError:
            os._exit(0)
        except BaseException:  # noqa: BLE001 - a forked test process never returns into pytest
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_server_is_replaced_when_any_file_it_runs_changes():
    """A server runs the launcher and what the launcher loads by path; a change to any of them
    (an upgrade) gets a new server, never kernels from the code before it."""
    import re
    from importlib import resources
    launcher = resources.files("grader.kernel_side").joinpath("launcher.py").read_text()
    loaded = set(re.findall(r'_sibling\("(\w+)"\)', launcher))
    assert loaded and {f"{name}.py" for name in loaded} | {"fork_server.py", "launcher.py"} == set(
        forked_kernels.SERVER_CODE)


@pytest.mark.slow
def test_a_handler_reports_its_launchers_exit_code_and_kills_it_when_the_grader_goes_away():
    """The handler's wait (fork_server._watch) wakes on the launcher's exit or on the grader's
    end of the connection closing, whichever comes first."""
    import socket
    from grader.kernel_side.fork_server import _watch
    for closes, expected in ((False, 3), (True, -signal.SIGKILL)):
        handler_end, grader_end = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            handler_end.close()
            grader_end.close()
            time.sleep(0.2 if not closes else 60)
            os._exit(3)
        if closes:
            grader_end.close()
        assert _watch(pid, handler_end) == expected
        handler_end.close()
        grader_end.close()


def test_the_grader_hears_a_forked_kernels_exit_from_its_handler():
    """ForkedProvisioner.wait returns the exit code the handler sends, once it has arrived, or
    the kernel's death when the connection closes without one."""
    import socket
    import threading
    from grader.kernel.client import ForkedProvisioner
    for says in (b'{"exit": 7}', None):
        handler_end, grader_end = socket.socketpair()
        grader_end.setblocking(False)
        provisioner = ForkedProvisioner(kernel_id="k", kernel_spec=None, parent=None)
        provisioner._conn, provisioner._buffer = grader_end, bytearray()

        def handler(conn, says):
            time.sleep(0.2)
            if says is not None:
                conn.sendall(_message(says))
            conn.close()
        threading.Thread(target=handler, args=(handler_end, says)).start()
        assert asyncio.run(provisioner.wait()) == (7 if says else -signal.SIGKILL)
        grader_end.close()
