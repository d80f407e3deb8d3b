"""``trace export``: a benchmark or a run folder as a Hugging Face dataset folder.

What is written is what the Hub serves: ``data/test-NNNNN-of-NNNNN.parquet`` (one row per case,
every field of the case record as a column, its reference images embedded with the ``datasets``
Image feature, the checklist a list of structs; a run adds the generated image, what the
generator said of it and every verdict with each judge's answer and reason; ``--diagnosis``
adds each case's tree and its node images) and ``README.md``, the dataset card whose YAML
header the Hub and ``datasets.load_dataset`` read (configs, features, license, citation) and
whose ``tracebench`` section holds the folder's manifests, so :func:`import_dataset` rebuilds
the folder byte for byte. Nothing here talks to the network.

Rows are written a hundred at a time (one parquet row group), fewer when their bytes pass 7/8 of
what the import reads in a row group (:data:`~._limits.MAX_ROW_GROUP_BYTES`), so memory does not
grow with the benchmark; a shard is closed once it passes :data:`SHARD_BYTES` (the Hub's habit,
500 MB). Each row is checked against the import's limits (:func:`~._limits.check_cells`) before it
is written, and the card's ``tracebench.content`` hashes every file the import will write from it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import __version__
from ..errors import TraceError
from ..jsonfiles import json_bytes, record_line
from ..cache import file_sha256
from ..records import (CASES, DIAGNOSIS_MANIFEST, IMAGES_DIR, RUN_MANIFEST, SAMPLE_MANIFEST, SUMMARY, TREES, VERDICTS,
                       Case, GenerationInfo, RunLayout, RunManifest, SampleKey, Verdict, read_cases)
from ..safepaths import inside
from . import _limits
from ._content import Staged, content_hash
from ._features import features_of, row_of

__all__ = ["ExportSummary", "export_folder", "generated_name", "SPLIT", "SHARD_BYTES", "ROWS_PER_GROUP", "FORMAT"]

SPLIT = "test"  # a benchmark is evaluated on, never trained on: its one split is the test split
SHARD_BYTES = 500 * 1000 * 1000
ROWS_PER_GROUP = 100
FORMAT = 2  # the layout of the rows and of the card's tracebench section (2: tracebench.content)
REFERENCE_IMAGES = "reference_images"
GENERATED_IMAGE = "generated_image"
GENERATION = "generation"
VERDICTS_COLUMN = "verdicts"
TREE = "diagnosis_tree"
NODE_IMAGES = "node_images"
SAMPLE_IMAGES = "sample_images"  # trace run --samples K: the later generations' images (images/<id>~<k>.png)
SAMPLE_GENERATIONS = "sample_generations"  # and what their generators said of them (GenerationInfo, with sample)
BENCHMARK_DIR = "benchmark"  # where a run's benchmark is rebuilt inside its folder, unless --cases names one
DIAGNOSIS_DIR = "diagnosis"  # and its diagnosis
IMAGE_SUFFIXES = (".png", ".jpg", ".webp")  # a generated image's suffix kept on import; any other becomes .png


class ExportSummary:
    """What an export wrote: its kind, rows, shards and bytes; ``complete``: ``out`` held all of it
    already (a rerun), and was left as it was."""

    def __init__(self, kind: str, rows: int, shards: int, size: int, out: Path, complete: bool = False) -> None:
        self.kind, self.rows, self.shards, self.size, self.out = kind, rows, shards, size, out
        self.complete = complete


def generated_name(case_id: str, embedded: str) -> str:
    """The file a generated image embedded as ``embedded`` is imported as: ``<case id><suffix>``."""
    suffix = Path(embedded).suffix.lower()
    return f"{case_id}{suffix if suffix in IMAGE_SUFFIXES else '.png'}"


class Content:
    """(path, SHA-256) of every file the import writes, per folder (``benchmark``, ``run``), as
    the export embeds it: the card's ``tracebench.content`` (:mod:`._content`)."""

    def __init__(self, *parts: str) -> None:
        self.files: dict[str, dict[str, str]] = {part: {} for part in parts}
        self.trees = hashlib.sha256()  # a diagnosis's trees.jsonl, line by line

    def add(self, part: str, path: str, data: bytes) -> None:
        self.files[part][path] = hashlib.sha256(data).hexdigest()

    def add_file(self, part: str, path: str, source: Path) -> None:
        self.files[part][path] = file_sha256(source)

    def hashes(self) -> dict[str, str]:
        return {part: content_hash(files.items()) for part, files in self.files.items()}


def hf():
    """The ``datasets`` module, or the one-line error naming the extra that brings it."""
    try:
        import datasets
    except ImportError:
        raise TraceError("trace export and trace import need the Hugging Face extra: pip install 'tracebench[hf]' "
                         "(datasets and pyarrow)") from None
    return datasets


def case_features() -> dict[str, Any]:
    datasets = hf()
    return {**features_of(Case), REFERENCE_IMAGES: datasets.List(datasets.Image())}


def run_features(with_trees: bool, samples: bool = False) -> dict[str, Any]:
    datasets = hf()
    features = {**case_features(), GENERATED_IMAGE: datasets.Image(),
                GENERATION: features_of(GenerationInfo),
                VERDICTS_COLUMN: datasets.List(features_of(Verdict))}
    if samples:  # trace run --samples: every later generation, its image and what was said of it
        features[SAMPLE_IMAGES] = datasets.List(datasets.Image())
        features[SAMPLE_GENERATIONS] = datasets.List(features_of(GenerationInfo))
    if with_trees:
        features[TREE] = datasets.Value("string")
        features[NODE_IMAGES] = datasets.List(datasets.Image())
    return features


class _Shards:
    """Parquet shards written a row group at a time, named ``test-NNNNN-of-NNNNN`` when closed."""

    def __init__(self, folder: Path, features: dict[str, Any]) -> None:
        import pyarrow.parquet as pq

        self._pq = pq
        self.folder = folder / "data"
        self.folder.mkdir()
        self.features = hf().Features(features)
        self.schema = self.features.arrow_schema
        self.paths: list[Path] = []
        self.rows = 0
        self.num_bytes = 0  # the rows' size in Arrow, as the card's dataset_info counts it
        self._writer = None
        self._batch: list[dict] = []
        self._where: list[str] = []  # what names each row of the batch in a refusal
        self._bytes = 0  # the batch's image bytes

    def add(self, row: dict, where: str) -> None:
        """Add a row (refused by its ``where`` when the import would refuse it: a cell over the
        import's limits, a row over a row group's bytes)."""
        self._batch.append(row)
        self._where.append(where)
        self._bytes += sum(len(image["bytes"]) for image in _images_of(row))
        if len(self._batch) >= ROWS_PER_GROUP or self._bytes >= _limits.export_row_group_bytes():
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        import pyarrow as pa

        table = pa.Table.from_pylist(self._batch, schema=self.schema)
        where, self._batch, self._where, self._bytes = self._where, [], [], 0
        try:
            _limits.check_cells(table, where[0])
        except TraceError:
            for k, row in enumerate(where):  # the row at fault, by its name
                _limits.check_cells(table.slice(k, 1), row)
            raise
        self._write(table, where)

    def _write(self, table, where: list[str]) -> None:
        """``table`` as row groups of at most :func:`~._limits.export_row_group_bytes` (halved until
        they are; a single row over it is refused)."""
        aim = _limits.export_row_group_bytes()
        if table.nbytes > aim:
            if table.num_rows == 1:
                raise TraceError(f"{where[0]}: a row of {table.nbytes:,} bytes, more than an export's row group "
                                 f"holds ({aim:,}): its images are too large to share this way")
            half = table.num_rows // 2
            self._write(table.slice(0, half), where[:half])
            self._write(table.slice(half), where[half:])
            return
        if self._writer is None:
            self.paths.append(self.folder / f".shard-{len(self.paths):05d}.parquet")
            self._writer = self._pq.ParquetWriter(self.paths[-1], self.schema)
        self._writer.write_table(table, row_group_size=ROWS_PER_GROUP)
        self.rows += table.num_rows
        self.num_bytes += table.nbytes
        if self.paths[-1].stat().st_size >= SHARD_BYTES:
            self._writer.close()
            self._writer = None

    def close(self) -> list[Path]:
        self._flush()
        if self._writer is not None:
            self._writer.close()
        if not self.paths:  # no row: one empty shard, so the dataset still has its columns
            self.paths.append(self.folder / ".shard-00000.parquet")
            self._pq.write_table(self.schema.empty_table(), self.paths[-1])
        named = []
        for k, path in enumerate(self.paths):
            target = self.folder / f"{SPLIT}-{k:05d}-of-{len(self.paths):05d}.parquet"
            os.replace(path, target)
            named.append(target)
        return named


def _images_of(row: dict) -> list[dict]:
    """The image cells of a row (references, generated, samples', nodes')."""
    lists = [row.get(column) or [] for column in (REFERENCE_IMAGES, SAMPLE_IMAGES, NODE_IMAGES)]
    return [image for images in lists for image in images] + ([row[GENERATED_IMAGE]] if row.get(GENERATED_IMAGE) else [])


def _image(folder: Path, relative: str, what: str) -> dict:
    path = inside(folder, relative, what, "folder")
    try:
        return {"bytes": path.read_bytes(), "path": relative}
    except OSError as error:
        raise TraceError(f"{what}: {relative}: cannot be read ({error.strerror or error})") from None


def _case_row(bench: Path, case: Case, sources: Counter) -> dict:
    row = row_of(case)
    sources.update(ref.source_id for ref in case.references)
    row[REFERENCE_IMAGES] = [_image(bench, ref.path, f"{bench}: case {case.id}: reference") for ref in case.references]
    return row


def export_folder(folder: Path, out: Path, *, diagnosis: Path | None = None) -> ExportSummary:
    """Export a benchmark folder (``cases.jsonl``) or a run folder (``run.json``; with
    ``diagnosis``, its diagnosis's trees too) to ``out``, assembled beside it and renamed into
    place when whole (when ``out`` holds that very export already, it is left as it is)."""
    from ._card import CARD_FILE, CardInputs, write_card
    from ._croissant import CroissantInputs, write_croissant

    folder, out = Path(folder), Path(out)
    hf()
    kind = _kind(folder, diagnosis)
    sources: Counter = Counter()  # library image id -> references made of it (the card's licenses)
    staged = Staged(out, CARD_FILE)
    with staged as stage:
        if kind == "benchmark":
            section, shards, bench, sample = _export_benchmark(folder, stage, sources)
        else:
            section, shards, bench, sample = _export_run(folder, stage, diagnosis, sources)
        paths = shards.close()
        size = sum(p.stat().st_size for p in paths)
        facts = write_card(stage, CardInputs(kind=kind, section=section, features=shards.features, rows=shards.rows,
                                             num_bytes=shards.num_bytes, size=size, shards=len(paths), sample=sample,
                                             bench=bench, sources=sources, tool=f"tracebench {__version__}"))
        write_croissant(stage, CroissantInputs(kind=kind, facts=facts, shards=tuple(paths), format=FORMAT,
                                               published=_written_on(folder, kind)))
    return ExportSummary(kind, shards.rows, len(paths), size, out, staged.complete)


def _written_on(folder: Path, kind: str) -> str:
    """The UTC date the exported records were last written (``cases.jsonl``, a run's
    ``verdicts.jsonl``): the export's date of publication, the same on a rerun."""
    from datetime import datetime, timezone

    records = VERDICTS.path(folder) if kind == "run" else CASES.path(folder)
    return datetime.fromtimestamp(records.stat().st_mtime, timezone.utc).date().isoformat()


def _kind(folder: Path, diagnosis: Path | None) -> str:
    if RUN_MANIFEST.path(folder).is_file():
        return "run"
    if not CASES.path(folder).is_file():
        raise TraceError(f"{folder}: neither a benchmark folder (no {CASES.name}) nor a run folder (no "
                         f"{RUN_MANIFEST.name})")
    if diagnosis is not None:
        raise TraceError(f"--diagnosis: {folder} is a benchmark folder; a diagnosis belongs to a run export")
    return "benchmark"


def _export_benchmark(folder: Path, stage: Path, sources: Counter):
    sample = SAMPLE_MANIFEST.read(folder)
    shards = _Shards(stage, case_features())
    content = Content("benchmark")
    _benchmark_files(content, folder, sample)
    for case in read_cases(folder):
        row = _case_row(folder, case, sources)
        shards.add(row, f"{folder}: case {case.id}")
        _row_files(content, row)
    section = {"kind": "benchmark", "format": FORMAT, "manifest": sample.model_dump(mode="json"),
               "cases_hash": file_sha256(CASES.path(folder)), "content": content.hashes()}
    return section, shards, folder, sample


def _benchmark_files(content: Content, bench: Path, sample) -> None:
    content.add_file("benchmark", CASES.name, CASES.path(bench))
    if sample is not None:
        content.add("benchmark", SAMPLE_MANIFEST.name, json_bytes(sample))


def _row_files(content: Content, row: dict) -> None:
    """The files the import writes from ``row``, named as it names them (relative to the benchmark
    folder and to the run folder)."""
    for ref, image in zip(row["references"], row[REFERENCE_IMAGES]):
        content.add("benchmark", ref["path"], image["bytes"])
    if "run" not in content.files:
        return
    case_id, image = row["id"], row[GENERATED_IMAGE]
    if image is not None:
        content.add("run", RunLayout.in_images(generated_name(case_id, image['path'])), image["bytes"])
    infos = [row[GENERATION]] if row[GENERATION] is not None else []
    for info in map(GenerationInfo.model_validate, infos + (row.get(SAMPLE_GENERATIONS) or [])):
        content.add("run", RunLayout.info_name(SampleKey(case_id, info.sample or 0)), json_bytes(info))
    for image in row.get(SAMPLE_IMAGES) or []:
        content.add("run", RunLayout.in_images(Path(image['path']).name), image["bytes"])
    for image in row.get(NODE_IMAGES) or []:
        content.add("run", f"{DIAGNOSIS_DIR}/{image['path']}", image["bytes"])
    if row.get(TREE) is not None:
        content.trees.update((row[TREE] + "\n").encode())


def _export_run(run_dir: Path, stage: Path, diagnosis: Path | None, sources: Counter):
    from ..run import stream_run

    stream = stream_run(run_dir)
    manifest, bench = stream.manifest, stream.cases_dir
    sample = SAMPLE_MANIFEST.read(bench) if SAMPLE_MANIFEST.path(bench).is_file() else None
    section: dict[str, Any] = {"kind": "run", "format": FORMAT, "run": manifest.model_dump(mode="json"),
                               "manifest": None if sample is None else sample.model_dump(mode="json"),
                               "verdicts_hash": file_sha256(VERDICTS.path(run_dir))}
    content = Content("benchmark", "run")
    _benchmark_files(content, bench, sample)
    content.add("run", RUN_MANIFEST.name, json_bytes(manifest))
    content.add_file("run", VERDICTS.name, VERDICTS.path(run_dir))
    trees = nodes = None
    if diagnosis is not None:
        trees, nodes = _diagnosis_section(section, content, Path(diagnosis), run_dir, manifest)
    shards = _Shards(stage, run_features(trees is not None, bool(manifest.samples)))
    verdicts = _by_case(iter(stream), run_dir)
    for case in read_cases(bench):
        row = _run_row(bench, run_dir, case, sources, manifest, verdicts.take(case.id))
        if trees is not None:
            tree = trees.get(case.id)
            row[TREE], row[NODE_IMAGES] = (None, []) if tree is None else nodes.tree(tree)
        shards.add(row, f"{run_dir}: case {case.id}")
        _row_files(content, row)
    verdicts.finish()
    if nodes is not None:
        section["rounds"] = nodes.manifests
        for name, data in nodes.manifests.items():
            content.add("run", f"{DIAGNOSIS_DIR}/{name}/{RUN_MANIFEST.name}", json_bytes(RunManifest.model_validate(data)))
        content.files["run"][f"{DIAGNOSIS_DIR}/{TREES.name}"] = content.trees.hexdigest()
    section["content"] = content.hashes()
    return section, shards, bench, sample


def _run_row(bench: Path, run_dir: Path, case: Case, sources: Counter, manifest, verdicts: Iterable[Verdict]) -> dict:
    from ..run import generated_image

    row = _case_row(bench, case, sources)
    image = generated_image(run_dir, case.id)
    row[GENERATED_IMAGE] = None if image is None else _image(run_dir, RunLayout.in_images(image.name),
                                                             f"{run_dir}: case {case.id}: generated image")
    layout = RunLayout(run_dir)
    info = layout.read_info(SampleKey(case.id))
    row[GENERATION] = None if info is None else row_of(info)
    row[VERDICTS_COLUMN] = [row_of(v) for v in verdicts]
    if manifest.samples:
        found = [(k, generated_image(run_dir, case.id, k)) for k in range(1, manifest.samples)]
        row[SAMPLE_IMAGES] = [_image(run_dir, RunLayout.in_images(path.name),
                                     f"{run_dir}: case {case.id}: sample {k}'s image") for k, path in found if path]
        row[SAMPLE_GENERATIONS] = [row_of(info) for k in range(1, manifest.samples)
                                   if (info := layout.read_info(SampleKey(case.id, k)))]
    return row


def _diagnosis_section(section: dict, content: Content, diagnosis: Path, run_dir: Path, manifest):
    """The diagnosis's part of the card (its manifest and summary) and of the content; its trees
    by case and the node images' namer."""
    from ..run import RecordIndex

    identity = DIAGNOSIS_MANIFEST.read(diagnosis)
    if identity.cases_hash != manifest.cases_hash or identity.generator != manifest.generator \
            or identity.judges != manifest.judges:
        raise TraceError(f"--diagnosis {diagnosis}: a diagnosis of run {identity.run_dir}, not of {run_dir}")
    summary = SUMMARY.read(diagnosis)
    section["diagnosis"] = identity.model_dump(mode="json")
    section["summary"] = summary.model_dump(mode="json")
    content.add("run", f"{DIAGNOSIS_DIR}/{DIAGNOSIS_MANIFEST.name}", json_bytes(identity))
    content.add("run", f"{DIAGNOSIS_DIR}/{SUMMARY.name}", json_bytes(summary))
    return RecordIndex(TREES, diagnosis, lambda tree: tree.case_id), _NodeImages(diagnosis, run_dir)


NODE_FOLDER = re.compile(r"(rounds/[0-9]+/run(-[0-9]+)?|external/[0-9]+)")  # where a dataset puts node images' run
# folders: ASCII digits only (\d would take Arabic-Indic and other digits, folder names no run has)


class _NodeImages:
    """Node images named as the dataset holds them, relative to the diagnosis folder it becomes:
    a round's images where they are (``rounds/03/run/images/...``), the diagnosed run's own image
    of a root as the imported run's (``../images/<id>.png``, not embedded twice), and images of
    other run folders (the shards' rounds of a merged diagnosis) under ``external/<k>/images/``.
    Only generated images of run folders are taken, as the report shows them; each run folder's
    ``run.json`` goes to the card (``rounds``), so the images are a run's again once imported."""

    def __init__(self, diagnosis: Path, run_dir: Path) -> None:
        self.diagnosis, self.run = diagnosis.resolve(), run_dir.resolve()
        self.folders: dict[Path, str] = {}  # a node images' run folder -> its name in the dataset
        self.manifests: dict[str, dict] = {}

    def _name(self, image: str) -> tuple[str, Path | None]:
        """(the name the tree gives the image in the dataset, the file to embed or None)."""
        path = Path(image) if Path(image).is_absolute() else self.diagnosis / image
        try:
            path = path.resolve()
        except (OSError, RuntimeError):
            return image, None
        folder = path.parent.parent
        if not (path.is_file() and path.parent.name == IMAGES_DIR and RUN_MANIFEST.path(folder).is_file()):
            return image, None  # gone, or no run's image: the tree keeps its word, nothing is embedded
        if folder == self.run:
            return f"../{RunLayout.in_images(path.name)}", None
        name = self.folders.get(folder)
        if name is None:
            try:
                name = folder.relative_to(self.diagnosis).as_posix()
            except ValueError:
                name = None
            if name is None or not NODE_FOLDER.fullmatch(name):
                name = f"external/{sum(1 for n in self.folders.values() if n.startswith('external/')) + 1}"
            self.folders[folder] = name
            self.manifests[name] = RUN_MANIFEST.read(folder).model_dump(mode="json")
        return f"{name}/{RunLayout.in_images(path.name)}", path

    def tree(self, tree) -> tuple[str, list[dict]]:
        """The tree's line with its node images renamed, and the images to embed (each once)."""
        embedded: dict[str, dict] = {}

        def renamed(image: str | None) -> str | None:
            if not image:
                return image
            name, path = self._name(image)
            if path is not None and name not in embedded:
                embedded[name] = {"bytes": path.read_bytes(), "path": name}
            return name

        nodes = tuple(node.model_copy(update={"image": renamed(node.image),
                                              "sample_images": tuple(map(renamed, node.sample_images))})
                      for node in tree.nodes)
        return record_line(tree.model_copy(update={"nodes": nodes})).rstrip("\n"), list(embedded.values())


class _by_case:
    """A run's stream of verdicts taken case by case in the benchmark's order (the order every
    finished run writes); a case without verdicts (left out, another shard) takes none."""

    def __init__(self, stream: Iterator, run_dir: Path) -> None:
        self.stream, self.run_dir = stream, run_dir
        self.next = next(self.stream, None)

    def take(self, case_id: str) -> Iterable[Verdict]:
        if self.next is None or self.next.case.id != case_id:
            return ()
        verdicts, self.next = self.next.verdicts, next(self.stream, None)
        return verdicts

    def finish(self) -> None:
        if self.next is not None:
            raise TraceError(f"{self.run_dir}: {self.next.case.id}'s verdicts are out of the benchmark's order (an "
                             f"unfinished run: finish it with the same trace run command, then export)")

