"""The benchmarks' CPU count (benchmarks/measure.py): where it can make a cpuacct cgroup, every
process of a run is counted whole, short-lived ones and the kernels a long-running fork server
forks for the run included, and the server is put back where it was afterwards."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import measure  # noqa: E402

# Each child spends this much CPU (its own clock), however busy the machine is.
BURN = "import time\nwhile time.process_time() < {seconds}: pass\n"

pytestmark = pytest.mark.slow   # they start processes
needs_group = pytest.mark.skipif(not (os.geteuid() == 0 and measure.CPUACCT.is_dir()),
                                 reason="needs root and a cgroup v1 cpuacct hierarchy")


def groups_left() -> list[str]:
    return [p.name for p in measure.CPUACCT.iterdir() if p.name.startswith(f"benchmark-{os.getpid()}-")]


def cpuacct_group(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return path
    return ""


@needs_group
def test_short_lived_children_are_counted_whole():
    # Twelve children of 0.05 CPU s each: a sampler that looks every 50 ms sees a part of each.
    script = textwrap.dedent(f"""
        import subprocess, sys
        for _ in range(12):
            subprocess.run([sys.executable, "-c", {BURN.format(seconds=0.05)!r}], check=True)
    """)
    measured = measure.run([sys.executable, "-c", script])
    assert measured.cpu_counted == "cgroup"
    assert measured.cpu_seconds >= 12 * 0.05
    assert groups_left() == []


@needs_group
def test_what_a_running_fork_server_forks_for_the_run_is_counted(tmp_path):
    # A stand-in for the shared fork server (found by "fork_server" in its command line): it
    # forks a child that spends 0.4 CPU s whenever its FIFO is written to.
    poke, done = tmp_path / "poke", tmp_path / "done"
    os.mkfifo(poke)
    server_code = textwrap.dedent(f"""
        import os, sys
        while True:
            with open({str(poke)!r}) as f:
                if not f.read():
                    continue
            if os.fork() == 0:
                exec({BURN.format(seconds=0.4)!r})
                open({str(done)!r}, "w").close()
                os._exit(0)
            os.wait()
    """)
    server = subprocess.Popen([sys.executable, "-c", server_code, "fork_server"])
    try:
        deadline = time.monotonic() + 30
        while server.pid not in measure._fork_servers():   # up and running, as a shared server is
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.01)
        home = cpuacct_group(server.pid)
        client = f"import os, time\nopen({str(poke)!r}, 'w').write('go')\n" \
                 f"while not os.path.exists({str(done)!r}): time.sleep(0.01)\n"
        measured = measure.run([sys.executable, "-c", client])
        assert measured.cpu_counted == "cgroup"
        assert measured.cpu_seconds >= 0.4
        assert cpuacct_group(server.pid) == home
        assert groups_left() == []
    finally:
        server.kill()
        server.wait()
