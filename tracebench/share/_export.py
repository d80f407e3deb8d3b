"""``trace export``: a benchmark or a run folder as a Hugging Face dataset folder.

What is written is what the Hub serves: ``data/test-NNNNN-of-NNNNN.parquet`` (one row per case,
every field of the case record as a column, its reference images embedded with the ``datasets``
Image feature, the checklist a list of structs; a run adds the generated image, what the
generator said of it and every verdict with each judge's answer and reason; ``--diagnosis``
adds each case's tree and its node images) and ``README.md``, the dataset card whose YAML
header the Hub and ``datasets.load_dataset`` read (configs, features, license, citation) and
whose ``tracebench`` section holds the folder's manifests, so :func:`import_dataset` rebuilds
the folder byte for byte. Nothing here talks to the network.

Rows are written a hundred at a time (one parquet row group), so memory does not grow with the
benchmark; a shard is closed once it passes :data:`SHARD_BYTES` (the Hub's habit, 500 MB).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import __version__
from ..errors import TraceError
from ..jsonfiles import record_line
from ..cache import file_sha256
from ..run import IMAGES_DIR
from ..records import (CASES, DIAGNOSIS_MANIFEST, RUN_MANIFEST, SAMPLE_MANIFEST, SUMMARY, TREES, VERDICTS, Case,
                       GenerationInfo, Verdict, read_cases, read_generation_info)
from ..safepaths import inside
from ._features import features_of, row_of

__all__ = ["ExportSummary", "export_folder", "SPLIT", "SHARD_BYTES", "ROWS_PER_GROUP", "FORMAT"]

SPLIT = "test"  # a benchmark is evaluated on, never trained on: its one split is the test split
SHARD_BYTES = 500 * 1000 * 1000
ROWS_PER_GROUP = 100
FORMAT = 1  # the layout of the rows and of the card's tracebench section
REFERENCE_IMAGES = "reference_images"
GENERATED_IMAGE = "generated_image"
GENERATION = "generation"
VERDICTS_COLUMN = "verdicts"
TREE = "diagnosis_tree"
NODE_IMAGES = "node_images"
SAMPLE_IMAGES = "sample_images"  # trace run --samples K: the later generations' images (images/<id>~<k>.png)
SAMPLE_GENERATIONS = "sample_generations"  # and what their generators said of them (GenerationInfo, with sample)


class ExportSummary:
    """What an export wrote: its kind, rows, shards and bytes."""

    def __init__(self, kind: str, rows: int, shards: int, size: int, out: Path) -> None:
        self.kind, self.rows, self.shards, self.size, self.out = kind, rows, shards, size, out


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

    def add(self, row: dict) -> None:
        self._batch.append(row)
        if len(self._batch) >= ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._batch:
            return
        import pyarrow as pa

        table = pa.Table.from_pylist(self._batch, schema=self.schema)
        self._batch = []
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
    place when whole."""
    from ..library import staged_output
    from ._card import write_card

    folder, out = Path(folder), Path(out)
    hf()
    if RUN_MANIFEST.path(folder).is_file():
        kind = "run"
    elif CASES.path(folder).is_file():
        kind = "benchmark"
        if diagnosis is not None:
            raise TraceError(f"--diagnosis: {folder} is a benchmark folder; a diagnosis belongs to a run export")
    else:
        raise TraceError(f"{folder}: neither a benchmark folder (no {CASES.name}) nor a run folder (no "
                         f"{RUN_MANIFEST.name})")
    sources: Counter = Counter()  # library image id -> references made of it (the card's licenses)
    with staged_output(out) as stage:
        if kind == "benchmark":
            sample = SAMPLE_MANIFEST.read(folder)
            shards = _Shards(stage, case_features())
            for case in read_cases(folder):
                shards.add(_case_row(folder, case, sources))
            section = {"kind": kind, "format": FORMAT, "manifest": sample.model_dump(mode="json"),
                       "cases_hash": file_sha256(CASES.path(folder))}
            bench = folder
        else:
            section, shards, bench, sample = _export_run(folder, stage, diagnosis, sources)
        paths = shards.close()
        size = sum(p.stat().st_size for p in paths)
        write_card(stage, kind=kind, section=section, features=shards.features, rows=shards.rows,
                   num_bytes=shards.num_bytes, size=size, shards=len(paths), sample=sample, bench=bench,
                   sources=sources, tool=f"tracebench {__version__}")
    return ExportSummary(kind, shards.rows, len(paths), size, out)


def _export_run(run_dir: Path, stage: Path, diagnosis: Path | None, sources: Counter):
    from ..run import generated_image, stream_run

    stream = stream_run(run_dir)
    manifest, bench = stream.manifest, stream.cases_dir
    sample = SAMPLE_MANIFEST.read(bench) if SAMPLE_MANIFEST.path(bench).is_file() else None
    section: dict[str, Any] = {"kind": "run", "format": FORMAT, "run": manifest.model_dump(mode="json"),
                               "manifest": None if sample is None else sample.model_dump(mode="json"),
                               "verdicts_hash": file_sha256(VERDICTS.path(run_dir))}
    trees = nodes = None
    if diagnosis is not None:
        from ..run import RecordIndex

        identity = DIAGNOSIS_MANIFEST.read(diagnosis)
        if identity.cases_hash != manifest.cases_hash or identity.generator != manifest.generator \
                or identity.judges != manifest.judges:
            raise TraceError(f"--diagnosis {diagnosis}: a diagnosis of run {identity.run_dir}, not of {run_dir}")
        trees = RecordIndex(TREES, diagnosis, lambda tree: tree.case_id)
        nodes = _NodeImages(Path(diagnosis), run_dir)
        section["diagnosis"] = identity.model_dump(mode="json")
        section["summary"] = SUMMARY.read(diagnosis).model_dump(mode="json")
    shards = _Shards(stage, run_features(trees is not None, bool(manifest.samples)))
    verdicts = _by_case(iter(stream), run_dir)
    for case in read_cases(bench):
        row = _case_row(bench, case, sources)
        image = generated_image(run_dir, case.id)
        row[GENERATED_IMAGE] = None if image is None else _image(run_dir, f"{IMAGES_DIR}/{image.name}",
                                                                 f"{run_dir}: case {case.id}: generated image")
        info = read_generation_info(run_dir / IMAGES_DIR, case.id)
        row[GENERATION] = None if info is None else row_of(info)
        row[VERDICTS_COLUMN] = [row_of(v) for v in verdicts.take(case.id)]
        if manifest.samples:
            found = [(k, generated_image(run_dir, case.id, k)) for k in range(1, manifest.samples)]
            row[SAMPLE_IMAGES] = [_image(run_dir, f"{IMAGES_DIR}/{path.name}",
                                         f"{run_dir}: case {case.id}: sample {k}'s image") for k, path in found if path]
            row[SAMPLE_GENERATIONS] = [row_of(info) for k in range(1, manifest.samples)
                                       if (info := read_generation_info(run_dir / IMAGES_DIR, case.id, k))]
        if trees is not None:
            tree = trees.get(case.id)
            row[TREE], row[NODE_IMAGES] = (None, []) if tree is None else nodes.tree(tree)
        shards.add(row)
    verdicts.finish()
    if nodes is not None:
        section["rounds"] = nodes.manifests
    return section, shards, bench, sample


NODE_FOLDER = re.compile(r"(rounds/\d+/run(-\d+)?|external/\d+)")  # where a dataset puts node images' run folders


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
            return f"../{IMAGES_DIR}/{path.name}", None
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
        return f"{name}/{IMAGES_DIR}/{path.name}", path

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

