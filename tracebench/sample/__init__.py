"""Sampling a benchmark: templates under quotas, bound to a library, realized, compiled."""

from __future__ import annotations

from ..records import CASES_FILE, MANIFEST_FILE, REFERENCES_DIR, read_cases, read_sample_manifest
from ._bind import BindingError, BoundCase, bind
from ._clutter import CLUTTER_FILE, ClutterSpec, add_clutter, parse_distractors, pooled_roles
from ._index import LibraryIndex
from ._options import SampleOptions
from ._parallel import Written, default_jobs
from ._quotas import QUOTA_FILE, draw_templates, quotas
from ._sample import ManifestInputs, Plan, plan_cases, sample_benchmark, write_benchmark

__all__ = [
    "BindingError",
    "BoundCase",
    "CASES_FILE",
    "CLUTTER_FILE",
    "ClutterSpec",
    "LibraryIndex",
    "MANIFEST_FILE",
    "ManifestInputs",
    "Plan",
    "add_clutter",
    "QUOTA_FILE",
    "REFERENCES_DIR",
    "SampleOptions",
    "Written",
    "bind",
    "default_jobs",
    "draw_templates",
    "parse_distractors",
    "plan_cases",
    "pooled_roles",
    "quotas",
    "read_cases",
    "read_sample_manifest",
    "sample_benchmark",
    "write_benchmark",
]
