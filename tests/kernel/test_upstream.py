"""The grader's overrides of nbclient's and jupyter_client's private methods still meet the
source they were written against (grader/kernel/upstream.py), and its subclasses of their
classes shadow nothing upstream without saying so."""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import sys
import textwrap
from pathlib import Path

import pytest

import grader
from grader.kernel.upstream import OVERRIDDEN_PUBLIC, PINS, UPSTREAM, Pin, fingerprint, mismatch


@pytest.mark.parametrize("pin", PINS, ids=[p.target for p in PINS])
def test_each_private_method_the_grader_depends_on_is_a_source_it_was_checked_on(pin):
    assert mismatch(pin) is None, mismatch(pin)


def _upstream_subclasses() -> list[type]:
    """Every class in the grader's own modules with a base from an upstream package, found in
    the source (importing every module would run the kernel's and the fork server's)."""
    root = Path(grader.__file__).parent
    found = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            tree = ast.parse(path.read_text())
            imported = {alias.asname or alias.name: node.module for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
            bases = [base.id for node in tree.body if isinstance(node, ast.ClassDef) for base in node.bases
                     if isinstance(base, ast.Name) and imported.get(base.id, "").split(".")[0] in UPSTREAM]
            if bases:
                module = ".".join(("grader", *path.relative_to(root).with_suffix("").parts))
                classes = vars(importlib.import_module(module)).values()
                found += [c for c in classes if inspect.isclass(c) and c.__module__ == module
                          and any(_is_upstream(b) for b in c.__mro__)]
    return found


def _is_upstream(cls: type) -> bool:
    return cls.__module__.split(".")[0] in UPSTREAM


def _upstream_base(cls: type) -> type:
    return next(b for b in cls.__mro__ if _is_upstream(b))


def _shadowed(cls: type) -> list[str]:
    """The attributes `cls` defines that an upstream class it inherits from defines too, less
    those every subclass of its base gets from the base's metaclass (traitlets, abc)."""
    base = _upstream_base(cls)
    generated = set(vars(type("Probe", (base,), {})))
    upstream = [b for b in cls.__mro__ if _is_upstream(b)]
    return sorted(name for name in vars(cls) if not (name.startswith("__") and name.endswith("__"))
                  and name not in generated and any(name in vars(b) for b in upstream))


def _target(cls: type, name: str) -> str:
    base = _upstream_base(cls)
    return f"{base.__module__}:{base.__qualname__}.{name}"


SUBCLASSES = _upstream_subclasses()


def test_the_grader_subclasses_upstream_classes_where_this_test_looks():
    names = {c.__name__ for c in SUBCLASSES}
    assert {"SandboxedKernelManager", "BoundedKernelClient", "CappedClient", "ForkedProvisioner"} <= names


@pytest.mark.parametrize("cls", SUBCLASSES, ids=lambda c: c.__name__)
def test_a_subclass_overrides_only_what_is_pinned_or_declared(cls):
    """A private upstream attribute a subclass overrides is fingerprinted in PINS; a public one
    is named in OVERRIDDEN_PUBLIC. Anything else is an attribute of the grader's own that an
    upstream version now also has: the two would silently replace each other."""
    pinned = {p.target for p in PINS}
    undeclared = [name for name in _shadowed(cls)
                  if _target(cls, name) not in (pinned if name.startswith("_") else pinned | set(OVERRIDDEN_PUBLIC))]
    assert not undeclared, (f"{cls.__module__}.{cls.__name__} shadows {', '.join(undeclared)} of "
                            f"{_upstream_base(cls).__qualname__}: pin it in grader/kernel/upstream.py or rename it")


def test_the_overrides_of_private_methods_live_in_one_module():
    overriding = {c.__module__ for c in SUBCLASSES if any(n.startswith("_") for n in _shadowed(c))}
    assert len(overriding) == 1, overriding


def test_each_pin_and_declared_override_names_an_upstream_attribute_the_grader_overrides_or_uses():
    overridden = {_target(c, name) for c in SUBCLASSES for name in _shadowed(c)}
    assert set(OVERRIDDEN_PUBLIC) <= overridden, set(OVERRIDDEN_PUBLIC) - overridden
    sources = "".join(p.read_text() for p in Path(grader.__file__).parent.rglob("*.py") if p.name != "upstream.py")
    for pin in PINS:
        assert pin.checked, pin.target
        assert pin.target in overridden or f".{pin.target.rpartition('.')[2]}(" in sources, pin.target


# The checker itself, on a module of its own whose source changes as an upstream release's would.

ORIGINAL = '''
class Client:
    def _handle(self, timeout, cell=None):
        """Waits for the reply."""
        reply = self.wait(timeout)   # the kernel's answer
        return reply
'''


def _pin_for(tmp_path, monkeypatch, source: str, name: str) -> Pin:
    """A pin of `Client._handle` in a module named `name` with `source`, fingerprinted on ORIGINAL."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(ORIGINAL))
    checked = fingerprint(importlib.import_module(name).Client._handle)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    sys.modules.pop(name)
    return Pin(f"{name}:Client._handle", "nbclient", "the grader's Client overrides it", {"0.1": checked})


def test_comments_blank_lines_docstrings_and_trailing_spaces_are_not_changes(tmp_path, monkeypatch):
    reworded = (ORIGINAL.replace('reply."""', 'reply,\nthen returns it."""\n')
                .replace("# the kernel's answer", "   ")
                .replace("return reply", "# Hand it on.\n        return reply  # '#'"))
    assert mismatch(_pin_for(tmp_path, monkeypatch, reworded, "reworded_client")) is None


def test_a_changed_body_fails_naming_the_method_and_the_versions_checked(tmp_path, monkeypatch):
    changed = '''
    class Client:
        def _handle(self, timeout, cell=None):
            """Waits for the reply."""
            reply = self.wait(timeout + 1)   # the kernel's answer
            return reply
    '''
    said = mismatch(_pin_for(tmp_path, monkeypatch, changed, "changed_client"))
    assert said.startswith("changed_client:Client._handle in nbclient ")
    assert "checked on (0.1)" in said and "its body changed" in said and "the grader's Client overrides it" in said


def test_a_string_that_looks_like_a_comment_is_part_of_the_source(tmp_path, monkeypatch):
    changed = ORIGINAL.replace("return reply", 'return reply or "# none"')
    assert "its body changed" in mismatch(_pin_for(tmp_path, monkeypatch, changed, "string_client"))


def test_a_changed_signature_is_named(tmp_path, monkeypatch):
    changed = ORIGINAL.replace("(self, timeout, cell=None)", "(self, timeout, *, cell=None)")
    said = mismatch(_pin_for(tmp_path, monkeypatch, changed, "signature_client"))
    assert "its signature is now (self, timeout, *, cell=None) (on 0.1: (self, timeout, cell=None))" in said


def test_a_method_gone_upstream_is_named(tmp_path, monkeypatch):
    gone = ORIGINAL.replace("_handle", "_handle_reply")
    said = mismatch(_pin_for(tmp_path, monkeypatch, gone, "gone_client"))
    assert said.startswith("gone_client:Client._handle is gone in nbclient ")
