"""Realizing a bound case as prompts (the two-part prompts of TRACE-Bench, arXiv 2608.16765), from templates/prompts/.

The prompt is a scene paragraph in which every reference-conditioned target appears as a
readable handle, ``('corgi_A')``, followed by one line per reference operation naming the
image, the source content (the grounding phrase from the tags) and the target. The
text-only counterpart says the same with every reference replaced by its description: a
no-reference baseline.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from functools import cache

from ..nouns import NOUNS_FILE, agree, describe
from ..operators import Family, Role
from ..records import TermBinding
from ..resources import DataFile, table_name
from ..taxonomy import taxonomy
from ..templating import compile_string, render

__all__ = ["PROMPT_FILES", "Prompts", "in_words", "phrase_name", "realize"]

CLUTTER_FILE = "clutter.toml"  # reference clutter's content: pool mode's lines (hashed only with clutter)
# what a prompt's words depend on (hashed into the sample manifest); the noun lists name the entities
PROMPT_FILES = ("prompts/prompt.j2", "prompts/lines.toml", "prompts/phrases.toml", NOUNS_FILE)
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


@dataclass(frozen=True)
class Prompts:
    prompt: str
    text_only: str
    scene: str  # the paragraph's opening, "{members}"/"{member}" where the entities go


def in_words(t: TermBinding) -> bool:
    """Whether a term is reference content a diagnostic sub-case states only in words: a g term
    downgraded to prose (its carrier, or the whole image, still takes it) or a g_rel turned T_rel."""
    return t.op == Family.TEXT and t.replaces is not None and t.role != Role.TEXT


_PHRASES = DataFile("templates", "prompts/phrases.toml")
_LINES = DataFile("templates", "prompts/lines.toml")
_POOL = DataFile("templates", CLUTTER_FILE)
_FRAMES = ("settings", "neutral", "together", "alone")


@dataclass(frozen=True)
class _Phrases:
    names: dict[str, str]  # subtype -> what a g term of it carries over ("pattern")
    frames: dict[str, tuple[str, ...]]  # settings, neutral, together, alone


@cache
def _phrases() -> _Phrases:
    raw = _PHRASES.read()
    subtypes = _PHRASES.tables("", raw, "subtypes", {})
    names = {key: _PHRASES.value(table_name("subtypes", key), entry, "name", str, "attribute")
             for key, entry in subtypes.items()}
    frames = _PHRASES.value("", raw, "frames", dict)
    return _Phrases(names, {part: _PHRASES.strings("frames", frames, part) for part in _FRAMES})


@cache
def _lines() -> dict[str, tuple[DataFile, dict]]:
    """Per part (``reference``, ``text``, ``prose``, ``pool``): the file it comes from and its compiled rows."""
    raw = _LINES.read()
    parts = {part: (_LINES, _LINES.value("", raw, part, dict)) for part in raw}
    parts["pool"] = (_POOL, _POOL.value("", _POOL.read(), "pool", dict))
    return {part: (file, {role: compile_string(file.value(part, table, role, str)) for role in table})
            for part, (file, table) in parts.items()}


def _line(part: str, role: str):
    """The compiled row ``role`` of ``part``; a DataError when the file has none."""
    lines = _lines()
    if part not in lines:
        raise _LINES.error("missing", "", part)
    file, rows = lines[part]
    if role not in rows:
        raise file.error("missing", part, role)
    return rows[role]


def phrase_name(subtype: str | None) -> str:
    """What a g term carries over, as a noun phrase: "pattern", "style", "item"."""
    return _phrases().names.get(subtype or "", "attribute")


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _quoted(handle: str) -> str:
    return f"('{handle}')"


def _agreed(pattern: str, noun: str | None) -> str:
    """A scene pattern with its verbs, ``{is}``, ``{stands}``, agreeing with the lone member's
    noun; ``{member}`` and ``{members}`` stay where the entities go."""
    fields = {field for _, field, _, _ in string.Formatter().parse(pattern) if field}
    places = {"member": "{member}", "members": "{members}"}
    return pattern.format(**places, **{f: agree(f, noun) for f in fields - set(places)})


def _draw_scene(terms: tuple[TermBinding, ...], carriers: list[TermBinding], has_scene: bool,
                rng: random.Random) -> str:
    """A scene opening: a setting (a neutral one when a term replaces the background) and how
    the entities stand in it, ``{members}``/``{member}`` where they go."""
    frames = _phrases().frames
    backgrounds = {key for key, s in taxonomy().special.items() if s.record == "background"}
    takes_background = any(t.op == Family.DISENTANGLE and t.role == Role.GLOBAL and t.subtype in backgrounds for t in terms)
    frame = rng.choice(frames["neutral"] if takes_background else frames["settings"])
    pattern = rng.choice(frames["together"] if has_scene and len(carriers) > 1 else frames["alone"])
    return f"{frame} {_agreed(pattern, carriers[0].noun if carriers else None)}"


@dataclass(frozen=True)
class _Names:
    """How a case's terms are named: in the prompt by handle, in the text-only prompt by noun."""

    by_symbol: dict[str, TermBinding]
    noun_counts: dict[str, int]  # carriers per noun

    @classmethod
    def of(cls, terms: tuple[TermBinding, ...], carriers: list[TermBinding]) -> "_Names":
        noun_counts: dict[str, int] = {}
        for t in carriers:
            noun_counts[t.noun] = noun_counts.get(t.noun, 0) + 1
        return cls({t.symbol: t for t in terms}, noun_counts)

    def mention(self, t: TermBinding) -> str:  # in the prompt
        return _quoted(t.handle) if t.op == Family.ANCHOR else f"{t.value} {_quoted(t.handle)}"

    def text_name(self, t: TermBinding) -> str:  # "the teapot", or "the second child" when nouns repeat
        if self.noun_counts[t.noun] == 1:
            return f"the {t.noun}"
        return f"the {_ORDINALS[ord(t.handle.rsplit('_', 1)[1][0]) - ord('A')]} {t.noun}"


def _members(scene: str, names: list[str]) -> str:
    return scene.format(members=_join(names), member=names[0] if names else "")


def _line_role(t: TermBinding, worded: bool) -> str:
    """The row of templates/prompts/lines.toml a term's line takes."""
    if t.role == Role.RELATION and t.op == Family.TEXT and not worded:
        return "text_relation"
    return Role.ANCHOR if t.op == Family.ANCHOR else t.role


def _context(t: TermBinding, carrier: TermBinding | None, names: _Names) -> dict:
    """What a term's lines are filled with."""
    carried_by = _quoted(carrier.handle) if carrier and carrier.handle else ""
    return {
        "carrier": _quoted(t.handle) if t.op == Family.ANCHOR else carried_by,
        "noun": (carrier.noun if carrier and carrier.noun else t.noun) or "",
        "source": t.entity or "",
        "image": t.image or "",
        "described": describe(t.entity) if t.entity else t.value,
        "name": phrase_name(t.subtype),
        "value": t.value,
        "participants": _join([_quoted(names.by_symbol[p].handle) for p in t.participants]),
        "text_participants": _join([names.text_name(names.by_symbol[p]) for p in t.participants]).capitalize(),
    }


@dataclass
class _Parts:
    """The prompts as the terms are added: the two scene paragraphs, the prompt's reference
    lines and the text-only prompt's sentences."""

    paragraph: str
    text_paragraph: str
    lines: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)

    def add(self, t: TermBinding, names: _Names, pooled: frozenset[str]) -> None:
        carrier = names.by_symbol.get(t.carrier) if t.carrier else None
        worded = in_words(t)
        role = _line_role(t, worded)
        context = _context(t, carrier, names)
        part = "prose" if worded else "pool" if t.symbol in pooled and role in _lines()["pool"][1] else "reference"
        line = _line(part, role)(context)
        sentence = _line("text", role)(context)
        if worded:  # reference content stated in words: part of the scene description
            self.paragraph += " " + line
        elif role == "text_relation":  # no reference: it belongs to the scene description
            self.paragraph += " " + line
            self.text_paragraph += " " + sentence
        elif line:
            self.lines.append(line)
        if role != Role.ANCHOR and carrier is not None and carrier.handle:
            sentence = sentence.replace(f"The {context['noun']}", names.text_name(carrier).capitalize(), 1)
        if sentence and role != "text_relation":
            self.sentences.append(sentence)


def realize(terms: tuple[TermBinding, ...], has_scene: bool, rng: random.Random | None = None, *,
            scene: str | None = None, pooled: frozenset[str] = frozenset()) -> Prompts:
    """The prompt and its text-only counterpart for a case's bound terms.

    ``pooled``: the symbols of terms whose source image the prompt does not name (pool mode
    of reference clutter): their line describes the source (``templates/clutter.toml``, table
    ``pool``) and the model must find it among the references.

    The scene opening (a setting and how the entities stand in it) is drawn with ``rng``
    unless ``scene`` gives it: a diagnostic sub-case keeps its root's scene. Terms stated in
    words (:func:`in_words`) join the scene paragraph, since they are no reference operation.
    """
    carriers = [t for t in terms if t.handle]
    if scene is None:
        if rng is None:
            raise TypeError("realize needs an rng to draw the scene, or the scene itself")
        scene = _draw_scene(terms, carriers, has_scene, rng)
    names = _Names.of(terms, carriers)
    text_paragraph = _members(scene, [t.value for t in carriers])
    parts = _Parts(_members(scene, [names.mention(t) for t in carriers]),
                   text_paragraph[0].upper() + text_paragraph[1:] if text_paragraph else text_paragraph)
    for t in terms:
        if t.role != Role.TEXT:
            parts.add(t, names, pooled)
    prompt = render("prompts/prompt.j2", paragraph=parts.paragraph, lines=parts.lines)
    text_only = " ".join(["Generate a new scene.", parts.text_paragraph, *parts.sentences])
    return Prompts(prompt.strip(), text_only.strip(), scene)
