"""The functions a solution notebook defines, read from its source without running it: each
one's parameters, which of them have defaults, and the keys or attributes it reads from a
parameter that holds weights (`params["W_qkv"]`, `c_attn.w`: held.py), which is all a
signature says about a packed argument."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

from grader.calling.class_table import MAX_KEPT
from grader.intake.notebook import code_cells
from grader.intake.source_scan import is_stub, python_source
from grader import syntax_tree
from grader.authoring.spec_tools.held import Held, held


@dataclass(frozen=True)
class Parameter:
    name: str
    has_default: bool
    held: Held | None = None      # the keys or attributes the function reads from it, and from those
    # Its default when that is a literal number, string, bool or None, as repr() writes it ("-1").
    default: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys or attributes read from it, in first-use order."""
        return self.held.keys if self.held is not None else ()


@dataclass(frozen=True)
class Signature:
    name: str
    params: tuple[Parameter, ...]
    # The notebook's top-level variables the function reads (a lab's `Wq = ...`), in order.
    globals_read: tuple[str, ...] = ()
    # The names of what it calls (`np.tanh` is tanh): what a reason for leaving it out may point at.
    calls: frozenset[str] = frozenset()
    # A class's method: the attributes the class's methods but __init__ set on self, where its
    # object may keep a part (`self.attention_scores = weights`), read back after each probe.
    self_attributes: tuple[str, ...] = ()
    # Its source is written for any leading axes (any_leading_axes).
    any_axes: bool = False

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


def _signature(node: ast.FunctionDef, others: dict | None = None) -> Signature | None:
    """Positional parameters only: the grader calls functions positionally (or by these names).
    A function taking *args or required keyword-only arguments cannot be called that way.
    `others`: the notebook's functions by name, which a parameter may be passed on to as keywords."""
    args = node.args
    if args.vararg is not None or any(d is None for d in args.kw_defaults):
        return None
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    defaults = [None] * first_default + [_literal(d) for d in args.defaults]
    params = tuple(Parameter(a.arg, i >= first_default, held(node, a.arg, others or {}), defaults[i])
                   for i, a in enumerate(positional))
    return Signature(node.name, params) if params else None


def _literal(node: ast.expr) -> str | None:
    """A default's value as repr() writes it, when it is a literal scalar (`-1`, `None`)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, RecursionError):
        return None
    return repr(value) if value is None or isinstance(value, (int, float, str)) else None


def _statements(nb) -> list[ast.stmt]:
    """The top-level statements of the notebook's cells that parse, in order: each cell parsed once."""
    statements: list[ast.stmt] = []
    for _, source in code_cells(nb):
        try:
            statements += syntax_tree.parse(python_source(source)).body
        except SyntaxError:
            continue
    return statements


def _top_level(statements: list[ast.stmt], kind) -> list:
    """The public definitions of `kind` among the statements."""
    return [node for node in statements if isinstance(node, kind) and not node.name.startswith("_")]


def _assigned(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement assigns to, tuples unpacked; nothing for another node."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return [item for target in targets for item in (target.elts if isinstance(target, ast.Tuple) else [target])]


# A shape with its leading axes written as `...`, as a docstring gives it: (N, ..., L, E) or
# (..., L, E).
ELLIPSIS_SHAPE = re.compile(r"\(\s*(?:[\w*]+\s*,\s*)?\.\.\.\s*,")


def _unpacks_a_shape(node: ast.AST) -> bool:
    """`*batch, L, E = Q.shape`: the leading axes taken as they come, however many."""
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
        and any(isinstance(item, ast.Starred) for item in _assigned(node))


def any_leading_axes(node: ast.AST) -> bool:
    """Whether a function's or class's source is written for any leading axes: an Ellipsis in
    a subscript (`mask[..., None, :]`), a starred unpacking of a shape (`*batch, L, E =
    Q.shape`), or a docstring giving a shape with `...` for its leading axes (`(N, ..., L, E)`, `(..., L, E)`).
    Negative axes alone (`np.swapaxes(K, -1, -2)`) are not: 2-D code writes them too."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Subscript) and any(isinstance(n, ast.Constant) and n.value is Ellipsis
                                                    for n in ast.walk(inner.slice)):
            return True
        if _unpacks_a_shape(inner):
            return True
        if isinstance(inner, (ast.FunctionDef, ast.ClassDef)) and ELLIPSIS_SHAPE.search(ast.get_docstring(inner) or ""):
            return True
    return False


def notebook_functions(nb) -> list[Signature]:
    """The notebook's top-level functions that take parameters, each as last defined, in the
    order they are first defined; placeholders (a template's stubs) and private names left out."""
    found: dict[str, Signature | None] = {}
    statements = _statements(nb)
    nodes = _top_level(statements, ast.FunctionDef)
    others = {node.name: node for node in nodes}
    variables = {item.id for node in statements for item in _assigned(node) if isinstance(item, ast.Name)}
    for node in nodes:
        signature = None if is_stub(node) else _signature(node, others)
        found[node.name] = signature and replace(signature, globals_read=_globals_read(node, variables),
                                                 calls=_calls(node), any_axes=any_leading_axes(node))
    return [s for s in found.values() if s is not None]


def _calls(function: ast.FunctionDef) -> frozenset[str]:
    return frozenset(node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                     for node in ast.walk(function) if isinstance(node, ast.Call)
                     and isinstance(node.func, (ast.Name, ast.Attribute)))


def uncallable_functions(nb) -> dict[str, str]:
    """The notebook's public functions the grader cannot call, each with why, in the words of a
    convention's `params` (the parameters in order, passed positionally or by name)."""
    why: dict[str, str] = {}
    for node in _top_level(_statements(nb), ast.FunctionDef):
        args = node.args
        if is_stub(node):
            why.pop(node.name, None)
        elif args.vararg is not None:
            why[node.name] = (f"it takes *{args.vararg.arg}, and a convention's `params` name each parameter in "
                              "order: write its own parameters instead")
        elif any(d is None for d in args.kw_defaults):
            required = next(a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None)
            why[node.name] = (f"its keyword-only parameter `{required}` has no default, and a convention's `params` "
                              "are passed in order: put it before the `*`, or give it a default")
        else:
            why.pop(node.name, None)   # defined again in a form that can be called
    return why


def _globals_read(function: ast.FunctionDef, variables: set[str]) -> tuple[str, ...]:
    """The notebook variables `function` reads and never assigns itself, in first-use order."""
    assigned = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    assigned |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in variables \
                and node.id not in assigned and node.id not in read:
            read.append(node.id)
    return tuple(read)


def why_no_function(nb) -> str:
    """Why the notebook offers no function to propose a convention for, in a clause: what
    stops its functions being read (a cell that does not parse) or graded (placeholder bodies)."""
    for index, source in code_cells(nb):
        try:
            syntax_tree.parse(python_source(source))
        except SyntaxError as exc:
            return f"cell {index + 1} does not parse (SyntaxError: {exc.msg}, line {exc.lineno})"
    stubs = [node.name for node in _top_level(_statements(nb), ast.FunctionDef) if is_stub(node)]
    if stubs:
        return f"its functions still have the template's placeholder bodies ({', '.join(dict.fromkeys(stubs))})"
    return "it defines no function that takes parameters"


def notebook_classes(nb) -> list[str]:
    """The names of the notebook's top-level classes."""
    return list(dict.fromkeys(node.name for node in _top_level(_statements(nb), ast.ClassDef)))


# The methods a module is called through, in order of preference.
GRADED_METHODS = ("forward", "__call__")


@dataclass(frozen=True)
class ClassSignature:
    """What a class's source says about how to make and call it."""
    name: str
    method: Signature                     # the method graded (forward, else __call__), without self
    construct: tuple[Parameter, ...]      # __init__'s parameters, without self
    attributes: tuple[str, ...]           # what __init__ sets on self, in order
    methods: tuple[Signature, ...]        # its other public methods (an init method among them)
    set_later: tuple[str, ...] = ()       # what its other methods set on self (where a part may be kept)
    any_axes: bool = False                # its source is written for any leading axes
    # The objects __init__ makes of a class by name (`self.q_proj = Linear(d, d)`): (attribute,
    # class), where a backward pass may leave its weights' gradients.
    layers: tuple[tuple[str, str], ...] = ()

    @property
    def graded(self) -> Signature:
        """Its graded method as the candidates and the probe see it."""
        return Signature(self.name, self.method.params, self_attributes=self.set_later, any_axes=self.any_axes)


def _self_attributes(init: ast.FunctionDef) -> tuple[str, ...]:
    found: list[str] = []
    for node in ast.walk(init):
        for item in _assigned(node):
            if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self" \
                    and item.attr not in found:
                found.append(item.attr)
    return tuple(found)


def _layers(init: ast.FunctionDef) -> tuple[tuple[str, str], ...]:
    """`self.q_proj = Linear(d, d)` in __init__: (q_proj, Linear) for each, in order."""
    found: dict[str, str] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name):
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                found.setdefault(target.attr, node.value.func.id)
    return tuple(found.items())


def _without_self(node: ast.FunctionDef) -> Signature | None:
    signature = _signature(node)
    if signature is None or not signature.params or signature.params[0].name != "self":
        return None
    return Signature(node.name, signature.params[1:])


def notebook_class_signatures(nb) -> tuple[list[ClassSignature], dict[str, str]]:
    """The notebook's classes that can be graded as modules, and why each other one cannot."""
    nodes: dict[str, ast.ClassDef] = {}
    for node in _top_level(_statements(nb), ast.ClassDef):
        nodes[node.name] = node
    found, why = [], {}
    for name, node in nodes.items():
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        graded = next((methods[m] for m in GRADED_METHODS if m in methods and not is_stub(methods[m])), None)
        method = _without_self(graded) if graded is not None else None
        if method is None or not method.params:
            taking = [m.name for m in methods.values() if not m.name.startswith("_") and not is_stub(m)
                      and (s := _without_self(m)) is not None and s.params]
            why[name] = "a class with no forward (or __call__) method taking arguments" + (
                f": name the method it is graded through by hand, `method = \"{taking[0]}\"` in the convention's "
                f"class table (its methods: {', '.join(taking[:6])})" if taking else "")
            continue
        init = methods.get("__init__")
        construct = _without_self(init) if init is not None else Signature("__init__", ())
        if construct is None:
            why[name] = ("a class whose __init__ cannot be called with positional arguments (*args, or a "
                         "keyword-only one without a default), as the class table's `construct` passes them")
            continue
        others = tuple(s for m in methods.values() if not m.name.startswith("_") and m is not graded
                       and (s := _without_self(m)) is not None and s.params)
        set_later = [a for m in methods.values() if m is not init for a in _self_attributes(m)]
        found.append(ClassSignature(name, method, construct.params,
                                    _self_attributes(init) if init is not None else (), others,
                                    tuple(dict.fromkeys(set_later))[:MAX_KEPT], any_leading_axes(node),
                                    _layers(init) if init is not None else ()))
    return found, why
