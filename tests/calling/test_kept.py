"""What a class's method keeps on its object (`self.attention_scores = weights`, returning only
the output) is a part the grader reads after the call, as if returned: the `kept` key of a
convention's `class` table, read back by the harness and checked like any return."""
import numpy as np
import pytest

from grader.calling import classes
from grader.calling.returns import Tolerance, canonical_parts, same
from grader.course.spec import parse
from grader.errors import SpecError
from grader.judging.checks import Context, check_probes
from grader.kernel import replies as payloads
from grader.calling.class_table import MAX_READ_BACK
from grader.kernel_side import harness, wire

SPEC = ('[[functions]]\nname = "ScaledDotProductAttention"\n[functions.convention]\n'
        'params = [{ name = "Q", role = "q", heads = "axis" }, { name = "K", role = "k", heads = "axis" }, '
        '{ name = "V", role = "v", heads = "axis" }]\nreturns = "heads"\nbatch = "any"\n'
        '[functions.convention.class]\nmethod = "forward"\n')
KEPT = 'kept = { attention_scores = "weights" }\n'


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Keeps:
    """Attention on any leading axes (PyTorch's (N, ..., L, E) shapes) that keeps its weights
    on the object and returns only the output, written for this test."""

    def forward(self, Q, K, V):
        self.attention_scores = _softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
        return self.attention_scores @ V


class KeepsNothing(Keeps):
    def forward(self, Q, K, V):
        return _softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])) @ V


def test_a_kept_part_is_read_as_returned_after_those_the_call_returns():
    conv = parse(SPEC + KEPT, "course.toml").functions[0].convention
    assert conv.kept == (("attention_scores", "weights_per_head"),)
    assert conv.returns == ("heads", "weights_per_head") and conv.returned == ("heads",)
    assert not conv.returns_tuple and "softmax" in conv.steps
    single = parse(SPEC.replace(', heads = "axis"', "") + KEPT, "course.toml").functions[0].convention
    assert single.kept == (("attention_scores", "weights"),)


def _calls(cls, conv, fn, seed=3):
    """Each random_shapes probe's call made as the harness makes it: the request built by the
    grader, the object made and its method called by the harness, the reply checked, then read."""
    for probe in check_probes("random_shapes", fn, Context(seed=seed, tolerance=Tolerance())):
        request = classes.request(conv, classes.sent_arguments(probe, conv), probe.variant.layout)
        assert request["object"]["kept"] == [a for a, _ in conv.kept]
        method, _, _, read_kept = harness._method_of(cls, request["object"], {"at": ""})
        value = method(*[wire.decode_argument(a) for a in request["args"]])
        reply = payloads.call_reply({"found": True, "value": wire.encode_value(value), "kept": read_kept()})
        yield probe, canonical_parts(conv, reply["value"], reply.get("kept"))


def test_the_harness_reads_the_kept_attribute_back_and_it_is_the_reference_s_part():
    fn = parse(SPEC + KEPT, "course.toml").functions[0]
    for probe, parts in _calls(Keeps, fn.convention, fn):
        assert not parts.problems, parts.problems
        for part, expected in fn.convention.expected_parts(probe.case).items():
            assert same(parts.values[part], expected, Tolerance()), (probe.label, part)


def test_an_attribute_the_object_does_not_have_after_the_call_is_said_so():
    fn = parse(SPEC + KEPT, "course.toml").functions[0]
    for _, parts in _calls(KeepsNothing, fn.convention, fn):
        assert "weights_per_head" not in parts.values and "heads" in parts.values
        assert parts.missing("weights_per_head") == \
            "were not kept: the object has no attribute `attention_scores` after the call"


def test_a_reply_without_the_kept_values_leaves_the_part_missing_and_a_malformed_one_is_refused():
    conv = parse(SPEC + KEPT, "course.toml").functions[0].convention
    parts = canonical_parts(conv, wire.encode_value(np.zeros((1, 2, 1, 3, 4))))
    assert parts.missing("weights_per_head") == \
        "were not read back from `self.attention_scores`: the reply to the call left it out"
    # More attributes than the grader reads back after a call (spec infer's MAX_READ_BACK) is malformed.
    for kept in ("weights", [wire.encode_value(None)] * (MAX_READ_BACK + 1), [{"kind": "bogus"}]):
        with pytest.raises(payloads.BadReply):
            payloads.call_reply({"found": True, "value": wire.encode_value(1.0), "kept": kept})
    read = canonical_parts(conv, wire.encode_value(np.zeros((1, 2, 1, 3, 4))), [wire.encode_value(None)])
    assert read.missing("weights_per_head") == "kept in `self.attention_scores` came back as None"


@pytest.mark.parametrize("table, words", [
    ('kept = "weights"\n', "kept: must be a table"),
    ('kept = {}\n', "kept: must be a table"),
    ('kept = { attention_scores = "attn" }\n', "attention_scores: 'attn' is not a part"),
    ('kept = { __dict__ = "weights" }\n', "'__dict__' is not an attribute"),
    ('kept = { forward = "weights" }\n', "forward is the method graded"),
    ('kept = { a = "weights", b = "weights" }\n', "a part is kept in two attributes"),
    ('kept = { attention_scores = "heads" }\n', "'heads' is both returned and kept"),
    ('kept = { attention_scores = "q" }\n', "returns 'q', which is computed before its inputs"),
])
def test_a_kept_table_that_cannot_be_read_is_one_line_naming_it(table, words):
    with pytest.raises(SpecError) as error:
        parse(SPEC + table, "course.toml")
    assert words in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_an_attribute_the_weights_are_set_through_is_not_a_kept_part():
    spec = ('[[functions]]\nname = "Attention"\n[functions.convention]\nparams = [{ name = "x", role = "x" }]\n'
            'returns = "output"\n[functions.convention.class]\nmethod = "forward"\n'
            'attributes = { W_q = "wq", W_k = "wk", W_v = "wv" }\nkept = { W_q = "weights" }\n')
    with pytest.raises(SpecError, match="W_q is an attribute the weights are set through"):
        parse(spec, "course.toml")


def test_an_attribute_named_as_a_notebook_global_is_not_a_read_of_that_global():
    """`self.N` in a method is the object's attribute, not the notebook's global N (which a test
    cell may well define): only the names a function loads as globals are its globals."""
    from grader.kernel_side import harness

    source = ("N = 3\nscale = 2.0\n"
              "class Attention:\n    def forward(self, x):\n        self.N = x.shape[0]\n"
              "        return x * scale + self.N\n")
    space: dict = {}
    exec(compile(source, "<ipython-input>", "exec"), space)
    names = harness._code_names(space["Attention"].forward.__code__)
    assert "scale" in names and "N" not in names
