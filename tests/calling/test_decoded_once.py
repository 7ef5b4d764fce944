"""A reply's arrays are decoded once: canonical_parts describes the reply (its arrays' shapes,
read from the bytes that came back) and reads its parts from the same decoding, and a
malformed array is said the same way in both."""
import numpy as np
import pytest

from grader.calling import returns
from grader.course.spec import load_assignment
from grader.kernel import replies as payloads
from grader.kernel_side.wire import encode_value

ROWS = {fn.name: fn for fn in load_assignment("rows").functions}


@pytest.fixture
def decodes(monkeypatch):
    """How many times the grader decodes a returned array."""
    counted = []
    real = returns.decode_array

    def counting(encoded):
        counted.append(encoded)
        return real(encoded)
    monkeypatch.setattr(returns, "decode_array", counting)
    return counted


def test_each_returned_array_is_decoded_once(decodes):
    conv = next(fn.convention for fn in ROWS.values() if fn.convention.returns == ("output", "weights"))
    output, weights = np.arange(12.0).reshape(4, 3), np.full((4, 4), 0.25)
    parts = returns.canonical_parts(conv, payloads.encoded_value(encode_value((output, weights))))
    assert len(decodes) == 2
    assert parts.returned == "tuple(ndarray (4, 3), ndarray (4, 4))"
    assert np.array_equal(parts.values["output"], output) and np.array_equal(parts.values["weights"], weights)


def test_a_malformed_array_is_described_and_unreadable_as_before(decodes):
    conv = next(fn.convention for fn in ROWS.values() if fn.convention.returns == ("output", "weights"))
    encoded = payloads.encoded_value(encode_value((np.ones((2, 2)), np.ones((2, 2)))))
    encoded["items"][1]["shape"] = [3, 3]   # bytes for 2 x 2, a shape of 3 x 3
    parts = returns.canonical_parts(conv, encoded)
    assert len(decodes) == 2
    assert parts.returned == "tuple(ndarray (2, 2), ndarray)"
    assert "weights" not in parts.values
    assert parts.unreadable["weights"].startswith("could not be used (not a real numeric array of that shape")
