"""From the LP to whole blocks: the LP's patterns rounded down, over-covered documents taken out, the
leftovers packed again (greedy, column generation, a small integer program), and the plan written as the
block of every document. Internal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

from packing.core._arrays import offsets_of, row_at, row_of
from packing.strategies._kernels import (
    best_fit_decreasing_blocks,
    blocks_of_items,
    first_fit_blocks,
    longest_first_order,
)
from packing.strategies._optimal.columns import ColumnGeneration, Histogram, column_generation, singletons
from packing.strategies._optimal.master import Master
from packing.strategies._optimal.patterns import Pattern, coverage, patterns_of_blocks

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass
class Plan:
    patterns: list[Pattern]
    mult: Int64Array

    @property
    def num_blocks(self) -> int:
        return int(self.mult.sum())


def _round_down(patterns: list[Pattern], x: FloatArray, demand: Int64Array) -> tuple[Plan, Int64Array]:
    """Whole copies of the LP's patterns, over-covered documents taken out; returns (plan, leftover demand)."""
    m = len(demand)
    mult = np.floor(x + 1e-7).astype(np.int64)
    keep = np.flatnonzero(mult > 0)
    pats = [patterns[i] for i in keep.tolist()]
    mult = mult[keep]
    cover = coverage(pats, mult, m)
    excess = np.maximum(cover - demand, 0)
    if excess.any():
        pats, mult = _remove_excess(pats, mult, excess)
    left = demand - coverage(pats, mult, m)
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
    return Plan(pats, mult.astype(np.int64)), left


def _remove_excess(pats: list[Pattern], mult: Int64Array, excess: Int64Array) -> tuple[list[Pattern], Int64Array]:
    """Take ``excess[i]`` documents of length i out of the plan's blocks (blocks stay valid)."""
    excess = excess.copy()
    out_p: list[Pattern] = []
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
                out_p.append(Pattern(p.items[keep], new_counts[keep]))
                out_m.append(copies)
            remaining -= copies
        if remaining > 0:
            out_p.append(Pattern(p.items, counts))
            out_m.append(remaining)
    return out_p, np.array(out_m, dtype=np.int64)


def _heuristic_plans(hist: Histogram, left: Int64Array, capacity: int) -> Iterator[Plan]:
    """Packings of the leftover documents by BFD, FFD and first-fit (shortest first)."""
    lengths = np.repeat(hist.weights, left)
    if lengths.size == 0:
        yield Plan([], np.zeros(0, dtype=np.int64))
        return
    item = row_of(left)
    m = len(left)
    candidates: list[Callable[[], Int64Array]] = [
        lambda: blocks_of_items(*best_fit_decreasing_blocks(lengths, capacity)),
        lambda: first_fit_blocks(lengths, longest_first_order(lengths, capacity), capacity),
        lambda: first_fit_blocks(lengths, np.arange(len(lengths) - 1, -1, -1, dtype=np.int64), capacity),
    ]
    for make in candidates:
        pats, mult = patterns_of_blocks(make(), item, m)
        yield Plan(pats, mult)


def _join(a: Plan, b: Plan) -> Plan:
    return Plan(a.patterns + b.patterns, np.concatenate((a.mult, b.mult)).astype(np.int64))


def _exact_leftovers(
    hist: Histogram, left: Int64Array, capacity: int, pool: list[Pattern], deadline: float, target: int
) -> Plan | None:
    """Integer program over the known patterns that fit the leftovers (HiGHS MIP), for a third of the time left;
    None when it finds no plan."""
    room = (deadline - time.perf_counter()) / 3  # leave time for the next, wider attempts
    if room <= 0.05:
        return None
    fits = [p for p in pool if np.all(left[p.items] >= p.counts)]
    sub = Histogram(hist.weights, left)
    master = Master(left, integer=True)
    master.add(singletons(sub, capacity) + fits)
    master.h.setOptionValue("time_limit", float(room))
    master.h.setOptionValue("objective_bound", float(target) + 0.5)
    _, x, _ = master.solve()
    if len(x) != len(master.patterns):
        return None
    mult = np.rint(x).astype(np.int64)
    keep = np.flatnonzero(mult > 0)
    pats = [master.patterns[i] for i in keep.tolist()]
    mult = mult[keep]
    cover = coverage(pats, mult, len(left))
    if np.any(cover < left):
        return None
    if np.any(cover > left):
        pats, mult = _remove_excess(pats, mult, cover - left)
    return Plan(pats, mult)


def _pack_leftovers(
    hist: Histogram, left: Int64Array, capacity: int, pool: list[Pattern], need: int, deadline: float, depth: int
) -> Plan:
    """A packing of the leftover documents, in at most ``need`` blocks if it can find one: BFD, FFD,
    first-fit; then column generation on the leftovers alone, rounded again (up to 3 levels deep); then,
    at the top level, an integer program over the patterns known."""
    best: Plan | None = None
    for rest in _heuristic_plans(hist, left, capacity):
        if best is None or rest.num_blocks < best.num_blocks:
            best = rest
        if rest.num_blocks <= need:
            return rest
    assert best is not None
    if left.sum() == 0 or depth >= 3 or time.perf_counter() > deadline:
        return best
    sub = Histogram(hist.weights, left)
    fits = [p for p in pool if np.all(left[p.items] >= p.counts)]
    # stop as soon as the leftovers provably need more than `need` blocks
    sub_lp = column_generation(sub, capacity, fits + best.patterns, deadline, stop_at=need + 1)
    if sub_lp.best_prices is not None and sub_lp.best_prices.bound > need:
        return best
    again = integer_plan(sub, capacity, sub_lp, need, deadline, depth + 1)
    if again.num_blocks < best.num_blocks:
        best = again
    if best.num_blocks > need and depth == 0:
        exact = _exact_leftovers(hist, left, capacity, sub_lp.master.patterns + best.patterns, deadline, need)
        if exact is not None and exact.num_blocks < best.num_blocks:
            best = exact
    return best


def _release(plan: Plan, left: Int64Array, blocks: int, rng: np.random.Generator) -> tuple[Plan, Int64Array]:
    """Take ``blocks`` blocks, chosen at random, out of ``plan``; their documents join ``left``."""
    chosen = np.zeros(len(plan.mult), dtype=np.int64)
    picks = rng.choice(plan.num_blocks, size=min(blocks, plan.num_blocks), replace=False)
    np.add.at(chosen, row_at(offsets_of(plan.mult), picks), 1)
    left = left.copy()
    for i in np.flatnonzero(chosen).tolist():
        p = plan.patterns[i]
        left[p.items] += p.counts * chosen[i]
    return Plan(plan.patterns, plan.mult - chosen), left


def integer_plan(
    hist: Histogram,
    capacity: int,
    lp: ColumnGeneration,
    target: int,
    deadline: float,
    depth: int = 0,
) -> Plan:
    """A plan from the LP solution that tries to reach ``target`` blocks: the LP rounded down, the leftovers
    packed by ``_pack_leftovers``. At the top level, while that falls short and time is left, ever more
    rounded-down blocks (16, 64, 256, ...) are taken apart and packed again with the leftovers."""
    base, left = _round_down(lp.master.patterns, lp.x, hist.demand)
    rng = np.random.default_rng(0)
    best: Plan | None = None
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


def assign(
    plan: Plan, lengths: Int64Array, item_index: Int64Array, demand: Int64Array, blocks: Int64Array, first_block: int
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
