"""The grader's end of a kernel's connection: the kernel is launched through the sandbox, and
what it sends is bounded before the grader holds it. Sockets refuse oversized messages and
queue only a few, a message with a bad signature is dropped, and of a cell's outputs only
its first error and the harness's last payload are kept (or, for a run of calls, each
payload is handed on as it arrives).
"""
from __future__ import annotations

import os

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session
from nbclient import NotebookClient
from zmq.utils.monitor import recv_monitor_message

from .harness import MIME
from .sandbox import Sandbox

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


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel through the sandbox's launcher."""

    sandbox: Sandbox | None = None

    def format_kernel_cmd(self, extra_arguments=None):
        command = super().format_kernel_cmd(extra_arguments)
        return self.sandbox.wrap(command, self.connection_file) if self.sandbox else command


class BoundedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets bound what the kernel can make the grader hold.

    ZMQ treats an oversized message as a protocol error and does not reconnect, so the output
    channel is then lost for good; a monitor on it tells the grader, which stops that kernel."""

    _iopub_monitor = None

    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        context.setsockopt(zmq.RCVHWM, MAX_QUEUED_MESSAGES)
        return context

    def connect_iopub(self, identity=None):
        socket = super().connect_iopub(identity=identity)
        address = f"inproc://iopub-monitor-{id(socket)}"
        socket.monitor(address, zmq.EVENT_DISCONNECTED)
        self._iopub_monitor = zmq.Context.shadow(self.context.underlying).socket(zmq.PAIR)
        self._iopub_monitor.connect(address)
        return socket

    def output_lost(self) -> bool:
        """Whether the kernel's output channel was cut (by a message over MAX_MESSAGE_BYTES)."""
        lost = False
        while self._iopub_monitor is not None and self._iopub_monitor.poll(0):
            lost = lost or recv_monitor_message(self._iopub_monitor)["event"] == zmq.EVENT_DISCONNECTED
        return lost

    def stop_channels(self) -> None:
        if self._iopub_monitor is not None:
            self._iopub_monitor.close(linger=0)
            self._iopub_monitor = None
        super().stop_channels()


def default_kernel_manager(workdir: str, sandbox: Sandbox | None = None) -> AsyncKernelManager:
    """The one seam for kernel launching: a pre-warmed kernel can be handed in instead.
    Unix sockets rather than TCP: the kernel needs no network port, and they work across
    the sandbox's network namespace."""
    km = SandboxedKernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(workdir, ".kernel"),
                                connection_file=os.path.join(workdir, ".kernel.json"))
    km.sandbox = sandbox
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
    rest and drops it, so a cell holds at most two messages in the grader. With `on_payload`
    set, the harness's payloads are handed to it as they arrive instead, and none is kept."""

    output_bytes = 0
    probing = False
    on_payload = None
    store_widget_state = False

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
            if MIME in data and self.probing and self.on_payload is not None:
                self.on_payload(data[MIME])
            elif MIME in data and self.probing:
                outs[:] = [o for o in outs if o.get("output_type") != "display_data"]
                outs.append(nbformat.v4.new_output("display_data", data={MIME: data[MIME]}))
            else:
                self.output_bytes += sum(len(str(v)) for v in data.values())
            return None
        if msg_type == "error":
            if any(o.get("output_type") == "error" for o in outs):
                return None
            content = dict(content, traceback=[str(line)[:2000] for line in content.get("traceback", [])[-30:]],
                           evalue=str(content.get("evalue", ""))[:2000], ename=str(content.get("ename", ""))[:200])
            msg = dict(msg, content=content)
        return super().output(outs, msg, display_id, cell_index)
