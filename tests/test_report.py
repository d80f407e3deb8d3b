"""`trace report`, opened in a real headless Chromium (the system's, driven by Playwright)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from test_cli import run_trace
from tracebench.diagnose import diagnose_run
from tracebench.providers import ModelSettings
from tracebench.run import run_benchmark
from tracebench.sample import sample_benchmark
from tracebench.score import OPERATORS, score_run

SETTINGS = ModelSettings(max_retries=0, timeout=30.0)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
INJECTED = '<script>alert("injected")</script><img src=x onerror=alert(1)>'


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("report")
    bench = root / "bench"
    sample_benchmark(bench, slots=tuple(range(1, 9)), per_slot=4, seed=2, applications=False)
    lines = (bench / "cases.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["prompt"] = first["prompt"] + "\n" + INJECTED  # text from a prompt must show as text
    lines[0] = json.dumps(first, ensure_ascii=False)
    (bench / "cases.jsonl").write_text("\n".join(lines) + "\n")
    run_benchmark(bench, root / "run", generator="synthetic:global-interference,composition-interference:2",
                  judges=["oracle"], settings=SETTINGS)
    run_benchmark(bench, root / "perfect", generator="synthetic:perfect", judges=["oracle"], settings=SETTINGS)
    diagnose_run(root / "run", root / "diag", strategy="full", settings=SETTINGS)
    out = root / "report.html"
    result = run_trace("report", str(root / "run"), "--diagnosis", str(root / "diag"), "--compare",
                       str(root / "perfect"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    return {"root": root, "html": out, "first": first["id"]}


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
    page["page"].locator("details.case").first.click()  # opening a case loads its images
    page["page"].wait_for_timeout(200)
    assert page["problems"] == []
    assert [u for u in page["requests"] if u != page["url"] and not u.startswith("data:")] == []


def test_headline_table_holds_the_scores_trace_score_prints(page, report):
    table = page["page"].locator("#headline")
    for folder in ("run", "perfect"):
        scores = score_run(report["root"] / folder).model_dump(mode="json")
        row = table.locator(f"tr[data-run^='synthetic:{'perfect' if folder == 'perfect' else 'global'}']")
        for op in (*OPERATORS, "overall"):
            value = scores["overall"] if op == "overall" else scores["operators"][op]
            cell = row.locator(f"td[data-op='{op}']")
            assert cell.get_attribute("data-value") == f"{value:.4f}"
            assert cell.inner_text().startswith(f"{value:.4f}")
    # the perfect run is best everywhere
    assert table.locator("tr[data-run^='synthetic:perfect'] td.best").count() == 5


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
    assert INJECTED in case.locator(".prompt").first.inner_text()
    assert p.locator("script").count() == 2  # the page's own: the image map and the script
    assert page["problems"] == []


def test_tree_nodes_show_their_image_and_prompt(page):
    p = page["page"]
    case = p.locator("details.case:has(svg.tree)").first
    case.locator("summary").click()
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
    p.screenshot(path=str(report["root"] / "report.png"), full_page=False)
    assert (report["root"] / "report.png").stat().st_size > 10_000
    phone = page["context"].new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page["url"])
    phone.screenshot(path=str(report["root"] / "report-phone.png"))
    # nothing wider than the screen: wide tables and trees scroll inside their own boxes
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.close()


def test_bad_diagnosis_folder_is_one_line(report, tmp_path):
    result = run_trace("report", str(report["root"] / "run"), "--diagnosis", str(tmp_path), "--out",
                       str(tmp_path / "r.html"))
    assert result.returncode == 2 and "not a diagnosis folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()


def test_report_refuses_what_does_not_belong_to_the_run(report, tmp_path):
    root = report["root"]
    other = tmp_path / "other"
    sample_benchmark(other, slots=(1, 2), per_slot=2, seed=9, applications=False)
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
