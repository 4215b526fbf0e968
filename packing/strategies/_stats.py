"""What a packing cost and what it lost, in numbers.

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.errors import TokensLost
from packing.strategies._kernels import IntArray, tally_plan

Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class UnitStats:
    """What a packing did to preference pairs and completion groups (``packing.core._pairs_groups``), beside the counts of
    :class:`PackingStats` (where each unit is one sequence, its tokens counted in the recipe's layout).

    ``pairs``, ``groups`` and ``completions`` count the input's units and their completions; ``units_truncated``
    and ``completions_truncated`` what ``overflow="truncate"`` cut to fit a block (the prompt kept, the completions
    cut to one common length), ``units_dropped`` the units left out (``drop``, or a prompt too long for any
    completion to follow it); ``prompt_tokens_shared`` the prompt tokens stored once instead of once per completion
    (``share_prompt``; 0 otherwise), in the units packed.

    >>> UnitStats(2, 0, 4, 0, 0, 0, 6, True).summary()["prompt_tokens_shared"]
    6
    """

    pairs: int
    groups: int
    completions: int
    units_truncated: int
    completions_truncated: int
    units_dropped: int
    prompt_tokens_shared: int
    share_prompt: bool

    def summary(self) -> dict[str, Any]:
        """The counts as a plain dict."""
        return asdict(self)

    def plus(self, other: UnitStats) -> UnitStats:
        """The counts of two packings of units (in one layout) added. O(1)."""
        numbers = {name: getattr(self, name) + getattr(other, name) for name in UNIT_SUMMED}
        return UnitStats(**numbers, share_prompt=self.share_prompt)

    def cut_text(self) -> str:
        """What overflow did to the units, in words (the command line's "units cut", every door's warning).

        >>> UnitStats(2, 0, 4, 1, 1, 1, 0, False).cut_text()
        '1 truncated (1 completion cut), 1 dropped'
        """
        cut = self.completions_truncated
        return (
            f"{self.units_truncated:,} truncated ({cut:,} completion{'' if cut == 1 else 's'} cut), "
            f"{self.units_dropped:,} dropped"
        )


UNIT_SUMMED = tuple(f.name for f in fields(UnitStats) if f.name != "share_prompt")
"""The counts of :class:`UnitStats` that add up (``share_prompt`` is the recipe's)."""
ACCOUNTING = (
    "input_tokens", "packed_tokens", "tokens_truncated", "tokens_dropped", "padding_tokens",
    "num_sequences", "empty_sequences", "sequences_truncated", "sequences_split", "sequences_dropped",
)  # fmt: skip
"""The token and sequence counts of :meth:`PackingStats.accounting`."""
UNIT_ACCOUNTING = ("pairs", "groups", "completions", "units_truncated", "completions_truncated", "units_dropped")
"""The unit counts of :meth:`PackingStats.accounting` (beside ``units_kept``)."""


@dataclass(frozen=True)
class PackingStats:
    """Statistics of one packing. Every token that was cut or dropped is counted here.

    ``lower_bound`` is ceil(packed_tokens / max_seq_length); ``efficiency`` is
    packed_tokens / (num_blocks × max_seq_length) (0 when nothing is packed);
    ``block_utilization[b]`` is the fraction of block b that holds real tokens.
    ``trainable_tokens`` counts packed tokens under the loss mask; ``target_tokens``
    counts the positions the loss is computed on (``labels != -100``): the trainable
    tokens less the first token of every document, which no token may predict.
    ``samples_without_trainable_tokens`` counts packed samples none of whose tokens
    is a target, such as a prompt/completion pair whose completion was truncated away.
    A plan made from lengths alone treats every token as trainable.
    """

    max_seq_length: int
    num_sequences: int
    empty_sequences: int
    num_blocks: int
    lower_bound: int
    input_tokens: int
    packed_tokens: int
    padding_tokens: int
    efficiency: float
    tokens_truncated: int
    tokens_dropped: int
    sequences_truncated: int
    sequences_dropped: int
    sequences_split: int
    trainable_tokens: int
    target_tokens: int
    samples_without_trainable_tokens: int
    block_utilization: FloatArray = field(repr=False, compare=False)
    units: UnitStats | None = field(default=None, compare=False)
    """Pairs and groups (None when no row was one): see :class:`UnitStats`."""

    @property
    def tokens_lost(self) -> int:
        """Tokens that are in the input but in no block (truncated or dropped)."""
        return self.tokens_truncated + self.tokens_dropped

    def accounting(self) -> dict[str, int]:
        """What became of the input, the counts every door shows alike (its ``stats``, the statistics of its
        :class:`~packing.errors.TokensLost`, the command line's summary): tokens in, kept, truncated, dropped and
        the padding added; sequences in (empty ones too), truncated, split and dropped; and with pairs and groups
        the units in, kept, truncated and dropped and their completions. Kept + truncated + dropped = in, in
        tokens and in units. O(1).

        >>> from packing import plan
        >>> counts = plan([10, 2, 5], 4, overflow="drop").stats.accounting()
        >>> counts["input_tokens"], counts["packed_tokens"], counts["tokens_dropped"], counts["sequences_dropped"]
        (17, 2, 15, 2)
        """
        counts = {name: int(getattr(self, name)) for name in ACCOUNTING}
        if self.units is not None:
            units = self.units
            counts |= {name: int(getattr(units, name)) for name in UNIT_ACCOUNTING}
            counts["units_kept"] = units.pairs + units.groups - units.units_dropped
        return counts

    def summary(self) -> dict[str, Any]:
        """The scalar statistics as a plain dict (for tables, JSON and logs): :meth:`accounting` among them."""
        values = asdict(self)
        values.pop("block_utilization")
        values.pop("units")
        values["tokens_lost"] = self.tokens_lost
        if self.units is not None:
            values.update(self.units.summary())
        return values | self.accounting()

    def loss_text(self, cli: bool = False) -> str | None:
        """What the overflow policy cut or left out, in one line: how many tokens, their share of the input, and
        why (options named as the command line's flags with ``cli``, else as ``packing.Recipe``'s); None when
        every token was kept. The command line's warning and every door's :class:`~packing.errors.TokensLost`.

        >>> from packing import plan
        >>> plan([10, 2, 5], 4).stats.loss_text()
        "7 of 17 tokens (41.18 %) lost: 2 sequences longer than max_seq_length=4 truncated (overflow='split' keeps every token)"
        """
        if not self.tokens_lost:
            return None
        share = f"{100 * self.tokens_lost / self.input_tokens:.2f} %"
        length = f"--max-seq-length {self.max_seq_length:,}" if cli else f"max_seq_length={self.max_seq_length}"
        what = [
            f"{count:,} sequence{'' if count == 1 else 's'} longer than {length} {verb}"
            for count, verb in ((self.sequences_truncated, "truncated"), (self.sequences_dropped, "dropped"))
            if count
        ]
        keep = "--overflow split keeps every token" if cli else "overflow='split' keeps every token"
        if self.units is not None:
            longer = "a longer --max-seq-length" if cli else "a longer max_seq_length"
            what.append(f"pairs and groups {self.units.cut_text()}")
            keep = f"a pair or group is never split: {longer} keeps every token"
        return f"{self.tokens_lost:,} of {self.input_tokens:,} tokens ({share}) lost: {', '.join(what)} ({keep})"

    def warn_lost(self, where: str) -> None:
        """Warn (:class:`~packing.errors.TokensLost`, with these statistics) when the overflow policy cut or left
        out tokens at the door ``where``: the doors that return no statistics say what they cut. O(1).

        >>> import warnings
        >>> from packing import plan
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     plan([6, 2], 4, overflow="drop").stats.warn_lost("collate")
        >>> str(caught[0].message)
        "collate: 6 of 8 tokens (75.00 %) lost: 1 sequence longer than max_seq_length=4 dropped (overflow='split' keeps every token)"
        """
        text = self.loss_text()
        if text is not None:
            warnings.warn(TokensLost(where, text, self), stacklevel=3)

    def plus(self, other: PackingStats) -> PackingStats:
        """The statistics of two packings (of one ``max_seq_length``: parts of one stream) added: every count
        summed, the ratios made again from the sums; ``block_utilization`` is not kept (empty: a stream's memory
        does not grow with its blocks). O(1).

        >>> from packing import plan
        >>> both = plan([3, 2], 4).stats.plus(plan([6], 4, overflow="drop").stats)
        >>> both.num_blocks, both.input_tokens, both.tokens_dropped, both.padding_tokens
        (2, 11, 6, 3)
        """
        counts = {name: getattr(self, name) + getattr(other, name) for name in SUMMED}
        units = (
            self.units if other.units is None else other.units if self.units is None else self.units.plus(other.units)
        )
        return replace(self.of_state({**counts, "units": None}, self.max_seq_length, False), units=units)

    def state(self) -> dict[str, Any]:
        """The counts that add up (:data:`SUMMED`; ``units``: :data:`UNIT_SUMMED`, or None) as plain ints: what a
        stream's state and a cache file keep; :meth:`of_state` makes the statistics again. O(1).

        >>> from packing import plan
        >>> stats = plan([6, 2], 4, overflow="drop").stats
        >>> PackingStats.of_state(stats.state(), 4, share_prompt=False) == stats
        True
        """
        state: dict[str, Any] = {name: int(getattr(self, name)) for name in SUMMED}
        units = self.units
        state["units"] = None if units is None else {name: int(getattr(units, name)) for name in UNIT_SUMMED}
        return state

    @classmethod
    def of_state(cls, state: dict[str, Any], max_seq_length: int, share_prompt: bool) -> PackingStats:
        """The statistics of :meth:`state` (the ratios made again from the counts, ``block_utilization`` empty), of
        a packing into ``max_seq_length`` with ``share_prompt``. O(1)."""
        units, packed, slots = state["units"], state["packed_tokens"], state["num_blocks"] * max_seq_length
        return cls(
            max_seq_length=max_seq_length,
            lower_bound=-(-packed // max_seq_length),
            padding_tokens=slots - packed,
            efficiency=packed / slots if slots else 0.0,
            block_utilization=np.zeros(0, dtype=np.float64),
            units=None if units is None else UnitStats(**{n: units[n] for n in UNIT_SUMMED}, share_prompt=share_prompt),
            **{name: state[name] for name in SUMMED},
        )

    def with_fit(self, tokens_cut: int, units_cut: int, units: UnitStats) -> PackingStats:
        """A copy with what fitting pairs and groups whole cut before planning counted in (``tokens_cut`` tokens
        truncated, ``units_cut`` sequences truncated) and their counts ``units``. O(1)."""
        return replace(
            self,
            input_tokens=self.input_tokens + tokens_cut,
            tokens_truncated=self.tokens_truncated + tokens_cut,
            sequences_truncated=self.sequences_truncated + units_cut,
            units=units,
        )

    def with_trainable(
        self, trainable_tokens: int, target_tokens: int, samples_without_trainable_tokens: int
    ) -> PackingStats:
        """A copy with the loss-mask counts filled in from real masks."""
        return replace(
            self,
            trainable_tokens=trainable_tokens,
            target_tokens=target_tokens,
            samples_without_trainable_tokens=samples_without_trainable_tokens,
        )


DERIVED = ("max_seq_length", "lower_bound", "padding_tokens", "efficiency", "block_utilization", "units")
"""The fields of :class:`PackingStats` that do not add up: the recipe's, or made again from the counts."""
SUMMED = tuple(f.name for f in fields(PackingStats) if f.name not in DERIVED)
"""The counts of :class:`PackingStats` that add up over parts of one packing (what :meth:`PackingStats.plus`
sums)."""


def compute_stats(
    lengths: Int64Array,
    capacity: int,
    block_starts: Int64Array,
    piece_sequence: IntArray,
    piece_length: IntArray,
    whole: bool = False,
    documents: int | None = None,
) -> PackingStats:
    """Statistics of a plan, assuming every packed token is trainable. O(n + pieces).

    ``whole=True`` promises that every sequence is exactly one piece (nothing empty, cut or lost).
    ``documents`` is how many documents the model sees, each losing its first token as a target (default: one
    per piece; a strategy that keeps no boundaries has one per block).
    """
    counts, fill = tally_plan(lengths, block_starts, piece_sequence, piece_length, whole)
    packed, truncated, dropped, n_truncated, n_dropped, n_split, empty, total, untrained = (int(c) for c in counts)
    state = {
        "num_sequences": len(lengths),
        "empty_sequences": empty,
        "num_blocks": len(block_starts) - 1,
        "input_tokens": total,
        "packed_tokens": packed,
        "tokens_truncated": truncated,
        "tokens_dropped": dropped,
        "sequences_truncated": n_truncated,
        "sequences_dropped": n_dropped,
        "sequences_split": n_split,
        "trainable_tokens": packed,
        "target_tokens": packed - (len(piece_length) if documents is None else documents),
        "samples_without_trainable_tokens": untrained,
        "units": None,
    }
    return replace(PackingStats.of_state(state, capacity, False), block_utilization=fill / capacity)
