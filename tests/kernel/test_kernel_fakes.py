"""Each fake of the kernel (tests/kernel_fakes.py) has what it stands in for: the same methods,
taking the same parameters, and the same state the grader reads. A change to the real
interface fails here first, instead of leaving tests that pass against a kernel that no
longer exists."""
import inspect

import pytest

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from nbclient import NotebookClient

from grader.kernel.client import BoundedKernelClient, CappedClient
from grader.kernel.runner import NotebookKernel
from grader.kernel.session import Kernel
from grader.sandbox.isolation import Sandbox
from kernel_fakes import FakeManager, FakeProvisioner, FakeSandbox, HarnessKernel, NotebookClientFake, ScriptedKernel


def parameters(function) -> list[tuple[str, object]]:
    """Names and kinds of a method's parameters, `self` left out (defaults may differ: a fake
    may require what the real method defaults)."""
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values() if p.name != "self"]


def protocol_methods(protocol) -> set[str]:
    return {name for name, value in vars(protocol).items() if inspect.isfunction(value)
            and (not name.startswith("_") or name in ("__aenter__", "__aexit__"))}


def protocol_state(protocol) -> set[str]:
    """What a protocol's user reads: its annotated attributes and its properties."""
    return set(protocol.__annotations__) | {name for name, value in vars(protocol).items()
                                            if isinstance(value, property)}


@pytest.mark.parametrize("real", [NotebookKernel, Kernel], ids=["protocol", "Kernel"])
def test_the_scripted_kernel_has_what_the_runner_uses(real):
    methods = protocol_methods(NotebookKernel)
    assert {"run_cell", "stop_background", "__aenter__", "__aexit__"} <= methods
    for name in methods:
        assert parameters(getattr(ScriptedKernel, name)) == parameters(getattr(real, name)), name
        assert inspect.iscoroutinefunction(getattr(ScriptedKernel, name)) == \
            inspect.iscoroutinefunction(getattr(real, name)), name
    fake = ScriptedKernel(clock=lambda: 0.0, script={})
    state = protocol_state(NotebookKernel)
    assert {"alive", "output_bytes", "leftover_processes"} <= state
    for name in state:
        assert hasattr(fake, name), name


@pytest.mark.parametrize("name", ["run_code", "run_calls"])
def test_the_harness_kernel_has_what_grading_uses(name):
    assert parameters(getattr(HarnessKernel, name)) == parameters(getattr(Kernel, name))
    assert inspect.iscoroutinefunction(getattr(HarnessKernel, name))


def test_the_check_sees_a_drifted_fake():
    """The comparison itself: a fake whose method lost a parameter is told apart."""
    class Drifted(ScriptedKernel):
        async def run_cell(self, source):
            return None
    assert parameters(Drifted.run_cell) != parameters(Kernel.run_cell)


@pytest.mark.parametrize("fake, real, name", [
    (NotebookClientFake, NotebookClient, "async_execute_cell"),
    (FakeManager, AsyncKernelManager, "shutdown_kernel"),
    (FakeManager, AsyncKernelManager, "interrupt_kernel"),
    (FakeProvisioner, LocalProvisioner, "poll"),
    (FakeSandbox, Sandbox, "memory_exceeded"),
    (FakeSandbox, Sandbox, "cpu_used"),
], ids=lambda value: value if isinstance(value, str) else value.__name__)
def test_the_fakes_beneath_a_kernel_have_what_it_calls(fake, real, name):
    """nbclient's NotebookClient, jupyter_client's manager and provisioner, the sandbox: each
    method the Kernel calls on them, as the real one takes it."""
    assert parameters(getattr(fake, name)) == parameters(getattr(real, name)), name
    assert inspect.iscoroutinefunction(getattr(fake, name)) == inspect.iscoroutinefunction(getattr(real, name))


def test_the_fake_notebook_client_is_its_own_kernel_client_with_what_the_kernel_reads():
    """The Kernel reads a few things off nbclient's client and its kernel client (kc): the fake
    holds each, so a test cannot pass on an attribute the real client lacks."""
    fake = NotebookClientFake({})
    assert fake.kc is fake
    for name in ("output_lost",):
        assert hasattr(BoundedKernelClient, name) or hasattr(CappedClient, name), name
        assert hasattr(fake, name), name
