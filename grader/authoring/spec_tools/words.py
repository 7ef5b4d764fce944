"""A proposed convention in words, and what sets another fitting one apart from it: what
`grader spec infer` prints, and the description it writes in the spec."""
from __future__ import annotations

from grader.authoring.spec_tools.probe import Fit
from grader.calling.class_table import SIZE_ROLES
from grader.calling.params import CONTAINERS


def _held_words(kind: str, held: dict) -> str:
    """"a dict of c_attn=(a dict of w=wqkv and b=bqkv) and ...", "an object of w=wqkv and b=bqkv"."""
    def one(value) -> str:
        if isinstance(value, str):
            return value
        if "role" in value:   # a dict in an object, or an object in a dict
            return f"({_held_words(value['role'], value[CONTAINERS[value['role']]])})"
        return f"({_held_words(kind, value)})"
    return f"a{'n' * (kind == 'object')} {kind} of " + " and ".join(f"{k}={one(v)}" for k, v in held.items())


def _params_words(params: list[dict]) -> str:
    """Each parameter's role, with what it says beyond it: "Q=q, mask=mask (form keep)"."""
    said = []
    for p in params:
        role = f"a tuple of ({', '.join(p['items'])})" if p["role"] == "tuple" else \
            _held_words(p["role"], p[CONTAINERS[p["role"]]]) if p["role"] in CONTAINERS else p["role"]
        extra = [f"form {p['form']}" if "form" in p else "", f"head {p['head']}" if "head" in p else "",
                 f"{p['heads']} heads" if "heads" in p else "", f"shape {p['shape']}" if "shape" in p else ""]
        extra = [e for e in extra if e]
        said.append(f"{p['name']}={role}" + (f" ({', '.join(extra)})" if extra else ""))
    return ", ".join(said)


def describe(table: dict) -> str:
    """A convention table in words: each parameter's role, then what is not the default."""
    words = [_params_words(table["params"])]
    made = table.get("class")
    if made:
        built = ", ".join(f"{c['name']}={c['role']}" for c in made.get("construct", []))
        weighted = any(c["role"] not in SIZE_ROLES and c["role"] not in ("n_heads", "scale", "causal")
                       for c in made.get("construct", []))
        given = f"the weights through {made['init']['method']}(...)" if "init" in made else \
            "the weights through attributes " + ", ".join(made["attributes"]) if "attributes" in made else \
            "the weights through the constructor" if weighted else "holding no weights"
        words = [f"an object made as ({built}), {given}; its {made['method']} takes " + words[0]]
        if made.get("before"):
            first = made["before"]
            words[0] += f", after its {first['method']} took " + _params_words(first["params"])
        if made.get("kept"):
            words.append("keeping " + ", ".join(f"the {part} in self.{name}" for name, part in made["kept"].items()))
    if table.get("globals"):
        words.append("weights read from the notebook's globals " + ", ".join(
            f"{n}={r}" for n, r in table["globals"].items()))
    if table.get("block"):
        words.append({"post_ln": "a post-LN block (LN(x + f(x)))", "pre_ln": "a pre-LN block (x + f(LN(x)))"}
                     [table["block"]])
    if table.get("activation"):
        words.append(f"activation {table['activation']}")
    if table.get("batch") == "any":
        words.append("any leading batch axes")
    elif table.get("batch"):
        words.append("a leading batch axis")
    if table.get("tokens") == "columns":
        words.append("tokens as columns")
    if table.get("weights") == "out_in":
        words.append("framework layout x @ W.T")
    if "axis" in table:
        words.append(f"softmax over axis {table['axis']}")
    if table.get("vector"):
        helper = any(p["role"] == "scores" for p in table["params"])
        words.append("a softmax over one vector (a row of scores)" if helper else "one query, a vector")
    if table.get("scaled") is False:
        words.append("unscaled")
    if table.get("square"):
        words.append("d_k = D")
    if table.get("causal"):
        words.append("causal mask built inside")
    if "fully_masked" in table:
        words.append(f"a fully masked row gives {table['fully_masked']}")
    returns = table["returns"]
    if isinstance(returns, dict):
        shown = "a dict: " + ", ".join(f"{k!r} the {part}" for part, k in returns.items())
    elif isinstance(returns, list):
        shown = "(" + ", ".join(returns) + ")"
    else:
        shown = returns
    if table.get("per_head_returns") == "axis":
        shown += ", per head along a heads axis"
    return "; ".join([*words, f"returns {shown}"])


# A choice that only narrows the cases fits whenever the general one does; it is still said,
# since it earns full marks for students the general one does not: with d_k = D (square),
# dividing the scores by sqrt(D) is right too.
NARROWING = {("square", True): "square = true (every case has d_k = D, as square weights give: dividing by "
                               "sqrt(D) is then right too)"}
# A choice that asks more of students than the one it is derived from, said for the staff to
# decide: the same batch on two leading axes.
STRICTER = {("batch", "any"): 'batch = "any" (the batch on two leading axes, as (N, ..., L, E): it fails students '
                              "whose code handles one leading axis only)"}
# The one-axis form beside a chosen batch on any leading axes.
ONE_AXIS = "batch = true (one leading batch axis: students whose code handles only one earn full marks too)"


def _choice_words(dim: str, option) -> str:
    if (dim, option) in NARROWING:
        return NARROWING[(dim, option)]
    if (dim, option) in STRICTER:
        return STRICTER[(dim, option)]
    if dim.startswith("form:"):
        return f"{dim.split(':', 1)[1]} in form {option}"
    if dim.startswith("shape:"):
        return f"{dim.split(':', 1)[1]} of shape {option or 'B x ... (the default)'}"
    return f"{dim} = {str(option).lower() if isinstance(option, bool) else option}"


def differences(chosen: Fit, other: Fit) -> str | None:
    """What sets another fitting candidate apart from the chosen one, in words, or None when
    nothing does."""
    mine, theirs = dict(chosen.choices), dict(other.choices)
    changed = [(dim, option) for dim, option in theirs.items() if dim != "role" and mine.get(dim) != option]
    words = [label for dim, label in other.choices if dim == "role" and (dim, label) not in chosen.choices]
    words += [ONE_AXIS if (dim, option, mine.get(dim)) == ("batch", True, "any") else _choice_words(dim, option)
              for dim, option in changed]
    if other.table.get("returns") != chosen.table.get("returns"):
        words.append(f"returns {other.table['returns']}")
    kept = other.table.get("class", {}).get("kept")
    if kept != chosen.table.get("class", {}).get("kept"):
        words.append(f"keeps {kept}" if kept else "keeps nothing")
    return ", ".join(words) or None
