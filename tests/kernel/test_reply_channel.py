"""The reply channel on a real named pipe: what the grader reads of a run of calls' replies,
whatever the kernel's side writes there (grader/kernel/reply_channel.py)."""
import asyncio
import os

import pytest

from grader.kernel.reply_channel import ReplyChannel
from grader.kernel_side import wire


@pytest.fixture
def channel(tmp_path):
    replies = ReplyChannel(str(tmp_path))
    writer = os.open(replies.path, os.O_WRONLY)
    yield replies, writer
    replies.close()
    try:
        os.close(writer)
    except OSError:
        pass


def listened(replies: ReplyChannel, wanted: int, write) -> list:
    """What `deliver` got while the channel listened and `write()` wrote, read as the event loop
    reads it, then once more when it stops."""
    delivered: list = []

    async def run():
        replies.listen(delivered.append, wanted)
        # In a thread, as the kernel writes: more than a pipe holds waits for the reading.
        await asyncio.get_running_loop().run_in_executor(None, write)
        await asyncio.sleep(0.05)
        replies.stop()
    asyncio.run(run())
    return delivered


def test_each_frame_is_delivered_in_order(channel):
    replies, writer = channel
    frames = b"".join(wire.frame({"index": n, "reply": {"found": True}}) for n in range(3))
    delivered = listened(replies, 3, lambda: os.write(writer, frames))
    assert delivered == [{"index": n, "reply": {"found": True}} for n in range(3)] and replies.broken is None


def test_a_frame_written_in_pieces_is_delivered_once_whole(channel):
    replies, writer = channel
    data = wire.frame({"value": "x" * 100_000})   # larger than one read, and than a pipe holds at once

    def write():
        for at in range(0, len(data), 7_000):
            os.write(writer, data[at:at + 7_000])
    assert listened(replies, 1, write) == [{"value": "x" * 100_000}]


def test_no_more_frames_than_wanted_are_decoded(channel):
    replies, writer = channel
    delivered = listened(replies, 2, lambda: os.write(writer, b"".join(wire.frame(n) for n in range(5))))
    assert delivered == [0, 1] and replies.broken is None


def test_what_was_written_before_the_writer_ended_is_still_read(channel):
    """A kernel that dies right after a call's reply: the reply is still there."""
    replies, writer = channel

    def write_and_end():
        os.write(writer, wire.frame({"index": 0}))
        os.close(writer)
    assert listened(replies, 2, write_and_end) == [{"index": 0}]


@pytest.mark.parametrize("written, why", [
    ((wire.MAX_FRAME_BYTES + 1).to_bytes(wire.FRAME_HEADER, "big") + b"{}", "a reply longer than 8 MiB"),
    (len(b"not json").to_bytes(wire.FRAME_HEADER, "big") + b"not json", "a reply that is not JSON"),
    (len(b"[" * 200_000).to_bytes(wire.FRAME_HEADER, "big") + b"[" * 200_000, "a reply that is not JSON"),
])
def test_bytes_that_are_no_frame_break_the_run_s_replies(channel, written, why):
    replies, writer = channel
    delivered = listened(replies, 3, lambda: os.write(writer, wire.frame("first") + written + wire.frame("later")))
    assert delivered == ["first"] and replies.broken == why
    # The next run reads afresh.
    assert listened(replies, 1, lambda: os.write(writer, wire.frame("next"))) == ["next"]
    assert replies.broken is None


def test_frames_written_between_runs_are_never_delivered_to_the_next_run_as_its_own(channel):
    """Nothing listens between runs: what the notebook writes then waits in the pipe, and is
    read by the next run as if the kernel had written it then. The harness validates each
    reply's index (grader/kernel/replies.py), so a stale frame is a malformed reply, never a
    correct one; here only that the channel hands it on in order, with the run's own after it."""
    replies, writer = channel
    os.write(writer, wire.frame({"index": 5}))
    assert listened(replies, 2, lambda: os.write(writer, wire.frame({"index": 0}))) == [{"index": 5}, {"index": 0}]


def test_bytes_after_every_wanted_reply_are_dropped_not_held_against_the_run(channel):
    replies, writer = channel
    too_long = (wire.MAX_FRAME_BYTES + 1).to_bytes(wire.FRAME_HEADER, "big")
    delivered = listened(replies, 2, lambda: os.write(writer, wire.frame(0) + wire.frame(1) + too_long))
    assert delivered == [0, 1] and replies.broken is None
