"""The zoo as providers: ``synthetic:PROFILE``, a generator drawing what its profile breaks, and
``oracle[:flip=P,yes-bias=Q]``, a judge answering from the record inside a synthetic image.
Registered as any provider is (``tracebench/providers/_schemes.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TraceError
from ..library import load_library
from ..providers import CallFailed, Generation, Generator, Judge, digest, sample_seed
from ..sample import LibraryIndex
from ._generate import generate
from ._oracle import ORACLE, oracle_reply, parse_oracle
from ._profiles import parse_profile

__all__ = ["OracleJudge", "SyntheticGenerator", "drawn_from"]


class SyntheticGenerator(Generator):
    """``synthetic:PROFILE``: the zoo, in process, drawing from the benchmark's library. It reads
    the whole case (it draws what its profile breaks, distractors included) and reports the
    references it drew from."""

    sees_truth = True

    def __init__(self, profile_spec: str, library: Path | None = None, seed: int | None = None) -> None:
        configured = self.provider_settings  # the command's library and seed, unless given here
        self.profile = parse_profile(profile_spec)
        self.library = library if library is not None or configured is None else configured.library
        # the run's seed; each generation of a case draws with its own (sample_seed)
        self.base_seed = seed if seed is not None else configured.seed if configured is not None else 0
        self.spec = f"synthetic:{self.profile}"
        self._index = None

    def key(self, case, references):
        return {"adapter": "synthetic", "profile": str(self.profile), "case": case.model_dump(mode="json"),
                "seed": self.sample_seed()}

    def sample_seed(self) -> int:
        """The seed this generation is drawn with, read when generating (a Ray worker is told the
        generation per call): the run's for the first, one derived from it for a later one
        (:func:`sample_seed`; what ``run.json`` records as ``sample_seeds``)."""
        return sample_seed(self.base_seed, self.sample)

    def check(self) -> None:
        index = self._library_index()
        if index is not None and not any(image.render for image in index.images):
            raise TraceError(f"--generator {self.spec}: the benchmark's library ({self.library}) has no render plans: "
                             "the synthetic zoo draws only from a synthetic library (trace library synth, or the "
                             "shipped one); for real photos use openai:MODEL, folder:, command: or python:")

    async def generate(self, case, references):
        png, record = generate(case, self.profile, library=self._library_index(), seed=self.sample_seed())
        return Generation(png, drawn_from(case, record))

    def _library_index(self):
        if self._index is None and self.library is not None:
            info, images = load_library(self.library)
            self._index = LibraryIndex.build(self.library, info, images)
        return self._index


def drawn_from(case, record) -> tuple[str, ...] | None:
    """The references a zoo image took content from: each term's own image, except where
    ``distractor-confusion`` took a distractor's instead (then that distractor's); None for a case
    without clutter (nothing to select: its run folder stays as it was) and when the case given
    holds other references than its terms name (a collage)."""
    if case.clutter is None:
        return None
    taken = (record.drawn.get("zoo") or {}).get("confused") or {}
    by_id = {d.id: d.image for d in case.distractors}
    used = [by_id[taken[t.symbol]] if t.symbol in taken else t.image for t in case.terms if t.image]
    names = {r.image for r in case.references}
    return tuple(sorted(dict.fromkeys(used), key=lambda i: int(i.split()[-1]))) if set(used) <= names else None


class OracleJudge(Judge):
    """``oracle``: answers from the record a synthetic image carries; ``oracle:flip=P,yes-bias=Q``
    errs at those rates (``rates``: ``flip=P,yes-bias=Q``; :func:`tracebench.zoo.parse_oracle`)."""

    spec = ORACLE

    def __init__(self, rates: str | None = None) -> None:
        self.errors = parse_oracle(ORACLE if rates is None else f"{ORACLE}:{rates}")
        self.spec = str(self.errors)

    def key(self, case, questions, image, references):
        key = {"adapter": "oracle", "questions": [q.model_dump(mode="json") for q in questions], "image": digest(image)}
        if self.errors:  # the error-free oracle keeps the keys it always had
            key["errors"] = str(self.errors)
        if self.scale != "binary":  # and so does the binary one
            key["scale"] = self.scale
        return key

    async def ask(self, case, questions, image, references):
        try:
            return json.dumps(oracle_reply(questions, image, self.errors, self.scale))
        except TraceError as err:
            raise CallFailed(str(err)) from None
