"""Hypothesis strategies for formula ASTs and strings."""

from __future__ import annotations

from hypothesis import strategies as st

from tracebench.formula import (
    Anchor,
    AnchorBinding,
    Apply,
    Compose,
    Disentangle,
    DisentangleBinding,
    Text,
    language,
)

LANG = language()
KINDS = sorted(LANG.kinds)
LOCAL_KINDS = [None] + [k for k in KINDS if LANG.kinds[k].roles & {"local", "attach", "ip"}]
GLOBAL_ONLY_KINDS = [k for k in KINDS if LANG.kinds[k].roles == {"global"}]
SCENE_GLOBAL_KINDS = [k for k in KINDS if "global" in LANG.kinds[k].roles]
TEXT_ENTITY_NAMES = [n for n, spec in LANG.texts.items() if spec.role == "text"]

# Free text inside bindings: anything but line breaks, quotes and backslashes included.
labels = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=12)
attributes = labels.filter(str.strip)
indices = st.none() | st.integers(0, 30)
images = st.integers(1, 12)

anchor_bindings = st.builds(AnchorBinding, images, labels)
g_bindings = st.builds(DisentangleBinding, images, st.lists(labels, max_size=3).map(tuple), attributes)


def anchors(bound: bool | None = None, index=indices):
    binding = st.none() | anchor_bindings if bound is None else (anchor_bindings if bound else st.none())
    return st.builds(Anchor, index, binding)


def g_terms(kinds, bound: bool | None = None, index=indices):
    binding = st.none() | g_bindings if bound is None else (g_bindings if bound else st.none())
    return st.builds(Disentangle, st.sampled_from(kinds), index, binding)


def texts(names, index=indices):
    return st.builds(Text, st.sampled_from(names), index, st.none() | labels)


# ---- any AST the types allow (may break the language's structural rules) ----

any_modifiers = st.lists(g_terms([None, *KINDS]) | texts(list(LANG.texts)), min_size=1, max_size=4).map(tuple)


def _any_extend(children):
    def chain(carrier, modifiers):
        if isinstance(carrier, Apply):
            return Apply(carrier.carrier, carrier.modifiers + modifiers)
        return Apply(carrier, modifiers)

    return st.builds(Compose, st.lists(children, min_size=1, max_size=4).map(tuple), indices) | st.builds(
        chain, children, any_modifiers
    )


any_exprs = st.recursive(anchors() | texts(list(LANG.texts)), _any_extend, max_leaves=12)


# ---- valid formulas (unnumbered, unbound), by the shapes of templates/space.toml ----
# Numbered symbols must be unique in a formula; these leave every term unnumbered.

def _apply(carrier, modifiers):
    return Apply(carrier, tuple(modifiers)) if modifiers else carrier


DESIGN_KINDS = {k for k in KINDS if "ip" in LANG.kinds[k].roles and not LANG.kinds[k].roles & {"local", "attach"}}
# a carrier takes one design: two g_ip on one entity are refused by validation
local_mods = st.lists(g_terms(LOCAL_KINDS, bound=False, index=st.none()), max_size=3).filter(
    lambda mods: sum(m.kind in DESIGN_KINDS for m in mods) <= 1)
entities = st.one_of(
    st.builds(_apply, anchors(bound=False, index=st.none()), local_mods),
    st.builds(_apply, texts(TEXT_ENTITY_NAMES, index=st.none()), local_mods.filter(bool)),
    texts(TEXT_ENTITY_NAMES, index=st.none()),
)
relations = g_terms(["rel"], bound=False, index=st.none()) | st.builds(Text, st.just("rel"), st.none(), st.none() | labels)
subscenes = st.builds(
    lambda args, rel: Apply(Compose(tuple(args)), (rel,)),
    st.lists(entities, min_size=2, max_size=4),
    relations,
)


@st.composite
def scenes(draw):
    args = draw(st.lists(entities | subscenes, min_size=1, max_size=4))
    scene = Compose(tuple(args))
    if len(args) >= 2 and draw(st.booleans()):
        scene = Apply(scene, (draw(relations),))
    return scene


@st.composite
def valid_exprs(draw):
    body = draw(entities | scenes())
    kinds = SCENE_GLOBAL_KINDS if isinstance(body, Compose) or (
        isinstance(body, Apply) and isinstance(body.carrier, Compose)) else GLOBAL_ONLY_KINDS
    globals_ = draw(st.lists(g_terms(kinds, bound=False, index=st.none()), max_size=2))
    if not globals_:
        return body
    if isinstance(body, Apply):
        return Apply(body.carrier, body.modifiers + tuple(globals_))
    return Apply(body, tuple(globals_))


def shuffled(expr, random):
    """The same formula with every C's arguments and every modifier chain permuted."""
    if isinstance(expr, Compose):
        args = [shuffled(a, random) for a in expr.args]
        random.shuffle(args)
        return Compose(tuple(args), expr.index)
    if isinstance(expr, Apply):
        modifiers = list(expr.modifiers)
        random.shuffle(modifiers)
        return Apply(shuffled(expr.carrier, random), tuple(modifiers))
    return expr
