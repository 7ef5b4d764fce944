"""Each fake of the kernel (tests/kernel_fakes.py) has what it stands in for: the same methods,
taking the same parameters, and the same state the grader reads. A change to the real
interface fails here first, instead of leaving tests that pass against a kernel that no
longer exists."""
import inspect

import pytest

from grader.kernel.runner import NotebookKernel
from grader.kernel.session import Kernel
from kernel_fakes import HarnessKernel, ScriptedKernel


def parameters(function) -> list[tuple[str, object]]:
    """Names and kinds of a method's parameters, `self` left out (defaults may differ: a fake
    may require what the real method defaults)."""
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values() if p.name != "self"]


def protocol_members(protocol) -> set[str]:
    own = {name for name in vars(protocol) if not name.startswith("_") or name in ("__aenter__", "__aexit__")}
    return own | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("real", [NotebookKernel, Kernel], ids=["protocol", "Kernel"])
def test_the_scripted_kernel_has_what_the_runner_uses(real):
    for name in protocol_members(NotebookKernel) - set(NotebookKernel.__annotations__):
        assert parameters(getattr(ScriptedKernel, name)) == parameters(getattr(real, name)), name
        assert inspect.iscoroutinefunction(getattr(ScriptedKernel, name)) == \
            inspect.iscoroutinefunction(getattr(real, name)), name
    fake = ScriptedKernel(clock=lambda: 0.0, script={})
    for name in NotebookKernel.__annotations__:
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
