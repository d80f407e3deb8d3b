"""JSON Schemas of the library records, exported into taxonomy/.

Regenerate after changing a model: ``python -m tracebench.library._schema`` (a test fails
while an exported schema is stale).
"""

from __future__ import annotations

import json

from ..resources import data_dir
from ._models import LibraryInfo, TaggedImage

__all__ = ["SCHEMAS", "schema_text", "export"]

SCHEMAS = {
    "tagged_image.schema.json": TaggedImage,
    "library.schema.json": LibraryInfo,
}


def schema_text(name: str) -> str:
    schema = SCHEMAS[name].model_json_schema(by_alias=True)
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def export() -> None:
    for name in SCHEMAS:
        (data_dir("taxonomy") / name).write_text(schema_text(name), encoding="utf-8")


if __name__ == "__main__":
    export()
