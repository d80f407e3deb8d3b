"""Test configuration: Hypothesis profiles chosen by an environment variable, and the
benchmarks and runs several tests share.

TRACEBENCH_HYPOTHESIS=quick (the default under CI=true), dev (the default elsewhere) or
thorough (on demand: ``TRACEBENCH_HYPOTHESIS=thorough pytest``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, settings

from tracebench.providers import ModelSettings

sys.path.insert(0, str(Path(__file__).parent))  # tests/strategies.py and helpers

settings.register_profile("quick", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
_default = "quick" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("TRACEBENCH_HYPOTHESIS", _default))


# ------------------------------------------------------------------------------ shared benchmarks and runs
# Sampling a benchmark and running the zoo on it are the slow parts of many tests; the benchmarks
# and runs below are made once per session, on first request, and shared. Tests only read them:
# a test that writes into a benchmark or run folder (resuming, merging, corrupting) makes its own.
# Under pytest-xdist (the default: pyproject's addopts) the workers share them too: the first
# worker to ask makes the folder under a lock in the session's common temporary folder, the
# others wait for it and read it.

SHARED_SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


def _session_root(tmp_path_factory) -> Path:
    """A folder every worker of this test session sees (the workers' temporary folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    return root


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name`` of the session's shared folder, made by ``make(folder)`` by whichever
    worker asks first (a ``name.done`` marker beside it says it is complete)."""
    from filelock import FileLock

    root = _session_root(tmp_path_factory)
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if out.exists():
                shutil.rmtree(out)  # a worker that failed half-way
            make(out)
            done.touch()
    return out


def _benchmark(tmp_path_factory, per_slot: int, seed: int, applications: bool) -> Path:
    """A benchmark of slot levels 1-8, sampled into a shared folder."""
    from tracebench.sample import sample_benchmark

    def make(out: Path) -> None:
        sample_benchmark(out, slots=tuple(range(1, 9)), per_slot=per_slot, seed=seed, applications=applications)

    return made_once(tmp_path_factory, f"bench-{per_slot}-{seed}-{int(applications)}", make)


@pytest.fixture(scope="session")
def diagnosis_bench(tmp_path_factory) -> Path:
    """6 cases a slot level, with application cases (seed 5): trees of every depth."""
    return _benchmark(tmp_path_factory, per_slot=6, seed=5, applications=True)


@pytest.fixture(scope="session")
def localization_bench(tmp_path_factory) -> Path:
    """110 cases a slot level, with application cases (seed 11): enough failures of every
    injected cause to measure localization accuracy."""
    return _benchmark(tmp_path_factory, per_slot=110, seed=11, applications=True)


class SharedRuns:
    """``shared_runs(bench, generator, shard=None)``: the run folder of the zoo's ``generator``
    judged by the oracle on ``bench``, made on first request. Read it; never write into it."""

    def __init__(self, tmp_path_factory) -> None:
        self.factory = tmp_path_factory

    def __call__(self, bench: Path, generator: str, *, shard: tuple[int, int] | None = None) -> Path:
        import hashlib

        from tracebench.run import run_benchmark

        key = hashlib.sha256(repr((str(Path(bench).resolve()), generator, shard)).encode()).hexdigest()[:16]

        def make(out: Path) -> None:
            run_benchmark(bench, out, generator=generator, judges=["oracle"], settings=SHARED_SETTINGS, shard=shard)

        return made_once(self.factory, f"run-{key}", make)


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> SharedRuns:
    return SharedRuns(tmp_path_factory)


@pytest.fixture(scope="session")
def default_world(tmp_path_factory) -> dict:
    """The benchmark the report and agreement tests share: slot levels 1-8, 4 cases each, no
    application cases (seed 2), the first case's prompt carrying markup (text from a prompt must
    show as text); its run by ``synthetic:global-interference,composition-interference:2`` and
    by ``synthetic:perfect``, both judged by the oracle, and the first run's full diagnosis."""
    import json

    from tracebench.diagnose import diagnose_run
    from tracebench.run import run_benchmark

    injected = '<script>alert("injected")</script><img src=x onerror=alert(1)>'

    def make(root: Path) -> None:
        from tracebench.sample import sample_benchmark

        bench = root / "bench"
        sample_benchmark(bench, slots=tuple(range(1, 9)), per_slot=4, seed=2, applications=False)
        lines = (bench / "cases.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        first["prompt"] = first["prompt"] + "\n" + injected
        lines[0] = json.dumps(first, ensure_ascii=False)
        (bench / "cases.jsonl").write_text("\n".join(lines) + "\n")
        run_benchmark(bench, root / "run", generator="synthetic:global-interference,composition-interference:2",
                      judges=["oracle"], settings=SHARED_SETTINGS)
        run_benchmark(bench, root / "perfect", generator="synthetic:perfect", judges=["oracle"],
                      settings=SHARED_SETTINGS)
        diagnose_run(root / "run", root / "diag", strategy="full", settings=SHARED_SETTINGS)

    root = made_once(tmp_path_factory, "default-world", make)
    first = json.loads((root / "bench" / "cases.jsonl").read_text().splitlines()[0])
    return {"root": root, "bench": root / "bench", "run": root / "run", "perfect": root / "perfect",
            "diag": root / "diag", "first": first["id"], "injected": injected}
