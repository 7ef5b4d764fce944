"""The kernel's filesystem allowlist and its network, with Landlock, where the grader cannot
create namespaces (not root, or root without CAP_SYS_ADMIN, as in many LMS containers).

Landlock needs no privilege: a process restricts itself and everything it starts, for good.
The kernel may read and execute what the allowlist names, write in its own folder only, and
neither connect nor bind a TCP socket; from ABI 6 on it can neither signal a process outside
its domain (the grader, when both run as the same user) nor reach an abstract Unix socket
outside it. Landlock is an allowlist with rules on whole folders, so a folder holding
something the kernel must not read (a forbidden library, the grader) gets no rule of its own:
each entry beside it does, and the folder itself may only be listed.

Loaded by path, never as part of the grader, by launcher.py; the standard library only.
"""
import ctypes
import glob
import os
import platform
import stat
import struct

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446   # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
# What each ABI can restrict of the filesystem: 13 kinds of access in ABI 1, then moving files
# between folders (2), truncating (3) and device ioctls (5).
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_ACCESS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV   # what a rule on a file may grant
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV
MAKE_CHAR, MAKE_BLOCK = 1 << 6, 1 << 11
# In the kernel's own folder, every kind of access but making device nodes, which no kernel
# needs and which would open devices past every rule.
WRITE = (1 << 16) - 1 & ~(MAKE_CHAR | MAKE_BLOCK)
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1                         # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1              # ABI 6
O_PATH, O_CLOEXEC = 0o10000000, 0o2000000
_libc = ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The Landlock ABI this machine's kernel offers, 0 where it has none (or it is disabled,
    or a container's seccomp profile forbids it)."""
    version = _libc.syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    return max(version, 0)


def denies_tcp(version: int) -> bool:
    return version >= 4


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def with_compiled_copies(denied) -> set[str]:
    """The denied paths and, for a module file, its compiled copies in __pycache__: Python
    imports those after checking only that the source exists, which a rule cannot prevent."""
    found = {os.path.realpath(p) for p in denied}
    for path in list(found):
        folder, name = os.path.split(path)
        if name.endswith(".py"):
            found |= {os.path.realpath(p) for p in glob.glob(os.path.join(glob.escape(folder), "__pycache__",
                                                                           glob.escape(name[:-3]) + ".*.pyc"))}
    return found


def plan(readable, writable, denied) -> list[tuple[str, int]]:
    """The rules, as (path, access): `readable` read and executable, `writable` fully open,
    nothing at or under a `denied` path."""
    denied = with_compiled_copies(denied)
    # The folders with something denied inside: only these are opened entry by entry.
    holding = {parent for d in denied for parent in _parents(d)}
    rules: list[tuple[str, int]] = []

    def allow(path: str, access: int) -> None:
        """`path` is real and not inside a denied path."""
        if path in denied:
            return
        if path not in holding:
            rules.append((path, access))
            return
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError:
            return   # not readable by the grader's user, so not by the kernel either
        rules.append((path, READ_DIR))   # listed, but read only through its entries' own rules
        for entry in entries:
            if not entry.is_symlink():
                allow(entry.path, access)
            elif not _within(real := os.path.realpath(entry.path), denied):
                allow(real, access)

    for path in readable:
        if os.path.exists(path) and not _within(real := os.path.realpath(path), denied):
            allow(real, READ)
    for path in writable:
        rules.append((os.path.realpath(path), WRITE))
    return rules


def _parents(path: str):
    while (parent := os.path.dirname(path)) != path:
        yield parent
        path = parent


def _within(path: str, folders) -> bool:
    return any(_inside(path, folder) for folder in folders)


def ruleset(readable, writable, denied, devices=()) -> int:
    """A ruleset for the kernel, as a file descriptor; made before the privileges are dropped,
    so that every path can be opened. `devices` may be read and written."""
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available")
    handled_fs = FS_BY_ABI[max(v for v in FS_BY_ABI if v <= version)]
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if denies_tcp(version) else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    attr = struct.pack("QQQ", handled_fs, handled_net, scoped)[:8 if version < 4 else 16 if version < 6 else 24]
    fd = _check(_libc.syscall(SYS_CREATE_RULESET, attr, len(attr), 0), "landlock_create_ruleset")
    rules = plan(readable, writable, denied) + [(os.path.realpath(d), DEVICE) for d in devices if os.path.exists(d)]
    for path, access in rules:
        try:
            target = os.open(path, O_PATH | O_CLOEXEC)
        except OSError:
            continue   # gone, or out of the grader's own reach: then out of the kernel's too
        try:
            grant = access & handled_fs
            if not stat.S_ISDIR(os.fstat(target).st_mode):
                grant &= FILE_ACCESS
            rule = struct.pack("=Qi", grant, target)
            _check(_libc.syscall(SYS_ADD_RULE, fd, RULE_PATH_BENEATH, rule, 0), f"landlock rule for {path}")
        finally:
            os.close(target)
    return fd


def restrict(fd: int) -> None:
    """Confine this process, and everything it starts, to the ruleset, and refuse it the calls
    that reach past Landlock (see refuse_unguarded_calls)."""
    # Lets an unprivileged process restrict itself; no program it starts gains privileges.
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.syscall(SYS_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    os.close(fd)
    refuse_unguarded_calls()


X32_BIT = 0x40000000
IO_URING = (425, 426, 427)   # setup, enter, register: the same numbers on every architecture
# System V IPC: message queues, semaphores and shared memory, in the order get, control, use.
SYSV_IPC = {"x86_64": (68, 71, 69, 70, 64, 66, 65, 220, 29, 31, 30, 67),
            "i386": (117, *range(393, 403), 420), "aarch64": tuple(range(186, 198)),
            "arm": (*range(298, 309), 312, 420)}
AF_INET, AF_INET6 = 2, 10
# Per machine, each ABI a process there may call the kernel through: its audit architecture;
# the calls refused outright (connect; io_uring, whose operations no filter sees; System V
# IPC); the number of socket(), refused for an internet socket; and for i386's socketcall,
# (its number, the calls refused: socket, whose domain a filter cannot read there, and connect).
UNGUARDED_CALLS = {
    "x86_64": [(0xC000003E, (42, *IO_URING, *SYSV_IPC["x86_64"],
                             *(X32_BIT | n for n in (42, *IO_URING, *SYSV_IPC["x86_64"]))), (41, X32_BIT | 41), None),
               (0x40000003, (362, *IO_URING, *SYSV_IPC["i386"]), (359,), (102, (1, 3)))],
    "aarch64": [(0xC00000B7, (203, *IO_URING, *SYSV_IPC["aarch64"]), (198,), None),
                (0x40000028, (283, *IO_URING, *SYSV_IPC["arm"]), (281,), None)],
}
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EACCES = 0x7FFF0000, 0x00050000, 13
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16   # in struct seccomp_data (an argument's low 32 bits)


def unguarded_program(abis) -> list[tuple[int, int, int, int]]:
    """A seccomp filter, as (code, jump if true, jump if false, k): the calls that reach past
    Landlock fail with EACCES, as a TCP connect under Landlock does; everything else is
    allowed."""
    allow: tuple[int, int | str, int, int] = (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)
    body: list[tuple[int, int | str, int, int]] = []   # "deny": the jump to the deny, resolved at the end
    for arch, refused, sockets, socketcall in abis:
        block: list[tuple[int, int | str, int, int]] = [(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
                                                        *((BPF_JEQ_K, "deny", 0, n) for n in refused)]
        for number in sockets:
            block += [(BPF_JEQ_K, 0, 4, number), (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0),
                      (BPF_JEQ_K, "deny", 0, AF_INET), (BPF_JEQ_K, "deny", 0, AF_INET6), allow]
        if socketcall:
            number, calls = socketcall
            block += [(BPF_JEQ_K, 0, len(calls) + 1, number), (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0),
                      *((BPF_JEQ_K, "deny", 0, call) for call in calls)]
        block.append(allow)
        # Not this ABI: on to the next block, which loads the architecture again.
        body += [(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH), (BPF_JEQ_K, 0, len(block), arch), *block]
    program = [*body, allow]
    deny = len(program)
    program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EACCES))
    return [(code, deny - index - 1 if isinstance(jt, str) else jt, jf, k)   # "deny" is the one text
            for index, (code, jt, jf, k) in enumerate(program)]


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def refuse_unguarded_calls() -> None:
    """No connect(), no internet socket, no io_uring and no System V IPC. Landlock
    does not govern connecting to a Unix socket by its path (only making one), and many sit at
    paths known in advance: the desktop's session bus (/run/user/UID/bus, whose systemd starts
    any program outside the sandbox), the X server (/tmp/.X11-unix/X0), docker.sock. Nor does
    it see a TCP connection that sendto() with MSG_FASTOPEN opens, or one io_uring makes, nor
    UDP at all, which would carry a hidden case the function saw to a server of the student's.
    A kernel only binds the Unix sockets the grader connects to and answers on them. And
    without an IPC namespace, System V message queues and shared memory are the same for every
    kernel of the same user and outlive it: a notebook could leave its code there for a later
    one."""
    program = unguarded_program(UNGUARDED_CALLS.get(platform.machine(), []))
    instructions = (_Instruction * len(program))(*[_Instruction(*i) for i in program])
    fprog = _Program(len(program), instructions)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp filter")
