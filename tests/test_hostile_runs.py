"""A run folder from someone else is data: no command that reads a run.json runs what it names,
imports the plugin file it names, reads the key variable it names or calls the host it names.

The crafted run.json is a real run's (the zoo and the oracle, the `world` of test_records.py)
with its generator, judges, `loaded_from` and `endpoints` replaced by canaries:

- the generator ``command:touch RAN {output}``: the file RAN appears if it runs;
- a judge ``python:canary``, loaded from ``canary.py``, a module that writes IMPORTED when imported;
- a judge ``openai:gpt-4.1`` at a loopback server that records every request it gets (none may
  come), with its key in ``$TRACEBENCH_CANARY_KEY`` (set here; its value may reach no file,
  no request and no output).

Every command that reads a run.json is run on it (score, report, leaderboard, compare, merge,
agree, rejudge, export, import, diagnose), and on the run that travelled through trace export
and trace import, and on the run trace rejudge made of it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import test_records
from openai_server import OpenAIStub
from test_cli import run_trace

world = test_records.world
KEY = "sk-canary-0123456789abcdef0123456789"


@pytest.fixture
def canaries(tmp_path, monkeypatch):
    """The markers, the plugin file, the key and the recording server of one test."""
    ran, imported = tmp_path / "RAN", tmp_path / "IMPORTED"
    module = tmp_path / "plugins" / "canary.py"
    module.parent.mkdir()
    module.write_text(f"from pathlib import Path\nPath({str(imported)!r}).write_text('imported')\n"
                      "from tracebench.providers import Judge\n\nclass judge(Judge):\n    spec = 'python:canary'\n")
    monkeypatch.setenv("TRACEBENCH_CANARY_KEY", KEY)
    with OpenAIStub(lambda request: '{"answers": {}}') as server:
        yield {"ran": ran, "imported": imported, "module": module, "server": server}
    assert not ran.exists(), "a command recorded in a run folder ran"
    assert not imported.exists(), "a plugin recorded in a run folder was imported"
    assert server.received == [], "a host recorded in a run folder was called"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the key named by a run folder reached {path}"


def _crafted(world, tmp_path: Path, canaries: dict) -> Path:
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    manifest = json.loads((run / "run.json").read_text())
    manifest.update(
        generator=f"command:touch {canaries['ran']} {{output}}",
        judges=["python:canary", "openai:gpt-4.1"],
        loaded_from={"python:canary": f"python:{canaries['module']}"},
        endpoints={"openai:gpt-4.1": {"base_urls": [canaries["server"].base_url],
                                      "api_key_env": "TRACEBENCH_CANARY_KEY"}})
    (run / "run.json").write_text(json.dumps(manifest, indent=2))
    return run


def _no_traceback(result, *codes: int) -> None:
    assert result.returncode in codes, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert KEY not in result.stdout + result.stderr


def _refused_diagnosis(run: Path, out: Path, *flags: str) -> str:
    result = run_trace("diagnose", str(run), "--cases", "all", "--out", str(out), *flags)
    _no_traceback(result, 2)
    (line,) = result.stderr.strip().splitlines()
    assert not out.exists()  # nothing written
    return line


def test_diagnose_runs_calls_and_imports_nothing_a_run_folder_names(world, tmp_path, canaries):
    run = _crafted(world, tmp_path, canaries)
    line = _refused_diagnosis(run, tmp_path / "diag")
    # the recorded specs, as the flags the user would pass to mean them (plugin file and URL included)
    assert f"--generator 'command:touch {canaries['ran']} {{output}}'" in line
    assert f"--judge python:{canaries['module']}" in line
    assert f"--judge openai:gpt-4.1@{canaries['server'].base_url}" in line
    assert "--judge-api-key-env TRACEBENCH_CANARY_KEY" in line
    # naming one role leaves the other to be named
    assert "--generator" not in _refused_diagnosis(run, tmp_path / "diag", "--generator", "synthetic:perfect")
    only_generator = _refused_diagnosis(run, tmp_path / "diag", "--judge", "oracle")
    assert "--generator 'command:touch" in only_generator and "--judge" not in only_generator
    # named on the command line, the zoo and the oracle diagnose the run
    named = run_trace("diagnose", str(run), "--cases", "all", "--generator", test_records.GENERATOR,
                      "--judge", "oracle", "--out", str(tmp_path / "diag"))
    _no_traceback(named, 0)


def test_diagnose_sends_no_key_to_a_host_a_run_names(world, tmp_path, canaries):
    """The judge alone crafted (the generator the zoo): the server it names gets no request,
    so neither the key nor the cases' images and prompts."""
    run = _crafted(world, tmp_path, canaries)
    manifest = json.loads((run / "run.json").read_text())
    manifest.update(generator=test_records.GENERATOR, judges=["openai:gpt-4.1"], loaded_from={})
    (run / "run.json").write_text(json.dumps(manifest))
    line = _refused_diagnosis(run, tmp_path / "diag")
    assert line.endswith(f"--judge openai:gpt-4.1@{canaries['server'].base_url} "
                         "--judge-api-key-env TRACEBENCH_CANARY_KEY")


def test_the_flags_printed_keep_each_key_for_its_own_host_and_the_generation_options(world, tmp_path):
    """A served generator whose key is in G and a judge whose key is in the default variable:
    the printed flags name both variables (--api-key-env alone would send $G to the judge's
    host too), and the run's generation options as --generator-option."""
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    manifest = json.loads((run / "run.json").read_text())
    manifest.update(generator="openai:image-model", judges=["openai:judge-model"], generator_options={"quality": "high"},
                    endpoints={"openai:image-model": {"base_urls": ["http://127.0.0.1:9/v1"], "api_key_env": "G_KEY"},
                               "openai:judge-model": {"base_urls": ["http://127.0.0.1:8/v1"],
                                                      "api_key_env": "OPENAI_API_KEY"}})
    (run / "run.json").write_text(json.dumps(manifest))
    line = _refused_diagnosis(run, tmp_path / "diag")
    assert line.endswith("e.g. --generator openai:image-model@http://127.0.0.1:9/v1 --generator-option quality=high "
                         "--judge openai:judge-model@http://127.0.0.1:8/v1 --api-key-env G_KEY "
                         "--judge-api-key-env OPENAI_API_KEY"), line
    assert "only what you trust" in line


def test_a_models_file_table_named_like_the_oracle_is_not_taken_from_a_run(world, tmp_path):
    """The record says oracle; the user's models file maps a table of that name to a served
    model: what the record names is then not offline, and the command asks for the judge."""
    models = tmp_path / "models.toml"
    models.write_text('[models.oracle]\nspec = "openai:paid-model"\nbase_url = "http://127.0.0.1:9/v1"\n')
    result = run_trace("diagnose", str(world["run"]), "--cases", "all", "--models", str(models),
                       "--out", str(tmp_path / "diag"))
    _no_traceback(result, 2)
    assert "names the judge oracle" in result.stderr and not (tmp_path / "diag").exists()


def test_the_zoo_and_the_oracle_are_the_only_specs_taken_from_a_run(world, tmp_path):
    """A run of the zoo and the oracle (nothing of anyone's runs, no host is called) is
    diagnosed without flags; a run of the zoo *behind a server* is not (its URL is a host)."""
    result = run_trace("diagnose", str(world["run"]), "--cases", "all", "--out", str(tmp_path / "diag"))
    _no_traceback(result, 0)
    served = tmp_path / "served"
    shutil.copytree(world["run"], served)
    manifest = json.loads((served / "run.json").read_text())
    manifest.update(generator="openai:synthetic/global-interference", judges=["oracle@http://127.0.0.1:9/v1"])
    (served / "run.json").write_text(json.dumps(manifest))
    line = _refused_diagnosis(served, tmp_path / "refused")
    assert "--generator openai:synthetic/global-interference" in line and "--judge oracle@http://127.0.0.1:9/v1" in line


def test_a_recorded_spec_is_shown_as_one_quoted_word_without_control_characters(world, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    manifest = json.loads((run / "run.json").read_text())
    manifest["generator"] = "command:x'; rm -rf ~ #\x1b]0;owned\x07" + "y" * 1000
    (run / "run.json").write_text(json.dumps(manifest))
    line = _refused_diagnosis(run, tmp_path / "diag")
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line
    assert "'\"'\"'; rm -rf" in line  # the quote closed and reopened: one shell word
    assert "y" * 250 not in line and "y…'" in line  # cut, and marked so


def test_every_reader_of_a_run_folder_runs_and_calls_nothing_it_names(world, tmp_path, canaries):
    run = _crafted(world, tmp_path, canaries)
    for args, codes in [
        (("score", str(run)), (0,)),
        (("score", str(run), "--json"), (0,)),
        (("report", str(run), "--out", str(tmp_path / "report.html")), (0,)),
        (("leaderboard", str(run), "--out", str(tmp_path / "board.csv")), (0,)),
        (("compare", str(run), str(world["run"])), (0,)),
        (("merge", "--out", str(tmp_path / "merged"), str(run)), (0, 2)),
        (("agree", "--judge", str(run), "--truth", str(world["run"]), "--out", str(tmp_path / "agree")), (0, 2)),
    ]:
        _no_traceback(run_trace(*args), *codes)


def test_a_run_travels_through_export_import_and_rejudge_as_data(world, tmp_path, canaries):
    pytest.importorskip("datasets")
    run = _crafted(world, tmp_path, canaries)
    _no_traceback(run_trace("export", str(run), "--out", str(tmp_path / "dataset")), 0)
    _no_traceback(run_trace("import", str(tmp_path / "dataset"), "--cases", str(world["bench"]),
                            "--out", str(tmp_path / "imported")), 0)
    line = _refused_diagnosis(tmp_path / "imported", tmp_path / "diag")
    assert f"--judge python:{canaries['module']}" in line  # the record travelled, as data
    # a rejudge keeps the generator's name (its images are the run's) and runs none of it
    _no_traceback(run_trace("rejudge", str(tmp_path / "imported"), "--judge", "oracle",
                            "--out", str(tmp_path / "rejudged")), 0)
    assert "--generator 'command:touch" in _refused_diagnosis(tmp_path / "rejudged", tmp_path / "diag2")


def test_a_resumed_folder_linking_out_gets_no_write(world, tmp_path):
    """A run or a diagnosis folder resumed may be anyone's: an images, cache or rounds folder that
    is a link out of it is refused (one line, exit 2), and nothing is written where it points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.txt").write_text("precious")
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    for name in ("images", "cache"):
        if (run / name).exists():
            shutil.rmtree(run / name)
    (run / "images").symlink_to(elsewhere, target_is_directory=True)
    again = run_trace("run", str(world["bench"]), "--generator", test_records.GENERATOR, "--judge", "oracle",
                      "--out", str(run), "--retry-abstained")
    _no_traceback(again, 2)
    assert "a link that leaves the output folder" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    diag = tmp_path / "diag"
    shutil.copytree(world["diag"], diag)
    shutil.rmtree(diag / "rounds")
    (diag / "rounds").symlink_to(elsewhere, target_is_directory=True)
    resumed = run_trace("diagnose", str(world["run"]), "--cases", "all", "--out", str(diag))
    _no_traceback(resumed, 2)
    assert "a link that leaves the output folder" in resumed.stderr
    assert [p.name for p in elsewhere.iterdir()] == ["mine.txt"]


def test_crafted_manifest_fields_are_one_line_each(world, tmp_path):
    """A benchmark whose manifest names a library that is no path, a run whose shard is no
    shard, an oracle spec of 100,000 characters: one line each (it was a traceback, or a 200 KB
    line)."""
    bench = tmp_path / "bench"
    shutil.copytree(world["bench"], bench)
    manifest = json.loads((bench / "manifest.json").read_text())
    manifest["arguments"]["library"] = 5
    (bench / "manifest.json").write_text(json.dumps(manifest, indent=2))
    result = run_trace("run", str(bench), "--generator", test_records.GENERATOR, "--judge", "oracle",
                       "--out", str(tmp_path / "r"))
    _no_traceback(result, 2)
    assert "manifest.json" in result.stderr and "arguments.library" in result.stderr
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    manifest = json.loads((run / "run.json").read_text())
    for field, value, fragment in (("shard", "1/0", "shard"), ("judges", ["oracle:" + "x" * 100_000], "oracle:xxx")):
        (run / "run.json").write_text(json.dumps({**manifest, field: value}))
        for args in (("score", str(run)), ("diagnose", str(run), "--cases", "all", "--out", str(tmp_path / "d"))):
            result = run_trace(*args)
            if args[0] == "score" and field == "judges":  # a judge's name is a label to score
                _no_traceback(result, 0)
                continue
            _no_traceback(result, 2)
            (line,) = result.stderr.strip().splitlines()
            assert fragment in line and len(line) < 1000, line[:300]


def test_a_record_file_or_line_past_its_bound_is_one_line_before_it_is_held(world, tmp_path, monkeypatch):
    """run.json and each line of verdicts.jsonl are read up to a bound (64 MiB, 16 MiB; made
    small here), never whole: a crafted gigabyte is one line, exit 2."""
    import tracebench.jsonfiles as jsonfiles

    monkeypatch.setattr(jsonfiles, "MAX_FILE_BYTES", 50_000)
    monkeypatch.setattr(jsonfiles, "MAX_LINE_BYTES", 20_000)
    run = tmp_path / "run"
    shutil.copytree(world["run"], run)
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "tool": "x" * 60_000}))
    result = run_trace("score", str(run))
    _no_traceback(result, 2)
    assert result.stderr.strip() == f"trace score: {run / 'run.json'}: more than 50,000 bytes, more than any record " \
                                    "tracebench writes"
    (run / "run.json").write_text(json.dumps(manifest))
    lines = (run / "verdicts.jsonl").read_text().splitlines(keepends=True)
    (run / "verdicts.jsonl").write_text(lines[0] + json.dumps({"case_id": "x" * 30_000}) + "\n" + "".join(lines[1:]))
    result = run_trace("score", str(run))
    _no_traceback(result, 2)
    assert "verdicts.jsonl:2: a line of more than 20,000 bytes" in result.stderr
