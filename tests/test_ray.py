"""``trace run --executor ray``: a real Ray cluster on loopback (``ray start --head``), the zoo
rendered by a python: generator in Ray workers (examples/plugins/slow_zoo.py). The verdicts
equal the in-process run's; a worker killed mid-run is replaced and nothing is lost; a driver
killed with SIGKILL resumes to the same verdicts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray  # noqa: F401 - the ray extra (README: the tests install it); never skipped

from test_cli import _trace_executable, run_trace
from tracebench.errors import TraceError
from tracebench.run import run_benchmark


ROOT = Path(__file__).resolve().parent.parent
PLUGIN = f"python:{ROOT / 'examples' / 'plugins' / 'slow_zoo.py'}"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node on loopback whose workers hold 0.4 s a case and note their process ids."""
    folder = tmp_path_factory.mktemp("ray")
    ray_cli = Path(sys.executable).parent / "ray"
    # a cluster on loopback for this test alone: no token to hand around, no usage report sent anywhere
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {name: os.environ.get(name) for name in quiet}
    os.environ.update(quiet)  # the drivers the tests start inherit them
    env = {**os.environ, "SLOW_ZOO_SECONDS": "0.4", "SLOW_ZOO_PIDS": str(folder / "pids")}
    port = _free_port()
    started = subprocess.run([str(ray_cli), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                              "--num-cpus", "4", "--include-dashboard", "false", "--disable-usage-stats"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    try:
        yield {"address": f"127.0.0.1:{port}", "pids": folder / "pids"}
    finally:
        subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, timeout=120)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def bench(shared_folder):
    """16 cases of slot levels 1-4 (the same as tests/test_at_scale.py's)."""
    from tracebench.sample import sample_benchmark

    return shared_folder("small-1-4-4", lambda out: sample_benchmark(out, slots=(1, 2, 3, 4), per_slot=4, seed=2,
                                                                      applications=False))


@pytest.fixture(scope="module")
def local(bench, shared_folder):
    """The same generator in process: the verdicts a Ray run must equal."""
    return shared_folder("slow-zoo-local", lambda out: run_benchmark(bench, out, generator=PLUGIN, judges=["oracle"],
                                                                     progress=False))


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


def test_ray_options_are_checked_before_anything_runs(bench, tmp_path, monkeypatch):
    bad = run_trace("run", str(bench), "--generator", PLUGIN, "--judge", "oracle", "--executor", "ray",
                    "--workers", "0", "--out", str(tmp_path / "a"))
    assert bad.returncode == 2 and "--workers" in bad.stderr and not (tmp_path / "a").exists()
    monkeypatch.setitem(sys.modules, "ray", None)  # an install without the extra
    with pytest.raises(TraceError, match=r"pip install 'tracebench\[ray\]'"):
        run_benchmark(bench, tmp_path / "b", generator=PLUGIN, judges=["oracle"], executor="ray")
