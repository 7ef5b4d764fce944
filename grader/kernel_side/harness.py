"""Runs inside the student's kernel, never in the grader process.

The grader sends this file's text to the kernel before the notebook runs, after the wire
format's (grader/kernel_side/wire.py). It knows nothing of the reference, the expected values or the
comparison: it decodes plain arrays, calls a student function on each set of them in turn,
and writes what came back from each call, in the wire format, to the grader's reply channel
(grader/kernel/reply_channel.py) as soon as the call returns.
Everything it sends is re-validated by the grader, which also times the calls itself, so
a student who tampers with it can only break their own probes.
"""
import dis
import inspect
import os
import signal
import sys
import traceback
import types

from IPython import get_ipython
from IPython.display import publish_display_data

try:
    import _attention_grader_wire as wire   # in the kernel, loaded just before this file
except ImportError:
    from grader.kernel_side import wire   # in the grader, for its tests

MIME = wire.MIME
_publish = publish_display_data
_FunctionType = types.FunctionType
_write = os.write
_IGNORED = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___"}

_defined: dict = {}  # name -> (function object, data globals it read when its cell ran)


# The instructions that read a global: co_names holds attribute names too (`self.N`, `np.exp`),
# which would make a method's `self.N` a read of the notebook's global N.
_GLOBAL_READS = ("LOAD_GLOBAL", "LOAD_NAME")


def _code_names(code):
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_READS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _is_data(value):
    return not (isinstance(value, (types.ModuleType, type)) or callable(value))


def _data_globals(fn):
    return {n: fn.__globals__[n] for n in _code_names(fn.__code__)
            if n in fn.__globals__ and n not in _IGNORED and not n.startswith("_")
            and _is_data(fn.__globals__[n])}


def _snapshot_definitions(*_args):
    """After each cell: remember the data globals of functions that cell (re)defined, so a
    function is called with the notebook state it was written and tried against."""
    ns = get_ipython().user_ns
    for name, value in list(ns.items()):
        if isinstance(value, _FunctionType) and getattr(value, "__module__", None) == "__main__":
            if _defined.get(name, (None,))[0] is not value:
                _defined[name] = (value, _data_globals(value))


_output = {"cell": 0, "notebook": 0, "cell_budget": 0, "notebook_budget": 0, "told": False}
_unflushed: set = set()   # the output streams written to since their last flush


def _limit_writes(stream_class):
    """Cap what the notebook prints, at the class so that IPython's per-cell wrapping of
    `stream.write` still ends here, and so do threads that print after their cell ended.
    ipykernel's fd-level capture (os.write(1, ...), a C library's printf) writes here too."""
    original = stream_class.write
    if getattr(original, "_grader_capped", False):
        return

    def write(self, text):
        allowed = min(_output["cell_budget"] - _output["cell"], _output["notebook_budget"] - _output["notebook"])
        if allowed <= 0:
            if not _output["told"]:
                _output["told"] = True
                original(self, "\n[output limit reached: further output is discarded]\n")
                _unflushed.add(self)
            return len(text)
        _output["cell"] += len(text)
        _output["notebook"] += len(text)
        written = original(self, text[:allowed])
        # Marked once the text is in the stream's buffer: a flush that finds no mark has
        # nothing of an earlier write to send.
        _unflushed.add(self)
        return written

    write._grader_capped = True  # type: ignore[attr-defined]  # a function takes attributes: the mark install() reads
    stream_class.write = write


def _flush_only_when_written(stream_class):
    """A flush of stdout or stderr from the kernel's main thread hands the send to the IOPub
    thread and waits on it twice; ipykernel flushes both before and after every cell and the
    display publisher before every display message (the harness's description is one): about
    a quarter of the kernel's CPU for a short cell, measured. With nothing
    written since the stream's last flush there is nothing to send, so the flush is skipped;
    what is written is sent by the next flush, and whatever no flush takes by ipykernel's own
    timer. The mark is taken off before the flush, so a write racing it is sent by a later one."""
    original = stream_class.flush
    if getattr(original, "_grader_capped", False):
        return

    def flush(self):
        if self in _unflushed:
            _unflushed.discard(self)
            original(self)

    flush._grader_capped = True  # type: ignore[attr-defined]
    stream_class.flush = flush


def _new_cell(*_args):
    _output["cell"] = 0
    _output["told"] = False


def _log_at_its_handlers_level(log):
    """traitlets leaves the kernel's logger at DEBUG and filters at its handlers (WARNING by
    default): each of ipykernel's debug lines for every message built a record that the handler
    then dropped, about 0.3 ms of the kernel's CPU a cell. The logger is raised to its handlers'
    lowest level, so exactly the same lines are still written."""
    if log.propagate or not log.handlers:
        return
    lowest = min(handler.level for handler in log.handlers)
    if lowest > log.getEffectiveLevel():
        log.setLevel(lowest)


def install(cell_budget, notebook_budget):
    _output.update(cell_budget=cell_budget, notebook_budget=notebook_budget)
    for stream in {type(sys.stdout), type(sys.stderr)}:
        _limit_writes(stream)
        _flush_only_when_written(stream)
    # Whatever was written before the harness loaded is sent by the first flush.
    _unflushed.update((sys.stdout, sys.stderr))
    get_ipython().events.register("pre_run_cell", _new_cell)
    get_ipython().events.register("post_run_cell", _snapshot_definitions)
    _log_at_its_handlers_level(get_ipython().kernel.log)


class _Unavailable:
    """Names why an import fails. Under Landlock (no namespaces) a forbidden library and the
    grader are unreadable rather than replaced by stubs, and importing one would fail with a
    PermissionError naming a file. Only the message comes from here: what stops the import is
    the kernel's filesystem view, which nothing in the kernel can change."""

    def __init__(self, messages):
        self.messages = dict(messages)

    def find_spec(self, name, path=None, target=None):
        for module, message in self.messages.items():
            if name == module or name.startswith(module + "."):
                raise ImportError(message, name=name)
        return None


def explain_unavailable(messages):
    """`messages`: module -> why it is not available (the stubs' messages under namespaces)."""
    sys.meta_path.insert(0, _Unavailable(messages))


_course: dict = {"modules": ()}   # the top-level names of the course's support modules


def use_course(folder, package, modules):
    """The course's support modules (read-only in `folder`) come first on the import path, before
    the notebook's folder; with a package, the notebook's code is a module of it, so that its
    relative imports (`from .activation import Softmax`) resolve there."""
    sys.path.insert(0, folder)
    _course["modules"] = tuple(modules)
    if package:
        get_ipython().user_ns["__package__"] = package


def _from_course(value):
    """Whether a callable is the course's (defined in a support module), never the student's."""
    module = getattr(value, "__module__", None)
    return isinstance(module, str) and any(module == m or module.startswith(m + ".") for m in _course["modules"])


def reap():
    """Collect the notebook's finished child processes: until reaped, they hold process slots."""
    import os
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        reaped += 1
    _publish_result({"reaped": reaped})


_replies: dict = {"fd": None}   # the write end of the grader's reply channel


def open_replies(path):
    """Open the grader's reply channel, as the harness loads: before the notebook's code runs."""
    _replies["fd"] = os.open(path, os.O_WRONLY | os.O_CLOEXEC)


def _reply(payload):
    """Write one call's reply to the grader, whole before the next call starts: a pipe keeps
    what was written even if the kernel dies next."""
    data = memoryview(wire.frame(payload))
    while data:
        data = data[_write(_replies["fd"], data):]


def ready():
    """The harness's last step as it loads: it says so on the reply channel, before the kernel
    answers its first request."""
    _reply({"ready": True})


def _publish_result(payload):
    _publish({MIME: payload})


def _find(names):
    ns = get_ipython().user_ns
    for name in names:
        if name in ns and callable(ns[name]) and not _from_course(ns[name]):
            return name, ns[name]
    return None, None


def _as_defined(name, fn):
    record = _defined.get(name)
    if record is None or record[0] is not fn or not record[1] or not isinstance(fn, _FunctionType):
        return fn
    scope = dict(fn.__globals__)
    scope.update(record[1])
    clone = _FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


def _with_globals(fn, pairs):
    """The function with the grader's values for the notebook globals it reads its weights
    from, in a copy of its namespace (the notebook's own values are left as they are), and a
    function that gives those values as they are after the call."""
    if not isinstance(fn, _FunctionType):
        raise TypeError(f"{getattr(fn, '__name__', 'it')} is not a plain function: the grader cannot set its "
                        "globals")
    values = [(str(n), wire.decode_argument(a, run=_calls["arrays"])) for n, a in pairs]
    scope = dict(fn.__globals__)
    scope.update(values)
    clone = _FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone, lambda: [scope.get(n) for n, _ in values]


def _error(exc):
    frames = traceback.extract_tb(exc.__traceback__)[1:]
    where = [f"line {f.lineno} in {f.name}: {f.line}" for f in frames[-3:] if f.filename.startswith("<ipython")
             or f.filename.startswith("/tmp")]
    return {"type": type(exc).__name__, "message": str(exc)[:500], "where": where}


_declared_by_code: dict = {}   # a plain function's code -> its parameters' names, in order


def _declared(fn):
    """The names of fn's parameters, in order. A plain function's are its code's, read once
    per code object: a run of calls asked inspect.signature the same question for every call,
    a tenth of the calls' time in the kernel. Anything else (a method, a wrapped function, one
    with a __signature__) is asked each time."""
    plain = type(fn) is _FunctionType and "__wrapped__" not in fn.__dict__ and "__signature__" not in fn.__dict__
    if plain and fn.__code__ in _declared_by_code:
        return _declared_by_code[fn.__code__]
    declared = list(inspect.signature(fn).parameters)
    if plain:
        _declared_by_code[fn.__code__] = declared
    return declared


def _by_keyword(fn, params):
    """Call by keyword only when the student reordered the parameters but kept their names."""
    try:
        declared = _declared(fn)
    except (TypeError, ValueError):
        return False
    return set(params) <= set(declared) and declared[: len(params)] != list(params)


def _invoke(fn, params, args, by_keyword):
    return fn(**dict(zip(params, args))) if by_keyword else fn(*args)


def _read_back(instance, name):
    try:
        return getattr(instance, name)
    except Exception:  # noqa: BLE001 - a property may raise: the value is then lost, as a change
        return None


# What an attribute the object does not have after the call is sent as (returns.NO_ATTRIBUTE).
_NO_ATTRIBUTE = {"kind": "other", "type": "missing", "detail": "no such attribute after the call"}


def _kept(instance, names):
    """The attributes the method keeps parts in, read after the call and encoded as a return
    value is (bounded alike); one the object lacks, or whose reading raises, as _NO_ATTRIBUTE."""
    found = []
    for name in names[:wire.MAX_ITEMS]:
        try:
            value = instance
            for attribute in str(name).split(".")[:2]:   # `q_proj.dLdW`: off a layer the object holds
                value = getattr(value, attribute)
        except Exception:  # noqa: BLE001 - a property may raise: the part is then not kept
            found.append(dict(_NO_ATTRIBUTE))
            continue
        found.append(wire.encode_value(value))
    return found


def _method_of(cls, spec, step):
    """A new object of the student's class, made from the grader's values (constructor, then
    the attributes, then the init method), and its graded method. `step` says how far it got,
    for a step that raises. Returns (method, whether a call went by keyword, a function that
    gives every value the object was handed as it is after the call, in the wire's order, and
    one that gives the attributes it keeps parts in, encoded)."""
    step["at"] = "construct"
    construct = [wire.decode_argument(a, run=_calls["arrays"]) for a in spec["construct"]["args"]]
    if not isinstance(cls, type):
        raise TypeError(f"{getattr(cls, '__name__', 'it')} is not a class")
    keyword = _by_keyword(cls, spec["construct"]["params"])
    instance = _invoke(cls, spec["construct"]["params"], construct, keyword)
    step["at"] = "attributes"
    attributes = [(str(n), wire.decode_argument(a, run=_calls["arrays"])) for n, a in spec["attributes"]]
    for name, value in attributes:
        setattr(instance, name, value)
    init, init_args = spec.get("init"), []
    if init:
        step["at"] = "init"
        init_args = [wire.decode_argument(a, run=_calls["arrays"]) for a in init["args"]]
        initialise = getattr(instance, init["method"])
        by_keyword = _by_keyword(initialise, init["params"])
        keyword = keyword or by_keyword
        _invoke(initialise, init["params"], init_args, by_keyword)
    before, before_args = spec.get("before"), []
    if before:
        # The method run just before the one graded (a forward, before its backward).
        step["at"] = "before"
        before_args = wire.decode_arguments(before["args"], _calls["arrays"])
        first = getattr(instance, before["method"])
        by_keyword = _by_keyword(first, before["params"])
        keyword = keyword or by_keyword
        _invoke(first, before["params"], before_args, by_keyword)
    step["at"] = "method"
    method = getattr(instance, spec["method"])

    def given_after():
        return construct + [_read_back(instance, name) for name, _ in attributes] + init_args + before_args

    return method, keyword, given_after, lambda: _kept(instance, spec.get("kept") or [])


def _call(request):
    """Call one student function (or a method of a new object of a student's class) on decoded
    arrays; returns the reply to send."""
    name, fn = _find(request["names"])
    if fn is None:
        return {"found": False}
    args = wire.decode_arguments(request["args"], _calls["arrays"])
    params = request["params"]
    spec, step, given_after, by_keyword = request.get("object"), {"at": "method"}, None, False
    read_kept, kept = None, None
    try:
        if spec is None:
            fn = _as_defined(name, fn)
            if request.get("globals"):
                fn, given_after = _with_globals(fn, request["globals"])
        else:
            fn, by_keyword, given_after, read_kept = _method_of(fn, spec, step)
        method_keyword = _by_keyword(fn, params)
        by_keyword = by_keyword or method_keyword
        value = _invoke(fn, params, args, method_keyword)
        # Read inside the call: reading an attribute may run the student's code (a property),
        # which is timed and interrupted as the call is.
        kept = read_kept() if read_kept is not None and spec.get("kept") else None
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - student code may raise anything
        if _calls["interrupted"]:
            raise   # the grader's interrupt, at this call's timeout: it ends the run
        error = _error(exc)
        if spec is not None:
            error["step"] = step["at"]
        return {"found": True, "name": name, "by_keyword": by_keyword, "error": error}
    reply = {"found": True, "name": name, "by_keyword": by_keyword, "value": wire.encode_value(value)}
    if kept is not None:
        reply["kept"] = kept
    if request.get("return_inputs"):
        given = given_after() if given_after else []
        reply["inputs_after"] = [wire.encode_given(a) for a in args + given]
    return reply


# The run of calls being made: whether the grader interrupted it, and the arrays decoded for
# its calls so far (wire.decode_argument), dropped when it ends.
_calls: dict = {"interrupted": False, "arrays": None}


def _interrupt(signum, frame):
    _calls["interrupted"] = True
    raise KeyboardInterrupt


def call_many(requests):
    """Make the calls in turn, writing each one's reply, tagged with its index, to the grader
    as soon as it returns: the grader times every call by when its reply arrives, and interrupts the
    kernel when one is late. That interrupt ends the run, even when the student's function
    swallows it (then as soon as the function returns); a KeyboardInterrupt the function
    raises itself is only that call's error, as any other exception."""
    _calls["interrupted"], _calls["arrays"] = False, {}
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        for index, request in enumerate(requests):
            reply = _call(request)
            if _calls["interrupted"]:
                raise KeyboardInterrupt
            _reply({"index": index, "reply": reply})
    finally:
        _calls["arrays"] = None
        signal.signal(signal.SIGINT, previous)


def call_sent():
    """call_many on the requests that came with this execute request, in its metadata
    (wire.CALLS_KEY): the grader sends them as data, not as code for IPython to parse."""
    call_many(get_ipython().kernel.get_parent("shell")["metadata"][wire.CALLS_KEY])


def _module_of(value):
    if isinstance(value, types.ModuleType):
        return value.__name__
    return getattr(value, "__module__", None) or getattr(type(value), "__module__", None)


def _references(fn, seen):
    """Data globals and modules a function reaches, following the notebook's own helpers."""
    data, modules = {}, set()
    if isinstance(fn, type) and fn not in seen and getattr(fn, "__module__", None) == "__main__":
        # A notebook's class: what its methods (and properties) reach is the student's code too.
        seen.add(fn)
        for member in list(vars(fn).values()):
            for inner in (getattr(member, "__func__", member), getattr(member, "fget", None),
                          getattr(member, "fset", None)):
                inner_data, inner_modules = _references(inner, seen)
                data.update(inner_data)
                modules |= inner_modules
        return data, modules
    if not isinstance(fn, _FunctionType) or fn in seen:
        return data, modules
    seen.add(fn)
    for n in _code_names(fn.__code__):
        if n not in fn.__globals__ or n in _IGNORED:
            continue
        value = fn.__globals__[n]
        if _is_data(value):
            if not n.startswith("_"):
                data[n] = value
            continue
        module = _module_of(value)
        if module == "__main__":
            inner_data, inner_modules = _references(value, seen)
            data.update(inner_data)
            modules |= inner_modules
        elif module:
            modules.add(module)
    return data, modules


def _summary(value):
    if isinstance(value, (bool, int, float, str)) and len(repr(value)) <= 40:
        return repr(value)
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else type(value).__name__


def describe(functions, watched, methods=None):
    """For each graded function: whether it exists, its parameters, the globals it reads (as
    they were when it was defined) and the modules it reaches; and which watched modules the
    kernel imported. A graded class (`methods`: its key -> the method graded) is described by
    that method's parameters, and by what all its methods reach."""
    found: dict[str, dict] = {}
    for key, names in functions.items():
        name, fn = _find(names)
        if fn is None:
            found[key] = {"found": False}
            continue
        method = (methods or {}).get(key)
        try:
            if method and isinstance(fn, type):
                params = list(inspect.signature(getattr(fn, method)).parameters)
                params = params[1:] if isinstance(inspect.getattr_static(fn, method), _FunctionType) else params
            else:
                params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError, AttributeError):
            params = []
        data, modules = _references(_as_defined(name, fn), set())
        found[key] = {"found": True, "name": name, "params": params,
                      "globals": {n: _summary(v) for n, v in sorted(data.items())},
                      "modules": sorted(modules)}
    loaded = list(sys.modules)
    _publish_result({"functions": found,
                     "imported": sorted({w for w in watched for m in loaded if m == w or m.startswith(w + ".")})})
