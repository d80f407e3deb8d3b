"""Argument types shared by subcommands."""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Iterable

from ..choices import Executor, JudgeBatch
from ..errors import TraceError
from ..formula import space_bounds
from ..replies import DEFAULT_MAX_REPLY_BYTES
from ..scales import DEFAULT_SCALE, scale_names

__all__ = ["EXIT_STATUSES", "INCOMPLETE", "add_executor_options", "add_model_options", "model_settings", "provider_help", "report_incomplete",
           "shard", "slot_levels"]

EXIT_STATUSES = ("exit status: 0 done; 2 bad input (one line on stderr naming the place, nothing written); "
                 "3 done, but some model calls gave no usable answer (run, diagnose, tag: one line on stderr with the "
                 "count, the main reasons and the command that asks again); 130 interrupted (the same command resumes)")
INCOMPLETE = 3  # the exit status of a finished command some of whose calls gave no usable answer


def shard(text: str) -> tuple[int, int]:
    """``i/n`` with 1 <= i <= n."""
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard i/n with 1 <= i <= n, e.g. 2/4")
    return int(match.group(1)), int(match.group(2))


def provider_help(role: str) -> str:
    """The help of ``--generator`` / ``--judge`` (``role``): every scheme registered for it, with
    its line of help (tracebench.providers._schemes), and what else a spec may be."""
    from ..providers import ENTRY_POINT_GROUPS, scheme_help

    return (f"{scheme_help(role)}; or a provider's name registered under the entry-point group "
            f"{ENTRY_POINT_GROUPS[role]}, or a name of the models file; any spec may end in @URL[,URL] (its endpoint)")


def add_judging_options(p: argparse.ArgumentParser, judge_help: str) -> None:
    """The options of the commands that judge images already made (rejudge, import-lmms): the
    judges, how they combine, a budget of calls, pinned judge models."""
    from ..outcomes import Ensemble

    p.add_argument("--judge", action="append", required=True, metavar="SPEC", help=judge_help)
    p.add_argument("--ensemble", choices=[e.value for e in Ensemble], default=None,
                   help="how several judges combine, as trace run's --ensemble")
    p.add_argument("--max-calls", type=int, default=None, metavar="N",
                   help="a budget of judge calls, as trace run's --max-calls")
    p.add_argument("--allow-model-change", action="store_true",
                   help="resume even when a judge's server now reports another model, as trace run's")


def add_model_options(p: argparse.ArgumentParser, *, cache_default: str, defaults_from: str | None = None) -> None:
    """The options of every command that calls models through the run harness (run, diagnose).
    ``defaults_from`` names where a left-out option comes from instead of the built-in default."""
    inherit = f" (default: {defaults_from})" if defaults_from else ""
    p.add_argument("--models", type=Path, metavar="FILE",
                   help="a models file (TOML): per-model base URLs (replicas), key variables, concurrency, "
                        "retries and timeouts (docs/evaluate.md)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL, then OpenAI)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (loopback servers need none)")
    p.add_argument("--judge-base-url", help="endpoint of the judges when it differs from --base-url")
    p.add_argument("--judge-api-key-env", metavar="VAR", help="key variable of the judges' endpoint")
    p.add_argument("--concurrency", type=int, default=8,
                   help="calls in flight per model and replica, where the models file says none (default 8)")
    p.add_argument("--max-retries", type=int, default=4,
                   help="retries of a transient failure or a rate limit, with backoff (default 4)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a call may take in all, however slowly the server sends (default 300)")
    p.add_argument("--max-reply-bytes", type=int, default=DEFAULT_MAX_REPLY_BYTES, metavar="N",
                   help=f"a longer reply body is cut off, an abstention (default {DEFAULT_MAX_REPLY_BYTES})")
    p.add_argument("--scale", choices=scale_names(), default=None if defaults_from else DEFAULT_SCALE.value,
                   help="what judges answer: binary yes/no, ternary 2/1/0 (LongBanana), or tiers 1.0/0.2/0.0 for "
                        "anchor identity (Savanna), docs/protocols.md" + (inherit or " (default binary)"))
    p.add_argument("--judge-batch", choices=[b.value for b in JudgeBatch], default=None if defaults_from else JudgeBatch.CASE.value,
                   help="one judge call per case or one per operator" + (inherit or " (default case)"))
    p.add_argument("--shard", type=shard, metavar="i/n", help="only shard i of n (split by case id)")
    p.add_argument("--seed", type=int, default=None if defaults_from else 0,
                   help="seed of synthetic generators" + (inherit or " (default 0)"))
    p.add_argument("--retry-abstained", action="store_true", help="ask again where a verdict is an abstention")
    p.add_argument("--cache", type=Path, help=f"cache folder (default {cache_default})")


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where images are made (run, diagnose): here, or by Ray workers."""
    p.add_argument("--executor", choices=[e.value for e in Executor], default=Executor.LOCAL.value,
                   help="where images are made: local (here) or ray (Ray workers, each building the generator "
                        "once; cache, resume, judges and verdicts stay here); needs pip install 'tracebench[ray]'")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="--executor ray: Ray workers (default 1)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                   help="--executor ray: GPUs each worker holds (default 0)")
    p.add_argument("--ray-address", metavar="ADDR", help="--executor ray: the cluster to join (ray start --head "
                   "prints it); default: a local cluster for the command")


def generator_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, value): a number, true/false or null as JSON reads it, else the text
    (``size=1024x1024``, ``steps=30``, ``guidance_scale=3.5``, ``seed=7``)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.-]*", key):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (size=1024x1024, steps=30, seed=7)")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    if not isinstance(parsed, (int, float, bool, str)) or isinstance(parsed, float) and not math.isfinite(parsed):
        parsed = value  # a list, an object or null stays the text it was
    return key, parsed


def add_generator_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--generator-option", type=generator_option, action="append", default=[], metavar="KEY=VALUE",
                   help="a generation option sent with every request (repeat for several; over the models file's "
                        "options): size, quality, seed, steps, guidance_scale or any field the server takes; the "
                        "images API's own fields as fields, others in extra_body (vLLM-Omni, SGLang); python: "
                        "generators read self.options, command: ones $TRACEBENCH_GENERATOR_OPTIONS; part of the "
                        "run's identity and cache keys")


def model_settings(args, *, seed: int = 0, scale: str | None = None):
    """ModelSettings from the options above (the models file read and checked); ``seed`` and
    ``scale`` where the command left them out (a diagnosis: the run's)."""
    from ..providers import ModelSettings, read_models_file

    models = read_models_file(args.models) if args.models else {}
    return ModelSettings(base_url=args.base_url, api_key_env=args.api_key_env, judge_base_url=args.judge_base_url,
                         judge_api_key_env=args.judge_api_key_env, max_retries=args.max_retries,
                         timeout=args.timeout, max_reply_bytes=args.max_reply_bytes,
                         seed=seed if args.seed is None else args.seed, models=models,
                         scale=getattr(args, "scale", None) or scale,
                         generator_options=dict(getattr(args, "generator_option", None) or ()))


def slot_levels(spec: str) -> tuple[int, ...]:
    """``3``, ``1-8``, ``2,4,6`` or a mix such as ``1-3,5`` -> sorted slot levels (a mistake in
    templates/space.toml, whose bounds they are checked against, is the usage error's one line)."""
    try:
        bounds = space_bounds()
    except TraceError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    low, high = bounds.min_slot, bounds.max_slot
    levels: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                first, last = (int(p) for p in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r} is not a slot list such as 3, 1-8 or 2,4,6") from None
        if first > last:
            raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
        if first < low or last > high:
            raise argparse.ArgumentTypeError(f"{part!r} is outside the slot levels {low}-{high}")
        levels.update(range(first, last + 1))
    return tuple(sorted(levels))


def run_incomplete(command: str, out: Path, manifest, *, max_calls: int | None = None,
                   max_cost: float | None = None) -> int:
    """The exit status of a finished run (``trace run``, ``trace rejudge``): 3 with the count,
    the main reasons and the retry command when questions abstained, or when ensemble members
    were silent where the others answered; 3 with what is left when a budget (``max_calls``,
    ``max_cost``) was spent; else 0."""
    from ..run import abstention_reasons, vote_abstention_reasons

    if manifest.unfinished:  # the budget ran out: what is done is kept, the same command goes on
        argv = ["trace", *sys.argv[1:]]
        abstained = f" ({manifest.abstentions} questions abstained; --retry-abstained asks them again)" \
            if manifest.abstentions else ""
        budgets = []
        if max_calls is not None or max_cost is None:
            budgets.append(f"--max-calls{f' {max_calls}' if max_calls is not None else ''}: "
                           f"{sum(manifest.calls.values())} calls made")
        if max_cost is not None:
            budgets.append(f"--max-cost {max_cost:.15g}: about {manifest.cost or 0:.4f} spent")
        flags = " or ".join(flag for flag in ("--max-calls", "--max-cost") if any(b.startswith(flag) for b in budgets))
        print(f"{command}: the budget was spent ({'; '.join(budgets)}): {manifest.cases} cases done{abstained}, "
              f"{manifest.unfinished} left; go on with: {shlex.join(argv)} (a larger or no {flags}; cached "
              f"calls are free)", file=sys.stderr)
        return INCOMPLETE
    if manifest.abstentions:
        return report_incomplete(command, f"{manifest.abstentions} of {manifest.verdicts} questions abstained "
                                          "(no usable answer; never scored as fails)",
                                 abstention_reasons(out).most_common(3), retry_flag="--retry-abstained")
    if manifest.votes_abstained:  # every verdict answered, but an ensemble member was silent on some
        silent = ", ".join(f"{spec} {n} of {manifest.verdicts}" for spec, n in manifest.votes_abstained.items())
        return report_incomplete(command, f"judges abstained on some questions the other judges answered "
                                          f"({silent}); the verdicts stand on the answers given",
                                 vote_abstention_reasons(out).most_common(3), retry_flag="--retry-abstained")
    return 0


def report_incomplete(command: str, what: str, reasons: Iterable[tuple[str, int]], *, retry_flag: str | None) -> int:
    """One line on stderr for a finished command some of whose calls abstained: ``what``
    (the count, said in the command's words), the three most frequent reasons and the
    command that asks again (this one, plus ``retry_flag`` when it is needed); returns 3."""
    argv = ["trace", *sys.argv[1:]]
    if retry_flag and retry_flag not in argv:
        argv.append(retry_flag)
    main = "; ".join(f"{n}x {reason}" for reason, n in list(reasons)[:3]) or "unknown"
    print(f"{command}: {what}; main reasons: {main}. Ask again with: {shlex.join(argv)}", file=sys.stderr)
    return INCOMPLETE
