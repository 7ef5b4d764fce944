"""Calling conventions: how one canonical case becomes a student function's arguments, and
which canonical parts its return value holds.

Every check is written once against canonical parts (tokens as rows); a convention is the
only place that knows about argument order, transposes, fused heads and biases. A convention
is data: a TOML table, either inline in a course's spec or by name from the built-in ones in
reference/conventions.toml, read by `parse_convention`. This module is the one home of what
its roles, layouts and returns mean (docs/specs.md, "Writing an assignment spec", is their
reference for course staff).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from types import SimpleNamespace
from typing import Any, Callable, TypeVar

import numpy as np

from grader.reference.attention import Case, attention
from grader.reference.blocks import ACTIVATIONS, DEFAULT_EPS
from grader.reference.masks import FORMS, FULLY_MASKED_RULES

from grader.calling.class_table import ClassCall, parse_class, parse_globals, parse_kept
from grader.calling.params import (BLOCK_NORM_ROLES, BLOCK_ROLES, FFN_ROLES, MASK_ROLES, NORM_ROLES, SCORE_ROLES,
                                   SEQUENCE_ROLES, WEIGHT_ROLES, Param, choice, fail, flattened, parse_param)
from grader.toml_text import load_toml

# A backward pass's parts (reference/backward.py): the gradients of the loss with respect to Q,
# K and V; with respect to the token sequences the projections read (dx: X's, the queries' in
# cross-attention and with three inputs, else all three's; dmemory: the keys' and values'
# memory; dkey_tokens, dvalue_tokens: the key and value inputs passed apart); and with respect
# to the projections' weights and biases, laid out as the weights are.
QKV_GRADIENTS = ("dq", "dk", "dv")
TOKEN_GRADIENTS = ("dx", "dmemory", "dkey_tokens", "dvalue_tokens")
WEIGHT_GRADIENTS = ("dwq", "dbq", "dwk", "dbk", "dwv", "dbv", "dwo", "dbo")
GRADIENT_PARTS = (*QKV_GRADIENTS, *TOKEN_GRADIENTS, *WEIGHT_GRADIENTS)
# The role each token or weight gradient is of.
GRADIENT_OF = {"dx": "x", "dmemory": "memory", "dkey_tokens": "key_tokens", "dvalue_tokens": "value_tokens",
               **{part: part[1:] for part in WEIGHT_GRADIENTS}}

# How tokens index each canonical part, for the permutation property. A weight's gradient is a
# sum over the tokens: no permutation of them moves it.
_NO_TOKEN_AXES = {part: () for part in WEIGHT_GRADIENTS}
TOKEN_AXES = {"output": (0,), "q": (0,), "k": (0,), "v": (0,), "heads": (0,), "dq": (0,), "dk": (0,), "dv": (0,),
              "scores": (0, 1), "weights": (0, 1), "weights_per_head": (0, 1), "scores_per_head": (0, 1),
              "mean_weights": (0, 1), **{part: (0,) for part in TOKEN_GRADIENTS}, **_NO_TOKEN_AXES}
# In cross-attention the keys and values come from the memory: permuting the query tokens
# moves the queries' axis only, and permuting the memory's rows moves the keys' axis only.
QUERY_AXES = {"output": (0,), "q": (0,), "k": (), "v": (), "heads": (0,), "dq": (0,), "dk": (), "dv": (),
              "scores": (0,), "weights": (0,), "weights_per_head": (0,), "scores_per_head": (0,),
              "mean_weights": (0,), "dx": (0,), "dmemory": (), "dkey_tokens": (), "dvalue_tokens": (),
              **_NO_TOKEN_AXES}
MEMORY_AXES = {"output": (), "q": (), "k": (0,), "v": (0,), "heads": (), "dq": (), "dk": (0,), "dv": (0,),
               "scores": (1,), "weights": (1,), "weights_per_head": (1,), "scores_per_head": (1,),
               "mean_weights": (1,), "dx": (), "dmemory": (0,), "dkey_tokens": (0,), "dvalue_tokens": (0,),
               **_NO_TOKEN_AXES}

PART_WORDS = {"output": "output", "weights": "attention weights", "scores": "attention scores",
              "weights_per_head": "per-head attention weights", "scores_per_head": "per-head attention scores",
              "heads": "heads' outputs (before the output projection)", "q": "Q", "k": "K", "v": "V",
              "mean_weights": "attention weights averaged over the heads",
              "dq": "gradient dQ", "dk": "gradient dK", "dv": "gradient dV",
              "dx": "gradient of the query input", "dmemory": "gradient of the memory",
              "dkey_tokens": "gradient of the key input", "dvalue_tokens": "gradient of the value input",
              **{part: f"gradient d{part[1].replace('w', 'W')}_{part[2]}" for part in WEIGHT_GRADIENTS}}

# The parts whose words are plural ("the attention weights were ...").
PLURAL_PARTS = ("weights", "scores", "weights_per_head", "scores_per_head", "heads", "mean_weights")

# Canonical parts that are one array per head.
PER_HEAD_PARTS = ("weights_per_head", "scores_per_head", "heads")

# Canonical parts that are attention weights, each query's a distribution over the keys: one
# head's, each head's, or their mean over the heads (PyTorch's MultiheadAttention returns that
# by default, average_attn_weights=True: B x Lq x Lk where each head's are B x H x Lq x Lk).
WEIGHT_PARTS = ("weights", "weights_per_head", "mean_weights")

RETURN_NAMES = ("output", "weights", "scores", "q", "k", "v", "heads", "mean_weights", *GRADIENT_PARTS)
# Not a part: the place in a returned tuple where a forward hands back its cache for its
# backward (`return out, cache`), read past, never graded.
CACHE = "cache"

# The stages of the computation: what an input role starts from and a returned part ends at.
# Which steps lie in between decides the mistakes a function can make (grader/judging/explain.py).
INPUT_STAGE = {"x": 0, "q": 1, "k": 1, "v": 1, "kv": 1, "scores": 2}
RETURN_STAGE = {"q": 1, "k": 1, "v": 1, "scores": 2, "weights": 3, "mean_weights": 3, "heads": 4, "output": 4,
                **{part: 5 for part in GRADIENT_PARTS}}
STEPS = ((1, "projections"), (2, "scores"), (3, "softmax"))

CONVENTION_KEYS = ("description", "params", "returns", "weights", "tokens", "scaled", "axis", "square",
                   "per_head_returns", "batch", "causal", "fully_masked", "class", "vector", "globals",
                   "block", "activation", "eps")
# The shapes a mask may be passed in, unbatched and batched; the first is the default. A mask
# shared by the whole batch is one Lq x Lk; "B x 1 x ..." broadcasts over a heads axis.
MASK_SHAPES = {("mask", False): ("Lq x Lk",), ("mask", True): ("B x Lq x Lk", "B x 1 x Lq x Lk", "Lq x Lk"),
               ("key_padding", False): ("Lk",), ("key_padding", True): ("B x Lk", "B x 1 x 1 x Lk")}
# The roles whose argument is one per batch element (stacked on a leading batch axis when
# batched); every other role (weights, biases, flags, the head count) is shared by the batch.
PER_ELEMENT_ROLES = ("x", *SEQUENCE_ROLES, "q", "k", "v", "kv", "scores", "mask", "key_padding", "d_output",
                     "weights")
# What a row with no key left to attend gives when a convention does not say: the rule its
# mask form implies by arithmetic (an additive -inf mask gives NaN), else all weights zero.
DEFAULT_FULLY_MASKED = "zeros"


@dataclass(frozen=True)
class Convention:
    name: str
    description: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]                # canonical parts, in the order they are returned
    return_keys: tuple[str, ...] | None = None   # a dict return: each part's key
    weights: str = "in_out"     # in_out: x @ W | out_in: x @ W.T (the framework layout)
    columns: bool = False       # tokens are columns: every returned matrix comes back transposed
    scaled: bool = True
    square: bool = False        # per-head dimension must equal D
    per_head_returns: str = "list"   # list | axis: how per-head parts are shown (both are read)
    causal_inside: bool = False      # the function builds a causal mask itself, with no argument
    fully_masked: str = DEFAULT_FULLY_MASKED   # what a row with every key masked gives
    batched: bool = False       # a leading batch axis on every per-element argument and return
    # batch = "any": the batch comes on two leading axes (B elements as 2 x B/2, or 1 x B), as a
    # function written for any leading axes (N, ..., L, E) is called; what it returns is read back
    # with those two axes merged.
    leading_axes: bool = False
    class_call: ClassCall | None = None   # a class: how its object is made; params are its method's
    # A class's parts read off the object after the call, as if returned: (attribute, canonical
    # part), those parts being the last of `returns`.
    kept: tuple[tuple[str, str], ...] = ()
    # A softmax helper over one vector: it is given one query's row of scores (1-D) and returns
    # that row's weights; canonically a 1 x Lk matrix.
    vector: bool = False
    # Weights the function reads from the notebook's globals (a lab's `Wq = ...` cell): the
    # grader sets each, for each call, in the function's own copy of the notebook's namespace.
    global_params: tuple[Param, ...] = ()
    # A transformer block around its attention: "post_ln" or "pre_ln" (reference/blocks.py);
    # its feed-forward network's activation and its layer norms' eps (also a layer norm's, or a
    # network's, graded on its own).
    block: str | None = None
    activation: str = "relu"
    eps: float = DEFAULT_EPS
    # Where in the returned tuple a forward hands back its cache (`return out, cache`, returns =
    # ["output", "cache"]): a value its backward takes, not graded here.
    cache_at: int | None = None
    flat: tuple[Param, ...] = field(default=(), compare=False)   # every role, dicts' keys included

    # What follows is derived from the declared roles and returns, never declared.

    def __hash__(self) -> int:
        """The hash of the compared fields, as the generated one, kept once computed: a
        convention keys the judging's caches, hundreds of times a submission, and hashing every
        field each time cost more than the lookups."""
        kept = self.__dict__.get("_hash")
        if kept is None:
            kept = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", kept)
        return kept

    def __getstate__(self) -> dict:
        # A string's hash differs from process to process: a pickled convention (a Dask
        # worker's task) must not carry this one's.
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def object_call(self) -> ClassCall:
        """How a class-based convention's object is made; a function's convention has none."""
        if self.class_call is None:
            raise ValueError("the convention calls a function, not a class")
        return self.class_call

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @cached_property
    def roles(self) -> frozenset[str]:
        return frozenset(p.role for p in self.flat)

    @property
    def unit(self) -> str:
        """What the function computes: attention, a transformer block around it (post_ln or
        pre_ln), or one of a block's parts on its own (layer_norm, feed_forward)."""
        if self.block is not None:
            return self.block
        if self.roles & set(NORM_ROLES):
            return "layer_norm"
        if self.roles & set(FFN_ROLES):
            return "feed_forward"
        return "attention"

    @property
    def attends(self) -> bool:
        """It computes attention (alone, or in a block)."""
        return self.unit not in ("layer_norm", "feed_forward")

    @property
    def norm_reads_tokens(self) -> bool:
        """A layer norm reads the tokens X as given: a layer norm alone, or pre-LN's first."""
        return self.unit in ("layer_norm", "pre_ln")

    @property
    def input_stage(self) -> int:
        return min(INPUT_STAGE[r] for r in self.roles if r in INPUT_STAGE)

    @property
    def fixed_heads(self) -> int | None:
        """How many heads every case has, or None when any number H may be drawn."""
        indexed = {p.head for p in self.flat if p.head is not None}
        if indexed:
            return len(indexed)
        if "n_heads" in self.roles or any(p.heads != "fused" for p in self.flat):
            return None
        return 1

    @property
    def heads(self) -> str:
        """one | fixed (a set number of heads, each passed on its own) | many."""
        fixed = self.fixed_heads
        return "many" if fixed is None else "one" if fixed == 1 else "fixed"

    def head_count(self, requested: int) -> int:
        return self.fixed_heads or requested

    @property
    def splits_heads(self) -> bool:
        """The function splits fused matrices into heads itself (so it can split them wrongly)."""
        return self.heads == "many" and any(p.heads == "fused" and p.role in ("wq", "wk", "wv", "wqkv", "q", "k", "v")
                                            for p in self.flat)

    @property
    def bias_roles(self) -> set[str]:
        found = {p.role for p in self.flat if p.role in ("bq", "bk", "bv")}
        return found | ({"bq", "bk", "bv"} if "bqkv" in self.roles else set())

    @property
    def biases(self) -> bool:
        return bool(self.bias_roles)

    @property
    def projection(self) -> bool:
        return "wo" in self.roles

    @property
    def projection_bias(self) -> bool:
        return "bo" in self.roles

    @property
    def additive(self) -> bool:
        """Additive (Bahdanau) attention: a score network v . tanh(q W1 + k W2) scores each
        query and key, instead of their dot product."""
        return bool(self.roles & set(SCORE_ROLES))

    @property
    def backward(self) -> bool:
        """A backward pass: given the upstream gradient (role d_output), it returns the
        gradients of the loss with respect to Q, K and V (reference/backward.py)."""
        return "d_output" in self.roles

    @property
    def gradient_parts(self) -> tuple[str, ...]:
        """The gradients a backward pass may return: given Q, K and V, theirs; given the tokens
        and the projections, those of the inputs and weights it takes."""
        if "x" not in self.roles:
            return QKV_GRADIENTS
        return tuple(p for p in TOKEN_GRADIENTS + WEIGHT_GRADIENTS if GRADIENT_OF[p] in self.roles)

    @property
    def given_weights(self) -> bool:
        """A backward pass handed the forward's attention weights P (its cache's), which it
        takes the backward through instead of computing them again."""
        return "weights" in self.roles

    @property
    def tied_values(self) -> bool:
        """The keys are the values (role kv): one array, as an encoder's states are both."""
        return "kv" in self.roles

    @property
    def cross(self) -> bool:
        """Keys and values come from a sequence other than X (the memory, or the key and value
        inputs), queries from X. Additive attention's cases are always so: it scores a
        decoder's queries against an encoder's keys, of another length and width."""
        return bool(self.roles & set(SEQUENCE_ROLES)) or self.additive

    @property
    def three_inputs(self) -> bool:
        """Queries, keys and values come from three sequences passed apart (`forward(query, key,
        value)`), which are X itself in self-attention."""
        return "value_tokens" in self.roles

    @property
    def sized_by_model(self) -> bool:
        """An object made for one model width (`MultiHeadAttention(embed_dim, num_heads)`): its
        key and value layers take inputs of that width, as PyTorch's do unless given kdim and vdim."""
        return self.class_call is not None and any(p.role == "d_model" for p in self.class_call.construct)

    @property
    def packed(self) -> bool:
        """Q, K and V are projected by one matrix side by side, so the sequences have X's width."""
        return "wqkv" in self.roles

    def token_axes(self, part: str) -> tuple:
        """The axes of a returned part that the query tokens index (for the permutation check)."""
        return self._shifted((QUERY_AXES if self.cross else TOKEN_AXES)[part])

    def memory_axes(self, part: str) -> tuple:
        """The axes of a returned part that the memory's rows (the keys) index."""
        return self._shifted(MEMORY_AXES[part])

    @property
    def query_axis(self) -> int:
        """The axis of a returned part (each head's array) that runs over the queries."""
        return 1 if self.batched else 0

    def _shifted(self, axes: tuple) -> tuple:
        return tuple(a + 1 for a in axes) if self.batched else axes

    @property
    def masked(self) -> bool:
        """The function takes an attention mask or a key-padding mask as an argument."""
        return bool(self.roles & set(MASK_ROLES))

    @property
    def key_padding(self) -> bool:
        return "key_padding" in self.roles

    @property
    def stacked_heads(self) -> bool:
        """A batched function that holds its heads on an array axis (B x H x N x d): it splits
        fused projections into it itself, or is given them split."""
        return self.batched and self.heads == "many" and (
            self.splits_heads or any(p.heads == "axis" for p in self.flat))

    def mask_shape(self, param: Param) -> str:
        return param.shape or MASK_SHAPES[(param.role, self.batched)][0]

    @property
    def causal(self) -> bool:
        """Every case is causal: the function builds the mask itself, or is told to by a flag
        (always set: the grader asks for the causal computation)."""
        return self.causal_inside or "causal" in self.roles

    @property
    def steps(self) -> frozenset:
        """The steps of attention its functions compute themselves: from its inputs to its last return."""
        if not self.attends or self.given_weights:
            return frozenset()
        last = max(RETURN_STAGE[p] for p in self.return_names)
        return frozenset(step for stage, step in STEPS if self.input_stage < stage <= last)

    @property
    def int_inputs(self) -> str:
        """Which inputs an integer test makes integral: x | qkv | none (scores stay real)."""
        return {0: "x", 1: "qkv"}.get(self.input_stage, "none")

    @property
    def return_names(self) -> tuple[str, ...]:
        return tuple(_RETURN_NAME.get(p, p) for p in self.returns)

    @property
    def returned(self) -> tuple[str, ...]:
        """The parts the call returns: every part but those the object keeps."""
        kept = {part for _, part in self.kept}
        return tuple(p for p in self.returns if p not in kept)

    @property
    def returns_tuple(self) -> bool:
        return self.return_keys is None and len(self.returned) + (self.cache_at is not None) > 1

    def prepare(self, case: Case) -> Case:
        """The case as this convention's function computes it. A function that takes a mask is
        handed one even where the case has none (a sheet's data): all True, which a mistake can
        still invert."""
        if "mask" in self.roles and case.mask is None:
            case = replace(case, mask=np.ones((case.n, case.lk), dtype=bool))
        return replace(case, scaled=self.scaled and not case.scale_off, causal=self.causal,
                       fully_masked=self.fully_masked,
                       batch_rest=tuple(self.prepare(e) for e in case.batch_rest))

    def elements(self, case: Case) -> list[Case]:
        """The prepared cases a call computes on: the batch's elements, or the one case."""
        prepared = self.prepare(case)
        return list(prepared.elements) if self.batched else [prepared]

    def predict(self, case: Case, compute, elements: list[Case] | None = None) -> dict:
        """The canonical parts a computation gives on a case (`compute` maps a batch's elements
        to attention()-structured results: the reference's or a mistake's); a batched
        convention's are each element's, stacked on a leading batch axis. `elements`: the
        case's, as elements() gives them, when the caller has them already."""
        elements = self.elements(case) if elements is None else elements
        per_element = [self.expected(r, e) for r, e in zip(compute(elements), elements)]
        if not self.batched:
            return per_element[0]
        stacked = stack_parts(per_element)
        for part in WEIGHT_GRADIENTS:
            if part in stacked:   # the weights are shared by the batch: their gradient sums over it
                stacked[part] = stacked[part].sum(axis=0)
        return stacked

    def expected_parts(self, case: Case, elements: list[Case] | None = None) -> dict:
        return self.predict(case, lambda elements: [attention(e) for e in elements], elements)

    def expected(self, result: dict, case: Case) -> dict:
        """The canonical parts this convention returns, from a computation's result (the
        reference's or a mistake's: both have attention.attention's structure)."""
        heads = result["heads"]
        parts = {}
        for part in self.returns:
            if part == "output":
                parts[part] = result["output"]
            elif part in ("weights_per_head", "scores_per_head"):
                parts[part] = [h[part.removesuffix("_per_head")] for h in heads]
            elif part == "heads":
                parts[part] = [h["output"] for h in heads]
            elif part == "mean_weights":
                if len({h["weights"].shape for h in heads}) > 1:
                    continue   # a computation whose heads' weights differ in shape predicts no mean
                parts[part] = mean_over_heads([h["weights"] for h in heads])
            elif part in ("q", "k", "v") and len(heads) > 1:
                parts[part] = np.concatenate([h[part] for h in heads], axis=1)
            elif part in TOKEN_GRADIENTS or part in WEIGHT_GRADIENTS:
                if "gradients" not in result:
                    continue   # a computation whose shapes the projections cannot take back predicts none
                parts[part] = self._gradient(part, result["gradients"])
            else:
                parts[part] = heads[0][part]
        if self.vector:
            parts = {part: vector_row(value) for part, value in parts.items()}
        return parts

    def _gradient(self, part: str, gradients: dict) -> np.ndarray:
        """A token sequence's or a weight's gradient (reference/backward.py's), as this
        convention's function returns it: X's includes the keys' and values' where X is all
        three (self-attention given X once); a weight's is laid out as the weight is."""
        if part == "dx":
            apart = self.roles & {"memory", "key_tokens", "value_tokens"}
            return gradients["dx_query"] if apart else \
                gradients["dx_query"] + gradients["dx_keys"] + gradients["dx_values"]
        if part == "dmemory":
            return gradients["dx_keys"] + gradients["dx_values"]
        if part in ("dkey_tokens", "dvalue_tokens"):
            return gradients["dx_keys" if part == "dkey_tokens" else "dx_values"]
        return self._matrix(gradients[part]) if part.startswith("dw") else gradients[part]

    def call_arguments(self, case: Case) -> list:
        elements = self.elements(case)
        computed: dict = {}

        def reference(element: Case) -> dict:
            key = id(element)
            if key not in computed:
                computed[key] = attention(element)
            return computed[key]

        def argument(param: Param, element: Case):
            return self._argument(param, element, lambda: reference(element))

        def batched(param: Param):
            """One argument for the batch: what is one per element stacked (a dict's or an
            object's too, as a backward pass's cache holds Q, K and V), the rest shared."""
            if param.role in PER_ELEMENT_ROLES:
                return self._batched(param, [argument(param, e) for e in elements])
            if param.role == "dict":
                return {key: batched(inner) for key, inner in param.keys}
            if param.role == "object":
                return SimpleNamespace(**{name: batched(inner) for name, inner in param.keys})
            if param.role == "tuple":
                return tuple(batched(inner) for _, inner in param.keys)
            return argument(param, elements[0])

        if not self.batched:
            arguments = [argument(p, elements[0]) for p in self.params]
        else:
            arguments = [batched(p) for p in self.params]
        return self._one_array_for_x(arguments, elements)

    def _one_array_for_x(self, arguments: list, elements: list[Case]) -> list:
        """Where X is the keys' and values' sequence too (self-attention: no memory), the key
        and value inputs are X's own argument, the same array object three times, as a caller
        writing `attn(x, x, x)` passes it (a function may take another path when `key is query`)."""
        if any(e.memory is not None for e in elements):
            return arguments
        given = dict(zip((p.role for p in self.params), arguments))
        return [given["x"] if p.role in ("key_tokens", "value_tokens") and "x" in given else a
                for p, a in zip(self.params, arguments)]

    def _batched(self, param: Param, values: list):
        """One argument for the whole batch from each element's: stacked on a leading axis
        (each head's when they come as a list), or in the mask's declared shape; on two leading
        axes for batch = "any"."""
        if isinstance(values[0], list):
            return [self._spread(np.stack([v[h] for v in values])) for h in range(len(values[0]))]
        if param.role in MASK_ROLES:
            shape = self.mask_shape(param)
            if shape == "Lq x Lk":
                return values[0]   # one mask for the whole batch: the cases share it (cases.py)
            stacked = np.stack(values)
            extra = shape.count(" 1 ")
            return self._spread(stacked.reshape(stacked.shape[0], *(1,) * extra, *stacked.shape[1:]))
        return self._spread(np.stack(values))

    def _spread(self, stacked: np.ndarray) -> np.ndarray:
        """A batch's leading axis as two (batch = "any"): 2 x B/2 where B is even, else 1 x B."""
        if not self.leading_axes:
            return stacked
        b = stacked.shape[0]
        lead = (2, b // 2) if b % 2 == 0 else (1, b)
        return stacked.reshape(*lead, *stacked.shape[1:])

    def _argument(self, param: Param, case: Case, reference):
        role = param.role
        if role == "dict":
            return {key: self._argument(inner, case, reference) for key, inner in param.keys}
        if role == "object":
            return SimpleNamespace(**{name: self._argument(inner, case, reference) for name, inner in param.keys})
        if role == "tuple":
            return tuple(self._argument(inner, case, reference) for _, inner in param.keys)
        if role == "n_heads":
            return len(case.heads)
        if role == "scale":
            return self.scaled and not case.scale_off
        if role == "causal":
            return True
        if role == "mask":
            return FORMS[param.mask_form].to_course(given_keep(case, with_key_padding=not self.key_padding))
        if role == "key_padding":
            real = np.ones(case.lk, dtype=bool) if case.key_mask is None else case.key_mask
            return FORMS[param.mask_form].to_course(real)
        if role == "bo":
            return self._bias(_given(case.bo, "an output projection bias"))
        if role == "d_output":
            return self._tokens(_given(case.d_output, "upstream gradient"))
        if role == "x":
            return self._tokens(case.x)
        if role in ("memory", "key_tokens"):
            return self._tokens(case.keys)
        if role == "value_tokens":
            return self._tokens(case.value_source)
        if role == "wo":
            return self._matrix(_given(case.wo, "an output projection"))
        if role == "wqkv":
            return self._matrix(np.concatenate([case.fused(name) for name in ("wq", "wk", "wv")], axis=1))
        if role == "bqkv":
            return self._bias(np.concatenate([_fused_bias(case, name) for name in ("bq", "bk", "bv")]))
        shape: Callable[[np.ndarray], np.ndarray]
        if role in ("scores", "q") and self.vector:
            return reference()["heads"][0][role][0]   # the first query's row (vector_row)
        if role in SCORE_ROLES:
            return self._score_weight(role, _given(case.additive, "an additive score network"))
        if role in BLOCK_ROLES:
            return self._block_part(role, _given(case.block, "a transformer block"))
        if role == "kv":
            role = "k"   # the case's values are its keys (cases.with_convention_weights)
        if role in ("q", "k", "v", "scores", "weights"):
            per_head, shape = [h[role] for h in reference()["heads"]], self._tokens
        else:
            per_head = [getattr(h, role) for h in case.heads]
            shape = self._bias if role.startswith("b") else self._matrix
        if param.head is not None:
            return shape(per_head[param.head - 1])
        if param.heads == "per_head":
            return [shape(m) for m in per_head]
        if param.heads == "axis":
            return np.stack([shape(m) for m in per_head])
        return shape(per_head[0] if len(per_head) == 1 else np.concatenate(per_head, axis=-1))

    def misfit(self, case: Case) -> str | None:
        """Why this convention cannot be called with a case's inputs (a sheet's data), or None."""
        heads = len(case.heads)
        if self.fixed_heads is not None and heads != self.fixed_heads:
            return f"it has {heads} head{'s' * (heads != 1)}, the convention takes {self.fixed_heads}"
        if self.input_stage == 0 and (case.heads[0].bq is not None) != self.biases:
            return "it has biases, the convention none" if self.biases is False else \
                "the convention takes biases, it has none"
        if (case.wo is not None) != self.projection:
            return "it has an output projection, the convention none" if case.wo is not None else \
                "the convention takes an output projection, it has none"
        if (case.bo is not None) != self.projection_bias:
            return "it has an output projection bias, the convention none" if case.bo is not None else \
                "the convention takes an output projection bias, it has none"
        if (case.memory is not None) != self.cross:
            return "it has a second sequence (memory), the convention none" if case.memory is not None else \
                "the convention takes a second sequence (memory, cross-attention), it has none"
        if (case.values is not None) != self.three_inputs and case.memory is not None:
            return "its keys and values come from one sequence, the convention takes them apart" \
                if self.three_inputs else "it has a values' sequence of its own, the convention none"
        if (case.d_output is not None) != self.backward:
            return "it has an upstream gradient, the convention none" if case.d_output is not None else \
                "the convention takes an upstream gradient (a backward pass), it has none"
        if (case.mask is not None or case.key_mask is not None) and not self.masked:
            return "it has a mask, the convention takes none"
        if self.square and any(h.wq.shape[1] != case.d for h in case.heads):
            return f"its d_k is not D = {case.d}, the convention's square = true needs them equal"
        return None

    def _block_part(self, role: str, block) -> np.ndarray:
        if role.startswith("ff_"):
            return (self._bias if role.startswith("ff_b") else self._matrix)(getattr(block.ffn, role[3:]))
        norm = block.norm2 if role.startswith("ln2") else block.norm1
        return getattr(norm, role.rsplit("_", 1)[1])

    def _score_weight(self, role: str, additive) -> np.ndarray:
        if role == "score_v":
            return additive.va
        return self._matrix({"score_wq": additive.w1, "score_wk": additive.w2,
                             "score_w": additive.concatenated}[role])

    def _tokens(self, value: np.ndarray) -> np.ndarray:
        return value.T if self.columns else value

    def _matrix(self, w: np.ndarray) -> np.ndarray:
        return w.T if self.weights == "out_in" else w

    def _bias(self, b: np.ndarray) -> np.ndarray:
        return b[:, None] if self.columns else b


def mean_over_heads(weights: list) -> np.ndarray:
    """Each head's weights averaged over the heads, entry by entry: one head's are its own."""
    return weights[0] if len(weights) == 1 else np.mean(np.stack(weights), axis=0)


def vector_row(matrix: np.ndarray) -> np.ndarray:
    """What a vector helper computes on, canonically: the first query's row, as a 1 x Lk matrix."""
    return matrix[:1]


T = TypeVar("T")


def _given(value: T | None, what: str) -> T:
    """A part of the case the convention's params call for; a case made for it has each."""
    if value is None:
        raise ValueError(f"the case has no {what}, which the convention passes")
    return value


_RETURN_NAME = {"weights_per_head": "weights", "scores_per_head": "scores"}


def given_keep(case: Case, with_key_padding: bool = True) -> np.ndarray:
    """The mask a function is handed as its argument, canonical (Lq x Lk, True = may attend):
    the case's attention mask, with its key-padding mask unless the function takes that apart,
    never the causal one a function builds itself; all True when the case has none (a sheet's
    data without a mask)."""
    keep = np.ones((case.n, case.lk), dtype=bool)
    if case.mask is not None:
        keep &= case.mask
    if case.key_mask is not None and with_key_padding:
        keep &= case.key_mask[None, :]
    return keep


def stack_parts(per_element: list[dict]) -> dict:
    """Each element's canonical parts stacked on a leading batch axis (each head's array, for
    a per-head list). A part whose elements differ in shape, as some mistakes' may, is left
    out: that computation predicts nothing for it."""
    stacked: dict[str, Any] = {}
    for part, first in per_element[0].items():
        try:
            if isinstance(first, list):
                stacked[part] = [np.stack([e[part][h] for e in per_element]) for h in range(len(first))]
            else:
                stacked[part] = np.stack([e[part] for e in per_element])
        except (ValueError, IndexError):
            continue
    return stacked


def _fused_bias(case: Case, name: str) -> np.ndarray:
    return np.concatenate([getattr(h, name) for h in case.heads])


# Reading a convention from TOML. Every error is one line naming where it is and the field.

def _returns(raw, where: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    if isinstance(raw, str):
        raw = [raw]
    keys = None
    if isinstance(raw, dict):
        keys = tuple(raw.values())
        if not all(isinstance(k, str) and k for k in keys):
            fail(where, "returns: each part's dict key must be a non-empty string")
        raw = list(raw)
        if CACHE in raw:
            fail(where, "returns: a dict's keys not named are not read: leave its cache out")
    if not isinstance(raw, list) or not raw:
        fail(where, "returns must name what the function returns, e.g. [\"output\", \"weights\"]")
    for name in raw:
        if name not in RETURN_NAMES and name != CACHE:
            fail(where, f"returns: {name!r} is not a part (parts: {', '.join(RETURN_NAMES)}; or {CACHE}, "
                        "a forward's cache, not graded)"[:300])
    if len(set(raw)) != len(raw):
        fail(where, "returns: a part is named twice")
    return tuple(raw), keys


def _check_roles(conv: Convention, where: str) -> None:
    """The roles a convention's returns need are there, once each, and fit together."""
    flat = conv.flat
    counted: dict[tuple, str] = {}
    for p in flat:
        key = (p.role, p.head)
        if key in counted:
            fail(where, f"role {p.role!r} is given twice ({counted[key]} and {p.name})")
        counted[key] = p.name
    roles = conv.roles
    if _check_unit(conv, roles, where):
        return
    inputs = roles & set(INPUT_STAGE)
    if not inputs:
        fail(where, "no param has an input role (x, q/k/v or scores)")
    if "x" in inputs and len(inputs) > 1:
        fail(where, f"takes both X and {'/'.join(sorted(inputs - {'x'}))}: give the tokens or Q, K, V, not both")
    if "scores" in inputs and len(inputs) > 1:
        fail(where, "a softmax helper takes only the scores")
    start = conv.input_stage
    names = conv.return_names
    for name in names:
        if RETURN_STAGE[name] <= start:
            fail(where, f"returns {name!r}, which is computed before its inputs ({', '.join(sorted(inputs))})")
    last = max(RETURN_STAGE[n] for n in names)
    needed = set(n for n in names if n in ("q", "k", "v"))
    if last >= 2:
        needed |= {"q", "k"}
    if last >= 4 or "v" in names:
        needed.add("v")
    if start == 2:
        needed = set()
        if last > 3:
            fail(where, "a softmax helper (role scores) can only return the weights")
    indexed = sorted({p.head for p in flat if p.head is not None})
    given = roles | ({"k", "v"} if "kv" in roles else set())
    for part in sorted(needed, key="qkv".index):   # q, k, v: the same message on every run
        if start == 1 and part not in given:
            fail(where, f"no param has role {part!r}, which its returns need")
        if start == 0 and f"w{part}" not in roles and "wqkv" not in roles:
            fail(where, f"no param has role 'w{part}' (or 'wqkv'), which its returns need")
        if start == 0 and indexed and any((f"w{part}", h) not in counted for h in indexed):
            fail(where, f"every head numbered in head = ... needs its own 'w{part}'")
    if indexed and indexed != list(range(1, len(indexed) + 1)):
        fail(where, f"heads must be numbered 1 to {len(indexed)} without gaps")
    if indexed and any(p.role in WEIGHT_ROLES and p.head is None for p in flat):
        fail(where, "when some weights are one head's (head = ...), every weight and bias must be")
    if "wqkv" in roles and roles & {"wq", "wk", "wv"}:
        fail(where, "give the projections packed (wqkv) or one by one (wq, wk, wv), not both")
    if "bqkv" in roles and roles & {"bq", "bk", "bv"}:
        fail(where, "give the biases packed (bqkv) or one by one (bq, bk, bv), not both")
    if start != 0 and roles & {*WEIGHT_ROLES, "wqkv", "bqkv", "wo"}:
        fail(where, "projection weights and biases need the tokens X as input (role x)")
    if conv.biases and not {"bq", "bk", "bv"} <= conv.bias_roles:
        fail(where, "give all three biases (bq, bk, bv) or none")
    if "wo" in roles and "output" not in names and "heads" not in names and not conv.backward:
        fail(where, "an output projection (wo) needs the output among the returns")
    if conv.square and (start != 0 or conv.heads != "one"):
        fail(where, "square applies to single-head conventions on the tokens X only")
    if "memory" in roles and start != 0:
        fail(where, "a memory (cross-attention) needs the tokens X as input (role x) and projections from them")
    _check_sequences(roles, start, where)
    if "bo" in roles and "wo" not in roles:
        fail(where, "an output projection bias (bo) needs the output projection (wo)")
    if conv.causal_inside and "causal" in roles:
        fail(where, "causal: give causal = true (built inside) or a param with role causal (a flag), not both")
    if (conv.masked or conv.causal) and "softmax" not in conv.steps:
        fail(where, "a mask (or causal) needs a function that computes the softmax itself")
    if (conv.masked or conv.causal) and conv.columns:
        fail(where, "a mask (or causal) with tokens as columns is not supported yet")
    if conv.batched and conv.columns:
        fail(where, "batch = true takes tokens as rows (B x N x D)")
    if conv.vector and (start not in (1, 2) or conv.batched or conv.columns or conv.masked or conv.causal
                        or start == 1 and ("q" not in roles or conv.heads != "one")):
        fail(where, "vector = true applies to a softmax helper (role scores) over one vector, or to a single "
                    "head given one query (role q, a vector): no axis, tokens, batch or mask")
    if "kv" in roles and roles & {"k", "v"}:
        fail(where, "give the keys and values as one array (kv) or apart (k, v), not both")
    _check_additive(conv, roles, start, where)
    _check_backward(conv, roles, names, where)
    for p in flat:
        if p.role in MASK_ROLES:
            allowed = MASK_SHAPES[(p.role, conv.batched)]
            if conv.mask_shape(p) not in allowed:
                fail(where, f"param {p.name}: shape {p.shape!r} is not one of {', '.join(map(repr, allowed))}"
                             + ("" if conv.batched else " (without batch = true)"))


# The roles each unit around attention needs, all of them.
UNIT_ROLES = {"layer_norm": NORM_ROLES, "feed_forward": FFN_ROLES,
              "post_ln": (*BLOCK_NORM_ROLES, *FFN_ROLES), "pre_ln": (*BLOCK_NORM_ROLES, *FFN_ROLES)}


def _check_unit(conv: Convention, roles: frozenset, where: str) -> bool:
    """A block's parts: each unit's roles complete and no other unit's; a part graded on its own
    (layer norm, the network) takes the tokens and its own roles and returns the output. True
    when that is all there is to check (a part on its own)."""
    unit = conv.unit
    given = roles & set(BLOCK_ROLES)
    if unit == "attention" and given:
        fail(where, f"role {sorted(given)[0]!r} belongs to a transformer block: give block = \"post_ln\" or "
                    "\"pre_ln\" (or layer norm's roles, or the network's, alone)")
    if unit == "attention":
        return False
    needed = UNIT_ROLES[unit]
    missing = [r for r in needed if r not in roles]
    if missing:
        fail(where, f"{unit.replace('_', ' ')} needs role {missing[0]!r} too ({', '.join(needed)})")
    extra = sorted(given - set(needed))
    if extra:
        fail(where, f"role {extra[0]!r} is not a part of {unit.replace('_', ' ')} ({', '.join(needed)})")
    if conv.columns or conv.vector:
        fail(where, f"{unit.replace('_', ' ')} takes tokens as rows")
    if unit in ("post_ln", "pre_ln"):
        if conv.cross or conv.additive or conv.input_stage != 0:
            fail(where, "a block's attention is self-attention on its tokens X (role x) and their projections")
        if "output" not in conv.return_names:
            fail(where, "a block returns its output")
        return False
    if roles - {"x", *needed}:
        fail(where, f"{unit.replace('_', ' ')} takes the tokens X (role x) and its own roles only, not "
                    f"{sorted(roles - {'x', *needed})[0]!r}")
    if conv.return_names != ("output",):
        fail(where, f"{unit.replace('_', ' ')} returns the output only")
    return True


def _check_additive(conv: Convention, roles: frozenset, start: int, where: str) -> None:
    """An additive score network: its vector, and W1 and W2 apart or as one weight on [q; k],
    on given queries, keys and values, one head."""
    if not conv.additive:
        return
    if "score_v" not in roles:
        fail(where, "additive attention needs its score vector (role score_v)")
    apart = roles & {"score_wq", "score_wk"}
    if "score_w" in roles and apart:
        fail(where, "give the score network's weights apart (score_wq, score_wk) or as one on [q; k] (score_w), "
                    "not both")
    if "score_w" not in roles and len(apart) != 2:
        fail(where, "additive attention needs the query's and the key's weights (roles score_wq and score_wk), "
                    "or one weight on [q; k] (score_w)")
    if start != 1:
        fail(where, "additive attention takes the queries, keys and values (roles q, k, v or kv)")
    if conv.heads != "one":
        fail(where, "additive attention has one head")
    if conv.columns:
        fail(where, "additive attention takes tokens as rows")


def _check_backward(conv: Convention, roles: frozenset, names: tuple, where: str) -> None:
    """A backward pass: given Q, K and V (one head) or the tokens and the projections (any
    heads, fused), and the upstream gradient, tokens as rows, it returns gradients and nothing
    else, each of an input it has; a gradient is returned by a backward pass only."""
    gradients = [n for n in names if n in GRADIENT_PARTS]
    if not conv.backward:
        if gradients:
            fail(where, f"returns {gradients[0]!r}, a gradient, which needs the upstream gradient (role d_output)")
        if conv.given_weights:
            fail(where, "role 'weights' (the forward's attention weights) is a backward pass's input: it needs the "
                        "upstream gradient (role d_output)")
        return
    if not gradients or len(gradients) != len(names):
        fail(where, "a backward pass (role d_output) returns gradients (dq, dk, dv; or of its inputs and weights: "
                    f"{', '.join(TOKEN_GRADIENTS + WEIGHT_GRADIENTS)}), and nothing else")
    if conv.additive:
        fail(where, "a backward pass is of scaled dot-product attention, not additive attention")
    if conv.columns or conv.vector:
        fail(where, "a backward pass takes tokens as rows")
    if "x" in roles:
        _check_projected_backward(conv, roles, names, where)
        return
    if roles & {"scores", "kv"} or not {"q", "k", "v"} <= roles:
        fail(where, "a backward pass takes Q, K and V (roles q, k, v), or the tokens X and the projections, and "
                    "the upstream gradient")
    if set(names) - set(QKV_GRADIENTS):
        fail(where, "a backward pass given Q, K and V returns their gradients dq, dk and dv (any of them)")
    if conv.heads != "one":
        fail(where, "a backward pass given Q, K and V has one head")


def _check_projected_backward(conv: Convention, roles: frozenset, names: tuple, where: str) -> None:
    """A backward pass through the projections: the gradients of its token inputs and of its
    weights, each of a role it has; its heads fused (side by side), as its weights' gradients are."""
    for name in names:
        if name in QKV_GRADIENTS:
            fail(where, f"a backward pass given the tokens X returns the gradients of its inputs and weights "
                        f"({', '.join(TOKEN_GRADIENTS + WEIGHT_GRADIENTS)}), not {name!r}")
        if name not in conv.gradient_parts:
            fail(where, f"returns {name!r}, the gradient of role {GRADIENT_OF[name]!r}, which no param has")
    if "wqkv" in roles or conv.block is not None:
        fail(where, "a backward pass through packed projections (wqkv) or a block is not supported yet")
    if any(p.heads != "fused" or p.head is not None for p in conv.flat if p.role in WEIGHT_ROLES):
        fail(where, "a backward pass through the projections takes each weight fused (its heads side by side)")


def _check_sequences(roles: frozenset, start: int, where: str) -> None:
    """Key and value inputs come as a pair, beside the queries' X, and never with a memory
    (which is both)."""
    apart = roles & {"key_tokens", "value_tokens"}
    if not apart:
        return
    if len(apart) == 1:
        missing = ({"key_tokens", "value_tokens"} - apart).pop()
        fail(where, f"role {next(iter(apart))!r} needs role {missing!r} too (the key and value inputs, passed apart)")
    if "memory" in roles:
        fail(where, "give the keys' and values' sequence as one memory, or as key_tokens and value_tokens, not both")
    if start != 0:
        fail(where, "key and value inputs (key_tokens, value_tokens) need the queries' tokens X as input (role x) "
                    "and projections from them")


def implied_fully_masked(flat: tuple) -> str:
    """What a row with every key masked gives when a convention does not say: what its mask's
    form gives by arithmetic, else DEFAULT_FULLY_MASKED."""
    forms = [p.form for p in flat if p.role in MASK_ROLES]
    implied = FORMS[forms[0]].fully_masked if forms else None
    return implied or DEFAULT_FULLY_MASKED


def _fully_masked(raw: dict, flat: tuple, where: str) -> str:
    """The rule for a row with every key masked: as declared, else as the mask's form implies."""
    if "fully_masked" in raw:
        masked = any(p.role in MASK_ROLES for p in flat)
        if not masked and raw.get("causal") is not True and not any(p.role == "causal" for p in flat):
            fail(where, "fully_masked applies to a convention with a mask or causal only")
        return choice(raw, "fully_masked", FULLY_MASKED_RULES, None, where)
    return implied_fully_masked(flat)


def with_class(conv: Convention, raw: dict, where: str) -> Convention:
    """The convention with its `class` table, if it has one: the object's roles join the
    method's, so that everything derived from the roles (heads, projection, biases, the
    mistakes that can occur) counts them."""
    if "class" not in raw:
        return conv
    call = parse_class(raw["class"], where)
    twice = {p.role for p in flattened(call.before_params)} & conv.roles
    if twice:
        fail(where, f"class: before: role {sorted(twice)[0]!r} is taken by both {call.before} and {call.method}")
    conv = replace(conv, class_call=call, flat=conv.flat + call.flat)
    if not isinstance(raw["class"], dict) or "kept" not in raw["class"]:
        return conv
    kept = parse_kept(raw["class"]["kept"], where, RETURN_NAMES, call)
    both = [part for _, part in kept if part in conv.returns]
    if both:
        fail(where, f"returns: {both[0]!r} is both returned and kept on the object")
    # Read as returned parts after those the call returns; made canonical (per head) with them.
    return replace(conv, returns=conv.returns + tuple(part for _, part in kept), kept=kept)


def parse_convention(raw, name: str, where: str) -> Convention:
    """A convention from its TOML table; a one-line SpecError naming `where` and the field."""
    if not isinstance(raw, dict):
        fail(where, "a convention must be a table")
    unknown = sorted(set(raw) - set(CONVENTION_KEYS))
    if unknown:
        fail(where, f"unknown key {unknown[0]!r} in the convention (known: {', '.join(CONVENTION_KEYS)})"[:300])
    params_raw = raw.get("params")
    if not isinstance(params_raw, list) or not params_raw:
        fail(where, "params must list the parameters in order, each { name = ..., role = ... }")
    params = tuple(parse_param(p, where) for p in params_raw)
    if len({p.name for p in params}) != len(params):
        fail(where, "two params have the same name")
    return_names, keys = _returns(raw.get("returns"), where)
    cache_at = None
    if CACHE in return_names:
        cache_at = return_names.index(CACHE)
        return_names = tuple(n for n in return_names if n != CACHE)
        if not return_names:
            fail(where, "returns: a cache is returned beside a part, as (output, cache)")
    for key, kind in (("scaled", bool), ("square", bool), ("description", str)):
        if key in raw and not isinstance(raw[key], kind):
            fail(where, f"{key} must be {'true or false' if kind is bool else 'text'}")
    flat = flattened(params)
    additive = any(p.role in SCORE_ROLES for p in flat)
    if "eps" in raw and (type(raw["eps"]) not in (int, float) or not 0 < raw["eps"] < 1):
        fail(where, f"eps must be a number between 0 and 1 (layer norm's), not {raw['eps']!r}"[:200])
    for key in ("activation", "eps"):
        if key in raw and "block" not in raw and not any(p.role in FFN_ROLES + NORM_ROLES for p in flat):
            fail(where, f"{key} applies to a transformer block, a layer norm or a feed-forward network only")
    if additive and raw.get("scaled") is True:
        fail(where, "additive scores are not scaled: leave scaled out")
    columns = choice(raw, "tokens", ("rows", "columns"), "rows", where) == "columns"
    if "axis" in raw:
        if not any(p.role == "scores" for p in flat):
            fail(where, "axis applies to a softmax helper (a param with role scores) only")
        if "tokens" in raw:
            fail(where, "give a softmax helper's axis, not tokens")
        # A softmax over axis 0 of the matrix it is given is the row-wise softmax of that
        # matrix's transpose: the helper's matrix is the canonical one with tokens as columns.
        columns = choice(raw, "axis", (-1, 1, 0), -1, where) == 0
    conv = Convention(
        name=name, description=raw.get("description", ""), params=params, returns=return_names, return_keys=keys,
        cache_at=cache_at,
        weights=choice(raw, "weights", ("in_out", "out_in"), "in_out", where), columns=columns,
        scaled=raw.get("scaled", not additive), square=raw.get("square", False),
        per_head_returns=choice(raw, "per_head_returns", ("list", "axis"), "list", where), flat=flat,
        causal_inside=choice(raw, "causal", (False, True), False, where),
        batched=choice(raw, "batch", (False, True, "any"), False, where) in (True, "any"),
        leading_axes=raw.get("batch") == "any",
        vector=choice(raw, "vector", (False, True), False, where),
        block=choice(raw, "block", (None, "post_ln", "pre_ln"), None, where) if "block" in raw else None,
        activation=choice(raw, "activation", ACTIVATIONS, "relu", where), eps=float(raw.get("eps", DEFAULT_EPS)))
    conv = with_class(conv, raw, where)
    if "globals" in raw:
        if conv.class_call is not None:
            fail(where, "globals: a class's weights go through its class table, not the notebook's globals")
        names = parse_globals(raw["globals"], where)
        if set(p.name for p in names) & set(conv.param_names):
            fail(where, "globals: a global has the name of a parameter")
        conv = replace(conv, global_params=names, flat=conv.flat + flattened(names))
    # Of every role, the class's too: a backward's mask is its forward's (the class table's before).
    conv = replace(conv, fully_masked=_fully_masked(raw, conv.flat, where))
    multi = conv.heads != "one"

    def canonical(p: str) -> str:
        return f"{p}_per_head" if multi and p in ("weights", "scores") else p
    conv = replace(conv, returns=tuple(canonical(p) for p in conv.returns),
                   kept=tuple((attribute, canonical(p)) for attribute, p in conv.kept))
    _check_roles(conv, where)
    return conv


def builtin_conventions() -> dict[str, Convention]:
    """The built-in conventions, from the same TOML form a course's spec uses."""
    text = resources.files("grader.reference").joinpath("conventions.toml").read_text(encoding="utf-8")
    raw = load_toml(text, "conventions.toml (built-in)")
    return {name: parse_convention(table, name, f"built-in convention {name}")
            for name, table in raw.get("conventions", {}).items()}


CONVENTIONS: dict[str, Convention] = builtin_conventions()
