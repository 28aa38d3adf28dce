"""Interval estimates with the standard library: a Wilson score interval for a probability
and the exact (Garwood) Poisson interval for a rate.

Both are closed forms or a bisection on finite sums, so they need no SciPy: the Gamma
quantiles of the rate interval come from the identity
``P(Gamma(k, 1) <= x) = P(Poisson(x) >= k)`` for a whole ``k``, a sum of ``k`` terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

#: The confidence of every interval ``advise`` prints.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A fitted value with its interval and the observations behind it.

    ``value`` is ``None`` when there was nothing to estimate from (``n == 0``). For a
    probability ``n`` is the number of trials (Bernoulli) and ``events`` the successes; for
    a rate ``n`` is the number of events and ``exposure`` the hours observed.
    """

    value: float | None
    low: float | None
    high: float | None
    n: int
    events: int
    exposure: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``advise``, docs/cli.md)."""
        out: dict[str, Any] = {"value": self.value, "low": self.low, "high": self.high,
                               "n": self.n, "events": self.events}
        if self.exposure is not None:
            out["exposure_hours"] = self.exposure
        return out


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """The success probability with its Wilson score interval."""
    if n <= 0:
        return Estimate(None, None, None, 0, 0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), n, successes)


def _poisson_sf(k: int, x: float) -> float:
    """``P(Poisson(x) >= k)`` for a whole ``k >= 1``: ``1 - sum_{i<k} e^-x x^i / i!``."""
    if x <= 0:
        return 0.0
    term = math.exp(-x)
    if term == 0.0:  # far in the tail: sum in logs
        log_term = -x
        total = 0.0
        for i in range(k):
            if i:
                log_term += math.log(x / i)
            total += math.exp(log_term)
        return max(0.0, 1.0 - total)
    total = 0.0
    for i in range(k):
        if i:
            term *= x / i
        total += term
    return max(0.0, 1.0 - total)


def gamma_quantile(shape: int, q: float) -> float:
    """The ``q`` quantile of ``Gamma(shape, 1)`` for a whole ``shape >= 1`` (bisection)."""
    if shape < 1:
        raise ValueError(f"shape must be >= 1, got {shape}")
    if shape > 2000:  # Wilson-Hilferty: exact to far below the bisection's own tolerance
        z = NormalDist().inv_cdf(q)
        return float(shape * (1 - 1 / (9 * shape) + z / (3 * math.sqrt(shape))) ** 3)
    low, high = 0.0, shape + 10 * math.sqrt(shape) + 10
    while _poisson_sf(shape, high) < q:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        if _poisson_sf(shape, mid) < q:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def poisson_rate(events: int, exposure: float, confidence: float = CONFIDENCE) -> Estimate:
    """Events per unit of ``exposure`` with the exact Poisson (Gamma) interval."""
    if exposure <= 0:
        return Estimate(None, None, None, events, events, max(exposure, 0.0))
    alpha = 1 - confidence
    low = gamma_quantile(events, alpha / 2) / exposure if events else 0.0
    high = gamma_quantile(events + 1, 1 - alpha / 2) / exposure
    return Estimate(events / exposure, low, high, events, events, exposure)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (sorted here; linear between order statistics)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)
