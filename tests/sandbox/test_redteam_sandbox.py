"""Sandbox attacks the first tests did not try: keyring calls through the 32-bit entry
(int 0x80) and the x32 numbers; and, under Landlock, what it does not govern: connecting to a
Unix socket by its path (the desktop's session bus, the X server, docker.sock), and a TCP
connection opened by sendto() with MSG_FASTOPEN or by io_uring instead of connect(), a UDP
datagram (which could carry a hidden case to the student's server): no internet socket, and
System V IPC, which every kernel of the same user shares and which outlives it."""
import contextlib
import ctypes
import glob
import json
import mmap
import os
import platform
import shutil
import socket
import struct
from pathlib import Path

import nbformat
import pytest

from grading_helpers import SUBMISSIONS, expect_slow
from grader.kernel_side import keyrings
from grader.kernel_side import landlock
from grader.sandbox import isolation as sandbox
from grading_helpers.unprivileged import WAYS, grade_without_namespaces, private_ancestors

x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the 32-bit entry is x86_64's")
_libc = ctypes.CDLL(None, use_errno=True)
X32 = 0x40000000
IPC_CREAT, IPC_NOWAIT, IPC_RMID = 0o1000, 0o4000, 0
DONOR_KEY = 0x5EED1234
# A donor's notebook leaves its code in a System V message queue of a fixed key; a later one
# reads it. Raises RuntimeError when the queue was made.
LEAVE_CODE = (
    "import ctypes\n_libc = ctypes.CDLL(None, use_errno=True)\n"
    f"_queue = _libc.msgget({DONOR_KEY}, {IPC_CREAT | 0o666})\n"
    "if _queue < 0:\n    raise PermissionError(ctypes.get_errno(), 'msgget refused')\n"
    "raise RuntimeError('made a message queue every later kernel can read')")


class Message(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]


def remove_the_donors_queue():
    queue = _libc.msgget(DONOR_KEY, 0)
    if queue >= 0:
        _libc.msgctl(queue, IPC_RMID, None)


def int80(number: int, *args: int) -> int:
    """A system call through the 32-bit entry (int 0x80), as a 32-bit program makes it."""
    a, b, c, d, e = (*args, 0, 0, 0, 0, 0)[:5]
    code = (b"\x53" + b"\xb8" + struct.pack("<I", number) + b"\xbb" + struct.pack("<i", a)
            + b"\xb9" + struct.pack("<i", b) + b"\xba" + struct.pack("<i", c) + b"\xbe" + struct.pack("<i", d)
            + b"\xbf" + struct.pack("<i", e) + b"\xcd\x80\x5b\xc3")
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    result = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    return result


def in_child(attack) -> dict:
    """`attack()`'s report (a dict), run in a forked child so the filters stay there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            report = attack()
        except BaseException as exc:  # noqa: BLE001 - the report says what went wrong
            report = {"error": repr(exc)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.slow
@x86_64
@pytest.mark.skipif(not keyrings.supported(), reason="needs seccomp")
def test_keyring_calls_through_the_32_bit_entry_and_x32_are_refused():
    def attack():
        keyrings.isolate()
        return {"int80": int80(288, 0, -3, 0),   # i386 keyctl(KEYCTL_GET_KEYRING_ID, session)
                "x32": [_libc.syscall(X32 | 250, 0, -3, 0), ctypes.get_errno()]}
    assert in_child(attack) == {"int80": -1, "x32": [-1, 1]}   # -EPERM; EPERM


def _listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    return server


def _tried(call) -> object:
    try:
        call()
        return "done"
    except OSError as exc:
        return exc.errno


@pytest.mark.skipif(landlock.abi() < 4 or platform.machine() not in ("x86_64", "aarch64"),
                    reason="Landlock with TCP rules (ABI 4) is not available here")
@pytest.mark.slow
def test_a_landlocked_process_connects_to_nothing(tmp_path):
    own, outside = tmp_path / "own", tmp_path / "outside"
    own.mkdir()
    outside.mkdir()
    server = _listening(outside / "neighbour.sock")
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.settimeout(2)

    def attack():
        landlock.restrict(landlock.ruleset(["/usr", "/lib", "/lib64"], [str(own)], []))
        client = socket.socket(socket.AF_UNIX)
        report = {"connect": _tried(lambda: client.connect(str(outside / "neighbour.sock"))),
                  "tcp": _tried(lambda: socket.socket().connect(tcp.getsockname())),
                  # TCP Fast Open: the SYN goes out with the data, and no connect() is made.
                  "fastopen": _tried(lambda: socket.socket().sendto(b"x", socket.MSG_FASTOPEN, tcp.getsockname())),
                  "io_uring": [_libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno()],
                  "udp": _tried(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
                      b"x", tcp.getsockname())),
                  "udp_sendmsg": _tried(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendmsg(
                      [b"x"], [], 0, tcp.getsockname()))}
        mine = _listening(own / "mine.sock")   # a kernel binds its own sockets
        a, b = socket.socketpair()
        a.send(b"x")
        report["own"] = [mine.getsockname() == str(own / "mine.sock"), b.recv(1).decode()]
        if platform.machine() == "x86_64":
            fd = client.fileno()
            report["socketcall"] = int80(102, 3, 0)          # socketcall(SYS_CONNECT, NULL)
            report["connect32"] = int80(362, fd, 0, 0)       # i386 connect
            report["x32"] = [_libc.syscall(X32 | 42, fd, None, 0), ctypes.get_errno()]
            report["socket32"] = int80(359, socket.AF_INET, socket.SOCK_DGRAM, 0)
            report["unix32"] = int80(359, socket.AF_UNIX, socket.SOCK_STREAM, 0) > 0   # allowed
            report["socketcall_socket"] = int80(102, 1, 0)
            report["x32_socket"] = [_libc.syscall(X32 | 41, socket.AF_INET6, socket.SOCK_DGRAM, 0), ctypes.get_errno()]
        return report
    report = in_child(attack)
    server.close()
    with contextlib.suppress(OSError):
        tcp.accept()
        report["accepted"] = True
    tcp.close()
    assert report.pop("own") == [True, "x"]
    if platform.machine() == "x86_64":
        assert report.pop("socketcall") == report.pop("connect32") == -13, report
        assert report.pop("socket32") == report.pop("socketcall_socket") == -13, report
        assert report.pop("unix32") is True and report.pop("x32_socket") == [-1, 13], report
        assert report.pop("x32") == [-1, 13]
    # EACCES, as a TCP connect under Landlock
    assert report == {"connect": 13, "tcp": 13, "fastopen": 13, "io_uring": [-1, 13], "udp": 13, "udp_sendmsg": 13}


@pytest.mark.skipif(landlock.abi() < 1 or platform.machine() not in ("x86_64", "aarch64"),
                    reason="Landlock is not available here")
@pytest.mark.slow
def test_landlocked_processes_pass_nothing_through_system_v_ipc(tmp_path):
    """A donor leaves its code in a message queue and exits; a later process of the same user
    looks for it. Both under Landlock, as two kernels graded one after the other."""
    remove_the_donors_queue()

    def donor():
        landlock.restrict(landlock.ruleset(["/usr", "/lib", "/lib64"], [str(tmp_path)], []))
        queue = _libc.msgget(DONOR_KEY, IPC_CREAT | 0o666)
        if queue < 0:
            return {"msgget": ctypes.get_errno()}
        return {"msgsnd": _libc.msgsnd(queue, ctypes.byref(Message(1, b"def softmax(x): ...")), 64, 0)}

    def copier():
        landlock.restrict(landlock.ruleset(["/usr", "/lib", "/lib64"], [str(tmp_path)], []))
        message = Message()
        found = [_libc.msgrcv(_libc.msgget(DONOR_KEY, 0), ctypes.byref(message), 64, 0, IPC_NOWAIT)]
        found += [_libc.msgrcv(queue, ctypes.byref(message), 64, 0, IPC_NOWAIT) for queue in range(64)]
        return {"read": message.mtext.decode()}
    try:
        assert in_child(donor) == {"msgget": 13}
        assert in_child(copier) == {"read": ""}
    finally:
        remove_the_donors_queue()


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.skipif(landlock.abi() < 4, reason="Landlock with TCP rules (ABI 4) is not available here")
@pytest.mark.parametrize("way", WAYS)
def test_without_namespaces_a_kernel_reaches_nothing_landlock_does_not_govern(way, outside_tmp):
    """The real grader, without namespaces: a socket at a path known in advance that the
    kernel's user may connect to, as the desktop's session bus is to the TA's own user (its
    systemd would start any program outside the sandbox); TCP through Fast Open; UDP; a System V
    message queue a later kernel could read. None is reached; the notebook still scores in full."""
    expect_slow()
    if os.geteuid() != 0 or not all(shutil.which(p) for p in ("capsh", "setpriv", "unshare")):
        pytest.skip("switching users and dropping capabilities needs root, capsh, setpriv and unshare")
    if private_ancestors() and not sandbox.namespaces_available():
        pytest.skip("the interpreter is in a private folder and no mount namespace can open it")
    sockets, batch, out, home = (outside_tmp / n for n in ("sockets", "batch", "out", "home"))
    for folder in (sockets, batch, out, home):
        folder.mkdir()
        folder.chmod(0o777)
    server = _listening(sockets / "neighbour.sock")
    (sockets / "neighbour.sock").chmod(0o777)
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.settimeout(0.5)
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        f"# unix\nimport socket\nsocket.socket(socket.AF_UNIX).connect({str(sockets / 'neighbour.sock')!r})\n"
        "raise RuntimeError('connected')"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "# fastopen\nimport socket\n"
        f"socket.socket().sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', {tcp.getsockname()[1]}))\n"
        "raise RuntimeError('connected')"))
    nb.cells.append(nbformat.v4.new_code_cell(
        "# udp\nimport socket\n"
        f"socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'case', ('127.0.0.1', {tcp.getsockname()[1]}))\n"
        "raise RuntimeError('sent')"))
    nb.cells.append(nbformat.v4.new_code_cell("# sysv\n" + LEAVE_CODE))
    nbformat.write(nb, batch / "mallory.ipynb")
    try:
        done = grade_without_namespaces(way, batch, out, home)
    finally:
        server.close()
        remove_the_donors_queue()
    with contextlib.suppress(OSError):
        tcp.accept()
        pytest.fail("the kernel opened a TCP connection")
    tcp.close()
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = glob.glob(str(out / "*" / "result.json"))
    result = json.loads(Path(path).read_text())
    assert [(e["ename"], e["evalue"].split(":")[0]) for e in result["errors"]] == [
        ("PermissionError", "[Errno 13] Permission denied")] * 3 + [("PermissionError", "[Errno 13] msgget refused")]
    assert "landlock" in result["isolation"]["active"]
    assert result["score"] == result["max_score"] == 25


@pytest.mark.slow
@pytest.mark.skipif(landlock.abi() < 2, reason="Landlock with rules on linking (ABI 2) is not available here")
def test_a_landlocked_process_reaches_no_denied_file_by_another_path(tmp_path):
    """Held: a hard link or a rename of a course file into the kernel's own folder, where it
    may read everything, and /proc/self/root, are refused."""
    own, course = tmp_path / "own", tmp_path / "course"
    own.mkdir()
    course.mkdir()
    (course / "solution.ipynb").write_text("COURSE-ONLY")

    def attack():
        landlock.restrict(landlock.ruleset(["/usr", "/lib", "/lib64"], [str(own)], [str(course)]))
        return {"link": _tried(lambda: os.link(course / "solution.ipynb", own / "linked.ipynb")),
                "rename": _tried(lambda: os.rename(course / "solution.ipynb", own / "moved.ipynb")),
                "root": _tried(lambda: open(f"/proc/self/root{course}/solution.ipynb").read()),
                "read": _tried(lambda: open(course / "solution.ipynb").read())}
    report = in_child(attack)
    assert report["link"] in (13, 18) and report["rename"] in (13, 18), report   # EACCES or EXDEV
    assert report["root"] == report["read"] == 13, report
    assert (course / "solution.ipynb").read_text() == "COURSE-ONLY" and not list(own.iterdir())
