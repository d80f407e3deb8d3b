"""The Jinja2 environments: templates/ as the loader, StrictUndefined everywhere.

A missing variable is an error, never an empty string: a prompt with a hole in it is
worse than no prompt. Prompts are plain text (no escaping); HTML pages (``*.html.j2``)
render through :func:`html_environment`, which escapes every value.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from .resources import data_dir, data_hash

__all__ = ["compile_string", "environment", "html_environment", "render", "render_html", "template_hash"]


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


@cache
def html_environment() -> jinja2.Environment:
    """For HTML pages: every value escaped unless marked safe (a prompt with <script> shows as text)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(name: str, **context: Any) -> str:
    """Render the HTML page ``templates/<name>``, escaping every value."""
    return html_environment().get_template(name).render(**context)


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>``."""
    return environment().get_template(name).render(**context)


@cache
def template_hash(*names: str) -> str:
    """SHA-256 of the named templates, for manifests and cache keys (read once per process)."""
    return data_hash(*(("templates", name) for name in names))


def compile_string(text: str):
    """A Jinja2 string template as a function ``f(context: dict) -> str``.

    Templates that are only text and ``{{ name }}`` substitutions (all prompt lines and
    checklist questions today) render by joining strings, about ten times faster than a
    Jinja2 render call: ``trace sample`` renders some thirty of them per case. Anything
    else (filters, tags, attribute access) goes through Jinja2. Both raise
    ``jinja2.UndefinedError`` for a missing variable.
    """
    env = environment()
    body = env.parse(text).body
    parts: list[tuple[bool, str]] = []  # (is a variable, text or name)
    simple = all(isinstance(node, jinja2.nodes.Output) for node in body)
    if simple:
        for node in body:
            for child in node.nodes:
                if isinstance(child, jinja2.nodes.TemplateData):
                    parts.append((False, child.data))
                elif isinstance(child, jinja2.nodes.Name) and child.ctx == "load":
                    parts.append((True, child.name))
                else:
                    simple = False
    if not simple:
        template = env.from_string(text)
        return lambda context: template.render(context)

    def render_simple(context: dict) -> str:
        out = []
        for is_name, value in parts:
            if not is_name:
                out.append(value)
                continue
            try:
                out.append(str(context[value]))
            except KeyError:
                raise jinja2.UndefinedError(f"{value!r} is undefined") from None
        return "".join(out)

    return render_simple
