"""The zoo's probabilistic modes (load-*, strain) and the erring oracle, checked statistically.

Each mode's failure probability is restated here from the documented formula and the rates
of taxonomy/zoo.toml (read as a plain TOML file), with the loads counted from the case itself;
the observed number of failures is then compared with its expectation. The tolerance is
derived, not tuned: a count of independent Bernoulli draws with probabilities p_i has mean
sum p_i and variance sum p_i (1 - p_i), and a test fails only beyond Z standard deviations
(Z = 5: a false alarm about once in 1.7 million runs per comparison). The draws are seeded, so
every run of the suite sees the same numbers.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import tomllib
from collections import Counter, defaultdict

import pytest
from conftest import APPLICATIONS

from test_zoo import _branches, _entities
from tracebench.errors import TraceError
from tracebench.providers import ModelSettings, make_judge
from tracebench.records import Case, GenerationRecord
from tracebench.resources import data_path
from tracebench.sample import SampleOptions, read_cases, sample_benchmark
from tracebench.zoo import breakdown, generate, oracle_reply, parse_oracle, parse_profile

Z = 5.0
RATES = tomllib.loads(data_path("taxonomy", "zoo.toml").read_text())
MODES = list(RATES["modes"])
SEEDS = range(4)


@pytest.fixture(scope="module")
def cases(shared_folder) -> list[Case]:
    out = shared_folder("test_zoo_load-bench",
                        lambda out: sample_benchmark(out, SampleOptions(slots=tuple(range(1, 9)), per_slot=40, seed=3,
                                                                        applications=APPLICATIONS)))
    return list(read_cases(out))


def within(observed: float, probabilities: list[float]) -> tuple[bool, str]:
    """Whether a count of independent draws lies within Z standard deviations of its mean."""
    mean = sum(probabilities)
    sd = math.sqrt(sum(p * (1 - p) for p in probabilities))
    return abs(observed - mean) <= Z * sd + 1e-9, f"observed {observed}, expected {mean:.1f} ± {Z}x{sd:.2f}"


# ------------------------------------------------------------------ the documented formula, restated

def _section(case: Case, q) -> str | None:
    terms = {t.symbol: t for t in case.terms}
    if "⊕" in q.target:
        g = terms.get(q.target.split("⊕")[1])
        return None if g is None else {"global": "apply_global", "relation": "apply_relation"}.get(g.role,
                                                                                                 "apply_local")
    t = terms.get(q.target)
    if t is None:  # a composition
        return "compose_relation" if q.aspect == "relation" else "compose"
    return None if t.role == "text" else t.role


def _term(case: Case, q):
    terms = {t.symbol: t for t in case.terms}
    return terms.get(q.target.split("⊕")[-1])


def stated_probability(case: Case, q, mode: str, scale: float = 1.0) -> float:
    """1 - (1 - p1) ** (scale * load), the load counted as taxonomy/zoo.toml says."""
    entry = RATES["modes"][mode]
    if f"{_section(case, q)}.{q.aspect}" not in entry["breaks"]:
        return 0.0
    t = _term(case, q)
    load_kind = entry["load"]
    if load_kind == "subtype":
        p1, load = RATES["subtype"][t.subtype], 1
    else:
        p1 = entry["p1"]
        if load_kind == "global":
            load = sum(1 for x in case.terms if x.op == "g" and x.role == "global")
        elif load_kind == "composition":
            load = _branches(case) - 1
        elif load_kind == "relation":
            load = sum(1 for x in case.terms if x.op == "g" and x.role == "relation" and x.carrier == q.target)
        else:
            load = (t.source_entities or 1) - 1 if t is not None and t.role == "anchor" else 0
    return 1 - (1 - p1) ** (scale * load) if load > 0 else 0.0


# ------------------------------------------------------------------ the generator side

@pytest.mark.parametrize("mode", MODES)
def test_each_load_mode_fails_at_its_stated_rate(cases, mode):
    profile = parse_profile(mode)
    probabilities, failures, by_load = [], 0, defaultdict(lambda: [[], 0])
    for seed in SEEDS:
        for case in cases:
            broken = breakdown(case, profile, seed=seed)
            for q in case.checklist:
                p = stated_probability(case, q, mode)
                hit = q.id in broken
                assert p > 0 or not hit, (case.id, q.id)  # never where the mode does not reach
                if p > 0:
                    probabilities.append(p)
                    failures += hit
                    by_load[round(p, 6)][0].append(p)
                    by_load[round(p, 6)][1] += hit
    assert len(probabilities) >= 400, len(probabilities)  # the mode reaches enough requirements to measure
    ok, why = within(failures, probabilities)
    assert ok, why
    for p, (ps, hits) in by_load.items():  # and at each load level on its own: the rate grows with the load
        ok, why = within(hits, ps)
        assert ok, (p, why)


def test_scale_raises_the_hazard_and_fails_a_superset(cases):
    plain, double = parse_profile("load-global"), parse_profile("load-global:2")
    probabilities, failures = [], 0
    for case in cases:
        once, twice = breakdown(case, plain, seed=1), breakdown(case, double, seed=1)
        assert set(once) <= set(twice)  # the same draw against a higher probability
        assert all(causes == ("load-global:2",) for causes in twice.values())
        for q in case.checklist:
            p = stated_probability(case, q, "load-global", 2.0)
            if p > 0:
                probabilities.append(p)
                failures += q.id in twice
    ok, why = within(failures, probabilities)
    assert ok, why


def test_strain_is_every_load_mode_with_causes_in_file_order(cases):
    strain = parse_profile("strain")
    assert [str(f) for f in strain.modes()] == MODES
    singles = {mode: parse_profile(mode) for mode in MODES}
    for case in cases[::3]:
        together = breakdown(case, strain, seed=2)
        apart = {mode: breakdown(case, profile, seed=2) for mode, profile in singles.items()}
        expected = {q.id: tuple(m for m in MODES if q.id in apart[m]) for q in case.checklist}
        assert together == {qid: causes for qid, causes in expected.items() if causes}


def test_each_generation_is_a_fresh_draw(cases):
    """Another seed, or another case id (a diagnostic sub-case), draws anew; the same ones repeat."""
    profile = parse_profile("strain")
    same = sum(breakdown(c, profile, seed=0) == breakdown(c, profile, seed=0) for c in cases)
    assert same == len(cases)
    failing = [c for c in cases if breakdown(c, profile, seed=0)]
    differ = sum(breakdown(c, profile, seed=0) != breakdown(c, profile, seed=1) for c in failing)
    renamed = sum(breakdown(c, profile, seed=0) != breakdown(c.model_copy(update={"id": c.id + ".N1"}), profile, seed=0)
                  for c in failing)
    assert differ > len(failing) / 2 and renamed > len(failing) / 2, (differ, renamed, len(failing))


def test_the_pixels_show_what_the_load_modes_break(cases):
    """An anchor whose identity a load mode breaks is drawn altered; an attribute whose presence
    load-subtype breaks is withheld; the others are drawn as asked."""
    profile = parse_profile("strain:3")  # high enough that most cases break something
    seen = Counter()
    for case in cases[::6]:
        png, record = generate(case, profile, seed=0)
        notes = record.drawn["zoo"]
        for t in case.terms:
            if t.role == "anchor":
                altered = f"{t.symbol}:identity" in record.failed
                assert notes["anchors"][t.symbol]["identity"] == ("altered" if altered else "kept"), (case.id, t.symbol)
                seen["anchor", altered] += 1
        for note in notes["transfers"]:
            if note.get("subtype") in (None, "attach", "ip"):
                continue
            withheld = f"{note['term']}:presence" in record.failed
            assert (note["status"] == "withheld") == withheld, (case.id, note)
            if withheld and note.get("carrier"):
                assert note["value"] is None or all(e.get(note["field"]) != note["value"]
                                                    for e in _entities(record, note["carrier"]))
            seen["transfer", withheld] += 1
    assert all(seen[kind, broken] >= 5 for kind in ("anchor", "transfer") for broken in (True, False)), seen


@pytest.mark.parametrize("spec, part", [
    ("strain:0", "'strain:0'"), ("strain:-1", "'strain:-1'"), ("load-global:x", "'load-global:x'"),
    ("load-global:", "'load-global:'"), ("strain,load-global", "'load-global'"), ("load-wobble", "'load-wobble'"),
])
def test_bad_load_specs_raise_one_line(spec, part):
    with pytest.raises(TraceError) as info:
        parse_profile(spec)
    assert "\n" not in str(info.value) and part in str(info.value) and "strain[:S]" in str(info.value)


# ------------------------------------------------------------------ the judge side

def _records(cases: list[Case], seeds=SEEDS) -> list[tuple[Case, GenerationRecord]]:
    """Generation records of a noisy generator without drawing (the oracle reads only the record),
    one per case and seed: each is judged anew."""
    profile = parse_profile("global-interference,composition-interference:2,noise:0.3")
    out = []
    for seed, case in itertools.product(seeds, cases):
        causes = breakdown(case, profile, seed=seed)
        out.append((case, GenerationRecord(case_id=case.id, generator=profile.generator, drawn={"seed": seed},
                                           failed={q: c[0] for q, c in causes.items()}, causes=causes)))
    return out


def test_the_oracle_errs_at_its_stated_rates(cases):
    flip, bias, flip_identity = 0.1, 0.2, 0.45
    errors = parse_oracle(f"oracle:flip={flip},yes-bias={bias},flip.identity={flip_identity}")
    yes_if = {True: [[], 0], False: [[], 0]}  # truth passes? -> (probabilities of a wrong answer, wrong answers)
    for case, record in _records(cases):
        exact = {a["id"]: a for a in oracle_reply(case.checklist, record)["answers"]}
        noisy = oracle_reply(case.checklist, record, errors)["answers"]
        for q, a in zip(case.checklist, noisy):
            truth = exact[q.id]["answer"]
            assert truth == (q.expected if q.id not in record.failed else {"yes": "no", "no": "yes"}[q.expected])
            f = flip_identity if q.aspect == "identity" else flip
            # P(answer yes) = bias + (1 - bias) * (1 - f) where the truth is yes; bias + (1 - bias) * f where no
            p_wrong = (1 - bias) * f if truth == "yes" else bias + (1 - bias) * f
            cell = yes_if[truth == "yes"]
            cell[0].append(p_wrong)
            cell[1] += a["answer"] != truth
            assert (a["answer"] == truth) == (a["reason"] == exact[q.id]["reason"])  # an error says so
    for truth, (ps, wrong) in yes_if.items():
        assert len(ps) >= 1000
        ok, why = within(wrong, ps)
        assert ok, (truth, why)


def test_a_higher_rate_errs_on_a_superset_and_no_rate_is_the_truth(cases):
    pairs = _records(cases[::2], seeds=(0,))
    def wrong(spec: str) -> set[tuple[str, str]]:
        errors = parse_oracle(spec)
        out = set()
        for case, record in pairs:
            exact = oracle_reply(case.checklist, record)["answers"]
            for a, b in zip(exact, oracle_reply(case.checklist, record, errors)["answers"]):
                if a["answer"] != b["answer"]:
                    out.add((case.id, a["id"]))
        return out
    assert wrong("oracle:flip=0") == set() and wrong("oracle:yes-bias=0,flip=0") == set()
    low, high = wrong("oracle:flip=0.05"), wrong("oracle:flip=0.2")
    assert low and low < high


def test_oracle_specs_are_canonical_and_bad_ones_one_line():
    assert str(parse_oracle("oracle")) == "oracle" and not parse_oracle("oracle")
    spec = parse_oracle("oracle: yes-bias.leakage=0.30, flip=0.05 ,yes-bias=0.1")
    assert str(spec) == "oracle:flip=0.05,yes-bias=0.1,yes-bias.leakage=0.3"
    assert parse_oracle(str(spec)) == spec and spec.rate("yes-bias", "leakage") == 0.3
    assert spec.rate("yes-bias", "identity") == 0.1 and spec.rate("flip", "identity") == 0.05
    for bad, part in (("oracle:", "expected oracle"), ("oracle:flip", "'flip'"), ("oracle:flip=2", "'flip=2'"),
                      ("oracle:flip=x", "'flip=x'"), ("oracle:flip.sparkle=0.1", "unknown aspect 'sparkle'"),
                      ("oracle:flip=0.1,flip=0.2", "given twice"), ("oracle:wrong=0.1", "'wrong=0.1'")):
        with pytest.raises(TraceError) as info:
            parse_oracle(bad)
        assert "\n" not in str(info.value) and part in str(info.value), (bad, str(info.value))


def test_the_judges_spec_and_cache_key_name_its_errors(cases):
    plain = make_judge("oracle", ModelSettings())
    erring = make_judge("oracle:flip=0.1", ModelSettings())
    assert plain.spec == "oracle" and erring.spec == "oracle:flip=0.1"
    case = cases[0]
    png, _ = generate(case, parse_profile("perfect"))
    k_plain = plain.key(case, case.checklist, png, ())
    k_erring = erring.key(case, case.checklist, png, ())
    assert "errors" not in k_plain and k_erring == {**k_plain, "errors": "oracle:flip=0.1"}
    assert json.dumps(k_plain, sort_keys=True) != json.dumps(k_erring, sort_keys=True)


# ------------------------------------------------------------------ the diagnosis under load

ANCHOR_MODES = "load-global,load-composition,load-entities"
SOURCE_OF_RULE = {r["name"]: r["source"] for r in tomllib.loads(data_path("diagnose", "rules.toml").read_text())["rule"]}
EXPECTED_SOURCE = tomllib.loads(data_path("diagnose", "sources.toml").read_text())["zoo"]


def _p_fail(case: Case, symbol: str) -> float:
    """The chance that an anchor's identity fails in one generation of ``case``: any mode."""
    q = next(q for q in case.checklist if q.id == f"{symbol}:identity")
    keep = 1.0
    for mode in ANCHOR_MODES.split(","):
        keep *= 1 - stated_probability(case, q, mode)
    return 1 - keep


def _source_distribution(tree: dict, symbol: str, sub_cases: dict[str, Case]) -> dict[str, float]:
    """P(source) of a root failure of anchor ``symbol``, each node keeping it an independent
    generation (nodes of one sub-case share it): the paper's rule, restated: the first pass
    (a pass below fails only) at the smallest depth, the first met depth-first on a tie."""
    nodes = tree["nodes"]
    children = defaultdict(list)
    for n in nodes[1:]:
        children[n["parent"]].append(n)
    kept = [n for n in nodes[1:] if symbol in n["targets"] and n["evaluated"]]
    draws = sorted({n["case_id"] for n in kept})
    assert len(draws) <= 14, len(draws)
    p = {cid: _p_fail(sub_cases[cid], symbol) for cid in draws}
    out: dict[str, float] = defaultdict(float)
    for outcome in itertools.product((False, True), repeat=len(draws)):  # True: the node passes
        passes = dict(zip(draws, outcome))
        weight = math.prod(1 - p[c] if ok else p[c] for c, ok in passes.items())
        if weight == 0:
            continue
        first = None

        def walk(node: dict, passed: bool) -> None:
            nonlocal first
            if symbol not in node["targets"] or not node["evaluated"]:
                return
            if passes[node["case_id"]] and not passed:
                if first is None or node["depth"] < first["depth"]:
                    first = node
                passed = True
            for child in children[node["id"]]:
                walk(child, passed)

        for child in children[nodes[0]["id"]]:
            walk(child, False)
        out["persistent_failure" if first is None else SOURCE_OF_RULE[first["rule"]]] += weight
    return out


@pytest.mark.slow
def test_localization_under_load_is_what_its_probabilities_predict(shared_folder, cases, tmp_path):
    """A diagnosis that generates every node once, under random failures whose cause is known:
    how often it names the right source, and how often each source, is predicted exactly from
    the failure probabilities of the nodes; the observed counts must agree."""
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.run import RunOptions, run_benchmark

    settings = ModelSettings(max_retries=0, timeout=30.0)
    profile = parse_profile(ANCHOR_MODES)
    bench = shared_folder("test_zoo_load-bench", lambda out: None)
    lines = [c.model_dump_json() for c in cases
             if any(qid.endswith(":identity") for qid in breakdown(c, profile))]  # the run's seed is 0
    sub = tmp_path / "bench"
    sub.mkdir()
    (sub / "cases.jsonl").write_text("".join(line + "\n" for line in lines))
    (sub / "manifest.json").write_bytes((bench / "manifest.json").read_bytes())
    # hard links: the same files at no cost, inside the folder (a symlink leaving it is refused)
    shutil.copytree(bench / "references", sub / "references", copy_function=os.link)
    run_benchmark(sub, tmp_path / "run", RunOptions(generator=f"synthetic:{ANCHOR_MODES}", judges=["oracle"], settings=settings))
    summary = diagnose_run(tmp_path / "run", tmp_path / "diag", DiagnoseOptions(strategy="full", settings=settings))
    sub_cases = {c.id: c for c in cases}
    for folder in sorted((tmp_path / "diag" / "rounds").iterdir()):
        sub_cases.update((c.id, c) for c in read_cases(folder / "cases"))
    predicted: dict[str, list[float]] = defaultdict(list)
    observed: Counter = Counter()
    p_right, right = [], 0
    for line in (tmp_path / "diag" / "trees.jsonl").read_text().splitlines():
        tree = json.loads(line)
        for a in tree["attributions"]:
            if a["op"] != "anchor" or a["root"] != "fail":
                continue
            expected = {EXPECTED_SOURCE[c.split(":")[0]]["anchor"] for c in a["causes"]}
            assert a["causes"] and set(a["expected"]) == expected, a
            dist = _source_distribution(tree, a["target"], sub_cases)
            assert abs(sum(dist.values()) - 1) < 1e-9
            for source in set(SOURCE_OF_RULE.values()) | {"persistent_failure"}:
                predicted[source].append(dist.get(source, 0.0))
            observed[a["source"]] += 1
            p_right.append(sum(v for s, v in dist.items() if s in expected))
            right += a["source"] in expected
    assert len(p_right) >= 150, len(p_right)
    print(f"anchor root failures {len(p_right)}: {right} localized right, {sum(p_right):.1f} predicted")  # pytest -s
    ok, why = within(right, p_right)
    assert ok, ("right", why)
    for source, ps in predicted.items():
        ok, why = within(observed[source], ps)
        assert ok, (source, why)
    localization = summary.localization_accuracy
    assert localization is not None and localization["instances"] > len(p_right)  # other operators too
    # and it is far from the deterministic profiles' 100%: one generation per node cannot tell
    assert sum(p_right) / len(p_right) < 0.9


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["modes"].update({"strainy": {"load": "global", "p1": 0.1, "breaks": []}}),
     "modes.strainy: a load mode's name starts with 'load-'"),
    (lambda d: d["modes"]["load-global"].update(load="weather"), "modes.load-global.load: 'weather' is not one of"),
    (lambda d: d["modes"]["load-global"].update(p1=1.0), "modes.load-global.p1: expected a probability in [0, 1)"),
    (lambda d: d["modes"]["load-global"].update(p1=True), "modes.load-global.p1: expected a probability"),
    (lambda d: d["modes"]["load-global"].update(breaks=["anchor"]), "modes.load-global.breaks: 'anchor' is not"),
    (lambda d: d["modes"]["load-global"].update(breaks=["anchor.sparkle"]),
     "modes.load-global.breaks: the checklist asks no 'sparkle' in [[anchor]]"),
    (lambda d: d.update(modes={}), "no [modes.load-*] table"),
    (lambda d: d["subtype"].pop("1.4_font"), "[subtype]: no difficulty for 1.4_font"),
    (lambda d: d["subtype"].update(sparkle=0.1), "subtype.sparkle: not a subtype"),
    (lambda d: d["subtype"].update({"1.5_color": -0.1}), "subtype.1.5_color: expected a probability"),
])
def test_a_broken_zoo_file_is_one_line_naming_the_field(monkeypatch, edit, message):
    import copy

    from tracebench.resources import DataFile
    from tracebench.zoo import _load

    data = copy.deepcopy(RATES)
    edit(data)
    edited = type("Edited", (DataFile,), {"read": lambda self: data})  # the file as edited, read as ever
    monkeypatch.setattr(_load, "_ZOO", edited("taxonomy", _load.ZOO_FILE))
    _load.load_modes.cache_clear()
    _load.subtype_difficulty.cache_clear()
    try:
        with pytest.raises(TraceError) as info:
            _load.load_modes()
            _load.subtype_difficulty()
        assert str(info.value).startswith("taxonomy/zoo.toml: ") and message in str(info.value), str(info.value)
        assert "\n" not in str(info.value)
    finally:
        _load.load_modes.cache_clear()
        _load.subtype_difficulty.cache_clear()
