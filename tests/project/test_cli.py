"""The command line as a user meets it: exit codes, one-line errors, files written."""
import json
import subprocess
import sys

import pytest

from grading_helpers import FIXTURES, GRADER, ROOT, SAMPLES, SUBMISSIONS

FAST = ["--cell-timeout", "4", "--call-timeout", "2"]


def run(*args, cwd=None):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("args, words", [
    (["check", "does_not_exist.ipynb"], "no such file"),
    (["check", FIXTURES / "not_json.ipynb"], "not valid JSON"),
    (["check", FIXTURES / "not_a_notebook.ipynb"], "has no cells"),
    (["check", SUBMISSIONS / "worked_solution.ipynb", "--assignment", "nonsense"], "unknown assignment"),
    (["grade", SUBMISSIONS / "worked_solution.ipynb", "-o", "/tmp/grader-test-unused", "--assignment", "nonsense"],
     "built-in ones: additive, backward, batched, blocks, columns, cross, framework, masks, module, qkv, rows"),
    (["check", SUBMISSIONS / "worked_solution.ipynb", "--assignment", "missing.toml"], "no such assignment spec"),
])
@pytest.mark.slow
def test_unusable_input_is_one_line_and_exit_2(args, words):
    done = run(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.slow
def test_full_marks_exit_0_with_json_and_html(tmp_path):
    done = run("check", SUBMISSIONS / "worked_solution.ipynb", "--json", tmp_path / "r.json",
               "--html", tmp_path / "r.html", *FAST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "25 / 25 points" in done.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    for key in ("score", "max_score", "assignment", "seed", "checks", "errors", "policy", "timing"):
        assert key in result
    for check in result["checks"]:
        assert set(check) >= {"name", "function", "status", "points", "max_points", "message", "diagnosis", "hidden"}
        assert check["status"] in ("passed", "failed", "error", "info")
    assert result["seed"] == 20261122
    assert "<html" in (tmp_path / "r.html").read_text()
    # Its softmax skips max-subtraction: informational, shown as info, never as a failure.
    section = done.stdout.split("self_attention: ")[1].split("multi_head_attention: ")[0]
    assert "info  numerical_stability" in section
    assert "FAIL" not in done.stdout and "likely mistake" not in done.stdout.lower()
    report = (tmp_path / "r.html").read_text()
    assert 'class="status failed"' not in report and "Likely mistake" not in report


@pytest.mark.slow
def test_failures_exit_1_and_summary_names_them():
    done = run("check", SUBMISSIONS / "mistake_softmax_axis.ipynb", *FAST)
    assert done.returncode == 1
    section = done.stdout.split("self_attention: ")[1].split("multi_head_attention: ")[0]
    assert "likely mistake: softmax over the wrong axis" in section
    assert "FAIL  weights_distribution" in section and "sums to" in section
    assert "\x1b[" not in done.stdout   # no colour when piped


@pytest.mark.slow
def test_assignment_from_metadata_and_explicit_spec_file(tmp_path):
    spec = tmp_path / "course.toml"
    spec.write_text('name = "course"\n[[functions]]\nname = "apply_softmax"\nconvention = "softmax_rows"\n'
                    'skip = ["dtypes"]\nhidden = ["random_shapes"]\n[functions.points]\nrandom_shapes = 5\n')
    done = run("check", SAMPLES / "two_head_sheet_002.ipynb", "--assignment", spec, "--json",
               tmp_path / "r.json", *FAST)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    names = {c["name"]: c for c in result["checks"]}
    assert result["assignment"] == "course"
    assert "apply_softmax.dtypes" not in names
    assert names["apply_softmax.random_shapes"]["max_points"] == 5
    assert names["apply_softmax.random_shapes"]["hidden"] is True


@pytest.mark.slow
def test_hidden_check_messages_are_withheld_from_students(tmp_path):
    spec = tmp_path / "hidden.toml"
    spec.write_text('[[functions]]\nname = "self_attention"\nconvention = "rows_single"\nhidden = ["random_shapes"]\n')
    student = run("check", SUBMISSIONS / "mistake_no_scaling.ipynb", "--assignment", spec, *FAST)
    staff = run("check", SUBMISSIONS / "mistake_no_scaling.ipynb", "--assignment", spec, "--staff", *FAST)
    def message_after(output, check):
        lines = output.splitlines()
        index = next(i for i, line in enumerate(lines) if check in line)
        # The message wraps onto indented lines: joined, with the wrapping's spaces folded.
        return " ".join(" ".join([lines[index], *(line for line in lines[index + 1:index + 6]
                                                   if line.startswith("     "))]).split())
    assert "Hidden check: its details are not shown" in message_after(student.stdout, "FAIL  random_shapes")
    assert "differs from the reference" in message_after(staff.stdout, "FAIL  random_shapes")


@pytest.mark.slow
@pytest.mark.parametrize("command, abbreviation", [("check", "--out"), ("grade", "--out"), ("lms", "--sand")])
def test_an_abbreviated_option_is_refused_not_guessed(command, abbreviation):
    """"--out" is neither "--output" nor "--output-limit": argparse would have picked one."""
    args = {"check": ["x.ipynb"], "grade": ["x.ipynb", "-o", "out"], "lms": ["gradescope"]}[command]
    done = run(command, *args, abbreviation, "1")
    assert done.returncode == 2 and f"unrecognized arguments: {abbreviation}" in done.stderr


@pytest.mark.slow
def test_assignments_lists_the_five_builtins():
    done = run("assignments")
    assert done.returncode == 0
    for name in ("rows", "columns", "two-head", "sdpa", "qkv"):
        assert any(line.startswith(name + " ") for line in done.stdout.splitlines())


@pytest.mark.slow
def test_the_settings_page_s_table_is_generated_from_the_declaration():
    page = (ROOT / "docs" / "settings.md").read_text()
    table = "\n".join(line for line in page.splitlines() if line.startswith("|"))
    assert table == run("settings").stdout.strip()


@pytest.mark.slow
def test_bad_spec_is_a_one_line_error(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[[functions]]\nname = "f"\nconvention = "no_such_convention"\n')
    done = run("check", SUBMISSIONS / "worked_solution.ipynb", "--assignment", spec)
    assert done.returncode == 2 and "unknown 'no_such_convention'" in done.stderr.replace('"', "'")


FUNCTION = '[[functions]]\nname = "self_attention"\nconvention = "rows_single"\n'


@pytest.mark.parametrize("text, words", [
    ('[limits]\nmemory_limit = "512"\n' + FUNCTION, "limits.memory_limit must be an integer, not '512'"),
    ('[limits]\ncell_timeout = -1\n' + FUNCTION, "limits.cell_timeout must be a positive number"),
    ('[limits]\nsandbox = false\n' + FUNCTION, "unknown key 'sandbox'"),
    ('[tolerence]\nrtol = 1e-3\n' + FUNCTION, "unknown key 'tolerence'"),
    ('[tolerance]\nrtol = "1e-3"\n' + FUNCTION, "tolerance.rtol must be a non-negative number"),
    (FUNCTION + 'point = 3\n', "function 1: self_attention: unknown key 'point'"),
    ('[policy]\nforbiden = ["torch"]\n' + FUNCTION, "unknown key 'forbiden'"),
    # A misspelt value, not only a misspelt key: never silently "after_published".
    ('[lms]\nhidden_visibility = "after_due"\n' + FUNCTION, "lms.hidden_visibility must be one of hidden, "),
])
@pytest.mark.slow
def test_a_spec_is_checked_against_its_schema(tmp_path, text, words):
    """A misspelt key or a value of the wrong type is one line naming it, never ignored and
    never an error in every submission."""
    spec = tmp_path / "course.toml"
    spec.write_text(text)
    done = run("check", SUBMISSIONS / "worked_solution.ipynb", "--assignment", spec)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr


@pytest.mark.parametrize("flag, value", [("--memory-limit", "-5"), ("--cell-timeout", "0"), ("--cell-timeout", "nan"),
                                         ("--workers", "x")])
@pytest.mark.slow
def test_a_limit_on_the_command_line_is_checked_the_same_way(flag, value):
    done = run("check", SUBMISSIONS / "worked_solution.ipynb", flag, value)
    assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_the_command_line_answers_without_importing_the_grading_modules():
    """`grader --help` and argument errors come at once: NumPy, nbclient and IPython are
    imported only by the command that needs them."""
    code = ("import sys, grader.cli; grader.cli.parser().format_help(); "
            "print(sorted(m for m in ('numpy', 'nbclient', 'IPython', 'jinja2') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    # The platforms the command line offers are the ones it runs, from one table.
    from grader.lms.entrypoints import PLATFORMS
    from grader.lms.platforms import PLACES
    assert set(PLACES) == set(PLATFORMS) and all(PLATFORMS[name].place is place for name, place in PLACES.items())


@pytest.mark.slow
@pytest.mark.parametrize("given, threads", [(None, 1), ("2", 2)])
def test_the_grader_s_numpy_runs_one_blas_thread_unless_told_otherwise(given, threads):
    """BLAS threads only cost the grader their start (its matrices are small): NumPy, loaded
    after the command line starts, starts none, unless the machine's owner set their number."""
    import os
    code = ("import os, sys\n"
            "from grader.cli import main\n"
            "main(['check', 'no such notebook.ipynb'])\n"
            "import numpy\n"
            "print(len(os.listdir('/proc/self/task')))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.strip().splitlines()[-1] == str(threads), done.stdout + done.stderr


def test_a_seed_of_any_size_is_accepted_and_a_negative_one_refused():
    """Grading seeds have 128 bits, and `--seed` replays them; NumPy refuses a negative seed."""
    import argparse
    from grader.settings import BY_NAME
    seed = BY_NAME["seed"]
    assert seed.from_text(str(2 ** 200 + 1)) == 2 ** 200 + 1
    with pytest.raises(argparse.ArgumentTypeError, match="--seed must be at least 0, not -1"):
        seed.from_text("-1")


@pytest.mark.slow
def test_a_reader_that_goes_away_is_no_error():
    """`grader settings | head -1`: the pipe closes before the grader has written; it stops as
    Unix tools do (the shell's 141), with nothing on stderr."""
    process = subprocess.Popen([*GRADER, "settings"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()   # before the grader has imported anything, let alone written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141 and err == ""


@pytest.mark.slow
def test_a_mistake_is_explained_once_even_when_a_pair_with_it_is_named_too():
    """scores not scaled, then (on the large-score check) that mistake with an overflow: the
    pair's line says only what is new."""
    said = " ".join(run("check", SUBMISSIONS / "mistake_no_scaling.ipynb").stdout.split())
    assert said.count("are never divided by sqrt(d_k)") == 1, said
    assert "scores not scaled and softmax without max-subtraction overflows: exp() of scores" in said


@pytest.mark.slow
def test_the_command_s_exit_runs_what_the_command_registered_and_keeps_its_code_and_output(tmp_path):
    """cli.run ends the process without the interpreter's teardown: an exit function registered
    while the command ran (as a library's is) still runs first, what was printed is flushed,
    and the exit code is the command's."""
    ran = tmp_path / "ran"
    code = (
        "import atexit, sys\n"
        "from pathlib import Path\n"
        "from grader import cli\n"
        "command = cli.main\n"
        "def main(argv=None):\n"
        f"    atexit.register(Path({str(ran)!r}).write_text, 'yes')\n"
        "    print('the summary', end='')\n"
        "    return command(argv)\n"
        "cli.main = main\n"
        "sys.argv = ['grader', 'check', 'no-such-file.ipynb']\n"
        "cli.run()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout) == (2, "the summary")
    assert "no such file" in done.stderr
    assert ran.read_text() == "yes"
