"""The private methods of jupyter_client and nbclient that the grader overrides, copies, calls
or relies on, with what their source was on each version they were checked on.

Private methods change without notice between releases, and the package versions are only
bounded below, so tests/kernel/test_upstream.py compares each one's installed source with the
fingerprints below and fails, naming it, when it is none of them. On such a failure, read the
upstream change against the grader's code named in `used_by`; once the grader is right for it
(or needed no change), `python -m grader.kernel.upstream` prints the installed versions'
fingerprints to add to the table.

A fingerprint is the sha256 of the method's source with its comments, blank lines, docstring
and trailing spaces left out (so a reworded comment does not count as a change, a changed
line does), and its signature.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import io
import sys
import tokenize
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from grader import syntax_tree


@dataclass(frozen=True)
class Pin:
    target: str     # "module:Class.attribute", looked up on the class the grader subclasses
    package: str    # the distribution whose version decides the source
    used_by: str    # which code of the grader depends on it, and how
    # version -> (sha256 of the normalised source, signature) on that version
    checked: dict[str, tuple[str, str]]


PINS: tuple[Pin, ...] = (
    Pin("jupyter_client.manager:AsyncKernelManager._async_pre_start_kernel", "jupyter_client",
        "kernel/client.py: SandboxedKernelManager overrides it: it sets a ForkedProvisioner first, which this method "
        "keeps (it makes one only while `provisioner` is None)",
        {"8.0.0": ("a0f9fc7fcb75a6e49b189bc622f7ce68df19c5ee96f736659861c36ef0eb0fe2", "(self, **kw)"),
         "8.10.0": ("ef802dd942c0bf87c99f45bf8ed0e297bac9762397e909634454ea64d4b818d9",
                    "(self, *, transport_encryption=None, **kw)")}),
    Pin("jupyter_client.asynchronous.client:AsyncKernelClient._context_default", "jupyter_client",
        "kernel/client.py: BoundedKernelClient overrides it with a bounded context, setting `_created_context` as it "
        "does so that stop_channels still closes the context",
        {"8.0.0": ("abeb35e4972fae3d87e8e24309f8c5bb1fd4b954ae05d02f3126abb1429c4f4f", "(self)"),
         "8.10.0": ("abeb35e4972fae3d87e8e24309f8c5bb1fd4b954ae05d02f3126abb1429c4f4f", "(self)")}),
    Pin("jupyter_client.asynchronous.client:AsyncKernelClient.wait_for_ready", "jupyter_client",
        "kernel/client.py: BoundedKernelClient.wait_for_ready is a copy of it (KernelClient._async_wait_for_ready) "
        "less its last wait for a quiet output channel",
        {"8.0.0": ("70668905ab815f58e25762fa3d06c8af594239e6a5b555572f5008fe9c01dd78", "(self, timeout=None)"),
         "8.10.0": ("be9d2a03691811ef017b2a30b50b53f901bc2a745d77d051d37d9a0024bda060", "(self, timeout=None)")}),
    Pin("jupyter_client.asynchronous.client:AsyncKernelClient._handle_kernel_info_reply", "jupyter_client",
        "kernel/client.py: BoundedKernelClient.wait_for_ready calls it, as the method it copies does",
        {"8.0.0": ("c01f12ad180d3728716dfec121743bd8dfbf271e010aeff80c0b1b8cec820060", "(self, msg)"),
         "8.10.0": ("c01f12ad180d3728716dfec121743bd8dfbf271e010aeff80c0b1b8cec820060", "(self, msg)")}),
    Pin("jupyter_client.asynchronous.client:AsyncKernelClient._async_is_alive", "jupyter_client",
        "kernel/client.py: BoundedKernelClient.wait_for_ready calls it, as the method it copies does",
        {"8.0.0": ("63f62f2b5bc3374bb00225942d2142e30c896e9fe961ad74d208f965ce2b0fcf", "(self)"),
         "8.10.0": ("63f62f2b5bc3374bb00225942d2142e30c896e9fe961ad74d208f965ce2b0fcf", "(self)")}),
    Pin("nbclient.client:NotebookClient._async_handle_timeout", "nbclient",
        "kernel/client.py: CappedClient overrides it: it calls it, then sets iopub_timeout to 0 for the interrupted "
        "cell's output",
        {"0.10.0": ("69a9ef6f42ca2e21dbb70140e670c021e51ce62a7a40784efcc3c0a508bc3ea9", "(self, timeout, cell=None)"),
         "0.11.0": ("69a9ef6f42ca2e21dbb70140e670c021e51ce62a7a40784efcc3c0a508bc3ea9", "(self, timeout, cell=None)")}),
    Pin("nbclient.client:NotebookClient.async_setup_kernel", "nbclient",
        "kernel/session.py: Kernel._start unregisters the exit hook it registers, `_cleanup_kernel`, when the kernel "
        "fails to start",
        {"0.10.0": ("122159d010db15ff2cc8b0d1ac22c6d37d1d7f1be7cf72c95d09d6e2ef754f9e", "(self, **kwargs)"),
         "0.11.0": ("122159d010db15ff2cc8b0d1ac22c6d37d1d7f1be7cf72c95d09d6e2ef754f9e", "(self, **kwargs)")}),
    Pin("nbclient.client:NotebookClient._async_poll_output_msg", "nbclient",
        "kernel/client.py: CappedClient overrides it: it reads a cell's outputs as this does, until the kernel is "
        "idle, and also ends once nothing more for the cell has come for OUTPUT_GAP seconds after its reply",
        {"0.10.0": ("868571fc1ef21e6c061ec8808578c0880a078b680c228b54636cc79266f69da3",
                    "(self, parent_msg_id, cell, cell_index)"),
         "0.11.0": ("868571fc1ef21e6c061ec8808578c0880a078b680c228b54636cc79266f69da3",
                    "(self, parent_msg_id, cell, cell_index)")}),
    Pin("nbclient.client:NotebookClient.output", "nbclient",
        "kernel/client.py: CappedClient overrides it: for an error it adds the output as this does (a delayed "
        "clear_output first, through `clear_before_next_output` and `clear_display_id_mapping`), built without "
        "validation; every other output still goes through it",
        {"0.10.0": ("121e6d78aef14649edd62731d873e24046dc6a81aa2e1013a94b84776919635d",
                    "(self, outs, msg, display_id, cell_index)"),
         "0.11.0": ("de860166af6347532939fa1a15d754e3ff54619279ebba45389d0a5be89917a5",
                    "(self, outs, msg, display_id, cell_index)")}),
    Pin("nbclient.client:NotebookClient._async_poll_kernel_alive", "nbclient",
        "kernel/client.py: CappedClient overrides it: it also looks whether the kernel is alive as soon as the kernel "
        "manager says it exited, and on finding it dead cancels `task_poll_for_reply` as this does",
        {"0.10.0": ("a25f52ae5422011f4abdc5f11215232f650f8fed4120c6c583aeccd9395b7e9a", "(self)"),
         "0.11.0": ("a25f52ae5422011f4abdc5f11215232f650f8fed4120c6c583aeccd9395b7e9a", "(self)")}),
    Pin("nbclient.client:NotebookClient._async_check_alive", "nbclient",
        "kernel/client.py: CappedClient._async_poll_kernel_alive calls it, as the method it overrides does",
        {"0.10.0": ("e5380035a15f5f4ad13167e0128f86e4ddf670c2a09aa19d9a1728ba5ac652f0", "(self)"),
         "0.11.0": ("e5380035a15f5f4ad13167e0128f86e4ddf670c2a09aa19d9a1728ba5ac652f0", "(self)")}),
    Pin("jupyter_client.manager:AsyncKernelManager._async_wait", "jupyter_client",
        "kernel/client.py: SandboxedKernelManager overrides it: it first waits for the kernel's exit event "
        "(the provisioner's, or a pidfd), then calls it, whose polling then finds the kernel gone",
        {"8.0.0": ("2100556dd0a38e47333a6567f672c36d77eb107e77ebf79f696e3fac43ab54ac", "(self, pollinterval=0.1)"),
         "8.10.0": ("2100556dd0a38e47333a6567f672c36d77eb107e77ebf79f696e3fac43ab54ac", "(self, pollinterval=0.1)")}),
    Pin("jupyter_client.client:KernelClient.execute", "jupyter_client",
        "kernel/client.py: BoundedKernelClient.execute builds the same execute_request, with metadata beside it "
        "(a run of calls' requests)",
        {"8.0.0": ("720bcc3dbdc8eea96f08eeb286f7579eff26abd1230997b65180df8a242f11b3",
                   "(self, code, silent=False, store_history=True, user_expressions=None, allow_stdin=None, "
                   "stop_on_error=True)"),
         "8.10.0": ("b4533fb924911a874137aac9706e87df5bd4d3402230ec4bb46e6fa894c9026a",
                    "(self, code, silent=False, store_history=True, user_expressions=None, allow_stdin=None, "
                    "stop_on_error=True)")}),
)


# The public methods and traits the grader's subclasses override. They are each class's API,
# so they are not fingerprinted; they are named so that an attribute a new upstream version
# adds and a subclass would shadow without meaning to (as a private one would) fails the test.
OVERRIDDEN_PUBLIC = (
    "jupyter_client.kernelspec:KernelSpecManager.get_kernel_spec",
    "jupyter_client.manager:AsyncKernelManager.format_kernel_cmd",
    "jupyter_client.asynchronous.client:AsyncKernelClient.connect_iopub",
    "jupyter_client.asynchronous.client:AsyncKernelClient.execute",
    "jupyter_client.asynchronous.client:AsyncKernelClient.stop_channels",
    "jupyter_client.session:Session.deserialize",
    "nbclient.client:NotebookClient.store_widget_state",
    "nbclient.client:NotebookClient.process_message",
    "nbclient.client:NotebookClient.output",
    *(f"jupyter_client.provisioning.local_provisioner:LocalProvisioner.{name}"
      for name in ("has_process", "launch_kernel", "poll", "wait", "send_signal", "kill", "terminate", "cleanup")),
)
# The packages whose classes the grader subclasses or whose private methods it uses.
UPSTREAM = ("jupyter_client", "nbclient", "ipykernel", "zmq", "nbformat", "IPython", "traitlets")


def _resolve(target: str):
    """The attribute `target` names, as the grader's subclass inherits it; None when it is gone."""
    module_name, _, path = target.partition(":")
    value: Any = importlib.import_module(module_name)
    for name in path.split("."):
        value = inspect.getattr_static(value, name, None) if isinstance(value, type) else getattr(value, name, None)
        if value is None:
            return None
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def normalised_source(function) -> str:
    """`function`'s source less its comments, blank lines, docstring and trailing spaces.
    Comments are found by Python's tokenizer and the docstring by its parser, so a `#` inside
    a string is kept; both are the same on every Python version the grader supports."""
    lines = inspect.getsource(function).splitlines()
    # Dedented by the definition's own indent: textwrap.dedent would find none where a
    # multi-line string in the body has a line at column 0.
    indent = lines[0][:len(lines[0]) - len(lines[0].lstrip())]
    lines = [line[len(indent):] if line.startswith(indent) else line for line in lines]
    text = "".join(line + "\n" for line in lines)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            row, column = token.start
            lines[row - 1] = lines[row - 1][:column]
    dropped: set[int] = set()
    definition = syntax_tree.parse(text).body[0]
    body = getattr(definition, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        dropped.update(range(body[0].lineno - 1, body[0].end_lineno or body[0].lineno))
    return "".join(line.rstrip() + "\n" for number, line in enumerate(lines)
                   if number not in dropped and line.strip())


def signature(function) -> str:
    """`function`'s parameters, their kinds and defaults: what an override must accept. Not
    their annotations, whose printed form depends on the Python version and on whether the
    module postpones them."""
    found = inspect.signature(function)
    return str(found.replace(parameters=[p.replace(annotation=p.empty) for p in found.parameters.values()],
                             return_annotation=found.empty))


def fingerprint(function) -> tuple[str, str]:
    """(sha256 of the normalised source, signature) of `function`."""
    return hashlib.sha256(normalised_source(function).encode()).hexdigest(), signature(function)


def installed_version(package: str) -> str:
    return metadata.version(package)


def mismatch(pin: Pin) -> str | None:
    """None when the installed source of `pin`'s method is one it was checked on; else what
    changed, in words that name the method, the installed version and the versions checked."""
    version = installed_version(pin.package)
    checked = ", ".join(pin.checked)
    function = _resolve(pin.target)
    if function is None:
        return f"{pin.target} is gone in {pin.package} {version} (checked on {checked}); {pin.used_by}"
    digest, parameters = fingerprint(function)
    if any(digest == known for known, _ in pin.checked.values()):
        return None
    same = [v for v, (_, known) in pin.checked.items() if known == parameters]
    if same:
        what = f"its body changed (its signature is as on {same[-1]})"
    else:
        last, (_, was) = list(pin.checked.items())[-1]
        what = f"its signature is now {parameters} (on {last}: {was})"
    return (f"{pin.target} in {pin.package} {version} is not the source the grader was checked on ({checked}): "
            f"{what}; {pin.used_by}")


def main() -> None:
    """Print each pin's fingerprint on the installed versions, as entries for PINS."""
    for pin in PINS:
        function = _resolve(pin.target)
        if function is None:
            print(f"{pin.target}: gone in {pin.package} {installed_version(pin.package)}", file=sys.stderr)
            continue
        digest, parameters = fingerprint(function)
        print(f"{pin.target}\n    {installed_version(pin.package)!r}: ({digest!r}, {parameters!r}),")


if __name__ == "__main__":
    main()
