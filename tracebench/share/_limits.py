"""What ``trace import`` reads of a dataset folder before it trusts it, and how much.

A dataset folder downloaded from a stranger is data: its card is refused by its size before it
is parsed, then by its YAML events (nesting, aliases, numbers) before it is loaded; a parquet
shard is refused by its footer (size, codecs, the columns, each row group's bytes) before a row
is read, and each row group's cells (every image, every string) before they become Python
objects. ``trace export`` checks its rows with the same limits, so it never writes what import
refuses. docs/share.md states the limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ..errors import TraceError

__all__ = ["MAX_CARD_BYTES", "MAX_YAML_DEPTH", "MAX_NUMBER_CHARS", "MAX_FOOTER_BYTES", "MAX_ROW_GROUP_BYTES",
           "MAX_IMAGE_BYTES", "MAX_STRING_BYTES", "READ_BUFFER_BYTES", "CODECS", "check_card_header", "check_cells", "check_footer",
           "check_shard", "export_row_group_bytes", "parse_error", "read_card_text"]

MiB = 1 << 20
MAX_CARD_BYTES = 1 * MiB  # the card (README.md), by its size on disk; an export's is some 10 KB
MAX_YAML_DEPTH = 32  # collections inside collections in the card's header; an export's go 8 deep
MAX_NUMBER_CHARS = 100  # characters of a number in the header (Python refuses integers past 4,300 digits)
MAX_FOOTER_BYTES = 16 * MiB  # a shard's parquet footer (about 10 KB a row group)
MAX_ROW_GROUP_BYTES = 48 * MiB  # a row group's columns, compressed or not, as its footer gives them; the rows
# are read 16 at a time (their pages, decompressed, Arrow's arrays, then Python's objects: some 4 times their
# bytes), so it bounds the import's peak memory (bench/import_memory.py: under 400 MiB); an export's row groups
# aim at 7/8 of it (export_row_group_bytes)
READ_BUFFER_BYTES = 1 * MiB  # a column chunk is read through a buffer of this size, not loaded whole
MAX_IMAGE_BYTES = 32 * MiB  # one image (a binary cell)
MAX_STRING_BYTES = 1 * MiB  # one string field (a prompt, a reason, a judge's reply, a tree's line)
CODECS = ("SNAPPY", "UNCOMPRESSED")  # what pyarrow writes; a codec of unbounded ratio is a bomb's way in


def export_row_group_bytes() -> int:
    """The bytes (in Arrow) an export puts in a row group at most: 7/8 of what the import reads,
    as a footer's sizes run some 2% over Arrow's."""
    return MAX_ROW_GROUP_BYTES * 7 // 8


# ------------------------------------------------------------------------------ the card

def read_card_text(path: Path) -> str:
    """The card's text: refused by its size before anything is parsed, and when it is not UTF-8."""
    try:
        size = path.stat().st_size
        if size > MAX_CARD_BYTES:
            raise TraceError(f"{path}: {size:,} bytes, more than a dataset card may hold ({MAX_CARD_BYTES:,}); not "
                             f"a dataset card of trace export")
        with open(path, "rb") as handle:
            data = handle.read(MAX_CARD_BYTES + 1)  # a file grown since (or /dev/zero): no more than the limit
    except OSError as error:
        raise TraceError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(data) > MAX_CARD_BYTES:
        raise TraceError(f"{path}: more than a dataset card may hold ({MAX_CARD_BYTES:,} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise TraceError(f"{path}:{line}: not UTF-8 text (byte {column} of the line)") from None


def check_card_header(header: str, path: Path, first_line: int) -> None:
    """Walk the header's YAML events (libyaml's parser when present; the events come one at a
    time and the walk stops at the first problem, so a deep nest is never read whole): nothing
    nested deeper than :data:`MAX_YAML_DEPTH`, no alias, no number longer than
    :data:`MAX_NUMBER_CHARS`. A problem is ``CARD:LINE: field: what``."""
    import yaml

    frames: list[list[Any]] = []  # per open collection: [a mapping?, events seen in it, its current key]
    try:
        for event in yaml.parse(header, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(event, yaml.CollectionEndEvent):
                frames.pop()
            elif isinstance(event, yaml.NodeEvent):
                problem = _event_problem(event, len(frames))
                if problem:
                    raise TraceError(f"{path}:{event.start_mark.line + first_line}: {_field(frames)}: {problem}")
                if frames and frames[-1][0] and frames[-1][1] % 2 == 0:  # a mapping's key
                    frames[-1][2] = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                if isinstance(event, yaml.CollectionStartEvent):
                    frames.append([isinstance(event, yaml.MappingStartEvent), 0, None])
                    continue
            else:
                continue
            if frames:
                frames[-1][1] += 1
    except yaml.YAMLError as error:
        raise parse_error(error, path, first_line) from None


def _event_problem(event, depth: int) -> str | None:
    import yaml

    if isinstance(event, yaml.AliasEvent):
        return f"an alias (*{event.anchor}): a dataset card of trace export has none"
    if isinstance(event, yaml.CollectionStartEvent) and depth >= MAX_YAML_DEPTH:
        return f"nested deeper than {MAX_YAML_DEPTH} levels"
    if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_NUMBER_CHARS and _number(event):
        return f"a number of {len(event.value):,} characters (at most {MAX_NUMBER_CHARS})"
    return None


def _number(event) -> bool:
    from yaml import ScalarNode
    from yaml.resolver import Resolver

    tag = Resolver().resolve(ScalarNode, event.value, event.implicit) if event.tag in (None, "!") else event.tag
    return tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _field(frames: list[list[Any]]) -> str:
    """The field being read, as ``tracebench.run.judges[0]`` (its first parts when it is deep)."""
    parts = []
    for is_map, seen, key in frames:
        if not is_map:
            parts.append(f"[{seen}]")
        elif seen % 2:
            parts.append(f".{key}" if parts else str(key))
    text = "".join(parts[:6]) + ("..." if len(parts) > 6 else "")
    return (text.lstrip(".")[:200] or "the header")


def parse_error(error: Exception, path: Path, first_line: int) -> TraceError:
    """The one line of a header that does not parse (a YAMLError, or a value no Python object
    holds: a date of February 30), at its line when the error knows it."""
    mark = getattr(error, "problem_mark", None)
    where = f":{mark.line + first_line}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return TraceError(f"{path}{where}: the YAML header does not parse ({problem})")


# ------------------------------------------------------------------------------ the shards

def check_shard(parquet, name: str, expected) -> None:
    """Refuse a shard by its footer: other columns than ``expected`` (an Arrow schema), a codec
    not in :data:`CODECS`, a row group over :data:`MAX_ROW_GROUP_BYTES`. ``parquet`` is the
    opened ``ParquetFile`` (whose footer :func:`check_footer` bounded first)."""
    _check_columns(parquet.schema_arrow, expected, name)
    meta = parquet.metadata
    for group in range(meta.num_row_groups):
        columns = [meta.row_group(group).column(k) for k in range(meta.num_columns)]
        codecs = {column.compression for column in columns} - set(CODECS)
        if codecs:
            raise TraceError(f"{name}: row group {group}: compressed with {sorted(codecs)[0]}; an export's shards "
                             f"are {' or '.join(CODECS)}")
        size = sum(max(column.total_compressed_size, column.total_uncompressed_size) for column in columns)
        if size > MAX_ROW_GROUP_BYTES:
            raise TraceError(f"{name}: row group {group}: {size:,} bytes (as its footer gives them), more than a "
                             f"row group may hold ({MAX_ROW_GROUP_BYTES:,})")


def check_footer(path: Path, name: str) -> None:
    """Refuse a shard whose footer (its length is in the file's last 8 bytes) is over
    :data:`MAX_FOOTER_BYTES`, before pyarrow parses it."""
    with open(path, "rb") as handle:
        if handle.seek(0, 2) < 12:
            return  # too short to be parquet: pyarrow says so
        handle.seek(-8, 2)
        tail = handle.read(8)
    size = int.from_bytes(tail[:4], "little")
    if tail[4:] == b"PAR1" and size > MAX_FOOTER_BYTES:  # no magic: not parquet, as pyarrow says
        raise TraceError(f"{name}: a parquet footer of {size:,} bytes, more than a shard's may be "
                         f"({MAX_FOOTER_BYTES:,})")


def _check_columns(schema, expected, name: str) -> None:
    for column in dict.fromkeys([*schema.names, *expected.names]):
        if column not in expected.names:
            raise TraceError(f"{name}: column {column}: not a column of a trace export of this kind")
        if column not in schema.names:
            raise TraceError(f"{name}: no column {column}; not a shard of trace export")
        if schema.names.count(column) > 1 or not schema.field(column).type.equals(expected.field(column).type):
            raise TraceError(f"{name}: column {column}: not the type trace export writes ({expected.field(column).type})")
    if schema.names != expected.names:
        raise TraceError(f"{name}: the columns are not in the order trace export writes them")


def check_cells(table, where: str) -> None:
    """Refuse a table (rows being imported, or a row being exported) holding an image over
    :data:`MAX_IMAGE_BYTES` or a string over :data:`MAX_STRING_BYTES`, naming the field."""
    import pyarrow.compute as pc

    for field, column in zip(table.schema, table.columns):
        for chunk in column.chunks:
            for path, values in _leaves(chunk, field.name):
                limit = MAX_STRING_BYTES if _is_string(values.type) else MAX_IMAGE_BYTES
                longest = pc.max(pc.binary_length(values)).as_py() if len(values) else None
                if longest is not None and longest > limit:
                    raise TraceError(f"{where}: {path}: a value of {longest:,} bytes, more than trace import reads "
                                     f"({limit:,})")


def _leaves(array, path: str) -> Iterator[tuple[str, Any]]:
    """(field path, array) of every string and binary array inside ``array`` (lists flattened)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):
        for k, child in enumerate(array.flatten()):
            yield from _leaves(child, f"{path}.{kind.field(k).name}")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _leaves(array.flatten(), path)
    elif _is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        yield path, array


def _is_string(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)
