"""JSON Schemas of every record written to disk (and of the label files users write, and of
``trace score --json``), from the pydantic models.

Library records ship with the package in taxonomy/; benchmark records are documented in
docs/schemas/. Regenerate after changing a model, from the repository's root (a test fails
while one is stale):

    python -m tracebench.schemas
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from .library import LibraryInfo, TaggedImage
from .records import (Case, DiagnosisManifest, DiagnosisSummary, DiagnosticTree, NodeOccurrence, RunManifest,
                      SampleManifest, Verdict)
from .report import Label, SourceLabel
from .score import Scores

__all__ = ["SCHEMAS", "schema_path", "schema_text", "export"]

# file name -> (where it lives, model)
SCHEMAS: dict[str, tuple[str, type[BaseModel]]] = {
    "tagged_image.schema.json": ("taxonomy", TaggedImage),
    "library.schema.json": ("taxonomy", LibraryInfo),
    "case.schema.json": ("docs", Case),
    "sample_manifest.schema.json": ("docs", SampleManifest),
    "verdict.schema.json": ("docs", Verdict),
    "run_manifest.schema.json": ("docs", RunManifest),
    "diagnostic_tree.schema.json": ("docs", DiagnosticTree),
    "diagnosis_summary.schema.json": ("docs", DiagnosisSummary),
    "diagnosis_manifest.schema.json": ("docs", DiagnosisManifest),
    "node_occurrence.schema.json": ("docs", NodeOccurrence),
    "label.schema.json": ("docs", Label),
    "source_label.schema.json": ("docs", SourceLabel),
    "scores.schema.json": ("docs", Scores),
}


def schema_path(name: str, repository: Path) -> Path:
    """Where a schema lives in a source checkout."""
    place, _ = SCHEMAS[name]
    return repository / ("taxonomy" if place == "taxonomy" else "docs/schemas") / name


def schema_text(name: str) -> str:
    schema = SCHEMAS[name][1].model_json_schema(by_alias=True)
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def export(repository: Path) -> None:
    if not (repository / "pyproject.toml").is_file():
        raise SystemExit(f"{repository}: not the tracebench repository; run from its root")
    for name in SCHEMAS:
        path = schema_path(name, repository)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(schema_text(name), encoding="utf-8")


if __name__ == "__main__":
    export(Path.cwd())
