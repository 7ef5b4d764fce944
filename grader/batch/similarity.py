"""Pairs of submissions whose graded functions are identical or nearly so once names,
whitespace, comments and docstrings are normalised: a flag for a human, not a verdict."""
from __future__ import annotations

import ast
import difflib
import itertools
import re
import sys
from collections import Counter
from operator import itemgetter

import numpy as np

from grader.intake.notebook import SubmissionError, code_cells, load_submission
from grader.intake.source_scan import is_stub, may_hold, python_source
from grader import syntax_tree

THRESHOLD = 0.92


class _Renamer(ast.NodeTransformer):
    """Local names become v0, v1, ... in order of appearance; attributes (np.exp) stay."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._new(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(arg=self._new(node.arg)), node)


def _without_docstring(fn: ast.FunctionDef) -> ast.FunctionDef:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:] or [ast.Pass()]
    if sys.version_info >= (3, 12):
        return ast.FunctionDef(name="f", args=fn.args, body=body, decorator_list=[], returns=None, type_comment=None,
                               type_params=[])
    return ast.FunctionDef(name="f", args=fn.args, body=body, decorator_list=[], returns=None, type_comment=None)


def _class_without_docstrings(node: ast.ClassDef) -> ast.ClassDef | None:
    """A graded class as its methods without docstrings; None while every method is a stub
    (a template's class, the same in every submission)."""
    methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
    if all(is_stub(m) for m in methods):
        return None
    body = [m for m in node.body if not (isinstance(m, ast.Expr) and isinstance(m.value, ast.Constant))]
    body = [ast.FunctionDef(**{**vars(_without_docstring(m)), "name": m.name}) if isinstance(m, ast.FunctionDef)
            else m for m in body]
    return ast.ClassDef(**{**vars(node), "name": "C", "body": body or [ast.Pass()], "decorator_list": []})


def fingerprint(path, names: set[str]) -> dict[str, str]:
    """The normalised source of each graded function a submission defines (none: {})."""
    try:
        cells = code_cells(load_submission(path))
    except SubmissionError:
        return {}
    found: dict[str, str] = {}
    for _, source in cells:
        if not may_hold(source, names):
            continue   # no graded name in it: no definition to fingerprint, and no need to parse it
        try:
            tree = syntax_tree.parse(python_source(source))
        except SyntaxError:
            continue
        found.update(normalised_source(tree, names))
    return found


def normalised_source(tree: ast.Module, names: set[str]) -> dict[str, str]:
    """The normalised source of each graded function or class one cell defines."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names and not is_stub(node):
            normal = _Renamer().visit(_without_docstring(node))
            found[node.name] = ast.unparse(ast.fix_missing_locations(normal))
        elif isinstance(node, ast.ClassDef) and node.name in names and (cls := _class_without_docstrings(node)):
            found[node.name] = ast.unparse(ast.fix_missing_locations(_Renamer().visit(cls)))
    return found


def exact_pairs(items: list[tuple[str, dict | str]], threshold: float = THRESHOLD) -> list[dict]:
    """What similar_pairs reports, found by comparing each distinct fingerprint with each other
    one: the reference it is tested against, whose time grows with the square of the class."""
    texts, labels, parts = distinct_fingerprints(items)
    scored = ((a, b, ratio) for a, b in itertools.combinations(range(len(texts)), 2)
              if (ratio := ratio_at_threshold(texts[a], texts[b], threshold)) is not None)
    return _groups(texts, labels, parts, scored)


def similar_pairs(items: list[tuple[str, dict | str]], threshold: float = THRESHOLD) -> list[dict]:
    """items: (label, fingerprint: per function, or the text of all). Groups of submissions at
    or above the threshold, most similar first: {"a": labels, "b": [], "similarity": 1.0,
    "shared": functions} for submissions identical to one another, {"a": labels, "b": labels,
    "similarity": r, "shared": functions identical in both} for two such groups (of one or more)
    similar to each other. A group is named once, not as every pair in it: a class where many
    hand in the same code costs what its distinct submissions cost. Of those, only the pairs
    MinHash banding makes candidates are measured (candidate_pairs), so pairs whose code shares
    little are never compared; the pairs reported and their scores are exact_pairs' own."""
    texts, labels, parts = distinct_fingerprints(items)
    partners: dict[int, list[int]] = {}
    for a, b in within_character_counts(texts, candidate_pairs(texts), threshold):
        partners.setdefault(a, []).append(b)
    scored: list[tuple[int, int, float]] = []
    groups = character_groups(texts, GROUPS)
    projected = [projections(text, groups) for text in texts]
    for a, others in sorted(partners.items()):
        # difflib's matching blocks are a common subsequence: the ratio is at most 2 * LCS / T.
        # The LCS is at most the sum of the LCS of the texts' characters of each group, which
        # costs about 1/GROUPS of it and rules out most pairs; the LCS itself, for all of a
        # text's remaining candidates in one pass, rules out nearly all the rest. Those are
        # measured.
        bound = grouped_common_subsequences(projected[a], [projected[b] for b in others])
        others = _reaching(texts, a, others, bound, threshold)
        others = _reaching(texts, a, others, common_subsequences(texts[a], [texts[b] for b in others]), threshold)
        # quick_ratio, which ratio_at_threshold asks first, is the character count bound above.
        scored.extend((a, b, measured) for b in others if (measured := ratio(texts[a], texts[b])) >= threshold)
    return _groups(texts, labels, parts, scored)


def _reaching(texts: list[str], a: int, others: list[int], common: list[int], threshold: float) -> list[int]:
    """The others whose ratio with text a may reach the threshold, given a bound on the
    characters they have in common."""
    return [b for b, most in zip(others, common) if 2 * most / (len(texts[a]) + len(texts[b])) >= threshold]


def distinct_fingerprints(items) -> tuple[list[str], dict[str, list[str]], dict[str, dict]]:
    """Each distinct fingerprint's text (in order of first appearance), the labels handing it
    in, and its functions."""
    labels: dict[str, list[str]] = {}
    parts: dict[str, dict] = {}
    for label, fp in items:
        functions = fp if isinstance(fp, dict) else {}
        text = "\n".join(functions[n] for n in sorted(functions)) if isinstance(fp, dict) else fp
        if text:
            labels.setdefault(text, []).append(label)
            parts[text] = functions
    return list(labels), labels, parts


def ratio_at_threshold(fa: str, fb: str, threshold: float) -> float | None:
    """The measure itself, difflib's ratio of the two texts, if at or above the threshold."""
    matcher = difflib.SequenceMatcher(None, fa, fb, autojunk=False)
    if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
        if (measured := ratio(fa, fb)) >= threshold:
            return measured
    return None


def ratio(fa: str, fb: str) -> float:
    """difflib's SequenceMatcher(None, fa, fb, autojunk=False).ratio(), the very float: its
    matching characters counted by matched_characters, difflib's own method done faster."""
    # difflib's _calculate_ratio.
    return 2.0 * matched_characters(fa, fb) / (len(fa) + len(fb)) if fa or fb else 1.0


def _groups(texts: list[str], labels: dict, parts: dict, scored) -> list[dict]:
    """The report: identical submissions as one group each, then each similar pair (in the
    order of the texts, a before b), most similar first."""
    found = [{"a": group, "b": [], "similarity": 1.0, "shared": sorted(parts[text])}
             for text, group in labels.items() if len(group) > 1]
    for a, b, ratio in scored:
        fa, fb = texts[a], texts[b]
        shared = sorted(n for n in parts[fa] if parts[fb].get(n) == parts[fa][n])
        found.append({"a": labels[fa], "b": labels[fb], "similarity": round(ratio, 3), "shared": shared})
    return sorted(found, key=lambda p: -p["similarity"])


# MinHash with banding (LSH) finds the candidate pairs; each is then measured exactly. The
# shingles are the fingerprint's overlapping SHINGLE-character strings, with every variable's
# number dropped (v12 reads as v): a line added near the top renumbers every later variable,
# one character each to difflib, but that would break every shingle holding one.
SHINGLE = 16
# Two texts agree on a MinHash row with probability J, their shingles' (multiset) Jaccard, so
# on all ROWS of some of the BANDS with 1 - (1 - J**ROWS)**BANDS. At J = 0.55, 0.55**4 = 0.0915
# and (1 - 0.0915)**72 = 0.00098: such a pair is a candidate with probability >= 0.999. Pairs
# at the threshold on the bundled and golden batches have J >= 0.6 (tests/batch/test_similarity.py).
# difflib's ratio does not bound J from below: a pair can reach the threshold through many
# scattered one-character changes, each breaking up to SHINGLE shingles, and such a pair is
# found with the probability its J gives (0.44 at J = 0.3, 0.11 at J = 0.2).
ROWS, BANDS = 4, 72
SEED = 20261123     # the hash functions, fixed so that two runs find the same pairs
_NUMBERED = re.compile(r"\bv\d+\b")


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every bit of each uint64 stirred into every other."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shingles(text: str) -> np.ndarray:
    """The text's SHINGLE-character strings, hashed to uint64, as a multiset: the n-th
    occurrence of a string is an element of its own, so that Jaccard counts a repeated line
    as often as it is there."""
    codes = np.frombuffer(_NUMBERED.sub("v", text).encode("utf-32-le"), dtype="<u4").astype(np.uint64)
    width = max(1, len(codes) - SHINGLE + 1)
    codes = np.concatenate([codes, np.zeros(max(0, SHINGLE - len(codes)), np.uint64)])
    grams = np.zeros(width, np.uint64)
    for offset in range(SHINGLE):
        grams = _mixed(grams ^ codes[offset:offset + width])
    grams.sort()
    first = np.r_[True, grams[1:] != grams[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(width), 0))
    occurrence = (np.arange(width) - start).astype(np.uint64)
    return _mixed(grams + occurrence)


def signatures(texts: list[str]) -> np.ndarray:
    """MinHash: for each text, the least of its shingles under each of ROWS * BANDS hash
    functions ((a*x + b) mod 2**64, top 32 bits), seeded so that two runs agree."""
    rng = np.random.default_rng(SEED)
    a = rng.integers(1, 2**63, ROWS * BANDS, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**63, ROWS * BANDS, dtype=np.uint64)
    out = np.empty((len(texts), ROWS * BANDS), np.uint32)
    for i, text in enumerate(texts):
        hashed = np.multiply(a[:, None], shingles(text)[None, :])
        hashed += b[:, None]
        # The top 32 bits of the least is the least of the top 32 bits: one shift, not one each.
        out[i] = hashed.min(axis=1) >> np.uint64(32)
    return out


def candidate_pairs(texts: list[str]) -> np.ndarray:
    """The pairs (i < j, in order, one a row) of texts whose signatures agree on every row of
    some band. Found pairs are marked in a bit matrix, a bit per pair of texts (3 MB for 5,000,
    50 MB for 20,000), instead of added to a set of tuples, which is far slower to fill and
    takes more where many pairs are candidates."""
    if len(texts) < 2:
        return np.zeros((0, 2), np.int64)
    signature = signatures(texts)
    count = len(texts)
    paired = np.zeros((count, (count + 7) // 8), np.uint8)
    for band in range(BANDS):
        rows = signature[:, band * ROWS:(band + 1) * ROWS]
        key = np.zeros(count, np.uint64)
        for row in rows.T:
            key = _mixed(key ^ row.astype(np.uint64))
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], count]
        # Each text, in sorted order, with each one after it in its bucket.
        later = np.repeat(ends, ends - starts) - np.arange(count) - 1
        left = np.repeat(np.arange(count), later)
        right = left + 1 + np.arange(len(left)) - np.repeat(np.cumsum(later) - later, later)
        first, second = order[left], order[right]
        later_one = np.maximum(first, second)
        np.bitwise_or.at(paired, (np.minimum(first, second), later_one >> 3),
                         np.left_shift(1, later_one & 7).astype(np.uint8))
    # Read back a slice of rows at a time, so that no byte per pair is ever held.
    found = [np.argwhere(np.unpackbits(paired[start:start + 1024], axis=1, count=count, bitorder="little"))
             + [start, 0] for start in range(0, count, 1024)]
    return np.concatenate(found)


def within_character_counts(texts: list[str], pairs: np.ndarray | list[tuple[int, int]],
                            threshold: float) -> list[tuple[int, int]]:
    """The pairs whose ratio's first bound, difflib's quick_ratio (the characters the two have
    in common, however placed), reaches the threshold: computed for all pairs at once."""
    if not len(pairs):
        return []
    alphabet = {char: i for i, char in enumerate(sorted(set().union(*map(set, texts))))}
    counts = np.zeros((len(texts), len(alphabet)), np.int32)
    for row, text in enumerate(texts):
        codes = np.fromiter((alphabet[c] for c in text), np.int64, len(text))
        counts[row] = np.bincount(codes, minlength=len(alphabet))
    lengths = counts.sum(axis=1)
    index = np.asarray(pairs, np.int64)
    kept: list[tuple[int, int]] = []
    for chunk in np.array_split(index, max(1, len(index) // 20000)):
        common = np.minimum(counts[chunk[:, 0]], counts[chunk[:, 1]]).sum(axis=1)
        # The same arithmetic as difflib's quick_ratio, so that the same pairs pass.
        ratio = 2.0 * common / (lengths[chunk[:, 0]] + lengths[chunk[:, 1]])
        kept.extend((int(i), int(j)) for i, j in chunk[ratio >= threshold].tolist())
    return kept


def common_subsequences(text: str, others: list[str]) -> list[int]:
    """The length of the longest common subsequence of `text` and each of `others`.

    Bit-parallel (Hyyro 2004): a bit per character of the other text, one step per character
    of `text`. All the others are laid end to end in one integer, each followed by a guard bit
    that takes the carry leaving its segment and is then cleared, so one pass serves them all."""
    if not others:
        return []
    laid = "\0".join(others) + "\0"
    codes = np.frombuffer(laid.encode("utf-32-le"), dtype="<u4")
    guard = np.zeros(len(laid), bool)
    ends = np.cumsum([len(other) + 1 for other in others]) - 1
    guard[ends] = True
    chars = sorted(set(text))
    # Each character's positions, all in one comparison: a row of bits for each.
    hits = (codes[None, :] == np.array([ord(c) for c in chars], "<u4")[:, None]) & ~guard
    rows = np.packbits(hits, axis=1, bitorder="little")
    masks = {char: int.from_bytes(row.tobytes(), "little") for char, row in zip(chars, rows)}
    keep = int.from_bytes(np.packbits(~guard, bitorder="little").tobytes(), "little")
    v = keep
    for char in text:
        u = v & masks[char]
        v = ((v + u) | (v - u)) & keep
    unmatched = np.unpackbits(np.frombuffer(v.to_bytes((len(laid) + 7) // 8, "little"), np.uint8),
                              bitorder="little")[:len(laid)]
    remaining = np.add.reduceat(unmatched, np.r_[0, ends[:-1] + 1]).astype(np.int64)
    return (np.diff(ends, prepend=-1) - 1 - remaining).tolist()


# The LCS bound's cheaper first step: the alphabet split into GROUPS groups of about the same
# number of characters in the class's texts. A common subsequence of two texts, kept to one
# group's characters, is one of the two texts kept to that group's characters; so the sum over
# the groups of those LCS is at least the LCS, and each costs about 1/GROUPS**2 of it. A
# character group of its own (the space, a quarter of the text) costs nothing: its LCS is
# the lesser count.
GROUPS = 8


def character_groups(texts: list[str], count: int) -> list[str]:
    """The characters of the texts in `count` groups: each character, most frequent first, to
    the group with the fewest occurrences so far (ties to the first), so two runs agree."""
    frequency: Counter[str] = Counter()
    for text in texts:
        frequency.update(text)
    groups: list[list[str]] = [[] for _ in range(count)]
    mass = [0] * count
    for char in sorted(frequency, key=lambda c: (-frequency[c], c)):
        smallest = mass.index(min(mass))
        groups[smallest].append(char)
        mass[smallest] += frequency[char]
    return ["".join(group) for group in groups if group]


def projections(text: str, groups: list[str]) -> list[str]:
    """The text kept to each group's characters, in order."""
    present = set(text)
    return [text.translate({ord(c): None for c in present.difference(group)}) for group in groups]


def grouped_common_subsequences(text: list[str], others: list[list[str]]) -> list[int]:
    """For each of `others`, the sum over the character groups of the LCS of the two texts'
    projections (projections()): at least their LCS, at a small part of its cost."""
    total = np.zeros(len(others), np.int64)
    for group, part in enumerate(text):
        parts = [*map(itemgetter(group), others)]
        if len(set(part)) <= 1:
            total += np.minimum(len(part), np.array([len(other) for other in parts], np.int64))
        else:
            total += np.array(common_subsequences(part, parts), np.int64)
    return total.tolist()


# The exact ratio. With no junk, difflib's find_longest_match(alo, ahi, blo, bhi) is the
# longest common substring of a[alo:ahi] and b[blo:bhi], the smallest i then the smallest j
# of those as long; get_matching_blocks takes it and does the same left and right of it, and
# ratio() is 2 * (the characters in those blocks) / T. Every maximal run a[i:i+L] == b[j:j+L]
# with L >= a gram's length is found at once, from the texts' grams; a range's longest common
# substring is then the longest of those runs cut to the range, if that is a gram or longer
# (a shorter run is shorter still). A range where it is not is left to difflib itself, which
# is cheap there: such ranges are the few characters between two blocks.
LONGEST_GRAM = 8
# Above this many pairs of equal grams (a text of one repeated character), difflib does it all.
MOST_GRAM_PAIRS = 1_000_000


def _difflib_matched(a: str, b: str) -> int:
    return sum(block.size for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())


def common_runs(a: str, b: str, gram: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Every maximal run a[i:i+L] == b[j:j+L] with L >= gram, as arrays of i, j and L; None
    above MOST_GRAM_PAIRS pairs of equal grams, or where a gram does not fit in 64 bits. A gram
    is its characters' numbers in the two texts' alphabet packed into one uint64, so equal
    grams are equal keys and nothing else is."""
    raw_a, raw_b = (np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4") for text in (a, b))
    alphabet = np.unique(np.concatenate([raw_a, raw_b]))
    bits = np.uint64(max(1, (len(alphabet) - 1).bit_length()))
    if int(bits) * gram > 64:
        return None

    def keys(raw: np.ndarray) -> np.ndarray:
        codes = np.searchsorted(alphabet, raw).astype(np.uint64)
        width = len(raw) - gram + 1
        packed = np.zeros(width, np.uint64)
        for offset in range(gram):
            packed |= codes[offset:offset + width] << (bits * np.uint64(offset))
        return packed

    keys_a, keys_b = keys(raw_a), keys(raw_b)
    order = np.argsort(keys_b, kind="stable")
    low = np.searchsorted(keys_b[order], keys_a, "left")
    count = np.searchsorted(keys_b[order], keys_a, "right") - low
    total = int(count.sum())
    if total > MOST_GRAM_PAIRS:
        return None
    if not total:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    i = np.repeat(np.arange(len(keys_a)), count)
    j = order[np.repeat(low - (np.cumsum(count) - count), count) + np.arange(total)]
    # The pairs of equal grams on one diagonal at consecutive i are one run.
    diagonal = j - i
    by = np.lexsort((i, diagonal))
    i, diagonal = i[by], diagonal[by]
    first = np.flatnonzero(np.r_[True, (diagonal[1:] != diagonal[:-1]) | (i[1:] != i[:-1] + 1)])
    last = np.r_[first[1:], total] - 1
    return i[first], i[first] + diagonal[first], i[last] - i[first] + gram


def matched_characters(a: str, b: str, gram: int | None = None) -> int:
    """The characters in difflib's matching blocks of a and b (no junk, autojunk off): the
    same number, found from the runs of common_runs instead of difflib's search of every
    range, which dominates its time."""
    if gram is None:
        # As many characters as fit in 64 bits, at most LONGEST_GRAM.
        bits = max(1, (len(set(a) | set(b)) - 1).bit_length())
        gram = min(LONGEST_GRAM, 64 // bits)
    runs = common_runs(a, b, gram) if gram and min(len(a), len(b)) >= gram else None
    if runs is None:
        return _difflib_matched(a, b)
    width = len(b) + 1
    matched = 0
    ranges = [(0, len(a), 0, len(b), *runs)]
    while ranges:
        alo, ahi, blo, bhi, si, sj, sl = ranges.pop()
        # Each run cut to the range: it starts `cut` characters later and is `length` long.
        cut = np.maximum(np.maximum(alo - si, blo - sj), 0)
        length = np.minimum(np.minimum(sl, ahi - si), bhi - sj) - cut
        longest = int(length.max()) if len(length) else 0
        if longest < gram:
            matched += _difflib_matched(a[alo:ahi], b[blo:bhi])
            continue
        tied = np.flatnonzero(length == longest)
        pick = tied[np.argmin((si[tied] + cut[tied]) * width + sj[tied] + cut[tied])]
        i, j = int(si[pick] + cut[pick]), int(sj[pick] + cut[pick])
        matched += longest
        inside = length > 0
        si, sj, sl = si[inside], sj[inside], sl[inside]
        if alo < i and blo < j:
            ranges.append((alo, i, blo, j, si, sj, sl))
        if i + longest < ahi and j + longest < bhi:
            ranges.append((i + longest, ahi, j + longest, bhi, si, sj, sl))
    return matched
