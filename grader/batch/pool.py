"""Where a batch's submissions are graded: local worker processes or a Dask cluster, a few
tasks ahead of the workers, and a submission whose worker was lost graded again on its own.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from grader.batch import dask_cluster as cluster
from grader.batch.tasks import grade_task, reason
from grader.errors import MachineFault
from grader.intake.notebook import SubmissionError, one_line, read_submission
from grader.sandbox.isolation import Sandbox, run_id
from grader.settings import Settings


def default_workers() -> int:
    """The local workers when --workers is not given: one more than the cores this process may
    run on. A worker's grading alternates between its own process and its kernel's, and waits
    while a notebook sleeps or a kernel starts, stops or dies; with one worker a core, those
    waits leave the core idle (a batch kept two cores 85 % busy), and one more worker fills
    them: measured on two cores, a batch took 10 % less time with three workers than with two,
    and more time with four."""
    try:
        cores = len(os.sched_getaffinity(0))   # a container's or a taskset's share of the machine
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores + 1


def local_pool(workers: int, context=None):
    """Worker processes that die with the grader, so a killed batch leaves nothing running,
    and carry its run id, so their submissions' processes and folders are known as this run's."""
    run_id()
    return ProcessPoolExecutor(max_workers=workers, initializer=start_worker, mp_context=context)


def start_worker() -> None:
    """A local worker dies with the grader and, like `grader` itself (grader/cli.py), keeps
    libraries' warnings off the TA's terminal, which it shares."""
    Sandbox.die_with_parent()
    warnings.simplefilter("ignore")


def grade_alone(*task) -> dict:
    """grade_task in a worker process of its own, so that losing this worker is this
    submission's own doing."""
    # Started from a thread: a plain fork would copy locks other threads hold (an import in
    # progress in the main thread hung a worker forever), so the worker comes from a clean
    # fork server instead. It still dies with the grader: the server exits when the grader does.
    with local_pool(1, multiprocessing.get_context("forkserver")) as pool:
        return pool.submit(grade_task, *task).result()


def _dask_wait(futures):
    from distributed import wait as dask_wait
    return dask_wait(futures, return_when="FIRST_COMPLETED")


def dask_pool(scheduler: str, settings: Settings):
    """An executor on an existing Dask cluster (distributed's Client is one), over TLS with the
    cluster's certificates where they are given (grader/batch/dask_cluster.py)."""
    try:
        from distributed import Client
    except ImportError:
        raise SubmissionError("--scheduler needs Dask: pip install '.[dask]' from the grader's folder") from None
    try:
        return Client(scheduler, timeout=settings.connect_timeout, security=cluster.security(settings))
    except (OSError, ValueError, TypeError) as exc:   # unreachable, refused, or a certificate that does not fit
        raise SubmissionError(f"cannot reach the Dask scheduler at {scheduler}: {one_line(exc)}") from None


def graded(todo: list, spec, explicit_for, workers: int | None, scheduler: str | None, settings):
    """(submission, key, result data) for each (submission, key) in todo, as they finish; for a
    submission that could not be graded, the data is the one line saying why (a str).

    A worker lost from the local pool (killed, out of memory) breaks the whole pool, and the
    pool cannot tell whose doing it was: every submission it had not finished is graded again
    in a worker of its own, and only a submission that loses that worker too gets the loss as
    its result."""
    width = max(1, min(workers or default_workers(), len(todo)))
    pool = dask_pool(scheduler, settings) if scheduler else local_pool(width)
    with pool, ThreadPoolExecutor(width) as alone:
        pending = {}    # future -> (submission, key, the executor it runs on)
        finished = []   # (submission, key, data) ready to hand out

        def submit(s, key, executor, function):
            try:
                content = read_submission(s.path, s.found_as)
                pending[executor.submit(function, s.name, content, spec, explicit_for(s, content))] = \
                    (s, key, executor)
            except BrokenProcessPool:
                submit(s, key, alone, grade_alone)
            except Exception as exc:  # noqa: BLE001 - e.g. the file vanished since it was found
                finished.append((s, key, f"grading failed: {reason(exc)}"))

        waiting = iter(todo)

        def refill():
            # A few tasks ahead of the workers, not the whole batch: each task holds its
            # notebook's bytes until a worker takes it, so the grader's memory stays flat in
            # the size of the batch.
            for s, key in itertools.islice(waiting, max(0, 2 * width - len(pending))):
                submit(s, key, pool, grade_task)

        refill()
        while pending or finished:
            if pending:
                done, _ = _dask_wait(list(pending)) if scheduler else wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    s, key, executor = pending.pop(future)
                    try:
                        finished.append((s, key, future.result()))
                    except MachineFault:
                        # This machine cannot grade: the batch stops, and what is not graded yet
                        # is not started, so nothing is stored for it and the next run grades it.
                        yield from finished
                        for queued in pending:
                            queued.cancel()
                        raise
                    except BrokenProcessPool:
                        if executor is pool:
                            submit(s, key, alone, grade_alone)
                        else:
                            finished.append((s, key, "grading failed: its worker process was lost twice "
                                                           "(killed, or out of memory)"))
                    except Exception as exc:  # noqa: BLE001 - a failed task still yields a row
                        finished.append((s, key, f"grading failed: {reason(exc)}"))
            yield from finished
            finished.clear()
            refill()
