"""Running an LMS entrypoint (lms/run_autograder, lms/prairielearn_entrypoint) as its platform
does, on a submission folder of the test's making: its results file is checked against the
platform's schema, and no process of the submission may outlive it."""
import json
import shutil
import subprocess
from pathlib import Path

import jsonschema

from grading_helpers import ROOT, own_run_environment, sandbox_processes

SCHEMAS = {name: json.loads((ROOT / "tests" / "schemas" / f"{name}.json").read_text())
           for name in ("gradescope", "prairielearn")}
ENTRYPOINTS = {"gradescope": ROOT / "lms" / "run_autograder", "prairielearn": ROOT / "lms" / "prairielearn_entrypoint"}
FOLDERS = {"gradescope": "submission", "prairielearn": "student"}
FAST = ["--cell-timeout", "4", "--call-timeout", "2"]


def run_entrypoint(platform, root: Path, files: dict, extra=()):
    (root / FOLDERS[platform]).mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        target = root / FOLDERS[platform] / name
        if isinstance(source, Path):
            shutil.copy(source, target)
        else:
            target.write_text(source)
    process = subprocess.Popen(["bash", str(ENTRYPOINTS[platform]), "--root", str(root), *FAST, *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                               env=own_run_environment())
    out, err = process.communicate(timeout=300)
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    results = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(results, SCHEMAS[platform])
    # The entrypoint execs the grader, so the grader's PID is the one started here.
    assert sandbox_processes(grader_pid=process.pid) == [], "a process of the submission is still running"
    return done, results
