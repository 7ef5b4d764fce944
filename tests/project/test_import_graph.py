"""The grader's modules import one another without a circle: each stage builds on the ones
below it (docs/architecture.md). Every import counts, at the top of a module or inside a
function, since a function's import is the same dependency, only later."""
import ast
from pathlib import Path

from grading_helpers import ROOT

PACKAGE = ROOT / "grader"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    # grader/reference and grader/templates are links to the top-level folders: not the grader's code.
    return {module_name(p): p for p in PACKAGE.rglob("*.py")
            if not any(part in ("reference", "templates") for part in p.relative_to(PACKAGE).parts)}


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The grader's modules that the module `name` at `path` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from grader.batch import stored` imports the module grader.batch.stored
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:   # grader.x.y where y is a name in grader.x
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("grader"):
                found.add(target)
    return found


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports in the graph, as the modules on it, or [] when there is none."""
    state: dict[str, str] = {}   # module -> "open" while on the path, "done" after
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = "done"
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def import_graph() -> dict[str, set[str]]:
    known = modules()
    # A package's own __init__ importing its modules is how a package hands names on, not a
    # dependency of the stage: the graph is between modules with code.
    return {name: {t for t in imported(path, name, known) if not name.startswith(t + ".")}
            for name, path in known.items()}


def test_the_graders_modules_import_one_another_without_a_circle():
    assert circle(import_graph()) == []


def test_a_circle_is_found_and_named():
    graph = {"grader.a": {"grader.b"}, "grader.b": {"grader.c"}, "grader.c": {"grader.a"}, "grader.d": {"grader.a"}}
    assert circle(graph) == ["grader.a", "grader.b", "grader.c", "grader.a"]
    assert circle({"grader.a": {"grader.b"}, "grader.b": set()}) == []


def test_the_graph_reads_every_kind_of_import():
    """The graph's reading is what the first test rests on: a module the grader is known to
    import in each form is among the edges (`from grader.x import y` of a module and of a
    name, `from grader import x`, an import inside a function)."""
    graph = import_graph()
    assert "grader.batch.stored" in graph["grader.batch.run"]          # from grader.batch.stored import ...
    assert "grader.batch.staff_overrides" in graph["grader.batch.run"]  # from grader.batch import staff_overrides
    assert "grader.kernel_side" in graph["grader.kernel.forked"]       # from grader import kernel_side
    assert "grader.intake.source_scan" in graph["grader.kernel.forked"]  # inside ForkServer.holds_forbidden


# The stages from the ground up (docs/architecture.md): a stage imports only from the floors
# below it, so that what a stage means never depends on what is built on it: the assignment
# model below the judging that uses it, and the grading below the presentation of its result.
FLOORS = (
    ("grader.errors", "grader.atomic_write", "grader.syntax_tree", "grader.notebook_nodes", "grader.settings",
     "grader.kernel_side"),
    ("grader.toml_text", "grader.result", "grader.intake", "grader.sandbox"),
    ("grader.calling",),
    ("grader.course", "grader.kernel"),
    ("grader.judging",),
    ("grader.grading", "grader.report"),
    ("grader.grade",),
    ("grader.student", "grader.authoring", "grader.batch", "grader.lms"),
    ("grader.cli", "grader"),
)


def stage(module: str) -> str | None:
    """The stage a module is on: its package under grader/, or the module itself (the package
    `grader` is only its own __init__)."""
    stages = sorted((s for floor in FLOORS for s in floor), key=len, reverse=True)
    return next((s for s in stages if module == s or (s != "grader" and module.startswith(s + "."))), None)


def test_each_stage_imports_only_from_the_floors_below_it():
    floor_of = {s: i for i, floor in enumerate(FLOORS) for s in floor}
    graph = import_graph()
    upward = sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                    if stage(module) != stage(target) and floor_of[stage(target)] >= floor_of[stage(module)])
    assert upward == []


def test_every_module_is_on_a_floor():
    assert [module for module in modules() if stage(module) is None] == []
