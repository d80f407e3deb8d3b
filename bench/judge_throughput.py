"""Judge throughput of `trace run` against `trace serve` with latency, next to a bare client and the bound.

Three numbers, measured in one run against the same server:

- ``tracebench``: ``run_benchmark(bench, out, RunOptions(generator="folder:<images>", judges=["openai:oracle"],
  concurrency=C))`` with a fresh cache folder each round, so every judge call goes to the
  server; calls/s = ``RunManifest.calls["openai:oracle"]`` / wall time of ``run_benchmark``
  (everything a user's ``trace run`` does: reading cases and images, building the requests,
  the cache, parsing the replies, writing images and verdicts);
- ``bare``: a plain ``openai.AsyncOpenAI`` loop (``max_retries=0``) under an
  ``asyncio.Semaphore(C)``, sending exactly the chat requests the tracebench judge sends
  (captured beforehand from ``OpenAIJudge.ask`` with a recording client, so they are built
  outside the timing): no cache, no parsing, no writing;
- ``bound``: C / latency calls per second (every call waiting exactly the latency, nothing else).

Capturing the requests: ``tracebench.providers.make_judge("openai:oracle", settings)`` builds
the judge ``run_benchmark`` builds (an ``OpenAIJudge``); the capture uses a subclass of it,
``_RecordingJudge(judge.model, judge.config)``, whose ``client()`` (the public hook every
``OpenAIJudge`` call gets its client from) returns a recorder standing in for
``AsyncOpenAI``. ``ask`` itself is not touched, so the recorded keyword arguments of
``chat.completions.create`` are byte for byte what the real judge sends; no private
attribute (``_clients``) is written. References go through ``ReferenceFiles`` as in the
harness (the same bytes either way).

``--concurrency`` takes several values (``--concurrency 32 128``): every round measures both
methods at each of them, against the same server, so the ratios are measured side by side.

Setup (not timed): a benchmark is sampled once (``trace sample --slots 1-8 --per-slot N
--no-applications``); its images are generated once (``trace run --generator synthetic:perfect
--judge oracle``), each in a child process, and reused by every measured run through
``folder:``, so no generation is measured and the measuring process holds no more than a
user's ``trace run`` does (in process, the setup left ~300,000 objects behind for every
garbage collection of the measured rounds to traverse). The server is ``trace serve BENCH
--latency L`` in its own process (so client and server each get a core), on 127.0.0.1 and a
free port; it is stopped at the end.

Each of ``--rounds`` rounds runs both methods at each concurrency, alternating which goes
first (and the order of the concurrencies); the report gives medians (and min-max) per
concurrency. CPU seconds per call of the client process and of the server process are
measured per round too (from getrusage and /proc/<pid>/stat), to show what limits
throughput. The garbage collector runs (outside the timing) before each round. The 1-minute
load average is printed before the run (other work on the machine) and at its highest
before a round (which counts this benchmark's own client and server, about 2).

Cached re-run: after the measured rounds, ``run_benchmark`` runs again into new out folders
sharing the cache folder of the last tracebench round at the first concurrency (no call is
made); wall time and verdicts, scaled to 1,000 verdicts (median of ``--cached-rounds``).

Run from the repository root, in the environment where tracebench is installed::

    python bench/judge_throughput.py [--per-slot 50] [--rounds 5] [--concurrency 32 [128 ...]] [--latency 0.2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from _machine import machine

NO_KEY_ENV = "TRACEBENCH_BENCH_NO_KEY"  # an unset variable: the loopback server needs no key


def machine_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("openai", "httpx2", "httpx"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    info = machine(**versions)
    virt = ", virtual machine" if info["virtualized"] else ""
    return (f"{info['cpu']}{virt}, {info['cores']} cores, {info['python']}, "
            + ", ".join(f"{name} {v}" for name, v in versions.items()))


# -- the server, in its own process --------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bench: Path | list[Path], latency: float, log: Path) -> tuple[subprocess.Popen, str]:
    """`trace serve` for one benchmark folder (or several) in its own process; waits until it answers."""
    port = free_port()
    folders = bench if isinstance(bench, list) else [bench]
    command = [sys.executable, "-m", "tracebench", "serve", *map(str, folders), "--host", "127.0.0.1",
               "--port", str(port), "--latency", str(latency)]
    with open(log, "wb") as errors:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"trace serve exited with status {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=2) as reply:
                if reply.status == 200:
                    return proc, base_url
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("trace serve did not answer GET /v1/models within 60 s")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- setup, in child processes -------------------------------------------------------------------


def prepare(bench: Path, prep: Path, per_slot: int) -> dict:
    """Sample the benchmark and generate its images with the CLI, each in a child process, so the
    measuring process holds what a user's `trace run` holds (not the library and the sampler's
    ~300,000 objects, which every garbage collection of the measured rounds would traverse).
    Returns the prep run's manifest."""
    trace = [sys.executable, "-m", "tracebench"]
    subprocess.run([*trace, "sample", "--slots", "1-8", "--per-slot", str(per_slot), "--seed", "0",
                    "--no-applications", "--out", str(bench)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*trace, "run", str(bench), "--out", str(prep), "--generator", "synthetic:perfect",
                    "--judge", "oracle", "--concurrency", "8"], check=True, stdout=subprocess.DEVNULL)
    return json.loads((prep / "run.json").read_text(encoding="utf-8"))


# -- the requests tracebench sends -----------------------------------------------------------------


class _Recorder:
    """Stands in for the openai client: records the keyword arguments of chat.completions.create."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, **kwargs):
        self.requests.append(kwargs)
        message = SimpleNamespace(content='{"answers": []}', refusal=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=None)


def captured_requests(bench: Path, images: Path, settings) -> list[dict]:
    """The chat.completions.create arguments OpenAIJudge.ask sends, one per case (--judge-batch case)."""
    from tracebench.providers import OpenAIJudge, ReferenceFiles, make_judge
    from tracebench.sample import read_cases

    judge = make_judge("openai:oracle", settings)
    if type(judge) is not OpenAIJudge:
        raise SystemExit(f"make_judge('openai:oracle') built a {type(judge).__name__}, not an OpenAIJudge")
    recorder = _Recorder()

    class _RecordingJudge(OpenAIJudge):
        def client(self):
            return recorder

    recording = _RecordingJudge(judge.model, judge.config)
    references = ReferenceFiles(bench)

    async def build() -> None:
        for case in read_cases(bench):
            refs = [references.get(ref.path) for ref in case.references]
            image = (images / f"{case.id}.png").read_bytes()
            await recording.ask(case, list(case.checklist), image, refs)

    asyncio.run(build())
    return recorder.requests


# -- the two measured methods ---------------------------------------------------------------------


def bare_round(requests: list[dict], base_url: str, concurrency: int) -> tuple[int, int, float]:
    """(calls answered, calls failed, wall seconds) of the bare AsyncOpenAI loop."""
    import openai

    async def main() -> tuple[int, int]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300.0)
        limit = asyncio.Semaphore(concurrency)
        failures = 0

        async def one(kwargs: dict) -> None:
            nonlocal failures
            async with limit:
                try:
                    await client.chat.completions.create(**kwargs)
                except openai.APIError:
                    failures += 1

        await asyncio.gather(*(one(kwargs) for kwargs in requests))
        await client.close()
        return len(requests) - failures, failures

    start = time.perf_counter()
    calls, failures = asyncio.run(main())
    return calls, failures, time.perf_counter() - start


def tracebench_round(bench: Path, images: Path, out: Path, cache: Path, settings,
                     concurrency: int) -> tuple[int, float, object]:
    """(judge calls, wall seconds, manifest) of one run_benchmark with an empty cache."""
    from tracebench.run import RunOptions, run_benchmark

    start = time.perf_counter()
    manifest = run_benchmark(bench, out, RunOptions(generator=f"folder:{images}", judges=["openai:oracle"], settings=settings,
                             concurrency=concurrency, cache_dir=cache, progress=False))
    wall = time.perf_counter() - start
    if manifest.abstentions:
        raise SystemExit(f"tracebench run: {manifest.abstentions} abstentions (server errors?) in {out}")
    return manifest.calls.get("openai:oracle", 0), wall, manifest


def measured(server_pid: int, fn, *args):
    """fn(*args)'s result plus (client CPU s, server CPU s) spent during it.

    The garbage of the previous round is collected first, outside any event loop and outside
    the timing."""
    gc.collect()
    cpu0, srv0 = own_cpu(), process_cpu(server_pid)
    result = fn(*args)
    return result, own_cpu() - cpu0, process_cpu(server_pid) - srv0


def summary(rates: list[float]) -> dict:
    return {"median": round(statistics.median(rates), 1), "min": round(min(rates), 1), "max": round(max(rates), 1),
            "rounds": [round(r, 1) for r in rates]}


TARGETS = {32: 0.95, 128: 0.85}  # tracebench / bare, from the issue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-slot", type=int, default=50, help="cases per slot level 1..8 (default 50: 400 cases)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cached-rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32],
                        help="one or more concurrencies, measured side by side in every round (default 32)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server waits per call")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.environ.get(NO_KEY_ENV):
        raise SystemExit(f"unset {NO_KEY_ENV}: the benchmark talks to a loopback server without a key")
    levels = list(dict.fromkeys(args.concurrency))

    import openai  # noqa: F401  imported once here, not inside the first timed run

    from tracebench.providers import ModelSettings
    from tracebench.run import RunOptions, run_benchmark

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="judge-throughput-") as tmp_name:
        tmp = Path(tmp_name)
        bench = tmp / "bench"
        prep = prepare(bench, tmp / "prep", args.per_slot)
        images = tmp / "prep" / "images"

        server, base_url = start_server(bench, args.latency, tmp / "serve.log")
        try:
            settings = ModelSettings(base_url=base_url, api_key_env=NO_KEY_ENV)
            requests = captured_requests(bench, images, settings)
            request_bytes = statistics.mean(len(json.dumps(r)) for r in requests)
            runs = {c: {"tb": [], "bare": [], "tb_cpu": [], "bare_cpu": [], "last_cache": None} for c in levels}
            load_rounds = []
            for r in range(args.rounds):
                load_rounds.append(os.getloadavg()[0])
                for k, c in enumerate(levels if r % 2 == 0 else reversed(levels)):
                    m = runs[c]
                    order = ("tracebench", "bare") if (r + k) % 2 == 0 else ("bare", "tracebench")
                    for method in order:
                        if method == "bare":
                            (calls, failures, wall), cpu, srv = measured(server.pid, bare_round, requests, base_url, c)
                            if failures:
                                raise SystemExit(f"bare loop: {failures} of {len(requests)} calls failed")
                            m["bare"].append(calls / wall)
                            m["bare_cpu"].append((cpu / calls, srv / calls))
                        else:
                            m["last_cache"] = tmp / f"cache-{c}-{r}"
                            (calls, wall, _), cpu, srv = measured(
                                server.pid, tracebench_round, bench, images, tmp / f"run-{c}-{r}", m["last_cache"],
                                settings, c)
                            m["tb"].append(calls / wall)
                            m["tb_cpu"].append((cpu / calls, srv / calls))

            cached = []
            for k in range(args.cached_rounds):
                gc.collect()
                start = time.perf_counter()
                manifest = run_benchmark(bench, tmp / f"rerun-{k}", RunOptions(generator=f"folder:{images}",
                                         judges=["openai:oracle"], settings=settings, concurrency=levels[0],
                                         cache_dir=runs[levels[0]]["last_cache"], progress=False))
                wall = time.perf_counter() - start
                if sum(manifest.calls.values()):
                    raise SystemExit(f"cached re-run made calls: {manifest.calls}")
                cached.append((wall, manifest.verdicts, manifest.cache_hits))
        finally:
            stop_server(server)

    load_after = os.getloadavg()[0]
    by_concurrency = {}
    for c, m in runs.items():
        bound = c / args.latency
        tb_s, bare_s = summary(m["tb"]), summary(m["bare"])
        by_concurrency[str(c)] = {
            "tracebench_calls_per_s": tb_s, "bare_calls_per_s": bare_s, "bound_calls_per_s": round(bound, 1),
            "tracebench_vs_bare": round(tb_s["median"] / bare_s["median"], 3),
            "target_vs_bare": TARGETS.get(c),
            "tracebench_vs_bound": round(tb_s["median"] / bound, 3),
            "bare_vs_bound": round(bare_s["median"] / bound, 3),
            "cpu_ms_per_call": {
                "tracebench_client": round(1000 * statistics.median(x[0] for x in m["tb_cpu"]), 2),
                "bare_client": round(1000 * statistics.median(x[0] for x in m["bare_cpu"]), 2),
                "server_during_tracebench": round(1000 * statistics.median(x[1] for x in m["tb_cpu"]), 2),
                "server_during_bare": round(1000 * statistics.median(x[1] for x in m["bare_cpu"]), 2),
            },
        }
    cached_wall = statistics.median(x[0] for x in cached)
    verdicts = cached[0][1]
    result = {
        "machine": machine_text(),
        # before: other work on the machine; during (highest before a round) and after: with this benchmark's 2 processes
        "load_average_1min": {"before": round(load_before, 2), "during_max": round(max(load_rounds), 2),
                              "after": round(load_after, 2)},
        "cases": prep["cases"], "verdicts": prep["verdicts"], "calls_per_round": len(requests),
        "mean_request_kib": round(request_bytes / 1024, 1),
        "server": "trace serve, its own process",
        "latency_s": args.latency, "rounds": args.rounds,
        "concurrency": by_concurrency,
        "cached_rerun": {"concurrency": levels[0], "verdicts": verdicts, "cache_hits": cached[0][2],
                         "wall_s": round(cached_wall, 3), "rounds_s": [round(x[0], 3) for x in cached],
                         "s_per_1000_verdicts": round(cached_wall * 1000 / verdicts, 3)},
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"machine: {result['machine']}; 1-min load average {load_before:.2f} before (other work), "
          f"up to {max(load_rounds):.2f} during, {load_after:.2f} after (with this benchmark's client and server)")
    print(f"benchmark: {result['cases']} cases, {result['verdicts']} verdicts; {result['calls_per_round']} judge calls "
          f"per round (one per case), mean request {result['mean_request_kib']} KiB")
    print(f"server: {result['server']}, --latency {args.latency}; concurrency {' '.join(map(str, levels))}; "
          f"{args.rounds} rounds, interleaved")
    for c, res in by_concurrency.items():
        print(f"concurrency {c}:")
        for name in ("tracebench", "bare"):
            s = res[f"{name}_calls_per_s"]
            print(f"  {name:<10} {s['median']:7.1f} calls/s (median; min-max {s['min']}-{s['max']}; rounds {s['rounds']})")
        print(f"  {'bound':<10} {res['bound_calls_per_s']:7.1f} calls/s (concurrency / latency)")
        target = res["target_vs_bare"]
        verdict = "" if target is None else (f" (target >= {target:.0%}: "
                                             f"{'met' if res['tracebench_vs_bare'] >= target else 'NOT met'})")
        print(f"  tracebench / bare:  {res['tracebench_vs_bare']:.1%}{verdict}")
        print(f"  tracebench / bound: {res['tracebench_vs_bound']:.1%}; bare / bound: {res['bare_vs_bound']:.1%}")
        cpu = res["cpu_ms_per_call"]
        print(f"  CPU per call: client {cpu['tracebench_client']} ms (tracebench) vs {cpu['bare_client']} ms (bare); "
              f"server {cpu['server_during_tracebench']} / {cpu['server_during_bare']} ms")
    r = result["cached_rerun"]
    print(f"cached re-run (concurrency {r['concurrency']}): {r['verdicts']} verdicts in {r['wall_s']} s (median of "
          f"{args.cached_rounds}: {r['rounds_s']}) = {r['s_per_1000_verdicts']} s per 1,000 verdicts (target < 2 s)")


if __name__ == "__main__":
    main()
