"""similar_pairs (MinHash banding, then the exact measure on the candidates) against
exact_pairs (every pair measured): the same groups, pairs and scores."""
import difflib
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.batch import similarity
from grader.batch.similarity import THRESHOLD, exact_pairs, fingerprint, similar_pairs
from grader.course.spec import load_assignment

from grading_helpers import FIXTURES, ROOT, SUBMISSIONS

# The Jaccard the banding is designed for (grader/batch/similarity.py: found with probability >= 0.999).
DESIGNED_FOR = 0.55


@pytest.fixture(scope="module")
def golden_batch() -> list[tuple[str, dict]]:
    """The golden fixtures and the bundled submissions, each fingerprinted for its assignment's
    functions as `grader grade` does."""
    items = []
    for entry in json.loads((FIXTURES / "expected.json").read_text()):
        names = {n for f in load_assignment(entry["assignment"]).functions for n in f.names}
        items.append((entry["path"], fingerprint(ROOT / entry["path"], names)))
    for path in sorted(SUBMISSIONS.glob("*.ipynb")):
        items.append((f"bundled/{path.name}", fingerprint(path, {"self_attention", "multi_head_attention"})))
    return items


def jaccard(a: str, b: str) -> float:
    # Each occurrence of a shingle hashes to its own element, so the sets' Jaccard is the multiset one.
    x, y = set(similarity.shingles(a).tolist()), set(similarity.shingles(b).tolist())
    return len(x & y) / len(x | y)


@pytest.mark.slow
def test_the_golden_and_bundled_batches_give_the_exact_pairs_and_scores(golden_batch):
    expected = exact_pairs(golden_batch)
    assert sum(1 for p in expected if p["b"]) > 100     # many near pairs, not only identical groups
    assert similar_pairs(golden_batch) == expected


def test_pairs_at_the_threshold_in_the_golden_batch_have_the_jaccard_the_banding_is_designed_for(golden_batch):
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    at_threshold = [(a, b) for i, a in enumerate(texts) for b in texts[i + 1:]
                    if similarity.ratio_at_threshold(a, b, THRESHOLD) is not None]
    assert at_threshold
    assert min(jaccard(a, b) for a, b in at_threshold) >= DESIGNED_FOR + 0.05


def test_the_banding_finds_a_pair_at_the_designed_jaccard_with_probability_0_999():
    j = DESIGNED_FOR
    assert 1 - (1 - j ** similarity.ROWS) ** similarity.BANDS >= 0.999


def near_copy(base: str, start: int, threshold: float, above: bool) -> str:
    """base with characters from `start` on replaced, as many as keep its ratio to base at or
    above the threshold (`above`) or one more, which takes it just below."""
    def edited(n):
        return base[:start] + "".join("#" if c != "#" else "@" for c in base[start:start + n]) + base[start + n:]
    n = 1
    while difflib.SequenceMatcher(None, base, edited(n + 1), autojunk=False).ratio() >= threshold:
        n += 1
    return edited(n if above else n + 1)


@pytest.mark.slow
def test_planted_near_copies_at_and_just_below_the_threshold(golden_batch):
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    items = [(f"other{i}", t) for i, t in enumerate(texts)]
    bases = [(label, t) for label, t in items if len(t) > 300][:6]
    at, below = [], []
    for i, (base_label, base) in enumerate(bases):
        start = (i * 97) % (len(base) // 2)
        at.append((base_label, base, f"at{i}", near_copy(base, start, THRESHOLD, above=True)))
        below.append((base_label, base, f"below{i}", near_copy(base, start + 13, THRESHOLD, above=False)))
    items += [(label, text) for _, _, label, text in at + below]
    found = similar_pairs(items)
    assert found == exact_pairs(items)
    reported = [set(p["a"]) | set(p["b"]) for p in found]
    for base_label, base, label, text in at:
        assert THRESHOLD <= difflib.SequenceMatcher(None, base, text, autojunk=False).ratio() < THRESHOLD + 0.01
        assert any({base_label, label} <= group for group in reported)
    for base_label, base, label, text in below:
        assert difflib.SequenceMatcher(None, base, text, autojunk=False).ratio() < THRESHOLD
        assert not any({base_label, label} <= group for group in reported)


@pytest.mark.slow
def test_a_line_added_at_the_top_renumbers_every_variable_yet_the_copy_is_found(golden_batch):
    """Every later v<n> becomes v<n+1>: one character each to the measure, and the shingles
    drop the numbers so that the copy stays a candidate."""
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    base = max(texts, key=len)
    renumbered = base
    for n in range(40, -1, -1):
        renumbered = renumbered.replace(f"v{n}", f"v{n + 1}")
    assert jaccard(base, renumbered) == 1.0
    items = [(f"other{i}", t) for i, t in enumerate(texts)] + [("renumbered", renumbered)]
    assert similar_pairs(items) == exact_pairs(items)


@pytest.mark.slow
def test_two_runs_in_two_interpreters_give_the_same_signatures(golden_batch, tmp_path):
    """The hash functions are seeded and the shingles hashed without Python's hash(), which
    each interpreter salts: two runs of a batch name the same pairs."""
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = ("import json, sys, numpy as np\nfrom grader.batch.similarity import signatures\n"
              "np.save(sys.argv[2], signatures(json.load(open(sys.argv[1]))))\n")
    for run, seed in enumerate(("1", "2")):
        subprocess.run([sys.executable, "-c", script, tmp_path / "texts.json", tmp_path / f"run{run}.npy"],
                       check=True, env={**os.environ, "PYTHONHASHSEED": seed})
    first, second = np.load(tmp_path / "run0.npy"), np.load(tmp_path / "run1.npy")
    assert first.shape == (len(texts), similarity.ROWS * similarity.BANDS)
    assert (first == second).all() and (first == similarity.signatures(texts)).all()


def test_texts_shorter_than_a_shingle_and_classes_of_one_or_none():
    assert similar_pairs([]) == exact_pairs([]) == []
    assert similar_pairs([("a", "x = 1")]) == []
    items = [("a", "x = 1"), ("b", "x = 1"), ("c", "x = 2"), ("d", "y")]
    assert similar_pairs(items) == exact_pairs(items)


def longest_common_subsequence(a: str, b: str) -> int:
    previous = [0] * (len(b) + 1)
    for char in a:
        current = [0]
        for j, other in enumerate(b):
            current.append(previous[j] + 1 if char == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


short_texts = st.text(alphabet="ab c\0(v1)", max_size=40)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(short_texts.filter(bool), st.lists(short_texts, min_size=1, max_size=6))
def test_the_bound_s_subsequences_are_the_longest_common_ones(text, others):
    """The carries of one text's segment never reach the next, whatever the texts hold; and
    difflib's ratio never exceeds the bound similar_pairs takes from them."""
    found = similarity.common_subsequences(text, others)
    assert found == [longest_common_subsequence(text, o) for o in others]
    for other, common in zip(others, found):
        ratio = difflib.SequenceMatcher(None, text, other, autojunk=False).ratio()
        assert ratio <= 2 * common / (len(text) + len(other))


@settings(max_examples=200, deadline=None)
@given(st.lists(short_texts.filter(bool), min_size=2, max_size=6, unique=True), st.floats(0.5, 1.0))
def test_the_character_count_bound_passes_the_pairs_difflib_s_quick_ratio_passes(texts, threshold):
    pairs = [(a, b) for a in range(len(texts)) for b in range(a + 1, len(texts))]
    expected = [(a, b) for a, b in pairs
                if difflib.SequenceMatcher(None, texts[a], texts[b], autojunk=False).quick_ratio() >= threshold]
    assert similarity.within_character_counts(texts, pairs, threshold) == expected


def difflib_matched(a: str, b: str) -> int:
    return sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())


@st.composite
def text_pairs(draw):
    """Two texts over a small alphabet (many ties and repeats), often one a near-copy of the
    other: a few characters inserted, deleted or replaced, or a stretch moved."""
    alphabet = draw(st.sampled_from(["a", "ab", "ab \n", "abc(v1)= ", "abcdefghijklmnop"]))
    a = draw(st.text(alphabet=alphabet, max_size=80))
    if draw(st.booleans()):
        return a, draw(st.text(alphabet=alphabet, max_size=80))
    b = list(a)
    for _ in range(draw(st.integers(0, 6))):
        where = draw(st.integers(0, len(b)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "move"]))
        if kind == "insert":
            b.insert(where, draw(st.sampled_from(alphabet)))
        elif where < len(b) and kind == "delete":
            del b[where]
        elif where < len(b) and kind == "replace":
            b[where] = draw(st.sampled_from(alphabet))
        elif where < len(b):
            stretch, b = b[where:where + 5], b[:where] + b[where + 5:]
            b[draw(st.integers(0, len(b))):0] = stretch
    return a, "".join(b)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(text_pairs(), st.sampled_from([None, 1, 2, 3, 5]))
def test_the_matched_characters_are_difflib_s(pair, gram):
    """Each range's longest run, its ties (smallest i, then j) and the ranges left to difflib
    give difflib's count, with the gram length at which runs are found or any shorter one."""
    a, b = pair
    assert similarity.matched_characters(a, b, gram) == difflib_matched(a, b)
    assert similarity.matched_characters(b, a, gram) == difflib_matched(b, a)
    assert similarity.ratio(a, b) == difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@pytest.mark.slow
def test_the_ratio_is_difflib_s_on_the_golden_batch_and_near_copies_of_it(golden_batch):
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    pairs = list(zip(texts, texts[1:])) + [(t, t[:len(t) // 3] + "#" + t[len(t) // 3:].replace("v1", "v2", 3))
                                          for t in texts]
    for a, b in pairs:
        expected = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        assert similarity.ratio_at_threshold(a, b, 0.0) == expected
        assert similarity.ratio_at_threshold(a, b, THRESHOLD) == (expected if expected >= THRESHOLD else None)


@pytest.mark.slow
def test_the_matched_characters_are_difflib_s_on_many_short_random_pairs():
    """Where a range's longest listed run, cut to it, is shorter than a gram, a run too short to
    be listed may be longer: such ranges are difflib's. Short texts over two to four letters
    meet that often."""
    rng = random.Random(7)
    for _ in range(4000):
        alphabet = rng.choice(["ab", "abc", "abcd"])
        a, b = ("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16))) for _ in range(2))
        for gram in (2, 3, 4):
            assert similarity.matched_characters(a, b, gram) == difflib_matched(a, b), (a, b, gram)


def test_a_text_of_one_repeated_character_is_left_to_difflib(monkeypatch):
    a, b = "x" * 300 + "y" + "x" * 200, "x" * 450 + "yx"
    assert similarity.common_runs(a, b, 8) is not None
    monkeypatch.setattr(similarity, "MOST_GRAM_PAIRS", 1000)
    assert similarity.common_runs(a, b, 8) is None
    assert similarity.matched_characters(a, b) == difflib_matched(a, b)


def test_grams_too_long_for_64_bits_and_lone_surrogates_are_still_difflib_s():
    a, b = "abcdefghijklmnop" * 5, "abcdefghXjklmnop" * 5
    assert similarity.common_runs(a, b, 17) is None                     # 16 letters: 4 bits each
    assert similarity.matched_characters(a, b, 17) == difflib_matched(a, b)
    a, b = "x = '\ud800\udfff' + y" * 3, "x = '\ud800' + y" * 3
    assert similarity.matched_characters(a, b, 2) == difflib_matched(a, b)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(short_texts.filter(bool), st.lists(short_texts, max_size=6), st.integers(1, 5))
def test_the_grouped_bound_is_at_least_the_longest_common_subsequence(text, others, count):
    groups = similarity.character_groups([text, *others], count)
    bound = similarity.grouped_common_subsequences(similarity.projections(text, groups),
                                                   [similarity.projections(o, groups) for o in others])
    assert len(bound) == len(others)
    assert all(most >= longest_common_subsequence(text, o) for most, o in zip(bound, others))


def test_the_candidates_are_the_pairs_whose_signatures_agree_on_a_whole_band(golden_batch):
    texts, _, _ = similarity.distinct_fingerprints(golden_batch)
    texts = texts + [texts[0] + "\n", texts[1] + " "]      # near-copies: more than one in a bucket
    signature = similarity.signatures(texts)
    bands = signature.reshape(len(texts), similarity.BANDS, similarity.ROWS)
    expected = [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts))
                if (bands[i] == bands[j]).all(axis=1).any()]
    assert len(expected) > len(texts)
    assert [tuple(pair) for pair in similarity.candidate_pairs(texts).tolist()] == expected


def test_a_fingerprint_reads_only_the_cells_that_can_define_a_graded_function(tmp_path):
    """A cell whose text holds no graded name defines none: it is not parsed, so one nested
    deeper than Python can parse no longer costs the submission its fingerprint (the grading's
    own scan skips it too). A cell holding a name in non-ASCII text is still read: Python reads
    `ｓelf_attention` (a fullwidth s) as `self_attention`."""
    import nbformat
    nested = "x = 1" + " + 1" * 200_000   # a RecursionError while the tree is built
    defined = "def self_attention(X):\n    return X @ X.T\n"
    fullwidth = "def \uff53elf_attention(X):\n    return X\n"
    for cells, found in (([nested, defined], {"self_attention"}), ([nested, fullwidth], {"self_attention"})):
        path = tmp_path / "submission.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
        assert set(fingerprint(path, {"self_attention"})) == found
