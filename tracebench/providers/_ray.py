"""``--executor ray``: a local generator run by Ray workers, the rest of the run where it was.

Each worker is a Ray actor that builds the user's generator once (its ``setup()``: loading a
diffusers pipeline, say) and makes the images of the cases it is sent. The driver keeps
everything it owns without Ray: the cache (a cached case is never sent to a worker), resume,
the judges, the verdicts and the counters; a worker only turns a case and its references into
an image. A worker that dies is restarted by Ray and its case sent again (``max_restarts`` and
``max_task_retries`` unbounded), so a run loses nothing; a driver killed at any point resumes as
any run does. ``trace diagnose`` keeps one set of workers for all its rounds
(:meth:`RayGenerator.serving`): each round's run makes its images on them, and each call says
which generation of the case it asks (``sample``, ``--repeats``), which the worker's generator
is given before it generates.

Ray is the ``ray`` extra (``pip install 'tracebench[ray]'``), imported only here.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any, Sequence

from ..errors import TraceError
from ._base import CallFailed, Generation, Generator, asking

__all__ = ["RayGenerator", "ray_module"]


def ray_module():
    try:
        import ray
    except ImportError:
        raise TraceError("--executor ray needs Ray: pip install 'tracebench[ray]'") from None
    return ray


class _Worker:
    """A Ray actor's body: the generator, built once, making images."""

    def __init__(self, spec: str, settings) -> None:
        from ._registry import make_generator

        self.generator = make_generator(spec, settings)
        self.generator.setup()
        self.generator.mark_set_up()  # its calls need not set it up again

    def pid(self) -> int:
        return os.getpid()

    async def generate(self, case_json: str, references: list[bytes],
                       sample: int = 0) -> tuple[bytes, tuple[str, ...] | None]:
        from ..records import Case

        with asking(sample):  # the generation asked (trace run --samples, trace diagnose --repeats)
            made = await self.generator.call(Case.model_validate_json(case_json), references)
        return made.image, made.used_references


class RayGenerator(Generator):
    """The generator ``spec`` made by ``workers`` Ray actors (each with ``gpus`` GPUs), on the
    cluster at ``address`` (None: a local one started for the run, stopped at its end).
    ``local`` is the same generator built in the driver, for what the driver asks of it without
    generating (its spec, cache key, limit on images, what it may see of a case): keep model
    loading in ``setup()``, which only the workers call."""

    def __init__(self, spec: str, settings, local: Generator, *, workers: int, gpus: float = 0.0,
                 address: str | None = None) -> None:
        if workers < 1:
            raise TraceError(f"--workers: {workers} must be at least 1")
        if gpus < 0:
            raise TraceError(f"--gpus-per-worker: {gpus} must be 0 or more")
        self.ray = ray_module()
        self.settings, self.given = settings, spec
        self._serve(local)
        self.workers, self.gpus, self.address = workers, gpus, address
        self.concurrency = 2 * workers  # one case working and one queued on every worker (each makes one at a time)
        self._actors: list[Any] = []
        self._busy: list[int] = []
        self._started_cluster = False
        self._shared = False  # a view of another's workers (serving): closing it leaves them running

    def _serve(self, local: Generator) -> None:
        self.local = local
        self.spec = local.spec
        self.max_images, self.options, self.sample = local.max_images, local.options, local.sample
        self.sees_truth = local.sees_truth

    def serving(self, local: Generator) -> RayGenerator:
        """These workers (started) making the images of ``local``, the same generator built for
        another run (another ``sample``: trace diagnose's rounds and repeats); closing the view
        leaves the workers running, for the next round."""
        if local.spec != self.spec or dict(local.options) != dict(self.options):
            raise TraceError(f"--executor ray: the workers make {self.spec}, not {local.spec}")
        self.start()
        view = copy.copy(self)  # the same actors and load counts, this run's generator in the driver
        view._serve(local)
        view._shared, view._started_cluster = True, False
        return view

    def key(self, case, references):
        return self.local.key(case, references)

    def sample_seed(self) -> int | None:
        return self.local.sample_seed()

    def check(self) -> None:
        self.local.check()

    def endpoint(self):
        return self.local.endpoint()

    def start(self) -> None:
        """Join or start the cluster and start the workers (before the run's first case; a
        cluster that does not come up is a TraceError, never a row of abstentions)."""
        if self._actors:
            return
        try:
            self._start()
        except TraceError:
            raise
        except Exception as err:  # noqa: BLE001 - Ray's many ways of not starting, as one line
            lines = str(err).strip().splitlines()
            raise TraceError(f"--executor ray: the Ray cluster did not start ({type(err).__name__}: "
                             f"{lines[0] if lines else ''})") from None

    def _start(self) -> None:
        ray = self.ray
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report to Ray's servers: traffic stays here
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                     **({} if self.address else {"num_cpus": max(self.workers, os.cpu_count() or 1),
                                                 "num_gpus": self.workers * self.gpus or None}))
            self._started_cluster = True
        remote = ray.remote(num_cpus=0 if self.gpus else 1, num_gpus=self.gpus, max_restarts=-1,
                            max_task_retries=-1, max_concurrency=1)(_Worker)
        # filled in place: views of these workers (serving) share the lists
        self._actors[:] = [remote.remote(self.given, self.settings) for _ in range(self.workers)]
        self._busy[:] = [0] * self.workers

    async def generate(self, case, references: Sequence[bytes]):
        if not self._actors:
            raise CallFailed("--executor ray: the workers were not started")
        index = min(range(len(self._actors)), key=self._busy.__getitem__)  # the least busy worker
        self._busy[index] += 1
        try:
            image, used = await self._actors[index].generate.remote(case.model_dump_json(),
                                                                    [bytes(r) for r in references], self.sample)
        finally:
            self._busy[index] -= 1
        return Generation(image, used)

    def failure(self, err: Exception) -> CallFailed | None:
        """A worker's failure as the run's: the generator's own CallFailed keeps its words."""
        cause = getattr(err, "cause", None)
        if isinstance(cause, CallFailed):
            return CallFailed(str(cause))
        if isinstance(err, self.ray.exceptions.RayError):
            first = str(cause or err).strip().splitlines()
            return CallFailed(f"ray worker: {first[-1] if first else type(err).__name__}")
        return None

    def worker_pids(self) -> list[int]:
        """The workers' process ids (tests kill one)."""
        return self.ray.get([actor.pid.remote() for actor in self._actors])

    async def aclose(self) -> None:
        if not self._shared:
            self.stop()

    def stop(self) -> None:
        """Stop the workers, and the cluster if this generator started it."""
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors.clear()
        if self._started_cluster:
            self.ray.shutdown()
            self._started_cluster = False
