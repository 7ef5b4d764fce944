"""The channel a run of calls' replies come back on: a named pipe in the kernel's folder,
which the grader opens for reading before the kernel starts and the harness opens for
writing as it loads, before any of the notebook's code runs.

Not the kernel's output channel: there every reply was a display message, signed JSON sent
through the kernel's IOPub thread, received, checked, date-parsed and handled by nbclient in
the grader; most of a submission's messages, and the larger part of what its calls cost
both processes. A write to a pipe is one system call, read as it arrives (the grader times
each call by its reply), and what was written stays readable after the kernel dies: the
reply of a call that returned just before a crash is never lost with it, so the call that
crashed is the one blamed.

The notebook's code runs in the writing process, so it can write here too: what comes is
only data the grader validates (grader/kernel/replies.py), in frames (wire.frame); bytes
that are not frames end the reading and are that submission's fault (`broken`). At most
`wanted` frames are decoded per run; anything more is read and dropped.
"""
from __future__ import annotations

import asyncio
import json
import os
from typing import Callable

from grader.kernel_side import wire

FILE_NAME = ".grader-replies"
READ_BYTES = 1 << 16


class ReplyChannel:
    """The grader's end of the pipe, in `folder` (the kernel's, before it is handed to the
    kernel's user: the pipe is then the user's too)."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, FILE_NAME)
        os.mkfifo(self.path, 0o600)
        # Non-blocking: opening waits for no writer, and reading never waits.
        self.fd: int | None = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._deliver: Callable[[object], None] | None = None
        self._wanted = 0
        self._buffer = bytearray()
        self._listening = False
        self.broken: str | None = None   # why the run's replies could not be read, if they could not

    def _expect(self, deliver: Callable[[object], None], wanted: int) -> None:
        """A new run's replies: `wanted` of them, each handed to `deliver`."""
        self._deliver, self._wanted = deliver, wanted
        self._buffer.clear()
        self.broken = None

    def listen(self, deliver: Callable[[object], None], wanted: int) -> None:
        """Hand each of the next `wanted` replies to `deliver` as it arrives."""
        self._expect(deliver, wanted)
        if self.fd is not None:
            asyncio.get_running_loop().add_reader(self.fd, self.read)
            self._listening = True

    def take(self, wanted: int) -> list:
        """The first `wanted` replies the pipe holds now, without waiting for any."""
        taken: list = []
        self._expect(taken.append, wanted)
        self.read()
        self._deliver = None
        return taken

    def stop(self) -> None:
        """Read what has come, and nothing after."""
        self.read()
        self._quiet()
        self._deliver = None

    def _quiet(self) -> None:
        if self._listening and self.fd is not None:
            asyncio.get_running_loop().remove_reader(self.fd)
        self._listening = False

    def read(self) -> None:
        """Read all that the pipe holds now, and deliver the whole frames among it."""
        if self.fd is None:
            return
        while True:
            try:
                chunk = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                break
            if not chunk:
                # No writer is left (the kernel ended, or closed its end): the pipe would stay
                # readable, at its end, and wake the loop for nothing.
                self._quiet()
                break
            if self._wanted > 0 and self.broken is None:
                self._buffer += chunk
                self._deliver_frames()

    def _deliver_frames(self) -> None:
        frames, used, bad = wire.unframe(self._buffer)
        del self._buffer[:used]
        for data in frames[:self._wanted]:
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):   # nested past what the decoder can follow
                return self._break("a reply that is not JSON")
            self._wanted -= 1
            if self._deliver is not None:
                self._deliver(payload)
        if self._wanted <= 0:
            self._buffer.clear()   # all wanted have come: nothing more is kept, or read
        elif bad is not None:
            self._break(bad)

    def _break(self, why: str) -> None:
        self.broken = why
        self._buffer.clear()

    def close(self) -> None:
        self._quiet()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
