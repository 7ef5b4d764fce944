"""The grader run without namespaces, as many LMS containers run it: as root without
CAP_SYS_ADMIN (capsh) or as the unprivileged user (setpriv), on a machine whose interpreter
every user can read, as an LMS image installs it."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

from grader.sandbox import isolation as sandbox
from grading_helpers import own_run_environment


def private_ancestors() -> dict[str, set[str]]:
    """Folders on the way to the interpreter that other users cannot enter (/root, where this
    machine keeps its Python), each with the entries inside it that lead to the interpreter."""
    found: dict[str, set[str]] = {}
    for path in sandbox.interpreter_paths():
        parts = Path(path).parts
        for i in range(1, len(parts)):
            folder = str(Path(*parts[:i]))
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                found.setdefault(folder, set()).add(parts[i])
                break
    return found


def as_a_course_machine(command: list[str]) -> list[str]:
    """`command`, where every user can read the interpreter, as an LMS image installs it: a
    private folder on the way to it is replaced, in a mount namespace of this test's own, by an
    open one holding only the entries that lead to the interpreter."""
    private = private_ancestors()
    if not private:
        return command
    script = ["set -e", "scratch=$(mktemp -d)"]
    for folder, entries in private.items():
        for n, entry in enumerate(sorted(entries)):
            script.append(f"mkdir -p $scratch/{n} && mount --rbind '{folder}/{entry}' $scratch/{n}")
        script.append(f"mount -t tmpfs -o mode=0755 none '{folder}'")
        for n, entry in enumerate(sorted(entries)):
            script.append(f"mkdir '{folder}/{entry}' && mount --move $scratch/{n} '{folder}/{entry}'")
    script.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(script), "sh", *command]


WAYS = {
    "without CAP_SYS_ADMIN": ["capsh", "--drop=cap_sys_admin", "--", "-c", 'exec "$0" "$@"'],
    "as the unprivileged user": ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all"],
}


def grade_without_namespaces(way: str, batch: Path, out: Path, home: Path) -> subprocess.CompletedProcess:
    """`grader grade BATCH -o OUT` run the given way (WAYS), from HOME, on a course machine
    whose interpreter every user can read."""
    command = [*WAYS[way], shutil.which("grader"), "grade", str(batch), "-o", str(out), "--assignment", "rows",
               "--cell-timeout", "10", "--call-timeout", "3"]
    return subprocess.run(as_a_course_machine(command), capture_output=True, text=True, timeout=600,
                          env={**own_run_environment(), "HOME": str(home)}, cwd=str(home))
