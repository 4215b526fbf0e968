"""The orchestration of ``solve``: the bounds and best-fit decreasing first, then the exhaustive search,
the repacking of the open blocks, column generation and the integer plan, each while the plan misses the
bound and time is left (see ``packing.optimal``). Internal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._validation import as_lengths, check_max_seq_length, check_time_limit
from packing.errors import SettingError
from packing.strategies._bounds import martello_toth_l2, simple_bound
from packing.strategies._certificate import Certificate, CertificateKind
from packing.strategies._kernels import (
    all_within,
    best_fit_decreasing_blocks,
    blocks_of_items,
    first_fit_blocks,
    length_histogram,
    longest_first_order,
    next_fit_blocks,
)
from packing.strategies._optimal.columns import (
    Histogram,
    Prices,
    column_generation,
    histogram_of,
    knapsack_cells,
    price_bound,
)
from packing.strategies._optimal.patterns import sample_patterns
from packing.strategies._optimal.rounding import assign, integer_plan
from packing.strategies._optimal.search import MAX_OPTIMAL_DOCUMENTS, SearchTooLarge, branch_and_bound

Int64Array = npt.NDArray[np.int64]

MAX_KNAPSACK_CELLS = 200_000_000
"""Beyond this many cells (bytes) in the pricing table (block size × about the distinct lengths), ``solve``
returns best-fit decreasing with its L1 / L2 certificate instead of generating columns."""
_LP_SHARE = 0.8
"""Share of ``time_limit`` the main column generation may use; the rest is for the integer plan."""


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


def _simple_certificate(l1: int, l2: int, num_blocks: int) -> Certificate:
    kind: CertificateKind = "L1" if l1 >= l2 else "L2"
    return Certificate(max(l1, l2), kind, num_blocks)


def _small_prices(hist: Histogram, capacity: int, found: Prices, deadline: float) -> Prices:
    """The same bound from the smallest prices found by the deadline: the duals scaled by 1, 2, ..., 256,
    then 512, 1024, ... and floored; else the scaled prices divided by their greatest common divisor.
    One knapsack per scale tried."""
    for scale in [*range(1, 257), *(2**k for k in range(9, 30))]:
        if time.perf_counter() > deadline:
            break
        prices = np.floor(found.point * scale + 1e-9).astype(np.int64)
        if not prices.any():
            continue
        bound, value, _ = price_bound(hist, prices, capacity)
        if bound >= found.bound:
            return Prices(bound, prices, value, found.point)
    common = int(np.gcd.reduce(np.append(found.prices, found.value)))
    return Prices(found.bound, found.prices // common, found.value // common, found.point)


def _price_certificate(hist: Histogram, prices: Prices, num_blocks: int) -> Certificate:
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
    if not all_within(lengths, 1, capacity):
        bad = lengths[(lengths < 1) | (lengths > capacity)]
        raise SettingError("lengths", f"document lengths in 1..{capacity}", int(bad[0]))
    counts = length_histogram(lengths, capacity)
    l1 = simple_bound(int(np.dot(counts, np.arange(capacity + 1, dtype=np.int64))), capacity)
    l2 = martello_toth_l2(lengths, capacity)
    bound = max(l1, l2)
    bfd = best_fit_decreasing_blocks(lengths, capacity)
    best_count = len(bfd[0]) - 1
    best: Int64Array | None = None  # the best plan's blocks; None while it is the BFD plan
    if best_count <= bound:
        return _result(blocks_of_items(*bfd), _simple_certificate(l1, l2, best_count))
    searched = False
    if n <= MAX_OPTIMAL_DOCUMENTS:
        with contextlib.suppress(SearchTooLarge):
            best = branch_and_bound(lengths, capacity, blocks_of_items(*bfd), bound, deadline)
            best_count = int(best.max()) + 1
            searched = True
            if best_count <= bound:
                return _result(best, _simple_certificate(l1, l2, best_count))

    if l1 >= l2 and not searched:
        repacked = _repack_open_blocks(lengths, capacity, bfd, l1, deadline)
        if repacked is not None:
            return _result(repacked, _simple_certificate(l1, l2, l1))

    hist, item_index = histogram_of(counts, capacity)
    if knapsack_cells(hist, capacity) > MAX_KNAPSACK_CELLS:
        # too many distinct lengths for this block size: the pricing table would not fit in memory
        blocks, best_count = _best_of_greedy(
            lengths, capacity, best if best is not None else blocks_of_items(*bfd), best_count
        )
        return _result(blocks, _simple_certificate(l1, l2, best_count), searched)

    initial = sample_patterns(bfd, item_index, len(hist.weights))
    certificate = _simple_certificate(l1, l2, best_count)
    # the LP may take most of the time; a fifth stays for turning it into whole blocks
    lp_deadline = started + _LP_SHARE * time_limit
    # for the bound: with exchange columns (longer documents standing in for shorter ones) the duals
    # stay ordered by length and the LP converges in a fraction of the steps
    lp = column_generation(hist, capacity, initial, lp_deadline, stop_at=best_count, exchanges=True)
    if lp.best_prices is not None and lp.best_prices.bound > certificate.lower_bound:
        small = _small_prices(hist, capacity, lp.best_prices, time.perf_counter() + 0.5)
        certificate = _price_certificate(hist, small, best_count)
    if best_count > certificate.lower_bound and not searched:
        # for the plan: the same patterns without exchanges, so that the LP's solution packs real documents
        priced = lp.master.patterns[len(hist.weights) :]  # the singletons come again by themselves
        lp = column_generation(hist, capacity, priced, lp_deadline, stop_at=1 << 62)
        plan = integer_plan(hist, capacity, lp, certificate.lower_bound, deadline)
        if plan.num_blocks < best_count:
            best = np.empty(n, dtype=np.int64)
            best_count = assign(plan, lengths, item_index, hist.demand, best, 0)
    if best is None:
        best = blocks_of_items(*bfd)
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


def _repack_open_blocks(
    lengths: Int64Array,
    capacity: int,
    csr: tuple[Int64Array, Any, Any],
    target: int,
    deadline: float,
) -> Int64Array | None:
    """When the bound is L1: keep the full blocks of a packing and pack the documents of the others again,
    into ``target`` blocks in all; None when that fails. O(n) plus the repacking."""
    blocks = blocks_of_items(*csr)
    fill = np.bincount(blocks, weights=lengths).astype(np.int64)
    open_block = fill < capacity
    full = int((~open_block).sum())
    rest = np.flatnonzero(open_block[blocks])
    if rest.size * 4 > lengths.size * 3:
        return None
    sub_lengths = lengths[rest]
    hist, item_index = histogram_of(length_histogram(sub_lengths, capacity), capacity)
    if knapsack_cells(hist, capacity) > MAX_KNAPSACK_CELLS:
        return None
    sub_bfd = best_fit_decreasing_blocks(sub_lengths, capacity)
    initial = sample_patterns(sub_bfd, item_index, len(hist.weights))
    lp = column_generation(hist, capacity, initial, deadline, stop_at=target - full)
    plan = integer_plan(hist, capacity, lp, target - full, deadline)
    if plan.num_blocks > target - full:
        return None
    full_ids = np.cumsum(~open_block) - 1
    out: Int64Array = full_ids[blocks]
    sub = np.empty(len(rest), dtype=np.int64)
    assign(plan, sub_lengths, item_index, hist.demand, sub, full)
    out[rest] = sub
    return out


def optimal_blocks(lengths: Int64Array, capacity: int, time_limit: float = 60.0) -> Int64Array:
    """Block of every document in a packing with the fewest blocks possible (``solve(...).blocks``).

    >>> int(optimal_blocks(np.array([4, 3, 3, 2, 2, 2]), 8).max()) + 1
    2
    """
    return solve(lengths, capacity, time_limit).blocks
