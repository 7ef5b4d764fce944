"""What an install from the wheel carries: every package of the source tree, not only those
an editable install of a checkout happens to find."""
import os
import tomllib

from grading_helpers import ROOT


def test_every_package_of_the_source_tree_is_declared_for_the_wheel():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    # Links followed: grader/reference and grader/templates are the top-level folders.
    for folder, _, files in os.walk(ROOT / "grader", followlinks=True):
        if "__init__.py" in files and "__pycache__" not in folder:
            found.add(".".join(os.path.relpath(folder, ROOT).split(os.sep)))
    assert found <= declared, f"not in [tool.setuptools] packages: {sorted(found - declared)}"
    assert {"grader.authoring.spec_tools", "grader.reference", "grader.templates", "grader.kernel_side"} <= found


def test_the_reference_and_templates_are_the_top_level_folders():
    """One copy of each: the package's names for them lead to the folders a course reads."""
    for name in ("reference", "templates"):
        assert (ROOT / "grader" / name).resolve() == (ROOT / name).resolve()
