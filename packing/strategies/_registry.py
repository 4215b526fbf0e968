"""The packing strategies: one registry entry per strategy, with every fact about it.

Every no-split strategy is one blocks function ``(lengths, capacity, options) ->
(block_starts, items, item_lengths)``: its blocks in CSR form, numbered in the
order they opened, each holding its documents in the order they were placed.
The splitting strategy cuts documents, so the planner handles it apart. Each
:class:`Strategy` says how it orders documents, which options it accepts, which
lower bound applies to it, why it places a document where it does (its
:class:`Reasons`, which :func:`packing.explain` words its steps with) and its
plain-Python version (:mod:`packing.strategies._reference`, which the tests check
the compiled one against); callers read these facts instead of re-deriving them.
A new strategy is its entry here and its own functions.

>>> STRATEGIES["spfhp"].options
frozenset({'max_sequences_per_block'})
>>> STRATEGIES["bfd"].order, STRATEGIES["bfd"].bound, STRATEGIES["bfd"].reference([2, 4, 3, 1], 5)
('longest_first', 'l2', [1, 0, 1, 0])

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.errors import SettingError
from packing.strategies._kernels import (
    IntArray,
    best_fit_decreasing_blocks,
    blocks_of_items,
    first_fit_blocks,
    first_fit_decreasing_blocks,
    group_by_block,
    longest_first_order,
    next_fit_blocks,
    spfhp_blocks,
)
from packing.strategies._optimal import solve
from packing.strategies._reference import best_fit_decreasing, first_fit, first_fit_decreasing, next_fit, no_packing

Int64Array = npt.NDArray[np.int64]


class StrategyBlocks(NamedTuple):
    """A no-split strategy's blocks in CSR form; ``certificate`` proves how close they are to the fewest
    possible (``optimal`` only)."""

    block_starts: Int64Array
    items: IntArray
    item_lengths: IntArray
    certificate: Any = None


DEFAULT_TIME_LIMIT = 60.0
"""Seconds ``optimal`` searches before it returns its best plan with a certified gap."""
StrategyName = Literal[
    "split", "wrapped", "next_fit", "first_fit", "first_fit_shuffle", "ffd", "bfd", "spfhp", "optimal", "none"
]
"""The strategy names ``plan`` and ``pack`` accept."""
Order = Literal["input", "longest_first", "random"]
Bound = Literal["simple", "l2"]
DEFAULT_STRATEGY: StrategyName = "bfd"
"""The default of ``pack``, ``plan``, the command line and the adapters (TRL's default too)."""
TieBreak = Literal["newest", "oldest"]
TIE_BREAKS: dict[str, str] = {
    "newest": "among blocks with equal room, the one that reached that room last",
    "oldest": "among blocks with equal room, the one that reached that room first (TRL's bfd: its blocks exactly)",
}
"""The ``tie_break`` choices of ``bfd``, with what each does; ``newest`` is the default."""


@dataclass(frozen=True)
class Options:
    """The options a blocks function may read; a strategy's ``options`` says which it accepts."""

    max_sequences_per_block: int | None = None
    time_limit: float | None = None
    seed: int = 0
    tie_break: TieBreak = "newest"


BlocksFunction = Callable[[Int64Array, int, Options], StrategyBlocks]
ReferenceFunction = Callable[[Sequence[int], int], list[int]]
"""A strategy's plain-Python version: the block of every document, from lengths (each 1..capacity)."""


@dataclass(frozen=True)
class Reasons:
    """Why a strategy placed a document where it did, in words (:func:`packing.explain`'s ``Step.reason``): format
    strings of ``where`` (``block 3``), ``size`` (``5 tokens``), ``room`` (the chosen block's room before it),
    ``most`` (the most room any open block had), ``current`` (the newest block's room) and ``tie`` (the other
    blocks of the same room, worded, or nothing). ``placed``: into an open block; ``opened``: into a new block
    while some open block had room; ``full``: into a new block, no open block having room; ``first``: the first
    document (default: by the strategy's order)."""

    placed: str = "The proven-optimal plan puts it in {where} ({room} tokens of room)."
    opened: str = "A new block ({where}) is opened for it: the search proved this gives the fewest blocks overall."
    full: str = "No open block has {size} of room (the most is {most}), so {where} is opened."
    first: str | None = None


_FIRST_FIT = "{order}: {where} is the first block with room for {size} ({room} left)."


@dataclass(frozen=True)
class Strategy:
    """One packing strategy and every fact about it.

    ``order`` is the order documents are placed in (``input``; ``longest_first``, ties in input
    order; ``random``, drawn from ``seed``); ``options`` the keyword options it accepts beyond
    the common ones; ``bound`` the lower bound that applies (``simple`` = ceil(tokens / L) when
    documents may be split, ``l2`` = Martello–Toth L2 otherwise); ``blocks`` its blocks function
    (None for ``split`` and ``wrapped``, which the planner cuts itself); ``reasons`` why it places each
    document where it does; ``reference`` its plain-Python version (None where it has none: the
    cutting strategies, the random order, the histogram and the search). ``warning`` is what the
    auditor finds in the blocks of a strategy whose blocks are each one run of tokens (``wrapped``:
    positions, labels and ``seq_lengths`` do not mark where a document ends), shown wherever it is
    chosen (empty for the others).
    """

    name: str
    title: str
    description: str
    complexity: str
    order: Order
    blocks: BlocksFunction | None = field(repr=False, compare=False)
    options: frozenset[str] = frozenset()
    warning: str = ""
    reasons: Reasons = field(default=Reasons(), repr=False, compare=False)
    reference: ReferenceFunction | None = field(default=None, repr=False, compare=False)

    @property
    def is_search(self) -> bool:
        """Whether it searches until a time limit (it takes ``time_limit``): slow on purpose, left out of
        sweeps that run every strategy.

        >>> [s.name for s in STRATEGIES.values() if s.is_search]
        ['optimal']
        """
        return "time_limit" in self.options

    @property
    def splits_sequences(self) -> bool:
        """Whether it cuts documents (it has no blocks function: the planner cuts it)."""
        return self.blocks is None

    @property
    def keeps_boundaries(self) -> bool:
        """Whether its blocks mark where each document ends (all but the one with a ``warning``)."""
        return not self.warning

    @property
    def bound(self) -> Bound:
        """Which lower bound applies: ``simple`` when documents may be split, ``l2`` otherwise."""
        return "simple" if self.splits_sequences else "l2"

    @property
    def label(self) -> str:
        """The title with the name, for menus and tables: ``Best-fit decreasing (bfd)``."""
        return self.title if f"({self.name})" in self.title else f"{self.title} ({self.name})"


def _grouped(lengths: Int64Array, blocks: Int64Array, order: Int64Array) -> StrategyBlocks:
    """CSR form of a block per document, documents in each block in ``order``. O(n)."""
    num_blocks = int(blocks.max()) + 1 if len(blocks) else 0
    block_starts, items = group_by_block(blocks, order, num_blocks)
    return StrategyBlocks(block_starts, items, lengths[items])


def _none(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    order = np.arange(len(lengths), dtype=np.int64)
    return _grouped(lengths, order, order)


def _next_fit(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    return _grouped(lengths, next_fit_blocks(lengths, capacity), np.arange(len(lengths), dtype=np.int64))


def _first_fit(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    order = np.arange(len(lengths), dtype=np.int64)
    return _grouped(lengths, first_fit_blocks(lengths, order, capacity), order)


def _first_fit_shuffle(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    order = random_order(len(lengths), options.seed)
    return _grouped(lengths, first_fit_blocks(lengths, order, capacity), order)


def random_order(count: int, seed: int) -> Int64Array:
    """The placement order of ``first_fit_shuffle``: a permutation drawn from ``seed``. O(n)."""
    return np.random.default_rng(seed).permutation(count).astype(np.int64)


def _ffd(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    return StrategyBlocks(*first_fit_decreasing_blocks(lengths, capacity))


def _bfd(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    return StrategyBlocks(*best_fit_decreasing_blocks(lengths, capacity, options.tie_break == "oldest"))


def _spfhp(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    cap = options.max_sequences_per_block
    return StrategyBlocks(*spfhp_blocks(lengths, capacity, cap if cap is not None else capacity + 1))


def _optimal(lengths: Int64Array, capacity: int, options: Options) -> StrategyBlocks:
    limit = options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT
    result = solve(lengths, capacity, limit)
    grouped = _grouped(lengths, result.blocks, longest_first_order(lengths, capacity))
    return StrategyBlocks(*grouped[:3], result.certificate)


WRAPPED_WARNING = (
    "wrapped keeps no document boundaries: the documents of a block attend to and predict each other "
    "(audit finds no_document_boundaries, as in TRL's wrapped)"
)
"""What ``wrapped`` is warned with wherever it is chosen (the command line, the explorer, its description)."""
_NO_PACKING = "No packing: every sequence gets a block of its own ({where})."
_NEXT_FIT_OPENS = "It needs {size} but the current block has only {current} left, so {where} is started."


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "split",
            "Split (classic)",
            "Concatenate in input order and cut into blocks; a sequence may continue in the next block.",
            "O(n + blocks)",
            "input",
            None,
        ),
        Strategy(
            "wrapped",
            "Wrapped (TRL's wrapped)",
            "Concatenate in input order and cut into blocks, keeping no boundaries: each block is one run of "
            "tokens (positions 0..L-1, one seq_length), as TRL's wrapped. Leaks across documents: the auditor "
            "finds no_document_boundaries. overflow='split' keeps every token as TRL does.",
            "O(n + blocks)",
            "input",
            None,
            warning=WRAPPED_WARNING,
        ),
        Strategy(
            "next_fit",
            "Next-fit",
            "Input order; a sequence that does not fit closes the block and starts a new one.",
            "O(n)",
            "input",
            _next_fit,
            reasons=Reasons(
                placed="It fits the current block ({where}, {room} tokens of room).",
                opened=_NEXT_FIT_OPENS,
                full=_NEXT_FIT_OPENS,
            ),
            reference=next_fit,
        ),
        Strategy(
            "first_fit",
            "First-fit",
            "Input order; each sequence goes into the first open block with room.",
            "O(n log n)",
            "input",
            _first_fit,
            reasons=Reasons(placed=_FIRST_FIT.replace("{order}", "In input order")),
            reference=first_fit,
        ),
        Strategy(
            "first_fit_shuffle",
            "First-fit, shuffled",
            "A random order drawn from the seed; each sequence goes into the first open block with room "
            "(NeMo's default packing).",
            "O(n log n)",
            "random",
            _first_fit_shuffle,
            frozenset({"seed"}),
            reasons=Reasons(placed=_FIRST_FIT.replace("{order}", "In shuffled order")),
        ),
        Strategy(
            "ffd",
            "First-fit decreasing",
            "Longest first; each sequence goes into the first open block with room.",
            "O(n + L + groups × log n)",
            "longest_first",
            _ffd,
            reasons=Reasons(placed=_FIRST_FIT.replace("{order}", "Longest first")),
            reference=first_fit_decreasing,
        ),
        Strategy(
            "bfd",
            "Best-fit decreasing",
            "Longest first; each sequence goes into the block with the least room that still fits "
            "(on a tie, the block that reached that room last; tie_break='oldest': first, TRL's blocks exactly).",
            "O(n + L + groups × log L), L = max_seq_length",
            "longest_first",
            _bfd,
            frozenset({"tie_break"}),
            reasons=Reasons(
                placed="Longest first: {where} has the least room that still fits ({room} left for {size}){tie}."
            ),
            reference=best_fit_decreasing,
        ),
        Strategy(
            "spfhp",
            "Shortest-pack-first histogram packing",
            "Krell et al. 2021: longest length first, each sequence into the pack with the most room; "
            "sequences of a length that fit no pack get a pack each; optional cap on sequences (documents) per "
            "block: a plain sample is one, a pair or group one with share_prompt=True (refused without it).",
            "O(n + L + groups × log L)",
            "longest_first",
            _spfhp,
            frozenset({"max_sequences_per_block"}),
            reasons=Reasons(
                placed="Longest length first: {where} is a pack with the most room ({room} left), as "
                "shortest-pack-first prefers.",
                opened="No pack left by longer sequences fits it, and shortest-pack-first gives each such sequence "
                "a pack of its own (even where one of its length left room): {where} opens.",
            ),
        ),
        Strategy(
            "optimal",
            "Optimal (proven minimum)",
            "The fewest blocks possible, with a certificate anyone can recheck: column generation on the "
            "length histogram (HiGHS LP, knapsack pricing), exact search for small inputs; after time_limit "
            "seconds (default 60) the best plan found and its certified gap.",
            "O(n + L) plus column generation on the distinct lengths",
            "longest_first",
            _optimal,
            frozenset({"time_limit"}),
        ),
        Strategy(
            "none",
            "No packing",
            "Every sequence padded to a block of its own: the baseline packing improves on.",
            "O(n)",
            "input",
            _none,
            reasons=Reasons(opened=_NO_PACKING, full=_NO_PACKING, first=_NO_PACKING),
            reference=no_packing,
        ),
    )
}
"""Every strategy by name, in the order menus and tables show them."""


def check_whole_samples(strategy: str) -> str:
    """Return ``strategy`` if it keeps every sample whole; the entry points that cannot cut a sample (``stream``,
    the sampler) refuse the others (``split``, ``wrapped``) with this one message, naming those they take. O(1).

    >>> check_whole_samples("bfd")
    'bfd'
    >>> check_whole_samples("wrapped")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: strategy: expected a strategy that keeps samples whole (next_fit, first_fit, first_fit_shuffle, ffd, bfd, spfhp, optimal, none), got 'wrapped' (str)
    """
    if STRATEGIES[strategy].splits_sequences:
        choices = ", ".join(name for name, s in STRATEGIES.items() if not s.splits_sequences)
        raise SettingError("strategy", f"a strategy that keeps samples whole ({choices})", strategy)
    return strategy


def placement_order(strategy: Strategy, lengths: Int64Array, capacity: int, seed: int = 0) -> Int64Array:
    """The order ``strategy`` places documents in. O(n) (O(n log n) for longest first with many lengths).

    >>> placement_order(STRATEGIES["ffd"], np.array([2, 5, 3]), 6).tolist()
    [1, 2, 0]
    """
    if strategy.order == "longest_first":
        return longest_first_order(lengths, capacity)
    if strategy.order == "random":
        return random_order(len(lengths), seed)
    return np.arange(len(lengths), dtype=np.int64)


def strategy_blocks(
    strategy: str, lengths: Int64Array, capacity: int, options: Options | None = None
) -> StrategyBlocks:
    """Run a no-split strategy in CSR form: ``StrategyBlocks(block_starts, items, item_lengths, certificate)``.

    Block b holds documents ``items[block_starts[b]:block_starts[b + 1]]`` in the order they were
    placed; blocks are numbered in the order they opened. Complexity: the strategy's.

    >>> [a.tolist() for a in strategy_blocks("bfd", np.array([5, 3, 2, 4]), 6)[:3]]
    [[0, 1, 3, 4], [0, 3, 2, 1], [5, 4, 2, 3]]
    """
    blocks = STRATEGIES[strategy].blocks
    if blocks is None:
        raise ValueError(f"strategy {strategy!r} splits documents; plan cuts it")
    return StrategyBlocks(*blocks(lengths, capacity, options or Options()))


def assign_blocks(
    strategy: str, lengths: Int64Array, capacity: int, options: Options | None = None
) -> tuple[Int64Array, Int64Array]:
    """Run a no-split strategy: ``(block of each document, placement order)``. O(n) beyond the strategy.

    >>> [a.tolist() for a in assign_blocks("ffd", np.array([5, 3, 2, 4]), 6)]
    [[0, 2, 1, 1], [0, 3, 1, 2]]
    """
    chosen = options or Options()
    block_starts, items, *_ = strategy_blocks(strategy, lengths, capacity, chosen)
    return blocks_of_items(block_starts, items), placement_order(STRATEGIES[strategy], lengths, capacity, chosen.seed)
