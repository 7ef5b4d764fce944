"""Each kernel has a fresh, empty session keyring and reaches no other keyring: not the
session keyring of whoever started the grader or the fork server (a TA's login keyring), and
not the unprivileged user's user keyring, which every kernel run as that user shares and
which outlives grading."""
import ctypes
import json
import os
import platform
import uuid

import nbformat
import pytest

from grading_helpers import SUBMISSIONS, grade, run_grader
from grader.kernel import forked as forked_kernels
from grader.kernel_side import keyrings
from grader.sandbox import isolation as sandbox

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_REVOKE, KEYCTL_CLEAR = 1, 3, 7
SYSCALLS = {"x86_64": {"add_key": 248, "keyctl": 250}, "aarch64": {"add_key": 217, "keyctl": 219}}
_libc = ctypes.CDLL(None, use_errno=True)

# Looks for a key by its description in a keyring and reads it: a RuntimeError carries what
# it read, a LookupError says it found nothing.
READ_KEY = '''
import ctypes, platform
_libc = ctypes.CDLL(None, use_errno=True)
_keyctl = {{"x86_64": 250, "aarch64": 219}}[platform.machine()]
_found = _libc.syscall(_keyctl, 10, {keyring}, b"user", {description!r}.encode(), 0)   # KEYCTL_SEARCH
_buffer = ctypes.create_string_buffer(4096)
_size = _libc.syscall(_keyctl, 11, _found, _buffer, 4096) if _found > 0 else -1        # KEYCTL_READ
if _size > 0:
    raise RuntimeError("read from the keyring: " + _buffer.raw[:_size].decode())
raise LookupError("nothing found in the keyring, errno %d" % ctypes.get_errno())
'''
LIST_KEYS = '''
try:
    _listing = open("/proc/keys").read()
except OSError as _exc:
    raise LookupError(f"/proc/keys: {{_exc}}")
if {description!r} in _listing:
    raise RuntimeError("listed in /proc/keys: " + _listing)
raise LookupError("not listed in /proc/keys")
'''
STORE_KEY = '''
import ctypes, platform
_libc = ctypes.CDLL(None, use_errno=True)
_add_key, _keyctl = {{"x86_64": (248, 250), "aarch64": (217, 219)}}[platform.machine()]
_code = "def softmax(x): return x  # the donor's work"
# Made in the process keyring, which it possesses, so that it may open the key to its user,
# then linked into @u, which outlives the kernel.
_key = _libc.syscall(_add_key, b"user", {description!r}.encode(), _code.encode(), len(_code), -2)
_libc.syscall(_keyctl, 5, _key, 0x3F3F0000)   # KEYCTL_SETPERM: any process of this user may read it
_libc.syscall(_keyctl, 8, _key, -4)           # KEYCTL_LINK into @u
'''


def keyctl(*args) -> int:
    return _libc.syscall(SYSCALLS[platform.machine()]["keyctl"], *args)


def add_key(description: str, payload: bytes, keyring: int) -> int:
    return _libc.syscall(SYSCALLS[platform.machine()]["add_key"], b"user", description.encode(), payload,
                         len(payload), keyring)


@pytest.fixture(autouse=True)
def _keyrings_supported():
    if not keyrings.supported() or platform.machine() not in SYSCALLS or os.geteuid() != 0:
        pytest.skip("keyrings of their own need seccomp on x86_64 or aarch64, and the tests need root")


def with_the_worked_solution(path, *cells: str) -> None:
    """A notebook with correct functions, then `cells`, each an attack on its own."""
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)


def outcomes(result, marker: str) -> list[tuple[str, str]]:
    """(error name, message) of the cells whose source holds `marker`."""
    return [(e.ename, e.evalue) for e in result.errors if marker in e.source]


@pytest.fixture
def secret_in_the_graders_session_keyring():
    """A secret in the session keyring of this process (the grader's: grading runs in it),
    as a TA's login keyring would hold one. The process first joins a keyring of its own, so
    no other process on the machine sees the secret; it is revoked afterwards."""
    assert keyctl(KEYCTL_JOIN_SESSION_KEYRING, None) > 0
    description = f"grader-test-secret-{uuid.uuid4().hex[:8]}"
    key = add_key(description, b"hunter2-from-the-ta", KEY_SPEC_SESSION_KEYRING)
    assert key > 0, os.strerror(ctypes.get_errno())
    yield description
    keyctl(KEYCTL_REVOKE, key)


@pytest.fixture
def own_fork_server(monkeypatch, tmp_path):
    """A fork server started by this test, so that it has this process's session keyring (a
    server started earlier in the run has the keyring of whoever started it)."""
    folder = tmp_path / "fork-server"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(forked_kernels, "server_folder", lambda: folder)
    monkeypatch.setattr(forked_kernels, "_server", None)
    monkeypatch.setattr(forked_kernels, "_failure", "")
    yield
    try:
        os.kill(json.loads((folder / "hello.json").read_text())["pid"], 9)
    except (OSError, ValueError):
        pass


def clear_the_unprivileged_users_keyring() -> None:
    """What an earlier run (before keyrings were private) may have left in @u of `nobody`."""
    ids = sandbox.unprivileged_ids()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(ids[1])
            os.setuid(ids[0])
            keyctl(KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "fresh"])
def test_a_notebook_cannot_read_the_graders_session_keyring(secret_in_the_graders_session_keyring, own_fork_server,
                                                            fork_server, tmp_path):
    description = secret_in_the_graders_session_keyring
    thief = tmp_path / "thief.ipynb"
    with_the_worked_solution(thief, "# session\n" + READ_KEY.format(keyring=KEY_SPEC_SESSION_KEYRING,
                                                                  description=description),
                             "# listing\n" + LIST_KEYS.format(description=description))
    result = grade(thief, "rows", _fresh=description, fork_server=fork_server)
    assert result.isolation["kernel_start"].startswith("forked" if fork_server else "fresh")
    (session,) = outcomes(result, "# session")
    assert session[0] == "LookupError", session
    # Not even its name: /proc/keys lists the keys a process may view, its session's among them.
    (listing,) = outcomes(result, "# listing")
    assert listing[0] == "LookupError", listing
    assert "hunter2" not in json.dumps(result.to_json()["errors"])
    assert result.score == result.max_score == 25
    assert "private keyring" in result.isolation["active"]


def test_a_key_a_donor_stores_is_not_found_by_a_later_run(tmp_path):
    """All kernels run as the same unprivileged user, whose user keyring (@u) outlives them."""
    if sandbox.unprivileged_ids() is None:
        pytest.skip("no unprivileged user here")
    clear_the_unprivileged_users_keyring()
    description = f"grader-test-donor-{uuid.uuid4().hex[:8]}"
    donor, copier = tmp_path / "donor.ipynb", tmp_path / "copier.ipynb"
    with_the_worked_solution(donor, STORE_KEY.format(description=description))
    with_the_worked_solution(copier, "# copy\n" + READ_KEY.format(keyring=KEY_SPEC_USER_KEYRING,
                                                                description=description))
    try:
        grade(donor, "rows", _fresh=description)
        code, _, err, _ = run_grader(["check", copier, "--json", tmp_path / "copier.json"])
        assert code == 0, err
        result = json.loads((tmp_path / "copier.json").read_text())
    finally:
        clear_the_unprivileged_users_keyring()
    (copied,) = [(e["ename"], e["evalue"]) for e in result["errors"] if "# copy" in e["source"]]
    assert copied[0] == "LookupError", copied


def test_the_filter_refuses_only_keyring_calls():
    """In a child process: after isolate(), the session keyring is a new one and every keyring
    call fails with EPERM, in it and in what it starts; other calls work."""
    before = keyctl(0, KEY_SPEC_SESSION_KEYRING, 0)   # KEYCTL_GET_KEYRING_ID
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        report = {}
        try:
            keyrings.isolate()
            report["session"] = keyctl(0, KEY_SPEC_SESSION_KEYRING, 0), ctypes.get_errno()
            report["add_key"] = add_key("x", b"y", KEY_SPEC_USER_KEYRING), ctypes.get_errno()
            report["getpid"] = os.getpid() > 0
            child = os.popen("python3 -c \"import ctypes;l=ctypes.CDLL(None,use_errno=True);"
                             f"print(l.syscall({SYSCALLS[platform.machine()]['keyctl']},0,-4,0),"
                             "ctypes.get_errno())\"").read().split()
            report["child"] = child
        finally:
            os.write(write, json.dumps(report).encode())
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    report = json.loads(os.read(read, 65536))
    assert report == {"session": [-1, 1], "add_key": [-1, 1], "getpid": True, "child": ["-1", "1"]}, report
    assert keyctl(0, KEY_SPEC_SESSION_KEYRING, 0) == before   # this process is untouched


def test_the_filter_covers_every_abi_of_the_machine():
    """The 32-bit and x32 numbers are refused too: a program the kernel starts could use them."""
    native, abis = keyrings.ABIS[platform.machine()]
    program = keyrings.deny_program(abis)
    deny = len(program) - 1
    refused = set()
    for index, (code, jt, _, k) in enumerate(program):
        if code == keyrings.BPF_JEQ_K and jt and index + 1 + jt == deny:
            refused.add(k)
    assert refused == {n for _, numbers in abis for n in numbers} and native in refused
    assert program[-1][3] == keyrings.SECCOMP_RET_ERRNO | keyrings.EPERM


def test_keyring_calls_already_refused_do_not_stop_the_kernel():
    """Docker's default seccomp profile refuses keyring calls: joining a new session keyring
    fails there with EPERM, and the kernel must start all the same (it reaches no keyring).
    A filter installed first stands in for the container's profile."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            keyrings.isolate()   # the container's profile
            keyrings.isolate()   # the launcher's
            code = 0 if keyctl(0, KEY_SPEC_SESSION_KEYRING, 0) == -1 and ctypes.get_errno() == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
