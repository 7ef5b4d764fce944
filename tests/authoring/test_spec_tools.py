"""`grader spec infer` and `grader spec check`, as course staff use them: a spec proposed from a
solution notebook, run in a real kernel, that grades the solution at full marks and says what
each function's convention is; a spec validated, and a solution graded with it."""
import shutil
import subprocess
from pathlib import Path

import nbformat
import numpy as np
import pytest
import tomllib

from grading_helpers import FIXTURES, GRADER, ROOT, SAMPLES, SUBMISSIONS, write_notebook
from grader.calling.conventions import parse_convention
from grader.reference.attention import attention
from grader.calling.returns import Tolerance
from grader.course.spec import DEFAULT_FORBIDDEN, load_assignment, parse
from grader.authoring.spec_tools.candidates import candidates
from grader.authoring.spec_tools.returned import read_returns
from grader.authoring.spec_tools.roles import Guess, guesses
from grader.authoring.spec_tools.signatures import notebook_functions
from grader.toml_text import dumps, load_toml
from grader.kernel_side.wire import encode_value
from grader.calling import cases


def run(*args):
    return subprocess.run([*GRADER, *map(str, args)], capture_output=True, text=True, timeout=600)


def one_line_error(done, words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(nb, path)
    return path


def meaning(fn) -> tuple:
    """What a convention says about calling a function and reading its return, without its
    name, description or the order of a dict's keys, nor `square`: d_k = D only narrows the
    cases (seed 003's data is square), and the general reading fits whenever it does."""
    conv = fn.convention   # a built-in convention's params are renamed by the spec's `params`
    params = tuple((name, p.role, p.heads, p.head, p.form, conv.mask_shape(p) if p.form else None,
                    tuple(sorted((k, i.role) for k, i in p.keys)))
                   for name, p in zip(fn.params, conv.params))
    keys = None if conv.return_keys is None else dict(zip(conv.returns, conv.return_keys))
    made = conv.class_call
    if made is not None:   # how the object is made; the order attributes are set in does not matter
        made = (made.method, tuple((p.name, p.role) for p in made.construct),
                tuple(sorted((p.name, p.role) for p in made.attributes)), made.init,
                tuple((p.name, p.role) for p in made.init_params))
    return (params, conv.returns if keys is None else tuple(sorted(conv.returns)), keys, conv.weights, conv.columns,
            conv.scaled, conv.per_head_returns, conv.causal_inside, conv.fully_masked, conv.batched, conv.leading_axes,
            conv.kept, made)


# Each golden solution, with the spec it is graded by: built-in or a course's own.
SOLUTIONS = [
    (SUBMISSIONS / "worked_solution.ipynb", "rows"),
    (SAMPLES / "columns_correct.ipynb", "columns"),
    (SAMPLES / "sdpa_sheet_004.ipynb", "sdpa"),
    (SAMPLES / "qkv_correct.ipynb", "qkv"),
    (SAMPLES / "two_head_sheet_002.ipynb", "two-head"),
    (FIXTURES / "masks" / "worked.ipynb", "masks"),
    (FIXTURES / "cross" / "worked.ipynb", "cross"),
    (FIXTURES / "three_inputs" / "worked.ipynb", "framework"),
    (FIXTURES / "batch" / "worked.ipynb", "batched"),
    (FIXTURES / "classes" / "worked.ipynb", str(FIXTURES / "classes" / "course.toml")),
    (FIXTURES / "conventions" / "worked.ipynb", str(FIXTURES / "conventions" / "course.toml")),
]


@pytest.fixture(scope="module")
def inferred(tmp_path_factory):
    """Each golden solution's spec inferred, then checked against it: two at a time, as each
    is a grader process with kernels of its own (the machine has two cores)."""
    from concurrent.futures import ThreadPoolExecutor
    from grading_helpers import expect_slow
    expect_slow()
    folder = tmp_path_factory.mktemp("inferred")

    def infer_and_check(index: int):
        solution = SOLUTIONS[index][0]
        out = folder / f"{index}.toml"
        done = run("spec", "infer", solution, "-o", out)
        return done, (run("spec", "check", out, solution) if done.returncode == 0 else None), out

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(infer_and_check, range(len(SOLUTIONS))))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SOLUTIONS)), ids=[Path(s).stem for s, _ in SOLUTIONS])
def test_infer_writes_the_course_s_own_conventions_and_the_spec_grades_the_solution_at_full_marks(inferred, index):
    done, checked, out = inferred[index]
    assert done.returncode == 0, done.stdout + done.stderr
    ours = {f.name: f for f in load_assignment(str(out)).functions}
    for fn in load_assignment(SOLUTIONS[index][1]).functions:
        # Every function the course grades is found, with the course's convention: roles,
        # layouts, scaling, mask form and what a fully masked row gives, returns.
        assert fn.name in ours, done.stdout
        assert meaning(ours[fn.name]) == meaning(fn), (fn.name, done.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "earns every point" in checked.stdout


def _output_of(inferred, stem: str) -> str:
    index = next(i for i, (solution, _) in enumerate(SOLUTIONS) if solution.parent.name + solution.stem == stem)
    return inferred[index][0].stdout


@pytest.mark.slow
def test_infer_says_what_it_left_out_and_what_it_could_not_decide(inferred):
    sdpa = _output_of(inferred, "samplessdpa_sheet_004")
    assert "left out plot_attention_matrix: its parameter `weights`" in sdpa and "left out make_projection" in sdpa
    # scores + mask gives the same weights for a mask of 0 / -inf and one of 0 / -1e9.
    masks = _output_of(inferred, "masksworked")
    assert "masked_attention: Q=q, K=k, V=v, mask=mask (form additive_inf)" in masks
    assert "undecided: also earns every point with mask in form additive_big" in masks


@pytest.mark.slow
def test_infer_proposes_only_the_functions_named(tmp_path):
    done = run("spec", "infer", FIXTURES / "masks" / "worked.ipynb", "-o", tmp_path / "masks.toml",
               "--function", "masked_attention")
    assert done.returncode == 0, done.stderr
    assert [f.name for f in load_assignment(str(tmp_path / "masks.toml")).functions] == ["masked_attention"]


@pytest.mark.slow
def test_a_library_the_solution_uses_is_not_forbidden_and_the_output_says_so(tmp_path):
    # Reached through `import scipy`: no import names scipy.special itself.
    solution = notebook(tmp_path / "solution.ipynb", "import numpy as np\nimport scipy",
                        "def softmax(scores):\n"
                        "    return np.exp(scores - scipy.special.logsumexp(scores, axis=-1, keepdims=True))",
                        "def attention(Q, K, V):\n    w = softmax(Q @ K.T / np.sqrt(K.shape[1]))\n    return w @ V")
    out = tmp_path / "spec.toml"
    done = run("spec", "infer", solution, "-o", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not forbidden: scipy.special" in done.stdout
    forbidden = load_assignment(str(out)).forbidden
    assert "scipy.special" not in forbidden and set(forbidden) == set(DEFAULT_FORBIDDEN) - {"scipy.special"}
    checked = run("spec", "check", out, solution)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.slow
def test_nothing_fits_is_exit_2_with_one_line(tmp_path):
    solution = notebook(tmp_path / "solution.ipynb", "import numpy as np",
                        "def attention(Q, K, V):\n    return Q + 1",          # no part of attention
                        "def plot(title, colour):\n    return None",           # no role in its names
                        "class Attention:\n    def forward(self, x):\n        return x",
                        # Right on the probe's five tokens; one token's output loses its axis.
                        "def squeezed(Q, K, V):\n    s = Q @ K.T / np.sqrt(K.shape[1])\n"
                        "    w = np.exp(s - s.max(1, keepdims=True))\n"
                        "    return np.squeeze(w / w.sum(1, keepdims=True) @ V)")
    out = tmp_path / "spec.toml"
    done = run("spec", "infer", solution, "-o", out)
    one_line_error(done, "nothing fits")
    assert "squeezed: graded with each convention that fit the probe, it lost points" in done.stderr
    assert "Attention: a class" in done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_check_fails_a_mistaken_notebook_with_exit_1():
    done = run("spec", "check", ROOT / "reference" / "assignments" / "masks.toml",
               FIXTURES / "masks" / "mistakes.ipynb")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "does not earn every point" in done.stdout


@pytest.mark.slow
def test_check_validates_a_spec_without_a_solution(tmp_path):
    done = run("spec", "check", ROOT / "reference" / "assignments" / "cross.toml")
    assert done.returncode == 0, done.stderr
    assert "a valid spec, 2 function(s): cross_attention, cross_multihead" in done.stdout


@pytest.mark.parametrize("text, words", [
    ("this is [not toml", "not valid TOML"),
    ('name = "x"\n[[functions]]\nname = "f"\nconvention = { params = [{ name = "x", role = "tokens" }], '
     'returns = "output" }', "unknown role 'tokens'"),
    ('name = "x"\n[tolerence]\nrtol = 1', "unknown key 'tolerence'"),
])
@pytest.mark.slow
def test_a_garbage_spec_is_exit_2_with_one_line(tmp_path, text, words):
    spec = tmp_path / "garbage.toml"
    spec.write_text(text)
    one_line_error(run("spec", "check", spec), words)


@pytest.mark.slow
def test_an_existing_spec_is_never_overwritten_without_force(tmp_path):
    out = tmp_path / "spec.toml"
    out.write_text("# the staff's own\n")
    one_line_error(run("spec", "infer", SUBMISSIONS / "worked_solution.ipynb", "-o", out), "--force")
    assert out.read_text() == "# the staff's own\n"
    solution = notebook(tmp_path / "solution.ipynb", "def f(Q, K, V):\n    return V")
    one_line_error(run("spec", "infer", solution, "-o", solution, "--force"), "the solution itself")
    assert "def f(Q, K, V)" in solution.read_text()


@pytest.mark.slow
def test_support_names_a_folder_that_exists(tmp_path):
    one_line_error(run("spec", "infer", SUBMISSIONS / "worked_solution.ipynb", "-o", tmp_path / "s.toml",
                       "--support", tmp_path / "missing"), "no such folder")


@pytest.mark.slow
def test_a_solution_inside_the_course_package_is_inferred_with_its_support_and_checked_at_full_marks(tmp_path):
    """homework written in the course's package (relative imports of its siblings): --support names
    the package, the proposed spec ships it as [support], and grades the solution at full marks."""
    shipped = FIXTURES / "support" / "course" / "support" / "mytorch"
    outside = run("spec", "infer", FIXTURES / "support" / "worked.py", "-o", tmp_path / "s.toml", "--support", shipped)
    one_line_error(outside, "is not inside the spec's folder")   # the spec ships its modules from its own folder
    course = tmp_path / "support" / "mytorch"
    shutil.copytree(shipped, course)
    spec = tmp_path / "course.toml"
    done = run("spec", "infer", FIXTURES / "support" / "worked.py", "-o", spec, "--support", course)
    assert done.returncode == 0, done.stdout + done.stderr
    raw = tomllib.loads(spec.read_text())
    assert raw["support"]["package"] == "mytorch" and (spec.parent / raw["support"]["path"]).resolve() == course
    assert {f["name"] for f in raw["functions"]} == {"self_attention", "multi_head_attention"}
    checked = run("spec", "check", spec, FIXTURES / "support" / "worked.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("name, first", [
    ("W_q", Guess("wq")), ("Wq", Guess("wq")), ("w_query", Guess("wq")), ("omega_q1", Guess("wq", head=1)),
    ("Wqs", Guess("wq", plural=True)), ("beta_k2", Guess("bk", head=2)), ("omega_c", Guess("wo")),
    ("b_o", Guess("bo")), ("encoder_out", Guess("memory")), ("num_heads", Guess("n_heads")), ("H", Guess("n_heads")),
    ("attn_mask", Guess("mask")), ("is_causal", Guess("causal")), ("X", Guess("x")), ("in_proj_weight", Guess("wqkv")),
    ("q_proj_weight", Guess("wq")), ("K_in", Guess("key_tokens")), ("x_v", Guess("value_tokens")),
    ("key_padding_mask", Guess("key_padding")),
])
def test_a_parameter_name_proposes_its_role_first(name, first):
    assert guesses(name)[0] == first


def test_x_may_be_the_tokens_or_a_softmax_helper_s_scores_and_an_unknown_name_nothing():
    assert [g.role for g in guesses("x")] == ["x", "scores"]
    assert guesses("title") == []


@pytest.mark.parametrize("names, sequences", [(("Q", "K", "V"), ("x", "key_tokens", "value_tokens")),
                                              (("query", "key", "value"), ("x", "key_tokens", "value_tokens"))])
def test_q_k_v_are_given_projected_or_the_three_sequences_a_function_projects(names, sequences):
    for name, letter, sequence in zip(names, "qkv", sequences):
        # First given or projected; an additive score network's readings (its vector v) after.
        assert [g.role for g in guesses(name)][:2] == [letter, sequence]


def test_a_function_of_query_key_and_value_and_their_projections_is_a_candidate(tmp_path):
    path = notebook(tmp_path / "n.ipynb", "def mha(Q, K, V, W_q, W_k, W_v, W_o, num_heads):\n    return Q")
    (signature,) = notebook_functions(nbformat.read(path, as_version=4))
    first = candidates(signature).found[0].table
    assert [p["role"] for p in first["params"][:3]] == ["x", "key_tokens", "value_tokens"]


def test_masks_taken_together_share_one_form_and_are_read_before_they_are_left_out(tmp_path):
    path = notebook(tmp_path / "n.ipynb", "def forward(query, key, value, W_q, W_k, W_v, key_padding_mask=None, "
                                          "attn_mask=None):\n    return query")
    (signature,) = notebook_functions(nbformat.read(path, as_version=4))
    found = candidates(signature).found
    masks = [{p["name"]: p.get("form") for p in c.table["params"] if p["name"].endswith("mask")} for c in found]
    assert all(len(set(m.values())) <= 1 for m in masks)
    both = next(i for i, m in enumerate(masks) if len(m) == 2 and "ignore" in m.values())
    neither = next((i for i, m in enumerate(masks) if not m), len(found))
    assert both < neither


def test_the_simplest_candidate_comes_first_and_each_is_a_convention(tmp_path):
    path = notebook(tmp_path / "n.ipynb", "def attend(X, W_q, W_k, W_v, mask=None, dropout=0.1):\n    return X")
    (signature,) = notebook_functions(nbformat.read(path, as_version=4))
    found = candidates(signature).found
    first = found[0].table
    assert [p["name"] for p in first["params"]] == ["X", "W_q", "W_k", "W_v", "mask"]   # dropout left out
    assert first["params"][4]["form"] == "keep" and "weights" not in first and "scaled" not in first
    assert [c.rank for c in found] == sorted(c.rank for c in found)
    forms = {p.get("form") for c in found for p in c.table["params"] if p["role"] == "mask"}
    assert forms == {"keep", "ignore", "additive_inf", "additive_big", "float_keep", "float_ignore"}
    for candidate in found[:20]:
        parse_convention(candidate.table, "attend", "attend")


def test_a_dict_parameter_s_keys_are_read_from_the_source(tmp_path):
    path = notebook(tmp_path / "n.ipynb", 'def f(x, params):\n    return x @ params["W_qkv"] + params["b_qkv"]')
    (signature,) = notebook_functions(nbformat.read(path, as_version=4))
    first = candidates(signature).found[0].table
    assert first["params"][1] == {"name": "params", "role": "dict", "keys": {"W_qkv": "wqkv", "b_qkv": "bqkv"}}


def _conv(returns):
    return parse_convention({"params": [{"name": "X", "role": "x"}, {"name": "Wq", "role": "wq"},
                                        {"name": "Wk", "role": "wk"}, {"name": "Wv", "role": "wv"},
                                        {"name": "H", "role": "n_heads"}], "returns": returns}, "t", "t")


def test_what_came_back_is_read_as_parts_a_tuple_a_dict_or_a_heads_axis():
    conv = _conv("output")
    case = conv.prepare(cases.base_case(conv, 7))
    result = attention(case)
    output, weights = result["output"], [h["weights"] for h in result["heads"]]
    tol = Tolerance()
    assert read_returns(conv, case, encode_value((output, weights)), tol) == {"returns": ["output", "weights"]}
    assert read_returns(conv, case, encode_value((output, np.stack(weights))), tol) == \
        {"returns": ["output", "weights"], "per_head_returns": "axis"}
    assert read_returns(conv, case, encode_value({"attn": weights, "out": output}), tol) == \
        {"returns": {"weights": "attn", "output": "out"}}
    assert read_returns(conv, case, encode_value(output), tol) == {"returns": "output"}
    assert read_returns(conv, case, encode_value((output, output + 1)), tol) is None
    assert read_returns(conv, case, encode_value(output.T), tol) is None


def test_the_spec_written_round_trips_whatever_a_name_or_key_holds():
    hostile = 'out"]\n[policy]\npenalty = "flag'
    document = {"name": "n", "title": "t\\ \u0007", "functions": [{"name": "f", "convention": {
        "params": [{"name": "x", "role": "x"}, {"name": "p", "role": "dict", "keys": {hostile: "wqkv"}}],
        "returns": {"output": hostile}, "weights": "out_in"}}]}
    text = dumps(document, "a comment\nof two lines")
    assert load_toml(text, "t") == document
    assert parse(text, "t").penalty == "zero_function"


def test_a_class_table_is_written_as_its_own_section_as_courses_write_it():
    document = {"name": "n", "functions": [{"name": "M", "convention": {
        "params": [{"name": "x", "role": "x"}], "returns": "output",
        "class": {"method": "forward", "construct": [{"name": "d_model", "role": "d_model"}],
                  "attributes": {"W_q": "wq", "W_k": "wk", "W_v": "wv"}}}}]}
    text = dumps(document)
    assert "\n[functions.convention.class]\nmethod = \"forward\"" in text
    assert load_toml(text, "t") == document
    assert parse(text, "t").functions[0].convention.class_call.method == "forward"


def test_the_docs_two_commands_for_course_staff_are_commands():
    from grader.cli import parser
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("## From a solution to a spec", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#")[0].split() for line in section.split("```sh\n", 1)[1].split("```")[0].splitlines()]
    assert [c[:3] for c in commands] == [["grader", "spec", "infer"], ["grader", "spec", "check"]]
    for command in commands:
        assert parser().parse_args(command[1:]).run.__name__ in ("spec_infer", "spec_check")


@pytest.mark.slow
def test_a_candidate_whose_call_never_ends_stops_only_itself(tmp_path):
    """Handed a 0 / -inf mask, this function never returns: those calls time out, and the
    candidates after them in the same request are called all the same (a 0/1 float mask,
    tried later, fits as well as the boolean one)."""
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.settings import Settings
    from grader.authoring.spec_tools.infer import infer
    expect_slow()
    solution = notebook(tmp_path / "solution.ipynb", "import numpy as np",
                        "def attend(Q, K, V, mask):\n    while np.isinf(mask).any():\n        pass\n"
                        "    s = np.where(mask, Q @ K.T / np.sqrt(K.shape[1]), -1e9)\n"
                        "    w = np.exp(s - s.max(1, keepdims=True))\n"
                        "    return w / w.sum(1, keepdims=True) @ V")
    inferred = infer(solution, tmp_path / "spec.toml", Settings(**{**TEST_SETTINGS.__dict__, "call_timeout": 1.0}))
    assert inferred.functions["attend"].table["params"][3] == {"name": "mask", "role": "mask", "form": "keep"}
    assert inferred.undecided["attend"] == ["mask in form float_keep"]
    assert inferred.score[0] == inferred.score[1] > 0


@pytest.mark.slow
@pytest.mark.parametrize("cells, words", [
    (("import numpy as np", "def self_attention(X, Wq, Wk, Wv):\n    raise NotImplementedError"),
     "placeholder bodies (self_attention)"),
    (("def f(:\n    pass",), "cell 1 does not parse (SyntaxError"),
])
def test_a_solution_with_nothing_to_propose_says_why(tmp_path, cells, words):
    one_line_error(run("spec", "infer", notebook(tmp_path / "solution.ipynb", *cells), "-o", tmp_path / "s.toml"),
                   words)


@pytest.mark.slow
def test_a_solution_whose_cell_raises_is_said_and_helpers_are_pointed_out(tmp_path):
    nb = nbformat.read(SUBMISSIONS / "worked_solution.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("raise ValueError('a leftover experiment')"))
    nbformat.write(nb, tmp_path / "solution.ipynb")
    done = run("spec", "infer", tmp_path / "solution.ipynb", "-o", tmp_path / "s.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: cell 1 raised ValueError: a leftover experiment; the spec fits what ran" in done.stdout
    assert "give --function NAME" in done.stdout


def test_a_notebooks_title_is_its_first_heading_without_markup():
    from grader.authoring.spec_tools.infer import notebook_title, slug
    heading = "Some words.\n\n## **Week 5**: [Self-attention](x)"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# a comment, not a heading"),
                                         nbformat.v4.new_markdown_cell(heading),
                                         nbformat.v4.new_markdown_cell("# Later")])
    assert notebook_title(nb) == "Week 5: Self-attention"
    assert slug("Week 5: Self-attention") == "week-5-self-attention"
    assert notebook_title(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])) is None


@pytest.mark.slow
def test_infer_lists_square_weights_beside_the_general_scale_and_names_the_spec_from_the_title(tmp_path):
    """The sheet's weights are square, so dividing by sqrt(D) is right there too: infer says
    that square = true also earns every point (the general scale, chosen, fails students who
    divide by sqrt(D)), and names the spec, which every student sees, from the notebook's
    heading instead of the file's name."""
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    expect_slow()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Week 5: Self-attention\n\nImplement attention."),
        nbformat.v4.new_code_cell("import numpy as np"),
        nbformat.v4.new_code_cell("def self_attention(X, Wq, Wk, Wv):\n"
                                  "    Q, K, V = X @ Wq, X @ Wk, X @ Wv\n"
                                  "    s = Q @ K.T / np.sqrt(K.shape[1])\n"
                                  "    w = np.exp(s - s.max(axis=1, keepdims=True))\n"
                                  "    w = w / w.sum(axis=1, keepdims=True)\n"
                                  "    return w @ V, w")])
    nbformat.write(nb, tmp_path / "solution.ipynb")
    inferred = infer(tmp_path / "solution.ipynb", tmp_path / "course.toml", TEST_SETTINGS)
    assert any(words.startswith("square = true") for words in inferred.undecided["self_attention"]), \
        inferred.undecided
    spec = tomllib.loads(inferred.text)
    assert (spec["name"], spec["title"]) == ("week-5-self-attention", "Week 5: Self-attention")
    assert "the notebook's first heading" in inferred.naming and "--title" in inferred.naming
    named = infer(tmp_path / "solution.ipynb", tmp_path / "course.toml", TEST_SETTINGS, name="hw3",
                  title="Homework 3")
    assert tomllib.loads(named.text)["title"] == "Homework 3" and tomllib.loads(named.text)["name"] == "hw3"


# A GPT-2 style multi-head attention, written from the model's public description: one packed
# layer {"w", "b"} projects to Q | K | V, heads are contiguous column blocks, a causal mask, then
# the output layer {"w", "b"}; each layer is applied by a helper that takes w and b as keywords.
GPT_LAYERS = '''def dense(x, w, b):
    return x @ w + b

def causal_attention(q, k, v):
    n = q.shape[0]
    s = q @ k.T / np.sqrt(q.shape[-1]) + np.triu(np.full((n, n), -1e10), 1)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v

def mha(x, c_attn, c_proj, n_head):
    q, k, v = np.split(dense(x, **c_attn), 3, axis=-1)
    heads = [causal_attention(a, b, c) for a, b, c in
             zip(np.split(q, n_head, axis=-1), np.split(k, n_head, axis=-1), np.split(v, n_head, axis=-1))]
    return dense(np.hstack(heads), **c_proj)'''


def test_a_dict_passed_on_as_keywords_has_the_callees_parameters_as_keys_and_its_layer_says_their_roles():
    from grader.authoring.spec_tools.roles import key_role
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(GPT_LAYERS)])
    mha = next(s for s in notebook_functions(nb) if s.name == "mha")
    assert [(p.name, p.keys) for p in mha.params] == [("x", ()), ("c_attn", ("w", "b")), ("c_proj", ("w", "b")),
                                                     ("n_head", ())]
    assert [key_role("c_attn", k) for k in ("w", "b")] == ["wqkv", "bqkv"]
    assert [key_role("c_proj", k) for k in ("w", "b")] == ["wo", "bo"]
    assert key_role("params", "W_q") == "wq" and key_role("params", "w") is None


@pytest.mark.slow
def test_weights_as_keyword_dicts_are_inferred_and_a_missing_causal_mask_is_named(tmp_path):
    from grading_helpers import TEST_SETTINGS, expect_slow
    from grader.authoring.spec_tools.infer import infer
    from grader.grade import grade_path
    expect_slow()

    def written(name: str, source: str) -> Path:
        return write_notebook(tmp_path / name, "import numpy as np", source)
    inferred = infer(written("solution.ipynb", GPT_LAYERS), tmp_path / "course.toml", TEST_SETTINGS, ["mha"])
    table = inferred.functions["mha"].table
    assert table["params"][1] == {"name": "c_attn", "role": "dict", "keys": {"w": "wqkv", "b": "bqkv"}}
    assert table.get("causal") is True and inferred.score[0] == inferred.score[1] > 0
    (tmp_path / "course.toml").write_text(inferred.text)
    unmasked = grade_path(written("unmasked.ipynb", GPT_LAYERS.replace(" + np.triu(np.full((n, n), -1e10), 1)", "")),
                          load_assignment(str(tmp_path / "course.toml")), TEST_SETTINGS)
    assert unmasked.score < unmasked.max_score
    assert any(c.diagnosis and "causal" in c.diagnosis for c in unmasked.checks), \
        [(c.name, c.diagnosis) for c in unmasked.checks]
