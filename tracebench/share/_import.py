"""``trace import``: the folder a dataset of ``trace export`` was made from, rebuilt.

A benchmark export becomes a benchmark folder whose ``cases.jsonl``, references and
``manifest.json`` are the original's bytes; a run export becomes a run folder (``run.json``,
``verdicts.jsonl``, ``images/``) beside its benchmark (``RUN/benchmark`` unless ``--cases``
names one), and its diagnosis, when it was exported with one, ``RUN/diagnosis``. Every row is
checked as the folder's readers check their files, each problem one line naming the shard, the
row and the field; nothing is written unless the whole dataset reads (the folders are assembled
beside their destination and renamed into place at the end). Rows are read a row group at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..cache import file_sha256
from ..errors import TraceError
from ..jsonfiles import problems_of, record_line, write_json
from ..records import (CASES, DIAGNOSIS_MANIFEST, GENERATION_SUFFIX, RUN_MANIFEST, SAMPLE_MANIFEST, SUMMARY, TREES,
                       Case, DiagnosisManifest, DiagnosisSummary, DiagnosticTree, GenerationInfo, RunManifest,
                       SAMPLE_SEPARATOR, SampleManifest, Verdict, case_problem, read_cases, sample_name,
                       split_sample_name)
from ..safepaths import inside
from ._card import CARD_FILE, read_card
from ._export import (FORMAT, GENERATED_IMAGE, GENERATION, IMAGES_DIR, NODE_FOLDER, NODE_IMAGES, REFERENCE_IMAGES,
                      SAMPLE_GENERATIONS, SAMPLE_IMAGES, SPLIT, TREE, VERDICTS_COLUMN, hf)

__all__ = ["ImportSummary", "import_dataset", "BENCHMARK_DIR", "DIAGNOSIS_DIR"]

BENCHMARK_DIR = "benchmark"  # where a run's benchmark is rebuilt inside its folder, unless --cases names one
DIAGNOSIS_DIR = "diagnosis"
_SUFFIXES = (".png", ".jpg", ".webp")


class ImportSummary:
    """What an import wrote."""

    def __init__(self, kind: str, cases: int, out: Path, cases_dir: Path, verdicts: int = 0,
                 diagnosis: Path | None = None) -> None:
        self.kind, self.cases, self.out, self.cases_dir = kind, cases, out, cases_dir
        self.verdicts, self.diagnosis = verdicts, diagnosis


def _record(model: type[BaseModel], data: Any, where: str):
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise TraceError(f"{where}: {problems_of(error, model)[0][1]}") from None


def _rows(folder: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) of every row of the split's shards, in order: ``data/test-00000-of-00002.parquet: row 7``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted((folder / "data").glob(f"{SPLIT}-*.parquet"))
    if not shards:
        raise TraceError(f"{folder}: no data/{SPLIT}-*.parquet shard; not a dataset folder of trace export")
    expected = [f"{SPLIT}-{k:05d}-of-{len(shards):05d}.parquet" for k in range(len(shards))]
    if [p.name for p in shards] != expected:
        missing = sorted(set(expected) - {p.name for p in shards}) or [p.name for p in shards if p.name not in expected]
        raise TraceError(f"{folder}/data: the shards are not {SPLIT}-00000-of-{len(shards):05d} ... in sequence "
                         f"(a shard missing or foreign: {missing[0]})")
    for shard in shards:
        name = shard.relative_to(folder)
        try:
            parquet = pq.ParquetFile(shard)
            n = 0
            for batch in parquet.iter_batches(batch_size=100):
                for row in batch.to_pylist():
                    n += 1
                    yield f"{name}: row {n}", row
        except (pa.ArrowException, OSError) as error:
            raise TraceError(f"{name}: not a readable parquet file ({str(error).splitlines()[0]})") from None


def _columns(row: dict, wanted: tuple[str, ...], where: str) -> None:
    missing = [c for c in wanted if c not in row]
    if missing:
        raise TraceError(f"{where}: no column {', '.join(missing)}; not a row of trace export")


def _image_bytes(image: Any, where: str) -> bytes:
    """The bytes of an Image cell ({bytes, path}); anything else is one line naming the cell."""
    if not isinstance(image, dict) or not isinstance(image.get("bytes"), bytes):
        raise TraceError(f"{where}: no image bytes (an image stored by path only cannot be rebuilt)")
    return image["bytes"]


class _Benchmark:
    """A benchmark folder written row by row: references once each (the same bytes wherever a
    path repeats), ``cases.jsonl`` line by line, the manifest at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "references").mkdir(parents=True, exist_ok=True)
        self.written: dict[str, str] = {}  # reference path -> sha256 of its bytes
        self.ids: set[str] = set()
        self.handle = open(CASES.path(root), "w", encoding="utf-8", newline="\n")
        self.cases = 0

    def add(self, row: dict, where: str) -> Case:
        _columns(row, (*Case.model_fields, REFERENCE_IMAGES), where)
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
            data = _image_bytes(image, f"{where}: {REFERENCE_IMAGES}[{k}]")
            digest = hashlib.sha256(data).hexdigest()
            if ref.path in self.written:
                if self.written[ref.path] != digest:
                    raise TraceError(f"{where}: {REFERENCE_IMAGES}[{k}]: other bytes than an earlier row's for "
                                     f"{ref.path}")
                continue
            target = inside(self.root, ref.path, f"{where}: references[{k}].path", "benchmark folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            self.written[ref.path] = digest
        self.handle.write(record_line(case))
        self.cases += 1
        return case

    def close(self, manifest: dict | None, card: Path) -> None:
        self.handle.close()
        if manifest is not None:
            SAMPLE_MANIFEST.write(self.root, _record(SampleManifest, manifest, f"{card}: tracebench.manifest"))


def import_dataset(folder: Path, out: Path, *, cases_dir: Path | None = None) -> ImportSummary:
    """Rebuild the benchmark or run folder a dataset folder of ``trace export`` was made from."""
    from ..library import staged_output

    folder, out = Path(folder), Path(out)
    hf()
    if not folder.is_dir():
        raise TraceError(f"{folder}: not a folder (give the dataset folder: a trace export's --out, or a copy of "
                         f"it downloaded from the Hub)")
    section = read_card(folder)
    card = folder / CARD_FILE
    if section.get("format") != FORMAT:
        raise TraceError(f"{card}: tracebench.format {section.get('format')!r}: this tracebench reads format {FORMAT}")
    if section["kind"] == "benchmark":
        if cases_dir is not None:
            raise TraceError("--cases: the dataset is a benchmark; --out is where it is rebuilt")
        with staged_output(out) as root:
            bench = _Benchmark(root)
            for where, row in _rows(folder):
                bench.add(row, where)
            bench.close(section.get("manifest"), card)
            _same(CASES.path(root), section.get("cases_hash"), f"{card}: the rows do not rebuild the benchmark "
                                                                f"exported (their {CASES.name} differs from "
                                                                f"tracebench.cases_hash: rows missing, added or moved)")
        return ImportSummary("benchmark", bench.cases, out, out)
    return _import_run(folder, out, section, cases_dir)


def _same(path: Path, digest: object, message: str) -> None:
    """A TraceError with ``message`` unless ``path``'s SHA-256 is ``digest``."""
    if not isinstance(digest, str) or file_sha256(path) != digest:
        raise TraceError(message)


def _import_run(folder: Path, out: Path, section: dict, cases_dir: Path | None) -> ImportSummary:
    from ..library import staged_output

    card = folder / CARD_FILE
    manifest = _record(RunManifest, section.get("run"), f"{card}: tracebench.run")
    final_bench = (Path(cases_dir) if cases_dir is not None else out / BENCHMARK_DIR).absolute()
    if cases_dir is not None and final_bench.resolve().is_relative_to(out.absolute().resolve()):
        raise TraceError(f"--cases {cases_dir}: inside --out {out}; leave --cases out to rebuild the benchmark in "
                         f"{out / BENCHMARK_DIR}, or give a folder beside it")
    reuse = cases_dir is not None and CASES.path(cases_dir).is_file()
    if reuse and file_sha256(CASES.path(cases_dir)) != manifest.cases_hash:
        raise TraceError(f"--cases {cases_dir}: not the benchmark this run was made from (its {CASES.name} differs)")
    with ExitStack() as stack:
        root = stack.enter_context(staged_output(out))
        bench = None
        if not reuse:
            bench = _Benchmark(root / BENCHMARK_DIR if cases_dir is None else stack.enter_context(staged_output(cases_dir)))
        images = root / IMAGES_DIR
        images.mkdir()
        verdicts = stack.enter_context(open(root / "verdicts.jsonl", "w", encoding="utf-8", newline="\n"))
        trees = None
        diag = root / DIAGNOSIS_DIR
        if "diagnosis" in section:
            diag.mkdir()
            trees = stack.enter_context(open(TREES.path(diag), "w", encoding="utf-8", newline="\n"))
        cases = written = judged = 0
        given = read_cases(Path(cases_dir)) if reuse else None  # a reused benchmark: row i must be its case i
        for where, row in _rows(folder):
            _columns(row, (GENERATED_IMAGE, GENERATION, VERDICTS_COLUMN) + ((TREE, NODE_IMAGES) if trees else ())
                     + ((SAMPLE_IMAGES, SAMPLE_GENERATIONS) if manifest.samples else ()), where)
            if bench is not None:
                case = bench.add(row, where)
            else:
                _columns(row, tuple(Case.model_fields), where)
                case = _record(Case, {name: row[name] for name in Case.model_fields}, where)
                if case != next(given, None):
                    raise TraceError(f"{where}: case {case.id} is not the case at this place in --cases "
                                     f"{cases_dir} (the rows and the benchmark differ)")
            cases += 1
            asked = {q.id for q in case.checklist}
            seen: set[tuple[str, int | None]] = set()
            for k, data in enumerate(row[VERDICTS_COLUMN] or []):
                verdict = _record(Verdict, data, f"{where}: {VERDICTS_COLUMN}[{k}]")
                if verdict.case_id != case.id or verdict.question_id not in asked:
                    raise TraceError(f"{where}: {VERDICTS_COLUMN}[{k}]: a verdict on {verdict.case_id}'s question "
                                     f"{verdict.question_id!r}, not one case {case.id} asks")
                if (verdict.sample or 0) >= (manifest.samples or 1):
                    raise TraceError(f"{where}: {VERDICTS_COLUMN}[{k}].sample: {verdict.sample}, but the run made "
                                     f"{manifest.samples or 1} samples a case")
                if (verdict.question_id, verdict.sample) in seen:
                    sample = f" of sample {verdict.sample}" if verdict.sample else ""
                    raise TraceError(f"{where}: {VERDICTS_COLUMN}[{k}]: question {verdict.question_id!r}{sample} twice")
                seen.add((verdict.question_id, verdict.sample))
                verdicts.write(record_line(verdict))
                written += 1
            judged += bool(seen)
            image = row[GENERATED_IMAGE]
            if image is not None:
                data = _image_bytes(image, f"{where}: {GENERATED_IMAGE}")
                suffix = Path(str(image.get("path") or "")).suffix.lower()
                name = f"{case.id}{suffix if suffix in _SUFFIXES else '.png'}"
                inside(images, name, f"{where}: {GENERATED_IMAGE}", "run folder").write_bytes(data)
            if row[GENERATION] is not None:
                info = _record(GenerationInfo, row[GENERATION], f"{where}: {GENERATION}")
                if info.case_id != case.id:
                    raise TraceError(f"{where}: {GENERATION}.case_id: {info.case_id!r}, not the row's case {case.id}")
                if info.sample:  # the first generation's record; a later one's is in sample_generations
                    raise TraceError(f"{where}: {GENERATION}.sample: {info.sample}, but the column holds the first "
                                     f"generation's record ({SAMPLE_GENERATIONS} the later ones')")
                write_json(images / f"{case.id}{GENERATION_SUFFIX}", info)
            if manifest.samples:
                _sample_files(row, where, images, case.id, manifest.samples)
            if trees is not None and row[TREE] is not None:
                trees.write(_tree_line(row, where, diag, case.id))
        if given is not None and next(given, None) is not None:
            raise TraceError(f"{card}: fewer rows than --cases {cases_dir} holds cases (the rows and the benchmark "
                             f"differ)")
        verdicts.close()
        _same(root / "verdicts.jsonl", section.get("verdicts_hash"),
              f"{card}: the rows do not rebuild the run's verdicts.jsonl (it differs from tracebench.verdicts_hash: "
              f"verdicts missing, added or changed)")
        if bench is not None:
            bench.close(section.get("manifest"), card)
            if file_sha256(CASES.path(bench.root)) != manifest.cases_hash:
                raise TraceError(f"{card}: the rows do not rebuild the benchmark the run was made from (the "
                                 f"{CASES.name} they give differs from tracebench.run.cases_hash)")
        RUN_MANIFEST.write(root, manifest.model_copy(update={"cases_dir": str(final_bench)}))
        if trees is not None:
            _diagnosis_files(section, card, diag, out, final_bench)
    return ImportSummary("run", judged, out, final_bench, written, out / DIAGNOSIS_DIR if trees else None)


def _sample_files(row: dict, where: str, images: Path, case_id: str, samples: int) -> None:
    """The later samples' images and generation records of a row (``trace run --samples``), written
    where the run holds them (``images/<case id>~<k>.png``); a name that is not one is refused."""
    given: dict[int, int] = {}  # sample -> the entry that gave its image (one image a sample)
    for k, image in enumerate(row[SAMPLE_IMAGES] or []):
        what = f"{where}: {SAMPLE_IMAGES}[{k}]"
        data = _image_bytes(image, what)
        name = Path(str(image.get("path") or "")).name
        stem, suffix = name.rsplit(".", 1) if "." in name else (name, "")
        # the index as the run names it (split_sample_name: ASCII digits, no leading zero): "~01" or "~١"
        # would be written under a name no reader of the run folder looks for
        base, index = split_sample_name(stem) or (None, 0)
        if base != case_id or not 1 <= index < samples or f".{suffix}" not in _SUFFIXES:
            raise TraceError(f"{what}: {name!r} is not the image of a later sample of case {case_id} "
                             f"({case_id}{SAMPLE_SEPARATOR}K.png, K from 1 to {samples - 1})")
        if index in given:
            raise TraceError(f"{what}: sample {index} of case {case_id} has an image already "
                             f"({SAMPLE_IMAGES}[{given[index]}])")
        given[index] = k
        inside(images, name, what, "run folder").write_bytes(data)
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
        write_json(images / f"{sample_name(case_id, info.sample)}{GENERATION_SUFFIX}", info)


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
        if not NODE_FOLDER.fullmatch(folder) or not file or "/" in file:
            raise TraceError(f"{what}: {name!r}: not rounds/NN/run/{IMAGES_DIR}/FILE or external/K/{IMAGES_DIR}/FILE")
        target = inside(diag, name, what, "diagnosis folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return record_line(tree)


def _diagnosis_files(section: dict, card: Path, diag: Path, out: Path, bench: Path) -> None:
    identity = _record(DiagnosisManifest, section["diagnosis"], f"{card}: tracebench.diagnosis")
    DIAGNOSIS_MANIFEST.write(diag, identity.model_copy(update={"run_dir": str(out.absolute()),
                                                               "cases_dir": str(bench)}))
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
