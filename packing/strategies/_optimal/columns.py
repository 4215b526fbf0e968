"""Gilmore–Gomory column generation on the histogram of lengths: the master LP priced by the bounded
knapsack at smoothed duals (Wentges), every priced point's integer prices a valid lower bound. Internal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packing.strategies._optimal.knapsack import bounded_knapsack
from packing.strategies._optimal.master import Master
from packing.strategies._optimal.patterns import Pattern, pattern_of

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_PRICE_SCALE = 2**30
"""Duals are scaled by this and floored to integer prices."""
_EPS = 1e-9
"""A pattern enters the master problem when its reduced cost is below -_EPS."""
_SMOOTHING = 0.8
"""Wentges smoothing: weight of the best duals so far in the pricing point (lowered after each mis-pricing)."""
_BOTH_POINTS = True
"""Price at the LP's own duals too in every step (two columns per LP re-solve: fewer re-solves)."""


@dataclass
class Histogram:
    weights: Int64Array  # distinct lengths, longest first
    demand: Int64Array  # documents of each


@dataclass
class Prices:
    bound: int
    prices: Int64Array
    value: int
    point: FloatArray  # the duals they were floored from


def knapsack_cells(hist: Histogram, capacity: int) -> int:
    """Size of the pricing knapsack's choice table: (capacity + 1) × bundles of 1, 2, 4, ... documents."""
    fit = np.minimum(hist.demand, capacity // hist.weights)
    bundles = int(np.ceil(np.log2(fit + 1)).sum())
    return (capacity + 1) * bundles


def price_bound(hist: Histogram, prices: Int64Array, capacity: int) -> tuple[int, int, Int64Array]:
    """(ceil(sum(demand * price) / V), V, best pattern) for integer prices."""
    value, take = bounded_knapsack(hist.weights, prices, hist.demand, capacity)
    total = int(np.dot(hist.demand, prices)) if len(prices) else 0
    return (-(-total // int(value)) if value > 0 else 0), int(value), take


def singletons(hist: Histogram, capacity: int) -> list[Pattern]:
    out = []
    for i, w in enumerate(hist.weights.tolist()):
        k = min(capacity // w, int(hist.demand[i]))
        out.append(Pattern(np.array([i], dtype=np.int64), np.array([k], dtype=np.int64)))
    return out


@dataclass
class ColumnGeneration:
    master: Master
    x: FloatArray
    objective: float
    best_prices: Prices | None
    converged: bool


def column_generation(
    hist: Histogram, capacity: int, initial: list[Pattern], deadline: float, stop_at: int, exchanges: bool = False
) -> ColumnGeneration:
    """Solve the master LP by pricing patterns until no pattern improves it, the rounded-up dual bound
    reaches ``stop_at``, or the deadline passes.

    Each step prices one knapsack at the smoothed duals (Wentges: ``alpha`` × the duals with the best bound
    so far + the rest × the LP's duals) and, when that finds nothing (or ``BOTH_POINTS``), one at the LP's
    duals; then one warm-started LP re-solve. Every priced point's integer prices are a valid bound.
    """
    master = Master(hist.demand, exchanges=exchanges)
    master.add(singletons(hist, capacity) + initial)
    best: Prices | None = None
    stable: FloatArray | None = None  # smoothing centre: the duals with the best bound so far
    stable_bound = -1.0
    alpha = _SMOOTHING
    demand_f = hist.demand.astype(np.float64)

    def price(point: FloatArray) -> Int64Array:
        nonlocal best, stable, stable_bound
        prices = np.floor(point * _PRICE_SCALE).astype(np.int64)
        bound, value, take = price_bound(hist, prices, capacity)
        if best is None or bound > best.bound:
            best = Prices(bound, prices, value, point)
        if value > 0:
            smooth = float(np.dot(demand_f, prices)) / value
            if smooth > stable_bound:
                stable_bound, stable = smooth, point.copy()
        return take

    objective, x, duals = master.solve()
    converged = False
    while True:
        duals = np.maximum(duals, 0.0)
        found: list[Pattern] = []
        if stable is not None and alpha > 0:
            take = price(alpha * stable + (1 - alpha) * duals)
            if 1.0 - float(np.dot(duals, take)) < -_EPS:
                found.append(pattern_of(take))
            else:
                alpha = max(0.0, alpha - 0.1)
        if not found or _BOTH_POINTS:
            take = price(duals)
            if 1.0 - float(np.dot(duals, take)) < -_EPS:
                found.append(pattern_of(take))
        if best is not None and best.bound >= stop_at:
            break
        if not found:
            converged = True
            break
        if time.perf_counter() > deadline:
            break
        master.add(found)
        objective, x, duals = master.solve()
    return ColumnGeneration(master, x, objective, best, converged)


def histogram_of(counts: Int64Array, capacity: int) -> tuple[Histogram, Int64Array]:
    """(distinct lengths longest first with their counts, item of each length) from ``counts[w]`` = documents
    of length ``w``. O(L)."""
    weights = np.flatnonzero(counts)[::-1].astype(np.int64)
    item_index = np.zeros(capacity + 1, dtype=np.int64)
    item_index[weights] = np.arange(len(weights))
    return Histogram(weights, counts[weights].astype(np.int64)), item_index
