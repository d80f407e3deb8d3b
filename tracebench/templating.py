"""The one Jinja2 environment: templates/ as the loader, StrictUndefined everywhere.

A missing variable is an error, never an empty string: a prompt with a hole in it is
worse than no prompt.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from .resources import data_dir, data_hash

__all__ = ["environment", "render", "template_hash"]


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are plain text, not HTML
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>``."""
    return environment().get_template(name).render(**context)


def template_hash(*names: str) -> str:
    """SHA-256 of the named templates, for manifests."""
    return data_hash(*(("templates", name) for name in names))
