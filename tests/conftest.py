"""Test configuration: Hypothesis profiles chosen by an environment variable, and the
benchmarks and runs several tests share.

TRACEBENCH_HYPOTHESIS=quick (the default under CI=true), dev (the default elsewhere) or
thorough (on demand: ``TRACEBENCH_HYPOTHESIS=thorough pytest``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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

SHARED_SETTINGS = ModelSettings(max_retries=0, timeout=30.0)


def _benchmark(tmp_path_factory, per_slot: int, seed: int, applications: bool) -> Path:
    """A benchmark of slot levels 1-8, sampled into a fresh folder."""
    from tracebench.sample import sample_benchmark

    out = tmp_path_factory.mktemp("bench") / "bench"
    sample_benchmark(out, slots=tuple(range(1, 9)), per_slot=per_slot, seed=seed, applications=applications)
    return out


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

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple, Path] = {}

    def __call__(self, bench: Path, generator: str, *, shard: tuple[int, int] | None = None) -> Path:
        from tracebench.run import run_benchmark

        key = (Path(bench).resolve(), generator, shard)
        if key not in self.made:
            out = self.root / f"run{len(self.made)}"
            run_benchmark(bench, out, generator=generator, judges=["oracle"], settings=SHARED_SETTINGS, shard=shard)
            self.made[key] = out
        return self.made[key]


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory) -> SharedRuns:
    return SharedRuns(tmp_path_factory.mktemp("shared-runs"))


@pytest.fixture(scope="session")
def default_world(tmp_path_factory) -> dict:
    """The benchmark the report and agreement tests share: slot levels 1-8, 4 cases each, no
    application cases (seed 2), the first case's prompt carrying markup (text from a prompt must
    show as text); its run by ``synthetic:global-interference,composition-interference:2`` and
    by ``synthetic:perfect``, both judged by the oracle, and the first run's full diagnosis."""
    import json

    from tracebench.diagnose import diagnose_run
    from tracebench.run import run_benchmark

    root = tmp_path_factory.mktemp("default-world")
    bench = _benchmark(tmp_path_factory, per_slot=4, seed=2, applications=False)
    injected = '<script>alert("injected")</script><img src=x onerror=alert(1)>'
    lines = (bench / "cases.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["prompt"] = first["prompt"] + "\n" + injected
    lines[0] = json.dumps(first, ensure_ascii=False)
    (bench / "cases.jsonl").write_text("\n".join(lines) + "\n")
    run_benchmark(bench, root / "run", generator="synthetic:global-interference,composition-interference:2",
                  judges=["oracle"], settings=SHARED_SETTINGS)
    run_benchmark(bench, root / "perfect", generator="synthetic:perfect", judges=["oracle"], settings=SHARED_SETTINGS)
    diagnose_run(root / "run", root / "diag", strategy="full", settings=SHARED_SETTINGS)
    return {"root": root, "bench": bench, "run": root / "run", "perfect": root / "perfect", "diag": root / "diag",
            "first": first["id"], "injected": injected}
