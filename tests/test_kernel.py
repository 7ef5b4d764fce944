"""Without a Jupyter kernel: what the kernel adapter makes of what nbclient reports (a fake
notebook client stands in for nbclient and its kernel, as in nbclient's own tests), and what
the capped notebook client keeps of a kernel's messages."""
import asyncio

import nbformat
import pytest
from nbclient.exceptions import DeadKernelError

from grader.harness import MIME
from grader.kernel import Kernel
from grader.kernel_client import CappedClient
from grader.settings import Limits

GRACE = 0.2
HEADER = {"msg_id": "1", "msg_type": "execute_reply"}


def error_output(ename: str, evalue: str = "bad") -> dict:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                  traceback=["\x1b[31mCell In[2], line 1\x1b[0m", f"{ename}: {evalue}"])


class FakeClient:
    """nbclient as the adapter uses it: each source does what `script` says, "pass" (the
    adapter's check that an interrupted kernel settled) answers by default, and every call's
    settings are recorded."""

    def __init__(self, script: dict):
        self.script = script
        self.calls: list[dict] = []
        self.output_bytes = 0
        self.lost = False
        self.kc = self
        self.on_cell_executed = None

    def output_lost(self) -> bool:
        return self.lost

    async def async_execute_cell(self, cell, cell_index, store_history=True):
        self.calls.append({"source": cell.source, "timeout": self.timeout, "history": store_history,
                           "probing": self.probing, "index": cell_index,
                           "in_notebook": self.nb.cells[cell_index] is cell})
        action = self.script.get(cell.source, "ok")
        reply = {"header": HEADER, "content": {"status": "ok"}}
        if action == "dies":
            raise DeadKernelError("Kernel died")
        if action == "hangs":
            await asyncio.sleep(60)
        if action == "times out":   # nbclient's own reply once it has interrupted the kernel
            reply = {"content": {**self.error_on_timeout, "status": "error"}}
        elif isinstance(action, dict):   # outputs the kernel sent
            cell.outputs = [action]
            if action["output_type"] == "error":
                reply = {"header": HEADER, "content": {"status": "error", "ename": action["ename"]}}
        self.on_cell_executed(cell=cell, cell_index=cell_index, execute_reply=reply)
        return cell


class FakeManager:
    def __init__(self):
        self.shutdowns = 0

    async def shutdown_kernel(self, now=False):
        self.shutdowns += 1


class FakeSandbox:
    def __init__(self, memory_exceeded=False):
        self.exceeded = memory_exceeded

    def memory_exceeded(self) -> bool:
        return self.exceeded


def running_kernel(script: dict, memory_exceeded=False) -> Kernel:
    """A Kernel as its start leaves it, with fakes for nbclient, the manager and the sandbox."""
    kernel = Kernel(Limits(interrupt_grace=GRACE, memory_limit=512))
    kernel.client = FakeClient(script)
    kernel.client.on_cell_executed = kernel._remember_reply
    kernel.km = FakeManager()
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
    kernel = running_kernel({"spin": "hangs"})
    error = run_cell(kernel, "spin", timeout=0.1)
    assert (error.kind, error.kernel_lost) == ("unresponsive", True)
    assert not kernel.alive and kernel.km.shutdowns == 1


@pytest.mark.parametrize("memory_exceeded, kind", [(False, "kernel_died"), (True, "memory")])
def test_a_kernel_that_dies(memory_exceeded, kind):
    kernel = running_kernel({"os._exit(0)": "dies"}, memory_exceeded)
    error = run_cell(kernel, "os._exit(0)")
    assert (error.kind, error.kernel_lost) == (kind, True)
    assert not kernel.alive


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


def test_messages_the_grader_does_not_read_are_dropped():
    client = CappedClient(nbformat.v4.new_notebook())
    client.clear_before_next_output = False
    cell = nbformat.v4.new_code_cell("x")
    client.process_message(message("comm_open", comm_id="c", target_name="jupyter.widget", data={"state": {}}),
                           cell, 0)
    client.process_message(payload(1), cell, 0)
    assert cell.outputs == [] and client.comm_objects == {} and client._display_id_map == {}
