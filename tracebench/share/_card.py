"""The dataset card of an export (``README.md``): the YAML header the Hub and
``datasets.load_dataset`` read, with a ``tracebench`` section holding the folder's manifests
(what :func:`~tracebench.share.import_dataset` rebuilds the folder from), and a body from
``templates/share/dataset_card.j2``."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TraceError
from ..records import CASES_FILE, VERDICTS_FILE, SampleManifest
from ..resources import DataFile, read_text
from ..templating import render
from ._limits import MAX_CARD_BYTES, check_card_header, parse_error, read_card_text

__all__ = ["CARD_FILE", "CardFacts", "CardInputs", "STATEMENTS", "read_card", "responsible_use", "write_card"]

CARD_FILE = "README.md"
SECTION = "tracebench"
RESPONSIBLE_USE = DataFile("templates", "share/responsible_use.toml")
PARTS = ("benchmark", "synthetic", "photo", "unknown", "run")  # its tables, in the order they are said
# its keys, each with the card's heading (None: said in the card under the heading before it)
STATEMENTS = {"use_cases": "Intended use", "limitations": "Limitations", "biases": "Known biases",
              "personal_information": "Personal and sensitive information", "collection_type": "Kind of data",
              "collection": "How it was made", "preprocessing": None, "annotation": None,
              "social_impact": "Social impact", "maintenance": "Maintenance"}
SYNTHETIC = "synthetic"  # a library image's source when it is drawn by program (tracebench.library.synth)


def _library_facts(sample: SampleManifest | None, sources: Counter) -> tuple[Counter, Counter]:
    """(license -> reference images, image source -> reference images) of the export, read from
    the library the benchmark was sampled from (the shipped synthetic one when its manifest names
    none); both empty when that library is not on this machine."""
    from ..library import load_library
    from ..library.synth import default_library

    library = sample.library_folder if sample else None
    try:
        root = library or default_library()
        _, images = load_library(root)
    except (TraceError, OSError):
        return Counter(), Counter()
    by_id = {image.id: image for image in images}
    licenses: Counter = Counter()
    origins: Counter = Counter()
    for source, n in sources.items():
        image = by_id.get(source)  # an image the library does not hold: its license and origin unknown
        licenses[image.license if image else "unknown"] += n
        origins[image.source if image else "unknown"] += n
    return licenses, origins


def responsible_use(kind: str, origins: Counter) -> dict[str, tuple[str, ...]]:
    """What the export says of its responsible use (``templates/share/responsible_use.toml``):
    statement key -> its sentences, from the parts that apply to an export of ``kind`` whose
    references have these sources (none known: the library was not at hand)."""
    data = RESPONSIBLE_USE.read()
    applies = {"benchmark": True, "synthetic": SYNTHETIC in origins,
               "photo": any(o not in (SYNTHETIC, "unknown") for o in origins),
               "unknown": not origins or "unknown" in origins, "run": kind == "run"}
    said: dict[str, tuple[str, ...]] = {key: () for key in STATEMENTS}
    for part in PARTS:
        entries = RESPONSIBLE_USE.value("", data, part, dict)
        for key in entries:
            if key not in STATEMENTS:
                raise RESPONSIBLE_USE.error(f"unknown statement (known: {', '.join(STATEMENTS)})", part, key)
            sentences = RESPONSIBLE_USE.strings(part, entries, key)
            if applies[part]:
                said[key] += sentences
    return said


def _card_statements(said: dict[str, tuple[str, ...]]) -> list[tuple[str, tuple[str, ...]]]:
    """The card's "Responsible use" list: (heading, sentences), a key without a heading said
    under the one before it."""
    lines: list[tuple[str, tuple[str, ...]]] = []
    for key, heading in STATEMENTS.items():
        if heading is not None:
            lines.append((heading, ()))
        lines[-1] = (lines[-1][0], lines[-1][1] + said[key])
    return [(heading, sentences) for heading, sentences in lines if sentences]


def _hub_license(licenses: Counter) -> str:
    """The card's ``license``: the one license of every image (its Hub id is the SPDX id in lower
    case), ``unknown`` when any is, else ``other`` (the body lists them)."""
    if not licenses or "unknown" in licenses:
        return "unknown"
    return next(iter(licenses)).lower() if len(licenses) == 1 else "other"


def _size_category(rows: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < bound:
            return name
    return "n>1M"


def _size_text(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return str(size)


@dataclass(frozen=True)
class CardInputs:
    """What a dataset card is written from: the export's kind and ``tracebench`` section, its
    shards (``datasets`` features, rows, bytes of the rows and of the files, files), the sample
    manifest and benchmark folder its cases came from, library image id -> references made of it
    (the licenses), and the tool that wrote it."""

    kind: str
    section: dict[str, Any]
    features: Any
    rows: int
    num_bytes: int
    size: int
    shards: int
    sample: SampleManifest | None
    bench: Path
    sources: Counter
    tool: str


@dataclass(frozen=True)
class CardFacts:
    """What a written card says, for what is built from the same words (``croissant.json``): its
    title, opening paragraph, header and license list (license -> reference images), its
    responsible-use statements (:func:`responsible_use`) and the paper's BibTeX citation."""

    title: str
    description: str
    header: dict[str, Any]
    licenses: tuple[tuple[str, int], ...]
    responsible: dict[str, tuple[str, ...]]
    citation: str


def write_card(folder: Path, card: CardInputs) -> CardFacts:
    """The export's dataset card, the folder's ``README.md`` (refused past :data:`~._limits.MAX_CARD_BYTES`),
    and what it says."""
    from ._export import SPLIT

    licenses, origins = _library_facts(card.sample, card.sources)
    title = f"tracebench {card.kind}" + (f": {card.section['run']['generator']}" if card.kind == "run" else "")
    facts = CardFacts(title=title, description=render("share/description.j2", kind=card.kind, tool=card.tool).strip(),
                      header=_header(card, title, licenses, SPLIT), licenses=tuple(sorted(licenses.items())),
                      responsible=responsible_use(card.kind, origins), citation=read_text("templates", "share/citation.bib"))
    sampled, counts = _sampled(card.sample)
    body = render("share/dataset_card.j2", title=title, description=facts.description, kind=card.kind, rows=card.rows,
                  split=SPLIT, shards=card.shards, size_text=_size_text(card.size),
                  contents=_contents(card.kind, card.section), sampled=sampled, counts=counts or [],
                  run=card.section.get("run"), hashes=_hashes(card.section, card.sample),
                  responsible=_card_statements(facts.responsible), licenses=facts.licenses, citation=facts.citation)
    text = ("---\n" + _yaml(facts.header) + "---\n\n" + body).encode("utf-8")
    if len(text) > MAX_CARD_BYTES:
        raise TraceError(f"the dataset card would be {len(text):,} bytes, more than trace import reads "
                         f"({MAX_CARD_BYTES:,})")
    (folder / CARD_FILE).write_bytes(text)
    return facts


def _header(card: CardInputs, title: str, licenses: Counter, split: str) -> dict[str, Any]:
    """The card's YAML header: what the Hub and ``datasets.load_dataset`` read, and the section."""
    return {
        "pretty_name": title,
        "license": _hub_license(licenses),
        "tags": ["tracebench", "multi-reference-image-generation", "benchmark"],
        "task_categories": ["image-to-image", "text-to-image"],
        "size_categories": [_size_category(card.rows)],
        "configs": [{"config_name": "default", "data_files": [{"split": split, "path": f"data/{split}-*"}]}],
        "dataset_info": {"features": card.features._to_yaml_list(),
                         "splits": [{"name": split, "num_bytes": card.num_bytes, "num_examples": card.rows}],
                         "download_size": card.size, "dataset_size": card.num_bytes},
        SECTION: card.section,
    }


def _contents(kind: str, section: dict[str, Any]) -> list[str]:
    """The card's list of the columns an export holds."""
    contents = ["columns: every field of the case record (`id`, `slot`, `template`, `formula`, `prompt`, "
                "`references`, `terms`, `checklist` as a list of questions ...), and `reference_images`: the "
                "case's reference images in the order of `references` (Image 1 first)"]
    if kind == "run":
        contents.append("`generated_image`: the generator's image (null where it made none: a case left out, a "
                        "call that failed); `generation`: the references it says it used; `verdicts`: one per "
                        "checklist question, with every judge's answer and reason in `votes`")
        if "diagnosis" in section:
            contents.append("`diagnosis_tree`: the case's diagnostic tree (a line of trees.jsonl; null for a case "
                            "not diagnosed); `node_images`: the images of its nodes, named as the tree names them")
    return contents


def _sampled(sample: SampleManifest | None) -> tuple[str | None, list[tuple[str, Any]] | None]:
    """How the benchmark was sampled, and its counts (none without a sample manifest)."""
    if sample is None:
        return None, None
    sampled = f"trace sample, seed {sample.seed}, arguments {json.dumps(sample.arguments, ensure_ascii=False)}"
    counts = [("cases", sample.cases), ("cases per slot level", sample.counts_per_slot),
              ("cases per application", sample.counts_per_application or "none"),
              ("distinct templates", sample.distinct_templates),
              ("library", f"{sample.library.get('name')} (sha256 {str(sample.library.get('content_hash', ''))[:12]})")]
    return sampled, counts


def _hashes(section: dict[str, Any], sample: SampleManifest | None) -> list[tuple[str, str]]:
    """The card's SHA-256 list: the design files', the records', and the content hashes that
    cover every file the import writes."""
    hashes = sorted((sample.hashes if sample else {}).items())
    run = section.get("run")
    if run is not None or section.get("cases_hash"):
        hashes.append((CASES_FILE, run["cases_hash"] if run is not None else section["cases_hash"]))
    if section.get("verdicts_hash"):
        hashes.append((VERDICTS_FILE, section["verdicts_hash"]))
    for part, digest in section["content"].items():
        hashes.append((f"every file of the {part} folder trace import rebuilds (the SHA-256 of its `sha256sum` "
                       f"list, sorted by path)", digest))
    return hashes


def read_card(folder: Path) -> dict[str, Any]:
    """The ``tracebench`` section of an export's card (a one-line error naming the card when it
    has none, is over :data:`~._limits.MAX_CARD_BYTES`, or its header does not parse or holds
    what no export writes: see :func:`~._limits.check_card_header`)."""
    path = Path(folder) / CARD_FILE
    if not path.is_file():
        raise TraceError(f"{folder}: not a dataset folder of trace export (no {CARD_FILE})")
    text = read_card_text(path)
    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        raise TraceError(f"{path}: no YAML header (the --- block the Hub reads); not a dataset card of trace export")
    header = _load_header(text[4:text.index("\n---\n", 3)], path)
    section = header.get(SECTION) if isinstance(header, dict) else None
    if not isinstance(section, dict) or section.get("kind") not in ("benchmark", "run"):
        raise TraceError(f"{path}: no {SECTION}: section of kind benchmark or run in its YAML header; not a dataset "
                         f"of trace export")
    return section


def _load_header(header: str, path: Path) -> Any:
    """The header's YAML, by yaml's safe loader once its events are checked."""
    import yaml

    check_card_header(header, path, first_line=2)
    try:
        return yaml.load(header, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, ValueError, OverflowError) as error:
        raise parse_error(error, path, first_line=2) from None


def _yaml(header: dict[str, Any]) -> str:
    """The header as YAML, with no anchor or alias (the import refuses them)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump(header, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=100)
