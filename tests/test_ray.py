"""``trace run --executor ray`` and ``trace diagnose --executor ray``: a real Ray cluster on
loopback (``ray start --head``), the zoo rendered by a python: generator in Ray workers
(examples/plugins/slow_zoo.py). The verdicts equal the in-process run's; a worker killed mid-run
is replaced and nothing is lost; a driver killed with SIGKILL resumes to the same verdicts; a
diagnosis's rounds and repeats share one set of workers and give the in-process trees."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray  # noqa: F401 - the ray extra (README: the tests install it); never skipped

from test_cli import _trace_executable, run_trace
from tracebench.errors import TraceError
from tracebench.records import read_cases
from tracebench.run import RunOptions, run_benchmark, shard_of


ROOT = Path(__file__).resolve().parent.parent
PLUGIN = f"python:{ROOT / 'examples' / 'plugins' / 'slow_zoo.py'}"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node on loopback whose workers hold 0.4 s a case and note their process ids.

    The head runs as ``ray start --head --block`` in a process of the test's own, with a temporary
    folder of its own; stopping it (SIGTERM) stops the processes it started and nothing else:
    ``ray stop`` would stop every Ray cluster of the machine, a user's included."""
    folder = tmp_path_factory.mktemp("ray")
    ray_cli = Path(sys.executable).parent / "ray"
    # a cluster on loopback for this test alone: no token to hand around, no usage report sent anywhere
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {name: os.environ.get(name) for name in quiet}
    os.environ.update(quiet)  # the drivers the tests start inherit them
    env = {**os.environ, "SLOW_ZOO_SECONDS": "0.4", "SLOW_ZOO_PIDS": str(folder / "pids")}
    port = _free_port()
    # short: Ray's socket paths inside it must stay under the system's 107 characters
    temp = Path(tempfile.mkdtemp(prefix="tb-ray-", dir="/tmp"))
    log = folder / "head.log"
    head = None
    try:
        with open(log, "wb") as out:
            head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                                     "--port", str(port), "--temp-dir", str(temp), "--num-cpus", "4",
                                     "--include-dashboard", "false", "--disable-usage-stats"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
        # ``ray start`` writes the cluster's address into its folder once the head is up, then blocks
        _wait(lambda: (temp / "ray_current_cluster").exists() or head.poll() is not None)
        assert head.poll() is None, log.read_text(errors="replace")
        yield {"address": f"127.0.0.1:{port}", "pids": folder / "pids"}
    finally:
        if head is not None:
            head.terminate()
            try:
                head.wait(timeout=120)
            except subprocess.TimeoutExpired:
                head.kill()
                head.wait()
        shutil.rmtree(temp, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def bench(small_bench):
    """16 cases of slot levels 1-4 (conftest's small_bench)."""
    return small_bench


@pytest.fixture(scope="module")
def local(bench, shared_folder):
    """The same generator in process: the verdicts a Ray run must equal."""
    return shared_folder("slow-zoo-local", lambda out: run_benchmark(bench, out, RunOptions(generator=PLUGIN, judges=["oracle"],
                                                                     progress=False)))


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.is_file() else 0


def _wait(condition, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def _ray_run(bench: Path, out: Path, address: str, workers: int = 2) -> list[str]:
    return [*_trace_executable(), "run", str(bench), "--generator", PLUGIN, "--judge", "oracle", "--executor", "ray",
            "--ray-address", address, "--workers", str(workers), "--concurrency", "2", "--out", str(out)]


def test_a_worker_killed_mid_run_is_replaced_and_nothing_is_lost(bench, local, cluster, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_ray_run(bench, out, cluster["address"]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait(lambda: _lines(cluster["pids"]) >= 2 and _lines(out / "verdicts.jsonl") > 0 or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()[1]
    victim = int(cluster["pids"].read_text().split()[-1])
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert (out / "verdicts.jsonl").read_bytes() == (local / "verdicts.jsonl").read_bytes()
    assert _lines(cluster["pids"]) >= 3  # a worker was set up again


def test_a_driver_killed_resumes_to_the_same_verdicts(bench, local, cluster, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_ray_run(bench, out, cluster["address"], workers=1), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _wait(lambda: _lines(out / "verdicts.jsonl") >= 20 or proc.poll() is not None)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert 0 < _lines(out / "verdicts.jsonl") < _lines(local / "verdicts.jsonl")
    again = subprocess.run(_ray_run(bench, out, cluster["address"], workers=1), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr
    assert (out / "verdicts.jsonl").read_bytes() == (local / "verdicts.jsonl").read_bytes()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_diagnosis_through_ray_workers_gives_the_in_process_trees(bench, local, cluster, tmp_path):
    """Every round and every repeat made by one set of two workers (two set-ups in all), each
    repeat with its own seed: the trees, the summary and every node image as in process."""
    from tracebench.diagnose import DiagnoseOptions, diagnose_run

    slots = {c.id: c.slot for c in read_cases(bench)}
    failing = {json.loads(line)["case_id"] for line in (local / "verdicts.jsonl").read_text().splitlines()
               if json.loads(line)["verdict"] == "fail"}
    chosen = ",".join(sorted(failing, key=lambda c: (slots[c], c))[:2])  # the two smallest trees: a quick test
    diagnose_run(local, tmp_path / "here", DiagnoseOptions(cases=chosen, generator=PLUGIN, repeats=2, progress=False))
    set_up = _lines(cluster["pids"])
    there = tmp_path / "ray"
    done = subprocess.run([*_trace_executable(), "diagnose", str(local), "--cases", chosen, "--repeats", "2",
                           "--generator", PLUGIN,
                           "--executor", "ray", "--ray-address", cluster["address"], "--workers", "2",
                           "--concurrency", "2", "--out", str(there)], check=False, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert _lines(cluster["pids"]) - set_up == 2  # one set of workers for all the rounds, set up once each
    for name in ("trees.jsonl", "summary.json"):
        assert (there / name).read_bytes() == (tmp_path / "here" / name).read_bytes()
    images = {name: data for name, data in _files(tmp_path / "here" / "rounds").items() if "/images/" in name}
    assert images and {name: data for name, data in _files(there / "rounds").items() if "/images/" in name} == images
    # the repeats are other generations: a node's second image is not its first
    later = {name.replace("/run-2/", "/run/"): data for name, data in images.items() if "/run-2/" in name}
    assert any(images.get(name) not in (None, data) for name, data in later.items())


def test_samples_made_by_ray_workers_are_the_in_process_samples(bench, cluster, tmp_path):
    """--samples through the workers: each call carries its generation, the workers make all of
    them with one set-up each, and the run equals the sampled run made in process."""
    few = {c.id for c in list(read_cases(bench))[:3]}
    shard = next(n for n in range(2, 9) if 0 < sum(shard_of(c, n) == 1 for c in few) and
                 sum(shard_of(c.id, n) == 1 for c in read_cases(bench)) <= 4)
    run_benchmark(bench, tmp_path / "here", RunOptions(generator=PLUGIN, judges=["oracle"], samples=2, shard=(1, shard),
                  progress=False))
    set_up = _lines(cluster["pids"])
    done = subprocess.run([*_ray_run(bench, tmp_path / "ray", cluster["address"])[:-2], "--samples", "2",
                           "--shard", f"1/{shard}", "--out", str(tmp_path / "ray")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert _lines(cluster["pids"]) - set_up == 2
    assert (tmp_path / "ray" / "verdicts.jsonl").read_bytes() == (tmp_path / "here" / "verdicts.jsonl").read_bytes()
    assert _files(tmp_path / "ray" / "images") == _files(tmp_path / "here" / "images")
    assert any(name.endswith("~1.png") for name in _files(tmp_path / "ray" / "images"))


def test_ray_options_are_checked_before_anything_runs(bench, local, tmp_path, monkeypatch):
    bad = run_trace("run", str(bench), "--generator", PLUGIN, "--judge", "oracle", "--executor", "ray",
                    "--workers", "0", "--out", str(tmp_path / "a"))
    assert bad.returncode == 2 and "--workers" in bad.stderr and not (tmp_path / "a").exists()
    bad = run_trace("diagnose", str(local), "--generator", PLUGIN, "--executor", "ray", "--workers", "0",
                    "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "--workers" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
    monkeypatch.setitem(sys.modules, "ray", None)  # an install without the extra
    with pytest.raises(TraceError, match=r"pip install 'tracebench\[ray\]'"):
        run_benchmark(bench, tmp_path / "b", RunOptions(generator=PLUGIN, judges=["oracle"], executor="ray"))
    from tracebench.diagnose import DiagnoseOptions, diagnose_run

    with pytest.raises(TraceError, match=r"^--executor ray needs Ray: pip install 'tracebench\[ray\]'"):
        diagnose_run(local, tmp_path / "e", DiagnoseOptions(generator=PLUGIN, executor="ray"))
    assert not (tmp_path / "e").exists()
