"""`grader audit SPEC`: each known mistake graded as a notebook making only it would be, with no
kernel; what the checks catch, what they let through, and the page the staff read."""
import subprocess
import sys
from functools import cache

import pytest

from grading_helpers import ROOT
from golden import load
from grader.authoring.audit import Audit, FunctionAudit, Graded, audit
from grader.authoring.audit_report import text, verdict
from grader.judging.explain import applicable
from grader.reference.mistakes import MISTAKES
from grader.settings import PUBLIC_SEED
from grader.course.spec import builtin_names, load_assignment

TITLES = {m.title: m.id for m in MISTAKES}


def run(*args):
    return subprocess.run([sys.executable, "-m", "grader.cli", "audit", *map(str, args)], capture_output=True,
                          text=True, timeout=600)


@cache
def audited(spec: str, pairs: bool = False) -> dict:
    return {f.name: f for f in audit(load_assignment(spec), PUBLIC_SEED, pairs=pairs).functions}


def mistake(fn: FunctionAudit, mistake_id: str) -> Graded:
    return next(m for m in fn.mistakes if m.ids == (mistake_id,))


@pytest.mark.slow
@pytest.mark.parametrize("spec", builtin_names())
def test_every_builtin_reference_earns_every_point_and_no_mistake_slips_through(spec):
    assignment = load_assignment(spec)
    found = audit(assignment, PUBLIC_SEED)
    for declared, fn in zip(assignment.functions, found.functions):
        assert fn.reference.full_marks and fn.reference.caught_by == [], (fn.name, fn.reference)
        assert [m.ids[0] for m in fn.mistakes] == [m.id for m in applicable(declared.convention)], fn.name
    assert found.sound and found.slipping_through == []


@pytest.mark.slow
def test_known_mistakes_are_caught_by_the_checks_made_for_them():
    rows, masks, batched = audited("rows"), audited("masks"), audited("batched")
    axis = mistake(rows["self_attention"], "softmax_wrong_axis")
    assert {"random_shapes", "weights_distribution", "fixed"} <= set(axis.caught_by)
    assert axis.named == "softmax over the wrong axis" and 0 < axis.points < axis.max_points
    assert "permutation_equivariance" in mistake(rows["multi_head_attention"], "heads_stacked_on_tokens").caught_by
    assert "masked_keys_zero_weight" in mistake(masks["masked_attention"], "mask_ignored").caught_by
    assert "causal_future" in mistake(masks["causal_multihead"], "causal_ignored").caught_by
    assert "batch_elements" in mistake(batched["multi_head_attention"], "softmax_over_batch").caught_by
    # It differs only on the large scores of the informational check: full marks by design.
    overflow = mistake(rows["self_attention"], "softmax_overflow")
    assert overflow.full_marks and overflow.caught_by == ["numerical_stability"] and overflow.differs_on == []
    assert not overflow.slips_through and overflow in rows["self_attention"].full_marks_by_design
    # On the sheet's own data (seed 002's scores reach 756) it overflows where `fixed` has points, but
    # only numerical_stability judges an overflow: by design still.
    softmax = audited("two-head")["apply_softmax"]
    overflow = mistake(softmax, "softmax_overflow")
    assert overflow.full_marks and "fixed" in softmax.checks and overflow.differs_on == []
    assert overflow in softmax.full_marks_by_design
    # A mistake the convention's inputs cannot show (heads given ready-split cannot be
    # concatenated in the wrong order) computes the reference: it is said, not counted as let through.
    ready_split = mistake(batched["attention_heads"], "heads_reversed")
    assert not ready_split.differs and ready_split.full_marks
    assert ready_split in batched["attention_heads"].same_as_reference
    assert ready_split not in batched["attention_heads"].let_through
    # Heads split over the tokens cannot meet an N x N mask: the student's code raises on every
    # case, and scores what a non-answer does.
    crashing = mistake(masks["causal_multihead"], "heads_over_tokens")
    assert crashing.raised == "every" and crashing.points == 0
    assert crashing in masks["causal_multihead"].as_non_answers


def _golden_functions(entry, functions) -> dict | None:
    """Each function's single mistake (its id, or None for the reference) as the real grading of
    the golden fixture diagnosed it, or None when a function's failures are not one known mistake.
    numerical_stability is left aside: a notebook's softmax may overflow where the audit's does not."""
    found = {}
    for fn in functions:
        named = {title for name, title in entry["diagnoses"].items()
                 if name.rsplit(".", 1)[0] == fn and not name.endswith(".numerical_stability")}
        failed = [n for n, s in entry["not_passed"].items() if n.rsplit(".", 1)[0] == fn and s != "info"]
        if not named and not failed:
            found[fn] = None
        elif len(named) == 1 and next(iter(named)) in TITLES:
            found[fn] = TITLES[next(iter(named))]
        else:
            return None
    return found


def _compared_with_golden() -> tuple[dict, int]:
    """For each golden fixture whose functions each make one known mistake (or none), each
    function's (path, name) -> (the audit's failing checks with points, the kernel's), and the
    number of fixtures whose score the audit gives exactly."""
    compared, scores = {}, 0
    for entry in load():
        if entry["status"] != "graded" or "settings" in entry:
            continue
        functions = audited(entry["assignment"])
        mistakes = _golden_functions(entry, functions)
        if mistakes is None or not any(mistakes.values()):
            continue
        score = 0.0
        for name, mistake_id in mistakes.items():
            fn = functions[name]
            graded = fn.reference if mistake_id is None else mistake(fn, mistake_id)
            score += graded.points
            # A check's name is its unit's, then its kind: a unit may be named Class.backward.
            failed = {n.rsplit(".", 1)[1] for n, s in entry["not_passed"].items() if n.rsplit(".", 1)[0] == name
                      and s != "info"}
            compared[(entry["path"], name)] = ({k for k in graded.caught_by if fn.checks[k]}, failed)
        assert score == pytest.approx(entry["score"]), entry["path"]
        scores += 1
    return compared, scores


@pytest.mark.slow
def test_the_audit_scores_a_mistake_as_a_real_kernel_graded_the_golden_notebook_making_it():
    """The golden fixtures were graded in real kernels; for each one whose functions each make
    one known mistake (or none), the audit's score and failing checks are the grading's, among
    them a mistake whose code raises on some shapes (keys from X when the memory is wider)."""
    compared, scores = _compared_with_golden()
    for key, (audit_failed, kernel_failed) in compared.items():
        assert audit_failed == kernel_failed, key
    assert scores >= 20 and ("tests/fixtures/cross/mistakes.ipynb", "cross_attention") in compared


@pytest.mark.slow
def test_an_inverted_mask_on_the_sheets_data_is_seen_as_a_kernel_sees_it():
    """The sheet's data has no mask, so the grader sends an all-True one, which an inverted mask
    turns into nothing to attend: the audit sees that mistake on `fixed` as the kernel did."""
    compared, _ = _compared_with_golden()
    audit_failed, kernel_failed = compared[("tests/fixtures/masks/mistakes.ipynb", "boolean_masked_attention")]
    assert "fixed" in kernel_failed and audit_failed == kernel_failed


@pytest.mark.slow
def test_pairs_are_graded_when_asked():
    single = audited("rows")["self_attention"]
    paired = audited("rows", pairs=True)["self_attention"]
    assert all(len(m.ids) == 1 for m in single.mistakes)
    both = next(m for m in paired.mistakes if set(m.ids) == {"softmax_wrong_axis", "no_scaling"})
    assert both.title == "softmax over the wrong axis and scores not scaled" and both.points < both.max_points


SKIPPING = """
name = "lenient"
[[functions]]
name = "self_attention"
convention = "rows_single"
skip = ["fixed", "random_shapes", "memory_layout", "dtypes"]
"""


@pytest.mark.slow
def test_a_spec_that_skips_the_checks_a_mistake_fails_is_reported_as_letting_it_through(tmp_path):
    spec = tmp_path / "lenient.toml"
    spec.write_text(SKIPPING)
    page = tmp_path / "audit.html"
    done = run(spec, "--html", page)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "scaled by sqrt(D) instead of sqrt(d_k)" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("scaled by sqrt(D)"))
    assert "full marks, though it computes something else where points are at stake, and no check says" in line
    # Seen by the informational check alone, which costs nothing: let through all the same.
    line = next(x for x in out.splitlines() if x.strip().startswith("K Q^T instead of Q K^T"))
    assert "(only informational checks say so)" in line
    through = next(x for x in out.splitlines() if "mistakes at full marks" in x)
    assert "scaled by sqrt(D) instead of sqrt(d_k)" in through and "K Q^T instead of Q K^T" in through
    assert "softmax without max-subtraction" not in through
    assert "The spec has a problem" in out.splitlines()[-2] and "K Q^T instead of Q K^T earns full marks" in out
    assert page.is_file() and "scaled by sqrt(D) instead of sqrt(d_k)" in page.read_text()


@pytest.mark.slow
def test_the_builtin_rows_spec_is_sound_on_the_command_line():
    done = run("rows")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "self_attention: 12 points; the reference earns 12 / 12" in done.stdout
    assert "float64" in done.stdout and "mistakes at or below a non-answer's 0 points: none" in done.stdout


@pytest.mark.parametrize("argument, words", [("no/such/spec.toml", "no such assignment spec file"),
                                             ("nonsense", "unknown assignment 'nonsense'")])
@pytest.mark.slow
def test_an_unusable_spec_is_one_line_and_exit_2(argument, words):
    done = run(argument)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_a_spec_with_an_error_is_one_line_and_exit_2(tmp_path):
    spec = tmp_path / "typo.toml"
    spec.write_text(SKIPPING.replace("skip =", "skipp ="))
    done = run(spec)
    assert done.returncode == 2 and "unknown key 'skipp'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_non_answers_in_the_expected_shapes_earn_nothing_though_some_checks_pass_them():
    for fn in audited("rows").values():
        zeros, noise = fn.non_answers
        assert (zeros.points, noise.points) == (0, 0) and zeros.max_points == fn.reference.max_points
        assert zeros.non_answer == "what it returns as the output is all zeros"
        assert "nothing it returns matches attention" in noise.non_answer
        # What withholds their points is the non-answer rule, not the checks' own verdicts.
        for kind in ("inputs_unmodified", "return_structure", "permutation_equivariance"):
            assert kind not in zeros.caught_by, kind
        assert "return_structure" not in noise.caught_by and "inputs_unmodified" not in noise.caught_by
        assert fn.non_answer_points == 0


def test_memory_layout_and_dtypes_catch_no_known_mistake_and_are_not_measured():
    """They compare a function with its own answers on plain inputs, and a mistake computes the
    same wrong values in every layout and dtype: the checks that compare values charge it, once."""
    for fn in audited("rows").values():
        for m in fn.mistakes:
            assert not {"memory_layout", "dtypes"} & set(m.caught_by), m.title
        assert {"memory_layout", "dtypes"} <= set(fn.beyond_mistakes)
        assert not {"memory_layout", "dtypes"} & set(fn.silent_checks)
    axis = mistake(audited("rows")["self_attention"], "softmax_wrong_axis")
    assert axis.caught_by == ["fixed", "random_shapes", "weights_distribution", "numerical_stability"]
    unscaled = mistake(audited("rows")["self_attention"], "no_scaling")
    assert unscaled.caught_by == ["fixed", "random_shapes"] and unscaled.points == 6


def test_a_reference_that_loses_points_makes_the_spec_wrong():
    """The closing verdict and the exit status, on an audit whose reference failed a check."""
    reference = Graded("reference", (), 9.0, 12.0, ["random_shapes"])
    found = Audit("broken", "", PUBLIC_SEED, False,
                  [FunctionAudit("self_attention", {"random_shapes": 3.0}, frozenset(), reference)])
    assert not found.sound
    assert verdict(found) == "The spec has a problem: the reference loses points in self_attention."
    assert "THE SPEC IS WRONG" in text(found) and "(it fails random_shapes)" in text(found)
    paid = Graded("random numbers in the expected shapes", (), 1.0, 12.0, [])
    found.functions[0].reference.points = 12.0
    found.functions[0].non_answers = [paid]
    assert not found.sound and verdict(found) == ("The spec has a problem: self_attention: a non-answer (random "
                                                  "numbers in the expected shapes) earns 1 / 12.")


@pytest.mark.slow
def test_the_cli_help_lists_audit():
    done = subprocess.run([sys.executable, "-m", "grader.cli", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert "audit" in done.stdout


HOSTILE_TITLE = '<script>alert(1)</script><img src=x onerror=alert(2)>'


@pytest.mark.slow
def test_the_audit_page_reads_in_a_real_browser(tmp_path):
    """One section per function, a row per mistake with a cell per check, the verdict in words
    (not colour alone), no console errors, no fetches, no horizontal scroll at 1280 px, and a
    spec's title shown as text."""
    playwright = pytest.importorskip("playwright.sync_api")
    from grading_helpers import chromium_path
    from grader.authoring.audit_report import write_html
    if not chromium_path():
        pytest.fail("Chromium is not installed (apt-get install chromium)")
    spec = tmp_path / "lenient.toml"
    spec.write_text(f"title = {HOSTILE_TITLE!r}\n" + SKIPPING + MASKED)
    found = audit(load_assignment(str(spec)), PUBLIC_SEED)
    page_path = tmp_path / "audit.html"
    write_html(found, page_path)
    problems, requests, dialogs = [], [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(page_path.as_uri())
        sections = page.locator("section.function").count()
        rows = page.evaluate("[...document.querySelectorAll('table.audit')].map(t => t.tBodies[0].rows.length)")
        caught = page.evaluate("[...document.querySelectorAll('table.audit')].map(t => "
                               "t.querySelectorAll('td.hit').length)")
        through = page.evaluate("[...document.querySelectorAll('table.audit')[0].querySelectorAll('tr.through')]"
                                ".map(r => r.innerText)")
        verdict_text = page.inner_text("p.verdict")
        meta = page.inner_text("p.meta")
        injected = page.locator("body script, body img").count()
        width = page.evaluate("document.documentElement.scrollWidth")
        browser.close()
    assert problems == [] and dialogs == [] and injected == 0
    assert all(url.startswith("file://") for url in requests), requests
    assert HOSTILE_TITLE in meta
    assert sections == len(found.functions) == 2
    assert rows == [len(f.mistakes) for f in found.functions]
    assert caught == [sum(len(m.caught_by) for m in f.mistakes) for f in found.functions]
    by_d = next(row for row in through if row.startswith("scaled by sqrt(D) instead of sqrt(d_k)"))
    assert "no check says anything" in by_d
    assert {row.split("\t")[0] for row in through} == {m.title for m in found.functions[0].let_through}
    assert verdict_text.startswith("Problem:") and "scaled by sqrt(D) instead of sqrt(d_k) earns full marks" \
        in verdict_text
    assert width <= 1280


MASKED = """
[[functions]]
name = "masked_attention"
[functions.convention]
params = [{ name = "Q", role = "q" }, { name = "K", role = "k" }, { name = "V", role = "v" },
          { name = "mask", role = "mask", form = "additive_inf" }]
returns = ["output", "weights"]
"""


@pytest.mark.slow
def test_hidden_checks_are_judged_on_their_own_cases_and_marked(tmp_path):
    """A hidden check draws its own cases; a mistake loses its points there as it would in grading."""
    from grader.authoring.audit_report import check_label
    text = 'name = "h"\n[[functions]]\nname = "self_attention"\nconvention = "rows_single"\n'
    (tmp_path / "open.toml").write_text(text)
    (tmp_path / "hidden.toml").write_text(text + 'hidden = ["random_shapes"]\n')
    open_fn, fn = (audit(load_assignment(str(tmp_path / f"{n}.toml")), PUBLIC_SEED).functions[0]
                   for n in ("open", "hidden"))
    for hidden, shown in zip(fn.mistakes, open_fn.mistakes):
        assert (hidden.points, hidden.caught_by) == (shown.points, shown.caught_by), hidden.title
    axis = mistake(fn, "softmax_wrong_axis")
    assert "random_shapes" in axis.caught_by and axis.points < axis.max_points
    assert check_label(fn, "random_shapes") == "random_shapes (hidden)"
    assert check_label(fn, "numerical_stability") == "numerical_stability (info)"


def test_the_docs_audit_commands_are_commands():
    from grader.cli import parser
    page = (ROOT / "docs" / "specs.md").read_text()
    section = page.split("## Auditing a spec", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```")[0]
    readme = (ROOT / "README.md").read_text()
    lines = block.splitlines() + [line for line in readme.splitlines() if line.startswith("grader audit")]
    assert len(lines) == 2
    for line in lines:
        command = line.split("#")[0].split()
        assert parser().parse_args(command[1:]).run.__name__ == "audit"


def test_two_computations_with_one_name_are_told_apart():
    """A keepdims slip with or without the max-subtraction: one name, two rows, each labelled."""
    labels = [m.label for m in audited("rows")["self_attention"].mistakes]
    assert len(labels) == len(set(labels))
    assert any(label.endswith("[softmax_denominator_broadcast_shifted]") for label in labels)
