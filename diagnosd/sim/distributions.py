"""Distributions of per-request quantities and their histogram bucket shares (cached).

The workload model knows each tick's mean and spread of a quantity (a latency, a length); a
histogram needs the share of observations at or below each bucket bound. Means are quantised to
1 % so a day of ticks reuses a few hundred cached share vectors instead of recomputing them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

SQRT2 = math.sqrt(2.0)


@dataclass(frozen=True)
class LogNormal:
    mean: float
    sigma: float

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma * self.sigma / 2.0

    def cdf(self, x: float) -> float:
        if x <= 0.0:
            return 0.0
        return 0.5 * (1.0 + math.erf((math.log(x) - self.mu) / (self.sigma * SQRT2)))

    def capped_mean(self, cap: float) -> float:
        """E[min(X, cap)]: the mean length of replies cut at max_tokens."""
        if cap <= 0.0:
            return 0.0
        z = (math.log(cap) - self.mu - self.sigma * self.sigma) / self.sigma
        below = self.mean * 0.5 * (1.0 + math.erf(z / SQRT2))
        return below + cap * (1.0 - self.cdf(cap))


@dataclass(frozen=True)
class Shape:
    """What a histogram observes in one tick: a log-normal, optionally mixed and capped.

    `tail` is a second log-normal component with weight `tail_share` (the long prompts); `cap`
    puts all mass above it at the cap (replies stopped at max_tokens).
    """

    mean: float
    sigma: float
    tail_mean: float = 0.0
    tail_share: float = 0.0
    cap: float = 0.0

    def cdf(self, x: float) -> float:
        if self.cap and x >= self.cap:
            return 1.0
        main = LogNormal(self.mean, self.sigma).cdf(x)
        if not self.tail_share:
            return main
        tail = LogNormal(self.tail_mean, self.sigma).cdf(x)
        return (1.0 - self.tail_share) * main + self.tail_share * tail

    def expected(self) -> float:
        """The mean observation: what `_sum` grows by per observation."""
        main = LogNormal(self.mean, self.sigma)
        tail = LogNormal(self.tail_mean, self.sigma) if self.tail_share else None
        if self.cap:
            m = main.capped_mean(self.cap)
            t = tail.capped_mean(self.cap) if tail else 0.0
        else:
            m, t = self.mean, self.tail_mean
        return (1.0 - self.tail_share) * m + self.tail_share * t


def shape(mean: float, sigma: float, *, tail_mean: float = 0.0, tail_share: float = 0.0, cap: float = 0.0) -> Shape:
    """A Shape with its means quantised to 1 % (the cache key), never below a tiny positive value."""
    return Shape(_q(mean), round(sigma, 3), _q(tail_mean) if tail_share else 0.0, round(tail_share, 4), cap)


def point(value: float) -> Shape:
    """Every observation equals `value` (a fixed request parameter such as max_tokens)."""
    return Shape(value, 0.0, cap=value)


def _q(value: float) -> float:
    value = max(value, 1e-9)
    return float(f"{math.exp(round(math.log(value), 2)):.6g}")


@lru_cache(maxsize=65536)
def shares(dist: Shape, bounds: tuple[float, ...]) -> tuple[float, ...]:
    """Share of observations <= each bound (the last bound is +Inf), monotone by construction."""
    out: list[float] = []
    last = 0.0
    for bound in bounds:
        value = 1.0 if math.isinf(bound) else (_point_cdf(dist, bound) if dist.sigma == 0.0 else dist.cdf(bound))
        last = max(last, min(1.0, value))
        out.append(last)
    return tuple(out)


@lru_cache(maxsize=65536)
def expected(dist: Shape) -> float:
    return dist.mean if dist.sigma == 0.0 else dist.expected()


def _point_cdf(dist: Shape, bound: float) -> float:
    return 1.0 if bound >= dist.mean else 0.0


def with_inf(bounds: Sequence[float]) -> tuple[float, ...]:
    return (*bounds, math.inf)
