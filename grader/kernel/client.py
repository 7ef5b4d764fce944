"""The grader's end of a kernel's connection: the kernel is launched through the sandbox (or
forked into it by the fork server, see ForkedProvisioner), and what it sends is bounded
before the grader holds it. Sockets refuse oversized messages and queue only a few, a
message with a bad signature is dropped, and of a cell's outputs only its first error and
the harness's last payload are kept.
"""
from __future__ import annotations

import asyncio
import math
import os
import signal
import socket
import sys
import time
import uuid
from typing import Any, cast
from queue import Empty

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from jupyter_client.session import Session
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionComplete, DeadKernelError
from zmq.utils.monitor import recv_monitor_message

from grader.kernel import forked as forked_kernels
from grader.notebook_nodes import display_output, error_output
from grader.kernel.forked import read_message, send_request
from grader.kernel_side.wire import MIME
from grader.sandbox.isolation import Sandbox

# Whatever a kernel sends, the grader holds at most MAX_QUEUED_MESSAGES messages of at most
# MAX_MESSAGE_BYTES on each of its sockets: a larger message makes ZMQ drop the connection
# instead of reading it (see BoundedKernelClient), and past the queue limit further messages
# are dropped.
MAX_MESSAGE_BYTES = 8 * 2**20
MAX_QUEUED_MESSAGES = 8
# The only messages the grader reads; comm (widget) traffic, display updates and anything
# else is dropped before nbclient would keep it.
KEPT_MESSAGES = frozenset({"status", "execute_input", "stream", "display_data", "execute_result", "error",
                           "clear_output"})
# Once a cell's reply has come, its outputs are over when the kernel says it is idle, or when
# nothing more has come for this many seconds: a gap in what arrives, never a time for reading
# it all, which a busy machine stretches.
OUTPUT_GAP = 2.0
# How often the reading of a cell's outputs looks whether the cell's reply has come.
REPLY_LOOK_SECONDS = 0.25
# How often a running cell's watch looks whether the kernel is alive, besides looking as soon
# as the kernel exits (CappedClient._async_poll_kernel_alive): nbclient's period.
ALIVE_LOOK_SECONDS = 1.0


class OwnKernelSpec(KernelSpecManager):
    """The kernel is always ipykernel on the grader's own interpreter. A "python3" kernel spec
    installed for the user or the system (another interpreter, other arguments) is never looked
    up; the search would also import all of IPython, a quarter of a second."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                          display_name="Python 3", language="python", resource_dir="")


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through the sandbox's launcher, or forks it from the fork server."""

    sandbox: Sandbox | None = None
    fork_connection: socket.socket | None = None   # to the fork server, when the kernel is forked

    def format_kernel_cmd(self, extra_arguments=None):
        command = super().format_kernel_cmd(extra_arguments)
        forked = self.fork_connection is not None
        return self.sandbox.wrap(command, self.connection_file) if self.sandbox and not forked else command

    async def _async_pre_start_kernel(self, **kw):
        if self.fork_connection is not None and self.provisioner is None:
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            self.provisioner = ForkedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)

    async def exited(self) -> bool:
        """Return once the kernel has exited: the fork server's handler says when on its
        connection, and a fresh kernel's process ends its pidfd. False at once where neither
        can be waited on (no pidfds before Linux 5.3): the caller then looks itself."""
        if isinstance(self.provisioner, ForkedProvisioner):
            await self.provisioner.wait()
            return True
        process = getattr(self.provisioner, "process", None)
        return process is not None and await process_exit(process.pid)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """jupyter_client's wait for a stopped kernel to exit, on the exit itself rather than
        every `pollinterval` seconds (a tenth of a second each time a kernel stops). Still a
        loop on whether the kernel is alive, which returns once it is not."""
        await self.exited()
        await super()._async_wait(pollinterval)


class BoundedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets bound what the kernel can make the grader hold.

    ZMQ treats an oversized message as a protocol error and does not reconnect, so the output
    channel is then lost for good; a monitor on it tells the grader, which stops that kernel."""

    _iopub_monitor: zmq.Socket | None = None
    _output_cut = False
    # Data the next execute request carries in its metadata, beside its code (Kernel.run_calls):
    # a run of calls' requests, which the harness reads there instead of IPython parsing them.
    next_request_metadata: dict | None = None

    def execute(self, code: str, silent: bool = False, store_history: bool = True, user_expressions=None,
                allow_stdin=None, stop_on_error: bool = True) -> str:
        """jupyter_client's execute request, with `next_request_metadata` as its metadata."""
        metadata, self.next_request_metadata = self.next_request_metadata, None
        if metadata is None:
            return super().execute(code, silent, store_history, user_expressions, allow_stdin, stop_on_error)
        content = {"code": code, "silent": silent, "store_history": store_history,
                   "user_expressions": user_expressions or {},
                   "allow_stdin": self.allow_stdin if allow_stdin is None else allow_stdin,
                   "stop_on_error": stop_on_error}
        msg = self.session.msg("execute_request", content, metadata=metadata)
        self.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, MAX_QUEUED_MESSAGES)
        # The grader connects before the kernel has bound its sockets; ZMQ retries every
        # 100 ms by default, which a kernel ready in 0.1 s would spend waiting.
        context.setsockopt(zmq.RECONNECT_IVL, 10)
        return context

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """jupyter_client's wait for a new kernel, less its last step, which waits until the
        output channel has been quiet for 0.2 s to drop the start's own status messages:
        nbclient ignores them anyway, reading only the replies to its own requests."""
        deadline = time.monotonic() + (timeout if timeout is not None else math.inf)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)   # the output channel is connected
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")

    def connect_iopub(self, identity=None):
        socket = super().connect_iopub(identity=identity)
        address = f"inproc://iopub-monitor-{id(socket)}"
        socket.monitor(address, zmq.EVENT_DISCONNECTED)
        self._iopub_monitor = zmq.Context.shadow(self.context.underlying).socket(zmq.PAIR)
        self._iopub_monitor.connect(address)
        return socket

    def output_lost(self) -> bool:
        """Whether the kernel's output channel was cut (by a message over MAX_MESSAGE_BYTES);
        once it was, it stays so: ZMQ does not reconnect it."""
        while self._iopub_monitor is not None and self._iopub_monitor.poll(0):
            if recv_monitor_message(self._iopub_monitor)["event"] == zmq.EVENT_DISCONNECTED:
                self._output_cut = True
        return self._output_cut

    def stop_channels(self) -> None:
        if self._iopub_monitor is not None:
            self._iopub_monitor.close(linger=0)
            self._iopub_monitor = None
        super().stop_channels()


def default_kernel_manager(workdir: str, sandbox: Sandbox | None = None) -> AsyncKernelManager:
    """The one seam for kernel launching. Unix sockets rather than TCP: the kernel needs no
    network port, and they work across the sandbox's network namespace. The kernel is forked
    from the warm parent where it gets the same sandbox there (forked_kernels)."""
    km = SandboxedKernelManager(kernel_name="python3", kernel_spec_manager=OwnKernelSpec(), transport="ipc",
                                ip=os.path.join(workdir, ".kernel"),
                                connection_file=os.path.join(workdir, ".kernel.json"))
    km.sandbox = sandbox
    if sandbox is not None:
        km.fork_connection = forked_kernels.choose(sandbox)
    km.session = TolerantSession(parent=km, key=km.session.key)
    km.client_factory = BoundedKernelClient
    return km


class TolerantSession(Session):
    """Drops a message that fails its signature check (a garbled frame, or one forged with
    the key the kernel can read) instead of letting it end the grading."""

    def deserialize(self, *args, **kwargs):
        try:
            return super().deserialize(*args, **kwargs)
        except ValueError:
            return {"header": {}, "parent_header": {}, "metadata": {}, "content": {}, "msg_type": "ignored",
                    "msg_id": "", "buffers": []}


class CappedClient(NotebookClient):
    """Keeps only a cell's first error and the harness's last payload; counts the size of the
    rest and drops it, so a cell holds at most two messages in the grader. (A run of calls'
    replies come on a channel of their own: grader/kernel/reply_channel.py.)"""

    output_bytes = 0
    probing = False
    store_widget_state = False

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient interrupts the kernel and then waits iopub_timeout more for the cell's
        output to end. The grader decides itself how long an interrupted kernel has to settle
        (Kernel._settles); a cell that ignores the interrupt never ends its output, so that
        wait would only add to the grace, for nothing the grader reads."""
        reply = await super()._async_handle_timeout(timeout, cell)
        self.iopub_timeout = 0   # set again before the next cell (Kernel._send)
        return reply

    async def _async_poll_kernel_alive(self) -> None:
        """nbclient's watch on the kernel while a cell runs, which looks whether it is alive
        once a second: a notebook that ends its kernel (os._exit, a crash, its memory limit)
        kept the grader waiting for up to a second each time. It also looks as soon as the
        kernel manager says the kernel exited (SandboxedKernelManager.exited), and keeps looking
        once a second besides, as nbclient does, should that say nothing."""
        waiting = getattr(self.km, "exited", None)
        exited = asyncio.ensure_future(waiting() if waiting is not None else asyncio.sleep(0))
        try:
            while True:
                if exited.done():
                    await asyncio.sleep(ALIVE_LOOK_SECONDS)
                else:
                    await asyncio.wait({exited}, timeout=ALIVE_LOOK_SECONDS)
                try:
                    await self._async_check_alive()
                except DeadKernelError:
                    assert self.task_poll_for_reply is not None
                    self.task_poll_for_reply.cancel()
                    return
        finally:
            exited.cancel()
            if exited.done() and not exited.cancelled():
                exited.exception()   # a failed wait is only a reason to look once a second

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index) -> None:
        """nbclient's reading of a cell's outputs until the kernel says it is idle, which also
        ends once the cell's reply has come and then nothing more for the cell has come for
        OUTPUT_GAP seconds (an idle status a flood made ZMQ drop), or once the channel was cut.
        nbclient waits for this at most `iopub_timeout` seconds after the reply."""
        last = time.monotonic()   # when the latest message for this cell came, or the reply
        replied = False
        client = cast(BoundedKernelClient, self.kc)
        while True:
            if not replied and replied_to(cell):
                replied, last = True, max(last, time.monotonic())
            if replied and time.monotonic() - last >= OUTPUT_GAP:
                return
            try:
                msg = await client.iopub_channel.get_msg(timeout=OUTPUT_GAP if replied else REPLY_LOOK_SECONDS)
            except Empty:
                if client.output_lost():
                    return
                continue
            if msg["parent_header"].get("msg_id") == parent_msg_id:
                last = time.monotonic()
                try:
                    self.process_message(msg, cell, cell_index)
                except CellExecutionComplete:
                    return

    def process_message(self, msg, cell, cell_index):
        if msg.get("msg_type") not in KEPT_MESSAGES or not isinstance(msg.get("content"), dict):
            return None
        # No display ids: nbclient would remember every one the notebook invents.
        msg = dict(msg, content={k: v for k, v in msg["content"].items() if k != "transient"})
        return super().process_message(msg, cell, cell_index)

    def output(self, outs, msg, display_id, cell_index):
        content = msg["content"]
        msg_type = msg["msg_type"]
        if msg_type == "stream":
            self.output_bytes += len(str(content.get("text", "")))
            return None
        if msg_type in ("display_data", "execute_result"):
            data = content.get("data", {})
            data = data if isinstance(data, dict) else {}
            if MIME in data and self.probing:
                outs[:] = [o for o in outs if o.get("output_type") != "display_data"]
                outs.append(display_output({MIME: data[MIME]}))
            else:
                self.output_bytes += sum(len(str(v)) for v in data.values())
            return None
        if msg_type == "error":
            if any(o.get("output_type") == "error" for o in outs):
                return None
            traceback = content.get("traceback")
            out = error_output(ename=str(content.get("ename", ""))[:200], evalue=str(content.get("evalue", ""))[:2000],
                               traceback=[str(line)[:2000] for line in (traceback if isinstance(traceback, list)
                                                                       else [])[-30:]])
            # As nbclient's output() adds it (the grader keeps no display ids and no output
            # hooks), less its validation: compiling the notebook schema for it cost a check
            # whose notebook raised anywhere a twentieth of its time.
            if self.clear_before_next_output:
                outs[:] = []
                self.clear_display_id_mapping(cell_index)
                self.clear_before_next_output = False
            outs.append(out)
            return out
        return super().output(outs, msg, display_id, cell_index)


async def readable(fd: int) -> None:
    """Wait until `fd` is readable (data, a closed connection, or an exited process's pidfd)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: None if ready.done() else ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def process_exit(pid: int) -> bool:
    """Wait until the child process `pid` has exited (it is then a zombie until reaped), where
    Linux has pidfds (5.3); else return False at once and leave the waiting to the caller."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return False
    try:
        await readable(fd)
    finally:
        os.close(fd)
    return True


def replied_to(cell) -> bool:
    """Whether the kernel's reply to the cell has come: nbclient notes its arrival in the cell
    (record_timing) before it waits for the cell's last outputs."""
    return "shell.execute_reply" in cell.get("metadata", {}).get("execution", {})


def _file_descriptor(value, null: list) -> int:
    """A Popen-style stdout/stderr argument as a descriptor to pass to the server."""
    if hasattr(value, "fileno"):
        return value.fileno()
    if isinstance(value, int) and value >= 0:
        return value
    if not null:
        null.append(os.open(os.devnull, os.O_WRONLY))
    return null[0]


class ForkedProvisioner(LocalProvisioner):
    """Starts the kernel by asking the fork server, and manages it through the handler
    process the server forked for it: the leader of the kernel's process group (signals go
    there) whose connection says when the kernel exited."""

    _conn: socket.socket | None = None
    _exit: int | None = None
    _buffer: bytearray | None = None
    _watch: asyncio.Future | None = None   # the one reader of the connection: see wait()

    @property
    def has_process(self) -> bool:
        return self._conn is not None and self._exit is None

    async def launch_kernel(self, cmd: list[str], **kwargs) -> KernelConnectionInfo:
        manager: Any = self.parent   # the SandboxedKernelManager this provisioner starts the kernel for
        sandbox: Sandbox = manager.sandbox
        env = dict(kwargs.get("env") or {})
        null: list = []
        fds = [_file_descriptor(kwargs.get("stdout"), null), _file_descriptor(kwargs.get("stderr"), null)]
        conn = manager.fork_connection
        try:
            # The fresh kernel's arguments, after `-m ipykernel_launcher`: its connection file and
            # what nbclient adds (no history file).
            arguments = cmd[cmd.index("ipykernel_launcher") + 1:] if "ipykernel_launcher" in cmd else \
                ["-f", manager.connection_file]
            send_request(conn, sandbox.fork_request(manager.connection_file, env, arguments), fds)
            self._buffer = buffer = bytearray()
            deadline = time.monotonic() + forked_kernels.REPLY_SECONDS
            while (hello := read_message(buffer)) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("the fork server did not answer")
                chunk = await asyncio.to_thread(conn.recv, 4096)
                if not chunk:
                    raise ConnectionError("the fork server closed the connection")
                buffer += chunk
        except BaseException:
            conn.close()
            raise
        finally:
            for fd in null:
                os.close(fd)
        self.pid = self.pgid = int(hello["pid"])
        conn.setblocking(False)
        self._conn = conn
        self.cwd = kwargs.get("cwd")
        return self.connection_info

    async def poll(self) -> int | None:
        if self._conn is None or self._buffer is None or self._exit is not None:   # both are set at launch
            return self._exit if self._exit is not None else 0
        try:
            while chunk := self._conn.recv(4096):
                self._buffer += chunk
            self._exit = -signal.SIGKILL    # closed without a word: the handler was killed
        except BlockingIOError:
            pass
        except OSError:
            self._exit = -signal.SIGKILL
        message = read_message(self._buffer)
        if message is not None and "exit" in message:
            self._exit = int(message["exit"])
        return self._exit

    async def wait(self) -> int | None:
        """Until the handler says the kernel exited, or its connection closes. Any number of
        callers may wait at once (a running cell's watch on the kernel, the kernel's shutdown):
        one task reads the connection for all of them, since an event loop keeps one reader per
        file descriptor and a second would silently replace the first."""
        if self._watch is None:
            self._watch = asyncio.ensure_future(self._read_until_exit())
        try:
            await asyncio.shield(self._watch)
        except asyncio.CancelledError:
            if not self._watch.cancelled():
                raise   # this waiter was cancelled, not the reading
        except OSError:
            pass
        if self._watch.cancelled() and self._exit is None:
            # The reading ended because the connection is closing (cleanup) before the handler
            # said anything: as a connection closed without a word says, the kernel is gone.
            return -signal.SIGKILL
        return self._exit

    async def _read_until_exit(self) -> None:
        while await self.poll() is None and self._conn is not None:
            await readable(self._conn.fileno())

    async def send_signal(self, signum: int) -> None:
        if self.pgid and self._exit is None:
            try:
                os.killpg(self.pgid, signum)
            except ProcessLookupError:
                pass

    async def kill(self, restart: bool = False) -> None:
        await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        await self.send_signal(signal.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        if self._watch is not None:
            # Ended before the connection closes: a reader left on a closed descriptor could
            # later be removed from the next connection given the same number.
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()
        await super().cleanup(restart)
