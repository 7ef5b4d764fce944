"""Running a notebook, without a Jupyter kernel: cell order, timeouts and the deadline, what a
failing statement leaves undefined, and restarts, against a scripted kernel and a clock that
only moves when a cell "runs"."""
import asyncio

import nbformat
import pytest

from grader.result import ErrorRecord
from kernel_fakes import Clock, ScriptedKernel, Step
from grader.kernel.runner import MAX_RESTARTS, NotebookRunner, left_undefined, run_with_restarts


def raises(ename="NameError", line=1, seconds=1.0) -> Step:
    return Step(seconds, ("error", ename, f"{ename} raised", f"Cell In[7], line {line}\n----> {line} ..."))


def dies(seconds=1.0) -> Step:
    return Step(seconds, ("kernel_died", "KernelDied", "the Python process running the notebook died"), dies=True,
                lost=True)


def notebook(*cells) -> nbformat.NotebookNode:
    """Strings are code cells; ("md", text) is a markdown cell, ("tag", source) a code cell
    tagged skip-execution."""
    made = []
    for cell in cells:
        if isinstance(cell, str):
            made.append(nbformat.v4.new_code_cell(cell))
        elif cell[0] == "md":
            made.append(nbformat.v4.new_markdown_cell(cell[1]))
        else:
            made.append(nbformat.v4.new_code_cell(cell[1], metadata={"tags": ["skip-execution"]}))
    return nbformat.v4.new_notebook(cells=made)


def run(nb, script=None, cell_timeout=30.0, notebook_timeout=300.0, skip=frozenset(), **kernel):
    clock = Clock()
    fake = ScriptedKernel(clock, script or {}, **kernel)
    log = asyncio.run(NotebookRunner(fake, cell_timeout, notebook_timeout, clock).run(nb, skip))
    return fake, log


def test_code_cells_run_in_order_and_the_others_are_not_sent():
    nb = notebook("a = 1", ("md", "# title"), "   \n", ("tag", "skipped = True"), "b = 2", "c = 3")
    fake, log = run(nb, skip={5}, background=2)
    assert fake.sources == ["a = 1", "b = 2"]
    assert log.errors == []
    assert log.kernel_alive and fake.background_asked and log.background_stopped == 2
    assert log.seconds == 2.0
    assert log.output_bytes == len("a = 1") + len("b = 2")


def test_each_cell_gets_the_cell_timeout_or_what_is_left_of_the_notebooks():
    nb = notebook("slow", "next", "last")
    fake, log = run(nb, {"slow": Step(seconds=42.0), "next": Step(seconds=5.0)}, cell_timeout=30.0,
                    notebook_timeout=50.0)
    assert fake.ran == [("slow", 30.0), ("next", 8.0), ("last", 3.0)]
    assert log.errors == []


def test_a_used_up_deadline_is_recorded_once_at_the_first_cell_not_run():
    nb = notebook("first", ("md", "text"), "second", "third")
    fake, log = run(nb, {"first": Step(seconds=60.0)}, notebook_timeout=60.0)
    assert fake.sources == ["first"]
    (error,) = log.errors
    assert (error.cell, error.kind, error.source) == (2, "deadline", "second")
    assert "60 s were used up" in error.evalue
    assert log.kernel_alive


def test_an_error_is_recorded_with_its_cell_and_the_notebook_goes_on():
    nb = notebook("ok", "boom", "after")
    fake, log = run(nb, {"boom": raises("ZeroDivisionError")})
    assert fake.sources == ["ok", "boom", "after"]
    (error,) = log.errors
    assert (error.cell, error.kind, error.ename, error.source) == (1, "error", "ZeroDivisionError", "boom")
    assert "ran nothing after" not in error.evalue


def test_nothing_after_a_failing_statement_runs_and_its_error_names_what_it_left_undefined():
    """As in Python: the definitions after the failing line are never made, and the error
    says so once; the next cell still runs."""
    cell = "x = 1\nfloat(object())\ny = 2\ndef f():\n    return y\nclass G:\n    pass\n"
    nb = notebook(cell, "after")
    fake, log = run(nb, {cell: raises("TypeError", line=2)})
    assert fake.sources == [cell, "after"]
    (error,) = log.errors
    assert (error.cell, error.source) == (0, cell)
    assert error.evalue == ("TypeError raised (Python ran nothing after line 2 of this cell, so `f`, `G` are not "
                            "defined)")


def test_a_decorated_function_whose_decorator_raises_is_not_defined():
    cell = "@missing_decorator\ndef self_attention(X, Wq, Wk, Wv):\n    return X\n"
    fake, log = run(notebook(cell), {cell: raises("NameError", line=1)})
    assert fake.sources == [cell]
    assert log.errors[0].evalue.endswith("so `self_attention` is not defined)")


def test_no_note_without_definitions_after_the_error_nor_after_a_timeout():
    plain = "float(object())\nprint(1)\n"
    slow = "while True: pass\ndef f(): pass\n"
    timeout = Step(30.0, ("timeout", "Timeout", "the cell ran longer than 30 s and was interrupted",
                          "Cell In[7], line 1"))
    fake, log = run(notebook(plain, slow), {plain: raises(line=1), slow: timeout})
    assert fake.sources == [plain, slow]
    assert [e.kind for e in log.errors] == ["error", "timeout"]
    assert not any("ran nothing after" in e.evalue for e in log.errors)


def test_a_lost_kernel_stops_the_run_without_a_deadline_error():
    fake, log = run(notebook("fine", "fatal", "never", "nor this"), {"fatal": dies()})
    assert fake.sources == ["fine", "fatal"]
    (error,) = log.errors
    assert (error.cell, error.kind, error.kernel_lost) == (1, "kernel_died", True)
    assert not log.kernel_alive
    assert not fake.background_asked, "no kernel left to stop processes in"


def test_a_kernel_that_is_not_running_runs_nothing():
    fake, log = run(notebook("a", "b"), alive=False)
    assert fake.ran == [] and log.errors == [] and not log.kernel_alive


def graded(nb, scripts: list[dict], notebook_timeout=300.0, cell_timeout=30.0, leftovers=()):
    """Run with restarts; the n-th kernel started follows scripts[n]. Returns (kernels, the
    kernel yielded, the log as seen once the context has exited)."""
    clock = Clock()
    kernels = []

    def start_kernel():
        n = len(kernels)
        kernels.append(ScriptedKernel(clock, scripts[n], leftover=leftovers[n] if leftovers else 0))
        return kernels[-1]

    async def go():
        async with run_with_restarts(nb, cell_timeout, notebook_timeout, start_kernel, clock) as (kernel, log):
            assert not kernel.exited, "the kernel is yielded running, for probing"
            yielded = kernel
        return yielded, log
    yielded, log = asyncio.run(go())
    assert all(k.entered and k.exited for k in kernels)
    return kernels, yielded, log


def test_a_cell_that_loses_the_kernel_is_skipped_in_a_new_kernel():
    nb = notebook("setup", "fatal", "def f(): pass")
    script = {"fatal": dies(), "setup": raises("Warning")}
    kernels, yielded, log = graded(nb, [script, script], leftovers=(3, 4))
    assert [k.sources for k in kernels] == [["setup", "fatal"], ["setup", "def f(): pass"]]
    assert yielded is kernels[1]
    # Each error once, in cell order: the setup cell's from the last attempt, the fatal cell's
    # from the first, whose kernel it lost.
    assert [(e.cell, e.kind) for e in log.errors] == [(0, "error"), (1, "kernel_died")]
    assert log.errors[1].evalue.endswith("; the notebook was run again in a new kernel without this cell")
    assert log.kernel_alive
    assert log.leftover_processes == 7


def test_at_most_max_restarts_new_kernels():
    cells = [f"fatal_{n}" for n in range(MAX_RESTARTS + 2)]
    script = {source: dies() for source in cells}
    kernels, yielded, log = graded(notebook(*cells), [script] * (MAX_RESTARTS + 1))
    assert len(kernels) == MAX_RESTARTS + 1
    assert [k.sources for k in kernels] == [cells[n:n + 1] for n in range(MAX_RESTARTS + 1)]
    assert [e.cell for e in log.errors] == list(range(MAX_RESTARTS + 1))
    assert all("run again" in e.evalue for e in log.errors[:-1])
    assert "run again" not in log.errors[-1].evalue
    assert not log.kernel_alive and yielded is kernels[-1]


def test_a_new_kernel_gets_only_what_is_left_of_the_notebooks_time():
    nb = notebook("slow", "fatal", "later")
    first = {"slow": Step(seconds=30.0), "fatal": dies(seconds=20.0)}
    kernels, _, log = graded(nb, [first, {}], notebook_timeout=80.0, cell_timeout=60.0)
    assert kernels[1].ran == [("slow", 30.0), ("later", 29.0)]
    assert log.seconds == 52.0
    assert [e.kind for e in log.errors] == ["kernel_died"]


def test_no_new_kernel_once_the_notebooks_time_is_used_up():
    nb = notebook("fatal", "later")
    kernels, _, log = graded(nb, [{"fatal": dies(seconds=90.0)}], notebook_timeout=90.0)
    assert len(kernels) == 1
    died, deadline = log.errors
    assert died.kind == "kernel_died" and "run again" not in died.evalue
    # The later cells did not run for want of time: said so, so the result is a timeout.
    assert (deadline.cell, deadline.kind) == (1, "deadline") and "could be run again" in deadline.evalue


def test_a_fatal_last_cell_with_no_time_left_adds_no_deadline():
    kernels, _, log = graded(notebook("fine", "fatal"), [{"fatal": dies(seconds=90.0)}], notebook_timeout=90.0)
    assert [e.kind for e in log.errors] == ["kernel_died"]


@pytest.mark.parametrize("source, line, undefined", [
    ("x = 1\nfloat(object())\ny = 2\ndef f():\n    return y\n", 2, (2, ["f"])),
    ("float(object())\nprint(1)\n", 1, None),
    ("import numpy as np\nnp.zeros(-1)\nimport math\n", 2, None),
    ("def f(:\n", 1, None),
    ("def f():\n    pass\nboom()\ndef g(): pass\n", 3, (3, ["g"])),
])
def test_left_undefined(source, line, undefined):
    error = ErrorRecord(0, "error", "TypeError", "", f"Cell In[3], line {line}\n----> {line} ...")
    assert left_undefined(source, error) == undefined


def test_left_undefined_needs_the_failing_line():
    error = ErrorRecord(0, "error", "TypeError", "", "no line in this traceback")
    assert left_undefined("boom()\ndef f(): pass\n", error) is None
