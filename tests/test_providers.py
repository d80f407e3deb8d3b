"""Model providers and the one wrapper around their calls: plugins (python: files and modules,
entry points), per-model endpoints (spec suffix, models file, replicas), ensembles across
servers, retries, scrubbing, and reference images encoded once.

Every server here is real and on 127.0.0.1: the OpenAI-compatible stub (tests/openai_server.py)
and ``trace serve``'s zoo server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from statistics import fmean

import pytest

from openai_server import OpenAIStub, text_of
from tracebench.cache import sha256
from tracebench.errors import TraceError
from tracebench.providers import (ImageBytes, ModelEntry, ModelSettings, ReferenceFiles, make_generator, make_judge,
                                  read_models_file, resolve_spec)
from tracebench.records import Verdict
from tracebench.run import read_verdicts, RunOptions, run_benchmark
from tracebench.sample import SampleOptions, read_cases, sample_benchmark
from tracebench.serve import ZooServer

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "examples" / "plugins"
SETTINGS = ModelSettings(max_retries=3, timeout=30.0)
KEY = "sk-provider-test-9c1e-distinctive"


@pytest.fixture(scope="module")
def bench(shared_folder) -> Path:
    """Read only (made once for all workers): a test that changes it works on a copy."""
    return shared_folder("test_providers-bench", lambda out: sample_benchmark(
        out, SampleOptions(slots=(1, 2, 3, 5), per_slot=3, seed=2, applications=False)))


def trace(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ) | (env or {})  # PYTHONPATH passed on: the tree under test runs
    return subprocess.run([sys.executable, "-m", "tracebench", *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=300)


def question_ids_asked(request: dict) -> list[str]:
    """The question ids an openai: judge's request asks (the enum of its JSON schema)."""
    schema = request["response_format"]["json_schema"]["schema"]
    return schema["properties"]["answers"]["items"]["properties"]["id"]["enum"]


def answering(answer: str):
    """A chat handler answering every question asked with ``answer``."""
    return lambda request: json.dumps({"answers": [{"id": q, "answer": answer, "reason": "stub"}
                                                   for q in question_ids_asked(request)]})


def polarity_scores(cases) -> dict[str, float]:
    """The benchmark's operator scores when every question is answered "yes": a question passes
    when it expects yes, fails when it expects no, and fails when a question it depends on
    within its own operator instance fails; instance = mean of its questions, case = mean of
    its instances per operator, benchmark = mean over slot levels of the slot's mean over the
    cases having the operator (the paper's Table 2; general cases only when there are some).
    Computed here from the checklist, independently of tracebench.score."""
    general = [case for case in cases if case.application is None]
    per_slot: dict[str, dict[int, list[float]]] = {}
    for case in general or cases:
        by_id = {q.id: q for q in case.checklist}
        memo: dict[str, bool] = {}

        def holds(qid: str) -> bool:
            if qid not in memo:
                q = by_id[qid]
                own = [p for p in q.depends_on if (by_id[p].op, by_id[p].target) == (q.op, q.target)]
                memo[qid] = q.expected == "yes" and all(holds(p) for p in own)
            return memo[qid]

        instances: dict[tuple[str, str], list[float]] = {}
        for q in case.checklist:
            instances.setdefault((str(q.op), q.target), []).append(1.0 if holds(q.id) else 0.0)
        case_ops: dict[str, list[float]] = {}
        for (op, _), values in instances.items():
            case_ops.setdefault(op, []).append(fmean(values))
        for op, values in case_ops.items():
            per_slot.setdefault(op, {}).setdefault(case.slot, []).append(fmean(values))
    return {op: round(fmean(fmean(v) for v in slots.values()), 4) for op, slots in per_slot.items()}


# ------------------------------------------------------------------------------ plugins


def test_the_example_plugins_run_through_trace_run(bench, tmp_path):
    run = tmp_path / "run"
    result = trace("run", str(bench), "--generator", f"python:{PLUGINS / 'first_reference.py'}",
                   "--judge", f"python:{PLUGINS / 'always_yes.py'}", "--out", str(run))
    assert result.returncode == 0, result.stderr
    cases = list(read_cases(bench))
    for case in cases:  # the generator returned each case's first reference, as it is
        image = run / "images" / f"{case.id}.png"
        assert image.read_bytes() == (bench / case.references[0].path).read_bytes()
    verdicts = list(read_verdicts(run))
    assert {v.votes[0].judge for v in verdicts} == {"python:always_yes"}
    assert all(v.votes[0].answer == "yes" for v in verdicts)
    scores = json.loads(trace("score", str(run), "--json").stdout)
    expected = polarity_scores(cases)
    assert {op: value for op, value in scores["operators"].items() if value is not None} == expected
    assert any(value < 1.0 for value in expected.values())  # the polarity shows: duplication asks for "no"
    # the run recorded where its plugins came from, to show: trace diagnose loads nothing a run folder
    # names, and prints the flags that name them
    manifest = json.loads((run / "run.json").read_text())
    plugins = {"python:first_reference": f"python:{PLUGINS / 'first_reference.py'}",
               "python:always_yes": f"python:{PLUGINS / 'always_yes.py'}"}
    assert manifest["loaded_from"] == plugins
    refused = trace("diagnose", str(run), "--cases", cases[-1].id, "--out", str(tmp_path / "diag"))
    assert refused.returncode == 2 and not (tmp_path / "diag").exists()
    flags = refused.stderr.strip().split(", e.g. ")[1]
    assert flags == f"--generator {plugins['python:first_reference']} --judge {plugins['python:always_yes']}"
    diagnosis = trace("diagnose", str(run), "--cases", cases[-1].id, *flags.split(), "--out", str(tmp_path / "diag"))
    assert diagnosis.returncode == 0, diagnosis.stderr
    tree = json.loads((tmp_path / "diag" / "trees.jsonl").read_text().splitlines()[0])
    assert tree["case_id"] == cases[-1].id and all(n["evaluated"] for n in tree["nodes"])


def test_the_first_reference_plugin_draws_a_blank_image_without_references():
    from tracebench.records import Case

    generator = make_generator(f"python:{PLUGINS / 'first_reference.py'}")
    case = Case(id="c", slot=0, template="T_e", formula="T_e", prompt="a cat", text_only_prompt="a cat",
                scene="{member}", references=(), terms=(), checklist=())
    import asyncio
    from io import BytesIO

    from PIL import Image

    data = asyncio.run(generator.call(case, [])).image
    with Image.open(BytesIO(data)) as image:
        assert image.size == (256, 256) and image.getpixel((10, 10)) == (255, 255, 255)


def test_a_plugin_by_module_and_factory_name(tmp_path, monkeypatch):
    (tmp_path / "my_judges.py").write_text(
        "from tracebench.providers import Judge\n"
        "class Picky(Judge):\n"
        "    def __init__(self, answer):\n"
        "        self.answer = answer\n"
        "    def ask(self, case, questions, image, references):\n"
        "        return {q.id: self.answer for q in questions}\n"
        "def make_no():\n"
        "    return Picky('no')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    judge = make_judge("python:my_judges:make_no")
    assert judge.spec == "python:my_judges:make_no" and judge.answer == "no"


def test_a_plugin_reads_the_command_settings_in_its_init(tmp_path):
    (tmp_path / "reading.py").write_text(
        "from tracebench.providers import Generator, Judge\n"
        "class Gen(Generator):\n"
        "    max_images = 9\n"
        "    def __init__(self):\n"
        "        self.seen = (dict(self.options), self.sample, self.max_images, self.spec)\n"
        "    def generate(self, case, references):\n"
        "        return b'png'\n"
        "class Ask(Judge):\n"
        "    def __init__(self):\n"
        "        self.seen = self.scale\n"
        "    def ask(self, case, questions, image, references):\n"
        "        return {}\n"
        "generator, judge = Gen, Ask\n")
    spec = f"python:{tmp_path / 'reading.py'}"
    models = {spec: ModelEntry(max_images=3, options={"steps": 4, "seed": 1})}
    generator = make_generator(spec, ModelSettings(models=models, sample=2, generator_options={"seed": 7}))
    assert generator.seen == ({"seed": 7, "steps": 4}, 2, 3, spec)  # the command line's option over the models file's
    assert make_judge(spec, ModelSettings(scale="tiers")).seen == "tiers"
    assert make_generator(spec).seen == ({}, 0, 9, spec)  # nothing said: the class's own


def test_a_plugin_naming_a_ready_made_instance_is_refused(bench, tmp_path):
    (tmp_path / "ready.py").write_text(
        "from tracebench.providers import Judge\n"
        "class Yes(Judge):\n"
        "    spec = 'python:ready'\n"
        "    def ask(self, case, questions, image, references):\n"
        "        return {q.id: 'yes' for q in questions}\n"
        "judge = Yes()\n"
        "def again():\n"
        "    return judge\n")
    for name in ("", ":again"):
        out = tmp_path / "run"
        result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge",
                       f"python:{tmp_path / 'ready.py'}{name}", "--out", str(out))
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Yes is an instance made before the command's settings were given (name its class, or a factory " \
               "that builds it)" in result.stderr and not out.exists()


@pytest.mark.parametrize("spec,fragment", [
    ("python:no_such_file.py", "no_such_file.py is not a file"),
    (f"python:{PLUGINS / 'always_yes.py'}:nope", "defines no 'nope'"),
    ("python:no_such_module_xyz", "cannot be loaded: ModuleNotFoundError"),
    ("nosuchprovider", "expected openai:MODEL, oracle[:flip=P,yes-bias=Q] or python:FILE.py[:NAME]"),
])
def test_a_bad_plugin_is_one_line_and_exit_2(bench, tmp_path, spec, fragment):
    out = tmp_path / "run"
    result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", spec, "--out", str(out))
    assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists()


def test_a_plugin_that_is_not_a_judge_or_fails_to_import(bench, tmp_path):
    (tmp_path / "wrong.py").write_text("judge = 42\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    for name, fragment in (("wrong.py", "int is not a tracebench Judge"),
                           ("broken.py", "cannot be loaded: ZeroDivisionError")):
        result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge",
                       f"python:{tmp_path / name}", "--out", str(tmp_path / "run"))
        assert result.returncode == 2 and fragment in result.stderr, result.stderr


def test_a_provider_registered_by_an_entry_point(bench, tmp_path):
    site = tmp_path / "site"
    (site / "tb_yes-1.0.dist-info").mkdir(parents=True)
    (site / "tb_yes-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: tb-yes\nVersion: 1.0\n")
    (site / "tb_yes-1.0.dist-info" / "entry_points.txt").write_text("[tracebench.judges]\nyes = tb_yes:Yes\n")
    (site / "tb_yes.py").write_text(
        "from tracebench.providers import Judge\n"
        "class Yes(Judge):\n"
        "    spec = 'yes'\n"
        "    async def ask(self, case, questions, image, references):\n"
        "        return {q.id: 'yes' for q in questions}\n")
    out = tmp_path / "run"
    result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "yes", "--out", str(out),
                   env={"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 0, result.stderr
    assert {v.judge for v in read_verdicts(out)} == {"yes"}


# ---------------------------------------------------------------- endpoints, ensembles, replicas


def test_where_a_model_is_served_first_found_first(tmp_path):
    models = {"qwen": ModelEntry(spec="openai:Qwen/Qwen3-VL-8B-Instruct", base_urls=("http://127.0.0.1:8000/v1",
                                                                                       "http://127.0.0.1:8001/v1"),
                                 concurrency=64),
              "openai:gpt-4.1": ModelEntry(api_key_env="MY_KEY", max_retries=1)}
    settings = ModelSettings(base_url="http://127.0.0.1:9000/v1", judge_base_url="http://127.0.0.1:9100/v1",
                             models=models)
    spec, config = resolve_spec("qwen", settings, judge=True)
    assert spec == "openai:Qwen/Qwen3-VL-8B-Instruct" and config.base_urls == models["qwen"].base_urls
    assert config.concurrency == 64
    spec, config = resolve_spec("openai:gpt-4.1", settings, judge=True)
    assert config.base_urls == ("http://127.0.0.1:9100/v1",) and config.api_key_env == "MY_KEY"
    assert config.max_retries == 1
    spec, config = resolve_spec("openai:gpt-4.1", settings, judge=False)
    assert config.base_urls == ("http://127.0.0.1:9000/v1",)
    spec, config = resolve_spec("openai:gpt-4.1@http://127.0.0.1:7000/v1,http://127.0.0.1:7001/v1", settings,
                                judge=True)
    assert spec == "openai:gpt-4.1"
    assert config.base_urls == ("http://127.0.0.1:7000/v1", "http://127.0.0.1:7001/v1")


def test_a_models_file_is_read_and_its_errors_name_the_field(bench, tmp_path):
    good = tmp_path / "models.toml"
    good.write_text('[models.judge]\nspec = "openai:stub-model"\nbase_urls = ["http://127.0.0.1:1/v1"]\n'
                    'concurrency = 3\n')
    assert read_models_file(good)["judge"].concurrency == 3
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.judge]\nspec = "openai:stub-model"\nconcurrency = 0\n')
    result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "judge", "--models", str(bad),
                   "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and f"{bad}: models.judge.concurrency:" in result.stderr, result.stderr
    with pytest.raises(TraceError, match="models.judge.colour: Extra inputs"):
        bad.write_text('[models.judge]\ncolour = "red"\n')
        read_models_file(bad)


def test_an_ensemble_of_two_judges_on_two_servers(bench, tmp_path):
    cases = list(read_cases(bench))
    with ZooServer([bench]).start() as zoo, OpenAIStub(answering("no")) as stub:
        manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:global-interference",
                                 judges=[f"openai:oracle@{zoo.base_url}", f"openai:stub-model@{stub.base_url}"],
                                 settings=SETTINGS, concurrency=4, ensemble="majority"))
        assert len(stub.requests) == len(cases)
    assert manifest.judges == ("openai:oracle", "openai:stub-model") and manifest.abstentions > 0
    assert manifest.calls == {"synthetic:global-interference": len(cases), "openai:oracle": len(cases),
                              "openai:stub-model": len(cases)}
    alone = tmp_path / "oracle"
    run_benchmark(bench, alone, RunOptions(generator="synthetic:global-interference", judges=["oracle"], settings=SETTINGS))
    truth = {(v.case_id, v.question_id): v.verdict for v in read_verdicts(alone)}
    for v in read_verdicts(tmp_path / "run"):
        oracle, stubbed = v.votes
        assert (oracle.judge, stubbed.judge) == ("openai:oracle", "openai:stub-model")
        assert oracle.verdict == truth[(v.case_id, v.question_id)]  # the zoo server answered as the oracle
        assert stubbed.answer == "no"
        # two judges by majority: agreement is the verdict, disagreement a tie (an abstention, never a fail)
        assert v.verdict == (oracle.verdict if oracle.verdict == stubbed.verdict else "abstain")


def test_replicas_of_one_judge_share_the_calls(bench, tmp_path):
    cases = list(read_cases(bench))
    with OpenAIStub(answering("yes")) as first, OpenAIStub(answering("yes")) as second:
        models = tmp_path / "models.toml"
        models.write_text(f'[models.judge]\nspec = "openai:stub-model"\n'
                          f'base_urls = ["{first.base_url}", "{second.base_url}"]\nconcurrency = 2\n')
        result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "judge",
                       "--models", str(models), "--out", str(tmp_path / "run"))
        assert result.returncode == 0, result.stderr
        shares = (len(first.requests), len(second.requests))
    assert sum(shares) == len(cases) and min(shares) >= len(cases) // 3, shares
    assert {v.judge for v in read_verdicts(tmp_path / "run")} == {"openai:stub-model"}
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["judges"] == ["openai:stub-model"] and manifest["calls"]["openai:stub-model"] == len(cases)


def test_concurrency_per_replica_is_bounded(bench, tmp_path):
    in_flight, peak, lock = Counter(), Counter(), threading.Lock()

    def slow(name):
        def handler(request):
            import time

            with lock:
                in_flight[name] += 1
                peak[name] = max(peak[name], in_flight[name])
            time.sleep(0.05)
            with lock:
                in_flight[name] -= 1
            return answering("yes")(request)
        return handler

    with OpenAIStub(slow("a")) as a, OpenAIStub(slow("b")) as b:
        settings = ModelSettings(models={"openai:stub-model": ModelEntry(base_urls=(a.base_url, b.base_url),
                                                                         concurrency=2)})
        run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect", judges=["openai:stub-model"],
                      settings=settings, concurrency=16))
    assert 1 <= peak["a"] <= 2 and 1 <= peak["b"] <= 2, peak


# ------------------------------------------------------------------------ retries and failures


def test_transient_errors_and_rate_limits_are_retried_a_bad_request_is_not(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cases = list(read_cases(bench))
    seen: Counter = Counter()
    lock = threading.Lock()

    def handler(request):
        first_question = question_ids_asked(request)[0]
        text = "\n".join(text_of(request))
        case = max((c for c in cases if c.prompt in text), key=lambda c: len(c.prompt))
        with lock:
            seen[case.id] += 1
            n = seen[case.id]
        if case.id == cases[0].id:
            return 400, f"bad request; your key is {KEY}"  # a server echoing the key back
        if n == 1:
            return (429, "slow down") if len(first_question) % 2 else (503, "overloaded")
        return answering("yes")(request)

    with OpenAIStub(handler) as stub:
        settings = ModelSettings(base_url=stub.base_url, max_retries=2, timeout=10.0)
        manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:perfect",
                                 judges=["openai:stub-model"], settings=settings, concurrency=4))
    assert seen[cases[0].id] == 1  # a 400 is not retried
    assert all(seen[c.id] == 2 for c in cases[1:])  # one failure, one retry
    assert manifest.calls["openai:stub-model"] == len(cases)  # a retried call counts once
    verdicts = list(read_verdicts(tmp_path / "run"))
    bad = [v for v in verdicts if v.case_id == cases[0].id]
    assert bad and all(v.verdict == "abstain" for v in bad)
    assert all("API error 400" in v.votes[0].reason and KEY not in v.votes[0].reason and "***" in v.votes[0].reason
               for v in bad)
    assert all(v.verdict != "abstain" for v in verdicts if v.case_id != cases[0].id)
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_an_exception_in_a_plugin_is_an_abstention_with_its_reason(bench, tmp_path):
    plugin = tmp_path / "flaky.py"
    plugin.write_text(
        "import itertools, threading\n"
        "from tracebench.providers import Generator\n"
        "from tracebench.zoo import generate, parse_profile\n"
        "calls, lock = itertools.count(), threading.Lock()\n"
        "class Flaky(Generator):\n"
        "    def generate(self, case, references):\n"
        "        with lock:\n"
        "            n = next(calls)\n"
        "        if n % 2:\n"
        "            raise RuntimeError('out of GPU memory')\n"
        "        return generate(case, parse_profile('perfect'), seed=0)[0]\n"
        "generator = Flaky\n")
    manifest = run_benchmark(bench, tmp_path / "run", RunOptions(generator=f"python:{plugin}", judges=["oracle"],
                             settings=SETTINGS, concurrency=1))
    verdicts = list(read_verdicts(tmp_path / "run"))
    failed = [v for v in verdicts if v.verdict == "abstain"]
    assert manifest.abstentions == len(failed) and 0 < len(failed) < len(verdicts)
    assert all(v.votes[0].reason == "generation failed: RuntimeError: out of GPU memory" for v in failed)


def test_a_generator_whose_first_calls_all_fail_alike_stops_the_run_early(bench, tmp_path):
    plugin = tmp_path / "broken.py"
    plugin.write_text(
        "from tracebench.providers import Generator\n"
        "class Broken(Generator):\n"
        "    calls = 0\n"
        "    def generate(self, case, references):\n"
        "        Broken.calls += 1\n"
        "        raise RuntimeError(f'CUDA device {Broken.calls} not found')\n"
        "generator = Broken\n")
    out = tmp_path / "run"
    result = trace("run", str(bench), "--generator", f"python:{plugin}", "--judge", "oracle", "--out", str(out),
                   "--concurrency", "1")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("trace run: stopped early, the first 5 calls to python:") and "CUDA device" in line
    assert "Fix the plugin and run again: a run that kept no case takes the corrected spec" in line
    assert json.loads((out / "run.json").read_text())["calls"] == {f"python:{plugin}": 5}
    assert (out / "verdicts.jsonl").read_text() == ""  # nothing kept of what failed
    plugin.write_text("from tracebench.zoo import generate, parse_profile\n"
                      "from tracebench.providers import Generator\n"
                      "class Fixed(Generator):\n"
                      "    def generate(self, case, references):\n"
                      "        return generate(case, parse_profile('perfect'), seed=0)[0]\n"
                      "generator = Fixed\n")
    again = trace("run", str(bench), "--generator", f"python:{plugin}", "--judge", "oracle", "--out", str(out))
    assert again.returncode == 0, again.stderr  # the same command, no --retry-abstained: every case is done
    assert len(list(read_verdicts(out))) == sum(len(c.checklist) for c in read_cases(bench))


# ------------------------------------------------------------------------------ reference images


def test_reference_images_are_read_hashed_and_encoded_once(bench):
    case = next(c for c in read_cases(bench) if c.references)
    files = ReferenceFiles(bench)
    first = files.get(case.references[0].path)
    assert files.get(case.references[0].path) is first and isinstance(first, ImageBytes)
    raw = (bench / case.references[0].path).read_bytes()
    assert first == raw and first.sha256 == sha256(raw)
    assert first.data_url.startswith("data:image/png;base64,") and first.data_url is first.data_url


def test_reference_images_are_sent_with_their_real_media_type(bench, tmp_path):
    """A JPEG reference goes to the generator as a JPEG file and to judges as a JPEG data URL."""
    import email.parser
    import email.policy
    import io

    from PIL import Image

    from openai_server import image_urls

    copy = tmp_path / "bench"
    shutil.copytree(bench, copy)
    case = next(c for c in read_cases(copy) if c.references)
    for ref in case.references:  # the same path, JPEG bytes: the type is read from the bytes
        with Image.open(copy / ref.path) as image:
            buffer = io.BytesIO()
            image.convert("RGB").save(buffer, format="JPEG")
        (copy / ref.path).write_bytes(buffer.getvalue())
    with OpenAIStub(answering("yes")) as stub:
        run_benchmark(copy, tmp_path / "run", RunOptions(generator=f"openai:stub-image@{stub.base_url}",
                      judges=[f"openai:stub-model@{stub.base_url}"], settings=SETTINGS, concurrency=2))
        edits = [r for r in stub.received if r.path == "/v1/images/edits"]
        chats = stub.requests
    prompt_of = {}
    for request in edits:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode() + request.raw)
        parts = list(message.iter_parts())
        prompt = next(p.get_content() for p in parts if p.get_param("name", header="content-disposition") == "prompt")
        prompt_of[prompt.strip()] = [(p.get_filename(), p.get_content_type()) for p in parts if p.get_filename()]
    assert prompt_of[case.prompt] == [(f"image_{k + 1}.jpg", "image/jpeg") for k in range(len(case.references))]
    assert all(types and all(t == "image/png" for _, t in types) for prompt, types in prompt_of.items()
               if prompt != case.prompt)
    judged = next(r for r in chats if any(case.prompt in t for t in text_of(r)))
    urls = image_urls(judged)
    assert all(u.startswith("data:image/jpeg;base64,") for u in urls[:len(case.references)])
    assert urls[-1].startswith("data:image/png;base64,")  # the generated image, a PNG


@pytest.mark.parametrize("scale", ["binary", "tiers"])
def test_a_judge_sends_what_chat_completions_create_sends_byte_for_byte(bench, monkeypatch, scale):
    """The judge sends its chat requests through the client's ``post`` (without ``create``'s
    request transform): the server gets the body ``create`` sends for the same arguments, byte for
    byte, with the same headers (the key, the scale, the client's own); so does any other chat call
    (the tagger's shape, an extra_body merged in), and an argument ``create`` does not take is
    refused as there."""
    import asyncio

    import openai

    from tracebench.scales import SCALE_HEADER

    monkeypatch.setenv("TRACEBENCH_TEST_JUDGE_KEY", KEY)
    cases = [c for c in read_cases(bench) if c.references][:2]
    image = ImageBytes((bench / cases[0].references[0].path).read_bytes())
    tag_request = {"messages": [{"role": "user", "content": "tag this"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "tags", "schema": {"type": "object"}, "strict": False}}}

    async def send(stub) -> None:
        judge = make_judge("openai:stub-model", ModelSettings(base_url=stub.base_url, api_key_env="TRACEBENCH_TEST_JUDGE_KEY",
                                                                 max_retries=0, timeout=30.0, scale=scale))
        references = ReferenceFiles(bench)
        for case in cases:
            await judge.ask(case, list(case.checklist), image, [references.get(r.path) for r in case.references])
        await judge.chat(**tag_request)
        await judge.chat(**tag_request, extra_body={"seed": 7, "messages": [{"role": "user", "content": "merged"}]})
        with pytest.raises(TypeError, match="stremm"):
            await judge.chat(**tag_request, stremm=True)
        await judge.aclose()

    async def send_bare(stub, sent) -> None:
        client = openai.AsyncOpenAI(api_key=KEY, base_url=stub.base_url, max_retries=0, timeout=30.0)
        for request in sent[:-1]:
            extra = {SCALE_HEADER: request.headers[SCALE_HEADER.lower()]} if SCALE_HEADER.lower() in request.headers else {}
            await client.chat.completions.create(**json.loads(request.raw), extra_headers=extra)
        await client.chat.completions.create(model="stub-model", **tag_request,
                                             extra_body={"seed": 7, "messages": [{"role": "user", "content": "merged"}]})
        await client.close()

    def answer(request: dict):  # the judge's questions answered, anything else an empty object
        properties = request["response_format"]["json_schema"]["schema"].get("properties", {})
        return answering("yes")(request) if "answers" in properties else "{}"

    with OpenAIStub(answer) as stub:
        asyncio.run(send(stub))
        sent = list(stub.received)
        stub.received.clear()
        asyncio.run(send_bare(stub, sent))
        bare = list(stub.received)
    assert len(sent) == len(cases) + 2 and len(bare) == len(sent)
    assert [r.headers.get(SCALE_HEADER.lower()) for r in sent] == [scale] * len(cases) + [None, None]
    assert sent[-1].body["seed"] == 7 and sent[-1].body["messages"][0]["content"] == "merged"
    for ours, theirs in zip(sent, bare):
        assert (ours.method, ours.path) == (theirs.method, theirs.path) == ("POST", "/v1/chat/completions")
        same = ours.raw == theirs.raw  # not compared in the assert: pytest would diff 100 KiB of bytes
        assert same, f"the bodies differ from byte {_first_difference(ours.raw, theirs.raw)}: {ours.raw[:120]!r}"
        assert ours.headers == theirs.headers and ours.headers["authorization"] == f"Bearer {KEY}"


def _first_difference(a: bytes, b: bytes) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_verdict_records_carry_the_graded_value(bench, tmp_path):
    run_benchmark(bench, tmp_path / "run", RunOptions(generator="synthetic:global-interference", judges=["oracle"],
                  settings=SETTINGS))
    for line in (tmp_path / "run" / "verdicts.jsonl").read_text().splitlines():
        v = Verdict.model_validate_json(line)
        assert v.value == {"pass": 1.0, "fail": 0.0, "abstain": None}[v.verdict]
        assert all(vote.value == {"pass": 1.0, "fail": 0.0, "abstain": None}[vote.verdict] for vote in v.votes)


def test_a_run_whose_calls_abstained_exits_3_with_the_reasons_and_the_retry_command(bench, tmp_path):
    out = tmp_path / "run"
    with OpenAIStub(lambda request: "Sure! yes, yes, no.") as stub:  # a reply that is not the JSON asked for
        result = trace("run", str(bench), "--generator", "synthetic:perfect",
                       "--judge", f"openai:stub-model@{stub.base_url}", "--out", str(out))
        assert result.returncode == 3, result.stderr
        message = result.stderr.strip().splitlines()
        assert len(message) == 1 and "questions abstained" in message[0]
        assert "x the reply is not the expected JSON" in message[0] and "--retry-abstained" in message[0]
        stub.handler = answering("yes")
        again = trace("run", str(bench), "--generator", "synthetic:perfect",
                      "--judge", f"openai:stub-model@{stub.base_url}", "--out", str(out), "--retry-abstained")
    assert again.returncode == 0, again.stderr
    assert all(v.outcome.answered for v in read_verdicts(out))


def test_the_synthetic_zoo_on_a_real_library_is_refused_before_the_run(tmp_path):
    """Real photos have no render plans: the zoo cannot draw them, which is one line up front,
    not a run of abstentions. The sample manifest's library path works from any directory."""
    from library_helpers import derived_library

    library = derived_library(tmp_path / "photos", lambda rec: {**rec, "render": None})
    bench = tmp_path / "bench"
    made = trace("sample", "--library", "photos", "--slots", "1-2", "--per-slot", "2", "--out", "bench", cwd=tmp_path)
    assert made.returncode == 0, made.stderr  # a relative --library, the run started elsewhere
    result = trace("run", str(bench), "--generator", "synthetic:perfect", "--judge", "oracle",
                   "--out", str(tmp_path / "run"), cwd=Path("/"))
    assert result.returncode == 2, result.stderr
    assert "has no render plans: the synthetic zoo draws only from a synthetic library" in result.stderr
    assert str(library.resolve()) in result.stderr and not (tmp_path / "run").exists()
