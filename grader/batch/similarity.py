"""Pairs of submissions whose graded functions are identical or nearly so once names,
whitespace, comments and docstrings are normalised: a flag for a human, not a verdict."""
from __future__ import annotations

import ast
import difflib
import itertools
import re
import sys

import numpy as np

from grader.intake.notebook import SubmissionError, code_cells, load_submission
from grader.intake.source_scan import is_stub, python_source

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
        try:
            tree = ast.parse(python_source(source))
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
    scored = []
    for a, others in sorted(partners.items()):
        # difflib's matching blocks are a common subsequence: the ratio is at most 2 * LCS / T.
        # That bound, for all of a text's candidates in one pass, rules out nearly every pair
        # below the threshold at a small part of difflib's cost; the rest are measured.
        longest = common_subsequences(texts[a], [texts[b] for b in others])
        for b, common in zip(others, longest):
            if 2 * common / (len(texts[a]) + len(texts[b])) >= threshold \
                    and (ratio := ratio_at_threshold(texts[a], texts[b], threshold)) is not None:
                scored.append((a, b, ratio))
    return _groups(texts, labels, parts, scored)


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
    """The measure itself: difflib's ratio of the two texts, if at or above the threshold."""
    matcher = difflib.SequenceMatcher(None, fa, fb, autojunk=False)
    if matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold:
        ratio = matcher.ratio()
        if ratio >= threshold:
            return ratio
    return None


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
# at the threshold on the bundled and golden batches have J >= 0.6 (tests/test_similarity.py).
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
        hashed = (a[:, None] * shingles(text)[None, :] + b[:, None]) >> np.uint64(32)
        out[i] = hashed.min(axis=1)
    return out


def candidate_pairs(texts: list[str]) -> list[tuple[int, int]]:
    """The pairs (i < j, in order) of texts whose signatures agree on every row of some band."""
    if len(texts) < 2:
        return []
    signature = signatures(texts)
    found: set[tuple[int, int]] = set()
    for band in range(BANDS):
        rows = signature[:, band * ROWS:(band + 1) * ROWS]
        key = np.zeros(len(texts), np.uint64)
        for row in rows.T:
            key = _mixed(key ^ row.astype(np.uint64))
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
        for start, end in zip(starts[:-1], starts[1:]):
            if end - start > 1:
                found.update(itertools.combinations(sorted(order[start:end].tolist()), 2))
    return sorted(found)


def within_character_counts(texts: list[str], pairs: list[tuple[int, int]], threshold: float) -> list[tuple[int, int]]:
    """The pairs whose ratio's first bound, difflib's quick_ratio (the characters the two have
    in common, however placed), reaches the threshold: computed for all pairs at once."""
    if not pairs:
        return []
    alphabet = {char: i for i, char in enumerate(sorted(set().union(*map(set, texts))))}
    counts = np.zeros((len(texts), len(alphabet)), np.int32)
    for row, text in enumerate(texts):
        codes = np.fromiter((alphabet[c] for c in text), np.int64, len(text))
        counts[row] = np.bincount(codes, minlength=len(alphabet))
    lengths = counts.sum(axis=1)
    index = np.array(pairs, np.int64)
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
    laid = "".join(other + "\0" for other in others)
    codes = np.frombuffer(laid.encode("utf-32-le"), dtype="<u4")
    guard = np.zeros(len(laid), bool)
    ends = np.cumsum([len(other) + 1 for other in others]) - 1
    guard[ends] = True
    masks = {}
    for char in set(text):
        hits = (codes == ord(char)) & ~guard
        masks[char] = int.from_bytes(np.packbits(hits, bitorder="little").tobytes(), "little")
    keep = int.from_bytes(np.packbits(~guard, bitorder="little").tobytes(), "little")
    v = keep
    for char in text:
        u = v & masks[char]
        v = ((v + u) | (v - u)) & keep
    unmatched = np.unpackbits(np.frombuffer(v.to_bytes((len(laid) + 7) // 8, "little"), np.uint8),
                              bitorder="little")[:len(laid)]
    remaining = np.add.reduceat(unmatched, np.r_[0, ends[:-1] + 1])
    return [len(other) - int(left) for other, left in zip(others, remaining)]
