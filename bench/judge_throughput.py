"""Judge throughput of `trace run` against `trace serve` with latency, next to the bare openai client and the bound.

Five rows, measured in one run against the same server, the same 400 requests:

- ``run``: ``run_benchmark(bench, out, RunOptions(generator="folder:<images>", judges=["openai:oracle"],
  concurrency=C))`` with a fresh cache folder each round, so every judge call goes to the
  server; calls/s = ``RunManifest.calls["openai:oracle"]`` / wall time of ``run_benchmark``
  (everything a user's ``trace run`` does: reading cases and images, building the requests,
  the cache, parsing the replies, writing images and verdicts);
- ``judge``: tracebench's judge alone, ``OpenAIJudge.ask`` (built by ``make_judge("openai:oracle",
  settings)``, a fresh one each round) for every case under an ``asyncio.Semaphore(C)``: the
  request built from the case, its image encoded, sent through the judge's client and the
  reply read; the cases, images and references are read before the timing (no cache, no
  verdicts, no files written);
- ``create``: the bare ``openai.AsyncOpenAI(max_retries=0).chat.completions.create`` under an
  ``asyncio.Semaphore(C)``, sending the judge's requests (captured beforehand, outside the
  timing): the SDK's request transform and its parsing of the reply into a ``ChatCompletion``;
- ``post``: the same client's ``post("/chat/completions", body=..., cast_to=httpx.Response)``:
  the SDK without its request transform and without parsing the reply;
- ``bound``: C / latency calls per second (every call waiting exactly the latency, nothing else).

Capturing the requests (before the timing): the judge ``make_judge`` builds, as a subclass whose
``client()`` (the public hook every ``OpenAIJudge`` call gets its client from) returns a real
``openai.AsyncOpenAI`` whose HTTP transport records each request (body bytes and headers) and
answers it without a network. ``ask`` itself is not touched, so the recorded bodies are byte for
byte what the judge sends, whichever client method it sends them with. Each body is then sent
once through ``create`` and through ``post`` into the same recording transport, and the run stops
unless both send the same body bytes and headers as the judge: the three client rows send the
same requests. References go through ``ReferenceFiles`` as in the harness.

``--concurrency`` takes several values (``--concurrency 32 128``): every round measures every
method at each of them, against the same server, so the ratios are measured side by side.

Setup (not timed): a benchmark is sampled once (``trace sample --slots 1-8 --per-slot N
--no-applications``); its images are generated once (``trace run --generator synthetic:perfect
--judge oracle``), each in a child process, and reused by every measured run through
``folder:``, so no generation is measured and the measuring process holds no more than a
user's ``trace run`` does (in process, the setup left ~300,000 objects behind for every
garbage collection of the measured rounds to traverse). The server is ``trace serve BENCH
--latency L`` in its own process (so client and server each get a core), on 127.0.0.1 and a
free port; it is stopped at the end.

Each of ``--rounds`` rounds runs every method at each concurrency, the order of the methods
rotating from round to round (and the order of the concurrencies alternating); the report gives
medians (and min-max) per concurrency. CPU seconds per call of the client process and of the
server process are measured per round too (from getrusage and /proc/<pid>/stat), to show what
limits throughput. The garbage collector runs (outside the timing) before each measurement. The
1-minute load average is printed before the run (other work on the machine) and at its highest
before a round (which counts this benchmark's own client and server, about 2).

Cached re-run: after the measured rounds, ``run_benchmark`` runs again into new out folders
sharing the cache folder of the last ``run`` round at the first concurrency (no call is made);
wall time and verdicts, scaled to 1,000 verdicts (median of ``--cached-rounds``).

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
from dataclasses import dataclass
from pathlib import Path

from _machine import client_machine_text

NO_KEY_ENV = "TRACEBENCH_BENCH_NO_KEY"  # an unset variable: the loopback server needs no key


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

REPLY = {"id": "recorded", "object": "chat.completion", "created": 0, "model": "oracle",
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": '{"answers": []}'}}]}


@dataclass(frozen=True)
class Sent:
    """One request as the client sent it: its body bytes and its headers (lower-case names)."""

    body: bytes
    headers: dict[str, str]

    def create_kwargs(self) -> dict:
        """The arguments of ``chat.completions.create`` that send this request."""
        return json.loads(self.body) | {"extra_headers": self.extra_headers()}

    def post_arguments(self) -> tuple[dict, dict]:
        """(body, options) of ``client.post("/chat/completions", ...)`` that send this request."""
        return json.loads(self.body), {"headers": self.extra_headers(), "security": {"bearer_auth": True}}

    def extra_headers(self) -> dict[str, str]:
        from tracebench.scales import SCALE_HEADER

        name = SCALE_HEADER.lower()
        return {SCALE_HEADER: self.headers[name]} if name in self.headers else {}


def recording_client(sent: list[Sent]):
    """A real ``AsyncOpenAI`` whose HTTP transport records every request and answers it at once."""
    import openai

    try:
        import httpx2 as httpx
    except ImportError:  # older openai releases use httpx
        import httpx

    def answer(request):
        sent.append(Sent(request.read(), {k.lower(): v for k, v in request.headers.items() if k.lower() != "host"}))
        return httpx.Response(200, json=REPLY)

    return openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0,
                              http_client=openai.DefaultAsyncHttpxClient(transport=httpx.MockTransport(answer)))


def judge_inputs(bench: Path, images: Path) -> list[tuple]:
    """(case, questions, generated image bytes, reference images) per case, read as the harness reads them."""
    from tracebench.providers import ReferenceFiles
    from tracebench.sample import read_cases

    references = ReferenceFiles(bench)
    return [(case, list(case.checklist), (images / f"{case.id}.png").read_bytes(),
             [references.get(ref.path) for ref in case.references]) for case in read_cases(bench)]


def captured_requests(bench: Path, images: Path, settings) -> list[Sent]:
    """The requests OpenAIJudge.ask sends, one per case (--judge-batch case), as sent on the wire;
    checked to be what ``create`` and ``post`` send for them."""
    from tracebench.providers import ImageBytes, OpenAIJudge, make_judge

    judge = make_judge("openai:oracle", settings)
    if type(judge) is not OpenAIJudge:
        raise SystemExit(f"make_judge('openai:oracle') built a {type(judge).__name__}, not an OpenAIJudge")
    sent: list[Sent] = []
    recorder = recording_client(sent)

    class _RecordingJudge(OpenAIJudge):
        def client(self):
            return recorder

    recording = _RecordingJudge(judge.model, judge.config)
    recording.scale = judge.scale

    async def build() -> list[Sent]:
        for case, questions, image, refs in judge_inputs(bench, images):
            await recording.ask(case, questions, ImageBytes(image), refs)
        requests = list(sent)
        for request in requests[:3]:  # the bare methods send the same bytes and headers
            sent.clear()
            await recorder.chat.completions.create(**request.create_kwargs())
            body, options = request.post_arguments()
            await recorder.post("/chat/completions", body=body, options=options, cast_to=_response_class())
            for method, other in zip(("create", "post"), sent):
                if other != request:
                    differing = sorted((name, "..." if name == "authorization" else value)  # no key in a message
                                       for name, value in set(other.headers.items()) ^ set(request.headers.items()))
                    raise SystemExit(f"bare {method} does not send the judge's request: body "
                                     f"{'equal' if other.body == request.body else 'different'}, headers differing: "
                                     f"{differing}")
        await recorder.close()
        return requests

    return asyncio.run(build())


def _response_class():
    try:
        import httpx2 as httpx
    except ImportError:  # older openai releases use httpx
        import httpx
    return httpx.Response


# -- the measured methods -------------------------------------------------------------------------


def bare_round(requests: list[Sent], base_url: str, concurrency: int, method: str) -> tuple[int, int, float]:
    """(calls answered, calls failed, wall seconds) of a bare AsyncOpenAI loop: ``create`` or ``post``.
    The arguments are built before the timing."""
    import openai

    response = _response_class()
    if method == "create":
        arguments = [r.create_kwargs() for r in requests]
    else:
        arguments = [r.post_arguments() for r in requests]

    async def main() -> tuple[int, int]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300.0)
        limit = asyncio.Semaphore(concurrency)
        failures = 0

        async def one(argument) -> None:
            nonlocal failures
            async with limit:
                try:
                    if method == "create":
                        await client.chat.completions.create(**argument)
                    else:
                        await client.post("/chat/completions", body=argument[0], options=argument[1], cast_to=response)
                except openai.APIError:
                    failures += 1

        await asyncio.gather(*(one(argument) for argument in arguments))
        await client.close()
        return len(arguments) - failures, failures

    start = time.perf_counter()
    calls, failures = asyncio.run(main())
    return calls, failures, time.perf_counter() - start


def judge_round(inputs: list[tuple], settings, concurrency: int) -> tuple[int, int, float]:
    """(calls answered, calls failed, wall seconds) of OpenAIJudge.ask for every case, a fresh judge."""
    from tracebench.providers import CallFailed, ImageBytes, make_judge

    async def main() -> tuple[int, int]:
        judge = make_judge("openai:oracle", settings)
        limit = asyncio.Semaphore(concurrency)
        failures = 0

        async def one(case, questions, image, refs) -> None:
            nonlocal failures
            async with limit:
                try:
                    await judge.ask(case, questions, ImageBytes(image), refs)  # the image encoded in the call, as in a run
                except Exception as err:  # noqa: BLE001 - the judge's failures, translated as the wrapper does
                    if isinstance(err, CallFailed) or judge.failure(err) is not None:
                        failures += 1
                    else:
                        raise

        await asyncio.gather(*(one(*item) for item in inputs))
        await judge.aclose()
        return len(inputs) - failures, failures

    start = time.perf_counter()
    calls, failures = asyncio.run(main())
    return calls, failures, time.perf_counter() - start


def run_round(bench: Path, images: Path, out: Path, cache: Path, settings, concurrency: int) -> tuple[int, int, float]:
    """(judge calls, abstentions, wall seconds) of one run_benchmark with an empty cache."""
    from tracebench.run import RunOptions, run_benchmark

    start = time.perf_counter()
    manifest = run_benchmark(bench, out, RunOptions(generator=f"folder:{images}", judges=["openai:oracle"], settings=settings,
                             concurrency=concurrency, cache_dir=cache, progress=False))
    wall = time.perf_counter() - start
    return manifest.calls.get("openai:oracle", 0), manifest.abstentions, wall


def measured(server_pid: int, fn, *args):
    """fn(*args)'s result plus (client CPU s, server CPU s) spent during it.

    The garbage of the previous round is collected first, outside any event loop and outside
    the timing."""
    gc.collect()
    cpu0, srv0 = own_cpu(), process_cpu(server_pid)
    result = fn(*args)
    return result, own_cpu() - cpu0, process_cpu(server_pid) - srv0


def summary(values: list[float], digits: int = 1) -> dict:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "rounds": [round(v, digits) for v in values]}


METHODS = ("run", "judge", "create", "post")
WHAT = {"run": "trace run (run_benchmark)", "judge": "OpenAIJudge.ask", "create": "bare chat.completions.create",
        "post": "bare client.post, no transform"}
# the targets: client CPU per call of tracebench's judge, and its calls/s against bare create per concurrency
CPU_TARGET_MS = 3.5
RATE_TARGETS = {32: 1.10, 128: 1.00}


def measure_rounds(args, levels, bench, images, tmp, server, base_url, settings, requests, inputs) -> dict:
    """Per concurrency and method: calls answered, calls/s, client and server CPU ms per call, one value per round;
    ``load``: the 1-minute load average before each round."""
    runs = {c: {m: {"calls": [], "rate": [], "client": [], "server": []} for m in METHODS} | {"last_cache": None} for c in levels}
    runs["load"] = []
    for r in range(args.rounds):
        runs["load"].append(os.getloadavg()[0])
        for k, c in enumerate(levels if r % 2 == 0 else list(reversed(levels))):
            shift = (r + k) % len(METHODS)
            for method in METHODS[shift:] + METHODS[:shift]:
                if method == "run":
                    runs[c]["last_cache"] = tmp / f"cache-{c}-{r}"
                    arguments = (run_round, bench, images, tmp / f"run-{c}-{r}", runs[c]["last_cache"], settings, c)
                elif method == "judge":
                    arguments = (judge_round, inputs, settings, c)
                else:
                    arguments = (bare_round, requests, base_url, c, method)
                (calls, failures, wall), cpu, srv = measured(server.pid, *arguments)
                if failures or not calls:
                    raise SystemExit(f"{method} at concurrency {c}: {failures} of {len(requests)} calls failed")
                m = runs[c][method]
                m["calls"].append(calls)
                m["rate"].append(calls / wall)
                m["client"].append(1000 * cpu / calls)
                m["server"].append(1000 * srv / calls)
    return runs


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
    if args.latency <= 0:
        parser.error("--latency must be above 0 (the bound is concurrency / latency)")
    if os.environ.get(NO_KEY_ENV):
        raise SystemExit(f"unset {NO_KEY_ENV}: the benchmark talks to a loopback server without a key")
    levels = list(dict.fromkeys(args.concurrency))

    __import__("openai")  # imported once here, not inside the first timed run

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
            inputs = judge_inputs(bench, images)
            request_bytes = statistics.mean(len(r.body) for r in requests)
            runs = measure_rounds(args, levels, bench, images, tmp, server, base_url, settings, requests, inputs)

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
    result = {
        "machine": client_machine_text(),
        # before: other work on the machine; during (highest before a round) and after: with this benchmark's 2 processes
        "load_average_1min": {"before": round(load_before, 2), "during_max": round(max(runs["load"]), 2),
                              "after": round(load_after, 2)},
        "cases": prep["cases"], "verdicts": prep["verdicts"], "calls_per_round": len(requests),
        "mean_request_kib": round(request_bytes / 1024, 1),
        "server": "trace serve, its own process",
        "latency_s": args.latency, "rounds": args.rounds,
        "concurrency": {str(c): report(runs[c], c, args.latency) for c in levels},
    }
    cached_wall = statistics.median(x[0] for x in cached)
    verdicts = cached[0][1]
    result["cached_rerun"] = {"concurrency": levels[0], "verdicts": verdicts, "cache_hits": cached[0][2],
                              "wall_s": round(cached_wall, 3), "rounds_s": [round(x[0], 3) for x in cached],
                              "s_per_1000_verdicts": round(cached_wall * 1000 / max(verdicts, 1), 3)}
    if args.json:
        print(json.dumps(result))
        return
    print_report(result, args)


def report(runs: dict, concurrency: int, latency: float) -> dict:
    """One concurrency's rows: each method's calls/s, CPU per call and ratios; the targets."""
    bound = concurrency / latency
    rows = {}
    for method in METHODS:
        m = runs[method]
        rows[method] = {"what": WHAT[method], "calls": m["calls"], "calls_per_s": summary(m["rate"]),
                        "client_cpu_ms_per_call": summary(m["client"], 2),
                        "server_cpu_ms_per_call": summary(m["server"], 2)}
    create = rows["create"]["calls_per_s"]["median"]
    for method in METHODS:
        rows[method]["of_create"] = round(rows[method]["calls_per_s"]["median"] / create, 3)
        rows[method]["of_bound"] = round(rows[method]["calls_per_s"]["median"] / bound, 3)
    targets = []
    for method in ("run", "judge"):
        cpu = rows[method]["client_cpu_ms_per_call"]["median"]
        targets.append({"method": method, "target": f"client CPU per call <= {CPU_TARGET_MS} ms",
                        "measured": f"{cpu} ms", "met": cpu <= CPU_TARGET_MS})
        if concurrency in RATE_TARGETS:
            ratio = rows[method]["of_create"]
            targets.append({"method": method, "target": f"calls/s >= {RATE_TARGETS[concurrency]:.0%} of bare create",
                            "measured": f"{ratio:.1%}", "met": ratio >= RATE_TARGETS[concurrency]})
    return {"bound_calls_per_s": round(bound, 1), "methods": rows, "targets": targets}


def print_report(result: dict, args) -> None:
    load = result["load_average_1min"]
    print(f"machine: {result['machine']}; 1-min load average {load['before']:.2f} before (other work), "
          f"up to {load['during_max']:.2f} during, {load['after']:.2f} after (with this benchmark's client and server)")
    print(f"benchmark: {result['cases']} cases, {result['verdicts']} verdicts; {result['calls_per_round']} judge calls "
          f"per round (one per case), mean request {result['mean_request_kib']} KiB")
    print(f"server: {result['server']}, --latency {args.latency}; concurrency {' '.join(result['concurrency'])}; "
          f"{args.rounds} rounds, interleaved")
    for c, res in result["concurrency"].items():
        print(f"concurrency {c} (bound {res['bound_calls_per_s']} calls/s = concurrency / latency):")
        print(f"  {'method':<8} {'calls/s':>8} {'min-max':>13} {'of create':>9} {'of bound':>8} "
              f"{'client CPU ms/call':>20} {'server CPU ms/call':>20}")
        for method, row in res["methods"].items():
            s, cl, sv = row["calls_per_s"], row["client_cpu_ms_per_call"], row["server_cpu_ms_per_call"]
            print(f"  {method:<8} {s['median']:8.1f} {s['min']:6.1f}-{s['max']:<6.1f} {row['of_create']:9.1%} "
                  f"{row['of_bound']:8.1%} {cl['median']:7.2f} ({cl['min']:.2f}-{cl['max']:.2f}) "
                  f"{sv['median']:7.2f} ({sv['min']:.2f}-{sv['max']:.2f})")
        for t in res["targets"]:
            print(f"  target, {t['method']}: {t['target']}: {t['measured']} ({'met' if t['met'] else 'NOT met'})")
    r = result["cached_rerun"]
    print(f"cached re-run (concurrency {r['concurrency']}): {r['verdicts']} verdicts in {r['wall_s']} s (median of "
          f"{args.cached_rounds}: {r['rounds_s']}) = {r['s_per_1000_verdicts']} s per 1,000 verdicts (target < 2 s)")


if __name__ == "__main__":
    main()
