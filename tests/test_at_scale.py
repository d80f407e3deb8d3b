"""Runs at scale: a budget of calls (trace run --max-calls), the cost of a run before it (--dry-run),
judges pinned to the model their server reports (run.json's judge_models, --allow-model-change)
and generation options (--generator-option). Against a real OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from pathlib import Path

import pytest

from openai_server import OpenAIStub, completion
from test_cli import run_trace
from test_run import _oracle_handler
from tracebench.providers import ModelSettings
from tracebench.records import RUN_MANIFEST, read_cases
from tracebench.run import RunOptions, run_benchmark

GENERATOR = "synthetic:global-interference"


class Judge:
    """The oracle behind a chat endpoint, answering as ``model`` with ``fingerprint`` (changeable);
    it counts ``prompt_tokens`` input tokens a call (None: its replies say nothing of usage) and
    notes the (input, output) tokens of each reply in ``usage``."""

    def __init__(self, bench: Path, prompt_tokens: int | None = 0) -> None:
        self.inner = _oracle_handler({c.id: c for c in read_cases(bench)}, flaky=False)
        self.fingerprint = "fp_1"
        self.calls = 0
        self.prompt_tokens = prompt_tokens
        self.usage: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, request):
        body = completion(self.inner(request), model="judge-v1", prompt_tokens=self.prompt_tokens or 0)
        with self.lock:
            self.calls += 1
            if self.prompt_tokens is None:
                del body["usage"]
            else:
                self.usage.append((body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]))
        return 200, body | {"system_fingerprint": self.fingerprint}


def _whole(run: Path, bench: Path) -> dict[str, int]:
    """Case id -> verdicts in the run; every case present holds all its questions."""
    asked = {c.id: len(c.checklist) for c in read_cases(bench)}
    held: dict[str, int] = {}
    for line in (run / "verdicts.jsonl").read_text().splitlines():
        case = json.loads(line)["case_id"]
        held[case] = held.get(case, 0) + 1
    assert all(held[case] == asked[case] for case in held)
    return held


@pytest.fixture(scope="module")
def small(small_bench):
    """16 cases of slot levels 1-4 (conftest's small_bench)."""
    return small_bench


def test_a_budget_of_calls_stops_cleanly_and_the_same_command_goes_on(small, tmp_path):
    judge = Judge(small)
    with OpenAIStub(judge) as stub:
        base = ["run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                stub.base_url, "--max-retries", "0", "--out", str(tmp_path / "run")]
        first = run_trace(*base, "--max-calls", "9")
        assert first.returncode == 3, first.stderr
        assert len(first.stderr.strip().splitlines()) == 1 and "left" in first.stderr and "--max-calls" in first.stderr
        manifest = RUN_MANIFEST.read(tmp_path / "run")
        assert sum(manifest.calls.values()) <= 9 and judge.calls <= 9
        assert manifest.unfinished == len(list(read_cases(small))) - manifest.cases > 0
        done = _whole(tmp_path / "run", small)  # each case whole or absent, never cut midway
        assert len(done) == manifest.cases > 0

        second = run_trace(*base, "--max-calls", "9")  # the same command: nine more calls, cached ones free
        assert second.returncode == 3 and len(_whole(tmp_path / "run", small)) > len(done)

        last = run_trace(*base)
        assert last.returncode == 0, last.stderr
        assert RUN_MANIFEST.read(tmp_path / "run").unfinished is None
        whole = run_trace("run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                          stub.base_url, "--out", str(tmp_path / "whole"))
        assert whole.returncode == 0, whole.stderr
    assert (tmp_path / "run" / "verdicts.jsonl").read_bytes() == (tmp_path / "whole" / "verdicts.jsonl").read_bytes()
    assert run_trace("run", str(small), "--generator", GENERATOR, "--judge", "oracle", "--max-calls", "0",
                     "--out", str(tmp_path / "zero")).returncode == 2


def test_a_judge_answering_as_another_model_on_resume_stops_the_run(small, tmp_path):
    judge = Judge(small)
    out = tmp_path / "run"
    with OpenAIStub(judge) as stub:
        base = ["run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                stub.base_url, "--out", str(out)]
        assert run_trace(*base, "--max-calls", "12").returncode == 3
        pinned = RUN_MANIFEST.read(out)
        assert pinned.judge_models == {"openai:oracle": ("judge-v1 (fp_1)",)}
        vote = json.loads((out / "verdicts.jsonl").read_text().splitlines()[0])["votes"][0]
        assert (vote["model"], vote["fingerprint"]) == ("judge-v1", "fp_1")
        kept = (out / "verdicts.jsonl").read_bytes()

        judge.fingerprint = "fp_2"  # the server was redeployed
        stopped = run_trace(*base)
        assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
        assert len(stopped.stderr.strip().splitlines()) == 1
        assert "judge-v1 (fp_2)" in stopped.stderr and "judge-v1 (fp_1)" in stopped.stderr
        assert "--allow-model-change" in stopped.stderr
        assert RUN_MANIFEST.read(out).judge_models == pinned.judge_models
        assert (out / "verdicts.jsonl").read_bytes().startswith(kept[: kept.index(b"\n") + 1])

        allowed = run_trace(*base, "--allow-model-change")
        assert allowed.returncode == 0, allowed.stderr
    manifest = RUN_MANIFEST.read(out)
    assert manifest.judge_models == {"openai:oracle": ("judge-v1 (fp_1)", "judge-v1 (fp_2)")}
    assert manifest.judge_model_changes == ("openai:oracle: judge-v1 (fp_1) -> judge-v1 (fp_2)",)
    scores = run_trace("score", str(out))
    assert "judge openai:oracle answered as judge-v1 (fp_1), judge-v1 (fp_2)" in scores.stdout
    scored = json.loads(run_trace("score", str(out), "--json").stdout)
    assert scored["run"]["judge_models"] == {"openai:oracle": ["judge-v1 (fp_1)", "judge-v1 (fp_2)"]}
    from tracebench.report import build_report

    page = build_report(out, tmp_path / "page.html").read_text()
    assert "answered as judge-v1 (fp_1), judge-v1 (fp_2)" in page and "judge changes accepted" in page


def test_judges_that_report_no_model_keep_the_records_they_had(run_bench, shared_runs, tmp_path):
    """The oracle in process names no model: votes, run.json and scores hold no new field."""
    run = shared_runs(run_bench, GENERATOR)
    assert b'"model"' not in (run / "verdicts.jsonl").read_bytes()
    assert "judge_models" not in json.loads((run / "run.json").read_text())
    assert "judge_models" not in json.loads(run_trace("score", str(run), "--json").stdout)["run"]
    again = run_benchmark(run_bench, tmp_path / "again", RunOptions(generator=GENERATOR, judges=["oracle"],
                          settings=ModelSettings(max_retries=0), max_calls=10_000, progress=False))
    assert again.unfinished is None and again.judge_models is None


@pytest.mark.parametrize("budget", [1, 2])
def test_a_budget_smaller_than_one_case_starts_nothing(run_bench, tmp_path, budget):
    manifest = run_benchmark(run_bench, tmp_path / "run", RunOptions(generator=GENERATOR, judges=["oracle", "oracle:flip=0.1"],
                             max_calls=budget, progress=False))
    assert manifest.cases == 0 and manifest.calls == {} and manifest.unfinished > 0


def test_image_tokens_follow_openais_worked_examples():
    from tracebench.run._cost import image_tokens, text_tokens

    assert image_tokens((1024, 1024)) == 765  # OpenAI's vision pricing examples
    assert image_tokens((2048, 4096)) == 1105
    assert image_tokens((256, 256)) == 255
    assert text_tokens("abcde") == 2


def test_the_size_option_is_the_size_of_images_not_made_yet(tiny_bench, tmp_path):
    from tracebench.run._cost import ASSUMED_SIZE, generated_size, image_tokens

    assert generated_size({"size": "512x512"}) == (512, 512)
    assert generated_size({"size": "auto"}) == generated_size({}) == ASSUMED_SIZE
    judged = {}
    for size in (None, "512x512"):  # nothing is called in a dry run: the URL need not answer
        settings = ModelSettings(base_url="http://127.0.0.1:9/v1", generator_options={"size": size} if size else {})
        judged[size] = run_benchmark(tiny_bench, tmp_path / "run", RunOptions(generator="openai:image-model",
                                     judges=["openai:oracle"], settings=settings, dry_run=True)).input_tokens
    cases = len(list(read_cases(tiny_bench)))
    assert judged[None]["openai:oracle"] - judged["512x512"]["openai:oracle"] == \
        cases * (image_tokens(ASSUMED_SIZE) - image_tokens((512, 512)))


def test_a_dry_run_counts_what_a_run_would_cost_and_calls_nothing(small, tmp_path):
    from tracebench.run._cost import OUTPUT_TOKENS_PER_QUESTION, image_tokens

    cases = list(read_cases(small))
    judge = Judge(small)
    prices = tmp_path / "prices.toml"
    prices.write_text('["openai:oracle"]\ninput_per_million = 2.0\noutput_per_million = 8.0\nper_call = 0.001\n')
    out = tmp_path / "run"
    with OpenAIStub(judge) as stub:
        base = ["run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                stub.base_url, "--out", str(out)]
        dry = run_trace(*base, "--dry-run", "--price-file", str(prices))
        assert dry.returncode == 0, dry.stderr
        assert judge.calls == 0 and not out.exists()  # no call, nothing written
        lines = dry.stdout.splitlines()
        assert f"cases to make: {len(cases)} (0 done already, 0 not applicable)" in lines
        assert f"judge openai:oracle: {len(cases)} calls (0 cached)" in dry.stdout
        sent = sum(len(c.references) + 1 for c in cases)
        assert f"images sent to judges: {sent}" in lines
        # the estimate, recomputed here by the documented rules
        from tracebench.providers import ModelSettings as Settings, make_judge
        served = make_judge("openai:oracle", Settings(base_url=stub.base_url))
        from PIL import Image
        tokens = sum(-(-len(served.prompt_text(c, c.checklist)) // 4) + image_tokens((1024, 1024))
                     + sum(image_tokens(Image.open(small / r.path).size) for r in c.references) for c in cases)
        output = OUTPUT_TOKENS_PER_QUESTION * sum(len(c.checklist) for c in cases)
        assert f"about {tokens:,} input and {output:,} output tokens" in dry.stdout
        cost = len(cases) * 0.001 + tokens * 2.0 / 1e6 + output * 8.0 / 1e6
        assert f"estimated cost: {cost:.2f}" in dry.stdout

        assert run_trace(*base, "--max-calls", "15").returncode == 3
        done = RUN_MANIFEST.read(out).cases
        again = run_trace(*base, "--dry-run")
        assert f"cases to make: {len(cases) - done} ({done} done already" in again.stdout
        calls = judge.calls
        assert run_trace(*base).returncode == 0
        # a new folder over the same cache: every call is cached
        fresh = run_trace("run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                          stub.base_url, "--cache", str(out / "cache"), "--out", str(tmp_path / "fresh"), "--dry-run")
        assert f"judge openai:oracle: 0 calls ({len(cases)} cached)" in fresh.stdout
        assert judge.calls > calls
    bad = tmp_path / "bad.toml"
    bad.write_text('["openai:oracle"]\ninput_per_milion = 2.0\n')
    refused = run_trace(*base, "--dry-run", "--price-file", str(bad))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "bad.toml" in refused.stderr and "input_per_milion" in refused.stderr


PRICES = ('["synthetic:global-interference"]\nper_image = 0.01\n'
          '["openai:oracle"]\ninput_per_million = 100.0\noutput_per_million = 1000.0\nper_call = 0.001\n')


def _judge_cost(tokens_in: int, tokens_out: int) -> float:
    """One call to the judge priced by PRICES."""
    return 0.001 + tokens_in * 100.0 / 1e6 + tokens_out * 1000.0 / 1e6


def _estimated(case, bench: Path, base_url: str, made: tuple[int, int] = (1024, 1024)) -> tuple[int, int]:
    """A judge call's (input, output) tokens by the documented rules, recomputed here; ``made``: the
    generated image's size (1024 x 1024 while it is not made)."""
    from PIL import Image

    from tracebench.providers import make_judge
    from tracebench.run._cost import OUTPUT_TOKENS_PER_QUESTION, image_tokens

    served = make_judge("openai:oracle", ModelSettings(base_url=base_url))
    tokens = (-(-len(served.prompt_text(case, case.checklist)) // 4) + image_tokens(made)
              + sum(image_tokens(Image.open(bench / r.path).size) for r in case.references))
    return tokens, OUTPUT_TOKENS_PER_QUESTION * len(case.checklist)


def test_a_budget_in_money_stops_at_the_first_case_it_cannot_hold_and_the_same_command_goes_on(small, tmp_path):
    """The servers' token counts are what is spent; a case starts only when its estimate fits."""
    cases = list(read_cases(small))
    judge = Judge(small, prompt_tokens=1000)  # fewer than estimated: the spent cost is the server's, not the rule's
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    out = tmp_path / "run"
    with OpenAIStub(judge) as stub:
        def estimate(case) -> float:  # a case not started: its generation and its judge call, by the rules
            return 0.01 + _judge_cost(*_estimated(case, small, stub.base_url))

        budget = round(sum(estimate(c) for c in cases[:6]) * 0.999, 6)  # not six whole estimates
        base = ["run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                stub.base_url, "--max-retries", "0", "--price-file", str(prices), "--out", str(out)]
        dry = run_trace(*base, "--max-cost", str(budget), "--dry-run")
        assert dry.returncode == 0 and "the estimate is over it" in dry.stdout and judge.calls == 0
        assert not out.exists()
        first = run_trace(*base, "--max-cost", str(budget))
        assert first.returncode == 3, first.stderr
        manifest = RUN_MANIFEST.read(out)
        done = _whole(out, small)  # each case whole or absent
        assert len(done) == manifest.cases and 6 <= manifest.cases < len(cases)
        assert list(done) == [c.id for c in cases[:manifest.cases]]  # the cases in order, up to the first refused
        # what was spent: one image a case and one judge call a case, priced by the tokens the server counted
        assert judge.calls == manifest.cases == len(judge.usage)
        spent = 0.01 * manifest.cases + sum(_judge_cost(*usage) for usage in judge.usage)
        assert manifest.cost == pytest.approx(spent, abs=1e-6) and spent <= budget
        assert spent + estimate(cases[manifest.cases]) > budget  # the next case did not fit
        assert manifest.unfinished == len(cases) - manifest.cases
        line = first.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert f"--max-cost {budget:.15g}: about {manifest.cost:.4f} spent" in line
        assert f"{manifest.cases} cases done, {manifest.unfinished} left" in line and "go on with" in line

        second = run_trace(*base, "--max-cost", str(budget))  # the same command: another budget, cached calls free
        assert second.returncode in (0, 3) and len(_whole(out, small)) > manifest.cases
        last = run_trace(*base, "--max-cost", "1000")
        assert last.returncode == 0, last.stderr
        assert RUN_MANIFEST.read(out).unfinished is None and judge.calls == len(cases)  # no case judged twice
        whole = run_trace("run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                          stub.base_url, "--out", str(tmp_path / "whole"))
        assert whole.returncode == 0, whole.stderr
        assert "cost" not in json.loads((tmp_path / "whole" / "run.json").read_text())  # no budget, no field
        # cache hits are free: a new folder over the full cache needs no budget for any case
        free = run_trace(*base[:-1], str(tmp_path / "free"), "--cache", str(out / "cache"), "--max-cost", "0.000001")
        assert free.returncode == 0, free.stderr
        assert RUN_MANIFEST.read(tmp_path / "free").cost == 0 and RUN_MANIFEST.read(tmp_path / "free").cases == len(cases)
    assert (out / "verdicts.jsonl").read_bytes() == (tmp_path / "whole" / "verdicts.jsonl").read_bytes()


def test_a_judge_that_reports_no_tokens_is_charged_the_estimate_of_each_call(tiny_bench, tmp_path):
    from PIL import Image

    from tracebench.run import read_prices

    judge = Judge(tiny_bench, prompt_tokens=None)  # its replies say nothing of usage
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES.replace("synthetic:global-interference", "synthetic:perfect"))
    with OpenAIStub(judge) as stub:
        manifest = run_benchmark(tiny_bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:oracle"],
                                 settings=ModelSettings(base_url=stub.base_url, max_retries=0), progress=False,
                                 max_cost=5.0, prices=read_prices(prices)))
        cases = list(read_cases(tiny_bench))
        # each call as estimated with the image it judged (its real size), as the dry run's rules say
        made = {c.id: Image.open(tmp_path / "run" / "images" / f"{c.id}.png").size for c in cases}
        expected = sum(0.01 + _judge_cost(*_estimated(c, tiny_bench, stub.base_url, made[c.id])) for c in cases)
    assert manifest.cases == len(cases) and manifest.unfinished is None and judge.calls == len(cases)
    assert manifest.cost == pytest.approx(expected, abs=1e-6)


def test_a_budget_in_money_smaller_than_one_case_starts_nothing(run_bench, tmp_path):
    from tracebench.errors import TraceError
    from tracebench.run._cost import Price

    prices = {GENERATOR: Price(per_image=0.01), "oracle": Price()}  # an empty table: a free model
    manifest = run_benchmark(run_bench, tmp_path / "run", RunOptions(generator=GENERATOR, judges=["oracle"], max_cost=0.0099,
                             prices=prices, progress=False))
    assert manifest.cases == 0 and manifest.calls == {} and manifest.unfinished == len(list(read_cases(run_bench)))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["cost"] == 0
    with pytest.raises(TraceError, match=r"^--max-cost: .*no price for oracle"):
        run_benchmark(run_bench, tmp_path / "b", RunOptions(generator=GENERATOR, judges=["oracle"], max_cost=1.0,
                      prices={GENERATOR: Price(per_image=0.01)}, progress=False))
    with pytest.raises(TraceError, match=r"^--max-cost: give --price-file"):
        run_benchmark(run_bench, tmp_path / "c", RunOptions(generator=GENERATOR, judges=["oracle"], max_cost=1.0, progress=False))
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_merged_shards_count_what_every_shard_left_and_spent(run_bench, tmp_path):
    from tracebench.run import merge_runs
    from tracebench.run._cost import Price

    prices = {GENERATOR: Price(per_image=0.01), "oracle": Price()}
    shards = [run_benchmark(run_bench, tmp_path / f"shard{i}", RunOptions(generator=GENERATOR, judges=["oracle"], shard=(i, 2),
                            max_cost=0.015, prices=prices, progress=False)) for i in (1, 2)]
    assert [(m.cases, m.cost) for m in shards] == [(1, 0.01), (1, 0.01)]  # one image each fits, not two
    merged = merge_runs([tmp_path / "shard1", tmp_path / "shard2"], tmp_path / "merged")
    assert merged.unfinished == len(list(read_cases(run_bench))) - 2 and merged.cost == 0.02


@pytest.mark.parametrize("given, problem", [
    (["--max-cost", "1"], "--max-cost: give --price-file"),
    (["--max-cost", "1", "--price-file", "JUDGE_ONLY"], "no price for synthetic:global-interference"),
    (["--max-cost", "1", "--price-file", "JUDGE_ONLY", "--dry-run"], "no price for synthetic:global-interference"),
    (["--max-cost", "0", "--price-file", "PRICES"], "--max-cost"),
    (["--max-cost", "-2", "--price-file", "PRICES"], "--max-cost"),
    (["--max-cost", "nan", "--price-file", "PRICES"], "--max-cost"),
    (["--max-cost", "ten", "--price-file", "PRICES"], "--max-cost"),
    (["--price-file", "PRICES"], "--price-file"),
])
def test_a_bad_budget_in_money_is_one_line_and_writes_nothing(small, tmp_path, given, problem):
    files = {"PRICES": PRICES, "JUDGE_ONLY": PRICES.split('["openai:oracle"]')[0].replace(
        "synthetic:global-interference", "openai:oracle").replace("per_image", "per_call")}
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
    given = [str(tmp_path / f"{g}.toml") if g in files else g for g in given]
    result = run_trace("run", str(small), "--generator", GENERATOR, "--judge", "openai:oracle", "--base-url",
                       "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run"), *given)
    assert result.returncode == 2 and problem in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_bench(shared_folder):
    from tracebench.sample import SampleOptions, sample_benchmark

    return shared_folder("tiny-1-2", lambda out: sample_benchmark(out, SampleOptions(slots=(1,), per_slot=2, seed=3,
                                                                                     applications=False)))


def test_generator_options_reach_the_images_endpoint_and_are_part_of_the_run(tiny_bench, tmp_path):
    with OpenAIStub(lambda request: "unused") as stub:
        base = ["run", str(tiny_bench), "--generator", "openai:image-model", "--judge", "oracle", "--base-url",
                stub.base_url, "--max-retries", "0"]
        options = ["--generator-option", "size=512x512", "--generator-option", "num_inference_steps=30",
                   "--generator-option", "seed=7"]
        first = run_trace(*base, *options, "--out", str(tmp_path / "a"))
        assert first.returncode == 3, first.stderr  # the stub's image holds no truth: the oracle abstains
        edits = [r for r in stub.received if r.path == "/v1/images/edits"]
        assert len(edits) == 2
        for request in edits:  # the images API's own field as a field, the others as extra fields
            for name, value in (("size", b"512x512"), ("num_inference_steps", b"30"), ("seed", b"7")):
                assert f'name="{name}"'.encode() in request.raw and value in request.raw
        assert RUN_MANIFEST.read(tmp_path / "a").generator_options == {"num_inference_steps": 30, "seed": 7,
                                                                       "size": "512x512"}
        # another option is another run (refused in the folder) and other cache keys (called again)
        other = run_trace(*base, "--generator-option", "seed=8", "--out", str(tmp_path / "a"))
        assert other.returncode == 2 and "generator_options" in other.stderr
        again = run_trace(*base, "--generator-option", "seed=8", "--cache", str(tmp_path / "a" / "cache"),
                          "--out", str(tmp_path / "b"))
        assert again.returncode == 3 and len([r for r in stub.received if r.path == "/v1/images/edits"]) == 4
        same = run_trace(*base, *options, "--cache", str(tmp_path / "a" / "cache"), "--out", str(tmp_path / "c"))
        assert same.returncode == 3 and len([r for r in stub.received if r.path == "/v1/images/edits"]) == 4
    refused = run_trace(*base, "--generator-option", "prompt=hello", "--out", str(tmp_path / "d"))
    assert refused.returncode == 2 and "prompt" in refused.stderr and not (tmp_path / "d").exists()


def test_a_server_refusing_a_generation_option_stops_the_run_with_one_line(tiny_bench, tmp_path):
    with OpenAIStub(lambda request: "unused") as stub:
        stub.image_error = (400, "Unrecognized request argument supplied: seed")
        base = ["run", str(tiny_bench), "--generator", "openai:image-model", "--judge", "oracle", "--base-url",
                stub.base_url, "--max-retries", "0", "--concurrency", "1"]
        refused = run_trace(*base, "--generator-option", "seed=7", "--out", str(tmp_path / "a"))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "refuses the generation option seed" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert len([r for r in stub.received if r.path == "/v1/images/edits"]) == 1  # stopped at the first
        assert RUN_MANIFEST.read(tmp_path / "a").cases == 0
        # a 400 about something else is the case's abstention, as before: the run goes on
        stub.image_error = (400, "Your request was rejected by the safety system")
        other = run_trace(*base, "--generator-option", "seed=7", "--out", str(tmp_path / "b"))
        assert other.returncode == 3, other.stderr
        assert len([r for r in stub.received if r.path == "/v1/images/edits"]) == 3


def test_a_command_generator_reads_the_options(tiny_bench, tmp_path):
    seen = tmp_path / "seen.jsonl"
    script = ("import json, os, shutil, sys; case = json.load(sys.stdin); "
              f"open({str(seen)!r}, 'a').write(os.environ['TRACEBENCH_GENERATOR_OPTIONS'] + '\\n'); "
              "shutil.copy(case['references'][0]['path'], os.environ['TRACEBENCH_OUTPUT'])")
    command = f"{sys.executable} -c {shlex.quote(script)}"
    result = run_trace("run", str(tiny_bench), "--generator", f"command:{command}", "--judge", "oracle",
                       "--generator-option", "guidance_scale=3.5", "--out", str(tmp_path / "run"))
    assert result.returncode in (0, 3), result.stderr
    assert [json.loads(line) for line in seen.read_text().splitlines()] == [{"guidance_scale": 3.5}] * 2


@pytest.mark.slow
def test_four_shard_processes_on_one_cache_merge_to_the_unsharded_run(small, shared_runs, tmp_path):
    """The Slurm-array recipe (docs/evaluate.md): shards as separate processes started together,
    one --cache folder, trace merge. A fifth process runs shard 1 again beside them, so the same
    cache entries are written by two processes at once."""
    import subprocess

    from test_cli import _trace_executable

    whole = shared_runs(small, GENERATOR)
    cache = tmp_path / "cache"
    jobs = [(f"{i}/4", tmp_path / f"shard{i}") for i in range(1, 5)] + [("1/4", tmp_path / "shard1-again")]
    procs = [subprocess.Popen([*_trace_executable(), "run", str(small), "--generator", GENERATOR, "--judge",
                               "oracle", "--shard", shard, "--cache", str(cache), "--concurrency", "4",
                               "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for shard, out in jobs]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    merged = run_trace("merge", *(str(tmp_path / f"shard{i}") for i in range(1, 5)), "--out", str(tmp_path / "merged"))
    assert merged.returncode == 0, merged.stderr
    assert (tmp_path / "merged" / "verdicts.jsonl").read_bytes() == (whole / "verdicts.jsonl").read_bytes()
    assert (tmp_path / "shard1-again" / "verdicts.jsonl").read_bytes() == \
        (tmp_path / "shard1" / "verdicts.jsonl").read_bytes()
    # every cache entry whole: a run over it makes no call
    again = run_benchmark(small, tmp_path / "again", RunOptions(generator=GENERATOR, judges=["oracle"], cache_dir=cache,
                          progress=False))
    assert again.calls == {} and (tmp_path / "again" / "verdicts.jsonl").read_bytes() == \
        (whole / "verdicts.jsonl").read_bytes()
    assert not [p for p in cache.rglob("*") if p.is_file() and not p.name.endswith((".json", ".bin"))]
