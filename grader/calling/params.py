"""A parameter of a student function as a spec writes it: its name, its role (what the grader
passes there) and, for some roles, how that value is laid out. Parsed here, on its own, because
both a function's convention (grader/calling/conventions.py) and a class's constructor and
attributes (grader/calling/classes.py) are made of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from grader.errors import SpecError
from grader.reference.masks import FORMS

# The roles a parameter may have, and what it receives.
ROLES = {
    "x": "the tokens X",
    "memory": "the second sequence keys and values are projected from (cross-attention; Lk x D_mem)",
    "key_tokens": "the sequence keys are projected from, passed apart from the values' (query, key, value)",
    "value_tokens": "the sequence values are projected from, passed apart from the keys' (query, key, value)",
    "q": "the queries Q", "k": "the keys K", "v": "the values V",
    "kv": "the keys K, which are the values V too (one array, as an encoder's states are both)",
    "scores": "the attention scores (the input of a softmax helper)",
    "wq": "the query projection", "wk": "the key projection", "wv": "the value projection",
    "wqkv": "the query, key and value projections side by side (Q | K | V)",
    "bq": "the query bias", "bk": "the key bias", "bv": "the value bias",
    "bqkv": "the query, key and value biases side by side (Q | K | V)",
    "wo": "the output projection",
    "bo": "the output projection's bias",
    "mask": "an attention mask (Lq x Lk), in the form its form = ... names",
    "key_padding": "a key-padding mask (one flag per key: which keys are real), in the form its form = ... names",
    "causal": "a flag: whether each query attends only the keys up to itself (a causal mask)",
    "n_heads": "the number of heads",
    "scale": "a flag: whether to divide the scores by sqrt(d_k)",
    "dict": "a dict holding other roles under the keys given",
    "score_wq": "additive attention: the query's weight W1 in v . tanh(q W1 + k W2)",
    "score_wk": "additive attention: the key's weight W2 in v . tanh(q W1 + k W2)",
    "score_w": "additive attention: one weight on the concatenation [q; k], W1 above W2",
    "score_v": "additive attention: the score vector v in v . tanh(q W1 + k W2)",
    "ln_gamma": "a layer norm's scale (D), graded on its own", "ln_beta": "a layer norm's shift (D), graded on its own",
    "ln1_gamma": "a block's first layer norm's scale (D)", "ln1_beta": "a block's first layer norm's shift (D)",
    "ln2_gamma": "a block's second layer norm's scale (D)", "ln2_beta": "a block's second layer norm's shift (D)",
    "ff_w1": "the feed-forward network's first weight (D x F)", "ff_b1": "the feed-forward network's first bias (F)",
    "ff_w2": "the feed-forward network's second weight (F x D)", "ff_b2": "the feed-forward network's second bias (D)",
    "object": "an object holding other roles as the attributes given (a types.SimpleNamespace)",
    "d_output": "a backward pass: the upstream gradient, of the loss with respect to the output (Lq x d_v)",
    "weights": "a backward pass: the forward's attention weights P (Lq x Lk), as its cache holds them",
    "tuple": "a tuple holding other roles in the order given (a forward's cache, `q, k, v, p = cache`)",
}
# Roles the next steps of the calling conventions will give meaning to. A spec naming one is
# refused in one line rather than graded as if it were absent.
NOT_SUPPORTED_YET: dict[str, str] = {}

WEIGHT_ROLES = ("wq", "wk", "wv", "bq", "bk", "bv")
HEAD_FORMS = ("fused", "per_head", "axis")
HEAD_FORM_ROLES = (*WEIGHT_ROLES, "q", "k", "v")   # the roles that hold one matrix or vector per head
PARAM_KEYS = ("name", "role", "heads", "head", "keys", "attributes", "items", "form", "shape")
# The roles that hold other roles, each with the field naming what it holds: a dict by key
# (`p["w"]`, or passed on as `f(**p)`), an object by attribute (`p.w`), a tuple by place
# (`q, k, v, p = cache`: items = ["q", "k", "v", "weights"]; each held Param's key is its index).
CONTAINERS = {"dict": "keys", "object": "attributes", "tuple": "items"}
# A dict of dicts (or an object of objects) at most: what a call hands back after it is read
# two levels deep (grader/kernel_side/wire.py, MAX_DEPTH), and picoGPT's `attn["c_attn"]["w"]`
# is as deep as a course's weights go.
MAX_NESTING = 2
MASK_ROLES = ("mask", "key_padding")
# The weights of an additive (Bahdanau) score network, which replace the dot product.
SCORE_ROLES = ("score_wq", "score_wk", "score_w", "score_v")
# The parts of a transformer block around attention (reference/blocks.py), by the unit they make.
NORM_ROLES = ("ln_gamma", "ln_beta")
BLOCK_NORM_ROLES = ("ln1_gamma", "ln1_beta", "ln2_gamma", "ln2_beta")
FFN_ROLES = ("ff_w1", "ff_b1", "ff_w2", "ff_b2")
BLOCK_ROLES = (*NORM_ROLES, *BLOCK_NORM_ROLES, *FFN_ROLES)
# The sequences keys and values are projected from, when it is not X (self-attention).
SEQUENCE_ROLES = ("memory", "key_tokens", "value_tokens")


@dataclass(frozen=True)
class Param:
    name: str
    role: str
    heads: str = "fused"        # fused: heads side by side | per_head: a list | axis: one array, heads axis first
    head: int | None = None     # this one head's matrix (1-based), for conventions with a fixed head count
    keys: tuple = ()            # role dict: (key, Param) pairs; role object: (attribute, Param) pairs
    form: str | None = None     # role mask or key_padding: how the course spells it (reference/masks.py FORMS)
    shape: str | None = None    # role mask or key_padding: MASK_SHAPES; None: the default

    @property
    def mask_form(self) -> str:
        """The form of a mask or key-padding param, which parse_param requires of each."""
        if self.form is None:
            raise ValueError(f"param {self.name} is not a mask, so it has no form")
        return self.form


def flattened(params) -> tuple[Param, ...]:
    """Every role these params hold: each param, what a dict or an object holds (nested ones
    included) in its place."""
    return tuple(inner for p in params
                 for inner in (flattened(i for _, i in p.keys) if p.role in CONTAINERS else [p]))


def fail(where: str, message: str) -> NoReturn:
    raise SpecError(f"{where}: {message}")


def choice(raw: dict, key: str, allowed: tuple, default, where: str):
    value = raw.get(key, default)
    # Exactly one of the values allowed: neither `true` for 1 nor 1.0 for 1.
    if not any(type(value) is type(a) and value == a for a in allowed):
        fail(where, f"{key} must be one of {', '.join(map(repr, allowed))}, not {value!r}"[:200])
    return value


def parse_param(raw, where: str, depth: int = 0) -> Param:
    """One param from its TOML table; `depth`: how many dicts or objects hold it."""
    if isinstance(raw, str):
        fail(where, f"param {raw!r} needs a role: write {{ name = {raw!r}, role = \"...\" }}"[:200])
    if not isinstance(raw, dict):
        fail(where, "each param must be a table { name = ..., role = ... }")
    unknown = sorted(set(raw) - set(PARAM_KEYS))
    if unknown:
        fail(where, f"unknown key {unknown[0]!r} in a param (known: {', '.join(PARAM_KEYS)})"[:200])
    name, role = raw.get("name"), raw.get("role")
    if not isinstance(name, str) or not name.isidentifier():
        fail(where, f"param name {name!r} is not a Python parameter name"[:200])
    if not isinstance(role, str):
        fail(where, f"param {name}: role must be the name of a role, not {role!r}"[:200])
    if role in NOT_SUPPORTED_YET:
        fail(where, f"param {name}: role {role!r} ({NOT_SUPPORTED_YET[role]}) is not supported yet")
    if role not in ROLES:
        fail(where, f"param {name}: unknown role {role!r} (roles: {', '.join(ROLES)})"[:300])
    heads = choice(raw, "heads", HEAD_FORMS, "fused", f"{where}: param {name}")
    head = raw.get("head")
    if "heads" in raw and role not in HEAD_FORM_ROLES:
        fail(where, f"param {name}: heads applies to {', '.join(HEAD_FORM_ROLES)} only")
    if head is not None:
        if role not in WEIGHT_ROLES:
            fail(where, f"param {name}: head applies to {', '.join(WEIGHT_ROLES)} only")
        if isinstance(head, bool) or not isinstance(head, int) or not 1 <= head <= 16:
            fail(where, f"param {name}: head must be a head number from 1 to 16, not {head!r}"[:200])
        if "heads" in raw:
            fail(where, f"param {name}: give either head (one head's matrix) or heads, not both")
    form = None
    if role in MASK_ROLES:
        if depth:
            fail(where, f"param {name}: a mask is its own param, not a key of a dict (or an object's attribute)")
        form = choice(raw, "form", tuple(FORMS), None, f"{where}: param {name}")
    else:
        for key in ("form", "shape"):
            if key in raw:
                fail(where, f"param {name}: {key} applies to roles \"mask\" and \"key_padding\" only")
    shape = raw.get("shape")
    if shape is not None and not isinstance(shape, str):
        fail(where, f"param {name}: shape must be text such as \"B x Lq x Lk\", not {shape!r}"[:200])
    keys: tuple = ()
    if role in CONTAINERS:
        keys = _held(raw, name, role, where, depth)
    for other, field in CONTAINERS.items():
        if field in raw and role != other:
            fail(where, f"param {name}: {field} applies to role \"{other}\" only")
    return Param(name, role, heads, head, keys, form, shape)


def _items(items, name: str, where: str, depth: int) -> tuple:
    """What a tuple holds, in order: ("0", Param), ("1", Param), ..., each a role as text."""
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        fail(where, f"param {name}: a tuple needs items = [\"<role>\", ...], its roles in order")
    if depth >= MAX_NESTING:
        fail(where, f"param {name}: dicts, objects and tuples nest {MAX_NESTING} deep at most")
    return tuple((str(i), parse_param({"name": f"{name}_{i}", "role": role}, f"{where}: param {name} item {i}",
                                      depth + 1))
                 for i, role in enumerate(items))


def _held(raw: dict, name: str, role: str, where: str, depth: int) -> tuple:
    """What a dict or an object holds: (key or attribute, Param) pairs. Each value is a role,
    a table of the same form (a dict in a dict, an object in an object), or a table saying
    which it is: { role = "object", attributes = { ... } } (or role = "dict", keys = ...)."""
    field = CONTAINERS[role]
    if role == "tuple":
        return _items(raw.get(field), name, where, depth)
    what = "key" if role == "dict" else "attribute"
    table = raw.get(field)
    if not isinstance(table, dict) or not table:
        article = "an" if role == "object" else "a"
        fail(where, f"param {name}: {article} {role} needs {field} = {{ <{what}> = \"<role>\", ... }}")
    if depth >= MAX_NESTING:
        fail(where, f"param {name}: dicts and objects nest {MAX_NESTING} deep at most (a dict of dicts)")
    held = []
    for key, value in table.items():
        if role == "object" and (not key.isidentifier() or key.startswith("__")):
            fail(where, f"param {name}: attribute {key!r} is not a name to set on an object"[:200])
        inner = f"{name}_{key}" if key.isidentifier() else name
        inner_where = f"{where}: param {name} {what} {key!r}"
        if not isinstance(value, dict):
            spelled = {"name": inner, "role": value}
        elif "role" not in value:
            spelled = {"name": inner, "role": role, field: value}
        elif isinstance(value["role"], str) and value["role"] in CONTAINERS and "name" not in value:
            spelled = {**value, "name": inner}
        else:
            fail(inner_where, f"a{'n' * (what == 'attribute')} {what} holds a role as text ({key} = \"wq\"), a "
                              f"table of {what}s, or {{ role = \"dict\" or \"object\", ... }}, not {value!r}"[:200])
        held.append((key, parse_param(spelled, inner_where, depth + 1)))
    return tuple(held)
