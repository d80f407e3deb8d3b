"""Test configuration: Hypothesis profiles chosen by an environment variable, the session's
own cache folder, the order of the tests, and the benchmarks and runs several tests share.

TRACEBENCH_HYPOTHESIS=quick (the default under CI=true), dev (the default elsewhere) or
thorough (on demand: ``TRACEBENCH_HYPOTHESIS=thorough pytest``).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
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


# ------------------------------------------------------------------------------ the session's cache folder
# tracebench keeps derived data (Lark's tables, the classified template space, the remembered
# library check) and the default synthetic library in $TRACEBENCH_CACHE. The session never
# touches the user's cache: the main process makes a private folder before the xdist workers
# start, so the workers and every `trace` subprocess inherit it and share one cache; it is
# removed when the session ends. (tests/test_derived.py checks cold and warm behaviour in
# folders of its own.)

def pytest_configure(config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the main process set the variable
        return
    folder = tempfile.mkdtemp(prefix="tracebench-test-cache-")  # 0700, as tracebench wants it
    config.stash[_CACHE] = (os.environ.get("TRACEBENCH_CACHE"), folder)
    os.environ["TRACEBENCH_CACHE"] = folder


def pytest_unconfigure(config) -> None:
    if _CACHE not in config.stash:
        return
    before, folder = config.stash[_CACHE]
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("TRACEBENCH_CACHE", None)
    else:
        os.environ["TRACEBENCH_CACHE"] = before


_CACHE = pytest.StashKey[tuple]()


# ------------------------------------------------------------------------------ the order of the tests
# The tests marked slow run first: under xdist a 70 s test started last would keep one worker
# busy while the other has nothing left to do.

def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order otherwise


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


def _default_library(tmp_path_factory) -> tuple[Path, Path]:
    from tracebench.library import synth

    def make(out: Path) -> None:
        out.mkdir()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TRACEBENCH_CACHE", str(out))
            synth.default_library()

    cache = made_once(tmp_path_factory, "default-library", make)
    (library,) = cache.iterdir()
    return cache, library


@pytest.fixture(scope="session")
def default_library_cache(tmp_path_factory) -> tuple[Path, Path]:
    """(cache folder, library): the default synthetic library as ``default_library()`` builds it
    into an empty cache folder (nothing else is ever written there)."""
    return _default_library(tmp_path_factory)


@pytest.fixture(scope="session", autouse=True)
def _warm_cache(tmp_path_factory) -> None:
    """The session cache made warm before the first test: the default library (linked in from
    ``default_library_cache``'s folder), the grammar's tables, the classified template space and
    the default library's check, each made once for all workers, the library and the template
    space side by side. In one process (``-n 0``) nothing is made ahead: what a test needs is
    made when first asked for, once, as it would be for a user."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2:
        return
    from tracebench.formula import parse
    from tracebench.sample import SampleOptions, draw_templates, sample_benchmark

    cache = Path(os.environ["TRACEBENCH_CACHE"])

    def space(out: Path) -> None:
        parse("C(f1, f2) ⊕ g_style")
        for slot in range(1, 9):
            draw_templates(slot, 1, random.Random(0))
        out.mkdir()

    def library() -> None:
        _, built = _default_library(tmp_path_factory)

        def link(out: Path) -> None:
            shutil.copytree(built, cache / built.name, copy_function=os.link)
            out.mkdir()

        made_once(tmp_path_factory, "warm-library", link)

    def sample(out: Path) -> None:
        sample_benchmark(out, SampleOptions(slots=tuple(range(1, 9)), per_slot=1, seed=0, applications=True))

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if int(worker.removeprefix("gw") or 0) % 2:
        made_once(tmp_path_factory, "warm-space", space)
        library()
    else:
        library()
        made_once(tmp_path_factory, "warm-space", space)
    made_once(tmp_path_factory, "warm-sample", sample)


@pytest.fixture(scope="session")
def shared_folder(tmp_path_factory) -> Callable[[str, Callable[[Path], None]], Path]:
    """``shared_folder(name, make)``: a test module's read-only folder, made once for all
    workers (:func:`made_once`; ``name`` is unique across the suite)."""
    return lambda name, make: made_once(tmp_path_factory, name, make)


# application cases of the tests' benchmarks: the default's 20 each, the count the tests were written
# against before it scaled with per_slot (their small benchmarks would otherwise hold one each)
APPLICATIONS = 20


def _benchmark(tmp_path_factory, per_slot: int, seed: int, applications: bool) -> Path:
    """A benchmark of slot levels 1-8, sampled into a shared folder."""
    from tracebench.sample import SampleOptions, sample_benchmark

    def make(out: Path) -> None:
        sample_benchmark(out, SampleOptions(slots=tuple(range(1, 9)), per_slot=per_slot, seed=seed,
                                            applications=APPLICATIONS if applications else False))

    return made_once(tmp_path_factory, f"bench-{per_slot}-{seed}-{int(applications)}", make)


@pytest.fixture(scope="session")
def small_bench(tmp_path_factory) -> Path:
    """16 cases of slot levels 1-4 (seed 2), no applications: budgets, resumes, shards, samples and
    Ray runs, quick to draw."""
    from tracebench.sample import SampleOptions, sample_benchmark

    return made_once(tmp_path_factory, "small-1-4-4", lambda out: sample_benchmark(
        out, SampleOptions(slots=(1, 2, 3, 4), per_slot=4, seed=2, applications=False)))


@pytest.fixture(scope="session")
def diagnosis_bench(tmp_path_factory) -> Path:
    """6 cases a slot level, with application cases (seed 5): trees of every depth."""
    return _benchmark(tmp_path_factory, per_slot=6, seed=5, applications=True)


@pytest.fixture(scope="session")
def localization_bench(tmp_path_factory) -> Path:
    """110 cases a slot level, with application cases (seed 11): enough failures of every
    injected cause to measure localization accuracy."""
    return _benchmark(tmp_path_factory, per_slot=110, seed=11, applications=True)


@pytest.fixture(scope="session")
def run_bench(tmp_path_factory) -> Path:
    """5 cases a slot level, with application cases (seed 1): the benchmark the run, score and
    cache-key tests share (read only; its runs through ``shared_runs``)."""
    return _benchmark(tmp_path_factory, per_slot=5, seed=1, applications=True)


class SharedRuns:
    """``shared_runs(bench, generator, shard=None)``: the run folder of the zoo's ``generator``
    judged by the oracle on ``bench``, made on first request. Read it; never write into it."""

    def __init__(self, tmp_path_factory) -> None:
        self.factory = tmp_path_factory

    def __call__(self, bench: Path, generator: str, *, shard: tuple[int, int] | None = None) -> Path:
        import hashlib

        from tracebench.run import RunOptions, run_benchmark

        key = hashlib.sha256(repr((str(Path(bench).resolve()), generator, shard)).encode()).hexdigest()[:16]

        def make(out: Path) -> None:
            run_benchmark(bench, out, RunOptions(generator=generator, judges=["oracle"], settings=SHARED_SETTINGS, shard=shard))

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

    from tracebench.diagnose import DiagnoseOptions, diagnose_run
    from tracebench.run import RunOptions, run_benchmark

    injected = '<script>alert("injected")</script><img src=x onerror=alert(1)>'

    def make(root: Path) -> None:
        from tracebench.sample import SampleOptions, sample_benchmark

        bench = root / "bench"
        sample_benchmark(bench, SampleOptions(slots=tuple(range(1, 9)), per_slot=4, seed=2, applications=False))
        lines = (bench / "cases.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        first["prompt"] = first["prompt"] + "\n" + injected
        lines[0] = json.dumps(first, ensure_ascii=False)
        (bench / "cases.jsonl").write_text("\n".join(lines) + "\n")
        run_benchmark(bench, root / "run", RunOptions(generator="synthetic:global-interference,composition-interference:2",
                      judges=["oracle"], settings=SHARED_SETTINGS))
        run_benchmark(bench, root / "perfect", RunOptions(generator="synthetic:perfect", judges=["oracle"],
                      settings=SHARED_SETTINGS))
        diagnose_run(root / "run", root / "diag", DiagnoseOptions(strategy="full", settings=SHARED_SETTINGS))

    root = made_once(tmp_path_factory, "default-world", make)
    first = json.loads((root / "bench" / "cases.jsonl").read_text().splitlines()[0])
    return {"root": root, "bench": root / "bench", "run": root / "run", "perfect": root / "perfect",
            "diag": root / "diag", "first": first["id"], "injected": injected}
