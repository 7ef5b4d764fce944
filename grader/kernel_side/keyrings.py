"""A kernel's keyrings: a fresh, empty session keyring of its own, and no way to reach any
other keyring.

Without this, a kernel keeps the session keyring of whoever started the grader (or the fork
server): a TA's login keyring, whose secrets it can read. And every kernel run as `nobody`
shares `nobody`'s user keyring (@u), which outlives grading: one submission could leave its
code there for a later one.

Two steps, in the process that execs the kernel, after it has dropped its privileges:
- it joins a new anonymous session keyring, so the one it inherited is no longer its own;
- a seccomp filter makes add_key, request_key and keyctl fail with EPERM. A kernel needs
  none of them, and this is what keeps it from @u, which no new session keyring replaces.
  A filter rather than a user namespace of its own: it works the same for a fresh and a
  forked kernel, as root or not, and where user namespaces are disabled (many LMS
  containers); it is inherited by everything the kernel starts and cannot be removed.

Loaded by path, never as part of the grader, by launcher.py (which the fork server
loads too); the standard library only.
"""
import ctypes
import os
import platform

KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM = 1
# Keyring calls already refused (Docker's default seccomp profile does) or a kernel without
# keyrings: the kernel reaches no keyring, whatever it inherited; the filter is still installed.
UNREACHABLE = (EPERM, 38)   # ENOSYS
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
OFFSET_NR, OFFSET_ARCH = 0, 4   # in struct seccomp_data
X32_BIT = 0x40000000
# Per machine: the native keyctl syscall number, then each ABI a process there may call the
# kernel through (its audit architecture and its add_key, request_key and keyctl numbers):
# a 32-bit program started by the kernel would otherwise get around the filter.
ABIS = {
    "x86_64": (250, [(0xC000003E, (248, 249, 250, X32_BIT | 248, X32_BIT | 249, X32_BIT | 250)),
                     (0x40000003, (286, 287, 288))]),
    "aarch64": (219, [(0xC00000B7, (217, 218, 219)), (0x40000028, (309, 310, 311))]),
}
_libc = ctypes.CDLL(None, use_errno=True)


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def supported() -> bool:
    """Whether this machine's kernels can be given keyrings of their own."""
    return platform.machine() in ABIS and _seccomp_in_kernel()


def _seccomp_in_kernel() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def deny_program(abis) -> list[tuple[int, int, int, int]]:
    """The filter, as (code, jump if true, jump if false, k): EPERM for the keyring calls of
    each ABI, everything else allowed."""
    body: list[tuple[int, int | str, int, int]] = []   # "deny": the jump to the deny, resolved at the end
    for arch, numbers in abis:
        # Not this ABI: skip its block (the load of the number, its comparisons and the allow
        # after them), the architecture still loaded for the next block's comparison.
        body.append((BPF_JEQ_K, 0, len(numbers) + 2, arch))
        body.append((BPF_LD_W_ABS, 0, 0, OFFSET_NR))
        body += [(BPF_JEQ_K, "deny", 0, number) for number in numbers]
        body.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    program = [(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH), *body, (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    deny = len(program)
    program.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM))
    return [(code, deny - index - 1 if isinstance(jt, str) else jt, jf, k)   # "deny" is the one text
            for index, (code, jt, jf, k) in enumerate(program)]


def isolate() -> None:
    """In the process that execs the kernel, once it runs as the kernel's user: a new empty
    session keyring, then no keyring calls at all. Raises OSError when either fails: the
    kernel is then not started."""
    keyctl, abis = ABIS[platform.machine()]
    if _libc.syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, None) < 0 and ctypes.get_errno() not in UNREACHABLE:
        _check(-1, "joining a new session keyring")
    program = deny_program(abis)
    instructions = (_Instruction * len(program))(*[_Instruction(*i) for i in program])
    fprog = _Program(len(program), instructions)
    # Lets an unprivileged process install the filter; no program it starts gains privileges.
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp filter")

