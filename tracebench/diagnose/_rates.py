"""``trace diagnose --method rates``: failure rates along each failing instance's chain, estimated
from fresh generations, and the hazard shares with their confidence.

The estimand is :mod:`._hazard`'s: the shares of an instance's hazard ``-ln(1 - r)`` that each
simplification along its chain removes (Persistent Failure: what is left at the chain's end).
This module estimates them when every generation is a random draw:

- **Counts.** Each fresh generation of a chain node is one Bernoulli draw of the instance's
  result there (the run's own generation of the root selected the instance, so it is never
  counted: it is biased toward failure). With a judge that errs at rate ``flip`` per question,
  an instance of ``q`` questions reads failed with probability
  ``eps + (1 - eps - rho) r`` (``eps = 1 - (1 - flip)^q``: a pass misread; ``rho = flip (1 -
  flip)^(q - 1)``: the one broken question misread).
- **A chain model.** The root's rate has a Beta prior fitted by marginal likelihood to the root
  counts of its operator's instances (empirical Bayes; :data:`MIN_GROUP` instances at least, else
  of every operator, else flat). Each edge keeps a fraction of its parent's hazard
  (:data:`RHO`: all of it when the rule changed nothing for the instance, down to none), so
  hazards never rise along a chain; each edge's prior over those fractions is a histogram fitted
  by EM over the run's own chains, per chain signature (the operator and every rule of the
  chain) shrunk toward the rule of the operator, the rule, and every edge, with a floor
  (:data:`FLOOR`) spread evenly over the fractions: fitted from a few generations per node, a
  prior can be sharp where the truth is not, and a sharp wrong prior names a source with a
  confidence of 0.95 or more and stops the allocation from asking where it errs (measured:
  expected calibration error 0.04-0.06 without the floor, 0.01-0.02 with it).
- **Posteriors on a grid** (:data:`GRID` cells over ``r``): a chain is a hidden Markov chain of
  cells; forward-backward gives its posterior, and paths drawn from it (forward filtering,
  backward sampling) give the shares.
- **Confidence** of a source: the posterior probability that its share is within ``delta`` of
  the largest. The named source is the most confident; below the threshold the instance is
  Undetermined (its best guess and confidence kept).
- **Allocation** (:class:`Allocator`): a few generations of every chain node, then rounds of
  value of information (the edge priors refitted by :data:`ROUND_STEPS` EM steps first): for
  each node, the expected gain in tolerant accuracy (summed over every instance whose chain
  passes through it, in any tree) from a batch of :data:`BATCH` more
  generations, computed by reweighting the posterior draws by each possible outcome; the best
  node of each tree, best first, until the budget (a mean of generations per tree) is spent or
  no batch is worth a generation.

Everything here is pure and seeded: the same counts give the same requests and estimates (a
resumed diagnosis asks for the same generations, answered from the call cache).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Mapping, Sequence

import numpy as np

from ..operators import Instance
from ..records import MAX_SAMPLES
from ._hazard import PERSISTENT
from ._rules import rules, sources

__all__ = ["BATCH", "Allocator", "Chain", "ChainEstimate", "GRID", "MIN_GROUP", "RHO", "RatesSettings",
           "fit_prior", "observed_rate", "share_sources"]

GRID = 200  # cells over r in (0, 1)
_R = (np.arange(GRID) + 0.5) / GRID
MIN_GROUP = 12  # observed instances a group needs for a prior of its own
BATCH = 4  # generations of a node per allocation step
FIRST = 2  # generations of every chain node before allocation starts
DRAWS = 1024  # posterior draws per chain while allocating
REPORT_DRAWS = 4096  # and for the reported estimates
MIN_CONCORDANT = 30  # (node, instance) pairs whose first generations all agree: deterministic results
MIN_GAIN = 5e-4  # expected tolerant accuracy gained per generation below which nothing is asked
FLAT = (1.0, 1.0)  # the prior where no group has enough data
EM_STEPS = 10  # EM steps of the edge priors before the reported estimates
ROUND_STEPS = 3  # and before each allocation round
FLOOR = 0.05  # the share of every edge prior spread evenly over RHO


@cache
def share_sources() -> tuple[str, ...]:
    """The sources a share can go to, in diagnose/sources.toml's order: every rule's, and Persistent Failure."""
    used = {r.source for r in rules()} | {PERSISTENT}
    return tuple(s for s in sources() if s in used)


@dataclass(frozen=True)
class RatesSettings:
    """How ``rates`` estimates and spends: ``budget`` mean generations per tree (over the trees of
    a window, shared), ``delta`` the tolerance of a share, ``threshold`` the confidence below which
    an instance is Undetermined, ``flip`` the judges' error rate per question."""

    budget: float = 60.0
    delta: float = 0.2
    threshold: float = 0.5
    flip: float = 0.0
    per_tree_cap: float = 4.0  # a tree's generations stop at this many times the budget

    def __post_init__(self) -> None:
        if not self.budget > 0:
            raise ValueError(f"budget {self.budget}: must be above 0")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta {self.delta}: must be between 0 and 1")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold {self.threshold}: must be from 0 to 1")
        if not 0.0 <= self.flip < 0.5:
            raise ValueError(f"flip {self.flip}: must be from 0 to below 0.5")


# ------------------------------------------------------------------------------ likelihood and priors

def observed_rate(rates: np.ndarray, questions: int, flip: float) -> np.ndarray:
    """P(an instance of ``questions`` questions reads failed) at failure ``rates``."""
    if flip <= 0.0:
        return rates
    q = max(questions, 1)
    eps = 1.0 - (1.0 - flip) ** q
    return eps + (1.0 - eps - flip * (1.0 - flip) ** (q - 1)) * rates


def _log_likelihood(fails: int, trials: int, questions: int, flip: float) -> np.ndarray:
    p = observed_rate(_R, questions, flip)
    return fails * np.log(p) + (trials - fails) * np.log1p(-p)


def _log_prior(a: float, b: float) -> np.ndarray:
    log = (a - 1.0) * np.log(_R) + (b - 1.0) * np.log1p(-_R)
    return log - np.logaddexp.reduce(log)


def fit_prior(rows: Sequence[np.ndarray], counts: Sequence[int] | None = None) -> tuple[float, float]:
    """The Beta prior (a, b) maximizing the marginal likelihood of ``rows`` (each an observed
    instance's log-likelihood on the grid; ``counts``: how many instances share each row), a and
    b in [0.05, 200]."""
    from scipy.optimize import minimize

    if not rows:
        return FLAT
    stacked = np.stack(rows)
    top = stacked.max(axis=1)
    likelihood = np.exp(stacked - top[:, None])  # rows x GRID, each row's largest 1
    weight = np.ones(len(rows)) if counts is None else np.asarray(counts, dtype=float)

    def negative(params: np.ndarray) -> float:
        a, b = np.exp(params)
        return -float(weight @ np.log(likelihood @ np.exp(_log_prior(a, b)) + 1e-300))

    best = min((minimize(negative, np.log(start), method="L-BFGS-B", bounds=[(np.log(0.05), np.log(200.0))] * 2)
                for start in ((1.0, 1.0), (0.3, 0.3))), key=lambda r: r.fun)
    a, b = np.exp(best.x)
    return float(a), float(b)


# ------------------------------------------------------------------------------ chains

@dataclass(frozen=True)
class Chain:
    """A failing instance's chain in one tree: its sub-case keys root first, the node ids, the rule
    making each edge, and the instance's question count at each node."""

    tree: str  # the root case id
    instance: Instance
    keys: tuple[str, ...]
    nodes: tuple[str, ...]
    rules: tuple[str, ...]
    questions: tuple[int, ...]

    @property
    def op(self) -> str:
        op = self.instance.op
        return op.value if hasattr(op, "value") else str(op)

    def root_groups(self) -> tuple[tuple, ...]:
        """The groups whose root counts fit this chain's root prior, most specific first."""
        return (("root", self.op), ("root",))

    def edge_groups(self, edge: int) -> tuple[tuple, ...]:
        """The groups of an edge's prior, coarsest first (each a prefix of the next): every edge,
        the rule, the rule of this operator, and the rule of this operator on chains of this
        signature (every rule along the chain, root to end: what a chain goes on to simplify
        says what its earlier edges took away). Measured in simulation against the zoo's exact
        shares, the whole signature beat the rules from the root to the edge alone (tolerant
        accuracy and calibration both), and groups per root slot count were over-confident."""
        rule = self.rules[edge]
        return (("edge",), ("edge", rule), ("edge", rule, self.op), ("edge", rule, self.op, self.rules))


@dataclass(frozen=True)
class ChainEstimate:
    """What ``rates`` reports of one instance: the named source (the most confident), its
    confidence, each source's share (posterior mean, 2.5% and 97.5% quantiles), the probability
    that each source is the dominant one, and each chain node's posterior rate (mean, 2.5%, 97.5%)."""

    source: str
    confidence: float
    shares: Mapping[str, tuple[float, float, float]]
    dominant: Mapping[str, float]
    rates: tuple[tuple[float, float, float], ...]


# ------------------------------------------------------------------------------ the chain model

# An edge keeps a fraction RHO[b] of its parent's hazard (b = 0: all of it, the rule changed nothing
# for the instance); each edge group's prior is a histogram over these fractions, fitted by EM
RHO = np.array([1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0])
_H = -np.log1p(-_R)  # each cell's hazard, increasing


def _targets() -> np.ndarray:
    """fraction bin x cell -> the cell of that fraction of the cell's hazard (never above the cell)."""
    out = np.empty((len(RHO), GRID), dtype=int)
    for b, rho in enumerate(RHO):
        want = rho * _H
        above = np.clip(np.searchsorted(_H, want), 0, GRID - 1)
        below = np.clip(above - 1, 0, GRID - 1)
        nearer = np.where(np.abs(_H[below] - want) <= np.abs(_H[above] - want), below, above)
        out[b] = np.minimum(nearer, np.arange(GRID))
    out[0] = np.arange(GRID)
    return out


_TO = _targets()
KEEP = np.full(len(RHO), 0.5 / (len(RHO) - 1))  # the starting prior of an edge: half "changes nothing"
KEEP[0] = 0.5
_FLAT_ROOT = np.full(GRID, 1.0 / GRID)
SHRINK = 5.0  # pseudo-instances of an edge group's parent prior in its own


def _transition(prior: np.ndarray) -> np.ndarray:
    """cell x cell: P(child's cell | parent's cell) under an edge prior over :data:`RHO` (the last
    few kept: every chain of a prior group shares one)."""
    key = prior.tobytes()
    if key not in _TRANSITIONS:
        if len(_TRANSITIONS) > 256:
            _TRANSITIONS.clear()
        _TRANSITIONS[key] = _make_transition(prior)
    return _TRANSITIONS[key]


_TRANSITIONS: dict[bytes, np.ndarray] = {}


def _make_transition(prior: np.ndarray) -> np.ndarray:
    out = np.zeros((GRID, GRID))
    for b, p in enumerate(prior):
        out[np.arange(GRID), _TO[b]] += p
    return out


@dataclass
class _Chained:
    """One chain's forward-backward pass: scaled forward messages, emissions, backward messages."""

    forward: list[np.ndarray]
    emission: list[np.ndarray]
    backward: list[np.ndarray]


def _forward_backward(root: np.ndarray, emission: list[np.ndarray], edges: list[np.ndarray]) -> _Chained:
    """``root`` the root cell's prior, ``emission`` each position's likelihood over cells (scaled),
    ``edges`` each edge's prior over :data:`RHO`."""
    forward = []
    alpha = root * emission[0]
    for n in range(len(emission)):
        if n:
            moved = sum(p * np.bincount(_TO[b], weights=forward[-1], minlength=GRID)
                        for b, p in enumerate(edges[n - 1]) if p > 0)
            alpha = moved * emission[n]
        total = alpha.sum()
        forward.append(alpha / (total + 1e-300))
    backward = [np.ones(GRID)]
    for n in range(len(emission) - 1, 0, -1):
        seen = emission[n] * backward[0]
        beta = sum(p * seen[_TO[b]] for b, p in enumerate(edges[n - 1]) if p > 0)
        backward.insert(0, beta / (beta.max() + 1e-300))
    return _Chained(forward, emission, backward)


def _edge_posteriors(chained: _Chained, edges: list[np.ndarray]) -> list[np.ndarray]:
    """Each edge's posterior over :data:`RHO` (the expected counts of EM)."""
    out = []
    for n, prior in enumerate(edges):
        seen = chained.emission[n + 1] * chained.backward[n + 1]
        xi = np.array([p * float(chained.forward[n] @ seen[_TO[b]]) for b, p in enumerate(prior)])
        out.append(xi / (xi.sum() + 1e-300))
    return out


def _sample_paths(chained: _Chained, edges: list[np.ndarray], count: int, seed: int) -> np.ndarray:
    """``count`` cell paths drawn from the chain's posterior (forward filtering, backward sampling)."""
    rng = np.random.default_rng(seed)
    length = len(chained.forward)
    cells = np.empty((count, length), dtype=int)

    def pick(weights: np.ndarray, column: np.ndarray) -> np.ndarray:
        """A cell per draw from ``weights[:, column[d]]`` (cells x columns, unnormalized): one
        search over the columns' CDFs laid end to end (column k's in (k, k + 1])."""
        cdf = np.cumsum(weights, axis=0)
        cdf = cdf / np.maximum(cdf[-1:], 1e-300) + np.arange(weights.shape[1])[None, :]
        found = np.searchsorted(cdf.T.ravel(), column + rng.random(len(column))) - column * GRID
        return np.clip(found, 0, GRID - 1)

    cells[:, -1] = pick(chained.forward[-1][:, None], np.zeros(count, dtype=int))
    for n in range(length - 2, -1, -1):
        following, column = np.unique(cells[:, n + 1], return_inverse=True)
        cells[:, n] = pick(chained.forward[n][:, None] * _transition(edges[n])[:, following], column)
    return cells


def _shares(cells: np.ndarray, edge_rules: Sequence[str]) -> np.ndarray:
    """Draws x positions of cells (hazards non-increasing) -> draws x :func:`share_sources` shares."""
    hazards = _H[cells]
    names = share_sources()
    source_of = {r.name: r.source for r in rules()}
    parts = np.zeros((cells.shape[0], len(names)))
    for e, rule in enumerate(edge_rules):
        parts[:, names.index(source_of[rule])] += np.maximum(hazards[:, e] - hazards[:, e + 1], 0.0)
    parts[:, names.index(PERSISTENT)] += hazards[:, -1]
    return parts / parts.sum(axis=1, keepdims=True)


def _close(shares: np.ndarray, delta: float) -> np.ndarray:
    """Draws x sources: whether the source's share is within ``delta`` of the draw's largest."""
    return shares >= shares.max(axis=1, keepdims=True) - delta - 1e-12


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little")


def _estimate(chain: Chain, cells: np.ndarray, delta: float) -> ChainEstimate:
    shares = _shares(cells, chain.rules)
    close = _close(shares, delta).mean(axis=0)
    names = share_sources()
    best = int(np.argmax(close))  # ties: the first in sources.toml's order
    dominant = np.bincount(shares.argmax(axis=1), minlength=len(names)) / len(cells)
    q = np.quantile(shares, [0.025, 0.975], axis=0)
    rates = _R[cells]
    rq = np.quantile(rates, [0.025, 0.975], axis=0)
    return ChainEstimate(
        source=names[best], confidence=float(close[best]),
        shares={s: (float(shares[:, i].mean()), float(q[0, i]), float(q[1, i])) for i, s in enumerate(names)},
        dominant={s: float(dominant[i]) for i, s in enumerate(names)},
        rates=tuple((float(rates[:, i].mean()), float(rq[0, i]), float(rq[1, i])) for i in range(rates.shape[1])))


def _gain(cells: np.ndarray, close: np.ndarray, position: int, questions: int, flip: float, batch: int) -> float:
    """The expected gain in the chain's tolerant accuracy from ``batch`` more generations at
    ``position``: the posterior draws (``cells``, and ``close`` per source) reweighted by each
    possible count of failures."""
    p = observed_rate(_R[cells[:, position]], questions, flip)
    k = np.arange(batch + 1)[:, None]
    weights = _COMBINATIONS[batch][:, None] * p[None, :] ** k * (1.0 - p[None, :]) ** (batch - k)  # outcomes x draws
    after = (weights @ close).max(axis=1).sum() / len(cells)
    return float(after - close.mean(axis=0).max())


_COMBINATIONS = {m: np.array([float(math.comb(m, k)) for k in range(m + 1)]) for m in range(1, 17)}


# ------------------------------------------------------------------------------ allocation

@dataclass
class Allocator:
    """The generations ``rates`` asks for over the chains of a window of trees.

    Call :meth:`requests` for the next generations (sub-case key -> how many more; empty: done),
    :meth:`observe` each generation's results, and :meth:`estimates` at the end."""

    chains: Sequence[Chain]
    settings: RatesSettings
    trees: int
    counts: dict[tuple[str, Instance], list[int]] = field(default_factory=dict)  # (key, instance) -> [fails, trials]
    made: dict[str, int] = field(default_factory=dict)  # key -> fresh generations asked
    rounds: int = 0
    edge_prior: dict[tuple, np.ndarray] = field(default_factory=dict)  # edge group -> prior over RHO
    root_prior: dict[tuple, np.ndarray] = field(default_factory=dict)  # root group -> prior over cells
    carried: Mapping[tuple, tuple[np.ndarray, float]] = field(default_factory=dict)  # earlier windows' expected counts
    fixed: set[str] = field(default_factory=set)  # keys whose generations were identical images: rate 0 or 1
    given: tuple[Mapping[tuple, np.ndarray], Mapping[tuple, np.ndarray]] | None = None  # (edge, root) priors used as
    # they are, never fitted: bench/rates_simulation.py's exact priors, the ceiling of the fit

    def __post_init__(self) -> None:
        self.tree_keys: dict[str, set[str]] = {}
        for chain in self.chains:
            self.tree_keys.setdefault(chain.tree, set()).update(chain.keys)

    @property
    def spent(self) -> int:
        return sum(self.made.values())

    @property
    def allowance(self) -> int:
        return int(round(self.settings.budget * self.trees))

    def tree_spent(self, tree: str) -> int:
        return sum(self.made.get(k, 0) for k in self.tree_keys.get(tree, ()))

    def carry(self) -> dict[tuple, tuple[np.ndarray, float]]:
        """The expected counts of every edge prior group (this window's and those carried): what
        the next window's edge priors start from (a root prior is fitted per window)."""
        return dict(getattr(self, "expected", self.carried))

    def observe(self, key: str, instance: Instance, failed: bool) -> None:
        """One fresh generation's result of ``instance`` at ``key`` (abstained results are not observed)."""
        count = self.counts.setdefault((key, instance), [0, 0])
        count[0] += bool(failed)
        count[1] += 1

    def _asked(self, wanted: dict[str, int]) -> dict[str, int]:
        for key, n in wanted.items():
            self.made[key] = self.made.get(key, 0) + n
        self.rounds += 1
        return wanted

    def requests(self) -> dict[str, int]:
        """The next generations to make: key -> count (empty when done)."""
        if self.rounds == 0:
            first: dict[str, int] = {}
            for chain in self.chains:
                for key in chain.keys:
                    first.setdefault(key, FIRST)
            cap = self.allowance
            return self._asked(dict(list(first.items())[:max(cap // FIRST, 1)]))
        left = self.allowance - self.spent
        if self.rounds == 1 and self.concordant():  # deterministic results: each rate is 0 or 1
            self.fixed.update(key for key, _ in self.counts)
            return {}
        if left < BATCH or not self.chains:
            return {}
        gains = self._gains()
        best: dict[str, tuple[float, str]] = {}  # tree -> (gain per generation, key)
        for key, gain in gains.items():
            for tree in self._trees_of[key]:
                if self.tree_spent(tree) + BATCH > self.settings.per_tree_cap * self.settings.budget:
                    continue
                if gain > best.get(tree, (MIN_GAIN, ""))[0]:
                    best[tree] = (gain, key)
        chosen: dict[str, int] = {}
        for gain, key in sorted(best.values(), key=lambda g: (-g[0], g[1])):
            if key in chosen:
                continue
            if left < BATCH:
                break
            chosen[key] = BATCH
            left -= BATCH
        return self._asked(chosen) if chosen else {}

    def concordant(self) -> bool:
        """Whether the first generations say the generator's results are deterministic: at least
        :data:`MIN_CONCORDANT` (node, instance) pairs generated twice or more, and every one the
        same result each time (different images, maybe, but the same verdicts). A generator that
        fails at random with rates between 0 and 1 disagrees with itself somewhere among so many
        pairs (each agrees twice with probability ``r^2 + (1 - r)^2``); one that does not leaves
        nothing for more generations to learn: none are asked, and every rate is read as 0 or 1
        (as for a generator returning the same image for every seed)."""
        pairs = [(k, n) for k, n in self.counts.values() if n >= 2]
        return len(pairs) >= MIN_CONCORDANT and all(k in (0, n) for k, n in pairs)

    def _edges(self, chain: Chain) -> list[np.ndarray]:
        return [next((self.edge_prior[g] for g in reversed(chain.edge_groups(e)) if g in self.edge_prior), KEEP)
                for e in range(len(chain.rules))]

    def _emissions(self, chain: Chain) -> list[np.ndarray]:
        out = []
        for key, q in zip(chain.keys, chain.questions):
            k, n = self.counts.get((key, chain.instance), (0, 0))
            if key in self.fixed and n:  # the same image every time: the instance always fails or never
                out.append(np.eye(GRID)[GRID - 1 if 2 * k > n else 0])
                continue
            log = _log_likelihood(k, n, q, self.settings.flip)
            out.append(np.exp(log - log.max()))
        return out

    def _passes(self, steps: int = 1) -> dict[Chain, _Chained]:
        """``steps`` EM steps of the edge priors; each chain's forward-backward pass under the
        priors before the last step."""
        emissions = {chain: self._emissions(chain) for chain in self.chains}
        if self.given is not None:
            self.edge_prior, self.root_prior = dict(self.given[0]), dict(self.given[1])
            return {chain: _forward_backward(self._root(chain), emissions[chain], self._edges(chain))
                    for chain in self.chains}
        for _ in range(steps):
            passes, expected = {}, {}
            for chain in self.chains:
                edges = self._edges(chain)
                passes[chain] = done = _forward_backward(self._root(chain), emissions[chain], edges)
                for e, xi in enumerate(_edge_posteriors(done, edges)):
                    for group in chain.edge_groups(e):
                        total = expected.setdefault(group, [np.zeros(len(RHO)), 0])
                        total[0] += xi
                        total[1] += 1
            for group, (xi, n) in self.carried.items():
                total = expected.setdefault(group, [np.zeros(len(xi)), 0])
                total[0] = total[0] + xi
                total[1] += n
            self.expected = {g: (v[0], v[1]) for g, v in expected.items()}
            self.edge_prior = {}
            for group in sorted(expected, key=len):  # coarsest first: each shrunk toward its parent
                parent = self.edge_prior.get(group[:-1], KEEP) if len(group) > 1 else KEEP
                xi, n = expected[group]
                self.edge_prior[group] = (xi + SHRINK * parent) / (n + SHRINK)
            self.edge_prior = {g: (1.0 - FLOOR) * p + FLOOR / len(RHO) for g, p in self.edge_prior.items()}
            self.root_prior = self._root_ml()
        return passes

    def _root(self, chain: Chain) -> np.ndarray:
        return next((self.root_prior[g] for g in chain.root_groups() if g in self.root_prior), _FLAT_ROOT)

    def _root_ml(self) -> dict[tuple, np.ndarray]:
        """Each root group's Beta prior (with :data:`MIN_GROUP` observed instances or more) by
        marginal likelihood of its instances' root counts."""
        flip = self.settings.flip
        rows: dict[tuple, dict[tuple[int, int, int], int]] = {}
        for chain in self.chains:
            k, n = self.counts.get((chain.keys[0], chain.instance), (0, 0))
            if n:
                for group in chain.root_groups():
                    seen = rows.setdefault(group, {})
                    seen[k, n, chain.questions[0]] = seen.get((k, n, chain.questions[0]), 0) + 1
        out = {}
        for group, observed in rows.items():
            if sum(observed.values()) >= MIN_GROUP:
                a, b = fit_prior([_log_likelihood(k, n, q, flip) for k, n, q in observed], list(observed.values()))
                out[group] = np.exp(_log_prior(a, b))
        return out

    def chain_counts(self, chain: Chain) -> list[tuple[int, int]]:
        return [tuple(self.counts.get((key, chain.instance), (0, 0))) for key in chain.keys]  # type: ignore[misc]

    def _gains(self) -> dict[str, float]:
        """Sub-case key -> expected tolerant accuracy gained per generation of a batch there,
        summed over the chains through it."""
        gains: dict[str, float] = {}
        self._trees_of: dict[str, set[str]] = {}
        for chain, done in self._passes(ROUND_STEPS).items():  # the edge priors refitted
            counts = self.chain_counts(chain)
            cells = _sample_paths(done, self._edges(chain), DRAWS,
                                  _seed("allocate", chain.tree, chain.instance, tuple(counts)))
            close = _close(_shares(cells, chain.rules), self.settings.delta).astype(float)
            for i, key in enumerate(chain.keys):
                self._trees_of.setdefault(key, set()).add(chain.tree)
                if self.made.get(key, 0) + BATCH > _MAX_PER_NODE or key in self.fixed:
                    continue
                gains[key] = gains.get(key, 0.0) + _gain(cells, close, i, chain.questions[i], self.settings.flip,
                                                         BATCH) / BATCH
        return gains

    def estimates(self) -> dict[tuple[str, Instance], ChainEstimate]:
        """(tree, instance) -> its estimate, from every generation observed (the edge priors
        refitted to convergence first)."""
        self._passes(EM_STEPS)
        out = {}
        for chain, done in self._passes().items():
            cells = _sample_paths(done, self._edges(chain), REPORT_DRAWS,
                                  _seed("report", chain.tree, chain.instance, tuple(self.chain_counts(chain))))
            out[chain.tree, chain.instance] = _estimate(chain, cells, self.settings.delta)
        return out


_MAX_PER_NODE = MAX_SAMPLES - 1  # generations of a node, the run's root generation aside
