"""The Jinja2 environments: templates/ as the loader, StrictUndefined everywhere.

A missing variable is an error, never an empty string: a prompt with a hole in it is
worse than no prompt. Prompts are plain text (no escaping); HTML pages (``*.html.j2``)
render through :func:`html_environment`, which escapes every value.

Prompt templates have one filter of their own, ``agree`` (:func:`tracebench.nouns.agree`):
words written for a singular subject, made to agree in number with a noun,
``{{ "takes" | agree(noun) }}`` ("take" after "towers"), ``{{ "this" | agree(name) }}``
("these" before "wear marks"); and ``besides`` (:func:`tracebench.nouns.besides`): a list of traits
without the one a name names, ``{{ name | besides("shape", "colors", "identity") }}`` ("colors
or identity" for a shape).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from .errors import DataError
from .nouns import agree, besides
from .resources import data_dir, data_hash

__all__ = ["compile_string", "environment", "html_environment", "render", "render_html", "template_hash"]


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # prompts are plain text, not HTML
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["agree"] = agree
    env.filters["besides"] = besides
    return env


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


def _template(env: jinja2.Environment, name: str) -> jinja2.Template:
    """``templates/<name>``; a template that does not compile is one line naming it and its line."""
    try:
        return env.get_template(name)
    except jinja2.TemplateSyntaxError as err:
        raise DataError(f"templates/{err.name or name}", f"line {err.lineno}: {err.message}") from None


def render_html(name: str, **context: Any) -> str:
    """Render the HTML page ``templates/<name>``, escaping every value."""
    return _template(html_environment(), name).render(**context)


def render(name: str, **context: Any) -> str:
    """Render ``templates/<name>``."""
    return _template(environment(), name).render(**context)


@cache
def template_hash(*names: str) -> str:
    """SHA-256 of the named templates, for manifests and cache keys (read once per process)."""
    return data_hash(*(("templates", name) for name in names))


def compile_string(text: str):
    """A Jinja2 string template as a function ``f(context: dict) -> str``.

    Templates that are only text, ``{{ name }}`` substitutions and filters of constants and
    names without keywords (``{{ "takes" | agree(noun) }}``; all prompt lines and checklist
    questions today) render by joining strings, about ten times faster than a Jinja2
    render call: ``trace sample`` renders some thirty of them per case. Anything else
    (tags, attribute access, expressions) goes through Jinja2. Both raise
    ``jinja2.UndefinedError`` for a missing variable.
    """
    env = environment()
    body = env.parse(text).body
    nodes = jinja2.nodes

    def value_of(node) -> tuple | None:  # a constant, a name, or a filter of those
        if isinstance(node, nodes.Const):
            return ("const", node.value)
        if isinstance(node, nodes.Name) and node.ctx == "load":
            return ("name", node.name)
        if (isinstance(node, nodes.Filter) and node.name in env.filters and node.node is not None
                and not node.kwargs and node.dyn_args is None and node.dyn_kwargs is None):
            operands = [value_of(n) for n in (node.node, *node.args)]
            if all(operands):
                return ("filter", env.filters[node.name], tuple(operands))
        return None

    parts: list[tuple] = []
    simple = all(isinstance(node, nodes.Output) for node in body)
    if simple:
        for node in body:
            for child in node.nodes:
                part = ("text", child.data) if isinstance(child, nodes.TemplateData) else value_of(child)
                if part is None:
                    simple = False
                    break
                parts.append(part)
    if not simple:
        template = env.from_string(text)
        return lambda context: template.render(context)

    # The template as one f-string over the context ``_c``: text parts are constants, a name
    # ``_c["name"]``, a filter a call of it; every value through str() (``!s``), as Jinja2 does.
    namespace: dict[str, Any] = {}
    names: set[str] = set()

    def constant(value: Any) -> str:
        key = f"_k{len(namespace)}"
        namespace[key] = value
        return key

    def expression(part: tuple) -> str:
        kind, value = part[0], part[1]
        if kind == "name":
            names.add(value)
            return f"_c[{value!r}]"
        if kind == "filter":
            return f"{constant(value)}({', '.join(expression(operand) for operand in part[2])})"
        return constant(value)

    fields = "".join("{" + (constant(part[1]) if part[0] == "text" else expression(part)) + "!s}" for part in parts)
    fast = eval(f"lambda _c: f{fields!r}", namespace)  # noqa: S307 - built above from constants and names only

    def render_simple(context: dict) -> str:
        try:
            return fast(context)
        except KeyError:
            missing = sorted(name for name in names if name not in context)
            if missing:
                raise jinja2.UndefinedError(f"{missing[0]!r} is undefined") from None
            raise

    return render_simple
