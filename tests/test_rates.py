"""``trace diagnose --method rates``: the chain model's shares, its calibration on draws from
known rates, and the command end to end (records, summary, resume, refusals)."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_cli import run_trace
from tracebench.diagnose._rates import GRID, Allocator, Chain, RatesSettings, _shares, share_sources
from tracebench.operators import Instance, Operator
from tracebench.records import SUMMARY, TREES

RULE_NAMES = ("global_stripping", "composition_flattening", "attribute_removal", "relation_simplification")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, GRID - 1), min_size=1, max_size=6), st.data())
def test_shares_sum_to_one_and_a_chain_that_does_not_change_is_persistent(cells, data):
    path = sorted(cells, reverse=True)  # hazards never rise along a chain
    rules = data.draw(st.lists(st.sampled_from(RULE_NAMES), min_size=len(path) - 1, max_size=len(path) - 1))
    shares = _shares(np.array([path]), rules)
    assert abs(shares.sum() - 1.0) < 1e-9 and (shares >= 0).all()
    flat = _shares(np.array([[path[0]] * len(path)]), rules)
    assert flat[0, share_sources().index("persistent_failure")] == pytest.approx(1.0)


def _simulated(chains_rates: list[tuple[tuple[float, ...], tuple[str, ...]]], budget: float, seed: int):
    """Chains with known rates, their generations drawn as the allocator asks; the estimates."""
    rng = random.Random(seed)
    chains = [Chain(f"t{i}", Instance(Operator.DISENTANGLE, "g1"), tuple(f"t{i}.{k}" for k in range(len(r))),
                    tuple(f"N{k}" for k in range(len(r))), rules, (1,) * len(r)) for i, (r, rules) in enumerate(chains_rates)]
    rate = {key: r for c, (rates, _) in zip(chains, chains_rates) for key, r in zip(c.keys, rates)}
    allocator = Allocator(chains, RatesSettings(budget=budget), trees=len(chains))
    while asked := allocator.requests():
        for key, count in asked.items():
            for _ in range(count):
                allocator.observe(key, chains[0].instance, rng.random() < rate[key])
    return chains, allocator.estimates()


def test_confidence_is_calibrated_on_draws_from_known_rates():
    """Seeded draws from chains whose exact shares are known: the confidence the method reports
    matches how often it is right (expected calibration error, 6 bins, loose bound)."""
    from tracebench.diagnose import hazard_shares

    rng = random.Random(3)
    truth = []
    for _ in range(60):
        root = rng.uniform(0.3, 0.9)
        kept = rng.choice([1.0, 1.0, 0.6, 0.3, 0.0])
        second = rng.choice([1.0, 0.5, 0.0])
        h0 = -np.log1p(-root)
        rates = (root, 1 - np.exp(-h0 * kept), 1 - np.exp(-h0 * kept * second))
        truth.append((rates, ("global_stripping", "composition_flattening")))
    chains, estimates = _simulated(truth, budget=40, seed=5)
    confidence, right = [], []
    for chain, (rates, rules) in zip(chains, truth):
        exact, _ = hazard_shares(list(rates), list(rules))
        estimate = estimates[chain.tree, chain.instance]
        confidence.append(estimate.confidence)
        right.append(exact.get(estimate.source, 0.0) >= max(exact.values()) - 0.2 - 1e-12)
    confidence, right = np.array(confidence), np.array(right, dtype=float)
    bins = np.minimum((confidence * 6).astype(int), 5)
    ece = sum(abs(confidence[bins == b].mean() - right[bins == b].mean()) * (bins == b).sum()
              for b in range(6) if (bins == b).any()) / len(confidence)
    assert right.mean() >= 0.75
    assert ece <= 0.15


def test_the_allocator_spends_no_more_than_its_budget():
    truth = [((0.6, 0.3), ("composition_flattening",))] * 10
    chains, _ = _simulated(truth, budget=12, seed=1)
    allocator = Allocator(chains, RatesSettings(budget=12), trees=10)
    spent = 0
    while asked := allocator.requests():
        spent += sum(asked.values())
        for key, count in asked.items():
            for _ in range(count):
                allocator.observe(key, chains[0].instance, True)
    assert 0 < spent <= 12 * 10


def test_results_the_same_every_time_end_the_allocation_after_the_first_generations():
    """A generator whose verdicts never vary (the zoo's deterministic profiles draw other images
    per seed, with the same failures) is asked for the first generations only, and each rate is
    read as 0 or 1: the shares are exact. The same chains failing at random are asked for more."""
    from tracebench.diagnose import hazard_shares
    from tracebench.diagnose._rates import FIRST, MIN_CONCORDANT

    rules = ("global_stripping", "composition_flattening")
    fixed = [((1.0, 1.0, 0.0), rules), ((1.0, 0.0, 0.0), rules), ((1.0, 1.0, 1.0), rules)] * 8
    assert len(fixed) * 3 >= MIN_CONCORDANT
    chains, estimates = _simulated(fixed, budget=60, seed=2)
    for chain, (rates, chain_rules) in zip(chains, fixed):
        exact, _ = hazard_shares(list(rates), list(chain_rules))
        estimate = estimates[chain.tree, chain.instance]
        assert estimate.source == max(exact, key=exact.get) and estimate.confidence == pytest.approx(1.0)
        assert estimate.shares[estimate.source][0] == pytest.approx(1.0, abs=1e-3)  # grid cells: 0.0025, 0.9975
    allocator = Allocator(chains, RatesSettings(budget=60), trees=len(chains))
    fails = {key: r > 0.5 for c, (rates, _) in zip(chains, fixed) for key, r in zip(c.keys, rates)}
    first = allocator.requests()
    for key, count in first.items():
        for _ in range(count):
            allocator.observe(key, chains[0].instance, fails[key])
    assert sum(first.values()) == FIRST * len(fixed) * 3 and allocator.requests() == {}

    random_chains = [((0.6, 0.4, 0.3), rules)] * len(fixed)
    chains = [Chain(f"t{i}", c.instance, c.keys, c.nodes, c.rules, c.questions) for i, c in enumerate(chains)]
    allocator = Allocator(chains, RatesSettings(budget=12), trees=len(chains))
    rng = random.Random(4)
    spent = 0
    while asked := allocator.requests():
        spent += sum(asked.values())
        for key, count in asked.items():
            for _ in range(count):
                allocator.observe(key, chains[0].instance, rng.random() < 0.5)
    assert spent > FIRST * len(random_chains) * 3


@pytest.fixture(scope="module")
def strain_run(diagnosis_bench, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("rates") / "run"
    done = run_trace("run", str(diagnosis_bench), "--generator", "synthetic:strain", "--judge", "oracle",
                     "--out", str(run))
    assert done.returncode == 0, done.stderr
    return run


def test_rates_names_sources_with_shares_and_resumes_to_the_same_bytes(strain_run, tmp_path):
    out = tmp_path / "diag"
    args = ("diagnose", str(strain_run), "--method", "rates", "--budget", "12", "--out", str(out))
    done = run_trace(*args, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "--method rates:" in done.stderr and "up to" in done.stderr  # the cost, before any call
    assert "fresh generations per tree" in done.stdout and "flagged unstable" not in done.stdout  # first-pass's flag
    assert "localization accuracy" not in done.stdout  # the realized cause is a secondary line, named as such
    trees = TREES.read(out)
    failing = [a for t in trees for a in t.attributions if a.root == "fail"]
    assert failing and all(t.method == "rates" for t in trees)
    for a in failing:
        assert a.confidence is not None and a.shares is not None and a.chain
        assert abs(sum(s.mean for s in a.shares.values()) - 1.0) < 0.01
        assert a.chain[0].node == "N0" and all(step.trials >= 0 for step in a.chain)
        assert (a.source == "undetermined") == (a.guess is not None)
    summary = SUMMARY.read(out)
    assert summary.method == "rates" and summary.mix and summary.generations_per_tree["mean"] > 0
    assert abs(sum(m.share for m in summary.mix.values()) - 1.0) < 0.01
    manifest = json.loads((out / "diagnosis.json").read_text())
    assert manifest["method"] == "rates" and manifest["rates"]["budget"] == 12
    before = (out / "trees.jsonl").read_bytes()
    again = run_trace(*args, timeout=600)
    assert again.returncode == 0, again.stderr
    assert (out / "trees.jsonl").read_bytes() == before
    other = run_trace("diagnose", str(strain_run), "--method", "rates", "--budget", "13", "--out", str(out))
    assert other.returncode == 2 and "holds a diagnosis with" in other.stderr


@pytest.mark.parametrize("flags, message", [
    (("--method", "rates", "--repeats", "3"), "takes neither --strategy adaptive nor --repeats"),
    (("--method", "rates", "--strategy", "adaptive"), "takes neither --strategy adaptive nor --repeats"),
    (("--method", "rates", "--budget", "0"), "--budget"),
    (("--method", "rates", "--flip-rate", "0.7"), "--flip-rate"),
])
def test_bad_rates_flags_are_one_line_errors(strain_run, tmp_path, flags, message):
    done = run_trace("diagnose", str(strain_run), *flags, "--out", str(tmp_path / "d"))
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "d").exists()


def test_first_pass_on_a_random_generator_ends_with_the_rates_command(strain_run, tmp_path):
    out = tmp_path / "fp"
    done = run_trace("diagnose", str(strain_run), "--repeats", "3", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr
    assert "note: the generator is random" in done.stdout and "--method rates" in done.stdout
    assert SUMMARY.read(out).random_note


@pytest.mark.parametrize("flags", [(), ("--export-nodes", "EXPORT")])
def test_rates_takes_no_shard_in_one_line_and_writes_nothing(strain_run, tmp_path, flags):
    """A shard's priors and budget would be fitted to its own cases: shards would not merge into
    the unsharded diagnosis, so --shard is refused before anything is written (--export-nodes too)."""
    from tracebench.diagnose import DiagnoseOptions
    from tracebench.errors import TraceError

    flags = tuple(str(tmp_path / "nodes") if f == "EXPORT" else f for f in flags)
    done = run_trace("diagnose", str(strain_run), "--method", "rates", "--shard", "1/2", *flags,
                     "--out", str(tmp_path / "d"))
    assert done.returncode == 2 and "--method rates takes no --shard" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "d").exists() and not (tmp_path / "nodes").exists()
    with pytest.raises(TraceError, match="takes no --shard"):
        DiagnoseOptions(method="rates", shard=(1, 2))
    DiagnoseOptions(shard=(1, 2))  # first-pass shards (tests/test_diagnose.py merges them)


@pytest.mark.slow
def test_a_rates_diagnosis_killed_and_resumed_equals_an_uninterrupted_one(strain_run, tmp_path):
    """kill -9 of `trace diagnose --method rates` during an allocation round (the roots' and the
    chains' first generations made, the allocator's first request under way), then the same
    command again: the trees, summary and identity are byte for byte those of a run never killed."""
    import os
    import signal
    import subprocess
    import time

    from test_cli import _trace_executable

    def args(out: Path) -> list[str]:
        return ["diagnose", str(strain_run), "--method", "rates", "--budget", "8", "--out", str(out)]

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    done = run_trace(*args(whole), timeout=600)
    assert done.returncode == 0, done.stderr
    assert (whole / "rounds" / "03").is_dir()  # the allocation round the kill below falls in
    proc = subprocess.Popen([*_trace_executable(), *args(resumed)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and not (resumed / "rounds" / "03").is_dir() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # kill -9, mid-round
        killed = proc.wait(timeout=60)
    assert killed == -signal.SIGKILL, "the diagnosis ended before it was killed"
    assert (resumed / "rounds" / "03").is_dir()
    assert (resumed / "rounds" / "02").is_dir() and not (resumed / "trees.jsonl").exists()
    again = run_trace(*args(resumed), timeout=600)
    assert again.returncode == 0, again.stderr
    for name in ("trees.jsonl", "summary.json", "diagnosis.json"):
        assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name
    rounds = [sorted(p.name for p in (folder / "rounds").iterdir()) for folder in (resumed, whole)]
    assert rounds[0] == rounds[1]


# ------------------------------------------------------------------------------ the report of a rates diagnosis

class _RatesItems(HTMLParser):
    """The attributions of a case body (``case.html.j2``): each ``li`` with its attributes, its
    text before the share bar, the bar's segments (key, width in %, title) and the chain's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict] = []
        self._item: dict | None = None
        self._in_bar = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "li" and "data-source" in attrs:
            self._item = {"attrs": attrs, "head": [], "segments": [], "rows": [], "bar": False}
            self.items.append(self._item)
        elif self._item is None:
            return
        elif tag == "div" and attrs.get("class") == "share-bar":
            self._in_bar = self._item["bar"] = True
        elif self._in_bar and tag == "span":
            width = re.fullmatch(r"width: ([0-9.]+)%; background: (#[0-9a-f]{6})", attrs["style"])
            assert width, attrs["style"]
            self._item["segments"].append((attrs["data-share"], float(width[1]), attrs["title"]))
        elif tag == "tr" and self._item["bar"]:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "div":
            self._in_bar = False
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:  # the header's cells are th
                self._item["rows"].append(self._row)  # type: ignore[index]
            self._row = None
        elif tag == "li":
            self._item = None

    def handle_data(self, data):
        if self._item is not None and not self._item["bar"]:
            self._item["head"].append(data)
        if self._cell is not None:
            self._cell.append(data)


def _pct(x: float) -> str:
    return "%.1f%%" % (100 * x)  # as the page formats a share, a rate or a confidence


@pytest.fixture(scope="module")
def rates_report(strain_run, tmp_path_factory) -> dict:
    """A rates diagnosis of the strain run (a small budget; ``--confidence 0.95`` leaves most failing
    instances Undetermined and names the others) and `trace report` of it."""
    root = tmp_path_factory.mktemp("rates-report")
    diag, page = root / "diag", root / "report.html"
    done = run_trace("diagnose", str(strain_run), "--method", "rates", "--budget", "6", "--confidence", "0.95",
                     "--out", str(diag), timeout=600)
    assert done.returncode == 0, done.stderr
    made = run_trace("report", str(strain_run), "--diagnosis", str(diag), "--out", str(page), timeout=600)
    assert made.returncode == 0, made.stderr
    return {"diag": diag, "html": page}


def test_the_report_shows_each_failing_instances_shares_confidence_and_chain(rates_report):
    from test_report_page import unpack
    from tracebench.diagnose import rules, sources

    titles = {name: s.title for name, s in sources().items()}
    rule_titles = {r.name: r.title for r in rules()}
    page = rates_report["html"].read_text(encoding="utf-8")
    assert "Realized-cause accuracy (a secondary measure" in page and "Localization against" not in page
    _, bodies = unpack(page)
    kinds = Counter()
    for tree in TREES.read(rates_report["diag"]):
        parser = _RatesItems()
        parser.feed(bodies[tree.case_id])
        shown = [a for a in tree.attributions if a.root != "pass"]  # as the page lists them
        assert len(parser.items) == len(shown), tree.case_id
        for a, item in zip(shown, parser.items):
            head = " ".join("".join(item["head"]).split())
            assert head.startswith(f"{a.target} ({a.op.value}): "), head
            if a.root != "fail":  # abstained at the root: no chain, the first-pass line
                assert not item["bar"] and a.shares is None
                continue
            assert "rates" in item["attrs"]["class"].split() and item["attrs"]["data-source"] == a.source
            named = head.split("): ", 1)[1]
            if a.source == "undetermined":
                kinds["undetermined"] += 1
                assert named == f"Undetermined (best guess: {titles[a.guess]}, confidence {_pct(a.confidence)})"
                assert "undetermined" in item["attrs"]["class"].split()
            else:
                kinds["named"] += 1
                assert named == f"{titles[a.source]}, confidence {_pct(a.confidence)}"
            segments = item["segments"]
            assert [key for key, _, _ in segments] == [s for s, e in a.shares.items() if e.mean > 0]
            assert abs(sum(width for _, width, _ in segments) - 100.0) < 1.0, segments
            for key, width, title in segments:
                share = a.shares[key]
                assert width == pytest.approx(100 * share.mean, abs=0.006)
                assert title == f"{titles[key]}: {_pct(share.mean)} [{_pct(share.low)}, {_pct(share.high)}]"
            assert item["rows"] == [[step.node, rule_titles[step.rule] if step.rule else "root",
                                     f"{step.fails} / {step.trials}",
                                     f"{_pct(step.rate.mean)} [{_pct(step.rate.low)}, {_pct(step.rate.high)}]"]
                                    for step in a.chain]
    assert kinds["undetermined"] > 0 and kinds["named"] > 0, kinds


def test_a_rates_reports_share_bars_fill_their_width_on_a_phone(rates_report):
    from playwright.sync_api import sync_playwright

    from test_report import FLAGS, _chromium, open_case

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=FLAGS)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(rates_report["html"].as_uri())
        cases = page.locator("details.case[data-tree]")
        for k in range(min(cases.count(), 6)):
            open_case(cases.nth(k))
        bars = page.evaluate("""() => [...document.querySelectorAll('.share-bar')].map(bar => ({
            inner: bar.clientWidth, right: bar.getBoundingClientRect().right,
            segments: [...bar.children].reduce((sum, s) => sum + s.getBoundingClientRect().width, 0)}))""")
        wide = page.evaluate("document.documentElement.scrollWidth")
        browser.close()
    assert bars and problems == []
    for bar in bars:
        assert abs(bar["segments"] - bar["inner"]) <= 2 and bar["right"] <= 390, bar
    assert wide <= 390
