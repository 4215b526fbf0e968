"""The proven optimum: the implementation behind ``packing.optimal`` (its docstring describes the method).
Internal: import the public names from ``packing.optimal``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core.arrays import offsets_of, ranges, row_at, row_of
from packing.core.validation import as_lengths, check_max_seq_length, check_time_limit
from packing.errors import SettingError
from packing.strategies.bounds import martello_toth_l2, simple_bound
from packing.strategies.certificate import Certificate, CertificateKind
from packing.strategies.kernels import (
    best_fit_decreasing_layout,
    blocks_of_items,
    first_fit_blocks,
    longest_first_order,
    next_fit_blocks,
)

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_OPTIMAL_DOCUMENTS = 40
"""Inputs up to this many documents are solved by an exhaustive search (then proven even where no bound is tight)."""
MAX_OPTIMAL_NODES = 2_000_000
"""Search steps the exhaustive search may take before the general method takes over."""

MAX_KNAPSACK_CELLS = 200_000_000
"""Beyond this many cells (bytes) in the pricing table (block size × about the distinct lengths), ``solve``
returns best-fit decreasing with its L1 / L2 certificate instead of generating columns."""
_PRICE_SCALE = 2**30
"""Duals are scaled by this and floored to integer prices."""
_LP_SHARE = 0.8
"""Share of ``time_limit`` the main column generation may use; the rest is for the integer plan."""
_EPS = 1e-9
"""A pattern enters the master problem when its reduced cost is below -_EPS."""
_SMOOTHING = 0.8
"""Wentges smoothing: weight of the best duals so far in the pricing point (lowered after each mis-pricing)."""
_BOTH_POINTS = True
"""Price at the LP's own duals too in every step (two columns per LP re-solve: fewer re-solves)."""


@dataclass(frozen=True)
class OptimalResult:
    """``blocks[i]``: block of document i (0..k-1, no gaps); ``proven``: no packing uses fewer blocks.

    ``proven`` is ``certificate.proven``, or True after an exhaustive search of a small input (where
    no bound is tight, ``certificate.gap`` stays above 0 although the plan is optimal).
    """

    blocks: Int64Array
    certificate: Certificate
    proven: bool

    @property
    def num_blocks(self) -> int:
        return self.certificate.num_blocks


class _SearchTooLarge(Exception):
    pass


# ----------------------------------------------------------------------------------------------------------
# Compiled kernels


@njit(cache=True, nogil=True)
def _bounded_knapsack(
    weights: Int64Array, values: Int64Array, counts: Int64Array, capacity: int
) -> tuple[int, Int64Array]:  # pragma: no cover - compiled
    """Best total value of at most ``counts[i]`` items ``i`` within ``capacity``, and how many of each.

    Each count splits into bundles of 1, 2, 4, ... items, each a 0/1 choice; a bit table remembers the
    choices for the way back. O(capacity × bundles), bundles = sum of log2(min(count, capacity / weight)).
    """
    m = weights.shape[0]
    bundles = 0
    for i in range(m):
        left = min(counts[i], capacity // weights[i]) if values[i] > 0 else 0
        step = 1
        while left > 0:
            left -= min(step, left)
            step *= 2
            bundles += 1
    bundle_item = np.empty(bundles, dtype=np.int64)
    bundle_size = np.empty(bundles, dtype=np.int64)
    j = 0
    for i in range(m):
        left = min(counts[i], capacity // weights[i]) if values[i] > 0 else 0
        step = 1
        while left > 0:
            take = min(step, left)
            bundle_item[j] = i
            bundle_size[j] = take
            left -= take
            step *= 2
            j += 1
    best = np.zeros(capacity + 1, dtype=np.int64)
    chosen = np.zeros((bundles, capacity + 1), dtype=np.bool_)
    for j in range(bundles):
        weight = weights[bundle_item[j]] * bundle_size[j]
        gain = values[bundle_item[j]] * bundle_size[j]
        for room in range(capacity, weight - 1, -1):
            candidate = best[room - weight] + gain
            if candidate > best[room]:
                best[room] = candidate
                chosen[j, room] = True
    take_count = np.zeros(m, dtype=np.int64)
    room = capacity
    for j in range(bundles - 1, -1, -1):
        if chosen[j, room]:
            take_count[bundle_item[j]] += bundle_size[j]
            room -= weights[bundle_item[j]] * bundle_size[j]
    return best[capacity], take_count


# ----------------------------------------------------------------------------------------------------------
# Patterns: a multiset of distinct-length indices, stored sparse


@dataclass
class _Pattern:
    items: Int64Array  # indices into the distinct lengths
    counts: Int64Array


def _pattern(take: Int64Array) -> _Pattern:
    nz = np.flatnonzero(take)
    return _Pattern(nz.astype(np.int64), take[nz].astype(np.int64))


def _patterns_of_blocks(blocks: Int64Array, item_of_doc: Int64Array, m: int) -> tuple[list[_Pattern], Int64Array]:
    """The distinct block contents of a packing and how many blocks have each. O(n log n)."""
    if blocks.size == 0:
        return [], np.zeros(0, dtype=np.int64)
    num_blocks = int(blocks.max()) + 1
    key = blocks * m + item_of_doc
    pairs, per_pair = np.unique(key, return_counts=True)
    pair_block, pair_item = pairs // m, pairs % m
    starts = np.searchsorted(pair_block, np.arange(num_blocks + 1))
    # a block's content, hashed: two random 64-bit sums (wrapping) over its (item, count) pairs
    rng = np.random.default_rng(12345)
    salt = rng.integers(0, 2**63, size=(2, m), dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        h1 = np.add.reduceat(salt[0][pair_item] * per_pair.astype(np.uint64), starts[:-1])
        h2 = np.add.reduceat(salt[1][pair_item] * (per_pair.astype(np.uint64) + np.uint64(7)), starts[:-1])
    keys = np.stack([h1, h2], axis=1)
    _, first, times = np.unique(keys, axis=0, return_index=True, return_counts=True)

    def content(b: int) -> _Pattern:
        return _Pattern(
            pair_item[starts[b] : starts[b + 1]].copy(), per_pair[starts[b] : starts[b + 1]].astype(np.int64)
        )

    patterns = [content(b) for b in first.tolist()]
    counts = times.astype(np.int64)
    # two blocks of different content with equal hashes are astronomically unlikely; should it happen, the
    # documents would not add up: then every block stands for itself
    if not np.array_equal(_coverage(patterns, counts, m), np.bincount(item_of_doc, minlength=m)):
        return [content(b) for b in range(num_blocks)], np.ones(num_blocks, dtype=np.int64)
    return patterns, counts


def _sample_patterns(
    layout: tuple[Int64Array, Any, Any], item_index: Int64Array, m: int, limit: int = 100_000, keep: int = 2000
) -> list[_Pattern]:
    """The ``keep`` most frequent block contents of a CSR layout (of an even sample of at most ``limit``
    of its blocks). O(limit × documents per block)."""
    block_starts, _, item_lengths = layout
    num_blocks = len(block_starts) - 1
    step = max(1, -(-num_blocks // limit))
    picked = np.arange(0, num_blocks, step, dtype=np.int64)
    sizes = block_starts[picked + 1] - block_starts[picked]
    where = ranges(block_starts[picked], sizes)
    sample_blocks = row_of(sizes)
    patterns, times = _patterns_of_blocks(sample_blocks, item_index[np.asarray(item_lengths)[where]], m)
    top = np.argsort(-times, kind="stable")[:keep]
    return [patterns[i] for i in top.tolist()]


def _coverage(patterns: list[_Pattern], mult: Int64Array, m: int) -> Int64Array:
    cover = np.zeros(m, dtype=np.int64)
    for p, k in zip(patterns, mult.tolist(), strict=True):
        if k:
            cover[p.items] += p.counts * k
    return cover


# ----------------------------------------------------------------------------------------------------------
# HiGHS master problem


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner to file descriptor 1 the first time one is made; send it nowhere."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _highs() -> Any:
    try:
        import highspy
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "strategy 'optimal' needs the HiGHS solver for inputs its exact search cannot settle: pip install highspy"
        ) from None
    highs: Any = highspy.Highs
    with _quiet_stdout():
        h = highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("simplex_strategy", 4)  # primal simplex: a new column keeps the basis primal feasible
    return h


class _Master:
    """min sum(x) subject to pattern coverage >= demand, x >= 0, columns added as they are priced."""

    def __init__(self, demand: Int64Array, integer: bool = False, exchanges: bool = False) -> None:
        import highspy

        self.h = _highs()
        self.inf = highspy.kHighsInf
        self.m = len(demand)
        self.patterns: list[_Pattern] = []
        self.h.addRows(
            self.m,
            demand.astype(np.float64),
            np.full(self.m, self.inf),
            0,
            np.zeros(self.m, dtype=np.int32),
            np.zeros(0, dtype=np.int32),
            np.zeros(0),
        )
        self.integer = integer
        self.offset = 0
        if exchanges and self.m > 1:
            # dual-optimal inequalities: a longer document may stand in for a shorter one (price of item i >=
            # price of item i + 1, lengths longest first); zero-cost columns ahead of the patterns
            k = self.m - 1
            index = np.stack([np.arange(k), np.arange(1, k + 1)], axis=1).ravel().astype(np.int32)
            value = np.tile([-1.0, 1.0], k)
            starts = np.arange(0, 2 * k, 2, dtype=np.int32)
            self.h.addCols(k, np.zeros(k), np.zeros(k), np.full(k, self.inf), 2 * k, starts, index, value)
            self.offset = k

    def add(self, patterns: list[_Pattern]) -> None:
        if not patterns:
            return
        starts = offsets_of([len(p.items) for p in patterns], np.int32)[:-1]
        index = np.concatenate([p.items for p in patterns]).astype(np.int32)
        value = np.concatenate([p.counts for p in patterns]).astype(np.float64)
        k = len(patterns)
        first = self.offset + len(self.patterns)
        self.h.addCols(k, np.ones(k), np.zeros(k), np.full(k, self.inf), len(index), starts, index, value)
        if self.integer:
            import highspy

            cols = np.arange(first, first + k, dtype=np.int32)
            self.h.changeColsIntegrality(k, cols, np.full(k, highspy.HighsVarType.kInteger))
        self.patterns.extend(patterns)

    def solve(self) -> tuple[float, FloatArray, FloatArray]:
        """(objective, pattern values, row duals)."""
        self.h.run()
        solution = self.h.getSolution()
        # a failed solve leaves values that are no use but cannot break the plan or the bound: the plan is
        # checked to cover every document, and any prices give a valid bound
        x = np.nan_to_num(np.asarray(solution.col_value, dtype=np.float64)[self.offset :], nan=0.0, posinf=0.0)
        duals = np.zeros(self.m)
        if not self.integer:
            duals = np.nan_to_num(np.asarray(solution.row_dual, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        return float(self.h.getInfo().objective_function_value), x, duals


# ----------------------------------------------------------------------------------------------------------
# Column generation on a histogram


@dataclass
class _Histogram:
    weights: Int64Array  # distinct lengths, longest first
    demand: Int64Array  # documents of each


@dataclass
class _Prices:
    bound: int
    prices: Int64Array
    value: int
    point: FloatArray  # the duals they were floored from


def _knapsack_cells(hist: _Histogram, capacity: int) -> int:
    """Size of the pricing knapsack's choice table: (capacity + 1) × bundles of 1, 2, 4, ... documents."""
    fit = np.minimum(hist.demand, capacity // hist.weights)
    bundles = int(np.ceil(np.log2(fit + 1)).sum())
    return (capacity + 1) * bundles


def _price_bound(hist: _Histogram, prices: Int64Array, capacity: int) -> tuple[int, int, Int64Array]:
    """(ceil(sum(demand * price) / V), V, best pattern) for integer prices."""
    value, take = _bounded_knapsack(hist.weights, prices, hist.demand, capacity)
    total = int(np.dot(hist.demand, prices)) if len(prices) else 0
    return (-(-total // int(value)) if value > 0 else 0), int(value), take


def _singletons(hist: _Histogram, capacity: int) -> list[_Pattern]:
    out = []
    for i, w in enumerate(hist.weights.tolist()):
        k = min(capacity // w, int(hist.demand[i]))
        out.append(_Pattern(np.array([i], dtype=np.int64), np.array([k], dtype=np.int64)))
    return out


@dataclass
class _ColumnGeneration:
    master: _Master
    x: FloatArray
    objective: float
    best_prices: _Prices | None
    converged: bool


def _column_generation(
    hist: _Histogram, capacity: int, initial: list[_Pattern], deadline: float, stop_at: int, exchanges: bool = False
) -> _ColumnGeneration:
    """Solve the master LP by pricing patterns until no pattern improves it, the rounded-up dual bound
    reaches ``stop_at``, or the deadline passes.

    Each step prices one knapsack at the smoothed duals (Wentges: ``alpha`` × the duals with the best bound
    so far + the rest × the LP's duals) and, when that finds nothing (or ``BOTH_POINTS``), one at the LP's
    duals; then one warm-started LP re-solve. Every priced point's integer prices are a valid bound.
    """
    master = _Master(hist.demand, exchanges=exchanges)
    master.add(_singletons(hist, capacity) + initial)
    best: _Prices | None = None
    stable: FloatArray | None = None  # smoothing centre: the duals with the best bound so far
    stable_bound = -1.0
    alpha = _SMOOTHING
    demand_f = hist.demand.astype(np.float64)

    def price(point: FloatArray) -> Int64Array:
        nonlocal best, stable, stable_bound
        prices = np.floor(point * _PRICE_SCALE).astype(np.int64)
        bound, value, take = _price_bound(hist, prices, capacity)
        if best is None or bound > best.bound:
            best = _Prices(bound, prices, value, point)
        if value > 0:
            smooth = float(np.dot(demand_f, prices)) / value
            if smooth > stable_bound:
                stable_bound, stable = smooth, point.copy()
        return take

    objective, x, duals = master.solve()
    converged = False
    while True:
        duals = np.maximum(duals, 0.0)
        found: list[_Pattern] = []
        if stable is not None and alpha > 0:
            take = price(alpha * stable + (1 - alpha) * duals)
            if 1.0 - float(np.dot(duals, take)) < -_EPS:
                found.append(_pattern(take))
            else:
                alpha = max(0.0, alpha - 0.1)
        if not found or _BOTH_POINTS:
            take = price(duals)
            if 1.0 - float(np.dot(duals, take)) < -_EPS:
                found.append(_pattern(take))
        if best is not None and best.bound >= stop_at:
            break
        if not found:
            converged = True
            break
        if time.perf_counter() > deadline:
            break
        master.add(found)
        objective, x, duals = master.solve()
    return _ColumnGeneration(master, x, objective, best, converged)


# ----------------------------------------------------------------------------------------------------------
# From the LP to an integer plan


@dataclass
class _Plan:
    patterns: list[_Pattern]
    mult: Int64Array

    @property
    def num_blocks(self) -> int:
        return int(self.mult.sum())


def _round_down(patterns: list[_Pattern], x: FloatArray, demand: Int64Array) -> tuple[_Plan, Int64Array]:
    """Whole copies of the LP's patterns, over-covered documents taken out; returns (plan, leftover demand)."""
    m = len(demand)
    mult = np.floor(x + 1e-7).astype(np.int64)
    keep = np.flatnonzero(mult > 0)
    pats = [patterns[i] for i in keep.tolist()]
    mult = mult[keep]
    cover = _coverage(pats, mult, m)
    excess = np.maximum(cover - demand, 0)
    if excess.any():
        pats, mult = _remove_excess(pats, mult, excess)
    left = demand - _coverage(pats, mult, m)
    # rounded-up copies of fractional patterns, largest fraction first, while the leftovers allow
    frac = x - np.floor(x + 1e-7)
    for i in np.argsort(-frac, kind="stable").tolist():
        if frac[i] <= 1e-7:
            break
        p = patterns[i]
        if np.all(left[p.items] >= p.counts):
            left[p.items] -= p.counts
            pats.append(p)
            mult = np.append(mult, 1)
    return _Plan(pats, mult.astype(np.int64)), left


def _remove_excess(pats: list[_Pattern], mult: Int64Array, excess: Int64Array) -> tuple[list[_Pattern], Int64Array]:
    """Take ``excess[i]`` documents of length i out of the plan's blocks (blocks stay valid)."""
    excess = excess.copy()
    out_p: list[_Pattern] = []
    out_m: list[int] = []
    for p, k in zip(pats, mult.tolist(), strict=True):
        hit = excess[p.items] > 0
        if not hit.any():
            out_p.append(p)
            out_m.append(k)
            continue
        # strip copies one kind of change at a time: `full` copies lose min(count, need) each
        counts = p.counts.copy()
        remaining = k
        while remaining > 0 and (excess[p.items] > 0).any():
            need = excess[p.items]
            per_copy = np.minimum(counts, need)
            copies = min(remaining, int(np.min(np.where(per_copy > 0, need // np.maximum(per_copy, 1), remaining))))
            copies = max(copies, 1)
            new_counts = counts - per_copy
            excess[p.items] -= per_copy * copies
            keep = new_counts > 0
            if keep.any():
                out_p.append(_Pattern(p.items[keep], new_counts[keep]))
                out_m.append(copies)
            remaining -= copies
        if remaining > 0:
            out_p.append(_Pattern(p.items, counts))
            out_m.append(remaining)
    return out_p, np.array(out_m, dtype=np.int64)


def _heuristic_plans(hist: _Histogram, left: Int64Array, capacity: int) -> Iterator[_Plan]:
    """Packings of the leftover documents by BFD, FFD and first-fit (shortest first)."""
    lengths = np.repeat(hist.weights, left)
    if lengths.size == 0:
        yield _Plan([], np.zeros(0, dtype=np.int64))
        return
    item = row_of(left)
    m = len(left)
    candidates: list[Callable[[], Int64Array]] = [
        lambda: blocks_of_items(*best_fit_decreasing_layout(lengths, capacity)),
        lambda: first_fit_blocks(lengths, longest_first_order(lengths, capacity), capacity),
        lambda: first_fit_blocks(lengths, np.arange(len(lengths) - 1, -1, -1, dtype=np.int64), capacity),
    ]
    for make in candidates:
        pats, mult = _patterns_of_blocks(make(), item, m)
        yield _Plan(pats, mult)


def _join(a: _Plan, b: _Plan) -> _Plan:
    return _Plan(a.patterns + b.patterns, np.concatenate((a.mult, b.mult)).astype(np.int64))


def _exact_leftovers(
    hist: _Histogram, left: Int64Array, capacity: int, pool: list[_Pattern], deadline: float, target: int
) -> _Plan | None:
    """Integer program over the known patterns that fit the leftovers (HiGHS MIP), for a third of the time left;
    None when it finds no plan."""
    room = (deadline - time.perf_counter()) / 3  # leave time for the next, wider attempts
    if room <= 0.05:
        return None
    fits = [p for p in pool if np.all(left[p.items] >= p.counts)]
    sub = _Histogram(hist.weights, left)
    master = _Master(left, integer=True)
    master.add(_singletons(sub, capacity) + fits)
    master.h.setOptionValue("time_limit", float(room))
    master.h.setOptionValue("objective_bound", float(target) + 0.5)
    _, x, _ = master.solve()
    if len(x) != len(master.patterns):
        return None
    mult = np.rint(x).astype(np.int64)
    keep = np.flatnonzero(mult > 0)
    pats = [master.patterns[i] for i in keep.tolist()]
    mult = mult[keep]
    cover = _coverage(pats, mult, len(left))
    if np.any(cover < left):
        return None
    if np.any(cover > left):
        pats, mult = _remove_excess(pats, mult, cover - left)
    return _Plan(pats, mult)


def _pack_leftovers(
    hist: _Histogram, left: Int64Array, capacity: int, pool: list[_Pattern], need: int, deadline: float, depth: int
) -> _Plan:
    """A packing of the leftover documents, in at most ``need`` blocks if it can find one: BFD, FFD,
    first-fit; then column generation on the leftovers alone, rounded again (up to 3 levels deep); then,
    at the top level, an integer program over the patterns known."""
    best: _Plan | None = None
    for rest in _heuristic_plans(hist, left, capacity):
        if best is None or rest.num_blocks < best.num_blocks:
            best = rest
        if rest.num_blocks <= need:
            return rest
    assert best is not None
    if left.sum() == 0 or depth >= 3 or time.perf_counter() > deadline:
        return best
    sub = _Histogram(hist.weights, left)
    fits = [p for p in pool if np.all(left[p.items] >= p.counts)]
    # stop as soon as the leftovers provably need more than `need` blocks
    sub_lp = _column_generation(sub, capacity, fits + best.patterns, deadline, stop_at=need + 1)
    if sub_lp.best_prices is not None and sub_lp.best_prices.bound > need:
        return best
    again = _integer_plan(sub, capacity, sub_lp, need, deadline, depth + 1)
    if again.num_blocks < best.num_blocks:
        best = again
    if best.num_blocks > need and depth == 0:
        exact = _exact_leftovers(hist, left, capacity, sub_lp.master.patterns + best.patterns, deadline, need)
        if exact is not None and exact.num_blocks < best.num_blocks:
            best = exact
    return best


def _release(plan: _Plan, left: Int64Array, blocks: int, rng: np.random.Generator) -> tuple[_Plan, Int64Array]:
    """Take ``blocks`` blocks, chosen at random, out of ``plan``; their documents join ``left``."""
    chosen = np.zeros(len(plan.mult), dtype=np.int64)
    picks = rng.choice(plan.num_blocks, size=min(blocks, plan.num_blocks), replace=False)
    np.add.at(chosen, row_at(offsets_of(plan.mult), picks), 1)
    left = left.copy()
    for i in np.flatnonzero(chosen).tolist():
        p = plan.patterns[i]
        left[p.items] += p.counts * chosen[i]
    return _Plan(plan.patterns, plan.mult - chosen), left


def _integer_plan(
    hist: _Histogram,
    capacity: int,
    lp: _ColumnGeneration,
    target: int,
    deadline: float,
    depth: int = 0,
) -> _Plan:
    """A plan from the LP solution that tries to reach ``target`` blocks: the LP rounded down, the leftovers
    packed by ``_pack_leftovers``. At the top level, while that falls short and time is left, ever more
    rounded-down blocks (16, 64, 256, ...) are taken apart and packed again with the leftovers."""
    base, left = _round_down(lp.master.patterns, lp.x, hist.demand)
    rng = np.random.default_rng(0)
    best: _Plan | None = None
    released = 0
    while True:
        kept, rest_left = _release(base, left, released, rng) if released else (base, left)
        rest = _pack_leftovers(hist, rest_left, capacity, lp.master.patterns, target - kept.num_blocks, deadline, depth)
        plan = _join(kept, rest)
        if best is None or plan.num_blocks < best.num_blocks:
            best = plan
        if best.num_blocks <= target or depth > 0 or released >= base.num_blocks:
            return best
        if time.perf_counter() > deadline:
            return best
        released = max(16, 4 * released)


# ----------------------------------------------------------------------------------------------------------
# Plans as block indexes


@njit(cache=True, nogil=True)
def _count_lengths(lengths: Int64Array, capacity: int) -> tuple[Int64Array, int]:  # pragma: no cover - compiled
    """(documents of each length 0..capacity, index of the first length outside 1..capacity or -1). O(n)."""
    counts = np.zeros(capacity + 1, dtype=np.int64)
    for i in range(lengths.shape[0]):
        length = lengths[i]
        if length < 1 or length > capacity:
            return counts, i
        counts[length] += 1
    return counts, -1


@njit(cache=True, nogil=True)
def _write_blocks(
    lengths: Int64Array,
    item_index: Int64Array,
    first_triple: Int64Array,
    triple_count: Int64Array,
    triple_mult: Int64Array,
    triple_base: Int64Array,
    blocks: Int64Array,
) -> None:  # pragma: no cover - compiled
    """One pass over the documents in input order: the next document of item ``j`` (``item_index[length]``)
    goes to the block its
    triples (grouped by item from ``first_triple[j]``; ``count`` documents in each of ``mult`` consecutive
    blocks from ``base``) assign next. Per-item cursors only, so O(n) with sequential writes."""
    m = first_triple.shape[0] - 1
    triple = first_triple[:m].copy()
    copy = np.zeros(m, dtype=np.int64)
    within = np.zeros(m, dtype=np.int64)
    for i in range(lengths.shape[0]):
        j = item_index[lengths[i]]
        t = triple[j]
        blocks[i] = triple_base[t] + copy[j]
        within[j] += 1
        if within[j] == triple_count[t]:
            within[j] = 0
            copy[j] += 1
            if copy[j] == triple_mult[t]:
                copy[j] = 0
                triple[j] = t + 1


def _assign(
    plan: _Plan, lengths: Int64Array, item_index: Int64Array, demand: Int64Array, blocks: Int64Array, first_block: int
) -> int:
    """Write the block of every document (``item_index[lengths[i]]``: its item; ``demand[j]`` documents of item ``j``)
    into ``blocks``, numbering the plan's blocks from ``first_block`` with no gaps; returns the next free block.
    O(n + plan size)."""
    m = len(demand)
    kept = [(p, k) for p, k in zip(plan.patterns, plan.mult.tolist(), strict=True) if k > 0 and p.counts.sum() > 0]
    if not kept:
        if demand.sum():
            raise AssertionError("optimal: the plan does not cover the documents")
        return first_block
    mults = np.array([k for _, k in kept], dtype=np.int64)
    bases = first_block + offsets_of(mults)[:-1]
    sizes = [len(p.items) for p, _ in kept]
    item = np.concatenate([p.items for p, _ in kept])
    count = np.concatenate([p.counts for p, _ in kept])
    mult = np.repeat(mults, sizes)
    base = np.repeat(bases, sizes)
    keep = count > 0
    item, count, mult, base = item[keep], count[keep], mult[keep], base[keep]
    order = np.argsort(item, kind="stable")
    item, count, mult, base = item[order], count[order], mult[order], base[order]
    if np.any(count < 0) or not np.array_equal(np.bincount(item, weights=count * mult, minlength=m), demand):
        raise AssertionError("optimal: the plan does not cover every document exactly once")
    first_triple = np.searchsorted(item, np.arange(m + 1)).astype(np.int64)
    _write_blocks(lengths, item_index, first_triple, count, mult, base, blocks)
    return first_block + int(mults.sum())


# ----------------------------------------------------------------------------------------------------------
# Exhaustive search for small inputs


def _branch_and_bound(lengths: Int64Array, capacity: int, best: Int64Array, target: int, deadline: float) -> Int64Array:
    """Fewest blocks by exhaustive search (documents longest first; equal rooms tried once).

    Raises ``_SearchTooLarge`` after ``MAX_OPTIMAL_NODES`` steps or past the deadline. Exponential in the worst case.
    """
    n = len(lengths)
    order = longest_first_order(lengths, capacity)
    best_count = int(best.max()) + 1
    sizes = lengths[order].tolist()
    suffix = np.concatenate((np.cumsum(np.asarray(sizes)[::-1])[::-1], [0])).tolist()
    rooms: list[int] = []
    chosen = [0] * n
    best_choice: list[int] | None = None
    nodes = 0

    def search(i: int, free: int) -> bool:
        """Place documents i.. ; True once a packing with ``target`` blocks is found."""
        nonlocal best_count, best_choice, nodes
        nodes += 1
        if nodes > MAX_OPTIMAL_NODES or (nodes % 4096 == 0 and time.perf_counter() > deadline):
            raise _SearchTooLarge
        if i == n:
            best_count, best_choice = len(rooms), chosen.copy()
            return best_count == target
        overflow_tokens = suffix[i] - free
        if len(rooms) + max(0, -(-overflow_tokens // capacity)) >= best_count:
            return False
        size = sizes[i]
        tried: set[int] = set()
        for b, room in enumerate(rooms):
            if room >= size and room not in tried:
                tried.add(room)
                rooms[b] -= size
                chosen[i] = b
                if search(i + 1, free - size):
                    return True
                rooms[b] += size
        if len(rooms) + 1 < best_count:
            rooms.append(capacity - size)
            chosen[i] = len(rooms) - 1
            found = search(i + 1, free + capacity - size)
            rooms.pop()
            if found:
                return True
        return False

    search(0, 0)
    if best_choice is None:
        return best
    blocks = np.empty(n, dtype=np.int64)
    blocks[order] = best_choice
    return blocks


# ----------------------------------------------------------------------------------------------------------
# The solver


def _simple_certificate(l1: int, l2: int, num_blocks: int) -> Certificate:
    kind: CertificateKind = "L1" if l1 >= l2 else "L2"
    return Certificate(max(l1, l2), kind, num_blocks)


def _small_prices(hist: _Histogram, capacity: int, found: _Prices, deadline: float) -> _Prices:
    """The same bound from the smallest prices found by the deadline: the duals scaled by 1, 2, ..., 256,
    then 512, 1024, ... and floored; else the scaled prices divided by their greatest common divisor.
    One knapsack per scale tried."""
    for scale in [*range(1, 257), *(2**k for k in range(9, 30))]:
        if time.perf_counter() > deadline:
            break
        prices = np.floor(found.point * scale + 1e-9).astype(np.int64)
        if not prices.any():
            continue
        bound, value, _ = _price_bound(hist, prices, capacity)
        if bound >= found.bound:
            return _Prices(bound, prices, value, found.point)
    common = int(np.gcd.reduce(np.append(found.prices, found.value)))
    return _Prices(found.bound, found.prices // common, found.value // common, found.point)


def _price_certificate(hist: _Histogram, prices: _Prices, num_blocks: int) -> Certificate:
    table = {int(w): int(p) for w, p in zip(hist.weights.tolist(), prices.prices.tolist(), strict=True) if p > 0}
    return Certificate(prices.bound, "dual prices", num_blocks, table, prices.value)


def _result(blocks: Int64Array, certificate: Certificate, searched: bool = False) -> OptimalResult:
    return OptimalResult(blocks, certificate, certificate.proven or searched)


def solve(lengths: Int64Array, capacity: int, time_limit: float = 60.0) -> OptimalResult:
    """A packing of ``lengths`` (each 1..capacity) into the fewest blocks of ``capacity``, and its certificate.

    Stops as soon as the plan meets a lower bound; after ``time_limit`` seconds returns the best plan found
    with its certified gap. Time: O(n + capacity) for the bounds, best-fit decreasing, the histogram and
    expanding the plan, plus column generation on the histogram (each pricing step O(capacity × distinct
    lengths × log n), one LP re-solve); exponential only in the exhaustive search of inputs of at most
    ``MAX_OPTIMAL_DOCUMENTS`` documents.

    >>> r = solve(np.array([5, 4, 11, 4, 5, 2, 2]), 11)
    >>> r.blocks.tolist(), r.certificate.lower_bound, r.certificate.kind, r.proven
    ([1, 1, 0, 2, 2, 1, 2], 3, 'L1', True)
    >>> r = solve(np.array([6, 6, 6]), 10)
    >>> r.certificate.lower_bound, r.certificate.kind, r.certificate.gap
    (3, 'L2', 0)
    """
    time_limit = check_time_limit(time_limit)
    capacity = check_max_seq_length(capacity)
    lengths = as_lengths(lengths)
    started = time.perf_counter()
    deadline = started + time_limit
    n = len(lengths)
    if n == 0:
        return _result(np.zeros(0, dtype=np.int64), Certificate(0, "L1", 0))
    counts, bad = _count_lengths(lengths, capacity)
    if bad >= 0:
        raise SettingError("lengths", f"document lengths in 1..{capacity}", int(lengths[bad]))
    l1 = simple_bound(int(np.dot(counts, np.arange(capacity + 1, dtype=np.int64))), capacity)
    l2 = martello_toth_l2(lengths, capacity)
    bound = max(l1, l2)
    layout = best_fit_decreasing_layout(lengths, capacity)
    best_count = len(layout[0]) - 1
    best: Int64Array | None = None  # the best plan's blocks; None while it is the BFD layout
    if best_count <= bound:
        return _result(blocks_of_items(*layout), _simple_certificate(l1, l2, best_count))
    searched = False
    if n <= MAX_OPTIMAL_DOCUMENTS:
        with contextlib.suppress(_SearchTooLarge):
            best = _branch_and_bound(lengths, capacity, blocks_of_items(*layout), bound, deadline)
            best_count = int(best.max()) + 1
            searched = True
            if best_count <= bound:
                return _result(best, _simple_certificate(l1, l2, best_count))

    if l1 >= l2 and not searched:
        repacked = _repack_open_blocks(lengths, capacity, layout, l1, deadline)
        if repacked is not None:
            return _result(repacked, _simple_certificate(l1, l2, l1))

    hist, item_index = _histogram(counts, capacity)
    if _knapsack_cells(hist, capacity) > MAX_KNAPSACK_CELLS:
        # too many distinct lengths for this block size: the pricing table would not fit in memory
        blocks, best_count = _best_of_greedy(
            lengths, capacity, best if best is not None else blocks_of_items(*layout), best_count
        )
        return _result(blocks, _simple_certificate(l1, l2, best_count), searched)

    initial = _sample_patterns(layout, item_index, len(hist.weights))
    certificate = _simple_certificate(l1, l2, best_count)
    # the LP may take most of the time; a fifth stays for turning it into whole blocks
    lp_deadline = started + _LP_SHARE * time_limit
    # for the bound: with exchange columns (longer documents standing in for shorter ones) the duals
    # stay ordered by length and the LP converges in a fraction of the steps
    lp = _column_generation(hist, capacity, initial, lp_deadline, stop_at=best_count, exchanges=True)
    if lp.best_prices is not None and lp.best_prices.bound > certificate.lower_bound:
        small = _small_prices(hist, capacity, lp.best_prices, time.perf_counter() + 0.5)
        certificate = _price_certificate(hist, small, best_count)
    if best_count > certificate.lower_bound and not searched:
        # for the plan: the same patterns without exchanges, so that the LP's solution packs real documents
        priced = lp.master.patterns[len(hist.weights) :]  # the singletons come again by themselves
        lp = _column_generation(hist, capacity, priced, lp_deadline, stop_at=1 << 62)
        plan = _integer_plan(hist, capacity, lp, certificate.lower_bound, deadline)
        if plan.num_blocks < best_count:
            best = np.empty(n, dtype=np.int64)
            best_count = _assign(plan, lengths, item_index, hist.demand, best, 0)
    if best is None:
        best = blocks_of_items(*layout)
    if best_count > certificate.lower_bound and not searched:
        best, best_count = _best_of_greedy(lengths, capacity, best, best_count)
    certificate = Certificate(
        certificate.lower_bound, certificate.kind, best_count, certificate.prices, certificate.value
    )
    return _result(best, certificate, searched)


def _best_of_greedy(lengths: Int64Array, capacity: int, best: Int64Array, best_count: int) -> tuple[Int64Array, int]:
    """The plan unless first-fit decreasing, first-fit or next-fit (input order) uses fewer blocks. O(n log n)."""
    order = np.arange(len(lengths), dtype=np.int64)
    makers: tuple[Callable[[], Int64Array], ...] = (
        lambda: first_fit_blocks(lengths, longest_first_order(lengths, capacity), capacity),
        lambda: first_fit_blocks(lengths, order, capacity),
        lambda: next_fit_blocks(lengths, capacity),
    )
    for make in makers:
        blocks = make()
        count = int(blocks.max()) + 1
        if count < best_count:
            best, best_count = blocks, count
    return best, best_count


def _histogram(counts: Int64Array, capacity: int) -> tuple[_Histogram, Int64Array]:
    """(distinct lengths longest first with their counts, item of each length) from ``counts[w]`` = documents
    of length ``w``. O(L)."""
    weights = np.flatnonzero(counts)[::-1].astype(np.int64)
    item_index = np.zeros(capacity + 1, dtype=np.int64)
    item_index[weights] = np.arange(len(weights))
    return _Histogram(weights, counts[weights].astype(np.int64)), item_index


def _repack_open_blocks(
    lengths: Int64Array,
    capacity: int,
    layout: tuple[Int64Array, Any, Any],
    target: int,
    deadline: float,
) -> Int64Array | None:
    """When the bound is L1: keep the full blocks of a packing and pack the documents of the others again,
    into ``target`` blocks in all; None when that fails. O(n) plus the repacking."""
    blocks = blocks_of_items(*layout)
    fill = np.bincount(blocks, weights=lengths).astype(np.int64)
    open_block = fill < capacity
    full = int((~open_block).sum())
    rest = np.flatnonzero(open_block[blocks])
    if rest.size * 4 > lengths.size * 3:
        return None
    sub_lengths = lengths[rest]
    hist, item_index = _histogram(_count_lengths(sub_lengths, capacity)[0], capacity)
    if _knapsack_cells(hist, capacity) > MAX_KNAPSACK_CELLS:
        return None
    sub_layout = best_fit_decreasing_layout(sub_lengths, capacity)
    initial = _sample_patterns(sub_layout, item_index, len(hist.weights))
    lp = _column_generation(hist, capacity, initial, deadline, stop_at=target - full)
    plan = _integer_plan(hist, capacity, lp, target - full, deadline)
    if plan.num_blocks > target - full:
        return None
    full_ids = np.cumsum(~open_block) - 1
    out: Int64Array = full_ids[blocks]
    sub = np.empty(len(rest), dtype=np.int64)
    _assign(plan, sub_lengths, item_index, hist.demand, sub, full)
    out[rest] = sub
    return out


def optimal_blocks(lengths: Int64Array, capacity: int, time_limit: float = 60.0) -> Int64Array:
    """Block of every document in a packing with the fewest blocks possible (``solve(...).blocks``).

    >>> int(optimal_blocks(np.array([4, 3, 3, 2, 2, 2]), 8).max()) + 1
    2
    """
    return solve(lengths, capacity, time_limit).blocks
