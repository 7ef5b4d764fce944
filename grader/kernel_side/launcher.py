"""Runs as process 1 of the kernel's new PID, mount and network namespaces, still as root,
just before the kernel starts (without namespaces, as the kernel's parent). Never imported
by the grader: a fresh kernel is started as `python -I -S launcher.py POLICY
COMMAND...`, and the fork server (fork_server.py) loads this file by its path and calls the
same steps in a forked child.

argv: policy JSON, then the kernel command. It builds the kernel's filesystem from an
allowlist (the system's programs and libraries, the interpreter and its packages, a few
files of /etc, and the kernel's own folder, the only thing writable), puts stubs over the
grader's files and the forbidden libraries (without namespaces, Landlock allows the same
paths and no others: landlock.py), drops to the unprivileged user, gives itself keyrings of
its own (keyrings.py), starts the kernel as its child and reaps every orphan until the
kernel exits; when it exits, the kernel namespace and everything left in it are killed.
"""
import ctypes
import importlib.util
import json
import os
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_CAPBSET_DROP, CAPABILITY_VERSION_3 = 24, 0x20080522
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "i686": 217, "armv7l": 218}
# The system's programs and libraries; on merged-/usr systems most are links into /usr.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need of /etc: users and groups, the dynamic linker's cache, the time zone,
# Debian's alternatives (links of /usr/bin point there), fonts and MIME types.
ETC = ("passwd", "group", "nsswitch.conf", "hosts", "host.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
       "localtime", "timezone", "alternatives", "fonts", "mime.types", "os-release", "debian_version")
DEVICES = ("null", "zero", "full", "random", "urandom")
# Where code expects to write temporary files; in the sandbox they are one folder inside the
# kernel's own, so they count against its quota and vanish with it.
TEMPORARY = ("/tmp", "/var/tmp", "/dev/shm")
SCRATCH = "/tmp"   # where the new root is assembled, in this mount namespace only
STUBS = "/.stubs"
_libc = ctypes.CDLL(None, use_errno=True)


class CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapabilitySet(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _sibling(name):
    """A module of this folder, by its path: the launcher runs with -I, and the fork server
    never imports the grader's package."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_grader_sandbox_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{name} cannot be loaded from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


keyrings = _sibling("keyrings")
landlock = _sibling("landlock")


def mount(source, target, fstype=None, flags=0, data=None):
    if _libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                   flags, data.encode() if data else None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths):
    """The paths not inside another of them."""
    return sorted(p for p in set(paths) if not any(_inside(p, q) and p != q for q in paths))


class Root:
    """The new root, a small tmpfs, filled with bind mounts of what the kernel may see."""

    def __init__(self, where):
        self.where = where
        self.sources = {}

    def keep(self, path):
        """Open what will be bound before anything is mounted over its path."""
        if path not in self.sources and os.path.lexists(path) and not os.path.islink(path):
            self.sources[path] = os.open(path, os.O_PATH)

    def mount(self):
        mount("tmpfs", self.where, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755")

    def at(self, path):
        return self.where + path

    def bind(self, path, source=None, writable=False):
        """Bind `source` (by default the same path outside) at `path`; read-only unless writable."""
        source = source or path
        fd = self.sources.get(source)
        if fd is None:
            return
        target = self.at(path)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            if not os.path.exists(target):
                open(target, "w").close()
        mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if writable else MS_RDONLY)
        if path.startswith("/dev/") and not os.path.isdir(target):
            mount(None, target, None, flags)
        else:
            mount(None, target, None, flags | MS_NODEV)

    def link(self, path):
        target = self.at(path)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.symlink(os.readlink(path), target)

    def stub(self, path, message, index):
        """Put a stub over `path`, if the kernel can see it: a folder becomes a package whose
        import fails with `message`, a module file one that fails the same way."""
        target = self.at(path)
        if not os.path.lexists(target):
            return
        stub = self.at(f"{STUBS}/{index}")
        is_package = os.path.isdir(target)
        os.makedirs(stub if is_package else os.path.dirname(stub), mode=0o755, exist_ok=True)
        code_file = os.path.join(stub, "__init__.py") if is_package else stub + ".py"
        with open(code_file, "w") as f:
            f.write(f"raise ImportError({message!r})\n")
        mount(stub if is_package else code_file, target, None, MS_BIND)

    def enter(self, workdir):
        """Make the new root read-only and the process's root; the old one is detached."""
        mount(None, self.where, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        for fd in self.sources.values():
            os.close(fd)
        os.chdir(self.where)
        number = SYS_PIVOT_ROOT.get(os.uname().machine)
        if number is not None and _libc.syscall(number, b".", b".") == 0:
            _libc.umount2(b".", MNT_DETACH)
        else:
            os.chroot(".")
        os.chdir("/")
        os.chdir(workdir)


def build_root(policy):
    workdir = policy["workdir"]
    uid = policy.get("uid")
    temporary = os.path.join(workdir, ".tmp")
    os.makedirs(temporary, mode=0o700, exist_ok=True)
    if uid is not None:
        os.chown(temporary, uid, policy["gid"])
    root = Root(SCRATCH)
    system = [p for p in SYSTEM if os.path.lexists(p)]
    links = [p for p in system if os.path.islink(p)]
    interpreter = [p for p in _outermost(policy["expose"]) if not any(_inside(p, s) for s in system if s not in links)]
    etc = [os.path.join("/etc", n) for n in ETC if os.path.lexists(os.path.join("/etc", n))]
    course = [policy["course"]] if policy.get("course") else []
    for path in [*system, *interpreter, *etc, workdir, temporary, *course, *(f"/dev/{d}" for d in DEVICES)]:
        root.keep(path)
    root.mount()
    for path in system:
        root.link(path) if path in links else root.bind(path)
    for path in etc:
        root.link(path) if os.path.islink(path) else root.bind(path)
    for device in DEVICES:
        root.bind(f"/dev/{device}", writable=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root.at(f"/dev/{name}"))
    # A private set of pseudo-terminals, for shell escapes (`!cmd`), which run in one.
    os.makedirs(root.at("/dev/pts"), mode=0o755)
    mount("devpts", root.at("/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    os.symlink("pts/ptmx", root.at("/dev/ptmx"))
    os.symlink("/proc/self/mounts", root.at("/etc/mtab"))
    # Each folder is bound after those it lies in: the kernel's private /tmp first, then an
    # interpreter installed there (a venv in /tmp, common in CI), the kernel's own folder and
    # the course's modules beside it (read-only, and a mount point it cannot move or remove),
    # which would otherwise be hidden under it.
    binds = [*((path, temporary, True) for path in TEMPORARY), *((path, None, False) for path in interpreter),
             (workdir, None, True), *((path, None, False) for path in course)]
    for path, source, writable in sorted(binds, key=lambda bind: bind[0].rstrip("/").count("/")):
        root.bind(path, source=source, writable=writable)
    os.makedirs(root.at("/proc"), mode=0o555)
    mount("proc", root.at("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    index = 0
    for path in policy["hide"]:
        root.stub(path, "the grader is not available to submissions", index := index + 1)
    for module, paths in policy["forbidden"].items():
        for path in paths:
            root.stub(path, f"{module} is not available: this assignment forbids it", index := index + 1)
    root.enter(workdir)


def landlock_ruleset(policy):
    """Without namespaces: the same allowlist as build_root's, as a Landlock ruleset, made
    while every path can still be opened."""
    readable = [*SYSTEM, *policy["expose"], *(os.path.join("/etc", n) for n in ETC),
                *([policy["course"]] if policy.get("course") else [])]
    denied = [*policy["hide"], *(p for paths in policy["forbidden"].values() for p in paths)]
    return landlock.ruleset(readable, [policy["workdir"]], denied, devices=[f"/dev/{d}" for d in DEVICES])


def drop_capabilities():
    """Where the kernel keeps the grader's user (root, when `nobody` cannot read the
    interpreter and there are no namespaces), it keeps none of its capabilities: root without
    CAP_SYS_ADMIN could still make device nodes, sniff the network, load modules or reboot.
    Emptied from the bounding set too, and with no_new_privs set after this, no program the
    kernel starts regains them. For any other user there is nothing to drop."""
    for capability in range(64):
        _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)   # fails without CAP_SETPCAP: none to drop
    header = CapabilityHeader(CAPABILITY_VERSION_3, 0)
    if _libc.capset(ctypes.byref(header), (CapabilitySet * 2)()) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"dropping capabilities: {os.strerror(errno)}")


def confine(policy, ruleset=None):
    """Once running as the kernel's user: no capabilities, keyrings of its own, then the
    Landlock ruleset."""
    drop_capabilities()
    if policy.get("keyrings"):
        keyrings.isolate()
    if ruleset is not None:
        landlock.restrict(ruleset)


def give_connection_file(uid, gid, connection_file):
    """The kernel, once unprivileged, must still read the file naming its sockets."""
    if connection_file and os.path.exists(connection_file):
        os.chown(connection_file, uid, gid)


def drop_privileges(uid, gid):
    parent = os.getppid()
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


def supervise(kernel):
    """As process 1: reap every orphan until the kernel exits; returns its exit status as a
    shell gives it, 128 plus the signal that killed it, and at most 128 when it exited by
    itself, so that the grader tells a signal (from outside, or a crash) from any exit code."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == kernel:
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return min(os.waitstatus_to_exitcode(status), 128)


def main():
    policy = json.loads(sys.argv[1])
    command = sys.argv[2:]
    if policy.get("mount"):
        build_root(policy)
    ruleset = landlock_ruleset(policy) if policy.get("landlock") else None
    if policy.get("uid") is not None:
        give_connection_file(policy["uid"], policy["gid"], policy.get("connection_file"))
        drop_privileges(policy["uid"], policy["gid"])
    if not policy.get("mount"):
        # Without a PID namespace, every orphan of the kernel's (a process that double-forks,
        # leaves its session and empties its environment) becomes this process's child, not
        # init's: the grader finds them all below it (leftovers.descendants).
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Interrupts reach the kernel through its process group; this reaper must not die of them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The kernel's parent is this process, PID 1 here, so it cannot watch the grader's PID.
    os.environ.pop("JPY_PARENT_PID", None)
    kernel = os.fork()
    if kernel == 0:
        # Only the kernel is confined: outside its Landlock domain, this process is one it can
        # neither signal nor trace (Landlock's scopes), so it cannot end the reaper of its orphans.
        confine(policy, ruleset)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # Without a PID namespace, nothing takes the kernel with this process: it dies with it.
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            os.execv(command[0], command)
        except OSError as exc:   # one line the grader shows as the machine's fault, naming the file
            os.write(2, f"OSError: the sandbox cannot run {command[0]} ({exc.strerror}): "
                        "is it inside a folder the sandbox hides?\n".encode())
            os._exit(127)
    sys.exit(supervise(kernel))


if __name__ == "__main__":
    main()
