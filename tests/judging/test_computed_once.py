"""What the grader computes from its own cases is computed once per grading process and shared
by every submission: found again only for a case of the very same content, never changed by
the judging that reads it, and bounded."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from grader.calling import cases
from grader.calling.conventions import CONVENTIONS
from grader.judging import answers
from grader.judging.computed_once import Store
from grader.judging.explain import CORRECT, Predictions, explanations
from grader.reference.case_key import case_key

SEED = 20261128
CONV = CONVENTIONS["rows_multi"]


def _case(seed: int = SEED):
    return cases.base_case(CONV, seed)


def test_a_second_submission_finds_every_prediction_the_first_computed():
    case = _case(SEED + 1)
    first, second = Predictions(), Predictions()   # two notebooks, one spec and seed
    tried = (CORRECT, *explanations(CONV)[:20])
    computed = [first.parts(CONV, e, case) for e in tried]
    before = Predictions.shared.computed
    # The second notebook's case is another object with the same content.
    again = [second.parts(CONV, e, replace(case)) for e in tried]
    assert Predictions.shared.computed == before
    assert all(a is b for a, b in zip(computed, again))


def test_a_case_of_the_same_label_and_other_content_has_its_own_prediction():
    case = _case(SEED + 2)
    other = replace(case, x=case.x + 1.0)   # the label is the same
    reference = Predictions().parts(CONV, CORRECT, case)
    moved = Predictions().parts(CONV, CORRECT, other)
    assert not np.allclose(reference["output"], moved["output"])


def test_a_shared_prediction_cannot_be_changed():
    predicted = Predictions().parts(CONV, CORRECT, _case(SEED + 3))
    with pytest.raises(ValueError):
        predicted["output"][0, 0] = 0.0
    with pytest.raises(TypeError):
        predicted["output"] = np.zeros(1)   # type: ignore[index]
    per_head = [v for v in predicted.values() if isinstance(v, list)]
    assert per_head, sorted(predicted)
    with pytest.raises(TypeError):
        per_head[0].append(np.zeros(1))
    with pytest.raises(ValueError):
        per_head[0][0][0, 0] = 1.0


def test_the_attempt_probes_are_drawn_once_for_a_convention_and_seed_and_cannot_be_changed():
    probes = answers.attempt_probes(CONV, SEED)
    assert answers.attempt_probes(CONV, SEED) is probes
    assert answers.attempt_probes(CONV, SEED + 1) != probes
    with pytest.raises(ValueError):
        probes[0].case.x[0, 0] = 0.0
    with pytest.raises(ValueError):
        probes[0].case.heads[0].wq[0, 0] = 0.0


def test_a_store_keeps_its_limit_and_drops_the_longest_unused_first():
    store = Store(limit=2)
    store.get("a", lambda: 1)
    store.get("b", lambda: 2)
    store.get("a", lambda: 0)   # used again: "b" is now the longest unused
    store.get("c", lambda: 3)
    assert len(store) == 2 and store.computed == 3
    assert store.get("a", lambda: -1) == 1 and store.get("b", lambda: -2) == -2


def test_a_case_s_key_tells_apart_every_difference_of_content():
    case = _case()
    assert case_key(case) == case_key(replace(case)) == case_key(replace(case, x=case.x.copy()))
    others = [replace(case, label=case.label + " "),
              replace(case, x=case.x.astype(np.float32)),                  # same values, other dtype
              replace(case, x=case.x.reshape(case.x.shape[::-1]).copy().reshape(case.x.shape) + 0.5),
              replace(case, scaled=not case.scaled),
              replace(case, mask=np.ones((case.n, case.lk), dtype=bool)),   # an all-True mask is still a mask
              replace(case, heads=case.heads[::-1]),
              replace(case, batch_rest=(case,))]
    keys = {case_key(c) for c in others} | {case_key(case)}
    assert len(keys) == len(others) + 1
    wide = replace(case, x=np.zeros((2, 6)))
    assert case_key(wide) != case_key(replace(case, x=np.zeros((3, 4))))   # the same bytes, another shape


def test_a_case_s_key_refuses_what_it_cannot_read():
    with pytest.raises(TypeError):
        case_key(replace(_case(), label={"not": "a label"}))   # type: ignore[arg-type]
