"""The kernel's own configuration (session.KERNEL_CONFIG), in forked and fresh kernels alike:
its history is kept in memory, where a notebook reads it as in Jupyter, with no SQLite
database; and its command line is only its connection file, the one fork_server.launch starts
without ipykernel's parsing of every option."""
import asyncio

import pytest

from grader.kernel.session import Kernel
from grader.settings import Limits

pytestmark = pytest.mark.slow

CELLS = [
    "x = 1",
    # The session's history, as a notebook reads it: In, _i<n>, the history manager's range.
    "assert In[1] == _i1 == 'x = 1', In\n"
    "assert list(get_ipython().history_manager.get_range(0, 1, 2)) == [(0, 1, 'x = 1')]",
    # No database for it, and nothing else on the command line.
    "import os, sys, threading\n"
    "assert not get_ipython().history_manager.enabled\n"
    "assert not [t for t in threading.enumerate() if type(t).__name__ == 'HistorySavingThread']\n"
    "assert sys.argv[1:] == ['-f', os.path.join(os.getcwd(), '.kernel.json')], sys.argv",
]


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_a_kernel_keeps_its_history_in_memory_only(forked):
    async def run():
        async with Kernel(Limits(fork_server=forked)) as kernel:
            return kernel.isolation()["kernel_start"], [await kernel.run_cell(c, 30) for c in CELLS]
    start, errors = asyncio.run(run())
    assert start.startswith("forked" if forked else "fresh")
    assert errors == [None, None, None]


def test_the_kernel_s_logger_builds_no_record_its_handlers_would_drop():
    """ipykernel logs each message at DEBUG; traitlets filters at the handler, so the logger is
    raised to the handlers' lowest level (harness._log_at_its_handlers_level): what the
    handlers write is unchanged."""
    check = ("import logging\n"
             "_log = get_ipython().kernel.log\n"
             "_lowest = min(h.level for h in _log.handlers)\n"
             "assert _lowest > logging.DEBUG and not _log.isEnabledFor(logging.DEBUG), (_lowest, _log.level)\n"
             "assert _log.isEnabledFor(_lowest) and _log.isEnabledFor(logging.ERROR)")

    async def run():
        async with Kernel(Limits()) as kernel:
            return await kernel.run_cell(check, 30)
    assert asyncio.run(run()) is None
