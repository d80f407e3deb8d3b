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
