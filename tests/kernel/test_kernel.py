"""Without a Jupyter kernel: what the kernel adapter makes of what nbclient reports (a fake
notebook client stands in for nbclient and its kernel, as in nbclient's own tests), and what
the capped notebook client keeps of a kernel's messages."""
import asyncio
import os
import signal
import socket
import tempfile
import time
import weakref

import nbformat
import pytest

from grader.kernel_side.wire import MIME
from grader.kernel.session import Kernel, KernelKilled, exit_signal
from grader.kernel import client as client_module
from grader.kernel.client import CappedClient
from grader.kernel.reply_channel import ReplyChannel
from grader.settings import Limits
from kernel_fakes import Calls, FakeManager, FakeSandbox, NotebookClientFake, error_output

GRACE = 0.2
# The wait for a cell's last outputs: short, since the fakes' outputs never come late.
OUTPUT_WAIT = 1


def running_kernel(script: dict, memory_exceeded=False, grace: float = GRACE) -> Kernel:
    """A Kernel as its start leaves it, with fakes for nbclient, the manager and the sandbox."""
    kernel = Kernel(Limits(interrupt_grace=grace, memory_limit=512), output_wait=OUTPUT_WAIT)
    kernel.client = NotebookClientFake(script)
    kernel.client.on_cell_executed = kernel._remember_reply
    # The real reply channel, its name gone once both ends are open.
    folder = tempfile.mkdtemp(prefix="fake-kernel-")
    kernel.replies = ReplyChannel(folder)
    kernel.client.reply_fd = os.open(kernel.replies.path, os.O_WRONLY)
    os.unlink(kernel.replies.path)
    os.rmdir(folder)
    weakref.finalize(kernel, os.close, kernel.client.reply_fd)
    weakref.finalize(kernel, kernel.replies.close)
    kernel.km = FakeManager()
    kernel.km.client = kernel.client
    kernel.sandbox = FakeSandbox(memory_exceeded)
    kernel.alive = True
    return kernel


def run_cell(kernel: Kernel, source: str, timeout: float = 3.0):
    return asyncio.run(kernel.run_cell(source, timeout))


def test_a_cell_that_succeeds():
    kernel = running_kernel({})
    assert run_cell(kernel, "x = 1", timeout=12.4) is None
    (call,) = kernel.client.calls
    assert call == {"source": "x = 1", "timeout": 12, "history": True, "probing": False, "index": 0,
                    "in_notebook": True}
    assert kernel.alive


def test_an_error_keeps_its_name_and_a_clean_traceback():
    kernel = running_kernel({"boom": error_output("ZeroDivisionError", "division by zero")})
    error = run_cell(kernel, "boom")
    assert (error.cell, error.kind, error.ename, error.evalue) == (-1, "error", "ZeroDivisionError", "division by zero")
    assert error.traceback == "Cell In[2], line 1\nZeroDivisionError: division by zero"
    assert not error.kernel_lost and kernel.alive


def test_memory_error_raised_in_a_cell():
    error = run_cell(running_kernel({"big": error_output("MemoryError")}), "big")
    assert (error.kind, error.ename) == ("memory", "MemoryError")
    assert "512 MiB" in error.evalue and not error.kernel_lost


def test_a_timeout_the_kernel_recovers_from():
    kernel = running_kernel({"slow": "times out"})
    error = run_cell(kernel, "slow", timeout=3.0)
    assert (error.kind, error.ename, error.kernel_lost) == ("timeout", "Timeout", False)
    assert "longer than 3 s" in error.evalue
    assert [c["source"] for c in kernel.client.calls] == ["slow", "pass"]
    assert kernel.client.calls[1]["history"] is False
    assert kernel.alive and kernel.km.shutdowns == 0


def test_a_timeout_the_kernel_does_not_recover_from_stops_it():
    kernel = running_kernel({"slow": "times out", "pass": "hangs"})
    error = run_cell(kernel, "slow")
    assert (error.kind, error.kernel_lost) == ("unresponsive", True)
    assert "after its interrupt" in error.evalue
    assert not kernel.alive and kernel.km.shutdowns == 1


def test_an_error_named_timeout_by_the_notebook_is_an_ordinary_error():
    kernel = running_kernel({"raise Timeout()": error_output("Timeout")})
    error = run_cell(kernel, "raise Timeout()")
    assert (error.kind, error.kernel_lost) == ("error", False)
    assert [c["source"] for c in kernel.client.calls] == ["raise Timeout()"]


def test_a_cell_still_running_past_its_grace_stops_the_kernel():
    """nbclient says "Kernel died" when the grader stops waiting for it: the kernel's process,
    which still runs, says otherwise, and it is stopped as unresponsive, never reported dead."""
    kernel = running_kernel({"spin": "hangs"})
    error = run_cell(kernel, "spin", timeout=0.1)
    assert (error.kind, error.kernel_lost) == ("unresponsive", True)
    assert not kernel.alive and kernel.km.shutdowns == 1


def test_the_wait_for_a_cell_outlasts_nbclient_s_own_and_its_wait_for_the_outputs():
    kernel = running_kernel({"slow": "times out"})
    waits = []
    send = kernel._send

    async def recorded(cell, timeout, wait, history, probe):
        waits.append((cell.source, timeout, wait))
        return await send(cell, timeout, wait, history, probe)
    kernel._send = recorded
    run_cell(kernel, "slow", timeout=2.4)
    (_, timeout, wait), settle = waits
    assert wait >= 3 + OUTPUT_WAIT + GRACE
    assert settle == ("pass", None, None)   # no time of nbclient's: the grace decides (Kernel._within_grace)


def test_a_kernel_killed_from_outside_is_the_machine_s_doing():
    kernel = running_kernel({"work()": "killed"})
    with pytest.raises(KernelKilled, match="SIGKILL"):
        run_cell(kernel, "work()")
    assert not kernel.alive


def test_a_kernel_killed_by_its_memory_limit_is_the_submission_s():
    error = run_cell(running_kernel({"grow()": "killed"}, memory_exceeded=True), "grow()")
    assert (error.kind, error.kernel_lost) == ("memory", True)


@pytest.mark.parametrize("status, signal_number", [(None, None), (0, None), (1, None), (128, None), (-9, 9),
                                                   (137, 9), (139, 11), (-15, 15), (152, 24)])
def test_the_signal_that_ended_a_kernel_is_read_off_its_exit_status(status, signal_number):
    assert exit_signal(status) == signal_number


@pytest.mark.parametrize("memory_exceeded, kind", [(False, "kernel_died"), (True, "memory")])
def test_a_kernel_that_dies(memory_exceeded, kind):
    kernel = running_kernel({"os._exit(0)": "dies"}, memory_exceeded)
    error = run_cell(kernel, "os._exit(0)")
    assert (error.kind, error.kernel_lost) == (kind, True)
    assert not kernel.alive


class _Watched:
    """The kernel manager and client a running cell's watch on the kernel sees: a kernel alive
    for its first `alive` looks, then dead; `exit_event`: the manager can wait for its exit
    (it has exited once the watch has started)."""

    def __init__(self, alive: int, exit_event: bool):
        self.looks, self.alive = 0, alive
        if exit_event:
            self.exited = self._exited

    async def _exited(self) -> bool:
        await asyncio.sleep(0)
        self.alive = 0
        return True

    async def is_alive(self) -> bool:
        self.looks += 1
        return self.looks <= self.alive


@pytest.mark.parametrize("exit_event, looks", [(True, 1), (False, 3)])
def test_a_running_cell_s_watch_finds_a_dead_kernel_with_or_without_an_exit_event(monkeypatch, exit_event, looks):
    """The watch looks at once when the manager says the kernel exited (one look, with the
    periodic ones an hour apart); where it cannot say (no pidfds), it looks every
    ALIVE_LOOK_SECONDS, as nbclient does. Either way it cancels the wait for the cell's reply
    once the kernel is dead."""
    monkeypatch.setattr(client_module, "ALIVE_LOOK_SECONDS", 3600.0 if exit_event else 0.0)

    async def watch():
        client = CappedClient(nbformat.v4.new_notebook())
        client.km = client.kc = watched = _Watched(alive=2, exit_event=exit_event)
        client.task_poll_for_reply = asyncio.ensure_future(asyncio.sleep(3600))
        await asyncio.wait_for(client._async_poll_kernel_alive(), 60)
        await asyncio.gather(client.task_poll_for_reply, return_exceptions=True)
        return client.task_poll_for_reply.cancelled(), watched.looks

    assert asyncio.run(watch()) == (True, looks)


def test_waiting_for_a_forked_kernel_s_exit_survives_its_cleanup():
    """Any number of waiters share one reader of the fork server's connection; the cleanup
    that closes the connection ends that reader, and a waiter then (or one that comes after)
    gets an exit status, never the reader's cancellation."""
    from jupyter_client.kernelspec import KernelSpec
    from grader.kernel.client import ForkedProvisioner

    async def waits():
        spec = KernelSpec(argv=["python"], display_name="python", language="python", resource_dir="")
        provisioner = ForkedProvisioner(kernel_id="k", kernel_spec=spec)
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        provisioner._conn, provisioner._buffer = ours, bytearray()
        first, second = asyncio.ensure_future(provisioner.wait()), asyncio.ensure_future(provisioner.wait())
        await asyncio.sleep(0.01)
        await provisioner.cleanup()
        theirs.close()
        return await first, await second, await provisioner.wait()

    assert asyncio.run(waits()) == (-signal.SIGKILL,) * 3


def test_a_cut_output_channel_stops_the_kernel():
    kernel = running_kernel({})
    kernel.client.lost = True
    error = run_cell(kernel, "flood()")
    assert (error.kind, error.ename, error.kernel_lost) == ("output_flood", "OutputLimit", True)
    assert not kernel.alive and kernel.km.shutdowns == 1


def test_grader_code_returns_the_harness_payload():
    payload = nbformat.v4.new_output("display_data", data={MIME: {"found": True}})
    kernel = running_kernel({"probe()": payload})
    assert asyncio.run(kernel.run_code("probe()", 2.0)) == ({"found": True}, None)
    (call,) = kernel.client.calls
    assert (call["history"], call["probing"]) == (False, True)


def test_nothing_is_sent_to_a_kernel_that_is_gone():
    kernel = running_kernel({})
    kernel.alive = False
    payload, error = asyncio.run(kernel.run_code("probe()", 2.0))
    assert payload is None and (error.kind, error.ename) == ("kernel_died", "KernelDied")
    assert kernel.client.calls == []


def run_calls(kernel: Kernel, count: int, call_timeout: float = 0.3, total_timeout: float = 30.0):
    """Run the fake kernel's "calls()" code; returns how it ended, the payloads delivered (with
    their positions), and the seconds it took on the grader's clock."""
    delivered = []
    started = time.monotonic()
    end = asyncio.run(kernel.run_calls("calls()", count, call_timeout, total_timeout,
                                       lambda position, payload: delivered.append((position, payload))))
    return end, delivered, time.monotonic() - started


def test_a_run_of_calls_hands_on_each_payload_as_it_arrives():
    kernel = running_kernel({"calls()": Calls(["a", 0.05, "b", 0.05, "c"])})
    end, delivered, _ = run_calls(kernel, 3)
    assert (end.finished, end.error, end.out_of_time) == (3, None, False)
    assert delivered == [(0, "a"), (1, "b"), (2, "c")]
    (call,) = kernel.client.calls
    # No nbclient timeout: the grader times the calls itself.
    assert (call["timeout"], call["history"], call["probing"]) == (None, False, True)
    assert kernel.km.interrupts == 0


def test_a_run_of_calls_delivers_no_more_payloads_than_calls():
    run = Calls(["a", "b", "c", "forged", "forged"])
    end, delivered, _ = run_calls(running_kernel({"calls()": run}), 3)
    assert end.finished == 3 and [p for _, p in delivered] == ["a", "b", "c"]
    assert len(run.published) == 5


def test_each_call_has_its_own_time_from_the_previous_reply():
    """Three calls of 0.2 s with 0.3 s each: the run takes longer than one call's time, and no
    call is late."""
    end, delivered, _ = run_calls(running_kernel({"calls()": Calls([0.2, "a", 0.2, "b", 0.2, "c"])}), 3,
                                  call_timeout=0.3)
    assert (end.finished, end.error) == (3, None)


def test_a_late_call_is_interrupted_by_the_grader():
    kernel = running_kernel({"calls()": Calls(["a", 0.05, "b", 30.0, "c"])})
    end, delivered, seconds = run_calls(kernel, 3, call_timeout=0.3)
    assert end.finished == 2 and [p for _, p in delivered] == ["a", "b"]
    assert (end.error.kind, end.error.kernel_lost, end.out_of_time) == ("timeout", False, False)
    assert kernel.km.interrupts == 1 and kernel.alive and kernel.km.shutdowns == 0
    assert seconds < 30   # the late call was not waited out


def test_a_reply_that_comes_after_the_interrupt_is_ignored():
    """The call swallows the interrupt and returns soon after: its reply is too late, and the
    kernel, done within the grace, stays."""
    run = Calls(["a", 0.6, "late", "after"], swallows=True)
    kernel = running_kernel({"calls()": run}, grace=2.0)
    end, delivered, _ = run_calls(kernel, 3, call_timeout=0.3)
    assert end.finished == 1 and delivered == [(0, "a")] and run.published == ["a", "late", "after"]
    assert end.error.kind == "timeout" and kernel.alive


def test_a_call_that_swallows_the_interrupt_and_goes_on_gets_the_kernel_stopped():
    kernel = running_kernel({"calls()": Calls(["a", 30.0, "b"], swallows=True)})
    end, delivered, seconds = run_calls(kernel, 2, call_timeout=0.3)
    assert end.finished == 1
    assert (end.error.kind, end.error.kernel_lost) == ("unresponsive", True)
    assert not kernel.alive and kernel.km.interrupts == 1 and kernel.km.shutdowns == 1
    assert seconds < 30   # the call was not waited out


def test_the_whole_run_has_a_time_of_its_own():
    kernel = running_kernel({"calls()": Calls([0.2, "a", 0.2, "b", 0.2, "c"])})
    end, delivered, seconds = run_calls(kernel, 3, call_timeout=10.0, total_timeout=0.3)
    assert end.finished == 1 and (end.error.kind, end.out_of_time) == ("timeout", True)


@pytest.mark.parametrize("memory_exceeded, kind", [(False, "kernel_died"), (True, "memory")])
def test_a_kernel_that_dies_during_a_run_of_calls(memory_exceeded, kind):
    kernel = running_kernel({"calls()": Calls(["a", "dies"])}, memory_exceeded)
    end, delivered, _ = run_calls(kernel, 3)
    assert end.finished == 1 and (end.error.kind, end.error.kernel_lost) == (kind, True)
    assert not kernel.alive


def test_a_run_of_calls_that_ends_without_every_reply():
    end, _, _ = run_calls(running_kernel({"calls()": Calls(["a"])}), 2)
    assert (end.finished, end.error) == (1, None)


def test_a_run_of_calls_whose_code_raises():
    kernel = running_kernel({"calls()": error_output("AttributeError", "no call_many")})
    end, _, _ = run_calls(kernel, 2)
    assert end.finished == 0 and (end.error.kind, end.error.ename) == ("error", "AttributeError")
    assert kernel.alive


def test_no_run_of_calls_is_sent_to_a_kernel_that_is_gone():
    kernel = running_kernel({})
    kernel.alive = False
    end, delivered, _ = run_calls(kernel, 2)
    assert (end.finished, end.error.kind) == (0, "kernel_died") and kernel.client.calls == []


def message(msg_type: str, **content) -> dict:
    return {"msg_type": msg_type, "content": content, "header": {"msg_id": "2", "msg_type": msg_type},
            "parent_header": {"msg_id": "1"},
            "metadata": {}}


def received(messages: list[dict], probing: bool):
    """The cell's outputs and the characters counted once `messages` arrived for it."""
    client = CappedClient(nbformat.v4.new_notebook())
    client.probing = probing
    client.clear_before_next_output = False
    cell = nbformat.v4.new_code_cell("x")
    for msg in messages:
        client.process_message(msg, cell, 0)
    return cell.outputs, client.output_bytes


def payload(n: int) -> dict:
    return message("display_data", data={MIME: {"n": n}, "text/plain": "shown"}, metadata={},
                   transient={"display_id": f"id{n}"})


def test_printed_output_is_counted_and_dropped():
    outputs, counted = received([message("stream", name="stdout", text="x" * 1000),
                                 message("execute_result", data={"text/plain": "y" * 10}, metadata={},
                                         execution_count=1)], probing=False)
    assert outputs == [] and counted == 1010


def test_only_grader_code_keeps_the_harness_payload_and_only_the_last():
    outputs, counted = received([payload(1), payload(2)], probing=True)
    assert [o["data"] for o in outputs] == [{MIME: {"n": 2}}] and counted == 0
    outputs, counted = received([payload(1)], probing=False)
    assert outputs == [] and counted > 0


def test_only_the_first_error_is_kept_and_it_is_cut_short():
    first = message("error", ename="E" * 500, evalue="v" * 5000, traceback=[f"line {n}" for n in range(100)])
    outputs, _ = received([first, message("error", ename="Second", evalue="", traceback=[])], probing=False)
    (error,) = outputs
    assert len(error["ename"]) == 200 and len(error["evalue"]) == 2000
    assert error["traceback"] == [f"line {n}" for n in range(70, 100)]


def test_an_error_with_forged_fields_is_kept_as_text():
    """The kernel writes its error messages: fields of any JSON kind are made text, and a
    traceback that is not a list of lines is none."""
    for traceback in (5, "one string", {"a": 1}, None):
        (error,), _ = received([message("error", ename=["E"], evalue=3, traceback=traceback)], probing=False)
        assert (error["ename"], error["evalue"], error["traceback"]) == ("['E']", "3", [])


def test_an_error_after_a_delayed_clear_output_is_what_the_cell_keeps():
    """clear_output(wait=True), then the error: as nbclient does, the clear happens just
    before the next output, and the error stays."""
    outputs, _ = received([payload(1), message("clear_output", wait=True),
                           message("error", ename="ValueError", evalue="bad", traceback=["line"])], probing=True)
    assert [o["output_type"] for o in outputs] == ["error"] and outputs[0]["ename"] == "ValueError"


def test_messages_the_grader_does_not_read_are_dropped():
    client = CappedClient(nbformat.v4.new_notebook())
    client.clear_before_next_output = False
    cell = nbformat.v4.new_code_cell("x")
    client.process_message(message("comm_open", comm_id="c", target_name="jupyter.widget", data={"state": {}}),
                           cell, 0)
    client.process_message(payload(1), cell, 0)
    assert cell.outputs == [] and client.comm_objects == {} and client._display_id_map == {}
