"""Model replies: the one place that undoes what servers do to the JSON they were asked for."""

from __future__ import annotations

import re

__all__ = ["DEFAULT_MAX_REPLY_BYTES", "unfence"]

DEFAULT_MAX_REPLY_BYTES = 16_000_000  # a reply body past this is cut off (an abstention): room for a large base64 image

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def unfence(text: str) -> str:
    """The reply without a Markdown code fence around it (servers that ignore
    ``response_format`` often fence their JSON), stripped of surrounding space."""
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1) if fenced else text
