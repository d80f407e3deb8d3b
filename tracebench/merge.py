"""``trace merge``: combine the folders of shards, runs (``trace run --shard``) or diagnoses
(``trace diagnose --shard``), telling which from what the folders hold."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import TraceError
from .records import DIAGNOSIS_MANIFEST, RUN_MANIFEST, DiagnosisSummary, RunManifest

__all__ = ["merge"]


def _kind(folder: Path) -> str:
    if DIAGNOSIS_MANIFEST.path(folder).is_file():
        return "diagnosis"
    if RUN_MANIFEST.path(folder).is_file():
        return "run"
    raise TraceError(f"{folder}: neither a run folder (no {RUN_MANIFEST.name}) nor a diagnosis folder "
                     f"(no {DIAGNOSIS_MANIFEST.name})")


def merge(folders: Sequence[Path], out: Path) -> RunManifest | DiagnosisSummary:
    """Merge shard folders of one kind into ``out``: the merged run's manifest, or the merged
    diagnosis's summary."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise TraceError("give the folders to merge")
    kinds = [_kind(f) for f in folders]
    for folder, kind in zip(folders, kinds):
        if kind != kinds[0]:
            raise TraceError(f"{folder}: a {kind} folder, but {folders[0]} is a {kinds[0]} folder; "
                             f"merge the shards of one run or of one diagnosis")
    if kinds[0] == "diagnosis":
        from .diagnose import merge_diagnoses

        return merge_diagnoses(folders, out)
    from .run import merge_runs

    return merge_runs(folders, out)
