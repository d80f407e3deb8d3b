"""The lmms-eval bridge: trace export --lmms-eval writes a task folder lmms-eval loads (checked
without lmms-eval: the YAML parsed, its functions found in its utils.py and run on the docs), and
trace import-lmms judges a sample log written in lmms-eval's layout from a zoo run's images into a
run that scores as the zoo run does."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml  # the hf extra: installed with the tests (README)

from test_cli import run_trace
from tracebench.records import read_cases
from tracebench.share._lmms import DOCS_FILE, FUNCTIONS, METRIC

GENERATOR = "synthetic:global-interference"


@pytest.fixture(scope="module")
def zoo(shared_folder):
    """A small benchmark (slot levels 2-3, 3 cases each) and its zoo run judged by the oracle,
    both made by the commands."""

    def make(out: Path) -> None:
        made = run_trace("sample", "--slots", "2-3", "--per-slot", "3", "--no-applications", "--seed", "4",
                         "--out", str(out / "bench"))
        assert made.returncode == 0, made.stderr
        made = run_trace("run", str(out / "bench"), "--generator", GENERATOR, "--judge", "oracle",
                         "--out", str(out / "run"))
        assert made.returncode == 0, made.stderr

    folder = shared_folder("lmms-zoo", make)
    return {"bench": folder / "bench", "run": folder / "run"}


class _FunctionLoader(yaml.SafeLoader):
    """YAML's safe loader, taking lmms-eval's ``!function utils.NAME`` tag as the text it names."""


_FunctionLoader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def _functions(value) -> list[str]:
    """Every ``!function`` the loaded YAML names, anywhere in it."""
    if isinstance(value, tuple) and value and value[0] == "!function":
        return [value[1]]
    if isinstance(value, dict):
        return [name for item in value.values() for name in _functions(item)]
    if isinstance(value, list):
        return [name for item in value for name in _functions(item)]
    return []


def _utils(folder: Path):
    spec = importlib.util.spec_from_file_location("tracebench_lmms_utils_under_test", folder / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_exported_task_loads_and_names_only_functions_of_its_utils(zoo, tmp_path):
    bench, task = zoo["bench"], tmp_path / "task"
    done = run_trace("export", str(bench), "--lmms-eval", str(task))
    assert done.returncode == 0, done.stderr
    yamls = list(task.glob("*.yaml"))
    assert len(yamls) == 1
    config = yaml.load(yamls[0].read_text(encoding="utf-8"), Loader=_FunctionLoader)
    assert {"task", "dataset_path", "dataset_kwargs", "test_split", "output_type", "doc_to_visual", "doc_to_text",
            "doc_to_messages", "process_results", "metric_list", "generation_kwargs"} <= set(config)
    assert config["output_type"] == "generate_until" and config["dataset_path"] == "json"
    assert config["task"] in done.stdout and config["metric_list"][0]["metric"] == METRIC
    assert Path(config["dataset_kwargs"]["data_files"][config["test_split"]]) == (task / DOCS_FILE).resolve()

    tree = ast.parse((task / "utils.py").read_text(encoding="utf-8"))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    named = _functions(config)
    assert len(named) == len(FUNCTIONS) and all(name.startswith("utils.") for name in named)
    assert {name.removeprefix("utils.") for name in named} <= defined

    # the docs are the cases in order, their references copied byte for byte; the functions run on them
    cases = list(read_cases(bench))
    docs = [json.loads(line) for line in (task / DOCS_FILE).read_text(encoding="utf-8").splitlines()]
    assert [doc["id"] for doc in docs] == [case.id for case in cases]
    utils = _utils(task)
    for doc, case in zip(docs, cases):
        assert doc["prompt"] == case.prompt and doc["references"] == [ref.path for ref in case.references]
        assert all((task / path).read_bytes() == (bench / path).read_bytes() for path in doc["references"])
        content = utils.doc_to_messages(doc)[0]["content"]
        assert [part["type"] for part in content] == ["image"] * len(case.references) + ["text"]
        assert content[-1]["text"] == case.prompt
        assert [part["url"].size for part in content[:-1]] == [img.size for img in utils.doc_to_visual(doc)]
    reply = json.dumps({"text": "done", "images": ["made/x.png"]})
    recorded = utils.process_results(docs[0], [reply])[METRIC]
    assert recorded["id"] == cases[0].id and recorded["images"] == [os.path.abspath("made/x.png")]
    assert recorded["benchmark"] == hashlib.sha256((bench / "cases.jsonl").read_bytes()).hexdigest()
    assert utils.aggregate_replies([recorded, {**recorded, "images": []}]) == 0.5


def _lmms_output(zoo, folder: Path, *, recorded: bool) -> Path:
    """lmms-eval's output for the zoo run's images: ``folder/<model>/images/<n>.png`` and the
    sample log beside them, one sample a line, written as lmms-eval writes it (no doc, the reply
    in filtered_resps; with ``recorded``, the metric the exported task's process_results adds)."""
    bench, run = zoo["bench"], zoo["run"]
    model = folder / "my-model"
    (model / "images").mkdir(parents=True)
    cases_hash = hashlib.sha256((bench / "cases.jsonl").read_bytes()).hexdigest()
    lines = []
    for doc_id, case in enumerate(read_cases(bench)):
        image = model / "images" / f"{doc_id:05d}.png"
        shutil.copyfile(run / "images" / f"{case.id}.png", image)
        reply = json.dumps({"text": "", "images": [str(image.absolute())]})
        sample = {"doc_id": doc_id, "target": case.id, "filtered_resps": [reply], "doc_hash": "0" * 64}
        if recorded:
            sample[METRIC] = {"id": case.id, "benchmark": cases_hash, "images": [str(image.absolute())], "text": ""}
        lines.append(json.dumps(sample))
    log = model / "20260101_120000_samples_tracebench_bench.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


@pytest.mark.parametrize("recorded", [False, True], ids=["replies", "recorded"])
def test_a_log_of_a_zoo_runs_images_imports_to_a_run_that_scores_byte_for_byte(zoo, tmp_path, recorded):
    log = _lmms_output(zoo, tmp_path / "lmms", recorded=recorded)
    native = run_trace("score", str(zoo["run"]), "--json")
    assert native.returncode == 0, native.stderr

    named = run_trace("import-lmms", str(log), "--cases", str(zoo["bench"]), "--judge", "oracle",
                      "--generator-name", GENERATOR, "--out", str(tmp_path / "named"))
    assert named.returncode == 0, named.stderr
    scored = run_trace("score", str(tmp_path / "named"), "--json")
    assert scored.returncode == 0 and scored.stdout == native.stdout
    assert (tmp_path / "named" / "verdicts.jsonl").read_bytes() == (zoo["run"] / "verdicts.jsonl").read_bytes()

    # named by default after the log's folder (lmms-eval's model folder): only the run's generator differs
    plain = run_trace("import-lmms", str(log), "--cases", str(zoo["bench"]), "--judge", "oracle",
                      "--out", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr
    ours = json.loads(run_trace("score", str(tmp_path / "plain"), "--json").stdout)
    theirs = json.loads(native.stdout)
    assert ours["run"].pop("generator") == "lmms-eval:my-model" and theirs["run"].pop("generator") == GENERATOR
    assert ours == theirs


def test_a_json_log_with_a_logs_list_and_relative_paths_imports_alike(zoo, tmp_path):
    log = _lmms_output(zoo, tmp_path / "lmms", recorded=False)
    samples = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    for sample, case in zip(samples, read_cases(zoo["bench"])):
        sample["doc"] = {"id": case.id, "prompt": case.prompt}
        sample["resps"] = [[json.dumps({"text": "", "images": [f"images/{sample['doc_id']:05d}.png"]})]]
        del sample["filtered_resps"]
    old = log.with_name("tracebench_bench.json")
    old.write_text(json.dumps({"args": {}, "model_configs": {}, "logs": samples}), encoding="utf-8")
    done = run_trace("import-lmms", str(old), "--cases", str(zoo["bench"]), "--judge", "oracle",
                     "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "verdicts.jsonl").read_bytes() == (zoo["run"] / "verdicts.jsonl").read_bytes()


def _damage(log: Path, damage: str) -> None:
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    first = lines[0]
    image = Path(json.loads(first["filtered_resps"][0])["images"][0])
    if damage == "unknown case":
        first["doc"] = {"id": "s9-99999"}
    elif damage == "doc_id past the cases":
        first["doc_id"] = 999
    elif damage == "case twice":
        lines[1]["doc_id"] = first["doc_id"]
    elif damage == "other benchmark":
        first[METRIC] = {"id": first["target"], "benchmark": "0" * 64, "images": [str(image)]}
    elif damage in ("image outside", "link leaving", "undecodable", "missing image"):
        target = {"image outside": "/etc/hostname", "link leaving": str(image.with_name("link.png")),
                  "undecodable": str(image), "missing image": str(image.with_name("gone.png"))}[damage]
        if damage == "link leaving":
            image.with_name("link.png").symlink_to(log.parent.parent / "outside.png")
            shutil.copyfile(image, log.parent.parent / "outside.png")
        if damage == "undecodable":
            image.write_bytes(image.read_bytes()[:200])
        first["filtered_resps"] = [json.dumps({"text": "", "images": [target]})]
    if damage == "not JSON":
        text = "{not json\n" + "\n".join(json.dumps(line) for line in lines[1:]) + "\n"
    else:
        text = "\n".join(json.dumps(line) for line in lines) + "\n"
    log.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("damage, message", [
    ("unknown case", r":1: case 's9-99999': \S+ holds no such case$"),
    ("doc_id past the cases", r":1: doc_id: 999 is not a case of \S+ \(it holds 6 cases"),
    ("case twice", r":2: case '\S+': already given at \S+:1$"),
    ("other benchmark", r":1: tracebench_reply.benchmark: the log is of another benchmark"),
    ("image outside", r":1: /etc/hostname: outside the log's folder"),
    ("link leaving", r":1: images/link.png: a link that leaves the log's folder$"),
    ("undecodable", r":1: \S+/00000.png: not a decodable image"),
    ("missing image", r":1: \S+/gone.png: no such image file$"),
    ("not JSON", r":1: not JSON"),
])
def test_a_bad_log_is_one_line_exit_2_and_writes_nothing(zoo, tmp_path, damage, message):
    import re

    log = _lmms_output(zoo, tmp_path / "lmms", recorded=False)
    _damage(log, damage)
    done = run_trace("import-lmms", str(log), "--cases", str(zoo["bench"]), "--judge", "oracle",
                     "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trace import-lmms: ") and re.search(message, lines[0]), lines
    assert not (tmp_path / "run").exists()


def test_a_reply_without_an_image_abstains_and_the_rest_is_judged(zoo, tmp_path):
    log = _lmms_output(zoo, tmp_path / "lmms", recorded=False)
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    lines[0]["filtered_resps"] = ["I cannot draw that."]
    log.write_text("\n".join(json.dumps(line) for line in lines[:-1]) + "\n", encoding="utf-8")  # the last left out
    done = run_trace("import-lmms", str(log), "--cases", str(zoo["bench"]), "--judge", "oracle",
                     "--out", str(tmp_path / "run"))
    assert done.returncode == 3, done.stderr
    assert "the reply holds no image" in done.stderr and "holds no sample of case" in done.stderr
    verdicts = [json.loads(line) for line in (tmp_path / "run" / "verdicts.jsonl").read_text().splitlines()]
    cases = [case.id for case in read_cases(zoo["bench"])]
    abstained = {v["case_id"] for v in verdicts if v["verdict"] == "abstain"}
    assert abstained == {cases[0], cases[-1]}
    assert any(v["verdict"] != "abstain" for v in verdicts)


def test_export_refuses_a_run_folder_and_a_diagnosis_writing_nothing(zoo, tmp_path):
    done = run_trace("export", str(zoo["run"]), "--lmms-eval", str(tmp_path / "task"))
    assert done.returncode == 2 and "a run folder; --lmms-eval exports a benchmark folder" in done.stderr
    done = run_trace("export", str(zoo["bench"]), "--lmms-eval", str(tmp_path / "task"), "--diagnosis", str(tmp_path))
    assert done.returncode == 2 and "--diagnosis" in done.stderr
    done = run_trace("export", str(zoo["bench"]), "--lmms-eval", str(tmp_path / "task"), "--out", str(tmp_path / "x"))
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
    assert not (tmp_path / "task").exists() and not (tmp_path / "x").exists()
