"""What an install from the wheel carries: every package of the source tree, not only those
an editable install of a checkout happens to find."""
import tomllib

from conftest import ROOT


def test_every_package_of_the_source_tree_is_declared_for_the_wheel():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    declared = set(setuptools["packages"])
    folders = {name: ROOT / path for name, path in setuptools["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                relative = init.parent.relative_to(folder).parts
                found.add(".".join((name, *relative)))
    assert found <= declared, f"not in [tool.setuptools] packages: {sorted(found - declared)}"
    assert "grader.spec_tools" in found
