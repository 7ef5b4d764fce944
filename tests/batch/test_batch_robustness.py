"""One submission can never abort or corrupt a batch: hostile inputs become error rows, output
folders cannot collide or escape OUTDIR, a lost worker costs no innocent submission its
grade, and the resume key covers every setting that shapes a result."""
import csv
import io
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from grading_helpers import OWN_PEAK_KIB, SUBMISSIONS, run_grader, sandbox_processes
from grader.batch.run import UNPACKED
from grader.batch.resume import batch_key
from grader.intake.discover import collect
from grader.intake.notebook import notebook_from_python
from grader.settings import SETTINGS, settings_from
from grader.course.spec import load_assignment

pytestmark = pytest.mark.slow

FAST = ["--cell-timeout", "4", "--call-timeout", "2", "--workers", "2"]
GOOD = (SUBMISSIONS / "worked_solution.ipynb").read_bytes()
BATCH_FILES = {"grades.csv", "summary.html", UNPACKED}


def tiny_notebook(metadata=None) -> str:
    """A notebook that grades in a moment (it defines none of the functions)."""
    nb = notebook_from_python("x = 1\n")
    nb.metadata.update(metadata or {})
    return nbformat.writes(nb)


def rows_of(out: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / "grades.csv").read_text())))


def results_of(out: Path) -> dict:
    """submission name -> stored result, from every result folder directly inside OUTDIR."""
    return {json.loads(p.read_text())["submission"]: json.loads(p.read_text()) for p in out.glob("*/result.json")}


def test_hostile_inputs_become_error_rows_and_the_batch_completes(tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    binary_spec = tmp_path / "spec.bin"
    binary_spec.write_bytes(bytes(range(256)) * 4)
    (inbox / "good.ipynb").write_bytes(GOOD)
    (inbox / "binary_spec.ipynb").write_text(tiny_notebook({"grader": {"assignment": str(binary_spec)}}))
    (inbox / "deep.ipynb").write_text("[" * 100_000)
    (inbox / "deep_inside.ipynb").write_text(
        '{"cells": [], "metadata": {"x": ' + "[" * 100_000 + "]" * 100_000 + '}, "nbformat": 4, "nbformat_minor": 5}')
    (inbox / "long_expression.py").write_text("x = " + "1 + " * 100_000 + "1\n")  # defeats ast.parse
    (inbox / "corrupt.zip").write_bytes(b"PK\x03\x04 not really a zip archive")
    with zipfile.ZipFile(inbox / "crc.zip", "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("intact.ipynb", GOOD)
        zf.writestr("damaged.py", "x = 1  # damaged marker\n")
    data = (inbox / "crc.zip").read_bytes()
    (inbox / "crc.zip").write_bytes(data.replace(b"damaged marker", b"DAMAGED marker"))
    for name in ["grades.csv.ipynb", "summary.html.ipynb", "...ipynb", "..ipynb"]:
        (inbox / name).write_text(tiny_notebook())

    code, stdout, stderr, pid = run_grader(["grade", inbox, "-o", out, *FAST])

    assert code == 0, stderr
    assert (out / "grades.csv").is_file() and (out / "summary.html").is_file()
    rows = {r["submission"]: r for r in rows_of(out)}
    results = results_of(out)
    # Every file has its own folder directly inside OUTDIR; crc.zip's two are one student's, one row.
    assert len(results) == 12 and len(rows) == 11 and set(rows) <= set(results)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inbox", "out", "spec.bin"]
    assert rows["good.ipynb"]["score"] == "25" and results["intact.ipynb"]["score"] == 25
    for name in ["grades.csv.ipynb", "summary.html.ipynb", "...ipynb", "..ipynb"]:
        assert rows[name]["status"] == "graded", name
    # A notebook never loads a spec in `grade`: graded against the staff's assignment, request kept.
    assert rows["binary_spec.ipynb"]["status"] == "graded" and rows["binary_spec.ipynb"]["assignment"] == "rows"
    assert results["binary_spec.ipynb"]["metadata_assignment"] == str(binary_spec)
    reasons = {"deep.ipynb": "nested too deeply",
               "deep_inside.ipynb": "nested too deeply", "long_expression.py": "Recursion",
               "corrupt.zip": "not a readable zip archive", "damaged.py": "Bad CRC"}
    for name, why in reasons.items():
        assert results[name]["status"] == "error", name
        evalue = results[name]["errors"][0]["evalue"]
        assert why in evalue and "\n" not in evalue, (name, evalue)
    assert sandbox_processes(grader_pid=pid) == []


@pytest.mark.parametrize("damage", [
    lambda r: r.update(checks="lost"),                       # not a list
    lambda r: r["checks"][0].pop("points"),                  # a check without its points
    lambda r: r["errors"].append({"cell": "one", "kind": "error"}),   # an error of another form
    lambda r: r.update(score="25"),                          # a number written as text
])
def test_a_stored_result_of_another_form_is_graded_again(tmp_path, damage):
    """A result.json that is up to date by its key but damaged, or written by another version
    of the grader, is graded again as a stale one is; it never stops the batch."""
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    (inbox / "hw.ipynb").write_text(tiny_notebook())
    code, _, stderr, _ = run_grader(["grade", inbox, "-o", out, *FAST])
    assert code == 0, stderr
    (stored,) = out.glob("*/result.json")
    good = json.loads(stored.read_text())
    damaged = json.loads(stored.read_text())
    damage(damaged)
    stored.write_text(json.dumps(damaged))
    code, stdout, stderr, _ = run_grader(["grade", inbox, "-o", out, *FAST])
    assert code == 0, stderr
    assert stdout.startswith("1 graded, 0 unchanged"), stdout
    again = json.loads(stored.read_text())
    assert {k: again[k] for k in ("status", "score", "checks")} == {k: good[k] for k in ("status", "score", "checks")}
    assert rows_of(out)[0]["score"] == "0" and rows_of(out)[0]["status"] == "graded"


def test_output_folders_are_unique_stable_and_inside_outdir(tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    (inbox / "Ann Lee_111_assignsubmission_file_").mkdir(parents=True)
    names = ["...ipynb", "..ipynb", ".submissions.ipynb", "grades.csv.ipynb", "summary.html.ipynb", "a b.ipynb",
             "a_b.ipynb", "a\\b.ipynb", "x" * 240 + ".ipynb", "Zoë ✓ 名前.ipynb", "new\nline.ipynb",
             os.fsdecode(b"bad\xff.ipynb"), "111-2.ipynb", "doejane_111_1_hw.ipynb", "doejane_111_2_hw.ipynb",
             "Ann Lee_111_assignsubmission_file_/hw.ipynb"]
    for name in names:
        (inbox / name).write_text(tiny_notebook())

    submissions, duplicates = collect([inbox, inbox / "a b.ipynb"], out / UNPACKED)

    assert len(submissions) == len(names)  # a file named twice is one submission
    folders = [s.folder for s in submissions]
    assert len(set(folders)) == len(folders)
    for folder in folders:
        assert folder not in BATCH_FILES and not folder.startswith(".") and "/" not in folder and "\\" not in folder
        assert len(os.fsencode(folder)) <= 255 and (out / folder).resolve().parent == out.resolve()
        (out / folder).mkdir(parents=True)
    by_name = {s.name: s for s in submissions}
    assert [s.student for s in submissions].count("111") == 3
    assert by_name["111-2.ipynb"].folder not in {s.folder for s in submissions if s.student == "111"}
    assert dict(duplicates)["111"] and all(s.name.encode("utf-8") for s in submissions)
    assert [s.folder for s in collect([inbox], out / UNPACKED)[0]] == folders  # a rerun finds its results


def test_same_named_archives_of_two_moodle_students_stay_apart_and_settings_changes_regrade(tmp_path):
    export, out = tmp_path / "moodle", tmp_path / "out"
    for student, notebook in [("Ann Lee_111", "worked_solution.ipynb"), ("Bo Chen_222", "mistake_no_scaling.ipynb")]:
        folder = export / f"{student}_assignsubmission_file_"
        folder.mkdir(parents=True)
        with zipfile.ZipFile(folder / "hw.zip", "w") as zf:
            zf.writestr("attention.ipynb", (SUBMISSIONS / notebook).read_bytes())

    code, stdout, stderr, _ = run_grader(["grade", export, "-o", out, *FAST])

    assert code == 0, stderr
    scores = {r["student"]: r["score"] for r in rows_of(out)}
    assert scores["111"] == "25" and float(scores["222"]) < 25
    assert "duplicate" not in stderr
    code, stdout, _, _ = run_grader(["grade", export, "-o", out, *FAST])
    assert code == 0 and "0 graded, 2 unchanged" in stdout
    code, stdout, _, _ = run_grader(["grade", export, "-o", out, *FAST[:2], "--call-timeout", "3", *FAST[4:]])
    assert code == 0 and "2 graded, 0 unchanged" in stdout


def test_a_lost_worker_costs_no_other_submission_its_grade(tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    # Without the sandbox the kernel is the worker's child: killing it breaks the whole pool.
    (inbox / "0_kills_its_worker.py").write_text("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                                 "os._exit(0)\n")
    (inbox / "1_good.ipynb").write_bytes(GOOD)
    (inbox / "2_good.ipynb").write_bytes(GOOD)
    pid = None
    try:
        code, stdout, stderr, pid = run_grader(["grade", inbox, "-o", out, "--no-sandbox", *FAST])
        assert code == 0, stderr
        rows = {r["submission"]: r for r in rows_of(out)}
        assert rows["1_good.ipynb"]["score"] == "25" and rows["2_good.ipynb"]["score"] == "25"
        assert rows["0_kills_its_worker.py"]["status"] == "error"
        assert "worker process was lost" in results_of(out)["0_kills_its_worker.py"]["errors"][0]["evalue"]

        code, stdout, stderr, pid = run_grader(["grade", inbox, "-o", out, "--no-sandbox", *FAST])
        assert code == 0 and "1 graded, 2 unchanged" in stdout  # the error is graded again, not skipped
    finally:
        for leftover in sandbox_processes(grader_pid=pid):
            os.kill(leftover, 9)


def test_resume_key_covers_every_setting_that_shapes_a_result(tmp_path, monkeypatch):
    import grader.batch.resume
    rows = load_assignment("rows")
    base = settings_from({})
    key = batch_key(GOOD, rows, base)
    changed = {"assignment": "columns", "seed": 1, "cell_timeout": 1.0, "interrupt_grace": 1.0, "notebook_timeout": 1.0,
               "call_timeout": 1.0, "probe_timeout": 1.0, "startup_timeout": 1.0,
               "output_limit": 1, "cell_output_limit": 1, "sandbox": False, "memory_limit": 1, "max_processes": 1,
               "cpu_limit": 1.0, "cpu_cores": 0.5, "folder_limit": 1, "staff": True}
    assert set(changed) == {s.name for s in SETTINGS if s.shapes_result}
    for name, value in changed.items():
        assert batch_key(GOOD, rows, settings_from({name: value})) != key, name
    for name, value in {"workers": 7, "force": True, "scheduler": "tcp://elsewhere:1", "connect_timeout": 5.0}.items():
        assert batch_key(GOOD, rows, settings_from({name: value})) == key, name
    assert batch_key(GOOD + b" ", rows, base) != key
    assert batch_key(GOOD, replace(rows, raw={**rows.raw, "tolerance": {"rtol": 0.1}}), base) != key
    monkeypatch.setattr(grader.batch.resume, "__version__", "99.0")
    assert batch_key(GOOD, rows, base) != key


@pytest.mark.parametrize("assignment", ["missing.toml", "no-such-builtin"])
def test_an_unusable_assignment_stops_the_batch_before_grading(tmp_path, assignment):
    (tmp_path / "hw.ipynb").write_text(tiny_notebook())
    code, _, stderr, _ = run_grader(["grade", tmp_path / "hw.ipynb", "-o", tmp_path / "out",
                                     "--assignment", assignment])
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    """A 500 MB submission (sparse: it takes no disk) becomes an error row without the grader
    reading it: the main process stays small."""
    import subprocess
    import sys
    import textwrap
    big = tmp_path / "big.ipynb"
    with open(big, "wb") as f:
        f.truncate(500 * 2**20)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from grader.batch.resume import planned_key
        from grader.intake.discover import collect
        from grader.intake.notebook import SubmissionError
        from grader.course.spec import load_assignment
        (submission,), _ = collect([Path({str(big)!r})], Path({str(tmp_path / "unpacked")!r}))
        try:
            planned_key(submission, load_assignment('rows'), lambda s, content: {{}})
        except SubmissionError as exc:
            print(exc)
        print({OWN_PEAK_KIB})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    message, peak_kib = done.stdout.strip().splitlines()
    assert "larger than 50 MiB" in message
    assert int(peak_kib) < 200 * 1024


def test_megabytes_of_code_are_refused_in_one_line(tmp_path):
    from grader.intake.notebook import SubmissionError, load_submission
    path = tmp_path / "generated.py"
    path.write_text("\n".join(f"v{i} = {i}" for i in range(150_000)))
    with pytest.raises(SubmissionError, match="characters of code; the limit is 1,000,000"):
        load_submission(path)


def test_the_default_workers_are_one_more_than_the_cores_this_process_may_use():
    """A taskset's or a container's share of the machine, not its whole count of cores: run on
    one core, a batch grades two submissions at once."""
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from grader.batch.pool import default_workers; print(default_workers())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "2"
