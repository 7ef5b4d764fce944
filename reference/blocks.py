"""The transformer block around attention, and its parts graded on their own: layer norm, the
position-wise feed-forward network, and a block of both with residuals, in post-LN order (the
original encoder block: LN(x + sublayer(x))) or pre-LN order (GPT-2's decoder block: x +
sublayer(LN(x))). Tokens are rows, as in attention.py.

Layer norm normalises each token over its features with the biased variance and eps inside the
square root, (x - mean) / sqrt(var + eps) * gamma + beta. The feed-forward network is
act(x W1 + b1) W2 + b2 with ReLU or GELU (GPT-2's tanh approximation, or the exact one with
erf). A mistake (mistakes.py) is one of these steps done another way: `BlockSteps` says how.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# What a block unit is: layer norm alone, the feed-forward network alone, or a whole block.
UNITS = ("layer_norm", "feed_forward", "post_ln", "pre_ln")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh")
DEFAULT_EPS = 1e-5


@dataclass(frozen=True)
class Norm:
    gamma: np.ndarray   # D
    beta: np.ndarray    # D


@dataclass(frozen=True)
class FeedForward:
    w1: np.ndarray      # D x F
    b1: np.ndarray      # F
    w2: np.ndarray      # F x D
    b2: np.ndarray      # D


@dataclass(frozen=True)
class Block:
    """What a case computes around (or instead of) attention: `unit` (UNITS), the norms it
    takes (norm1 before or after attention, norm2 around the feed-forward network), the
    network, its activation and layer norm's eps."""
    unit: str
    norm1: Norm | None = None
    norm2: Norm | None = None
    ffn: FeedForward | None = None
    activation: str = "relu"
    eps: float = DEFAULT_EPS

    @property
    def attends(self) -> bool:
        return self.unit in ("post_ln", "pre_ln")


@dataclass(frozen=True)
class BlockSteps:
    """How the steps around attention are done; the defaults are the reference."""
    norm: str = "features"        # features | tokens (over the wrong axis) | eps_outside | unbiased | no_affine
    residual: str = "both"        # both | no_attention (the attention's residual missing) | no_ffn
    order: str = "right"          # right | swapped (post-LN computed pre-LN, or pre-LN post-LN)
    activation: str = "right"     # right | missing | other_gelu (the other GELU)


REFERENCE_STEPS = BlockSteps()


def layer_norm(x: np.ndarray, norm: Norm, eps: float, how: str = "features") -> np.ndarray:
    """Each token (row) normalised over its features, then scaled and shifted."""
    axis = 0 if how == "tokens" else -1
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True, ddof=1 if how == "unbiased" and x.shape[axis] > 1 else 0)
    if how == "eps_outside":
        normalised = (x - mean) / (np.sqrt(var) + eps)
    else:
        normalised = (x - mean) / np.sqrt(var + eps)
    return normalised if how == "no_affine" else normalised * norm.gamma + norm.beta


def activate(h: np.ndarray, activation: str, how: str = "right") -> np.ndarray:
    if how == "missing":
        return h
    if how == "other_gelu":
        activation = {"gelu": "gelu_tanh", "gelu_tanh": "gelu"}.get(activation, activation)
    elif how in ("relu", "gelu"):   # the other activation altogether: ReLU for a GELU, or the reverse
        activation = how
    if activation == "relu":
        return np.maximum(h, 0.0)
    if activation == "gelu_tanh":   # GPT-2's approximation
        return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
    erf = np.vectorize(math.erf, otypes=[float])
    return 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))


def feed_forward(x: np.ndarray, ffn: FeedForward, activation: str, how: str = "right") -> np.ndarray:
    return activate(x @ ffn.w1 + ffn.b1, activation, how) @ ffn.w2 + ffn.b2


def _norm(block: Block, which: Norm | None, t: np.ndarray, steps: BlockSteps) -> np.ndarray:
    assert which is not None, "a block's norms are drawn with it"
    return layer_norm(t, which, block.eps, steps.norm)


def _ffn(block: Block, t: np.ndarray, steps: BlockSteps) -> np.ndarray:
    assert block.ffn is not None, "a block's network is drawn with it"
    return feed_forward(t, block.ffn, block.activation, steps.activation)


def _pre(block: Block, steps: BlockSteps) -> bool:
    """Whether the norms come before each sublayer, as the block is computed (pre-LN), or after
    its residual (post-LN)."""
    return (block.unit == "pre_ln") != (steps.order == "swapped")


def attention_input(block: Block, x: np.ndarray, steps: BlockSteps = REFERENCE_STEPS) -> np.ndarray:
    """The tokens the block's attention reads: LN(x) before it (pre-LN), else x itself."""
    x = x.astype(np.float64)
    return _norm(block, block.norm1, x, steps) if block.attends and _pre(block, steps) else x


def finish(block: Block, x: np.ndarray, attended: dict, steps: BlockSteps = REFERENCE_STEPS) -> dict:
    """The unit's result on tokens `x`, given what its attention computed on attention_input():
    attention's parts with the output replaced by the unit's. A unit without attention has no
    heads."""
    x = x.astype(np.float64)
    if block.unit == "layer_norm":
        return {"heads": [], "concat": None, "output": _norm(block, block.norm1, x, steps)}
    if block.unit == "feed_forward":
        return {"heads": [], "concat": None, "output": _ffn(block, x, steps)}
    keep_attention = 1.0 if steps.residual != "no_attention" else 0.0
    keep_ffn = 1.0 if steps.residual != "no_ffn" else 0.0
    if _pre(block, steps):
        h = keep_attention * x + attended["output"]
        out = keep_ffn * h + _ffn(block, _norm(block, block.norm2, h, steps), steps)
    else:
        h = _norm(block, block.norm1, keep_attention * x + attended["output"], steps)
        out = _norm(block, block.norm2, keep_ffn * h + _ffn(block, h, steps), steps)
    return {**attended, "output": out}
