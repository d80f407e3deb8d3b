"""``trace run --dry-run``: what a run would cost, counted without any call.

For every case the run would still make (cases done in the run folder, other shards and cases
over the generator's limit on images left out), the generation and each judge's calls are
looked up in the cache as the run would look them up; what is there costs nothing. Counted:
cases, images to generate, judge calls (one a case, or one an operator with ``--judge-batch
op``), the images sent (the generated image and the references each call sends:
:meth:`~tracebench.providers.Judge.references_sent`, with ``--judge-batch op`` a served judge's
only those its batch's questions name), and an estimate of the judges' tokens, by these
documented rules:

- **text**: a quarter of the characters of the text a served judge is sent (its system and
  user prompt, :meth:`~tracebench.providers.Judge.prompt_text`), rounded up: OpenAI's rule of
  thumb for English (about four characters a token); judges that are no served model send none;
- **images**: OpenAI's per-image rule for vision input at the default detail: the image is
  scaled to fit 2048 x 2048, then its shorter side to 768; it costs 85 tokens plus 170 per
  512-pixel tile (:func:`image_tokens`), for each image a call sends. A reference's size is
  read from its file; a generated image not in the cache is assumed to be
  :data:`ASSUMED_SIZE` (or the ``size`` generator option, when given);
- **output**: :data:`OUTPUT_TOKENS_PER_QUESTION` tokens per question answered (an id, an
  answer and a one-sentence reason, as the judge prompt asks).

A judge call whose image is not in the cache (a generation still to make, or an image a local
generator makes without a model call) cannot be looked up: it is counted as a call to make, so
the estimate is an upper bound there. With a price file (``--price-file``) the counts become an
estimated cost per model and in all.

``trace run --max-cost`` (:class:`CostBudget`) admits each case by the same rules applied to it
alone (:class:`CostModel`), and charges each call made: by the tokens the server counted when it
said (a reply's ``usage``), else by these rules with the image made.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..cache import Cache, cache_key
from ..errors import TraceError
from ..choices import JudgeBatch
from ..records import Case

__all__ = ["ASSUMED_SIZE", "CostBudget", "CostEstimate", "CostModel", "OUTPUT_TOKENS_PER_QUESTION", "Price",
           "estimate_cost", "format_estimate", "generated_size", "image_tokens", "read_prices", "text_tokens"]

ASSUMED_SIZE = (1024, 1024)  # a generated image not yet made: the usual default of image APIs
OUTPUT_TOKENS_PER_QUESTION = 40


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Record):
    """One model's prices in a price file, in one currency (per million tokens, per call, per image)."""

    input_per_million: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    output_per_million: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    per_call: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    per_image: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="per generated image (generators)")


class CostEstimate(_Record):
    """What ``trace run --dry-run`` prints."""

    cases: int = Field(description="cases the run would still make")
    done: int = Field(description="cases already done in the run folder (nothing to do)")
    not_applicable: int = Field(description="cases over the generator's limit on images (left out)")
    generations: int = Field(description="images to generate by a model call")
    generations_cached: int
    generations_local: int = Field(description="images a local generator makes (folder, zoo): no model call")
    judge_calls: dict[str, int] = Field(description="judge spec -> calls to make")
    judge_calls_cached: dict[str, int]
    images_to_generator: int = Field(description="reference images sent with the generations to make")
    images_to_judges: int = Field(description="images sent with the judge calls to make (references and the "
                                              "generated image)")
    input_tokens: dict[str, int] = Field(description="judge spec -> estimated input tokens (text and images)")
    output_tokens: dict[str, int] = Field(description="judge spec -> estimated output tokens")
    cost: dict[str, float] | None = Field(default=None, description="with a price file: model spec -> estimated cost")
    total: float | None = None
    unpriced: tuple[str, ...] = Field(default=(), description="models making calls that the price file has no price "
                                                              "for (counted as free)")


def read_prices(path: Path) -> dict[str, Price]:
    """A price file: TOML, one table per model spec (``["openai:gpt-4o"]``) of :class:`Price`
    fields; a problem is one line naming the file and the field."""
    import tomllib

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise TraceError(f"--price-file {path}: cannot be read ({error.strerror or error})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise TraceError(f"--price-file {path}: not TOML ({error})") from None
    prices = {}
    for spec, table in data.items():
        if not isinstance(table, dict):
            raise TraceError(f"--price-file {path}: {spec}: expected a table of prices, as [\"{spec}\"]")
        try:
            prices[spec] = Price.model_validate(table)
        except ValidationError as error:
            from ..jsonfiles import problems_of

            raise TraceError(f"--price-file {path}: {spec}.{problems_of(error, Price)[0][1]}") from None
    return prices


def text_tokens(text: str) -> int:
    """Estimated tokens of a text: a quarter of its characters, rounded up."""
    return math.ceil(len(text) / 4)


def image_tokens(size: tuple[int, int]) -> int:
    """OpenAI's vision cost of one image at the default detail: fit in 2048 x 2048, shorter side
    to 768, then 85 tokens plus 170 per 512-pixel tile."""
    width, height = size
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def _size(data: bytes) -> tuple[int, int] | None:
    from ..images import ImageRefused, open_image

    try:
        with open_image(data) as image:  # the header only: no pixel is decoded
            return image.size
    except ImageRefused:  # unreadable or past the pixel limit: not the estimate's business, the assumed size
        return None


def generated_size(options) -> tuple[int, int]:
    """The size a generated image not made yet is taken to be: the ``size`` generation option
    (``1024x1536``) when given, else :data:`ASSUMED_SIZE`."""
    size = str(dict(options or {}).get("size", ""))
    width, sep, height = size.lower().partition("x")
    if sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0:
        return int(width), int(height)
    return ASSUMED_SIZE


@dataclass
class CaseCount:
    """What one case's calls still to make take (:meth:`CostModel.case`)."""

    generation: str = "local"  # local (no model call), cached or call
    images_to_generator: int = 0
    images_to_judges: int = 0
    calls: Counter = field(default_factory=Counter)  # judge spec -> calls to make
    cached: Counter = field(default_factory=Counter)  # judge spec -> calls in the cache
    tokens_in: Counter = field(default_factory=Counter)
    tokens_out: Counter = field(default_factory=Counter)


class CostModel:
    """The rules of the module docstring for one case at a time (what the dry run sums, what
    ``--max-cost`` admits a case by) and for one judge call made (what it charges)."""

    def __init__(self, *, references, generator, judges: Sequence, judge_batch: str, cache: Cache | None,
                 generated: tuple[int, int] | None = None, collaged: frozenset[str] = frozenset(),
                 samples: int = 1) -> None:
        self.references, self.generator, self.judges = references, generator, list(judges)
        self.samples = samples  # trace run --samples K: each case generated K times, each judged (own cache keys)
        self.judge_batch, self.cache, self.collaged = judge_batch, cache, collaged
        self.generated = generated or ASSUMED_SIZE
        self._sizes: OrderedDict[str, int] = OrderedDict()  # reference path -> its image tokens (the latest kept)

    def _reference_tokens(self, case: Case, refs: Sequence[bytes], sent: Iterable[int] | None = None) -> int:
        """The image tokens of the case's references ``sent`` (their places; None: every one)."""
        total = 0
        for k in range(len(refs)) if sent is None else sent:
            ref, data = case.references[k], refs[k]
            tokens = self._sizes.get(ref.path)
            if tokens is None:
                tokens = self._sizes[ref.path] = image_tokens(_size(data) or self.generated)
                if len(self._sizes) > _KEPT_SIZES:
                    self._sizes.popitem(last=False)
            total += tokens
        return total

    def _made_tokens(self, image: bytes | None) -> int:
        return image_tokens((_size(image) if image is not None else None) or self.generated)

    def counts(self, case: Case) -> list[CaseCount]:
        """:meth:`case` for each sample the run makes of ``case`` (one without ``--samples``)."""
        from ..providers import asking

        if self.samples == 1:
            return [self.case(case)]
        counts = []
        for k in range(self.samples):
            with asking(k):  # generation k's cache keys
                counts.append(self.case(case))
        return counts

    def case(self, case: Case) -> CaseCount:
        """The calls of ``case`` not in the cache, and their estimated tokens."""
        from ..providers import collage_case, generation_key
        from ._harness import _by_op  # the judge's batches, as the run makes them

        count = CaseCount()
        refs = [self.references.get(ref.path) for ref in case.references]
        sent, given = collage_case(case, refs) if case.id in self.collaged else (case, refs)
        key = generation_key(self.generator, sent, given)
        image = None
        if key is not None:
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None and hit[1] is not None:
                count.generation, image = "cached", hit[1]
            else:
                count.generation, count.images_to_generator = "call", len(given)
        made_tokens = self._made_tokens(image)
        batches = [list(case.checklist)] if self.judge_batch == JudgeBatch.CASE else _by_op(case.checklist)
        for judge in self.judges:
            for batch in batches:
                if image is not None and self.cache is not None and \
                        self.cache.get(cache_key(**judge.key(case, batch, image, refs))) is not None:
                    count.cached[judge.spec] += 1
                    continue
                count.calls[judge.spec] += 1
                sent = judge.references_sent(case, batch)  # every reference, or those the batch names
                count.images_to_judges += len(sent) + 1
                text = judge.prompt_text(case, batch)
                if text is not None:  # a served judge: text and images in, answers out
                    count.tokens_in[judge.spec] += text_tokens(text) + self._reference_tokens(case, refs, sent) \
                        + made_tokens
                    count.tokens_out[judge.spec] += OUTPUT_TOKENS_PER_QUESTION * len(batch)
        return count

    def judge_call(self, judge, case: Case, questions: Sequence, image: bytes, references: Sequence[bytes]
                   ) -> tuple[int, int]:
        """The estimated (input, output) tokens of one judge call, its generated image at hand."""
        text = judge.prompt_text(case, questions)
        if text is None:
            return 0, 0
        sent = judge.references_sent(case, questions)
        return (text_tokens(text) + self._reference_tokens(case, references, sent) + self._made_tokens(image),
                OUTPUT_TOKENS_PER_QUESTION * len(questions))


_KEPT_SIZES = 4096  # reference sizes remembered: a run's memory does not grow with its benchmark


def _judge_cost(price: Price, calls: int, tokens_in: int, tokens_out: int) -> float:
    return calls * price.per_call + tokens_in * price.input_per_million / 1e6 + tokens_out * price.output_per_million / 1e6


def _generation_cost(price: Price, calls: int) -> float:
    return calls * (price.per_image + price.per_call)


def estimate_cost(cases: Iterable[Case], model: CostModel, *, done: int = 0, not_applicable: int = 0,
                  prices: dict | None = None) -> CostEstimate:
    """Count what the ``cases`` still to make would cost (see the module docstring), each by
    ``model``: a case of its ``collaged`` is sent its references as one grid image, as the run
    sends it; with its ``samples`` (``--samples K``) every case's K generations and their judge
    calls. ``prices`` (a price file) adds the estimated cost."""
    counts, per_judge = _count_cases(cases, model)
    cost, unpriced = _priced(prices, model, counts["generations"], per_judge)
    return CostEstimate(done=done, not_applicable=not_applicable, **per_judge, cost=cost,
                        total=None if cost is None else sum(cost.values()), unpriced=unpriced, **counts)


_GENERATION_COUNTS = {"local": "generations_local", "cached": "generations_cached", "call": "generations"}
_JUDGE_COUNTS = {"judge_calls": "calls", "judge_calls_cached": "cached", "input_tokens": "tokens_in",
                 "output_tokens": "tokens_out"}  # CostEstimate's field -> CaseCount's


def _count_cases(cases: Iterable[Case], model: CostModel) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The counts of the cases' calls still to make: the whole run's, and per judge spec each of
    :data:`_JUDGE_COUNTS`."""
    counts = dict.fromkeys(("cases", "generations", "generations_cached", "generations_local",
                            "images_to_generator", "images_to_judges"), 0)
    per_judge = {name: {j.spec: 0 for j in model.judges} for name in _JUDGE_COUNTS}
    for case in cases:
        counts["cases"] += 1
        for count in model.counts(case):
            counts[_GENERATION_COUNTS[count.generation]] += 1
            counts["images_to_generator"] += count.images_to_generator
            counts["images_to_judges"] += count.images_to_judges
            for name, attribute in _JUDGE_COUNTS.items():
                counted = getattr(count, attribute)
                for spec in per_judge[name]:
                    per_judge[name][spec] += counted[spec]
    return counts, per_judge


def _priced(prices: dict[str, Price] | None, model: CostModel, generations: int,
            per_judge: dict[str, dict[str, int]]) -> tuple[dict[str, float] | None, tuple[str, ...]]:
    """Model spec -> the estimated cost of its calls to make, and the models making calls that
    ``prices`` has no price for; no cost without prices."""
    if prices is None:
        return None, ()
    cost: dict[str, float] = {}
    unpriced: list[str] = []
    if generations:
        price = prices.get(model.generator.spec)
        if price is None:
            unpriced.append(model.generator.spec)
        else:
            cost[model.generator.spec] = _generation_cost(price, generations)
    for judge in model.judges:
        calls = per_judge["judge_calls"][judge.spec]
        if not calls:
            continue
        price = prices.get(judge.spec)
        if price is None:
            unpriced.append(judge.spec)
            continue
        cost[judge.spec] = _judge_cost(price, calls, per_judge["input_tokens"][judge.spec],
                                       per_judge["output_tokens"][judge.spec])
    return cost, tuple(dict.fromkeys(unpriced))


class CostBudget:
    """``trace run --max-cost``: a budget in money for one invocation, held by admitting whole
    cases (the harness asks :meth:`admit` before starting one) and told of every call made (the
    :class:`~tracebench.providers.ModelAccess` meter).

    A case is admitted when the cost spent so far, plus what the cases in flight may still cost
    (each reserved at its estimate when admitted, released when it ends), plus the case's own
    estimate (:meth:`CostModel.case`, priced: its generation and every judge call not in the
    cache) fits ``limit``. What is spent is charged call by call: a generation its ``per_image``
    and ``per_call``; a judge call its ``per_call`` and its tokens, as the server counted them
    (the reply's ``usage``) or, where it did not say, as estimated by the rules with the image
    made. A call that failed is charged its estimate (it was sent); a retried call once."""

    def __init__(self, limit: float, prices: dict[str, Price], model: CostModel) -> None:
        self.limit, self.prices, self.model = limit, prices, model
        self.spent = 0.0
        self._reserved: dict[str, float] = {}

    def missing(self, first: Case | None) -> list[str]:
        """The models that make calls with no price: every judge, and the generator unless its
        images are no model call (a folder); ``first``: a case the run would make."""
        from ..providers import generation_key

        specs = [j.spec for j in self.model.judges]
        if first is not None:
            refs = [self.model.references.get(ref.path) for ref in first.references]
            if generation_key(self.model.generator, first, refs) is not None:
                specs.insert(0, self.model.generator.spec)
        return [spec for spec in dict.fromkeys(specs) if spec not in self.prices]

    def estimate(self, case: Case) -> float:
        """The most ``case`` may cost: its calls not in the cache, priced by the estimate."""
        cost = 0.0
        for count in self.model.counts(case):  # each sample's generation and judge calls (--samples)
            if count.generation == "call":
                cost += _generation_cost(self.prices[self.model.generator.spec], 1)
            for spec, calls in count.calls.items():
                cost += _judge_cost(self.prices[spec], calls, count.tokens_in[spec], count.tokens_out[spec])
        return cost

    def fits(self, cost: float) -> bool:
        return self.spent + sum(self._reserved.values()) + cost <= self.limit * (1 + 1e-9)

    def reserve(self, case_id: str, cost: float) -> None:
        self._reserved[case_id] = cost

    def release(self, case_id: str) -> None:
        self._reserved.pop(case_id, None)

    # -- the meter of ModelAccess ---------------------------------------------------------------

    def generated(self, generator) -> None:
        self.spent += _generation_cost(self.prices[generator.spec], 1)

    def judged(self, judge, case: Case, questions: Sequence, image: bytes, references: Sequence[bytes], reply) -> None:
        usage = _reported(reply)
        tokens_in, tokens_out = usage or self.model.judge_call(judge, case, questions, image, references)
        self.spent += _judge_cost(self.prices[judge.spec], 1, tokens_in, tokens_out)


def _reported(reply) -> tuple[int, int] | None:
    """The (input, output) tokens a reply's server counted, or None (no reply, or no usable count)."""
    usage = getattr(reply, "usage", None)
    if not isinstance(usage, tuple) or len(usage) != 2:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in usage) or sum(usage) == 0:
        return None
    return usage


def format_estimate(estimate: CostEstimate, out: Path) -> str:
    """The dry run's lines."""
    e = estimate
    lines = [f"{out}: dry run, no call made",
             f"cases to make: {e.cases} ({e.done} done already, {e.not_applicable} not applicable)",
             f"images to generate: {e.generations} by a model call ({e.generations_cached} cached, "
             f"{e.generations_local} made locally); {e.images_to_generator} reference images sent"]
    for spec, n in e.judge_calls.items():
        lines.append(f"judge {spec}: {n} calls ({e.judge_calls_cached[spec]} cached); about "
                     f"{e.input_tokens[spec]:,} input and {e.output_tokens[spec]:,} output tokens")
    lines.append(f"images sent to judges: {e.images_to_judges}")
    if e.cost is not None:
        parts = ", ".join(f"{spec} {value:.2f}" for spec, value in e.cost.items()) or "nothing priced"
        lines.append(f"estimated cost: {e.total:.2f} ({parts})"
                     + (f"; no price for {', '.join(e.unpriced)} (counted as free)" if e.unpriced else ""))
    lines.append("estimates by the rules of docs/evaluate.md (cost): about 4 characters a token, OpenAI's per-image "
                 "rule; a judge call whose image is not made yet is counted as a call")
    return "\n".join(lines)
