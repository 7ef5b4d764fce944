"""Runs as process 1 of the kernel's new PID, mount and network namespaces, still as root,
just before the kernel starts. Never imported by the grader: it runs as
`python -I -S sandbox_launcher.py POLICY COMMAND...`.

argv: policy JSON, then the kernel command. It gives the sandbox a private /tmp, hides the
grader's files, drops to the unprivileged user, starts the kernel as its child and reaps
every orphan until the kernel exits; when it exits, the kernel namespace and everything
left in it are killed.
"""
import ctypes
import json
import os
import signal
import sys

MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 2, 4, 4096, 16384
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype=None, flags=0, data=None):
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def private_tmp(policy):
    """tmpfs over the shared temporary folders; the kernel's own folder, and the interpreter
    if it lives there (a virtual environment in /tmp), are bound back."""
    targets = [t for t in policy["tmpfs"] if os.path.isdir(t)]
    wanted = sorted({p for p in [policy["workdir"], *policy["expose"]] if any(_inside(p, t) for t in targets)})
    roots = [p for p in wanted if not any(_inside(p, q) and p != q for q in wanted)]
    kept = {p: os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in roots}
    for target in targets:
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={policy['tmpfs_megabytes']}m,mode=1777")
    for path, fd in kept.items():
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def expose(paths):
    """Let the unprivileged user reach the interpreter and the kernel's folder: a folder on
    their way that others may not enter (such as /root) is replaced, in this namespace only,
    by an empty tmpfs holding just the needed child, bound back from the original."""
    needed = {}
    for path in paths:
        parts = path.rstrip("/").split("/")
        for depth in range(2, len(parts)):
            ancestor, child = "/".join(parts[:depth]) or "/", parts[depth]
            if not os.stat(ancestor).st_mode & 0o001:
                needed.setdefault(ancestor, set()).add(child)
                break
    for ancestor in sorted(needed, key=len, reverse=True):
        kept = {c: os.open(os.path.join(ancestor, c), os.O_RDONLY | os.O_DIRECTORY) for c in needed[ancestor]}
        mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0711")
        for child, fd in kept.items():
            os.mkdir(os.path.join(ancestor, child))
            mount(f"/proc/self/fd/{fd}", os.path.join(ancestor, child), None, MS_BIND | MS_REC)
            os.close(fd)


def hide(paths):
    """Folders become a package whose import fails with a plain message; files become empty."""
    stub = "/tmp/.grader-hidden"
    os.makedirs(stub, mode=0o755, exist_ok=True)
    with open(os.path.join(stub, "__init__.py"), "w") as f:
        f.write('raise ImportError("the grader is not available to submissions")\n')
    for path in paths:
        if os.path.isdir(path):
            mount(stub, path, None, MS_BIND)
        elif os.path.isfile(path):
            mount("/dev/null", path, None, MS_BIND)


def drop_privileges(uid, gid, connection_file):
    parent = os.getppid()
    if connection_file and os.path.exists(connection_file):
        os.chown(connection_file, uid, gid)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    # Changing the user cleared the parent-death signal (`unshare --kill-child`, or the
    # grader's own): set it again, so this process, and with it the kernel's PID namespace,
    # dies with its parent. A parent already gone is seen here, except from inside a PID
    # namespace, where the grader's watchdog kills what is left.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main():
    policy = json.loads(sys.argv[1])
    command = sys.argv[2:]
    if policy.get("mount"):
        private_tmp(policy)
        expose(policy["expose"])
        hide(policy["hide"])
    if policy.get("uid") is not None:
        drop_privileges(policy["uid"], policy["gid"], policy.get("connection_file"))
    # Interrupts reach the kernel through its process group; this reaper must not die of them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The kernel's parent is this process, PID 1 here, so it cannot watch the grader's PID.
    os.environ.pop("JPY_PARENT_PID", None)
    kernel = os.fork()
    if kernel == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execv(command[0], command)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            sys.exit(0)
        if pid == kernel:
            sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


main()
