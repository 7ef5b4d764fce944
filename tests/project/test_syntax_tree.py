"""Every parse in the grader goes through grader.syntax_tree, which parses one thread at a
time: CPython 3.11's AST constructor shares its recursion counter between threads (gh-106905)."""
from __future__ import annotations

import re
import threading
from pathlib import Path

from grader import syntax_tree
from grader.intake.source_scan import python_source

GRADER = Path(syntax_tree.__file__).parent
DIRECT_PARSE = re.compile(r"\bast\.parse\(|\bcompile\([^)]*PyCF_ONLY_AST")


def test_no_grader_module_parses_without_the_lock():
    offenders = [
        f"{path.relative_to(GRADER.parent)}:{number}"
        for path in sorted(GRADER.rglob("*.py"))
        if path != Path(syntax_tree.__file__) and "kernel_side" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if DIRECT_PARSE.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def test_a_parse_waits_while_another_thread_parses():
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(python_source("x = 1\n")))
    with syntax_tree._PARSING:
        worker.start()
        worker.join(timeout=0.5)
        assert worker.is_alive() and done == []
    worker.join()
    assert done == ["x = 1\n"]


def test_threads_parsing_deep_sources_at_once_all_get_their_tree():
    # Deeply nested expressions are what the shared counter miscounts; each thread must still
    # get the same tree a lone parse gives.
    sources = [f"y = {'(' * depth}{depth}{')' * depth}\n" + "def f(a):\n    return [a for a in a]\n" * 20
               for depth in range(20, 60)]
    expected = [syntax_tree.parse(source).body[0].value.value for source in sources]  # type: ignore[attr-defined]
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def parse_all(offset: int) -> None:
        try:
            for round_ in range(10):
                index = (offset + round_) % len(sources)
                results[index] = syntax_tree.parse(sources[index]).body[0].value.value  # type: ignore[attr-defined]
        except BaseException as error:  # noqa: BLE001 - any failure is what the test reports
            errors.append(error)

    threads = [threading.Thread(target=parse_all, args=(offset,)) for offset in range(0, 40, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(results[index] == expected[index] for index in results)
