"""A generator plugin standing in for a GPU-bound model: it renders the synthetic zoo's image of a
case, holding its worker for a fixed time per case.

    trace run BENCH --generator python:examples/plugins/slow_zoo.py --judge oracle --executor ray --workers 4 --out RUN

Its ``setup()`` is where a real plugin loads its weights (a diffusers pipeline, say): it runs
once in each place images are made, this process or each Ray worker (docs/evaluate.md, many
GPUs). Environment: ``SLOW_ZOO_PROFILE`` (default ``synthetic:global-interference``),
``SLOW_ZOO_SECONDS`` (default 0), ``SLOW_ZOO_PIDS`` (a file each setup appends its process id
to: the tests kill a worker with it).
"""

from __future__ import annotations

import asyncio
import os
import time

from tracebench.providers import Generator, ModelSettings, make_generator


class SlowZoo(Generator):
    spec = "python:slow_zoo"
    sees_truth = True  # the zoo draws what a case asks, clutter included

    def __init__(self) -> None:
        self.zoo = None  # made in setup(): the driver of a Ray run builds this object but never sets it up

    def setup(self) -> None:
        self.zoo = make_generator(os.environ.get("SLOW_ZOO_PROFILE", "synthetic:global-interference"),
                                  ModelSettings())
        pids = os.environ.get("SLOW_ZOO_PIDS")
        if pids:
            with open(pids, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()}\n")

    async def generate(self, case, references):
        seconds = float(os.environ.get("SLOW_ZOO_SECONDS", "0"))
        if seconds:
            await asyncio.to_thread(time.sleep, seconds)  # the worker is held, as by a GPU
        # the generation asked (trace run --samples, trace diagnose --repeats), read when generating
        self.zoo.sample = self.sample
        return await self.zoo.call(case, references)


generator = SlowZoo
