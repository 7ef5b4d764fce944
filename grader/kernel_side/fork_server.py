"""A warm parent for kernels: it imports what every kernel imports (ipykernel, IPython,
numpy, matplotlib) once, then forks one kernel per request, each into the same sandbox a
fresh kernel gets. Never imported by the grader: it runs as `python -I fork_server.py FOLDER
IDLE_SECONDS` with a scrubbed environment, so it holds nothing of the grader's (no
reference, no spec, no seed) and nothing of any submission: no student code ever runs in it.

It is shared by the grading runs of one installation (see forked_kernels.py) and exits once
no kernel has run for a while. Protocol, on a Unix socket in a folder only its user can
open, one connection per kernel:
- the grader sends one request (length-prefixed JSON: the launcher's policy, the limits, the
  cgroups to join, the kernel's environment and connection file) with the kernel's stdout
  and stderr as passed file descriptors;
- a handler, forked from this process before it reads anything, so that the parent never
  holds a request, answers {"pid": PID}: its own process, leader of the kernel's process
  group (interrupts and kills go there);
- the handler joins the cgroups, sets the limits, enters new namespaces and forks the
  launcher (process 1 of the new PID namespace), which builds the allowlisted root as for a
  fresh kernel and forks the kernel itself; both drop to the unprivileged user and leave
  this server's keyrings (those of whoever started it) for keyrings of their own;
- when the launcher exits, the handler answers {"exit": CODE} and exits.
Children are always forked from this pristine parent, never from one another.
"""
import ctypes
import fcntl
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import types

# What a kernel imports on start, and the built-in assignments' notebooks after it. A module
# the assignment forbids is never warm: the grader compares this list with the forbidden
# libraries and starts fresh kernels instead.
WARM = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.comm", "debugpy",
        "IPython.core.completer", "jedi", "ipykernel.debugger", "debugpy.server",
        "numpy", "numpy.random", "matplotlib", "matplotlib.pyplot",
        "matplotlib_inline.backend_inline",
        # What ipykernel's application and shell import while they start, after the fork.
        "psutil", "tornado.platform.asyncio", "IPython.core.completerlib", "faulthandler")
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = \
    0x00020000, 0x04000000, 0x08000000, 0x20000000, 0x40000000
MS_REC, MS_PRIVATE = 16384, 1 << 18
PR_SET_PDEATHSIG = 1
MAX_REQUEST = 2**20
_libc = ctypes.CDLL(None, use_errno=True)


def _load_launcher():
    """The fresh kernels' launcher, by its path: the grader's package is never imported here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
    spec = importlib.util.spec_from_file_location("_grader_launcher", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"the launcher cannot be loaded from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


launcher = _load_launcher()


def warm() -> list[str]:
    warmed = []
    for name in WARM:
        try:
            __import__(name)
            warmed.append(name)
        except Exception:  # noqa: BLE001 - a module that is not installed is simply not warm
            pass
    return warmed


def send(conn, message: dict) -> None:
    data = json.dumps(message).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def show_environment(env: dict) -> None:
    """Make /proc/PID/environ show `env`. It shows the memory the process was started with,
    which a forked process shares with this server (started with room to spare, see
    ENVIRONMENT_ROOM in forked_kernels.py): the kernel's processes then carry their sandbox's
    marker there, as a fresh kernel's do, and are found by it."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])   # env_start and env_end: fields 50 and 51
    marker_first = sorted(env.items(), key=lambda item: item[0] != "SANDBOX_ID")
    block = b"".join(f"{k}={v}".encode() + b"\0" for k, v in marker_first)[:end - start]
    ctypes.memmove(start, block.ljust(end - start, b"\0"), end - start)


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def receive_request(conn):
    header = conn.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack("!I", header)
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    data, fds, _, _ = socket.recv_fds(conn, size, 2, socket.MSG_WAITALL)
    if len(fds) != 2 or len(data) != size:
        raise ValueError("a request needs the kernel's stdout and stderr")
    return json.loads(data), fds


def handle(conn) -> int:
    """In the handler: one kernel, from request to exit."""
    request, (stdout, stderr) = receive_request(conn)
    os.setsid()   # its own process group: the grader's interrupts and kills go to it
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # interrupts are the kernel's, not the handler's
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _die_with_parent()
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout, 1), (stderr, 2)):
        os.dup2(source, target)
    for fd in (null, stdout, stderr):
        os.close(fd)
    show_environment(request["env"])
    send(conn, {"pid": os.getpid()})
    for directory in request["cgroups"]:
        with open(os.path.join(directory, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    for kind, soft, hard in request["rlimits"]:
        try:
            resource.setrlimit(kind, (soft, hard))
        except (ValueError, OSError):
            pass
    _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    # Like `unshare --mount`: nothing mounted in the kernel's namespace propagates back.
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    first = os.fork()
    if first == 0:
        conn.close()
        _child(run_launcher, request)
    send(conn, {"exit": _watch(first, conn)})
    return 0


def _watch(launcher_pid: int, conn) -> int:
    """Wait for the launcher to exit; returns its exit code. Should the grader process that
    asked for this kernel go away (its end of the connection closes), the launcher is killed,
    and with it the kernel's namespace: a kernel never outlives the process grading it.
    The launcher's exit is an event (a pidfd, readable when it exits), so the grader hears of
    it at once; where Linux has no pidfd (before 5.3), it is checked every 0.1 s."""
    try:
        exited = [os.pidfd_open(launcher_pid)]
    except (AttributeError, OSError):
        exited = []
    try:
        while True:
            pid, status = os.waitpid(launcher_pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            readable, _, _ = select.select([conn, *exited], [], [], None if exited else 0.1)
            if conn in readable and not conn.recv(1024):
                os.kill(launcher_pid, signal.SIGKILL)
                _, status = os.waitpid(launcher_pid, 0)
                return os.waitstatus_to_exitcode(status)
    finally:
        for fd in exited:
            os.close(fd)


def _child(function, *args) -> None:
    """Run `function` in a forked child and never return into the caller's frames."""
    code = 1
    try:
        function(*args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on the kernel's stderr, which the grader reads
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_launcher(request) -> None:
    """Process 1 of the kernel's namespaces, as the fresh kernels' launcher is."""
    _die_with_parent()
    policy = request["policy"]
    if policy.get("mount"):
        launcher.build_root(policy)
    uid, gid = policy.get("uid"), policy.get("gid")
    if uid is not None:
        launcher.give_connection_file(uid, gid, policy.get("connection_file"))
    kernel = os.fork()
    if kernel == 0:
        _child(run_kernel, request)
    if uid is not None:
        launcher.drop_privileges(uid, gid)
    launcher.confine(policy)   # this server's keyrings are those of whoever started it
    raise SystemExit(launcher.supervise(kernel))


def run_kernel(request) -> None:
    policy = request["policy"]
    if policy.get("uid") is not None:
        launcher.drop_privileges(policy["uid"], policy["gid"])
    else:
        _die_with_parent()
    launcher.confine(policy)
    os.closerange(3, min(os.sysconf("SC_OPEN_MAX"), 65536))
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # What a fresh kernel would have: its own main module and arguments, fresh random state,
    # none of this server's modules.
    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules.pop("_grader_launcher", None)
    sys.argv = ["ipykernel_launcher", *request["arguments"]]
    os.chdir(request["cwd"])
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    launch(request["arguments"])


def launch(arguments: list) -> None:
    """ipykernel's launch_new_instance. The grader's kernel command passes one option, `-f
    CONNECTION_FILE`: that is set as traitlets' command-line parsing would set it (the
    application's command-line config, given priority over config files), without building
    its parser of every option of every configurable class, a sixth of ipykernel's start."""
    from ipykernel import kernelapp
    if len(arguments) != 2 or arguments[0] != "-f":
        kernelapp.launch_new_instance()
        return
    from traitlets.config import Config

    def parse_command_line(argv=None):
        app.argv = list(arguments)
        app.cli_config = Config({"IPKernelApp": {"connection_file": arguments[1]}})
        app.update_config(app.cli_config)

    app = kernelapp.IPKernelApp.instance()
    app.parse_command_line = parse_command_line  # type: ignore[method-assign]  # this one instance parses nothing
    app.initialize(arguments)
    app.start()


def listen(path: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    return listener


def serve(listener: socket.socket, idle_seconds: float) -> None:
    """Fork a handler per connection until no kernel has run for `idle_seconds`."""
    owner = os.getuid()
    handlers: set[int] = set()
    idle_since = time.monotonic()
    while handlers or time.monotonic() - idle_since < idle_seconds:
        ready, _, _ = select.select([listener], [], [], 1.0)
        for pid in list(handlers):   # a handler ends with its kernel
            if os.waitpid(pid, os.WNOHANG)[0]:
                handlers.discard(pid)
                idle_since = time.monotonic()
        if not ready:
            continue
        conn, _ = listener.accept()
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid == owner:
            pid = os.fork()
            if pid == 0:
                listener.close()
                _child(handle, conn)
            handlers.add(pid)
        conn.close()


def main() -> None:
    """argv: the server's folder (private to its user), and how long it stays without kernels.
    One server per folder: it holds the folder's lock for its whole life, so a second one
    started at the same time exits at once."""
    folder, idle_seconds = sys.argv[1], float(sys.argv[2])
    lock = open(os.path.join(folder, "lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    hello = os.path.join(folder, "hello.json")
    path = os.path.join(folder, "socket")
    try:
        if os.path.exists(hello):
            os.unlink(hello)   # a server before this one was killed
        warmed = warm()
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1 or threading.active_count() != 1:
            # Forking is only safe from a process with a single thread.
            print(f"not serving: {threads} threads after the imports", file=sys.stderr, flush=True)
            return
        if os.path.exists(path):
            os.unlink(path)   # a server before this one was killed
        listener = listen(path)
        with open(hello + ".new", "w") as f:
            json.dump({"pid": os.getpid(), "warm": warmed, "modules": sorted(sys.modules)}, f)
        os.replace(hello + ".new", hello)
        serve(listener, idle_seconds)
    finally:
        for name in (hello, path):
            try:
                os.unlink(name)
            except OSError:
                pass


if __name__ == "__main__":
    main()
