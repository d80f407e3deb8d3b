"""Sharing: trace export / import (Hugging Face datasets), trace rejudge, trace leaderboard.

Everything is real: the exports are read back by ``datasets.load_dataset`` (offline, with its
own cache in the test's folder), runs are the zoo's judged by the oracle, the served judge is
an OpenAI-compatible server on loopback."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import datasets  # the hf extra: installed with the tests (README), never skipped
import pytest

from openai_server import OpenAIStub
from test_cli import run_trace
from test_run import _oracle_handler
from tracebench.errors import TraceError
from tracebench.providers import ModelSettings
from tracebench.records import RUN_MANIFEST, read_cases
from tracebench.run import rejudge_run, RunOptions, run_benchmark
from tracebench.score import leaderboard, score_run
from tracebench.share import export_folder, import_dataset
from tracebench.share._features import row_of


GENERATOR = "synthetic:global-interference"


def _files(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(run_bench, shared_runs, shared_folder):
    """The run benchmark, a zoo run of it and an adaptive diagnosis of that run (shared, read only)."""
    from tracebench.diagnose import DiagnoseOptions, diagnose_run

    run = shared_runs(run_bench, GENERATOR)

    def make(out: Path) -> None:
        diagnose_run(run, out, DiagnoseOptions(strategy="adaptive", settings=ModelSettings(max_retries=0, timeout=30.0),
                     progress=False))

    return {"bench": run_bench, "run": run, "diagnosis": shared_folder("share-diagnosis", make)}


def _load(folder: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return datasets.load_dataset(str(folder), split="test", cache_dir=str(tmp_path / "hf-cache"))


def test_a_benchmark_export_loads_with_datasets_and_holds_the_folder(world, tmp_path, monkeypatch):
    bench = world["bench"]
    done = export_folder(bench, tmp_path / "export")
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["README.md", "croissant.json", "data"]
    rows = _load(tmp_path / "export", tmp_path, monkeypatch)
    rows = rows.cast_column("reference_images", datasets.List(datasets.Image(decode=False)))
    cases = list(read_cases(bench))
    assert done.rows == len(rows) == len(cases)
    for case, row in zip(cases, rows):
        expected = row_of(case)
        assert {name: row[name] for name in expected} == json.loads(json.dumps(expected))
        assert [image["bytes"] for image in row["reference_images"]] == [(bench / ref.path).read_bytes()
                                                                         for ref in case.references]
    card = (tmp_path / "export" / "README.md").read_text()
    assert card.startswith("---\n") and "license: cc0-1.0" in card and "2608.16765" in card
    manifest = json.loads((bench / "manifest.json").read_text())
    assert all(value in card for value in manifest["hashes"].values())  # the manifest's hashes, on the card


def test_export_then_import_gives_the_benchmark_back_byte_for_byte(world, tmp_path):
    bench = world["bench"]
    export_folder(bench, tmp_path / "export")
    assert (tmp_path / "export" / "croissant.json").is_file()  # beside the card, and never read by the import
    result = run_trace("import", str(tmp_path / "export"), "--out", str(tmp_path / "back"))
    assert result.returncode == 0, result.stderr
    assert _files(tmp_path / "back") == _files(bench)


def test_a_run_export_imports_to_a_run_that_scores_reports_and_diagnoses_alike(world, tmp_path, monkeypatch):
    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.report import build_report

    run, diagnosis = world["run"], world["diagnosis"]
    result = run_trace("export", str(run), "--diagnosis", str(diagnosis), "--out", str(tmp_path / "export"))
    assert result.returncode == 0, result.stderr
    rows = _load(tmp_path / "export", tmp_path, monkeypatch)
    assert {"generated_image", "verdicts", "diagnosis_tree", "node_images"} <= set(rows.column_names)
    first = rows[0]
    assert first["verdicts"][0]["votes"][0]["judge"] == "oracle" and first["verdicts"][0]["votes"][0]["reason"]

    back = tmp_path / "back"
    result = run_trace("import", str(tmp_path / "export"), "--out", str(back))
    assert result.returncode == 0, result.stderr
    assert (back / "verdicts.jsonl").read_bytes() == (run / "verdicts.jsonl").read_bytes()
    assert (back / "benchmark" / "cases.jsonl").read_bytes() == (world["bench"] / "cases.jsonl").read_bytes()
    assert {k: v for k, v in _files(back / "images").items()} == _files(run / "images")
    assert RUN_MANIFEST.read(back).cases_dir == str((back / "benchmark").absolute())
    ours, theirs = (run_trace("score", str(folder), "--json") for folder in (back, run))
    assert ours.returncode == 0 and ours.stdout == theirs.stdout

    # its diagnosis: the same trees (a reused root's image now names the imported run's) and a report
    trees = [json.loads(line) for line in (back / "diagnosis" / "trees.jsonl").read_text().splitlines()]
    original = [json.loads(line) for line in (diagnosis / "trees.jsonl").read_text().splitlines()]
    assert len(trees) == len(original) > 0
    for tree, old in zip(trees, original):
        for node, was in zip(tree["nodes"], old["nodes"]):
            assert {k: v for k, v in node.items() if k != "image"} == {k: v for k, v in was.items() if k != "image"}
            if was.get("image"):
                moved = (back / "diagnosis" / node["image"]).resolve()  # relative: the folders move together
                assert not Path(node["image"]).is_absolute() and moved.is_relative_to(back.resolve())
                source = Path(was["image"]) if Path(was["image"]).is_absolute() else diagnosis / was["image"]
                assert moved.read_bytes() == source.read_bytes()
    page = build_report(back, tmp_path / "page.html", diagnosis=back / "diagnosis")
    assert page.stat().st_size > 0
    # and trace diagnose takes the imported run (the zoo generates its nodes again): the same attributions
    again = diagnose_run(back, tmp_path / "diag", DiagnoseOptions(strategy="adaptive", progress=False,
                         settings=ModelSettings(max_retries=0, timeout=30.0)))
    assert again.counts == json.loads((diagnosis / "summary.json").read_text())["counts"]


def test_rejudging_with_the_runs_own_judge_gives_its_verdicts(world, tmp_path):
    run = world["run"]
    manifest = rejudge_run(run, tmp_path / "again", judges=["oracle"])
    assert (tmp_path / "again" / "verdicts.jsonl").read_bytes() == (run / "verdicts.jsonl").read_bytes()
    source = RUN_MANIFEST.read(run)
    assert manifest.rejudged_from == str(run.resolve())
    assert (manifest.generator, manifest.seed, manifest.judges) == (source.generator, source.seed, source.judges)
    assert manifest.calls == {"oracle": manifest.cases}  # the generator was never called: its images were read
    # resuming calls nothing; another scale is another run
    assert rejudge_run(run, tmp_path / "again", judges=["oracle"]).calls == {}
    graded = rejudge_run(run, tmp_path / "ternary", judges=["oracle"], settings=ModelSettings(scale="ternary"))
    assert graded.scale == "ternary" and graded.verdicts == manifest.verdicts
    with pytest.raises(TraceError, match="another scale"):
        rejudge_run(run, tmp_path / "again", judges=["oracle"], settings=ModelSettings(scale="ternary"))


def test_rejudging_with_a_served_judge_and_the_sources_cache_calls_nothing(world, tmp_path):
    bench = world["bench"]
    cases = {c.id: c for c in read_cases(bench)}
    with OpenAIStub(_oracle_handler(cases, flaky=False)) as stub:
        settings = ModelSettings(base_url=stub.base_url, max_retries=0, timeout=30.0)
        source = tmp_path / "served"
        run_benchmark(bench, source, RunOptions(generator=GENERATOR, judges=["openai:oracle"], settings=settings,
                      progress=False))
        asked = len(stub.requests)
        again = rejudge_run(source, tmp_path / "again", judges=["openai:oracle"], settings=settings,
                            cache_dir=source / "cache")
        assert len(stub.requests) == asked and again.calls == {} and again.cache_hits > 0
    assert (tmp_path / "again" / "verdicts.jsonl").read_bytes() == (source / "verdicts.jsonl").read_bytes()


def test_a_case_the_source_run_has_no_image_for_abstains_again(world, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(world["run"], run, ignore=shutil.ignore_patterns("cache"))
    gone = sorted((run / "images").glob("*.png"))[0]
    gone.unlink()
    result = run_trace("rejudge", str(run), "--judge", "oracle", "--out", str(tmp_path / "again"))
    assert result.returncode == 3, result.stderr
    assert f"no image for {gone.stem}" in result.stderr and "--retry-abstained" in result.stderr
    lines = [json.loads(line) for line in (tmp_path / "again" / "verdicts.jsonl").read_text().splitlines()]
    assert {v["verdict"] for v in lines if v["case_id"] == gone.stem} == {"abstain"}


def test_the_leaderboard_ranks_runs_and_refuses_other_setups(world, shared_runs, tmp_path):
    from tracebench.report import build_report

    bench, worse = world["bench"], world["run"]
    better = shared_runs(bench, "synthetic:perfect")
    out = tmp_path / "board.json"
    result = run_trace("leaderboard", str(worse), str(better), "--protocol", "macro", "--out", str(out))
    assert result.returncode == 0, result.stderr
    board = json.loads(out.read_text())
    assert [row["generator"] for row in board["rows"]] == ["synthetic:perfect", GENERATOR]
    assert [row["rank"] for row in board["rows"]] == [1, 2]
    scores = score_run(worse)
    assert board["rows"][1]["avg"] == scores.avg and board["rows"][1]["cases"] == scores.cases
    assert board["rows"][0]["protocols"]["macro"]["overall"] is not None
    markdown = (tmp_path / "board").with_suffix(".md")
    for path in (markdown, tmp_path / "board.csv"):
        result = run_trace("leaderboard", str(worse), str(better), "--out", str(path))
        assert result.returncode == 0, result.stderr
    assert markdown.read_text().index("synthetic:perfect") < markdown.read_text().index(GENERATOR)
    assert (tmp_path / "board.csv").read_text().splitlines()[1].startswith("1,synthetic:perfect")

    # the report's headline table is the board: the same rows in the same order
    page = build_report(worse, tmp_path / "page.html", compare=[better])
    text = page.read_text()
    rows = [text.index(f'<tr data-run="{row["name"]}">') for row in board["rows"]]
    assert rows == sorted(rows)

    other = rejudge_run(worse, tmp_path / "ternary", judges=["oracle"], settings=ModelSettings(scale="ternary"))
    assert other.scale == "ternary"
    refused = run_trace("leaderboard", str(worse), str(tmp_path / "ternary"), "--out", str(tmp_path / "x.csv"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "another scale" in refused.stderr and not (tmp_path / "x.csv").exists()
    mixed = leaderboard([worse, tmp_path / "ternary"], mixed=True)
    assert mixed.mixed and [row.differs for row in mixed.rows if row.run == str(tmp_path / "ternary")] == [("scale",)]


def test_op_batched_runs_that_showed_the_judge_other_references_do_not_share_a_board(world):
    """An op run from before a batch showed only the references its questions name (no
    ``judge_shown`` hash) judged with other images than one after: its scores do not compare."""
    from tracebench.score._leaderboard import board_rows

    manifest = RUN_MANIFEST.read(world["run"])
    scores = score_run(world["run"])
    now = manifest.model_copy(update={"judge_batch": "op", "hashes": {**manifest.hashes, "judge_shown": "ab" * 32}})
    before = manifest.model_copy(update={"judge_batch": "op"})
    with pytest.raises(TraceError, match=r"choice of reference images per judge call"):
        board_rows([(Path("now"), now, scores), (Path("before"), before, scores)])
    rows = board_rows([(Path("now"), now, scores), (Path("before"), before, scores)], mixed=True)
    assert [row.differs for row in rows if row.run == "before"] == [("judge_shown",)]
    assert len(board_rows([(Path("a"), now, scores), (Path("b"), now, scores)])) == 2


def test_the_markdown_board_tells_runs_of_one_generator_apart_by_their_folder(world, tmp_path):
    import shutil

    from tracebench.score._leaderboard import markdown_cell

    again = tmp_path / "again"
    shutil.copytree(world["run"], again)
    out = (tmp_path / "board").with_suffix(".md")
    result = run_trace("leaderboard", str(world["run"]), str(again), "--out", str(out))
    assert result.returncode == 0, result.stderr
    header, _, *rows = out.read_text().split("\n\n")[0].splitlines()
    assert header.startswith("| rank | generator | run |")
    runs = {row.split(" | ")[2] for row in rows}
    assert runs == {markdown_cell(str(world["run"])), markdown_cell(str(again))}, rows


def test_a_leaderboard_of_two_benchmarks_is_one_line_exit_2(diagnosis_bench, run_bench, shared_runs, tmp_path):
    one = shared_runs(run_bench, "synthetic:perfect")
    two = shared_runs(diagnosis_bench, "synthetic:perfect")
    result = run_trace("leaderboard", str(one), str(two), "--out", str(tmp_path / "board.json"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "another benchmark" in result.stderr


def _tamper(rows: list[dict], damage: str) -> list[dict]:
    """Rows of an export, damaged one way."""
    if damage == "path":
        rows[0]["references"][0]["path"] = "../../outside.png"
    elif damage == "bytes":  # a reference path two rows share, with other bytes in the second
        seen = {}
        for row in rows:
            for k, ref in enumerate(row["references"]):
                if ref["path"] in seen and seen[ref["path"]] is not row:
                    row["reference_images"][k]["bytes"] += b"tampered"
                    return rows
                seen[ref["path"]] = row
    elif damage == "reversed":
        rows.reverse()
    elif damage == "dropped":
        del rows[3]
    elif damage == "prompt":
        rows[2]["prompt"] += " Also a hat."
    elif damage == "verdict-case":
        rows[1]["verdicts"][0]["case_id"] = rows[0]["id"]
    elif damage == "verdict-twice":
        rows[1]["verdicts"].append(rows[1]["verdicts"][0])
    elif damage == "verdict-dropped":
        del rows[1]["verdicts"][-1]
    elif damage == "verdict-changed":
        vote = rows[1]["verdicts"][0]["votes"][0]
        vote["reason"] += " (edited)"
    elif damage == "generation":
        rows[0]["generation"] = {"case_id": "zzz", "used_references": ["Image 9"], "collage": False}
    return rows


@pytest.mark.parametrize("kind, damage, message", [
    ("benchmark", "card", "no tracebench: section"),
    ("benchmark", "parquet", "not a readable parquet file"),
    ("benchmark", "shards", "not test-00000-of-00002"),
    ("benchmark", "path", "references[0].path"),
    ("benchmark", "bytes", "other bytes than an earlier row's"),
    ("benchmark", "reversed", "do not rebuild the benchmark"),
    ("benchmark", "dropped", "do not rebuild the benchmark"),
    ("run", "prompt", "do not rebuild the benchmark"),
    ("run", "verdict-case", "not one case"),
    ("run", "verdict-twice", "twice"),
    ("run", "verdict-dropped", "verdicts_hash"),
    ("run", "verdict-changed", "verdicts_hash"),
    ("run", "generation", "generation.case_id"),
])
def test_a_damaged_export_is_one_line_and_writes_nothing(world, tmp_path, kind, damage, message):
    import pyarrow.parquet as pq

    export = tmp_path / "export"
    export_folder(world["bench" if kind == "benchmark" else "run"], export)
    shard = next((export / "data").glob("*.parquet"))
    if damage == "card":
        card = export / "README.md"
        card.write_text(card.read_text().replace("tracebench:\n", "somethingelse:\n", 1))
    elif damage == "parquet":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "shards":  # two shards named as if there were three: one missing
        table = pq.read_table(shard)
        shard.unlink()
        pq.write_table(table.slice(0, 10), export / "data" / "test-00000-of-00002.parquet")
        pq.write_table(table.slice(10), export / "data" / "test-00002-of-00002.parquet")
    else:
        table = pq.read_table(shard)
        pq.write_table(type(table).from_pylist(_tamper(table.to_pylist(), damage), schema=table.schema), shard)
    result = run_trace("import", str(export), "--out", str(tmp_path / "back"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "back").exists() and not list(tmp_path.glob(".back.*"))


def test_without_the_hf_extra_export_is_one_line_naming_it(world, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # what an install without the extra gives: ImportError
    with pytest.raises(TraceError, match=r"pip install 'tracebench\[hf\]'"):
        export_folder(world["bench"], tmp_path / "export")
    assert not (tmp_path / "export").exists()


@pytest.fixture(scope="module")
def tiny_bench(shared_folder):
    from tracebench.sample import SampleOptions, sample_benchmark

    return shared_folder("tiny-2-2", lambda out: sample_benchmark(out, SampleOptions(slots=(2,), per_slot=2, seed=3,
                                                                                     applications=False)))


def test_a_collaged_run_round_trips_with_what_the_generator_said(tiny_bench, tmp_path):
    run = tmp_path / "run"
    manifest = run_benchmark(tiny_bench, run, RunOptions(generator=GENERATOR, judges=["oracle"], max_images=1, collage=True,
                             progress=False))
    assert manifest.collaged and list((run / "images").glob("*.json"))
    export_folder(run, tmp_path / "export")
    import_dataset(tmp_path / "export", tmp_path / "back")
    assert _files(tmp_path / "back" / "images") == _files(run / "images")  # the .json beside each image too
    again = rejudge_run(tmp_path / "back", tmp_path / "again", judges=["oracle"])
    assert (tmp_path / "again" / "verdicts.jsonl").read_bytes() == (run / "verdicts.jsonl").read_bytes()
    assert again.collaged == manifest.collaged and _files(tmp_path / "again" / "images") == _files(run / "images")


def test_rejudging_a_shard_judges_that_shard_and_a_folder_keeps_its_source(world, shared_runs, tmp_path):
    import shutil

    shard = shared_runs(world["bench"], GENERATOR, shard=(1, 2))
    again = rejudge_run(shard, tmp_path / "again", judges=["oracle"])
    assert again.shard == "1/2" and again.abstentions == 0
    assert (tmp_path / "again" / "verdicts.jsonl").read_bytes() == (shard / "verdicts.jsonl").read_bytes()
    with pytest.raises(TraceError, match="shard 1/2 only"):
        rejudge_run(shard, tmp_path / "other", judges=["oracle"], shard=(2, 2))
    twin = tmp_path / "twin"
    shutil.copytree(shard, twin, ignore=shutil.ignore_patterns("cache"))
    with pytest.raises(TraceError, match="another rejudged_from"):
        rejudge_run(twin, tmp_path / "again", judges=["oracle"])


def test_an_import_beside_a_reused_benchmark_checks_every_row_against_it(world, tmp_path):
    import pyarrow.parquet as pq

    export = tmp_path / "export"
    export_folder(world["run"], export)
    back = import_dataset(export, tmp_path / "back", cases_dir=world["bench"])
    assert back.cases_dir == Path(world["bench"]).absolute() and not (tmp_path / "back" / "benchmark").exists()
    assert (tmp_path / "back" / "verdicts.jsonl").read_bytes() == (world["run"] / "verdicts.jsonl").read_bytes()
    with pytest.raises(TraceError, match="inside --out"):
        import_dataset(export, tmp_path / "x", cases_dir=tmp_path / "x" / "bench")
    shard = next((export / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(type(table).from_pylist(_tamper(table.to_pylist(), "reversed"), schema=table.schema), shard)
    with pytest.raises(TraceError, match="not the case at this place"):
        import_dataset(export, tmp_path / "y", cases_dir=world["bench"])
    assert not (tmp_path / "y").exists()
