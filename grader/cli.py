"""Command line: `grader check`, `grader grade`, `grader lms`, `grader spec`, `grader audit`,
`grader assignments`, `grader settings`."""
from __future__ import annotations

import argparse
import atexit
import os
import sys
import warnings
from typing import Any
from pathlib import Path

from grader import __version__
from grader.errors import MachineFault, SpecError, SubmissionError
from grader.report.printable import printable
from grader.report.view import shown
from grader.lms.platforms import PLACES
from grader.settings import BY_NAME, add_arguments, explicit_values, from_namespace, markdown_table, settings_from

# The grading modules import NumPy, nbclient and IPython: each command imports what it needs
# when it runs, so that `grader --help` and a wrong argument answer at once.

EXIT_FULL_MARKS, EXIT_FAILURES, EXIT_UNUSABLE, EXIT_GRADER_FAULT = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13   # what a shell reports for a tool its reader left (SIGPIPE)


def start_fork_server(ns) -> None:
    """For a command that grades one notebook: start the fork server now, if there is none,
    so that its imports overlap with the grader's own instead of following them."""
    from grader.kernel.forked import launch, worth_starting
    if worth_starting(from_namespace(ns)):
        launch()


def check(ns) -> int:
    start_fork_server(ns)
    from grader.atomic_write import write_json
    from grader.grade import grade_path
    from grader.intake.notebook import load_submission
    from grader.course.spec import student_assignment
    from grader.report.terminal import summary, use_colour
    from grader.report.view import result_view
    settings = from_namespace(ns)
    if len(ns.paths) > 1 and (settings.json or settings.html or settings.watch):
        raise SubmissionError("--json, --html and --watch take one submission at a time")
    if settings.watch:
        return watch_one(ns)
    code = EXIT_FULL_MARKS
    for path in ns.paths:
        assignment = student_assignment(load_submission(path), settings.assignment)
        result = grade_path(path, assignment, from_namespace(ns, assignment.limits))
        print(summary(result, staff=settings.staff, colour=use_colour()), flush=True)
        if settings.json:
            # What the summary shows, as JSON: the student view unless --staff (see grader/report/view.py).
            write_json(settings.json, result_view(result, settings.staff).to_json())
        if settings.html:
            from grader.report.html import write_html   # jinja2: a twentieth of a check, for --html alone
            write_html(result, settings.html, staff=settings.staff)
        if not result.full_marks:
            code = EXIT_FAILURES
    return code


def watch_one(ns) -> int:
    """`check --watch`: each saved version graded and reported, only what changed after the
    first; a version that cannot be read is said in one line and the watch goes on."""
    from grader.grade import grade_path
    from grader.intake.notebook import load_submission
    from grader.course.spec import student_assignment
    from grader.report.terminal import summary, use_colour
    from grader.report.view import result_view
    from grader.student.regrade_on_save import watch
    settings = from_namespace(ns)
    path = ns.paths[0]
    if not path.is_file():
        raise SubmissionError(f"no such file: {path}")

    def grade_once():
        try:
            assignment = student_assignment(load_submission(path), settings.assignment)
            result = grade_path(path, assignment, from_namespace(ns, assignment.limits))
        except (SubmissionError, SpecError) as exc:
            print(f"grader: {printable(exc, one_line=True)}", file=sys.stderr, flush=True)
            return None
        return result

    def full(result):
        return summary(result, staff=settings.staff, colour=use_colour())

    try:
        watch(path, grade_once, full, lambda result: result_view(result, settings.staff),
              lambda text: print(text, flush=True))
    except KeyboardInterrupt:
        pass
    return EXIT_FULL_MARKS


def grade(ns) -> int:
    from grader.batch.run import grade_all
    settings = from_namespace(ns)
    if settings.workers is not None and settings.workers < 1:
        raise SubmissionError("--workers must be at least 1")
    report = grade_all(ns.paths, ns.output, explicit_values(ns), workers=settings.workers, force=settings.force,
                       scheduler=settings.scheduler)
    files = ", ".join(["grades.csv", "summary.html", *report.exports])
    print(f"{report.graded} graded, {report.skipped} unchanged and skipped, into {printable(ns.output)} "
          f"({files}, one folder per submission)")
    return 0


def lms(ns) -> int:
    start_fork_server(ns)
    from grader.lms.entrypoints import run as run_lms
    from grader.judging.seeds import fresh_seed
    root = ns.root or Path(PLACES[ns.platform].default_root)
    # A seed drawn for this run unless the staff give one: students never know the inputs.
    seed = {} if ns.seed is not None else {"seed": fresh_seed()}
    data = run_lms(ns.platform, root, ns.assignment,
                   lambda assignment: settings_from({**explicit_values(ns), **seed}, assignment.limits))
    print(f"wrote {printable(PLACES[ns.platform].results_path(root))}")
    return 0 if data.get("tests") is not None else 3


def package(ns) -> int:
    from grader.lms.gradescope_zip import gradescope_zip
    members = gradescope_zip(ns.output, ns.assignment)
    print(f"wrote {ns.output} ({', '.join(members)}): upload it as the assignment's autograder on Gradescope")
    return 0


def spec_infer(ns) -> int:
    from grader.atomic_write import write_atomically
    from grader.settings import settings_from
    from grader.authoring.spec_tools.infer import infer
    from grader.authoring.spec_tools.words import describe
    if ns.output.exists() and ns.output.resolve() == ns.solution.resolve():
        raise SubmissionError(f"{ns.output} is the solution itself: name another file for the spec")
    if ns.output.exists() and not ns.force:
        raise SubmissionError(f"{ns.output} exists: give --force to overwrite it")
    start_fork_server(ns)
    inferred = infer(ns.solution, ns.output, settings_from({}), ns.function, ns.support, ns.name, ns.title)
    write_atomically(ns.output, inferred.text)
    score, max_score = inferred.score
    print(f"wrote {printable(ns.output)}: {len(inferred.functions)} function(s); graded with it, "
          f"{printable(ns.solution.name)} earns {shown(score)} / {shown(max_score)}")
    for name, fit in inferred.functions.items():
        print(f"  {printable(name)}: {printable(describe(fit.table))}")
        for other in inferred.undecided.get(name, []):
            print(f"    undecided: also earns every point with {printable(other)}")
    for name, why in inferred.left_out.items():
        print(f"  left out {printable(name)}: {printable(why, one_line=True)}")
    for module in inferred.allowed:
        print(f"  not forbidden: {module} (the solution itself imports it)")
    for error in inferred.cell_errors:
        print(f"  note: {printable(error, one_line=True)}; the spec fits what ran")
    print(f"  {printable(inferred.naming, one_line=True)}")
    if len(inferred.functions) > 1 and not ns.function:
        print("  every function above is graded (a helper too, where the notebook's Markdown names it as a task or "
              "the notebook has no Markdown); to grade only some, "
              "give --function NAME for each")
    return EXIT_FULL_MARKS


def spec_check(ns) -> int:
    from grader.authoring.spec_tools.check import check_spec
    from grader.report.terminal import summary, use_colour
    if ns.solution is not None:
        start_fork_server(ns)
    checked = check_spec(ns.spec, ns.solution)
    a = checked.assignment
    print(f"{printable(ns.spec)}: a valid spec, {len(a.functions)} function(s): "
          f"{', '.join(printable(f.name) for f in a.functions)}")
    result = checked.result
    if result is None:
        return EXIT_FULL_MARKS
    if result.full_marks:
        print(f"{printable(ns.solution.name)} earns every point: {shown(result.score)} / {shown(result.max_score)}")
        return EXIT_FULL_MARKS
    print(summary(result, staff=True, colour=use_colour()))
    print(f"{printable(ns.solution.name)} does not earn every point: {shown(result.score)} / {shown(result.max_score)}")
    return EXIT_FAILURES


def audit(ns) -> int:
    """Exit 0 when the spec is sound, 1 when the reference loses points, a mistake that computes
    something else where points are at stake earns every point, or a non-answer scores."""
    from grader.authoring.audit import audit as audit_spec
    from grader.authoring.audit_report import text, write_html
    from grader.course.spec import load_assignment
    found = audit_spec(load_assignment(ns.spec), ns.seed, pairs=ns.pairs)
    print(text(found))
    if ns.html:
        write_html(found, ns.html)
        print(f"wrote {printable(ns.html)}")
    return EXIT_FULL_MARKS if found.sound else EXIT_FAILURES


def list_assignments(ns) -> int:
    from grader.calling.classes import signature
    from grader.course.spec import builtin_names, load_assignment
    for name in builtin_names():
        a = load_assignment(name)
        print(f"{name:<10} {a.title}")
        for fn in a.functions:
            print(f"{'':<10}   {signature(fn.symbol, fn.convention, fn.params)}  "
                  f"[{fn.convention.name}: {fn.convention.description}]")
    return 0


def show_settings(ns) -> int:
    print(markdown_table())
    return 0


# No abbreviated options: "--out" would silently mean "--output-limit".
EXACT: dict[str, Any] = {"allow_abbrev": False}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grader", description="Grade self-attention notebooks.", **EXACT)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="grade notebooks (or .py files) and print a summary", **EXACT)
    c.add_argument("paths", nargs="+", type=Path, metavar="SUBMISSION")
    add_arguments(c, "check")
    c.set_defaults(run=check)
    g = sub.add_parser("grade", help="grade many submissions into OUTDIR: grades.csv, result.json and report.html each",
                       **EXACT)
    g.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="notebooks, .py files or folders")
    g.add_argument("-o", "--output", type=Path, required=True, metavar="OUTDIR")
    add_arguments(g, "grade")
    g.set_defaults(run=grade)
    lms_parser = sub.add_parser("lms", help="grade inside an LMS container and write its results file, or package "
                                "the grader for an LMS", **EXACT)
    platforms = lms_parser.add_subparsers(dest="platform", required=True, metavar="{gradescope,prairielearn,package}")
    for name in PLACES:
        platform = platforms.add_parser(name, help=f"grade the submission in {name}'s folders", **EXACT)
        add_arguments(platform, "lms")
        platform.set_defaults(run=lms)
    packaging = platforms.add_parser("package", help="build the autograder a platform installs (Gradescope's zip)",
                                     **EXACT)
    packaging.add_argument("target", choices=("gradescope",), help="the platform whose autograder to build")
    packaging.add_argument("--assignment", metavar="STR", help=BY_NAME["assignment"].help)
    packaging.add_argument("-o", "--output", type=Path, required=True, metavar="ZIP", help="the zip to write")
    packaging.set_defaults(run=package)
    spec = sub.add_parser("spec", help="write and check a course's assignment spec", **EXACT)
    specs = spec.add_subparsers(dest="spec_command", required=True)
    infer = specs.add_parser("infer", help="propose a spec from the staff's solution notebook, graded on it at "
                             "full marks", **EXACT)
    infer.add_argument("solution", type=Path, metavar="SOLUTION", help="the staff's solution (.ipynb or .py)")
    infer.add_argument("-o", "--output", type=Path, required=True, metavar="SPEC", help="the spec to write (TOML)")
    infer.add_argument("--force", action="store_true", help="overwrite SPEC if it exists")
    infer.add_argument("--function", action="append", metavar="NAME",
                       help="propose only this function (repeat for several; default: every function that fits)")
    infer.add_argument("--support", type=Path, metavar="DIR",
                       help="the course's own modules the solution imports (needs course support modules in specs)")
    infer.add_argument("--name", metavar="NAME", help="the spec's name (default: from the notebook's first heading)")
    infer.add_argument("--title", metavar="TEXT",
                       help="the spec's title, shown to every student (default: the notebook's first heading)")
    infer.set_defaults(run=spec_infer)
    checking = specs.add_parser("check", help="validate a spec; with a solution, grade it and fail unless it earns "
                                "every point", **EXACT)
    checking.add_argument("spec", metavar="SPEC", help="the spec (a TOML file, or a built-in assignment's name)")
    checking.add_argument("solution", type=Path, nargs="?", metavar="SOLUTION", help="the staff's solution")
    checking.set_defaults(run=spec_check)
    auditing = sub.add_parser("audit", help="course staff: what the spec's checks give each known mistake, "
                              "which checks catch it, which catch none, which mistakes earn full marks", **EXACT)
    auditing.add_argument("spec", metavar="SPEC", help="the spec (a TOML file, or a built-in assignment's name)")
    auditing.add_argument("--pairs", action="store_true", help="also every pair of mistakes that change different "
                          "steps (slower)")
    auditing.add_argument("--html", type=Path, metavar="PATH", help="also write the audit as an HTML page")
    auditing.add_argument("--seed", type=BY_NAME["seed"].from_text, default=BY_NAME["seed"].default, metavar="INT",
                          help=f"seed of the randomized cases (default: {BY_NAME['seed'].default}, the public one)")
    auditing.set_defaults(run=audit)
    sub.add_parser("assignments", help="list the built-in assignments").set_defaults(run=list_assignments)
    sub.add_parser("settings", help="print the settings table (markdown)").set_defaults(run=show_settings)
    return p


# The grader's own arithmetic is on small matrices, where BLAS threads only cost their start
# (about 0.05 s of CPU as NumPy loads, a sixteenth of a student's check): one thread,
# unless the machine's owner said otherwise. The kernels get theirs from the sandbox.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main(argv=None) -> int:
    for name, value in ONE_BLAS_THREAD.items():
        os.environ.setdefault(name, value)   # before anything imports NumPy
    ns = parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            # A library's warnings are for its developers: a student or a TA reads the grader's
            # one-line error or its summary, never a library's advice about its own future.
            warnings.simplefilter("ignore")
            return ns.run(ns)
    except (SubmissionError, SpecError) as exc:
        print(f"grader: error: {printable(exc, one_line=True)}", file=sys.stderr)
        return EXIT_UNUSABLE
    except MachineFault as exc:
        print(f"grader: cannot grade on this machine: {printable(exc, one_line=True)}", file=sys.stderr)
        return EXIT_GRADER_FAULT
    except KeyboardInterrupt:
        print("grader: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`grader settings | head -1`): as for any Unix
        # tool, nothing to say. What is still buffered goes nowhere, not into a second error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        why = f"{exc.strerror or exc}: {exc.filename or ''}"
        print(f"grader: error: {printable(why, one_line=True)}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as exc:  # noqa: BLE001 - users get one line, never the grader's traceback
        why = f"{type(exc).__name__}: {exc}"
        print(f"grader: internal error: {printable(why, one_line=True)}", file=sys.stderr)
        return EXIT_GRADER_FAULT


def run() -> None:
    """The `grader` command (the entry point, and `python -m grader.cli`): main(), then an exit
    that skips the interpreter's teardown, which frees every object of NumPy, nbclient and the
    grader one by one for a process that is ending anyway: 60 to 130 ms of a `grader check`'s
    0.75 to 0.99 s, in paired runs. Everything else an exit does still happens, in its order:
    threads that are not daemons are waited for, and every exit function registered while the
    command ran (a pool's, multiprocessing's, weakref's finalizers, logging's) runs before this
    one, which was registered first (they run last registered first; importing this module
    registers none). `main(argv)` called from Python exits nothing."""
    code = [EXIT_GRADER_FAULT]
    atexit.register(_exit_now, code)
    try:
        code[0] = main()
    except SystemExit as exc:   # argparse's --help, --version and usage errors
        code[0] = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        raise
    sys.exit(code[0])


def _exit_now(code: list[int]) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a reader that went away, a stream already closed
            pass
    os._exit(code[0])


if __name__ == "__main__":
    run()
