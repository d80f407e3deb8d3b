"""lmms-eval, both ways: a benchmark as an lmms-eval task folder, and lmms-eval's sample logs as a
tracebench run.

- :func:`export_lmms_task` (``trace export BENCH --lmms-eval DIR``) writes the task folder: the
  task YAML (``templates/share/lmms_task.yaml.j2``: the data file, ``generate_until``, the
  messages, generation kwargs, one metric), its ``utils.py`` (``templates/share/lmms_utils.py.j2``:
  ``doc_to_visual``, ``doc_to_text``, ``doc_to_messages``, ``doc_to_target``, ``process_results``
  and the metric's aggregation), the data file (:data:`DOCS_FILE`: one :class:`LmmsDoc` a case,
  in the benchmark's order) and the references, copied under the paths the benchmark gives them.
- :func:`import_lmms_log` (``trace import-lmms LOG --cases BENCH --judge SPEC --out RUN``) reads
  a sample log (lmms-eval's JSONL, one sample a line, or a JSON file with a ``logs`` list), finds
  each sample's case and the first image of its reply (``{"text": ..., "images": [paths]}``),
  checks every image (inside the log's folder once links are resolved, decodable) and every case
  (the benchmark holds it, once) before anything is written, then judges the images as a run whose
  generator is the log (:class:`LmmsImages`): scores, diagnoses, reports and leaderboards take it
  as any run.

Neither needs lmms-eval, ``datasets`` or ``pyarrow``: the export renders text and copies files,
the import reads JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .. import __version__
from ..cache import file_sha256
from ..errors import TraceError
from ..images import ImageRefused, decode_reduced
from ..jsonfiles import numbered_jsonl, read_json, write_jsonl
from ..library import staged_output
from ..providers import CallFailed, Generation, Generator, ModelSettings
from ..records import CASES, RUN_MANIFEST, RunManifest, read_cases
from ..run import RunOptions, run_benchmark
from ..safepaths import RelativePath, SafeId, inside
from ..templating import render

__all__ = ["DOCS_FILE", "FUNCTIONS", "METRIC", "LmmsDoc", "LmmsImages", "LmmsTask", "default_generator_name",
           "export_lmms_task", "import_lmms_log", "read_lmms_log", "task_name"]

DOCS_FILE = "docs.jsonl"  # the task's data file: one LmmsDoc a case
UTILS_FILE = "utils.py"
METRIC = "tracebench_reply"  # the metric process_results records: the case id and the reply's image paths
FUNCTIONS = {"visual": "doc_to_visual", "text": "doc_to_text", "messages": "doc_to_messages",
             "target": "doc_to_target", "results": "process_results", "aggregate": "aggregate_replies"}
GENERATION_KWARGS = {"max_new_tokens": 1024, "temperature": 0, "do_sample": False}
_CHECK_FIT = 64  # an image is decoded (reduced to this size) to check that it decodes


class LmmsDoc(BaseModel):
    """One doc of the task's data file: a case as lmms-eval is given it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: SafeId = Field(description="the case id")
    prompt: str = Field(description="the case's prompt")
    references: list[RelativePath] = Field(description="its reference images, in order (Image 1 first), relative "
                                                       "to the task folder")


@dataclass(frozen=True)
class LmmsTask:
    """What :func:`export_lmms_task` wrote."""

    folder: Path
    task: str
    yaml: str  # the task YAML's file name
    cases: int
    references: int


def task_name(bench: Path) -> str:
    """The task's name: ``tracebench_`` and the benchmark folder's name in lower-case letters,
    digits and underscores."""
    stem = re.sub(r"[^a-z0-9]+", "_", Path(bench).resolve().name.lower()).strip("_")
    return f"tracebench_{stem}" if stem else "tracebench"


def _benchmark(bench: Path) -> Path:
    """The benchmark folder's cases file, or a TraceError saying what the folder is."""
    if RUN_MANIFEST.path(bench).is_file():
        raise TraceError(f"{bench}: a run folder; --lmms-eval exports a benchmark folder (the run's is "
                         f"{RUN_MANIFEST.read(bench).cases_dir})")
    if not CASES.path(bench).is_file():
        raise TraceError(f"{bench}: not a benchmark folder (no {CASES.name}); make one with `trace sample`")
    return CASES.path(bench)


def _docs(bench: Path, stage: Path, copied: set[str]) -> Iterator[LmmsDoc]:
    """Each case as a doc, its references copied into ``stage`` (each once) as it goes."""
    for case in read_cases(bench):
        for ref in case.references:
            if ref.path not in copied:
                source = inside(bench, ref.path, f"{CASES.path(bench)}: case {case.id}: references", "benchmark folder")
                target = stage / ref.path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                copied.add(ref.path)
        yield LmmsDoc(id=case.id, prompt=case.prompt, references=[ref.path for ref in case.references])


def export_lmms_task(bench: Path, out: Path) -> LmmsTask:
    """Write the lmms-eval task folder of the benchmark ``bench`` to ``out`` (new or empty; made
    beside it and renamed into place)."""
    bench, out = Path(bench), Path(out)
    cases_file = _benchmark(bench)
    cases_hash = file_sha256(cases_file)
    task = task_name(bench)
    copied: set[str] = set()
    cases = 0
    with staged_output(out) as stage:
        def counted() -> Iterator[LmmsDoc]:
            nonlocal cases
            for doc in _docs(bench, stage, copied):
                cases += 1
                yield doc

        write_jsonl(stage / DOCS_FILE, counted())
        context = dict(task=task, version=__version__, docs_file=DOCS_FILE, data_file=str(out.resolve() / DOCS_FILE),
                       functions=FUNCTIONS, metric=METRIC, generation_kwargs=GENERATION_KWARGS, cases_hash=cases_hash,
                       cases=cases, description=f"TRACE-Bench cases of {bench.resolve().name}, exported by tracebench")
        (stage / f"{task}.yaml").write_text(render("share/lmms_task.yaml.j2", **context) + "\n", encoding="utf-8")
        (stage / UTILS_FILE).write_text(render("share/lmms_utils.py.j2", **context) + "\n", encoding="utf-8")
    return LmmsTask(folder=out, task=task, yaml=f"{task}.yaml", cases=cases, references=len(copied))


# -- reading sample logs -------------------------------------------------------------------------

class _Recorded(BaseModel):
    """What the exported task's process_results recorded of a sample (the metric :data:`METRIC`)."""

    model_config = ConfigDict(extra="ignore")

    id: SafeId
    benchmark: str | None = None
    images: list[str] = []


class _Sample(BaseModel):
    """One sample of an lmms-eval log; the fields tracebench reads (the others are ignored)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    doc_id: int = Field(ge=0)
    doc: dict[str, Any] | None = None
    resps: Any = None
    filtered_resps: Any = None
    recorded: _Recorded | None = Field(default=None, alias=METRIC)


class _Log(BaseModel):
    """An lmms-eval log as one JSON file: its ``logs`` list (the other keys ignored)."""

    model_config = ConfigDict(extra="ignore")

    logs: list[_Sample]


def _samples(log: Path) -> Iterator[tuple[str, _Sample]]:
    """(where, sample) of each sample of the log: ``LOG:LINE`` of a JSONL log, ``LOG: logs[i]``
    of a JSON one (a ``.json`` file)."""
    if log.suffix.lower() == ".json":
        for i, sample in enumerate(read_json(log, _Log).logs):
            yield f"{log}: logs[{i}]", sample
    else:
        for lineno, sample in numbered_jsonl(log, _Sample):
            yield f"{log}:{lineno}", sample


def _reply_images(sample: _Sample) -> list[str]:
    """The image paths of the sample's first reply: what the exported task recorded, else its
    ``resps`` (or ``filtered_resps``), a JSON string ``{"text": ..., "images": [...]}``."""
    if sample.recorded is not None:
        return sample.recorded.images
    first = sample.resps if sample.resps is not None else sample.filtered_resps
    while isinstance(first, list):
        first = first[0] if first else None
    if isinstance(first, str):
        try:
            first = json.loads(first)
        except ValueError:
            return []  # a text reply: no image
    images = first.get("images") if isinstance(first, dict) else None
    if isinstance(images, str):
        images = [images]
    return [str(path) for path in images] if isinstance(images, list) else []


@dataclass(frozen=True)
class _Reading:
    """What a log is checked against: the benchmark's case ids in order, its cases file's hash
    and the folder every image must stay inside."""

    bench: Path
    ids: tuple[str, ...]
    cases_hash: str
    root: Path


def _case_of(where: str, sample: _Sample, reading: _Reading) -> str:
    """The case a sample is of: the benchmark's case ``doc_id`` (lmms-eval numbers the docs in
    the data file's order), which the id the sample names, if any, must be."""
    ids = reading.ids
    named = sample.recorded.id if sample.recorded else (sample.doc or {}).get("id")
    if named is not None and named not in ids:
        raise TraceError(f"{where}: case {str(named)[:200]!r}: {reading.bench} holds no such case")
    if sample.doc_id >= len(ids):
        raise TraceError(f"{where}: doc_id: {sample.doc_id} is not a case of {reading.bench} (it holds {len(ids)} "
                         f"cases: doc_id 0 to {len(ids) - 1})")
    if named is not None and named != ids[sample.doc_id]:
        raise TraceError(f"{where}: doc_id {sample.doc_id} is case {ids[sample.doc_id]!r} of {reading.bench}, but the "
                         f"sample names case {named!r}: the log is of another order of the cases")
    recorded = sample.recorded.benchmark if sample.recorded else None
    if recorded is not None and recorded != reading.cases_hash:
        raise TraceError(f"{where}: {METRIC}.benchmark: the log is of another benchmark than {reading.bench} (its "
                         f"{CASES.name} has SHA-256 {reading.cases_hash}, the log's task {recorded[:64]})")
    return ids[sample.doc_id]


def _image(where: str, path: str, root: Path) -> Path:
    """The image file a reply names, inside ``root`` once links are resolved and decodable; else
    a TraceError naming the sample and the path. A relative path is read from ``root``."""
    shown = path if len(path) <= 200 else path[:200] + "..."
    relative = path
    if os.path.isabs(path):
        relative = os.path.relpath(path, root)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep):
            raise TraceError(f"{where}: {shown}: outside the log's folder {root} (give the folder that holds the "
                             f"images with --images-root)")
    resolved = inside(root, relative, where, "log's folder")
    if not resolved.is_file():
        raise TraceError(f"{where}: {shown}: no such image file")
    try:
        decode_reduced(resolved, _CHECK_FIT)
    except ImageRefused as err:
        raise TraceError(f"{where}: {shown}: not a decodable image ({err})") from None
    except OSError as err:
        raise TraceError(f"{where}: {shown}: cannot read ({err.strerror or err})") from None
    return resolved


def read_lmms_log(log: Path, cases_dir: Path, *, images_root: Path | None = None) -> dict[str, Path | str]:
    """Case id -> the image of its reply (a checked path), or why there is none (a reply without
    an image); every problem of the log is a TraceError naming its line (or ``logs[i]``)."""
    log, cases_dir = Path(log), Path(cases_dir)
    if not log.is_file():
        raise TraceError(f"{log}: no such log file (lmms-eval's samples_*.jsonl, or a JSON file with a 'logs' list)")
    reading = _Reading(cases_dir, tuple(case.id for case in read_cases(cases_dir)), file_sha256(_benchmark(cases_dir)),
                       Path(images_root or log.parent).absolute())
    found: dict[str, Path | str] = {}
    first: dict[str, str] = {}
    for where, sample in _samples(log):
        case = _case_of(where, sample, reading)
        if case in first:
            raise TraceError(f"{where}: case {case!r}: already given at {first[case]}")
        first[case] = where
        images = _reply_images(sample)
        found[case] = _image(where, images[0], reading.root) if images else "the reply holds no image"
    if not found:
        raise TraceError(f"{log}: holds no sample")
    return found


# -- the run --------------------------------------------------------------------------------------

class LmmsImages(Generator):
    """The images of an lmms-eval log, given as a generator's (read, not made): a case the log
    has no image for abstains, with the reason. Its spec names the model the log is of."""

    def __init__(self, spec: str, images: dict[str, Path | str]) -> None:
        self.spec = spec
        self.images = images

    def key(self, case, references):
        return None  # reading a file is not a model call

    async def generate(self, case, references):
        found = self.images.get(case.id)
        if found is None:
            raise CallFailed(f"the lmms-eval log holds no sample of case {case.id}")
        if isinstance(found, str):
            raise CallFailed(f"lmms-eval: {found}")
        return Generation(found.read_bytes())


def default_generator_name(log: Path) -> str:
    """``lmms-eval:MODEL``, MODEL the log's folder's name (lmms-eval writes its sample logs to
    ``OUTPUT/<model>/``)."""
    return f"lmms-eval:{Path(log).absolute().parent.name or 'model'}"


def import_lmms_log(log: Path, out: Path, *, cases_dir: Path, judges: Sequence[str],
                    settings: ModelSettings | None = None, generator: str | None = None,
                    images_root: Path | None = None, **options) -> RunManifest:
    """Judge the reply images of the lmms-eval log ``log`` of the benchmark ``cases_dir`` with
    ``judges`` into the run folder ``out`` (resumed as ``trace run`` resumes), its generator named
    ``generator`` (default :func:`default_generator_name`); ``options`` as
    :func:`~tracebench.run.run_benchmark`'s (concurrency, judge_batch, ensemble, cache_dir,
    retry_abstained, max_calls ...). The log is read and every image checked before anything is
    written."""
    images = read_lmms_log(log, cases_dir, images_root=images_root)
    spec = generator or default_generator_name(log)
    if not spec.strip() or "\n" in spec:
        raise TraceError(f"--generator-name {spec!r}: give a one-line name")
    return run_benchmark(Path(cases_dir), Path(out), RunOptions(generator=LmmsImages(spec, images), judges=judges,
                                                              settings=settings or ModelSettings(), **options))
