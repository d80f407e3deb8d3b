"""Entity nouns and number agreement, in one place.

:func:`noun_phrase` reads the head noun of a grounding phrase and whether it is plural:
"the tabby cat looking at the camera" -> ``cat``, "two children playing" -> ``children``
(plural). It is a small rule set over the phrase's structure, read left to right:
determiners and quantifiers (which may settle the number: "a fish", "two fish"), then
modifiers and nouns, up to the first post-modifier: a preposition ("the cup of coffee"),
a relative pronoun ("who", "that"), a participle after a noun ("the cat looking",
"the cup held by"), a conjunction or comma after a noun. A possessive starts the phrase
anew ("the man's hat" -> ``hat``); a collective noun gives way to its members ("a group of
children" -> ``children``). The head is the last word before the post-modifier. The word
lists are data (templates/nouns.toml). No parser model is involved.

Number, articles and verb agreement come from ``inflect`` (:func:`is_plural`, :func:`plural`,
:func:`with_article`, :func:`agree`); :func:`agree` is also the Jinja filter ``agree`` of
:mod:`tracebench.templating`: ``{{ "takes" | agree(noun) }}`` is "take" after "towers".
inflect's calls are slow (about 0.1 ms): every answer is cached. inflect is imported on first
use and without typeguard's instrumentation (:func:`_import_inflect`).
"""

from __future__ import annotations

import re
import sys
import threading
import types
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from .resources import DataFile

if TYPE_CHECKING:
    import inflect

__all__ = ["NOUNS_FILE", "NounPhrase", "agree", "besides", "describe", "indefinite", "is_plural", "noun_of", "noun_phrase",
           "plural", "with_article"]

NOUNS_FILE = "nouns.toml"  # in templates/
FALLBACK = "thing"
_NOUNS = DataFile("templates", NOUNS_FILE)

_TOKEN = re.compile(r"[^\W_][\w'’\-]*|[,;:()\[\]&/]")
_POSSESSIVE = re.compile(r"^(.+?)(?:'s|’s|s'|s’)$", re.IGNORECASE)
_NUMBER = re.compile(r"^\d+(?:[.,]\d+)?$")
_ORDINAL = re.compile(r"^\d+(?:st|nd|rd|th)$", re.IGNORECASE)
_BRACKETS = frozenset("()[];:/")  # end a phrase wherever they stand


@dataclass(frozen=True, slots=True)
class NounPhrase:
    noun: str  # the head noun as written ("towers", "T-shirt")
    plural: bool


@dataclass(frozen=True)
class _Lexicon:
    singular_det: frozenset[str]
    plural_det: frozenset[str]
    other_det: frozenset[str]
    prepositions: frozenset[str]
    relatives: frozenset[str]
    participles: frozenset[str]
    with_object: frozenset[str]
    locatives: frozenset[str]
    ing_nouns: frozenset[str]
    ed_words: frozenset[str]
    adjectives: frozenset[str]
    adjective_suffixes: tuple[str, ...]
    not_adjectives: frozenset[str]
    collectives: frozenset[str]
    singular_words: frozenset[str]
    u_stems: frozenset[str]
    plural_words: frozenset[str]
    pronouns: dict[str, str]

    @property
    def determiners(self) -> frozenset[str]:
        return self.singular_det | self.plural_det | self.other_det


@cache
def _lexicon() -> _Lexicon:
    raw = _NOUNS.read()
    table = lambda part: _NOUNS.value("", raw, part, dict)  # noqa: E731
    words = lambda part, key: frozenset(w.lower() for w in _NOUNS.strings(part, table(part), key))  # noqa: E731
    pronouns = table("pronouns")
    return _Lexicon(
        singular_det=words("determiners", "singular"), plural_det=words("determiners", "plural"),
        other_det=words("determiners", "other"), prepositions=words("post_modifiers", "prepositions"),
        relatives=words("post_modifiers", "relatives"), participles=words("post_modifiers", "participles"),
        with_object=words("post_modifiers", "with_object"),
        locatives=words("post_modifiers", "locatives"), ing_nouns=words("not_participles", "ing"),
        ed_words=words("not_participles", "ed"), adjectives=words("adjectives", "words"),
        adjective_suffixes=_NOUNS.strings("adjectives", table("adjectives"), "suffixes"),
        not_adjectives=words("adjectives", "not_adjectives"), collectives=words("collectives", "words"),
        singular_words=words("number", "singular"), u_stems=words("number", "u_stems"),
        plural_words=words("number", "plural"),
        pronouns={word: _NOUNS.value("pronouns", pronouns, word, str) for word in pronouns},
    )


_IMPORTING = threading.Lock()


def _import_inflect() -> types.ModuleType:
    """inflect, imported with a stand-in for typeguard's ``@typechecked``.

    inflect decorates its methods with ``@typechecked``, which parses and recompiles their source
    at every import: 1 to 8 seconds on the machines tried, for every ``trace`` command (an open
    issue, jaraco/inflect#212). The decorator only checks that arguments are strings, which they
    are here, so the module is imported while ``typeguard`` names a module whose ``typechecked``
    returns its function; the real typeguard (or its absence) is restored right after. An
    inflect imported before, elsewhere, is used as it is.
    """
    with _IMPORTING:  # a second thread would find the module half-imported in sys.modules
        return _import_inflect_once()


def _import_inflect_once() -> types.ModuleType:
    if "inflect" in sys.modules:
        return sys.modules["inflect"]
    stand_in = types.ModuleType("typeguard")
    stand_in.typechecked = lambda target=None, **_: target if target is not None else (lambda f: f)  # type: ignore[attr-defined]
    real = sys.modules.get("typeguard")
    sys.modules["typeguard"] = stand_in
    try:
        import inflect
    finally:
        if real is not None:
            sys.modules["typeguard"] = real
        else:
            sys.modules.pop("typeguard", None)
    return inflect


@cache
def _engine() -> "inflect.engine":
    return _import_inflect().engine()


def _participle(low: str, lex: _Lexicon) -> bool:
    """A word that reads as a participle: "looking", "dressed", "held"."""
    if low in lex.participles:
        return True
    if low.endswith("ing") and len(low) > 4:
        return low not in lex.ing_nouns
    if low.endswith("ed") and len(low) > 4 and not low.endswith("eed"):
        return low not in lex.ed_words
    return False


def _modifier(low: str, lex: _Lexicon) -> bool:
    """A word that modifies a head rather than being one ("red", "striped", "running", "2")."""
    return (low in lex.adjectives or (low.endswith(lex.adjective_suffixes) and low not in lex.not_adjectives)
            or _participle(low, lex) or bool(_NUMBER.match(low) or _ORDINAL.match(low)))


def _ends_phrase(low: str, nxt: str, lex: _Lexicon) -> bool:
    """Whether a participle or locative after a noun ends its phrase: when what follows is no
    word of the phrase ("the cat looking at", "the man sitting", "the cup held by", "the cat
    left of"), or when it takes a bare object ("the man wearing glasses"). Otherwise it stands
    before a head: "the chubby spotted dog"."""
    if low in lex.with_object:
        return True
    return (not nxt or not nxt[0].isalnum() or nxt in lex.prepositions or nxt in lex.relatives
            or nxt in lex.determiners or nxt in lex.locatives or nxt in ("next", "and", "or")
            or bool(_NUMBER.match(nxt)))


_CONJUNCTIONS = ("and", "or", "&", ",")


def _determined(low: str, number: bool | None, lex: _Lexicon) -> bool | None:
    """The number a determiner or quantifier says ("a", "two", "1"); else as it was."""
    if low in lex.plural_det or (_NUMBER.match(low) and low != "1"):
        return True
    if low in lex.singular_det or low == "1":
        return False
    return number


def _restarts(token: str, low: str, nxt: str, core: list[str], lex: _Lexicon) -> bool:
    """Whether the phrase starts anew after this word: a possessive ("the man's hat": the
    possessor is a determiner), or the "of" after a collective ("a group of children": the
    members name it)."""
    if _POSSESSIVE.match(token) and low not in lex.singular_words:
        return True
    return bool(core) and low == "of" and core[-1].lower() in lex.collectives and bool(nxt)


def _ends_core(low: str, nxt: str, core: list[str], lex: _Lexicon) -> bool:
    """Whether a word after modifiers and nouns starts a post-modifier: a preposition, a
    relative, a bracket, another determiner ("the cat and the dog"), or, once a candidate head
    is read, a conjunction or a participle or locative that ends the phrase."""
    if low in lex.prepositions or low in lex.relatives or low in _BRACKETS:
        return True
    if (low == "next" and nxt == "to") or (low in lex.determiners and low not in lex.pronouns):
        return True
    nominal = any(not _modifier(w.lower(), lex) for w in core)  # a candidate head is read
    if nominal and low in _CONJUNCTIONS:
        return True
    return nominal and (low in lex.locatives or _participle(low, lex)) and _ends_phrase(low, nxt, lex)


def _head(core: list[str], number: bool | None, lex: _Lexicon) -> NounPhrase:
    if not core:
        return NounPhrase(FALLBACK, False)
    head = core[-1]
    if head.lower() in lex.pronouns:  # "the red one"
        head = lex.pronouns[head.lower()]
    return NounPhrase(head, is_plural(head) if number is None else number)


@lru_cache(maxsize=4096)
def noun_phrase(ent_desc: str) -> NounPhrase:
    """The head noun of a grounding phrase and its number (see the module's docstring)."""
    lex = _lexicon()
    tokens = _TOKEN.findall(ent_desc)
    core: list[str] = []  # modifiers and nouns of the phrase read so far
    number: bool | None = None  # plural, as a determiner says; None: it says nothing
    i = 0
    while i < len(tokens):
        token = tokens[i]
        low = token.lower()
        nxt = tokens[i + 1].lower() if i + 1 < len(tokens) else ""
        if not core and (low in lex.determiners or _NUMBER.match(low)):
            number = _determined(low, number, lex)
            i += 2 if nxt == "of" else 1  # "a couple of", "two of the cats"
            continue
        if not core and not low[0].isalnum():
            i += 1
            continue
        if _restarts(token, low, nxt, core, lex):
            core, number = [], None
            i += 1
            continue
        if core and _ends_core(low, nxt, core, lex):
            break
        if low not in _CONJUNCTIONS:  # a conjunction between modifiers: "the black and white cat"
            core.append(token)
        i += 1
    return _head(core, number, lex)


def noun_of(ent_desc: str) -> str:
    """The head noun of a grounding phrase: "the striped cat on the left" -> "cat"."""
    return noun_phrase(ent_desc).noun


@lru_cache(maxsize=4096)
def is_plural(noun: str | None) -> bool:
    """Whether a noun (or a noun phrase, by its last word) takes a plural verb: "towers",
    "wear marks", "children" do; "cat", "glass", "bus", "cactus", "sheep" do not (nor does
    no noun: a composition)."""
    words = (noun or "").strip().split()
    if not words:
        return False
    word = words[-1].lower()
    lex = _lexicon()
    if word in lex.plural_words:
        return True
    if word in lex.singular_words:
        return False
    singular = _engine().singular_noun(word)
    if not singular or singular == word:  # not a plural, or the same in both (sheep: read as one)
        return False
    if word.endswith("us") and singular == word[:-1] and singular not in lex.u_stems:
        return False  # cactus, octopus, bus (inflect reads them as plurals of "cactu", "bu")
    return True


@lru_cache(maxsize=1024)
def plural(noun: str) -> str:
    """The plural of a noun phrase's last word: "gift box" -> "gift boxes", "person" -> "people"."""
    return _engine().plural_noun(noun)


@lru_cache(maxsize=4096)
def with_article(phrase: str) -> str:
    """A noun phrase with its indefinite article: "an umbrella", "a unicorn", "an hour"."""
    return _engine().a(phrase)


def indefinite(phrase: str) -> str:
    """A noun phrase naming something new, as a text-only prompt does: "the red mug" -> "a red
    mug", "the umbrella" -> "an umbrella", "the lightning towers" -> "lightning towers"; a
    phrase with another determiner or a number stays as it is ("two children", "his hat")."""
    words = phrase.split()
    if not words:
        return phrase
    first = words[0].lower()
    if first not in ("the", "a", "an"):
        if first in _lexicon().determiners or _NUMBER.match(first):
            return phrase
        rest = phrase.strip()
    else:
        rest = " ".join(words[1:])
    if not rest:
        return phrase
    return rest if noun_phrase(rest).plural else with_article(rest)


_DETERMINER_PLURALS = {"this": "these", "that": "those", "a": "some", "an": "some"}


@lru_cache(maxsize=4096)
def agree(words: str, subject: str | None) -> str:
    """``words`` (verbs, or "this"/"that"), written for a singular subject, made to agree with
    ``subject``, a noun or noun phrase: ``agree("takes", "towers")`` is "take", ``agree("this",
    "wear marks")`` is "these", ``agree("wears or carries", "cat")`` stays as it is. Keeps a
    capital: ``agree("Does", "children")`` is "Do"."""
    if not is_plural(subject):
        return words
    out = []
    for word in words.split(" "):
        low = word.lower()
        if low in ("or", "and", ""):
            out.append(word)
            continue
        agreed = _DETERMINER_PLURALS.get(low) or _engine().plural_verb(low)
        out.append(agreed[:1].upper() + agreed[1:] if word[:1].isupper() else agreed)
    return " ".join(out)


@lru_cache(maxsize=256)
def besides(name: str, *traits: str) -> str:
    """``traits`` as "a, b or c", leaving out any that ``name`` names (in either number): a question
    about what comes along with a shape lists "colors or identity", not "shape, colors or identity"."""
    named = {_singular(word) for word in name.lower().split()}
    kept = [trait for trait in traits if _singular(trait.lower()) not in named]
    return kept[0] if len(kept) == 1 else ", ".join(kept[:-1]) + " or " + kept[-1] if kept else ""


def _singular(word: str) -> str:
    return word if not is_plural(word) else (_engine().singular_noun(word) or word)


_PLACE = re.compile(r"\s+(?:on|in|at|to) the (?:far )?(?:left|right|middle|center|centre|top|bottom|front|back)"
                    r"(?: (?:left|right|corner|side))?$", re.IGNORECASE)


def describe(ent_desc: str) -> str:
    """The entity in words without its place in the source image, for text-only prompts:
    "the child with a hair bun in the middle" -> "a child with a hair bun", "the lightning
    towers around the pad" -> "lightning towers around the pad"."""
    return indefinite(_PLACE.sub("", ent_desc.strip()))
