"""``trace import``: the folder a dataset of ``trace export`` was made from, rebuilt.

A benchmark export becomes a benchmark folder whose ``cases.jsonl``, references and
``manifest.json`` are the original's bytes; a run export becomes a run folder (``run.json``,
``verdicts.jsonl``, ``images/``) beside its benchmark (``RUN/benchmark`` unless ``--cases``
names one), and its diagnosis, when it was exported with one, ``RUN/diagnosis``. Every row is
checked as the folder's readers check their files, each problem one line naming the shard, the
row and the field; nothing is written unless the whole dataset reads (the folders are assembled
beside their destination and renamed into place at the end), and every file written must have
the bytes the card's ``tracebench.content`` hashes. What is read is bounded before it is trusted
(:mod:`._limits`): the card by its size, each shard by its footer, each row group's cells before
they become Python objects. A rerun over a complete output finds it complete (:class:`Staged`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError

from ..cache import file_sha256
from ..errors import TraceError
from ..jsonfiles import problems_of, record_line, write_json
from ..records import (CASES, DIAGNOSIS_MANIFEST, IMAGES_DIR, RUN_MANIFEST, SAMPLE_MANIFEST, SAMPLE_SEPARATOR, SUMMARY,
                       TREES, VERDICTS, Case, DiagnosisManifest, DiagnosisSummary, DiagnosticTree, GenerationInfo,
                       RunLayout, RunManifest, SampleKey, SampleManifest, Verdict, case_problem, read_cases)
from ..safepaths import inside
from . import _limits
from ._card import CARD_FILE, read_card
from ._content import Staged, content_hash, folder_files
from ._export import (BENCHMARK_DIR, DIAGNOSIS_DIR, FORMAT, GENERATED_IMAGE, GENERATION, IMAGE_SUFFIXES,
                      NODE_FOLDER, NODE_IMAGES, REFERENCE_IMAGES, SAMPLE_GENERATIONS, SAMPLE_IMAGES, SPLIT, TREE,
                      VERDICTS_COLUMN, case_features, generated_name, hf, run_features)

__all__ = ["ImportSummary", "import_dataset", "BENCHMARK_DIR", "DIAGNOSIS_DIR"]

_SUFFIXES = IMAGE_SUFFIXES
ROWS_PER_BATCH = 16  # rows read, checked and made Python objects at a time (of row groups the footer bounds)
NODE_FILE = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._~-]{0,254}")  # a node image's file: a (sample's) image name


class ImportSummary:
    """What an import wrote; ``complete``: ``out`` held all of it already (a rerun), left as it was."""

    def __init__(self, kind: str, cases: int, out: Path, cases_dir: Path, verdicts: int = 0,
                 diagnosis: Path | None = None, complete: bool = False) -> None:
        self.kind, self.cases, self.out, self.cases_dir = kind, cases, out, cases_dir
        self.verdicts, self.diagnosis, self.complete = verdicts, diagnosis, complete


def _record(model: type[BaseModel], data: Any, where: str):
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise TraceError(f"{where}: {problems_of(error, model)[0][1]}") from None


def _rows(folder: Path, features: dict[str, Any]) -> Iterator[tuple[str, dict]]:
    """(where, row) of every row of the split's shards, in order: ``data/test-00000-of-00002.parquet: row 7``.
    Each shard's footer is checked first (its columns must be ``features``), each row group's
    cells before they become Python objects (:mod:`._limits`)."""
    import pyarrow as pa

    schema = hf().Features(features).arrow_schema
    for shard in _shards(folder):
        name = shard.relative_to(folder)
        try:
            yield from _shard_rows(shard, name, schema)
        except (pa.ArrowException, OSError) as error:
            raise TraceError(f"{name}: not a readable parquet file ({str(error).splitlines()[0]})") from None


def _shards(folder: Path) -> list[Path]:
    shards = sorted((folder / "data").glob(f"{SPLIT}-*.parquet"))
    if not shards:
        raise TraceError(f"{folder}: no data/{SPLIT}-*.parquet shard; not a dataset folder of trace export")
    expected = [f"{SPLIT}-{k:05d}-of-{len(shards):05d}.parquet" for k in range(len(shards))]
    if [p.name for p in shards] != expected:
        missing = sorted(set(expected) - {p.name for p in shards}) or [p.name for p in shards if p.name not in expected]
        raise TraceError(f"{folder}/data: the shards are not {SPLIT}-00000-of-{len(shards):05d} ... in sequence "
                         f"(a shard missing or foreign: {missing[0]})")
    for shard in shards:
        if not shard.is_file():  # a pipe would block the read, a device never end it
            raise TraceError(f"{shard.relative_to(folder)}: not a regular file")
    return shards


def _shard_rows(shard: Path, name: Path, schema) -> Iterator[tuple[str, dict]]:
    """The shard's rows, :data:`ROWS_PER_BATCH` at a time, its column chunks read through a buffer
    (never loaded whole): each batch's cells are checked before they become Python objects."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _limits.check_footer(shard, name)
    parquet = pq.ParquetFile(shard, buffer_size=_limits.READ_BUFFER_BYTES, pre_buffer=False)
    _limits.check_shard(parquet, name, schema)
    n = 0
    for batch in parquet.iter_batches(batch_size=ROWS_PER_BATCH):
        _limits.check_cells(pa.Table.from_batches([batch]), f"{name}: rows {n + 1}-{n + batch.num_rows}")
        for row in batch.to_pylist():
            n += 1
            yield f"{name}: row {n}", row


def _image_bytes(image: Any, where: str) -> bytes:
    """The bytes of an Image cell ({bytes, path}); anything else is one line naming the cell."""
    if not isinstance(image, dict) or not isinstance(image.get("bytes"), bytes):
        raise TraceError(f"{where}: no image bytes (an image stored by path only cannot be rebuilt)")
    return image["bytes"]


def _write_new(folder: Path, relative: str, data: bytes, where: str, what: str) -> None:
    """``data`` as the new file ``relative`` in ``folder``: a path leaving it, or naming a folder
    or a file the import wrote already, is one line (``where``: the row and field that gave it)."""
    target = inside(folder, relative, where, what)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as handle:
            handle.write(data)
    except (FileExistsError, IsADirectoryError, NotADirectoryError):
        shown = relative if len(relative) <= 200 else relative[:200] + "..."
        raise TraceError(f"{where}: {shown!r}: names a folder, or a file the import writes already") from None


class _Benchmark:
    """A benchmark folder written row by row: references once each (the same bytes wherever a
    path repeats), ``cases.jsonl`` line by line, the manifest at the end."""

    _OWN = (CASES.name, SAMPLE_MANIFEST.name)  # the folder's own files: no reference's path

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "references").mkdir(parents=True, exist_ok=True)
        self.written: dict[str, int] = {}  # reference path -> hash of its bytes
        self.ids: set[str] = set()
        self.handle = open(CASES.path(root), "w", encoding="utf-8", newline="\n")
        self.cases = 0

    def add(self, row: dict, where: str) -> Case:
        case = _record(Case, {name: row[name] for name in Case.model_fields}, where)
        problem = case_problem(case)
        if problem:
            raise TraceError(f"{where}: {problem}")
        if case.id in self.ids:
            raise TraceError(f"{where}: id: case {case.id!r} appears twice")
        self.ids.add(case.id)
        images = row[REFERENCE_IMAGES] or []
        if len(images) != len(case.references):
            raise TraceError(f"{where}: {REFERENCE_IMAGES}: {len(images)} images for {len(case.references)} references")
        for k, (ref, image) in enumerate(zip(case.references, images)):
            self._reference(ref.path, _image_bytes(image, f"{where}: {REFERENCE_IMAGES}[{k}]"), where, k)
        self.handle.write(record_line(case))
        self.cases += 1
        return case

    def _reference(self, path: str, data: bytes, where: str, k: int) -> None:
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        if path in self.written:
            if self.written[path] != digest:
                raise TraceError(f"{where}: {REFERENCE_IMAGES}[{k}]: other bytes than an earlier row's for {path}")
            return
        what = f"{where}: references[{k}].path"
        parts = PurePosixPath(path).parts
        if not parts or parts[0] in self._OWN:
            raise TraceError(f"{what}: {path!r}: names the benchmark folder or its own {' or '.join(self._OWN)}")
        _write_new(self.root, path, data, what, "benchmark folder")
        self.written[path] = digest

    def close(self, manifest: dict | None, card: Path) -> None:
        self.handle.close()
        if manifest is not None:
            SAMPLE_MANIFEST.write(self.root, _record(SampleManifest, manifest, f"{card}: tracebench.manifest"))


def import_dataset(folder: Path, out: Path, *, cases_dir: Path | None = None) -> ImportSummary:
    """Rebuild the benchmark or run folder a dataset folder of ``trace export`` was made from."""
    folder, out = Path(folder), Path(out)
    hf()
    if not folder.is_dir():
        raise TraceError(f"{folder}: not a folder (give the dataset folder: a trace export's --out, or a copy of "
                         f"it downloaded from the Hub)")
    section = read_card(folder)
    _check_section(section, folder / CARD_FILE)
    if section["kind"] == "benchmark":
        return _import_benchmark(folder, out, section, cases_dir)
    return _import_run(folder, out, section, cases_dir)


def _check_section(section: dict, card: Path) -> None:
    """The card's format, and its content hashes (one for each folder the import writes)."""
    if section.get("format") == 1:
        raise TraceError(f"{card}: tracebench.format 1: an export of an older tracebench, whose card does not hash "
                         f"its images; export the folder again with this tracebench (trace export)")
    if section.get("format") != FORMAT:
        raise TraceError(f"{card}: tracebench.format {section.get('format')!r}: this tracebench reads format {FORMAT}")
    content = section.get("content")
    parts = ("benchmark",) if section["kind"] == "benchmark" else ("benchmark", "run")
    if not isinstance(content, dict) or not all(isinstance(content.get(part), str) for part in parts):
        raise TraceError(f"{card}: tracebench.content: expected the SHA-256 of every file of the "
                         f"{' and the '.join(parts)} folder")


def _check_content(root: Path, section: dict, part: str, card: Path, skip: str | None = None) -> None:
    """Refuse the files written in ``root`` unless they are those ``tracebench.content.PART`` hashes."""
    if content_hash(folder_files(root, skip)) != section["content"][part]:
        raise TraceError(f"{card}: the files the rows rebuild differ from tracebench.content.{part} (an image, a "
                         f"record or a line other than the ones exported, or a file more or less)")


def _same(path: Path, digest: object, message: str) -> None:
    """A TraceError with ``message`` unless ``path``'s SHA-256 is ``digest``."""
    if not isinstance(digest, str) or file_sha256(path) != digest:
        raise TraceError(message)


def _import_benchmark(folder: Path, out: Path, section: dict, cases_dir: Path | None) -> ImportSummary:
    card = folder / CARD_FILE
    if cases_dir is not None:
        raise TraceError("--cases: the dataset is a benchmark; --out is where it is rebuilt")
    staged = Staged(out, CASES.name)
    with staged as root:
        bench = _Benchmark(root)
        for where, row in _rows(folder, case_features()):
            bench.add(row, where)
        bench.close(section.get("manifest"), card)
        _same(CASES.path(root), section.get("cases_hash"), f"{card}: the rows do not rebuild the benchmark exported "
                                                            f"(their {CASES.name} differs from tracebench.cases_hash: "
                                                            f"rows missing, added or moved)")
        _check_content(root, section, "benchmark", card)
    return ImportSummary("benchmark", bench.cases, out, out, complete=staged.complete)


def _benchmark_place(out: Path, cases_dir: Path | None, manifest: RunManifest) -> tuple[Path, bool]:
    """Where a run's benchmark goes, and whether ``--cases`` holds it already (reused)."""
    final_bench = (Path(cases_dir) if cases_dir is not None else out / BENCHMARK_DIR).absolute()
    if cases_dir is not None and final_bench.resolve().is_relative_to(out.absolute().resolve()):
        raise TraceError(f"--cases {cases_dir}: inside --out {out}; leave --cases out to rebuild the benchmark in "
                         f"{out / BENCHMARK_DIR}, or give a folder beside it")
    reuse = cases_dir is not None and CASES.path(cases_dir).is_file()
    if reuse and file_sha256(CASES.path(cases_dir)) != manifest.cases_hash:
        raise TraceError(f"--cases {cases_dir}: not the benchmark this run was made from (its {CASES.name} differs)")
    return final_bench, reuse


def _import_run(folder: Path, out: Path, section: dict, cases_dir: Path | None) -> ImportSummary:
    from ..library import staged_output

    card = folder / CARD_FILE
    manifest = _record(RunManifest, section.get("run"), f"{card}: tracebench.run")
    final_bench, reuse = _benchmark_place(out, cases_dir, manifest)
    diagnosis = "diagnosis" in section
    staged = Staged(out, RUN_MANIFEST.name)
    with ExitStack() as stack:
        root = stack.enter_context(staged)
        bench = None
        if not reuse:
            bench = _Benchmark(root / BENCHMARK_DIR if cases_dir is None else stack.enter_context(staged_output(cases_dir)))
        run = _Run(root, manifest, diagnosis, stack)
        given = read_cases(Path(cases_dir)) if reuse else None  # a reused benchmark: row i must be its case i
        for where, row in _rows(folder, run_features(diagnosis, bool(manifest.samples))):
            run.add(row, _case_of(row, where, bench, given, cases_dir), where)
        if given is not None and next(given, None) is not None:
            raise TraceError(f"{card}: fewer rows than --cases {cases_dir} holds cases (the rows and the benchmark "
                             f"differ)")
        run.close(section.get("verdicts_hash"), card)
        if bench is not None:
            _close_benchmark(bench, section, card, manifest)
        _finish_run(root, section, card, manifest, final_bench, out)
    return ImportSummary("run", run.judged, out, final_bench, run.written, out / DIAGNOSIS_DIR if diagnosis else None,
                         complete=staged.complete)


def _case_of(row: dict, where: str, bench: _Benchmark | None, given: Iterator[Case] | None, cases_dir) -> Case:
    """The row's case: written into the benchmark being rebuilt, or the reused benchmark's case at its place."""
    if bench is not None:
        return bench.add(row, where)
    case = _record(Case, {name: row[name] for name in Case.model_fields}, where)
    if case != next(given, None):
        raise TraceError(f"{where}: case {case.id} is not the case at this place in --cases {cases_dir} (the rows "
                         f"and the benchmark differ)")
    return case


def _close_benchmark(bench: _Benchmark, section: dict, card: Path, manifest: RunManifest) -> None:
    bench.close(section.get("manifest"), card)
    if file_sha256(CASES.path(bench.root)) != manifest.cases_hash:
        raise TraceError(f"{card}: the rows do not rebuild the benchmark the run was made from (the {CASES.name} "
                         f"they give differs from tracebench.run.cases_hash)")
    _check_content(bench.root, section, "benchmark", card)


def _finish_run(root: Path, section: dict, card: Path, manifest: RunManifest, final_bench: Path, out: Path) -> None:
    """The run's and its diagnosis's manifests, written as the source had them (the bytes
    ``tracebench.content.run`` hashes) and checked with every other file of the run; then with
    the folders they now name."""
    RUN_MANIFEST.write(root, manifest)
    identity = _diagnosis_files(section, card, root / DIAGNOSIS_DIR) if "diagnosis" in section else None
    _check_content(root, section, "run", card, skip=BENCHMARK_DIR)
    RUN_MANIFEST.write(root, manifest.model_copy(update={"cases_dir": str(final_bench)}))
    if identity is not None:
        DIAGNOSIS_MANIFEST.write(root / DIAGNOSIS_DIR, identity.model_copy(update={"run_dir": str(out.absolute()),
                                                                                   "cases_dir": str(final_bench)}))


class _Run:
    """A run folder written row by row: ``verdicts.jsonl`` and (a diagnosis) ``trees.jsonl`` line
    by line, each row's images and generation records as it is read."""

    def __init__(self, root: Path, manifest: RunManifest, diagnosis: bool, stack: ExitStack) -> None:
        self.root, self.manifest, self.images = root, manifest, RunLayout(root).images
        self.images.mkdir()
        self.verdicts = stack.enter_context(open(VERDICTS.path(root), "w", encoding="utf-8", newline="\n"))
        self.diag, self.trees = root / DIAGNOSIS_DIR, None
        if diagnosis:
            self.diag.mkdir()
            self.trees = stack.enter_context(open(TREES.path(self.diag), "w", encoding="utf-8", newline="\n"))
        self.cases = self.written = self.judged = 0

    def add(self, row: dict, case: Case, where: str) -> None:
        self.cases += 1
        self._verdicts(row, case, where)
        self._generation(row, case, where)
        if self.manifest.samples:
            _sample_files(row, where, self.images, case.id, self.manifest.samples)
        if self.trees is not None and row[TREE] is not None:
            self.trees.write(_tree_line(row, where, self.diag, case.id))

    def _verdicts(self, row: dict, case: Case, where: str) -> None:
        asked = {q.id for q in case.checklist}
        samples = self.manifest.samples or 1
        seen: set[tuple[str, int | None]] = set()
        for k, data in enumerate(row[VERDICTS_COLUMN] or []):
            what = f"{where}: {VERDICTS_COLUMN}[{k}]"
            verdict = _record(Verdict, data, what)
            if verdict.case_id != case.id or verdict.question_id not in asked:
                raise TraceError(f"{what}: a verdict on {verdict.case_id}'s question {verdict.question_id!r}, not "
                                 f"one case {case.id} asks")
            if (verdict.sample or 0) >= samples:
                raise TraceError(f"{what}.sample: {verdict.sample}, but the run made {samples} samples a case")
            if (verdict.question_id, verdict.sample) in seen:
                sample = f" of sample {verdict.sample}" if verdict.sample else ""
                raise TraceError(f"{what}: question {verdict.question_id!r}{sample} twice")
            seen.add((verdict.question_id, verdict.sample))
            self.verdicts.write(record_line(verdict))
            self.written += 1
        self.judged += bool(seen)

    def _generation(self, row: dict, case: Case, where: str) -> None:
        """The generated image and what the generator said of it."""
        image = row[GENERATED_IMAGE]
        if image is not None:
            data = _image_bytes(image, f"{where}: {GENERATED_IMAGE}")
            name = generated_name(case.id, str(image.get("path") or ""))
            _write_new(self.images, name, data, f"{where}: {GENERATED_IMAGE}", "run folder")
        if row[GENERATION] is None:
            return
        info = _record(GenerationInfo, row[GENERATION], f"{where}: {GENERATION}")
        if info.case_id != case.id:
            raise TraceError(f"{where}: {GENERATION}.case_id: {info.case_id!r}, not the row's case {case.id}")
        if info.sample:  # the first generation's record; a later one's is in sample_generations
            raise TraceError(f"{where}: {GENERATION}.sample: {info.sample}, but the column holds the first "
                             f"generation's record ({SAMPLE_GENERATIONS} the later ones')")
        write_json(RunLayout(self.root).info(SampleKey(case.id)), info)

    def close(self, verdicts_hash: object, card: Path) -> None:
        self.verdicts.close()
        _same(VERDICTS.path(self.root), verdicts_hash,
              f"{card}: the rows do not rebuild the run's verdicts.jsonl (it differs from tracebench.verdicts_hash: "
              f"verdicts missing, added or changed)")
        if self.trees is not None:
            self.trees.close()


def _sample_files(row: dict, where: str, images: Path, case_id: str, samples: int) -> None:
    """The later samples' images and generation records of a row (``trace run --samples``), written
    where the run holds them (``images/<case id>~<k>.png``); a name that is not one is refused."""
    given: dict[int, int] = {}  # sample -> the entry that gave its image (one image a sample)
    for k, image in enumerate(row[SAMPLE_IMAGES] or []):
        what = f"{where}: {SAMPLE_IMAGES}[{k}]"
        data = _image_bytes(image, what)
        name = Path(str(image.get("path") or "")).name
        stem, suffix = name.rsplit(".", 1) if "." in name else (name, "")
        # the index as the run names it (SampleKey.parse: ASCII digits, no leading zero): "~01" or "~١"
        # would be written under a name no reader of the run folder looks for
        key = SampleKey.parse(stem) or SampleKey("")
        index = key.sample
        if key.case_id != case_id or not 1 <= index < samples or f".{suffix}" not in _SUFFIXES:
            raise TraceError(f"{what}: {name!r} is not the image of a later sample of case {case_id} "
                             f"({case_id}{SAMPLE_SEPARATOR}K.png, K from 1 to {samples - 1})")
        if index in given:
            raise TraceError(f"{what}: sample {index} of case {case_id} has an image already "
                             f"({SAMPLE_IMAGES}[{given[index]}])")
        given[index] = k
        _write_new(images, name, data, what, "run folder")
    said: dict[int, int] = {}  # sample -> the entry that gave its generation record
    for k, data in enumerate(row[SAMPLE_GENERATIONS] or []):
        what = f"{where}: {SAMPLE_GENERATIONS}[{k}]"
        info = _record(GenerationInfo, data, what)
        if info.case_id != case_id or not info.sample or info.sample >= samples:
            raise TraceError(f"{what}: case {info.case_id!r} sample {info.sample}, not a later sample of the row's "
                             f"case {case_id}")
        if info.sample in said:
            raise TraceError(f"{what}: sample {info.sample} of case {case_id} has a generation record already "
                             f"({SAMPLE_GENERATIONS}[{said[info.sample]}])")
        said[info.sample] = k
        write_json(RunLayout(images.parent).info(SampleKey(case_id, info.sample)), info)


def _tree_line(row: dict, where: str, diag: Path, case_id: str) -> str:
    """A tree read back from its row (its node images named as the dataset holds them, relative to
    the diagnosis folder), its node images written where it names them."""
    from ..jsonfiles import loads

    try:
        data = loads(row[TREE])
    except (TypeError, ValueError) as error:
        raise TraceError(f"{where}: {TREE}: not JSON ({error})") from None
    tree = _record(DiagnosticTree, data, f"{where}: {TREE}")
    if tree.case_id != case_id:
        raise TraceError(f"{where}: {TREE}: the tree of {tree.case_id}, not of the row's case {case_id}")
    for k, image in enumerate(row[NODE_IMAGES] or []):
        what = f"{where}: {NODE_IMAGES}[{k}]"
        data = _image_bytes(image, what)
        name = str(image.get("path") or "")
        folder, _, file = name.rpartition(f"/{IMAGES_DIR}/")
        if not NODE_FOLDER.fullmatch(folder) or not NODE_FILE.fullmatch(file):
            shown = name if len(name) <= 200 else name[:200] + "..."
            raise TraceError(f"{what}: {shown!r}: not rounds/NN/run/{IMAGES_DIR}/FILE or "
                             f"external/K/{IMAGES_DIR}/FILE (NN and K ASCII digits, FILE an image's name)")
        _write_new(diag, name, data, what, "diagnosis folder")
    return record_line(tree)


def _diagnosis_files(section: dict, card: Path, diag: Path) -> DiagnosisManifest:
    """The diagnosis's manifest (as the source had it), summary and round manifests, from the card."""
    identity = _record(DiagnosisManifest, section["diagnosis"], f"{card}: tracebench.diagnosis")
    DIAGNOSIS_MANIFEST.write(diag, identity)
    SUMMARY.write(diag, _record(DiagnosisSummary, section.get("summary"), f"{card}: tracebench.summary"))
    rounds = section.get("rounds") or {}
    if not isinstance(rounds, dict):
        raise TraceError(f"{card}: tracebench.rounds: expected an object")
    for relative, data in rounds.items():  # the run manifests of the node images' folders
        if not NODE_FOLDER.fullmatch(str(relative)):
            raise TraceError(f"{card}: tracebench.rounds: {relative!r} is not rounds/NN/run or external/K")
        folder = inside(diag, str(relative), f"{card}: tracebench.rounds", "diagnosis folder")
        folder.mkdir(parents=True, exist_ok=True)
        RUN_MANIFEST.write(folder, _record(RunManifest, data, f"{card}: tracebench.rounds.{relative}"))
    return identity
