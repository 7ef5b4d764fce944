"""The folders the kernel could import from, read from an installation's files without
importing them (tests/sandbox/test_import_paths.py grades through real venvs)."""
import site
import sys
from pathlib import Path

from grader.sandbox import import_paths as importable
from grader.sandbox import isolation as sandbox

# The base interpreter's own package folders: site-packages where it was built from source
# (pyenv, python.org), dist-packages where Debian installed it.
BASE_SITES = [Path(p) for p in site.getsitepackages(prefixes=[sys.base_prefix]) if Path(p).is_dir()]


def test_the_base_interpreters_site_packages_are_a_root_whatever_sys_path_holds(monkeypatch):
    assert BASE_SITES
    importable.search.cache_clear()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.startswith(sys.base_prefix)])
    try:
        roots = importable.import_roots()
        assert all(str(folder.resolve()) in roots for folder in BASE_SITES), (BASE_SITES, roots)
    finally:
        importable.search.cache_clear()


def test_pth_files_add_folders_and_editable_finders_map_names(tmp_path):
    site, added, source = tmp_path / "site", tmp_path / "added", tmp_path / "src" / "fastsoftmax"
    for folder in (site, added, source):
        folder.mkdir(parents=True)
    (site / "paths.pth").write_text(f"# a comment\n{added}\n../missing\n")
    (site / "__editable__.fastsoftmax-1.0.pth").write_text("import __editable___fastsoftmax_1_0_finder; "
                                                           "__editable___fastsoftmax_1_0_finder.install()\n")
    (site / "__editable___fastsoftmax_1_0_finder.py").write_text(
        f"import sys\nMAPPING: dict[str, str] = {{'fastsoftmax': {str(source)!r}}}\n"
        "raise SystemExit('the finder must be read, never run')\n")
    folders, mapped = importable._pth_entries(str(site))
    assert folders == [str(added.resolve())]
    assert mapped == {"fastsoftmax": [str(source)]}


def test_an_installed_distribution_of_the_grader_names_its_packages(tmp_path):
    (tmp_path / "grader_v0").mkdir()
    (tmp_path / "unrelated").mkdir()
    record = tmp_path / "attention_grader-0.0.9.dist-info"
    record.mkdir()
    (record / "RECORD").write_text("grader_v0/__init__.py,sha256=x,1\n../../../bin/grader,sha256=y,2\n"
                                   "attention_grader-0.0.9.dist-info/METADATA,,\n__editable___finder.py,,\n")
    assert importable._installed_packages(str(tmp_path), str(record)) == {str((tmp_path / "grader_v0").resolve())}


def test_a_copy_of_the_reference_is_recognised_under_any_name(tmp_path):
    package = tmp_path / "old_grader"
    (package / "reference").mkdir(parents=True)
    for name in importable.REFERENCE_FILES:
        (package / "reference" / name).write_text("")
    assert importable._holds_reference(str(package / "reference"))
    assert not importable._holds_reference(str(package))   # no __init__.py: a plain folder, not a package
    (package / "__init__.py").write_text("")
    assert importable._holds_reference(str(package))


def test_a_hidden_folder_holding_the_interpreter_is_hidden_around_it(tmp_path):
    """A checkout with its venv inside: the checkout's files are hidden, the way to the venv's
    packages is not (the venv, kept, is seen whole but for the grader inside it), and a link to
    them (a venv's lib64) is left to what it leads to."""
    checkout = tmp_path / "checkout"
    site_packages = checkout / ".venv" / "lib" / "python3" / "site-packages"
    (site_packages / "grader").mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir()
    (checkout / ".venv" / "lib64").symlink_to("lib")
    (checkout / "reference").mkdir()
    (checkout / "pyproject.toml").write_text("")
    hidden = sandbox.hidden_around([str(checkout), str(site_packages / "grader")],
                                   [str(checkout / ".venv"), str(site_packages)])
    assert hidden == sorted(str(p) for p in (checkout / "pyproject.toml", checkout / "reference",
                                             site_packages / "grader"))


def test_a_hidden_folder_that_is_itself_kept_stays_hidden(tmp_path):
    """A legacy editable install names the checkout in a .pth file: the grader's secrecy first."""
    assert sandbox.hidden_around([str(tmp_path)], [str(tmp_path)]) == [str(tmp_path)]
