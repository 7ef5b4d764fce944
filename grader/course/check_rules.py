"""The checks a spec may give points to: each one's name, title, default points and which
conventions it applies to. A spec is read against this table (course/spec.py); how each check
calls the function and judges what came back is grader/judging/checks.py's, by the same names.
Kept apart so that the assignment model stands below the judging that uses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from grader.calling.conventions import WEIGHT_PARTS, Convention


@dataclass(frozen=True)
class CheckRule:
    name: str
    title: str
    default_points: float
    # Whether the check applies to a function of this convention, given whether its spec
    # names sheet data (fixed_data).
    applies: Callable[[Convention, bool], bool]
    # A policy check reports a rule broken even at 0 points; any other 0-point check is
    # informational and never shown as a failure.
    policy: bool = False


def returns_weights(conv: Convention) -> bool:
    return any(part in conv.returns for part in WEIGHT_PARTS)


def _masked(conv: Convention) -> bool:
    return conv.masked or conv.causal


def _always(conv: Convention, has_fixed: bool) -> bool:
    return True


# In running order.
CHECK_RULES: dict[str, CheckRule] = {c.name: c for c in [
    CheckRule("fixed", "Data from the assignment sheet", 3, lambda conv, has_fixed: has_fixed),
    CheckRule("random_shapes", "Randomized shapes (N != D, N = 1, N = 64, several H)", 3, _always),
    CheckRule("single_head", "H = 1 gives single-head attention", 1, lambda conv, f: conv.heads == "many"),
    CheckRule("weights_distribution", "Attention weights are a distribution", 1,
              lambda conv, f: returns_weights(conv)),
    # Under a causal mask the order of the tokens is the point: no permutation is the same
    # problem (a fixed mask is permuted with the tokens, rows and columns, by Case.permuted).
    # A vector helper computes on one query's row: permuting the tokens changes which row it is.
    CheckRule("permutation_equivariance", "Permuting tokens permutes the results", 1,
              lambda conv, f: not conv.causal and not conv.vector),
    # Keys and values move together, so the memory's order is not the problem's (unless causal).
    CheckRule("memory_permutation", "Permuting the memory's rows leaves a cross-attention output unchanged", 1,
              lambda conv, f: conv.cross and not conv.three_inputs and not conv.causal),
    CheckRule("key_value_permutation", "Permuting the keys and values together leaves the output unchanged", 1,
              lambda conv, f: conv.three_inputs and not conv.causal),
    CheckRule("self_attention_inputs", "Query = key = value gives self-attention", 1,
              lambda conv, f: conv.three_inputs),
    CheckRule("batch_elements", "Each batch element is computed on its own", 1, lambda conv, f: conv.batched),
    # Not of a backward pass: a later query's gradient reaches the earlier keys it attends.
    CheckRule("causal_future", "Under a causal mask, a token ignores the tokens after it", 1,
              lambda conv, f: conv.causal and not conv.backward),
    CheckRule("masked_keys_zero_weight", "Masked keys get zero weight", 1,
              lambda conv, f: _masked(conv) and returns_weights(conv)),
    # These two judge a function against its own answer on plain inputs, never against the
    # reference: a wrong value is charged by the comparing checks, once.
    CheckRule("memory_layout", "Fortran-ordered and non-contiguous inputs", 1, _always),
    CheckRule("dtypes", "float32 and integer inputs", 1, _always),
    CheckRule("inputs_unmodified", "Inputs are left unmodified", 1, _always),
    CheckRule("return_structure", "Return type and shapes", 1, _always),
    # Informational by default: no sheet asks for the max-subtraction (seed 002 says students are
    # not expected to do it; seed 003 hands out a softmax without it). A course may give it points.
    # Only where there are scores: a layer norm or a feed-forward network on its own has none.
    CheckRule("numerical_stability", "Large scores (past exp's range) stay finite", 0, lambda conv, f: conv.attends),
    CheckRule("forbidden_libraries", "No neural-network or softmax libraries", 0, _always, policy=True),
]}
