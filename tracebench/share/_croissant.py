"""``croissant.json``: an export described in Croissant 1.0 (MLCommons), the JSON-LD metadata the
dataset tracks of the major venues ask for, with its responsible-AI extension (``rai:``).

It says nothing the dataset card does not: the name, description, licenses, citation and the
responsible-use statements are the card's (:class:`~._card.CardFacts`, from
``templates/share/``), and the record sets' fields are the records' own (the pydantic models the
columns are derived from, :mod:`._features`), each field described by its model's description.
The distribution is the parquet shards, each a ``cr:FileObject`` with its SHA-256, and one
``cr:FileSet`` the record sets read from. ``trace import`` never reads it.

The ``@context`` is written inline (Croissant 1.0's, as its reference files spell it), so a
validator needs no network to read it (``mlcroissant`` reads an inline context only).
"""

from __future__ import annotations

import enum
import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from ..cache import file_sha256, write_atomic
from ..records import Case, Question, Reference, Verdict
from ._card import CardFacts

__all__ = ["CROISSANT_FILE", "CONFORMS_TO", "CroissantInputs", "croissant", "write_croissant"]

CROISSANT_FILE = "croissant.json"
CONFORMS_TO = "http://mlcommons.org/croissant/1.0"
PARQUET = "application/x-parquet"
SHARDS = "parquet-shards"  # the FileSet every record set reads from
CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs", "column": "cr:column",
    "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "equivalentProperty": "cr:equivalentProperty", "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract",
    "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject", "fileSet": "cr:fileSet",
    "format": "cr:format", "includes": "cr:includes", "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath",
    "key": "cr:key", "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path", "recordSet": "cr:recordSet",
    "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated", "replace": "cr:replace",
    "sc": "https://schema.org/", "samplingRate": "cr:samplingRate", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}
# the card's responsible-use statements -> their rai: property; a property of one value takes them as one text
RAI = {"use_cases": ("rai:dataUseCases", False), "limitations": ("rai:dataLimitations", False),
       "biases": ("rai:dataBiases", False), "personal_information": ("rai:personalSensitiveInformation", False),
       "collection": ("rai:dataCollection", True), "collection_type": ("rai:dataCollectionType", False),
       "preprocessing": ("rai:dataPreprocessingProtocol", False), "annotation": ("rai:dataAnnotationProtocol", False),
       "social_impact": ("rai:dataSocialImpact", True), "maintenance": ("rai:dataReleaseMaintenancePlan", True)}
_TYPES = {str: "sc:Text", int: "sc:Integer", float: "sc:Float", bool: "sc:Boolean"}
IMAGE = "sc:ImageObject"


@dataclass(frozen=True)
class CroissantInputs:
    """What ``croissant.json`` is written from: the export's kind, what its card says, its
    shards (in order), the export's format (its ``version``, ``FORMAT.0.0``) and the date its
    records were written (``datePublished``, ISO 8601: the source's, so a rerun writes the same
    bytes)."""

    kind: str
    facts: CardFacts
    shards: tuple[Path, ...]
    format: int
    published: str


def write_croissant(folder: Path, inputs: CroissantInputs) -> None:
    """``folder/croissant.json``, the export described in Croissant 1.0 with its RAI fields."""
    data = json.dumps(croissant(folder, inputs), ensure_ascii=False, indent=2) + "\n"
    write_atomic(folder / CROISSANT_FILE, data.encode("utf-8"))


def croissant(folder: Path, inputs: CroissantInputs) -> dict[str, Any]:
    """The JSON-LD document of an export in ``folder``."""
    facts = inputs.facts
    document: dict[str, Any] = {
        "@context": CONTEXT, "@type": "sc:Dataset", "conformsTo": CONFORMS_TO, "name": _name(facts.title),
        "description": " ".join(facts.description.split()),
        "license": [name for name, _ in facts.licenses] or [facts.header["license"]],
        "citeAs": facts.citation.strip(), "version": f"{inputs.format}.0.0", "datePublished": inputs.published,
        "keywords": list(facts.header["tags"]), "isLiveDataset": False,
    }
    for key, (name, one) in RAI.items():
        sentences = facts.responsible[key]
        if sentences:
            document[name] = " ".join(sentences) if one else list(sentences)
    document["distribution"] = _distribution(folder, inputs.shards)
    document["recordSet"] = _record_sets(inputs.kind)
    return document


def _name(title: str) -> str:
    """A Croissant name: the card's title in the characters a name may hold."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in title).strip("-")


def _distribution(folder: Path, shards: tuple[Path, ...]) -> list[dict[str, Any]]:
    """A FileObject per shard (path relative to the export, SHA-256) and the FileSet of them all."""
    files = [{"@type": "cr:FileObject", "@id": path.name, "name": path.name,
              "contentUrl": path.relative_to(folder).as_posix(), "encodingFormat": PARQUET,
              "sha256": file_sha256(path), "contentSize": f"{path.stat().st_size} B"} for path in shards]
    pattern = f"{shards[0].parent.relative_to(folder).as_posix()}/*.parquet" if shards else "data/*.parquet"
    return files + [{"@type": "cr:FileSet", "@id": SHARDS, "name": SHARDS, "encodingFormat": PARQUET,
                     "description": "The parquet shards of the test split, one row per case.", "includes": pattern}]


def _record_sets(kind: str) -> list[dict[str, Any]]:
    """``cases`` (a case's own scalar fields), ``references``, ``checklist`` and, for a run,
    ``verdicts`` and ``generations``: one record per case (a row), keyed by its id."""
    sets = [
        _record_set("cases", "The cases: one per row, each a formula realized as a prompt.",
                    [_field("cases", name, Case, name) for name in _scalars(Case)]),
        _record_set("references", "Each case's reference images (Image 1 first) and where they came from.",
                    [_case_id("references"), _nested("references", "references", Reference),
                     _image("references", "reference_images", "The reference images, in the order of references.",
                            repeated=True)]),
        _record_set("checklist", "Each case's checklist: one binary question per requirement of an operator "
                    "instance.", [_case_id("checklist"), _nested("checklist", "checklist", Question)]),
    ]
    if kind == "run":
        sets.append(_record_set("verdicts", "Each case's verdicts: one per checklist question, combined over the "
                                "judges (every judge's vote is in the parquet column's votes).",
                                [_case_id("verdicts"), _nested("verdicts", "verdicts", Verdict)]))
        sets.append(_record_set("generations", "The generator's image of each case (null where it made none).",
                                [_case_id("generations"), _image("generations", "generated_image",
                                                                 "The generator's image.", repeated=False)]))
    return sets


def _record_set(name: str, description: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    key = fields[0]["@id"]
    return {"@type": "cr:RecordSet", "@id": name, "name": name, "description": description,
            "key": {"@id": key}, "field": fields}


def _source(column: str, path: str | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"fileSet": {"@id": SHARDS}, "extract": {"column": column}}
    if path is not None:
        source["transform"] = {"jsonPath": path}
    return source


def _field(record_set: str, name: str, model: type[BaseModel], column: str) -> dict[str, Any]:
    """A field of a scalar column, typed and described as ``model``'s field ``name``."""
    kind, repeated = _scalar(model.model_fields[name].annotation)
    field = {"@type": "cr:Field", "@id": f"{record_set}/{name}", "name": name,
             "description": model.model_fields[name].description or name, "dataType": _TYPES[kind],
             "source": _source(column)}
    return field | ({"repeated": True} if repeated else {})


def _case_id(record_set: str) -> dict[str, Any]:
    field = _field(record_set, "id", Case, "id")
    return field | {"@id": f"{record_set}/case_id", "name": "case_id", "references": {"field": {"@id": "cases/id"}}}


def _nested(record_set: str, column: str, model: type[BaseModel]) -> dict[str, Any]:
    """A repeated field of a list-of-structs column, one sub-field per scalar field of ``model``."""
    subs = []
    for name in _scalars(model):
        kind, repeated = _scalar(model.model_fields[name].annotation)
        sub = {"@type": "cr:Field", "@id": f"{record_set}/{column}/{name}", "name": name,
               "description": model.model_fields[name].description or name, "dataType": _TYPES[kind],
               "source": _source(column, name)}
        subs.append(sub | ({"repeated": True} if repeated else {}))
    description = Case.model_fields[column].description if column in Case.model_fields else None
    return {"@type": "cr:Field", "@id": f"{record_set}/{column}", "name": column, "repeated": True,
            "description": description or f"{model.__name__} records", "subField": subs}


def _image(record_set: str, column: str, description: str, *, repeated: bool) -> dict[str, Any]:
    field = {"@type": "cr:Field", "@id": f"{record_set}/{column}", "name": column, "description": description,
             "dataType": IMAGE, "source": _source(column, "bytes")}
    return field | ({"repeated": True} if repeated else {})


def _scalars(model: type[BaseModel]) -> list[str]:
    """``model``'s fields that are a scalar or a list of scalars (nested records are left to the
    parquet columns), in the model's order."""
    return [name for name, field in model.model_fields.items() if _scalar(field.annotation)[0] is not None]


def _scalar(annotation: Any) -> tuple[type | None, bool]:
    """(the scalar type, whether it is a list of them) of a field's annotation; (None, False) for
    a record, a union of several types or anything else."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalar(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        kept = [a for a in get_args(annotation) if a is not type(None)]
        return _scalar(kept[0]) if len(kept) == 1 else (None, False)
    if origin is Literal:
        kinds = {type(a) for a in get_args(annotation)}
        return (kinds.pop(), False) if len(kinds) == 1 and next(iter(kinds)) in _TYPES else (None, False)
    if origin is tuple:
        args = get_args(annotation)
        inner = _scalar(args[0]) if len(args) == 2 and args[1] is Ellipsis else (None, True)
        return (inner[0], True) if not inner[1] else (None, False)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return str, False
    return (annotation, False) if annotation in _TYPES else (None, False)
