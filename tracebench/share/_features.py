"""The columns of an export, derived from the records: a pydantic model's fields become
Hugging Face ``datasets`` features (a string, an integer, a list, a struct of the same), so a
record and its row hold the same fields and a row reads back into the same record."""

from __future__ import annotations

import enum
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from ..errors import TraceError

__all__ = ["feature_of", "features_of", "row_of"]

_SCALARS = {str: "string", int: "int64", float: "float64", bool: "bool"}


def feature_of(annotation: Any, *, where: str = "") -> Any:
    """The ``datasets`` feature of one field's type annotation."""
    from datasets import List, Value

    origin = get_origin(annotation)
    if origin is Annotated:
        return feature_of(get_args(annotation)[0], where=where)
    if origin in (Union, types.UnionType):
        kept = [a for a in get_args(annotation) if a is not type(None)]
        if len(kept) == 1:
            return feature_of(kept[0], where=where)
        raise TraceError(f"{where}: a union of {kept} has no column type")
    if origin is Literal:
        kinds = {type(a) for a in get_args(annotation)}
        if kinds == {str}:
            return Value("string")
        raise TraceError(f"{where}: a Literal of {kinds} has no column type")
    if origin is tuple:
        args = get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return List(feature_of(args[0], where=where))
        raise TraceError(f"{where}: a fixed tuple has no column type")
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return features_of(annotation, where=where)
        if issubclass(annotation, enum.Enum):
            return Value("string")
        for kind, dtype in _SCALARS.items():
            if annotation is kind:
                return Value(dtype)
    raise TraceError(f"{where}: {annotation!r} has no column type")


def features_of(model: type[BaseModel], *, where: str = "") -> dict[str, Any]:
    """Field name -> feature, for every field of ``model`` (in the model's order)."""
    return {name: feature_of(field.annotation, where=f"{where or model.__name__}.{name}")
            for name, field in model.model_fields.items()}


def row_of(record: BaseModel) -> dict[str, Any]:
    """A record as a row: its JSON form with every field present (a field a sparse record
    leaves out of its file is a null column)."""
    data = record.model_dump(mode="json")
    return {name: data.get(name) for name in type(record).model_fields}
