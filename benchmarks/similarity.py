"""Similarity across a class: seconds for `similar_pairs` (MinHash signatures, LSH banding,
then the exact measure on the candidates only) on 100, 1,000 and 5,000 distinct submissions,
against comparing every pair (`exact_pairs`), and whether both report the same pairs.

The submissions are generated: each is a self_attention and a multi_head_attention written
the way students write them, every part drawn from the forms students use (the projections in
any order, `@` or np.dot, the softmax with or without its max subtracted, heads by slicing or
by reshaping, extra lines of their own), with renamed variables; and a few are near-copies of
another, one part or one line changed. They are fingerprinted as `grader grade` fingerprints a
notebook, so only the distinct fingerprints count.

    python benchmarks/similarity.py [--sizes 100,1000,5000] [--exact-up-to 1000] [--seed 0]
"""
import argparse
import ast
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.batch.similarity import (THRESHOLD, candidate_pairs, distinct_fingerprints, exact_pairs,  # noqa: E402
                                     normalised_source, ratio_at_threshold, similar_pairs)

NAMES = {"Q": ["Q", "q", "queries", "query"], "K": ["K", "k", "keys", "key"], "V": ["V", "v", "values", "value"],
         "S": ["scores", "s", "logits", "att", "A"], "E": ["e", "exp_scores", "ex", "numer", "z"],
         "W": ["weights", "w", "attn", "attention_weights", "P"], "O": ["out", "output", "result", "y", "Z"],
         "D": ["d_k", "d", "dk", "dim", "scale_dim"], "X": ["X", "x", "inputs", "tokens"],
         "H": ["H", "num_heads", "heads", "n_heads"], "h": ["h", "i", "head", "j"],
         "L": ["outs", "head_outputs", "outputs", "res"], "M": ["ws", "head_weights", "all_weights", "maps"]}

PROJECTIONS = [["Q = X @ Wq", "K = X @ Wk", "V = X @ Wv"],
               ["Q = np.dot(X, Wq)", "K = np.dot(X, Wk)", "V = np.dot(X, Wv)"],
               ["Q = np.matmul(X, Wq)", "K = np.matmul(X, Wk)", "V = np.matmul(X, Wv)"],
               ["Q = X.dot(Wq)", "K = X.dot(Wk)", "V = X.dot(Wv)"]]
DIMENSION = ["D = K.shape[1]", "D = K.shape[-1]", "D = Wk.shape[1]", "D = Q.shape[1]", "D = Q.shape[-1]"]
SCORES = ["S = Q @ K.T", "S = np.dot(Q, K.T)", "S = np.matmul(Q, K.T)", "S = Q @ K.transpose()",
          "S = np.einsum('id,jd->ij', Q, K)", "S = Q.dot(K.T)"]
SCALING = ["S /= np.sqrt(D)", "S = S / np.sqrt(D)", "S = S * D ** -0.5", "S = S / D ** 0.5", "S = S / math.sqrt(D)",
           "S *= 1 / np.sqrt(D)"]
STABLE = [[], ["S = S - S.max(axis=1, keepdims=True)"], ["S = S - np.max(S, axis=-1, keepdims=True)"],
          ["S -= S.max(1, keepdims=True)"], ["S = S - np.amax(S, axis=1)[:, None]"]]
SOFTMAX = [["E = np.exp(S)", "W = E / np.sum(E, axis=1, keepdims=True)"],
           ["E = np.exp(S)", "W = E / E.sum(axis=-1, keepdims=True)"],
           ["E = np.exp(S)", "W = E / E.sum(1)[:, None]"],
           ["E = np.exp(S)", "W = E / np.sum(E, axis=1).reshape(-1, 1)"],
           ["W = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)"],
           ["W = softmax(S)"], ["W = softmax(S, axis=-1)"]]
OUTPUT = ["O = W @ V", "O = np.dot(W, V)", "O = np.matmul(W, V)", "O = W.dot(V)"]
RETURN = ["return O, W", "return (O, W)", "return [O, W]"]
OWN_LINES = ["assert X.ndim == 2", "X = np.asarray(X)", "X = np.asarray(X, dtype=float)", "n = X.shape[0]",
             "S = S.astype(np.float64)", "W = np.nan_to_num(W)", "assert np.allclose(W.sum(axis=1), 1)",
             "eps = 1e-9", "print(S.shape)", "print('weights', W.shape)", "assert Q.shape == K.shape",
             "W = W.astype(X.dtype)"]

HEADS = [["D = Wk.shape[1] // H", "L, M = [], []", "for h in range(H):",
          "    O, W = self_attention(X, Wq[:, h * D:(h + 1) * D], Wk[:, h * D:(h + 1) * D], Wv[:, h * D:(h + 1) * D])",
          "    L.append(O)", "    M.append(W)"],
         ["L = []", "M = []", "for h in np.split(np.arange(Wk.shape[1]), H):",
          "    O, W = self_attention(X, Wq[:, h], Wk[:, h], Wv[:, h])", "    L.append(O)", "    M.append(W)"],
         ["pairs = [self_attention(X, q, k, v) for q, k, v in zip(np.split(Wq, H, axis=1), np.split(Wk, H, axis=1), "
          "np.split(Wv, H, axis=1))]", "L = [p[0] for p in pairs]", "M = [p[1] for p in pairs]"],
         ["D = Wq.shape[1] // H", "L = []", "M = []", "for h in range(H):", "    s = slice(h * D, (h + 1) * D)",
          "    O, W = self_attention(X, Wq[:, s], Wk[:, s], Wv[:, s])", "    L.append(O)", "    M.append(W)"]]
CONCAT = ["O = np.concatenate(L, axis=1)", "O = np.hstack(L)", "O = np.concatenate(L, axis=-1)",
          "O = np.column_stack(L)"]
HEAD_RETURN = ["return O, M", "return (O, M)", "return O, np.stack(M)", "return O, np.array(M)"]


def attention(rng: random.Random) -> list[str]:
    """A self_attention's body as a student writes it, each part drawn from its forms."""
    projections = list(rng.choice(PROJECTIONS))
    rng.shuffle(projections)
    body = projections + [rng.choice(DIMENSION), rng.choice(SCORES), rng.choice(SCALING), *rng.choice(STABLE),
                          *rng.choice(SOFTMAX), rng.choice(OUTPUT)]
    for line in rng.sample(OWN_LINES, rng.randint(0, 3)):
        body.insert(rng.randint(0, len(body)), line)
    return body + [rng.choice(RETURN)]


def heads(rng: random.Random) -> list[str]:
    body = list(rng.choice(HEADS)) + [rng.choice(CONCAT)]
    if rng.random() < 0.3:
        body.insert(0, rng.choice(["assert Wq.shape[1] % H == 0", "X = np.asarray(X)", "n = X.shape[0]"]))
    return body + [rng.choice(HEAD_RETURN)]


def near_copy(parts: tuple[list[str], list[str]], rng: random.Random) -> tuple[list[str], list[str]]:
    """Another's two functions with one line of its self_attention added, removed or redrawn."""
    body = list(parts[0])
    where = rng.randrange(len(body) - 1)
    change = rng.choice(["add", "drop", "redraw"])
    if change == "add":
        body.insert(where, rng.choice(OWN_LINES))
    elif change == "drop" and len(body) > 3:
        del body[where]
    else:
        body[where] = rng.choice(DIMENSION + SCORES + SCALING + OUTPUT)
    return body, list(parts[1])


def source(parts: tuple[list[str], list[str]], rng: random.Random) -> str:
    """The notebook's source of both functions, its variables named as this student names them."""
    names = {key: rng.choice(choices) for key, choices in NAMES.items()}
    text = ("def self_attention(X, Wq, Wk, Wv):\n" + "".join(f"    {line}\n" for line in parts[0])
            + "\n\ndef multi_head_attention(X, Wq, Wk, Wv, H):\n" + "".join(f"    {line}\n" for line in parts[1]))
    tokens = ast.parse(text)
    for node in ast.walk(tokens):
        if isinstance(node, ast.Name) and node.id in names:
            node.id = names[node.id]
        elif isinstance(node, ast.arg) and node.arg in names:
            node.arg = names[node.arg]
    return ast.unparse(tokens)


def fingerprints(count: int, seed: int) -> list[tuple[str, dict]]:
    """`count` submissions with distinct fingerprints; one in twenty is a near-copy of another."""
    rng = random.Random(seed)
    made, seen, parts_of = [], set(), []
    while len(made) < count:
        if parts_of and rng.random() < 0.05:
            parts = near_copy(rng.choice(parts_of), rng)
        else:
            parts = (attention(rng), heads(rng))
        found = normalised_source(ast.parse(source(parts, rng)), {"self_attention", "multi_head_attention"})
        key = tuple(sorted(found.items()))
        if key not in seen:
            seen.add(key)
            parts_of.append(parts)
            made.append((f"s{len(made):05d}", found))
    return made


def timed(method, items) -> tuple[float, float, list[dict]]:
    """Wall and CPU seconds of one call, and what it returned."""
    wall, cpu = time.perf_counter(), time.process_time()
    found = method(items)
    return time.perf_counter() - wall, time.process_time() - cpu, found


def exact_estimate(items, sample: int = 2000) -> float:
    """CPU seconds exact_pairs would take: the measure on `sample` random pairs, scaled to all."""
    texts = list(distinct_fingerprints(items)[0])
    rng = random.Random(0)
    pairs = [rng.sample(range(len(texts)), 2) for _ in range(sample)]
    cpu = time.process_time()
    for a, b in pairs:
        ratio_at_threshold(texts[a], texts[b], THRESHOLD)
    return (time.process_time() - cpu) / sample * len(texts) * (len(texts) - 1) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="numbers of distinct submissions, comma-separated")
    parser.add_argument("--exact-up-to", type=int, default=300,
                        help="run exact_pairs too only up to this many submissions; above, its CPU time is "
                             "estimated from 2,000 random pairs and the pairs are not compared")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'distinct':>8} {'wall s':>8} {'CPU s':>8} {'candidates':>11} {'exact CPU s':>12} {'ratio':>7} "
          f"{'pairs':>6}  same pairs as exact_pairs")
    for count in (int(n) for n in args.sizes.split(",")):
        items = fingerprints(count, args.seed)
        texts = distinct_fingerprints(items)[0]
        share = len(candidate_pairs(texts)) / (len(texts) * (len(texts) - 1) / 2)
        wall, cpu, found = timed(similar_pairs, items)
        if count <= args.exact_up_to:
            _, exact, expected = timed(exact_pairs, items)
            same, label = ("yes" if found == expected else "NO"), f"{exact:>12.1f}"
        else:
            exact, same = exact_estimate(items), "(not compared)"
            label = f"{'~' + format(exact, '.0f'):>12}"
        print(f"{count:>8} {wall:>8.1f} {cpu:>8.1f} {share:>10.1%} {label} {exact / cpu:>6.0f}x "
              f"{len(found):>6}  {same}", flush=True)


if __name__ == "__main__":
    main()
