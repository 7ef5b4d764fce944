"""The kernel's output streams are flushed only when something was written to them since their
last flush (harness._flush_only_when_written): a cell that prints nothing sends the IOPub
thread no flush, while what a cell prints, from its own thread or from another one, is still
sent, and reaches the grader, which counts it."""
import asyncio

import pytest

from grader.kernel.session import Kernel
from grader.settings import Limits

pytestmark = pytest.mark.slow

# Counts the stream class's sends (`_flush`, which ipykernel's flush() hands to the IOPub
# thread), by the stream's name.
COUNT_SENDS = (
    "import sys\n"
    "_sends = []\n"
    "_cls, _send = type(sys.stdout), type(sys.stdout)._flush\n"
    "def _counted(self):\n"
    "    _sends.append(self.name)\n"
    "    return _send(self)\n"
    "_cls._flush = _counted"
)
PRINTED = "a" * 300


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_a_cell_that_prints_nothing_flushes_nothing_and_printed_output_still_arrives(forked):
    async def run():
        async with Kernel(Limits(fork_server=forked)) as kernel:
            errors = [await kernel.run_cell(COUNT_SENDS, 30),
                      await kernel.run_cell("x = 1", 30),
                      # Before the change, the flushes after `x = 1` and before this cell sent.
                      await kernel.run_cell("assert _sends == [], _sends", 30)]
            before = kernel.output_bytes
            errors.append(await kernel.run_cell(f"print({PRINTED!r})", 30))
            # The print reached the grader with its cell, flushed as the cell ended.
            printed = kernel.output_bytes - before
            errors.append(await kernel.run_cell("assert 'stdout' in _sends, _sends", 30))
            # A thread that prints after its cell ended: sent by the next cell's flushes.
            before = kernel.output_bytes
            errors.append(await kernel.run_cell(
                "import threading, time\n"
                f"_t = threading.Thread(target=lambda: (time.sleep(0.3), print({PRINTED!r})))\n"
                "_t.start()", 30))
            errors.append(await kernel.run_cell("_t.join()", 30))
            errors.append(await kernel.run_cell("pass", 30))
            return errors, printed, kernel.output_bytes - before
    errors, printed, from_thread = asyncio.run(run())
    assert errors == [None] * 8
    assert printed >= len(PRINTED)
    assert from_thread >= len(PRINTED)
