"""Execution in a real kernel: errors do not stop the notebook, output is capped in the grader."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grading_helpers import FIXTURES, OWN_PEAK_KIB, SUBMISSIONS, grade

pytestmark = pytest.mark.slow


def _grader_peak(tmp_path, notebook: Path) -> tuple[float, int, int]:
    """(score, characters of output the grader kept, the grading process's peak memory in KiB)."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from grader.grade import grade_path
        from grader.settings import Settings
        from grader.course.spec import load_assignment
        result = grade_path(Path({str(notebook)!r}), load_assignment('rows'),
                            Settings(cell_timeout=60.0, call_timeout=5.0))
        print(result.score, result.timing["output_characters"], {OWN_PEAK_KIB})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    score, printed, peak_kib = done.stdout.split()
    return float(score), int(printed), int(peak_kib)


def test_huge_output_does_not_grow_the_grader(tmp_path):
    """200 MB printed by a cell; the grader process's peak memory stays far below that: within
    128 MiB of what grading an ordinary notebook takes on this machine, measured in the same run
    (the bound on what the kernel's sockets may queue is 8 messages of 8 MiB each)."""
    _, _, ordinary_kib = _grader_peak(tmp_path, SUBMISSIONS / "worked_solution.ipynb")
    score, printed, peak_kib = _grader_peak(tmp_path, FIXTURES / "hostile_huge_output.ipynb")
    assert score == 25
    assert printed < 2_000_000, "the kernel-side cap should discard most of the output"
    assert peak_kib < ordinary_kib + 128 * 1024, (peak_kib, ordinary_kib)


def test_a_message_flood_does_not_grow_the_grader(tmp_path):
    """800 widget messages of 1 MiB, 800 invented display ids and one 64 MiB message: the grader
    reads none of it (before the limits, its peak memory passed 1.4 GB), stops the kernel that
    sent the oversized message, and grades the notebook again without that cell."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from grader.grade import grade_path
        from grader.settings import Settings
        from grader.course.spec import load_assignment
        result = grade_path(Path({str(FIXTURES / 'hostile_message_flood.ipynb')!r}), load_assignment('rows'),
                            Settings(cell_timeout=60.0, call_timeout=5.0))
        kinds = ",".join(sorted({{e.kind for e in result.errors}}))
        print(result.score, kinds, {OWN_PEAK_KIB}, sep="|")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    score, kinds, peak_kib = done.stdout.strip().split("|")
    assert float(score) == 25
    # On a busy machine the kernel's own queue may drop the oversized message before it is
    # sent: then there is nothing to record, and the grade is the same.
    assert kinds in ("output_flood", "")
    assert int(peak_kib) < 300 * 1024


def test_kernel_death_is_reported_and_the_notebook_rerun_without_that_cell():
    result = grade(FIXTURES / "hostile_os_exit.ipynb", "rows")
    died = [e for e in result.errors if e.kind == "kernel_died"]
    assert died and "run again in a new kernel" in died[0].evalue
    assert result.score == result.max_score


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_python3_kernel_spec_installed_for_the_user_is_not_used(tmp_path, monkeypatch, fork_server):
    """The kernel runs on the grader's own interpreter and ipykernel whatever "python3" kernel
    spec the user or the system has installed (here one that cannot start a kernel)."""
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": ["/bin/false", "{connection_file}"],
                                                  "display_name": "elsewhere", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    result = grade(SUBMISSIONS / "worked_solution.ipynb", "rows", _fresh=tmp_path, fork_server=fork_server)
    assert result.status == "graded" and result.score == result.max_score
    assert result.isolation["kernel_start"].startswith("forked" if fork_server else "fresh")


def test_globals_read_by_a_function_are_reported():
    from grading_helpers import SUBMISSIONS
    result = grade(SUBMISSIONS / "mistake_global_D.ipynb", "rows")
    assert result.functions["self_attention"]["globals"] == {"D": "6"}
    assert result.functions["multi_head_attention"]["globals"] == {"D": "6"}


def test_reordered_parameters_are_called_by_keyword():
    result = grade(FIXTURES / "reordered_params.ipynb", "rows")
    assert result.functions["self_attention"]["called_by_keyword"] is True
    assert result.functions["multi_head_attention"]["called_by_keyword"] is False


def test_result_json_is_strict_json(tmp_path):
    """NaN and Infinity are not JSON: a notebook whose numpy returns them still gives a file
    any strict parser reads, with every check in it."""
    result = grade(FIXTURES / "hostile_monkeypatch_numpy.ipynb", "rows")
    result.write_json(tmp_path / "r.json")

    def refuse(constant):
        raise AssertionError(f"not strict JSON: {constant}")

    data = json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse)
    assert len(data["checks"]) == len(result.checks) > 0


def test_a_kernel_whose_harness_fails_to_start_leaves_nothing_behind(monkeypatch):
    """The kernel starts but the grading harness cannot load: the error is one line, and the
    kernel, its processes and its working folder are gone."""
    import asyncio
    import glob

    import pytest

    from grading_helpers import TEST_SETTINGS, sandbox_processes
    from grader.kernel import session as kernel
    from grader.errors import MachineFault
    from grader.sandbox.isolation import run_id

    before = set(glob.glob(f"/tmp/grader-kernel-{run_id()}-*"))
    monkeypatch.setattr(kernel, "harness_source", lambda: "raise RuntimeError('harness broken on purpose')")

    async def start():
        async with kernel.Kernel(TEST_SETTINGS):
            pass
    with pytest.raises(MachineFault, match="the grading harness could not start"):
        asyncio.run(start())
    assert sandbox_processes() == []
    assert set(glob.glob(f"/tmp/grader-kernel-{run_id()}-*")) <= before


def test_a_kernel_that_cannot_be_launched_leaves_nothing_behind():
    """Making the kernel manager fails after the sandbox has its folder, mount and cgroups:
    they go all the same, and the failure reaches the caller as the machine's."""
    import asyncio
    import glob
    import os

    from grading_helpers import TEST_SETTINGS, sandbox_processes
    from grader.kernel import session as kernel
    from grader.errors import MachineFault
    from grader.sandbox.isolation import run_id

    def no_manager(workdir, sandbox):
        raise OSError("no kernel manager on purpose")
    before = set(glob.glob(f"/tmp/grader-kernel-{run_id()}-*"))
    broken = kernel.Kernel(TEST_SETTINGS, no_manager)

    async def start():
        async with broken:
            pass
    with pytest.raises(MachineFault, match="OSError: no kernel manager on purpose"):
        asyncio.run(start())
    assert not os.path.exists(broken.workdir)
    assert not any(d.exists() for d in (broken.sandbox.cgroup.dirs.values() if broken.sandbox.cgroup else ()))
    assert set(glob.glob(f"/tmp/grader-kernel-{run_id()}-*")) <= before
    assert sandbox_processes() == []


# A fresh kernel's command, or a forked kernel's working folder, made to fail at once.
BROKEN_START = {
    "fresh": 'km.format_kernel_cmd = lambda extra_arguments=None: '
             '["/bin/sh", "-c", "echo broken on purpose >&2; exit 3"]',
    "forked": 'request = sandbox.fork_request; '
              'sandbox.fork_request = lambda *a: {**request(*a), "cwd": "/broken on purpose"}',
}


@pytest.mark.parametrize("start", sorted(BROKEN_START))
def test_a_kernel_that_dies_as_it_starts_is_reported_in_one_line_and_leaves_nothing_behind(tmp_path, start):
    """The kernel's process exits at once: the error carries what it wrote to stderr, its
    folder and processes are gone, and the grader's process still exits cleanly (nbclient's
    exit hook for that kernel would fail)."""
    from grading_helpers import TEST_SETTINGS, own_run_environment, sandbox_processes
    limits = {**TEST_SETTINGS.limits.__dict__, "fork_server": start == "forked"}
    script = textwrap.dedent(f"""
        import asyncio, os
        from grader.errors import MachineFault
        from grader.kernel.session import Kernel
        from grader.kernel.client import default_kernel_manager
        from grader.settings import Limits

        def exits_at_once(workdir, sandbox):
            km = default_kernel_manager(workdir, sandbox)
            {BROKEN_START[start]}
            return km

        async def start(kernel):
            async with kernel:
                pass
        kernel = Kernel(Limits(**{limits!r}), exits_at_once)
        try:
            asyncio.run(start(kernel))
        except MachineFault as exc:
            print(exc)
        print(kernel.sandbox.kernel_start[0])
        print("folder left:", os.path.exists(kernel.workdir))
    """)
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env=own_run_environment())
    out, err = grader.communicate(timeout=120)
    assert grader.returncode == 0 and err == "", err[-2000:]
    error, kind, folder = out.splitlines()
    assert error.startswith("a kernel could not start") and "broken on purpose" in error, error
    assert kind == start
    assert folder == "folder left: False"
    assert sandbox_processes(grader_pid=grader.pid) == []


def test_calls_stop_when_the_submissions_probing_time_is_used_up(tmp_path):
    """Each call is slow but correct and within its own timeout; once the submission's probing
    time is spent, the remaining calls are not made and their checks say so."""
    source = (FIXTURES / "correct_script.py").read_text()
    slow = source.replace("def self_attention(X, Wq, Wk, Wv):", "def self_attention(X, Wq, Wk, Wv):\n"
                          "    __import__('time').sleep(0.5)", 1)
    assert slow != source
    path = tmp_path / "slow.py"
    path.write_text(slow)
    result = grade(path, "rows", probe_timeout=5.0)
    assert result.functions["self_attention"]["non_answer"] is False, "judged on the calls that were made"
    assert any(c.status == "passed" and c.points for c in result.checks if c.function == "self_attention")
    assert all("was used up" in c.message for c in result.checks
               if c.function == "multi_head_attention" and c.max_points)
    assert result.score < 25


def test_malformed_replies_from_the_kernel_are_the_submissions_problem(tmp_path):
    """A hook that publishes garbage under the grader's MIME type after every cell (so after
    every probe): each reply is rejected as malformed, and the result is the submission's
    error, never a grader error."""
    from grader.kernel_side.wire import MIME
    hook = (f"from IPython.display import publish_display_data\n"
            f"def forge(*_):\n"
            f"    publish_display_data({{{MIME!r}: {{'functions': ['not', 'a', 'dict'], 'found': True,\n"
            f"                                     'value': {{'kind': 'sequence', 'items': 5, 'length': 1}}}}}})\n"
            f"get_ipython().events.register('post_run_cell', forge)\n")
    source = (FIXTURES / "correct_script.py").read_text()
    path = tmp_path / "forger.py"
    path.write_text(source + "\n# %%\n" + hook)
    result = grade(path, "rows")
    kinds = {e.kind for e in result.errors}
    assert "bad_reply" in kinds and "grader_error" not in kinds, result.errors
    assert result.score == 0


def slow_on_integer_inputs(tmp_path, slow: str) -> Path:
    """The correct submission, but self_attention runs `slow` first on the integer-input probe,
    the only one with three tokens; it is called near the end of each function's calls (and
    multi_head_attention reaches it through self_attention)."""
    source = (FIXTURES / "correct_script.py").read_text()
    body = "def self_attention(X, Wq, Wk, Wv):\n    if X.shape[0] == 3:\n" + textwrap.indent(slow, " " * 8)
    changed = source.replace("def self_attention(X, Wq, Wk, Wv):\n", body, 1)
    assert changed != source
    path = tmp_path / "slow_on_integers.py"
    path.write_text(changed)
    return path


INTEGER_PROBE = "integer input, N = 3, D = 4, integer inputs"
# Generous, so that the calls before the slow one finish in time on a busy machine too; the
# slow one sleeps far longer.
CALL_TIMEOUT = 10.0
BEFORE_THE_SLOW_CALL = ("fixed", "random_shapes", "weights_distribution", "permutation_equivariance", "memory_layout",
                        "return_structure")


def test_a_call_past_its_timeout_costs_only_that_call_and_the_later_ones(tmp_path):
    """Every function's calls go to the kernel in one request; the one that sleeps past the
    call timeout is interrupted by the grader at that timeout, the calls before it keep their
    results and the kernel stays."""
    result = grade(slow_on_integer_inputs(tmp_path, "__import__('time').sleep(60)\n"), "rows",
                   call_timeout=CALL_TIMEOUT)
    checks = {c.name: c for c in result.checks}
    for fn in ("self_attention", "multi_head_attention"):
        assert all(checks[f"{fn}.{kind}"].status == "passed" for kind in BEFORE_THE_SLOW_CALL)
        assert f"On {INTEGER_PROBE}: the call did not finish within 10 s" in checks[f"{fn}.dtypes"].message
        assert (f"not made: an earlier call of this function ({INTEGER_PROBE}) did not finish within 10 s"
                in checks[f"{fn}.inputs_unmodified"].message)
    assert checks["multi_head_attention.single_head"].status == "passed"
    assert result.score == 21 and result.status == "graded"
    assert result.timing["probing"] < 60, "two calls timed out; none ran its 60 s"


def test_a_call_that_swallows_its_interrupt_gets_the_kernel_stopped(tmp_path):
    """The call catches the KeyboardInterrupt and sleeps on: the grader, on its own clock,
    still times it out, stops the kernel after the grace, and calls nothing more."""
    from grading_helpers import sandbox_processes
    swallows = ("while True:\n    try:\n        __import__('time').sleep(60)\n"
                "    except KeyboardInterrupt:\n        pass\n")
    result = grade(slow_on_integer_inputs(tmp_path, swallows), "rows", call_timeout=CALL_TIMEOUT)
    checks = {c.name: c for c in result.checks}
    assert all(checks[f"self_attention.{kind}"].status == "passed" for kind in BEFORE_THE_SLOW_CALL)
    assert "the call did not finish within 10 s" in checks["self_attention.dtypes"].message
    later = [c for c in result.checks if c.function == "multi_head_attention" and c.max_points]
    assert later and all("not made: the kernel had stopped before this function was called" in c.message
                         for c in later)
    assert result.timing["probing"] < 60, "the call timeout and the interrupt grace, not the call's 60 s"
    assert "grader_error" not in {e.kind for e in result.errors}
    assert sandbox_processes() == []


FORGED_CALL_MANY = '''
import sys
_harness = sys.modules["_attention_grader_harness"]

def _forged_call_many(requests):
    replies = [_harness._call(r) for r in requests]
    # The real replies, each tagged as the next call's, then a flood of extra ones, on the
    # grader's own reply channel.
    for index in [*range(1, len(replies)), 0]:
        _harness._reply({"index": index, "reply": replies[index]})
    for _ in range(500):
        _harness._reply({"index": 0, "reply": replies[0], "seconds": 0.0})

_harness.call_many = _forged_call_many
'''


def graded_at_zero_saying(tmp_path, cell: str, words: str) -> None:
    """The correct script with `cell` after it is graded, at 0, with no grader error, and its
    first check says `words`: what the cell did to the calls' replies is the submission's."""
    path = tmp_path / "with_cell.py"
    path.write_text((FIXTURES / "correct_script.py").read_text() + "\n# %%\n" + cell)
    result = grade(path, "rows")
    assert result.status == "graded" and result.score == 0
    assert "grader_error" not in {e.kind for e in result.errors}, result.errors
    assert words in {c.name: c for c in result.checks}["self_attention.fixed"].message


def test_a_replaced_harness_with_reordered_and_extra_replies_earns_nothing(tmp_path):
    graded_at_zero_saying(tmp_path, FORGED_CALL_MANY, "the kernel's reply to the grader was malformed")


# The reply channel is a pipe the kernel's process holds open: the notebook can write to it
# too, found by the harness's record of it or among its process's open files.
CHANNEL_WRITERS = {
    "bytes that are no frame": '''
import os, sys
_fd = sys.modules["_attention_grader_harness"]._replies["fd"]
def _garbage(*_):
    os.write(_fd, b"\\xff" * 64)
get_ipython().events.register("pre_run_cell", _garbage)
''',
    "a frame longer than the grader reads": '''
import os
def _target(n):
    try:
        return os.readlink(f"/proc/self/fd/{n}")
    except OSError:   # the listing's own descriptor, closed by now
        return ""
_fds = [int(n) for n in os.listdir("/proc/self/fd") if _target(n).endswith(".grader-replies")]
assert _fds
def _huge(*_):
    for fd in _fds:
        try:
            os.write(fd, (2**31).to_bytes(4, "big"))
        except OSError:
            pass
get_ipython().events.register("pre_run_cell", _huge)
''',
}


@pytest.mark.parametrize("attack", sorted(CHANNEL_WRITERS))
def test_a_notebook_that_writes_to_the_reply_channel_breaks_only_its_own_calls(tmp_path, attack):
    graded_at_zero_saying(tmp_path, CHANNEL_WRITERS[attack], "the grader could not read the calls' replies")


# The harness's replies published on the kernel's output channel, as display messages, instead
# of written to the reply channel: nothing reaches the grader where it reads the calls' replies.
REPLIES_ON_THE_OUTPUT_CHANNEL = '''
import sys
from IPython.display import publish_display_data
_harness = sys.modules["_attention_grader_harness"]
_harness._reply = lambda payload: publish_display_data({_harness.MIME: payload})
'''


def test_replies_sent_another_way_are_no_verdict_and_no_grader_error(tmp_path):
    graded_at_zero_saying(tmp_path, REPLIES_ON_THE_OUTPUT_CHANNEL,
                          "the grader's harness ended without replying to every call")


def test_a_kernel_that_dies_right_after_a_reply_is_blamed_on_the_call_it_died_in(tmp_path):
    """os._exit in the call after one that returned: that call's reply was written before the
    next began, so it is read, and the death is the next call's."""
    result = grade(slow_on_integer_inputs(tmp_path, "__import__('os')._exit(1)\n"), "rows",
                   call_timeout=CALL_TIMEOUT)
    checks = {c.name: c for c in result.checks}
    assert all(checks[f"self_attention.{kind}"].status == "passed" for kind in BEFORE_THE_SLOW_CALL)
    assert (f"On {INTEGER_PROBE}: the kernel died during the call (os._exit, a crash or a segfault)"
            in checks["self_attention.dtypes"].message)
    assert "grader_error" not in {e.kind for e in result.errors}


# A thread that outlives the notebook's cells and floods the kernel's output channel with one
# message, signed once and sent on and on: cheap to send, not to receive, so the grader's
# queue overflows and ZMQ drops messages, the harness's replies among them.
FLOOD_FOREVER = '''
import threading
kernel = get_ipython().kernel
message = kernel.session.msg("stream", {"name": "stdout", "text": "x" * 100}, parent=kernel.get_parent())
frames = kernel.session.serialize(message)
def flood():
    while True:
        kernel.iopub_socket.send_multipart(frames)
threading.Thread(target=flood, daemon=True).start()
'''


def test_replies_lost_in_a_flood_are_no_verdict(tmp_path):
    """The description of the functions lost in a flood of output: never "no function named
    self_attention is defined", never a 0 graded as a score, but a submission not graded,
    saying that the replies were lost. (The calls' replies come on the reply channel, which
    the flood does not reach.)"""
    path = tmp_path / "flood_forever.py"
    path.write_text((FIXTURES / "correct_script.py").read_text() + "\n# %%\n" + FLOOD_FOREVER)
    # Calls are timed from their replies: a call timeout longer than the wait for a finished
    # run's last output, so the silence is read as lost replies, not as a slow call.
    result = grade(path, "rows", call_timeout=5.0)
    assert not any("no function named" in c.message or "did not finish" in c.message for c in result.checks)
    lost = [e for e in result.errors if e.ename == "RepliesLost"]
    if result.status == "graded" and not lost:
        # On a machine busy enough to starve the flooding thread, every reply got through: then
        # the verdict is the correct script's own, never a 0 drawn from a reply that was lost.
        assert result.score == result.max_score, [(c.name, c.message) for c in result.checks if not c.points]
        return
    assert result.status == "error" and result.score == 0
    assert len(lost) == 1 and lost[0].kind == "grader_error"
    assert "the kernel's replies to the grader were lost on the way" in lost[0].evalue
    assert all(c.status == "error" and c.message.startswith("Not graded: ") for c in result.checks)


# Records the length of every piece of code IPython runs; multi_head_attention then says the
# longest in its error, which the staff's result shows.
CODE_LENGTHS = '''
_lengths = []
get_ipython().events.register("pre_run_cell", lambda info: _lengths.append(len(info.raw_cell)))

def multi_head_attention(X, Wq, Wk, Wv, H):
    raise ValueError(f"longest code {max(_lengths)} characters")
'''


def test_the_calls_arguments_travel_as_data_and_ipython_parses_only_a_short_line(tmp_path):
    """A function's probes carry about 100 KB of arrays: IPython tokenizing them as code cost
    more CPU than the calls themselves. They go in the request's metadata instead."""
    path = tmp_path / "code_lengths.py"
    path.write_text((FIXTURES / "correct_script.py").read_text() + "\n# %%\n" + CODE_LENGTHS)
    result = grade(path, "rows")
    checks = {c.name: c for c in result.checks}
    assert checks["self_attention.fixed"].status == "passed"
    said = re.search(r"longest code (\d+) characters", checks["multi_head_attention.fixed"].message)
    assert said, checks["multi_head_attention.fixed"].message
    assert int(said.group(1)) < 500


def test_replies_the_grader_reads_slowly_are_all_read():
    """On a busy machine the grader reads a run's replies long after the kernel has sent them
    and said it is done: every one is read, however long that takes. Before, what was not read
    2 s after the kernel's own reply was dropped, and a correct submission was not graded
    (RepliesLost). Here the grader's process is made slow by blocking its event loop as it
    takes each reply, as a loaded machine would."""
    import asyncio
    import time

    from grading_helpers import TEST_SETTINGS
    from grader.kernel import session as kernel
    from grader.kernel.session import HARNESS_MODULE

    count = 12
    publish = (f"import sys\n"
               f"for i in range({count}):\n    sys.modules[{HARNESS_MODULE!r}]._reply({{'i': i}})\n")
    received = []

    def slowly(position, payload):
        time.sleep(0.4)
        received.append((position, payload))

    async def run():
        async with kernel.Kernel(TEST_SETTINGS) as k:
            return await k.run_calls(publish, count, call_timeout=60, total_timeout=120, on_payload=slowly)
    end = asyncio.run(run())
    assert received == [(i, {"i": i}) for i in range(count)]
    assert (end.finished, end.error) == (count, None)
