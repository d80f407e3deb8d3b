"""`trace report`, opened in a real headless Chromium (the system's, driven by Playwright)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from test_cli import run_trace
from tracebench.diagnose import sources
from tracebench.providers import ModelSettings
from tracebench.report import build_report, _plots
from tracebench.run import RunOptions, run_benchmark
from tracebench.sample import SampleOptions, sample_benchmark
from tracebench.score import OPERATORS, score_run

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    return path


def open_case(case) -> None:
    """Open a case of the page as a user does (a click on its summary) unless it is open, and wait
    until its body, kept packed in the page until then, is in the DOM."""
    if not case.evaluate("e => e.open"):
        case.locator("summary").click()
    case.locator("xpath=self::*[@data-loaded]").wait_for(state="attached")


@pytest.fixture(scope="module")
def report(default_world, shared_folder) -> dict:
    """The pages the tests read, made once for all workers."""
    world = default_world  # tests/conftest.py: the benchmark, its two runs and the diagnosis, made once

    def make(root: Path) -> None:
        root.mkdir()
        result = run_trace("report", str(world["run"]), "--diagnosis", str(world["diag"]), "--compare",
                           str(world["perfect"]), "--out", str(root / "report.html"))
        assert result.returncode == 0, result.stderr
        # one text entity with an attribute, every question failed: disentangle, apply and compose
        # (its scene) 0.0, beside anchor, which no case has
        sample_benchmark(root / "tiny", SampleOptions(slots=(1,), per_slot=1, seed=0, applications=False))
        run_benchmark(root / "tiny", root / "tiny-run", RunOptions(generator="synthetic:noise:1.0", judges=["oracle"],
                      settings=SETTINGS))
        build_report(root / "tiny-run", root / "tiny.html")

    root = shared_folder("test_report-pages", make)
    out = root / "report.html"
    return {"root": world["root"], "html": out, "first": world["first"], "injected": world["injected"],
            "tiny": root / "tiny.html"}


@pytest.fixture(scope="module")
def page(report):
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        problems: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url))
        url = report["html"].as_uri()
        page.goto(url)
        page.wait_for_load_state("load")
        yield {"page": page, "problems": problems, "requests": requests, "url": url, "context": context}
        browser.close()


def test_renders_without_errors_or_network(page):
    open_case(page["page"].locator("details.case").first)  # opening a case unpacks its body and loads its images
    page["page"].wait_for_timeout(200)
    assert page["page"].locator("details.case").first.locator("img[src^='data:image/']").count() > 0
    assert page["problems"] == []
    assert [u for u in page["requests"] if u != page["url"] and not u.startswith("data:")] == []


def test_a_case_body_enters_the_dom_when_the_case_is_opened(page):
    closed = page["page"].locator("details.case:not([open])").last.get_attribute("data-case")
    case = page["page"].locator(f"details.case[data-case='{closed}']")
    assert case.locator(".prompt, table.questions, img").count() == 0 and case.get_attribute("data-body")
    open_case(case)
    assert case.locator(".prompt").first.is_visible() and case.locator("table.questions tbody tr").count() > 0
    assert case.get_attribute("data-body") is None  # unpacked once
    sources = case.locator("img").evaluate_all("els => els.map(e => e.getAttribute('src'))")
    assert sources and all(s.startswith("data:image/") for s in sources)


def test_headline_table_holds_the_scores_trace_score_prints(page, report):
    table = page["page"].locator("#headline")
    for folder in ("run", "perfect"):
        scores = score_run(report["root"] / folder).model_dump(mode="json")
        row = table.locator(f"tr[data-run^='synthetic:{'perfect' if folder == 'perfect' else 'global'}']")
        for op in (*OPERATORS, "avg"):
            value = scores["avg"] if op == "avg" else scores["operators"][op]
            cell = row.locator(f"td[data-op='{op}']")
            assert cell.get_attribute("data-value") == f"{value:.4f}"
            assert cell.inner_text().startswith(f"{value:.4f}")
    # the perfect run is best everywhere
    assert table.locator("tr[data-run^='synthetic:perfect'] td.best").count() == 5


def test_best_is_marked_separated_only_where_the_paired_difference_is_significant(page, report):
    from tracebench.score import compare_runs

    comparison = compare_runs([report["root"] / "run", report["root"] / "perfect"])
    separated = {("avg" if d.metric == "overall" else d.metric) for d in comparison.differences
                 if d.significant and d.difference < 0 and d.metric in (*OPERATORS, "overall")}
    # some columns are separated, and some are ties (bold on both rows, never the double dagger)
    assert separated and separated < {*OPERATORS, "avg"}
    table = page["page"].locator("#headline")
    marked = table.locator("td[data-separated]")
    assert set(marked.evaluate_all("els => els.map(e => e.dataset.op)")) == separated
    assert set(table.locator("tr[data-run^='synthetic:perfect'] td[data-separated]").evaluate_all(
        "els => els.map(e => e.dataset.op)")) == separated
    assert all("‡" in text for text in marked.all_inner_texts())
    assert table.locator("td.best:not([data-separated])").count() >= 2  # the ties
    assert "‡" not in "".join(table.locator("td.best:not([data-separated])").all_inner_texts())
    legend = page["page"].locator(".scroll:has(#headline) + p").inner_text()
    assert "Bold: best in the column" in legend and "‡: best, and its paired difference with every other run is " \
        "significant" in legend


def test_separated_needs_a_sole_best_significantly_ahead_of_every_other_run():
    from tracebench.report._report import _best
    from tracebench.score import Comparison, Difference

    def rows(*values):
        return [{"overall": v, "root": f"r{k}"} for k, v in enumerate(values)]

    def table(*diffs):  # (a, b, difference, significant) on "overall"
        return Comparison(runs=("r0", "r1", "r2"), metrics=("overall",), resamples=10, differences=tuple(
            Difference(a=a, b=b, metric="overall", cases=5, templates=5, difference=d, ci95=None,
                       p=0.01 if sig else 0.5, p_holm=0.01 if sig else 0.5, significant=sig) for a, b, d, sig in diffs))

    ahead = table(("r0", "r1", 0.2, True))
    assert _best(rows(0.9, 0.7), "overall", ahead) == {"value": 0.9, "separated": True}
    assert _best(rows(0.9, 0.7), "overall", table(("r0", "r1", 0.2, False)))["separated"] is False  # not significant
    assert _best(rows(0.7, 0.9), "overall", table(("r0", "r1", -0.2, True))) == {"value": 0.9, "separated": True}
    assert _best(rows(0.9, 0.7, 0.8), "overall", table(("r0", "r1", 0.2, True), ("r0", "r2", 0.1, False),
                                                       ("r1", "r2", -0.1, True)))["separated"] is False  # not all
    assert _best(rows(0.9, 0.7, None), "overall", ahead)["separated"] is True  # a run without a value is no rival
    assert _best(rows(0.9, 0.9), "overall", table(("r0", "r1", 0.0, False)))["separated"] is False  # a tie
    assert _best(rows(0.9, 0.7), "overall", None)["separated"] is False  # one run: nothing to compare
    assert _best(rows(None), "overall") == {"value": None, "separated": False}


def test_the_protocols_table_holds_what_trace_score_prints(page, report):
    scores = score_run(report["root"] / "run", protocols=("longbanana", "macro", "savanna")).protocols
    row = page["page"].locator("#protocols-table tr[data-protocols-of^='synthetic:global']")
    for name, field in (("longbanana", "overall"), ("longbanana", "pass_rate"), ("macro", "overall"),
                        ("savanna", "overall")):
        value = getattr(scores[name], field)
        cell = row.locator(f"td[data-protocol='{name}'][data-field='{field}']")
        assert cell.get_attribute("data-value") == f"{value:.4f}", (name, field)


def test_a_zero_score_and_a_missing_score_look_different_in_the_table(page, report):
    p = page["context"].new_page()
    p.goto(report["tiny"].as_uri())
    cells = {op: p.locator(f"#headline td[data-op='{op}']") for op in OPERATORS}
    zero = [op for op, c in cells.items() if c.get_attribute("data-value") == "0.0000"]
    missing = [op for op, c in cells.items() if c.get_attribute("data-value") == ""]
    assert zero and missing == ["anchor"]  # a text entity's attribute in its scene, no anchor
    for op in zero:
        assert cells[op].inner_text().startswith("0.0000") and "missing" not in cells[op].get_attribute("class")
    for op in missing:
        assert cells[op].inner_text() == "n/a" and "missing" in cells[op].get_attribute("class")
    style = "e => [getComputedStyle(e).backgroundImage, getComputedStyle(e).fontStyle, getComputedStyle(e).color]"
    assert cells[missing[0]].evaluate(style) != cells[zero[0]].evaluate(style)
    assert "gradient" in cells[missing[0]].evaluate(style)[0]
    # in the plots, a zero is a visible stub of bar labelled 0.00
    stubs = p.locator("figure svg g[id*='-zero-']")
    assert stubs.count() > 0 and all(stubs.nth(k).bounding_box()["width"] >= 2 for k in range(stubs.count()))
    assert any(t.startswith("0.00 (n=") for t in p.locator("#fig-by-subtype svg text").all_text_contents())
    p.close()


def test_bars_show_n_and_tell_zero_from_missing(page):
    svg = _plots.bars({"a": {"x": 0.0, "y": None, "z": 0.5}, "b": {"x": 1.0, "y": 0.25, "z": 0.0}},
                      {"a": {"x": 3, "y": 0, "z": 7}, "b": {"x": 3, "y": 2, "z": 7}}, title="t")
    p = page["context"].new_page()
    p.set_content(f"<html><body>{svg}</body></html>")
    texts = p.locator("svg text").all_text_contents()
    for label in ("0.00 (n=3)", "n/a (n=0)", "0.50 (n=7)", "1.00 (n=3)", "0.25 (n=2)", "0.00 (n=7)"):
        assert label in texts, (label, texts)
    zero, missing, half = (p.locator(f"g[id='t-{gid}']").bounding_box() for gid in ("zero-0-0", "missing-0-1",
                                                                                      "value-0-2"))
    assert 2 <= zero["width"] < 0.1 * half["width"]  # visible, and nothing like a score
    fill = p.locator("g[id='t-missing-0-1'] path").first.evaluate("e => getComputedStyle(e).fill")
    assert fill.startswith("url(")  # hatched: a pattern, not a bar's plain colour
    assert p.locator("g[id='t-value-0-2'] path").first.evaluate("e => getComputedStyle(e).fill").startswith("rgb")
    p.close()


def test_every_breakdown_plot_shows_n(page, report):
    scores = score_run(report["root"] / "run").model_dump(mode="json")
    plots = page["page"].locator("#fig-by-slot svg, #fig-by-subtype svg, #fig-by-entities svg")
    assert plots.count() == 3 and page["page"].locator("#fig-by-application").count() == 0  # no applications here
    for k in range(plots.count()):
        texts = plots.nth(k).locator("text").all_text_contents()
        assert any("n=" in t for t in texts), k
    slot_ticks = " ".join(plots.nth(0).locator("text").all_text_contents())
    for slot, group in scores["by_slot"].items():
        assert f"n={group['cases']}" in slot_ticks
    tiny = page["context"].new_page()
    tiny.goto(report["tiny"].as_uri())  # anchor at slot level 1: no case of that page has it
    assert "n/a" in " ".join(tiny.locator("#fig-by-slot svg text").all_text_contents())
    tiny.close()
    subtype_texts = plots.nth(1).locator("text").all_text_contents()
    for subtype, value in scores["by_subtype"].items():
        assert f"{value['disentangle']:.2f} (n={value['instances']})" in subtype_texts
    assert "n:" in page["page"].locator("#plot-legend").inner_text()
    cumulative = page["page"].locator("#fig-cumulative svg text").all_text_contents()
    summary = json.loads((report["root"] / "diag" / "summary.json").read_text())
    for op, shares in summary["by_operator"].items():
        assert f"{op} (n={shares['instances']})" in cumulative


def test_attributions_under_trees_use_the_source_titles(page):
    trees = page["page"].locator("details.case[data-tree]")
    assert trees.count() > 0
    for k in range(trees.count()):
        open_case(trees.nth(k))
    items = page["page"].locator("ul.attributions li[data-source]")
    titles = {name: s.title for name, s in sources().items()}  # diagnose/sources.toml
    pairs = items.evaluate_all("els => els.map(e => [e.dataset.source, e.textContent])")
    named = [(key, text) for key, text in pairs if key]
    assert named and {key for key, _ in named} >= {"joint_composition", "global_reference"}
    for key, text in named:
        shown = text.split("): ", 1)[1].split(",")[0]
        assert shown == titles[key], (key, text)
        assert key not in text
    table = page["page"].locator("#sources td:first-child").all_inner_texts()
    assert "Joint Composition" in table and all(t in table for t in titles.values())
    # the drawn trees name each step as the attributions do (rule titles, not keys), under a colour legend
    from tracebench.diagnose import rules

    node_titles = page["page"].locator("svg.tree g.node title").all_text_contents()
    steps = {title.split("[", 1)[1].split("]", 1)[0] for title in node_titles}
    assert steps and steps <= {r.title for r in rules()} | {"the whole case"}, steps
    assert len(steps) > 1 and not steps & {r.name for r in rules()}
    legend = page["page"].locator(".tree-legend").first.inner_text()
    assert "passes" in legend and "fails" in legend and "not generated" in legend


def test_failure_source_table_holds_the_diagnosis(page, report):
    summary = json.loads((report["root"] / "diag" / "summary.json").read_text())
    for op, shares in summary["by_operator"].items():
        cell = page["page"].locator(f"#sources td[data-op='{op}'][data-source='joint_composition']")
        assert cell.inner_text() == f"{100 * shares['joint_composition']:.1f}%"


def test_filters(page):
    p = page["page"]
    total = p.locator("details.case").count()
    p.select_option("#f-slot", "3")
    visible = p.locator("details.case:visible")
    assert 0 < visible.count() < total
    assert set(visible.evaluate_all("els => els.map(e => e.dataset.slot)")) == {"3"}
    assert p.locator("#f-count").inner_text() == f"{visible.count()} of {total} cases"
    p.select_option("#f-slot", "")
    p.check("#f-failing")
    failing = p.locator("details.case:visible").evaluate_all("els => els.map(e => e.dataset.failing)")
    assert failing and all(failing) and len(failing) < total
    p.select_option("#f-op", "anchor")
    ops = p.locator("details.case:visible").evaluate_all("els => els.map(e => e.dataset.failing)")
    assert ops and all("anchor" in o.split() for o in ops)
    p.uncheck("#f-failing")
    p.select_option("#f-op", "")
    assert p.locator("details.case:visible").count() == total


def test_text_from_prompts_is_escaped(page, report):
    p = page["page"]
    case = p.locator(f"details.case[data-case='{report['first']}']")
    open_case(case)
    assert report["injected"] in case.locator(".prompt").first.inner_text()
    assert p.locator("script").count() == 1  # the page's own (case bodies and images are data attributes)
    assert case.locator("img[src='x']").count() == 0
    assert page["problems"] == []


def test_tree_nodes_show_their_image_and_prompt(page):
    p = page["page"]
    case = p.locator("details.case[data-tree]").first
    open_case(case)
    assert case.locator("svg.tree").count() == 1
    node = case.locator("g.node[data-node='N1'], g.node[data-node='N1a']").first
    node_id = node.get_attribute("data-node")
    node.click()
    panel = case.locator(f".node-panel[data-node='{node_id}']")
    assert panel.is_visible() and "Generate a new scene." in panel.locator(".prompt").inner_text()
    assert panel.locator("img").get_attribute("src").startswith("data:image/")
    target = case.locator("select.target option").nth(1).get_attribute("value")
    case.locator("select.target").select_option(target)
    classes = case.locator("g.node").evaluate_all("els => els.map(e => e.getAttribute('class'))")
    assert any("pass" in c for c in classes) and any("fail" in c for c in classes)


def test_screenshots_at_laptop_and_phone_width(page, report):
    p = page["page"]
    p.screenshot(path=str(report["html"].parent / "report.png"), full_page=False)
    assert (report["html"].parent / "report.png").stat().st_size > 10_000
    phone = page["context"].new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page["url"])
    phone.screenshot(path=str(report["html"].parent / "report-phone.png"))
    # nothing wider than the screen: wide tables and trees scroll inside their own boxes
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.close()


def test_on_a_phone_every_box_wider_than_the_screen_shows_that_it_scrolls(page):
    """Wide tables, plots and trees scroll inside their own boxes at 390x844; each box that holds
    more than it shows casts a shadow on that side (the cue that it scrolls), an open case's
    questions table included."""
    phone = page["context"].new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page["url"])
    open_case(phone.locator("details.case").first)
    boxes = phone.evaluate("""() => [...document.querySelectorAll('.scroll, .wide, .tree-box')].map(e => ({
        overflows: e.scrollWidth > e.clientWidth + 1, background: getComputedStyle(e).backgroundImage,
        attachment: getComputedStyle(e).backgroundAttachment, questions: !!e.querySelector('table.questions')}))""")
    overflowing = [b for b in boxes if b["overflows"]]
    assert overflowing and any(b["questions"] for b in overflowing), boxes
    for box in overflowing:
        assert box["background"].count("radial-gradient") == 2 and "local" in box["attachment"], box
    phone.close()


def test_the_avg_score_is_on_a_phones_first_screen(page, report):
    phone = page["context"].new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page["url"])
    overall = score_run(report["root"] / "run").avg
    first = phone.locator("#overall p").first
    assert first.get_attribute("data-avg") == f"{overall:.4f}"
    value = first.locator(".value")
    assert value.inner_text() == f"{overall:.4f}"
    box = value.bounding_box()
    assert box is not None and box["x"] >= 0 and box["y"] >= 0
    assert box["x"] + box["width"] <= 390 and box["y"] + box["height"] <= 844, box
    assert phone.evaluate("window.scrollY") == 0
    phone.close()


def test_bad_diagnosis_folder_is_one_line(report, tmp_path):
    result = run_trace("report", str(report["root"] / "run"), "--diagnosis", str(tmp_path), "--out",
                       str(tmp_path / "r.html"))
    assert result.returncode == 2 and "not a diagnosis folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_report_refuses_what_does_not_belong_to_the_run(report, tmp_path):
    root = report["root"]
    other = tmp_path / "other"
    sample_benchmark(other, SampleOptions(slots=(1, 2), per_slot=2, seed=9, applications=False))
    # in a subprocess: Playwright's event loop is running in this thread
    made = run_trace("run", str(other), "--generator", "synthetic:perfect", "--judge", "oracle", "--out",
                     str(tmp_path / "other-run"))
    assert made.returncode == 0, made.stderr
    result = run_trace("report", str(root / "perfect"), "--diagnosis", str(root / "diag"), "--out", str(tmp_path / "a.html"))
    assert result.returncode == 2 and "a diagnosis of run" in result.stderr
    result = run_trace("report", str(root / "run"), "--compare", str(tmp_path / "other-run"), "--out",
                       str(tmp_path / "b.html"))
    assert result.returncode == 2 and "a run of another benchmark" in result.stderr
    result = run_trace("report", str(root / "run"), "--out", str(tmp_path / "missing" / "c.html"))
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert not list(tmp_path.glob("*.html"))


def test_same_model_twice_gets_two_rows_and_two_lines(report, tmp_path):
    root = report["root"]
    out = tmp_path / "twice.html"
    result = run_trace("report", str(root / "run"), "--compare", str(root / "run"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    html = out.read_text()
    assert html.count("data-run=\"synthetic:global-interference,composition-interference:2 #") == 2
    assert "composition-interference:2 #1</text>" in html and "composition-interference:2 #2</text>" in html


def test_slot_ticks_never_run_together_and_the_cumulative_plot_has_a_title():
    """Eight "n=30" under eight ticks of a narrow panel ran together ("n=30n=30"): one n in the
    axis label when the levels hold alike, else every other n a line lower."""
    from tracebench.report._plots import _slot_ticks, cumulative_pass

    assert _slot_ticks([1, 2, 3], ["n=30"] * 3) == (["1", "2", "3"], "slot level (n=30 each)")
    ticks, label = _slot_ticks([1, 2, 3, 4], ["n=30", "n=29", "n=30", "n=30"])
    assert label == "slot level" and [t.count("\n") for t in ticks] == [1, 2, 1, 2]
    svg = cumulative_pass({"apply": {"0.0": 0.5, "1.0": 1.0}, "compose": {"0.0": 0.5, "1.0": 1.0}},
                          {"apply": 2, "compose": 2})
    assert "requirements passing by relative depth" in svg
