"""One watchdog per grader process (grader/sandbox/reaper.py): it removes what the process was
watching and had not released when the process dies, however it dies, and nothing else; a
forked child has its own; a watchdog killed from outside is replaced and told everything.
Each test runs the grader's side in a child interpreter it then kills with SIGKILL."""
import pytest
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from grading_helpers import ROOT
from grader.sandbox.leftovers import parent_of

# The grader's side: watch each folder of argv[2:] (released if its name ends in "released"),
# print the watchdog's PID, then wait to be killed.
OWNER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from grader.sandbox.reaper import watchdog
    for folder in sys.argv[2:]:
        key = watchdog().watch({"folders": [folder]})
        if folder.endswith("released"):
            watchdog().release(key)
    print(watchdog()._process.pid, flush=True)
    time.sleep(600)
""")


def start_owner(*folders: Path, code: str = OWNER) -> tuple[subprocess.Popen, int]:
    owner = subprocess.Popen([sys.executable, "-c", code, str(ROOT), *map(str, folders)], stdout=subprocess.PIPE,
                             text=True)
    line = owner.stdout.readline()
    assert line.strip().isdigit(), f"the owner did not start: {line!r}"
    return owner, int(line)


def wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def folders(tmp_path: Path, *names: str) -> list[Path]:
    made = [tmp_path / name for name in names]
    for folder in made:
        folder.mkdir()
        (folder / "file").write_text("x")
    return made


@pytest.mark.slow
def test_one_watchdog_removes_what_was_not_released_when_its_process_is_killed(tmp_path):
    first, second, released = folders(tmp_path, "first", "second", "released")
    owner, watchdog_pid = start_owner(first, second, released)
    # One process for everything watched: no interpreter per folder.
    assert [p for p in os.listdir("/proc") if p.isdigit() and parent_of(int(p)) == owner.pid] == [str(watchdog_pid)]
    assert first.exists() and second.exists()
    owner.kill()
    owner.wait()
    assert wait_until(lambda: not first.exists() and not second.exists()), "watched folders left behind"
    # What was released is the owner's own business: never removed.
    assert released.exists()
    assert wait_until(lambda: not alive(watchdog_pid)), "the watchdog outlived its work"


@pytest.mark.slow
def test_a_process_that_exits_having_released_everything_leaves_everything(tmp_path):
    (kept,) = folders(tmp_path, "kept-released")
    code = OWNER.replace("time.sleep(600)", "")
    owner, watchdog_pid = start_owner(kept, code=code)
    owner.wait()
    assert wait_until(lambda: not alive(watchdog_pid))
    assert kept.exists()


@pytest.mark.slow
def test_a_killed_watchdog_is_replaced_and_told_everything_still_watched(tmp_path):
    first, later = folders(tmp_path, "first", "first-later")
    code = OWNER.replace("time.sleep(600)", textwrap.dedent("""
        os.kill(watchdog()._process.pid, 9)
        time.sleep(0.5)
        watchdog().watch({"folders": [sys.argv[-1] + "-later"]})
        print(watchdog()._process.pid, flush=True)
        time.sleep(600)
    """))
    owner, killed_watchdog = start_owner(first, code=code)
    replacement = int(owner.stdout.readline())
    assert replacement != killed_watchdog
    owner.kill()
    owner.wait()
    # The first folder was watched by the watchdog that was killed: the new one was told.
    assert wait_until(lambda: not first.exists() and not later.exists())


@pytest.mark.slow
def test_a_forked_child_has_its_own_watchdog_and_the_parents_still_hears_the_parent_die(tmp_path):
    parents, childs = folders(tmp_path, "parents", "childs")
    code = textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, sys.argv[1])
        from grader.sandbox.reaper import watchdog
        watchdog().watch({"folders": [sys.argv[2]]})
        child = os.fork()
        if child == 0:
            watchdog().watch({"folders": [sys.argv[3]]})
            time.sleep(600)
            os._exit(0)
        print(watchdog()._process.pid, flush=True)
        print(child, flush=True)
        time.sleep(600)
    """)
    owner, watchdog_pid = start_owner(parents, childs, code=code)
    child = int(owner.stdout.readline())
    try:
        owner.kill()
        owner.wait()
        # The child lives on and holds no copy of the parent's pipe: the parent's watchdog acts.
        assert wait_until(lambda: not parents.exists()), "the parent's folder outlived it"
        assert childs.exists(), "the child's folder went with the parent"
        os.kill(child, signal.SIGKILL)
        assert wait_until(lambda: not childs.exists()), "the child's own watchdog did not act"
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass

