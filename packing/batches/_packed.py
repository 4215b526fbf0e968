"""Materializing a plan: token arrays a trainer can consume.

Internal: the public names are in ``packing`` and ``packing.batches``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from packing.batches._schema import COLUMNS, GRID_COLUMNS, LOSS_WEIGHTS, UNIT_GRID, arrow_column, arrow_schema
from packing.batches._units import (
    UnitFit,
    UnitGrids,
    check_whole_units,
    fit_units,
    unit_boundaries,
    unit_grids,
    unit_mask,
)
from packing.core._arrays import check_block_indexes, offsets_of, ranges, row_of
from packing.core._pairs_groups import Units
from packing.core._samples import IGNORE_INDEX, Samples, all_ones, joined_dtype, sample_offsets
from packing.core._validation import INT32_MAX, OverflowPolicy, check_flag, check_integer, check_token_id
from packing.errors import SampleError, SettingError
from packing.planning._plans import PackingPlan, check_pieces, plan_of
from packing.reading._reader import join_token_arrays, read_samples, token_array_lengths
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._kernels import fill_labels, fill_positions, fill_sequences, fill_tokens, piece_mask_sums
from packing.strategies._registry import STRATEGIES, StrategyName
from packing.strategies._stats import PackingStats
from packing.text._prepare import Prepared, prepare
from packing.weighting import DocumentWeights, LossMode, LossTotals, document_weights, token_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
IdArray = npt.NDArray[np.signedinteger[Any]]
"""Ids, labels and positions: int32 (the compact schema), int64 when asked for."""
_ONE = np.ones(1, dtype=np.int8)
"""The mask handed to the kernel when no token is masked (it is not read)."""


CHUNK_TOKENS = 1 << 22
"""Token slots per chunk when blocks are made and written chunk by chunk (about 70 MB of columns)."""


THREAD_SLOTS = 1 << 22
"""Slots per part when a large column is filled by several threads (see ``in_parts``)."""


def in_parts(num_blocks: int, slots: int, fill: Callable[[slice], object]) -> None:
    """Call ``fill(rows)`` on consecutive slices of whole blocks that together cover them all: one slice on
    this thread for a column under ``2 * THREAD_SLOTS`` slots, else slices of about ``THREAD_SLOTS``
    shared by one thread per core as each becomes free (the compiled kernels release the GIL; a thread
    slowed by other work leaves its next slices to the others). The threads end before this returns
    (none outlives it, so a process can fork afterwards as before); a failure in any slice is raised.
    O(slices) plus the fills.

    >>> seen = []
    >>> in_parts(5, 20, seen.append); seen
    [slice(0, 5, None)]
    """
    parts = max(1, min(slots // THREAD_SLOTS, num_blocks))
    workers = min(_cores(), parts)
    bounds = [num_blocks * k // parts for k in range(parts + 1)]
    rows = [slice(bounds[k], bounds[k + 1]) for k in range(parts)]
    if workers == 1:
        for part in rows:
            fill(part)
        return
    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(fill, part) for part in rows]:
            done.result()


def _cores() -> int:
    """Cores this process may run on. O(1)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - platforms without affinity


def blocks_per_chunk(max_seq_length: int, tokens: int | None = None) -> int:
    """Blocks in one chunk of about ``tokens`` slots (default ``CHUNK_TOKENS``; at least one block).

    >>> blocks_per_chunk(4096), blocks_per_chunk(1 << 23)
    (1024, 1)
    """
    if tokens is None:
        tokens = CHUNK_TOKENS
    return max(1, check_integer(tokens, "chunk_tokens") // max_seq_length)


def chunk_rows(num_blocks: int, order: npt.ArrayLike | None, size: int) -> Iterator[Int64Array | slice]:
    """The blocks of each chunk, in ``order`` (default: a slice of plan order), ``size`` blocks at a time.

    >>> list(chunk_rows(5, None, 2)), [r.tolist() for r in chunk_rows(3, [2, 0, 1], 2)]
    ([slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)], [[2, 0], [1]])
    """
    if order is None:
        for lo in range(0, num_blocks, size):
            yield slice(lo, min(lo + size, num_blocks))
        return
    rows = check_block_indexes(order, num_blocks, "order")
    for lo in range(0, len(rows), size):
        yield rows[lo : lo + size]


@dataclass(frozen=True)
class PackedBatch:
    """Packed blocks: a checked plan and the samples that fill it, each column made when first read. Every column
    has shape ``(num_blocks, max_seq_length)``, padding at the end of each block.

    - ``input_ids``: token ids, ``pad_token_id`` in padding.
    - ``loss_mask``: 1 for a real token that is trained on, 0 for padding or a masked (prompt) token.
    - ``labels``: ``input_ids`` with -100 where there is no loss and at the first token of every document,
      so no token learns to predict the start of an unrelated sample.
    - ``position_ids``: 0, 1, 2, ... restarting at every document in a block; 0 in padding.
    - ``sequence_ids``: index of the source sample of each token (``sequence_names[index]`` when given),
      -1 in padding.

    The schema's dtypes (``packing.batches._schema``): ids, labels and positions int32 (int64 when made with
    ``int64=True``), ``sequence_ids`` int32, ``loss_mask`` int8. ``input_ids`` and ``loss_mask`` are filled
    together in one compiled pass when one of them is first read (``materialize`` and ``pack`` read them);
    ``labels``, ``position_ids`` and ``sequence_ids`` are derived from them and the plan on first access, in one
    sequential pass each, and kept: a batch whose derived columns are never read costs 5 bytes a token, one read
    in full 17, besides the samples it holds (their tokens and mask; none for token arrays the plan keeps in
    order, which are the blocks' own). ``chunks`` makes the blocks a chunk at a time (memory for the input and one chunk, not the whole
    output); ``stats`` are the plan's with the loss-mask counts, made without any block.

    >>> b = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4, strategy="split")
    >>> b.input_ids.tolist(), b.input_ids.dtype.name
    ([[1, 2, 3, 4], [5, 0, 0, 0]], 'int32')
    >>> b.labels.tolist()
    [[-100, 2, -100, 4], [-100, -100, -100, -100]]
    >>> b.position_ids.tolist()
    [[0, 1, 0, 1], [0, 0, 0, 0]]

    Blocks of preference pairs and completion groups (``units``: the samples' :class:`~packing.core._pairs_groups.Units`)
    hold whole units; their documents (``seq_lengths``) are each completion with its prompt, or with
    ``share_prompt`` each unit, whose ``position_ids`` continue from the prompt's end in every completion; they also
    have ``unit_ids`` (= ``sequence_ids``), ``document_ids``, ``completion_ids``, ``prediction_positions`` and
    ``unit_kinds`` (see ``packing.core._pairs_groups.UNIT_COLUMNS``), and ``attention_mask(block)`` keeps every completion from its siblings.

    >>> b = pack([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}], 8)
    >>> b.input_ids.tolist(), b.seq_lengths(0).tolist(), b.completion_ids.tolist()
    ([[1, 2, 3, 1, 2, 4, 5, 0]], [3, 4], [[-1, -1, 0, -1, -1, 1, 1, -1]])
    """

    plan: PackingPlan
    samples: Samples
    """The samples the plan places (a batch ``made`` holds their loss mask and units only: its ids hold the
    tokens)."""
    pad_token_id: int = 0
    int64: bool = False
    """Whether ids, labels and positions are int64 (else int32, the compact schema)."""
    sequence_names: Int64Array | None = None
    """What ``sequence_ids`` calls each of the plan's sequences (a position in a stream, a row of a
    dataset); None: the sequence's index."""
    fit: UnitFit | None = field(default=None, repr=False, compare=False)
    """What fitting the samples' pairs and groups cut and left out (counted in ``stats.units``); None for plain
    samples, and for a part of a batch (``select``), whose counts describe its blocks only."""
    filled: tuple[IdArray, npt.NDArray[np.int8]] | None = field(default=None, repr=False, compare=False)
    """``(input_ids, loss_mask)`` when already made (the blocks of token arrays in order, a part of a filled
    batch); None: filled when first read."""

    @classmethod
    def of(
        cls,
        plan: PackingPlan,
        samples: Samples,
        *,
        pad_token_id: int = 0,
        int64: bool = False,
        sequence_names: npt.ArrayLike | None = None,
    ) -> PackedBatch:
        """The blocks of ``plan`` filled with ``samples``, checked once: the plan was made for the samples' lengths
        (and keeps every unit whole), the pad id fits the schema's dtype (see ``materialize``). Nothing is filled
        yet. O(pieces + sequences).

        >>> from packing import plan
        >>> batch = PackedBatch.of(plan([2, 3, 1], 4, strategy="split"), read_samples([[1, 2], [3, 4, 5], [6]]))
        >>> [chunk.input_ids.tolist() for chunk in batch.chunks(tokens=4)]
        [[[1, 2, 3, 4]], [[5, 6, 0, 0]]]
        >>> batch.select([1]).labels.tolist()  # 5 starts a piece: no target
        [[-100, -100, -100, -100]]
        """
        wide = check_flag(int64, "int64")
        pad = check_pad(pad_token_id, wide)
        if not isinstance(samples, Samples):
            raise SettingError("samples", "a Samples (packing.read_rows)", type(samples).__name__)
        if samples.tokens is None or samples.loss_mask is None:
            raise SettingError("samples", "token ids (lengths-only data can be planned, not packed)", "<lengths only>")
        samples.refuse_other_labels()
        if not np.array_equal(plan.lengths, samples.lengths):
            raise SettingError(
                "plan",
                f"a plan for these {len(samples.lengths)} samples' lengths (plan(samples.lengths, ...))",
                f"<a plan for {len(plan.lengths)} sequences of other lengths>",
            )
        names = _sequence_names(sequence_names, len(samples.lengths))
        check_pieces(plan)
        if samples.units is not None:
            check_whole_units(plan, samples.units)
        return cls(plan, samples, pad, wide, names)

    @property
    def units(self) -> Units | None:
        """The unit structure of the plan's sequences when they are pairs or groups (None otherwise)."""
        return self.samples.units

    @cached_property
    def stats(self) -> PackingStats:
        """The plan's statistics with the loss-mask counts and, for pairs and groups, what fitting them cut and left
        out (``stats.units``), made without any block: the one place a batch's statistics are derived.
        O(tokens).

        >>> pack([{"prompt": [1], "chosen": [2, 3, 4], "rejected": [5]}], 5).stats.units.completions_truncated
        1
        """
        stats = self.plan.stats
        if has_masked(self.samples.loss_mask):  # type: ignore[arg-type]
            stats = stats.with_trainable(*_trainable(self.plan, self.samples))
        if self.fit is not None:
            packed = np.bincount(self.plan.piece_sequence, minlength=len(self.samples)) > 0
            stats = self.fit.stats(stats, self.fit.planning, packed)
        return stats

    @cached_property
    def _filled(self) -> tuple[IdArray, npt.NDArray[np.int8]]:
        """``input_ids`` and ``loss_mask``: one compiled pass writing both (several threads for a large batch);
        a packed token id above 2**31 - 1 in the int32 schema is refused. O(slots)."""
        if self.filled is not None:
            return self.filled
        plan, samples = self.plan, self.samples
        shape = (plan.num_blocks, plan.max_seq_length)
        input_ids = np.empty(shape, dtype=np.int64 if self.int64 else np.int32)
        loss_mask = np.empty(shape, dtype=np.int8)
        assert samples.tokens is not None and samples.loss_mask is not None  # checked when made
        unmasked = not has_masked(samples.loss_mask)
        check = not self.int64 and samples.tokens.dtype.itemsize > 4
        tokens, mask, offsets = samples.tokens, _ONE if unmasked else samples.loss_mask, samples.offsets
        starts, pieces = plan.block_starts, (plan.piece_sequence, plan.piece_start, plan.piece_length)
        largest = [0]

        def fill(rows: slice) -> None:
            part, ids, masks = starts[rows.start : rows.stop + 1], input_ids[rows], loss_mask[rows]
            pad = self.pad_token_id
            largest.append(fill_tokens(tokens, mask, unmasked, check, offsets, part, *pieces, pad, ids, masks))

        in_parts(plan.num_blocks, input_ids.size, fill)
        if check and max(largest) > INT32_MAX:
            raise samples.wide_id_error()
        return input_ids, loss_mask

    def made(self) -> PackedBatch:
        """This batch with its ids and mask made (one pass), holding the samples' loss mask and units but not their
        tokens, which are in ``input_ids`` now: what ``pack`` returns, 5 bytes a token slot. O(slots).

        >>> made = PackedBatch.of(plan_of(np.array([2, 1]), Recipe(4)), read_samples([[1, 2], [3]])).made()
        >>> made.input_ids.tolist(), made.samples.tokens is None, made.stats.packed_tokens
        ([[1, 2, 3, 0]], True, 3)
        """
        return replace(self, samples=replace(self.samples, tokens=None, labels=None), filled=self._filled)

    @property
    def input_ids(self) -> IdArray:
        """Token ids (see the class), filled with ``loss_mask`` on first access. O(slots) once."""
        return self._filled[0]

    @property
    def loss_mask(self) -> npt.NDArray[np.int8]:
        """1 for a trained real token (see the class), filled with ``input_ids`` on first access."""
        return self._filled[1]

    @cached_property
    def _unit_grids(self) -> UnitGrids:
        """The columns of blocks of units, made together on first access. O(blocks × max_seq_length)."""
        assert self.units is not None
        return unit_grids(self.plan, self.units, self.input_ids, self.loss_mask)

    @property
    def boundaries(self) -> tuple[Int64Array, npt.NDArray[np.integer[Any]]]:
        """``(starts, lengths)``: the documents a model sees in each block, in CSR form (the plan's
        :attr:`~packing.planning._plans.PackingPlan.boundaries`; for units, each completion with its prompt, or each
        unit with a shared prompt). O(1), O(documents) for units."""
        if self.units is None:
            return self.plan.boundaries
        return unit_boundaries(self.plan, self.units)

    @cached_property
    def labels(self) -> IdArray:
        """Training targets (see the class), derived on first access. O(blocks × max_seq_length)."""
        if self.units is not None:
            return self._unit_grids.labels
        labels = np.empty_like(self.input_ids)
        starts, lengths = self.plan.boundaries

        def fill(rows: slice) -> None:
            ids, mask = self.input_ids[rows], self.loss_mask[rows]
            fill_labels(ids, mask, starts[rows.start : rows.stop + 1], lengths, IGNORE_INDEX, labels[rows])

        in_parts(self.num_blocks, labels.size, fill)
        return labels

    @cached_property
    def position_ids(self) -> IdArray:
        """Positions restarting at every document (see the class), derived on first access."""
        if self.units is not None:
            return self._unit_grids.position_ids
        positions = np.empty_like(self.input_ids)
        starts, lengths = self.plan.boundaries
        in_parts(
            self.num_blocks,
            positions.size,
            lambda rows: fill_positions(starts[rows.start : rows.stop + 1], lengths, positions[rows]),
        )
        return positions

    @cached_property
    def sequence_ids(self) -> npt.NDArray[np.int32]:
        """Source sample of every token, -1 in padding (see the class), derived on first access."""
        sequences = np.empty(self.input_ids.shape, dtype=np.int32)
        names = self.sequence_names if self.sequence_names is not None else np.zeros(0, dtype=np.int64)
        starts, pieces, lengths = self.plan.block_starts, self.plan.piece_sequence, self.plan.piece_length
        in_parts(
            self.num_blocks,
            sequences.size,
            lambda rows: fill_sequences(starts[rows.start : rows.stop + 1], pieces, lengths, names, sequences[rows]),
        )
        return sequences

    @property
    def unit_ids(self) -> npt.NDArray[np.int32]:
        """The unit (sample) of every token, -1 in padding: ``sequence_ids``, under the name every door gives units'
        blocks. O(1) once ``sequence_ids`` is made."""
        return self.sequence_ids

    @cached_property
    def document_ids(self) -> npt.NDArray[np.int32]:
        """The document of every token, numbered in its block (0, 1, ... in order: every door writes the same
        values, whatever it chunks or selects), -1 in padding: tokens attend within their document only (and, with
        a shared prompt, not to a sibling completion). A document is one of :attr:`boundaries` (for units each
        completion with its prompt, or with a shared prompt each unit). O(blocks × max_seq_length).

        >>> pack([[1, 2], [3]], 4).document_ids.tolist(), pack([[1], [2], [3]], 2, strategy="next_fit").document_ids.tolist()
        ([[0, 0, 1, -1]], [[0, 1], [0, -1]])
        """
        starts, lengths = self.boundaries
        counts = np.diff(starts)
        used = np.bincount(row_of(counts), weights=lengths[: int(starts[-1])], minlength=self.num_blocks)
        document = np.full(self.input_ids.shape, -1, dtype=np.int32)
        real = np.arange(self.max_seq_length)[None, :] < used[:, None]
        document[real] = np.repeat(ranges(np.zeros(len(counts), dtype=np.int64), counts), lengths[: int(starts[-1])])
        return document

    @cached_property
    def completion_ids(self) -> npt.NDArray[np.int32]:
        """The completion each token answers (numbered over the samples' pairs and groups, in input order), -1 on
        prompts, plain samples and padding. O(blocks × max_seq_length).

        >>> pack([[1, 2]], 4).completion_ids.tolist()
        [[-1, -1, -1, -1]]
        """
        if self.units is not None:
            return self._unit_grids.completion_ids
        return np.full(self.input_ids.shape, -1, dtype=np.int32)

    @cached_property
    def unit_kinds(self) -> npt.NDArray[np.int8]:
        """The kind of every token's unit (``packing.core._pairs_groups.KINDS``: 0 a plain sample, 1 a pair, 2 a group), -1
        in padding; without units every sample is plain. O(blocks × max_seq_length).

        >>> pack([{"prompt": [1], "completions": [[2], [3]]}], 5).unit_kinds.tolist()
        [[2, 2, 2, 2, -1]]
        """
        if self.units is not None:
            return self._unit_grids.kinds
        return np.where(self.sequence_ids >= 0, 0, -1).astype(np.int8)

    @cached_property
    def prediction_positions(self) -> IdArray:
        """Per token the position (in its block) whose logits are trained to predict it, -1 where none is: ``t - 1``
        where ``labels`` train the token, and for a shared prompt's completion's first token the prompt's last
        position. O(blocks × max_seq_length).

        >>> pack([[1, 2, 3]], 4).prediction_positions.tolist()
        [[-1, 0, 1, -1]]
        """
        if self.units is not None:
            return self._unit_grids.prediction_positions
        column = np.arange(self.max_seq_length, dtype=self.input_ids.dtype)[None, :]
        return np.where(self.labels != IGNORE_INDEX, column - 1, -1).astype(self.input_ids.dtype)

    @property
    def num_blocks(self) -> int:
        return self.plan.num_blocks

    @property
    def max_seq_length(self) -> int:
        return self.plan.max_seq_length

    def seq_lengths(self, block: int) -> Int64Array:
        """Lengths of the documents in ``block``, in order."""
        if self.units is None:
            return self.plan.seq_lengths(block)
        self.plan.block(block)  # an index the plan has, or its IndexError
        starts, lengths = self.boundaries
        block %= self.num_blocks
        return lengths[starts[block] : starts[block + 1]].astype(np.int64)

    def cu_seqlens(self, block: int) -> Int64Array:
        """0, then cumulative document lengths of ``block`` (flash-attention ``cu_seqlens``)."""
        return offsets_of(self.seq_lengths(block))

    def attention_mask(self, block: int) -> npt.NDArray[np.bool_]:
        """Block-diagonal causal mask of ``block``: ``mask[q, k]`` is True when query q may attend to key k.

        No attention across documents or into padding. O(max_seq_length²).

        >>> pack([[1, 2], [3]], 4).attention_mask(0).astype(int).tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]

        With a shared prompt, every completion sees its prompt and itself, never a sibling:

        >>> pack([{"prompt": [1], "completions": [[2], [3]]}], 4, share_prompt=True).attention_mask(0).astype(int).tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
        """
        if self.units is not None:
            self.plan.block(block)  # an index the plan has, or its IndexError
            return unit_mask(self._unit_grids.document[block], self.completion_ids[block])
        lengths = self.seq_lengths(block)
        document = np.full(self.max_seq_length, -1, dtype=np.int64)
        document[: int(lengths.sum())] = row_of(lengths)
        same = (document[:, None] == document[None, :]) & (document[:, None] >= 0)
        return np.tril(same)

    def loss_weights(self, mode: LossMode, total: float | LossTotals | None = None) -> npt.NDArray[np.float32]:
        """Per-token float32 weights aligned with ``labels`` (0 where the label is -100) such that
        ``Σ weights × per-token cross-entropy`` is the objective ``mode``: ``token``, ``sequence``,
        ``sequence_sum`` or ``sqrt`` (``packing.weighting``). A document is a source sample (``sequence_ids``),
        its pieces in several blocks counted together. ``total`` is the mode's normaliser over the whole
        optimizer step (trained tokens, documents, or Σ√trained; or a ``LossTotals``) when this batch is one
        part of it; default: this batch's own. O(blocks × max_seq_length).

        >>> b = pack([[1, 2, 3, 4, 5], [6, 7]], 8)
        >>> (b.loss_weights("token") * 5).tolist()
        [[0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]]
        >>> b.loss_weights("sequence").tolist()
        [[0.0, 0.125, 0.125, 0.125, 0.125, 0.0, 0.5, 0.0]]
        """
        self._refuse_units("loss_weights")
        return token_weights(self.labels != IGNORE_INDEX, self.sequence_ids, mode, total)

    def document_weights(self, mode: LossMode) -> DocumentWeights:
        """Every document's weight under ``mode``, normalised over every block of this batch, from the samples'
        loss masks without making any block: ``loss_weights(mode)`` is ``DocumentWeights.grid`` of the blocks,
        which may be made chunk by chunk (``chunks``). O(tokens + documents · log documents).

        >>> b = pack([[1, 2, 3, 4, 5], [6, 7]], 8)
        >>> weights = b.document_weights("sequence")
        >>> bool((weights.grid(b.labels != -100, b.sequence_ids) == b.loss_weights("sequence")).all())
        True
        """
        self._refuse_units("loss_weights")
        _, targets = _piece_targets(self.plan, self.samples)  # the targets ``labels`` train, piece by piece
        return document_weights(self.plan, targets, mode, self.sequence_names)

    def _refuse_units(self, name: str) -> None:
        """Refuse a per-token loss weighting of blocks of units: their loss is the completions' log-probabilities'
        (``packing.torch.completion_logps``), not a per-document mean. O(1)."""
        if self.units is not None:
            raise SettingError(name, "no value with preference pairs or completion groups (their loss is built from "
                               "packing.torch.completion_logps)", "<a weighting>")  # fmt: skip

    def to_lists(self) -> tuple[list[list[int]], list[list[int]]]:
        """The classic ``(blocks, loss_masks)`` as lists of lists of ints."""
        return self.input_ids.tolist(), self.loss_mask.astype(np.int64).tolist()

    def block(self, index: int) -> dict[str, list[int]]:
        """Block ``index`` as a plain dict of the schema's columns (``packing.batches._schema.COLUMNS``) as lists.
        O(max_seq_length).

        >>> pack([[1, 2], [3]], 4).block(0)["labels"]
        [-100, 2, -100, -100]
        """
        return {name: values.tolist() for name, values in block_arrays(self, index).items()}

    def iter_blocks(self) -> Iterator[dict[str, list[int]]]:
        """Every block as a plain dict of lists, in order. O(num_blocks × max_seq_length)."""
        for index in range(self.num_blocks):
            yield self.block(index)

    def chunks(self, order: npt.ArrayLike | None = None, tokens: int | None = None) -> Iterator[PackedBatch]:
        """The blocks in ``order`` (default: plan order) as batches of about ``tokens`` slots each (``select``),
        each made when asked for: views of the columns already made here in plan order, copies otherwise.
        O(slots) in all; memory one chunk at a time.

        >>> [c.input_ids.tolist() for c in pack([[1, 2], [3]], 2).chunks(order=[1, 0], tokens=2)]
        [[[3, 0]], [[1, 2]]]
        """
        for rows in chunk_rows(self.num_blocks, order, blocks_per_chunk(self.max_seq_length, tokens)):
            yield self.select(rows)

    def select(self, blocks: npt.ArrayLike | slice) -> PackedBatch:
        """The blocks ``blocks`` (indexes in order, or a slice) as a batch of their own (``plan.select``: its stats
        describe them); the columns already made here are kept (their rows), the others made when read.
        O(pieces in them).

        >>> pack([[1, 2], [3]], 2).select([1]).input_ids.tolist()
        [[3, 0]]
        """
        chosen = np.arange(self.num_blocks)[blocks] if isinstance(blocks, slice) else blocks
        plan = self.plan.select(chosen)
        rows = blocks if isinstance(blocks, slice) else check_block_indexes(chosen, self.num_blocks)
        made = self.__dict__
        ready = self.filled is not None or "_filled" in made
        filled = (self.input_ids[rows], self.loss_mask[rows]) if ready else None
        part = PackedBatch(plan, self.samples, self.pad_token_id, self.int64, self.sequence_names, None, filled)
        for name in ("labels", "position_ids", "sequence_ids", "completion_ids", "prediction_positions"):
            if name in made:  # already made here: its rows, not made again
                part.__dict__[name] = made[name][rows]
        return part

    def to_arrow(
        self, order: npt.ArrayLike | None = None, loss_weights: LossMode | None = None, *, padding: bool = True
    ) -> pa.Table:
        """The blocks as a ``pyarrow.Table`` of the schema's columns, one row per block, in ``order``
        (default: plan order); with ``loss_weights`` (an objective), also that column, normalised over every
        block of this batch; ``padding=False``: each row its block's real tokens only (``schema.to_arrow``).
        O(blocks × max_seq_length).

        >>> pack([[1, 2], [3]], 4).to_arrow().column_names
        ['input_ids', 'labels', 'loss_mask', 'position_ids', 'sequence_ids', 'seq_lengths']
        >>> pack([[1, 2], [3]], 4).to_arrow(loss_weights="sequence").column("loss_weights").to_pylist()
        [[0.0, 1.0, 0.0, 0.0]]
        """
        return to_arrow(self, order, loss_weights, padding=padding)


def materialize(
    plan: PackingPlan,
    samples: Samples,
    *,
    blocks: npt.ArrayLike | None = None,
    pad_token_id: int = 0,
    int64: bool = False,
    sequence_names: npt.ArrayLike | None = None,
) -> PackedBatch:
    """Fill a plan's pieces with the samples' tokens and loss mask. O(num_blocks × max_seq_length), one
    compiled pass; the other columns are derived when first read (see ``PackedBatch``).

    ``blocks`` picks the blocks to build, in order (``plan.select(blocks)``); the result's plan is
    that selection. The plan must have been made for these samples' lengths. Ids are int32 (a packed
    token id above 2**31 - 1 is refused with the sample and position), int64 with ``int64``.
    ``sequence_names`` gives what ``sequence_ids`` calls each sample (default: its index). To make
    the blocks chunk by chunk, use ``PackedBatch.of`` with the same arguments (nothing is filled until read).

    >>> from packing import plan, read_rows
    >>> samples = read_samples([[1, 2], [3, 4, 5], [6]])
    >>> materialize(plan(samples.lengths, 4, strategy="ffd"), samples).input_ids.tolist()
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    >>> materialize(plan(samples.lengths, 4, strategy="ffd"), samples, blocks=[1]).input_ids.tolist()
    [[1, 2, 0, 0]]
    >>> materialize(plan([1], 4), read_samples([[2**31]]))
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 0, position 0: expected a token id at most 2147483647 (the int32 schema; int64=True for larger ids), got 2147483648
    """
    batch = PackedBatch.of(plan, samples, pad_token_id=pad_token_id, int64=int64, sequence_names=sequence_names)
    if blocks is not None:
        batch = batch.select(blocks)
    batch.input_ids  # noqa: B018 - filled now: a token id the schema cannot hold is refused here
    return batch


def check_pad(pad_token_id: Any, int64: bool) -> int:
    """``pad_token_id`` checked as a token id that fits the ids' dtype (``int64``: int64, else int32). O(1).

    >>> check_pad(7, False), check_pad(2**31, True)
    (7, 2147483648)
    """
    pad = check_token_id(pad_token_id, "pad_token_id")
    if not int64 and pad > INT32_MAX:
        raise SettingError("pad_token_id", f"at most {INT32_MAX} (the int32 schema; int64=True for larger ids)", pad)
    return pad


def has_masked(mask: npt.NDArray[np.int8]) -> bool:
    """Whether any token is masked; O(1) for the all-ones view the reader gives unmasked samples, else O(tokens).

    >>> has_masked(np.array([1, 0], dtype=np.int8)), has_masked(np.ones(3, dtype=np.int8))
    (True, False)
    """
    if mask.size and mask.strides[0] == 0:
        return not mask[0]
    return not mask.all()


def _sequence_names(names: npt.ArrayLike | None, count: int) -> Int64Array | None:
    """``names`` as int64, one per sample, each in 0..2**31 - 1 (``sequence_ids`` is int32). O(count)."""
    if names is None:
        return None
    values = np.asarray(names)
    if values.shape != (count,) or values.dtype.kind not in "iu":
        raise SettingError(
            "sequence_names", f"{count} integers, one per sample", f"<{values.dtype} of shape {values.shape}>"
        )
    if count and (int(values.min()) < 0 or int(values.max()) > INT32_MAX):
        raise SettingError(
            "sequence_names", f"sample indices in 0..{INT32_MAX} (sequence_ids is int32)", int(values.max())
        )
    return values.astype(np.int64, copy=False)


class TrainableCounts(NamedTuple):
    """Loss-mask statistics of a plan filled with samples (see ``PackingStats``)."""

    trainable_tokens: int
    target_tokens: int
    samples_without_trainable_tokens: int


def count_trainable(plan: PackingPlan, samples: Samples) -> TrainableCounts:
    """Trainable tokens kept, the training targets among them (not a document's first token), and packed
    samples with no target, without building any block. O(total tokens).

    >>> from packing import plan
    >>> samples = read_samples([{"prompt": [1, 2], "completion": [3, 4]}, [5]])
    >>> count_trainable(plan(samples.lengths, 4, strategy="ffd"), samples)
    TrainableCounts(trainable_tokens=3, target_tokens=2, samples_without_trainable_tokens=1)
    """
    if samples.loss_mask is None:
        raise SettingError("samples", "token ids with their loss mask", "<lengths only>")
    return _trainable(plan, samples)


def _trainable(plan: PackingPlan, samples: Samples) -> TrainableCounts:
    """:func:`count_trainable` of samples with their loss mask, the step a batch's ``stats`` takes (no public verb
    inside a door). O(total tokens)."""
    if samples.units is not None:
        return _unit_trainable(plan.piece_sequence, samples)
    per_piece, targets = _piece_targets(plan, samples)
    return _counted(plan.piece_sequence, per_piece, targets, len(samples.lengths))


def entries_trainable(samples: Samples, sequence: Int64Array, start: Int64Array, length: Int64Array) -> TrainableCounts:
    """:func:`count_trainable` of pieces given as arrays (tokens ``start[k]:start[k] + length[k]`` of sample
    ``sequence[k]``, each starting a document, as a sampler's schedule holds them), samples with their loss mask;
    for units, whole units. O(total tokens).

    >>> samples = read_samples([{"prompt": [1, 2], "completion": [3, 4]}, [5]])
    >>> entries_trainable(samples, np.array([0, 1]), np.array([0, 0]), np.array([3, 1]))
    TrainableCounts(trainable_tokens=2, target_tokens=1, samples_without_trainable_tokens=1)
    """
    assert samples.loss_mask is not None
    sequence = sequence[length > 0]
    if samples.units is not None:
        return _unit_trainable(sequence, samples)
    start, length = start[length > 0], length[length > 0]
    per_piece, targets = piece_mask_sums(samples.loss_mask, samples.offsets, sequence, start, length)
    return _counted(sequence, per_piece, targets, len(samples.lengths))


def _counted(sequence: Any, per_piece: Int64Array, targets: Int64Array, count: int) -> TrainableCounts:
    """The counts of pieces of samples ``sequence`` with these masked tokens and targets. O(pieces + count)."""
    per_sample = np.bincount(sequence, weights=targets, minlength=count)
    packed = np.bincount(sequence, minlength=count) > 0
    return TrainableCounts(int(per_piece.sum()), int(targets.sum()), int((packed & (per_sample == 0)).sum()))


def _unit_trainable(sequence: Any, samples: Samples) -> TrainableCounts:
    """``count_trainable`` of whole units, those of ``sequence`` packed: a target is a trained token something
    predicts (a document's first token never; a shared completion's first token from its prompt). O(total tokens)."""
    assert samples.units is not None and samples.loss_mask is not None
    predictor = samples.units.token_arrays().predictor
    sample = np.repeat(np.arange(len(samples), dtype=np.int64), samples.lengths)
    trained = samples.loss_mask != 0
    packed = np.bincount(sequence, minlength=len(samples)) > 0
    per_sample = np.bincount(sample, weights=trained, minlength=len(samples))
    targets = np.bincount(sample, weights=trained & (predictor > 0), minlength=len(samples))
    return TrainableCounts(
        int(per_sample[packed].sum()), int(targets[packed].sum()), int((packed & (targets == 0)).sum())
    )


def targets_per_sample(plan: PackingPlan, samples: Samples | None = None) -> Int64Array:
    """Training targets (labels that are not -100) of each sample in ``plan``'s blocks, its pieces in several
    blocks counted together, without building any block: what ``PackedBatch.loss_weights`` counts per document.
    ``samples`` None: lengths only, every token in the loss mask. O(total tokens).

    >>> from packing import plan
    >>> targets_per_sample(plan([2, 3, 1], 4, strategy="split"), read_samples([[1, 2], [3, 4, 5], [6]])).tolist()  # 5 starts a block
    [1, 1, 0]
    """
    if samples is not None and samples.loss_mask is None:
        raise SettingError("samples", "token ids with their loss mask", "<lengths only>")
    _, targets = _piece_targets(plan, samples)
    counts = np.bincount(plan.piece_sequence, weights=targets, minlength=len(plan.lengths))
    return counts.astype(np.int64)


def _piece_targets(plan: PackingPlan, samples: Samples | None) -> tuple[Int64Array, Int64Array]:
    """Tokens of each piece in the loss mask, and its training targets (all but a document's first token).
    O(total tokens)."""
    mask = None if samples is None else samples.loss_mask
    if samples is None or mask is None or not has_masked(mask):  # every token in the mask
        per_piece = np.asarray(plan.piece_length, dtype=np.int64)
        targets = np.maximum(per_piece - 1, 0)
    else:
        per_piece, targets = piece_mask_sums(
            mask, samples.offsets, plan.piece_sequence, plan.piece_start, plan.piece_length
        )
    if not STRATEGIES[plan.strategy].keeps_boundaries:  # only a block's first token starts a document
        first = np.zeros(len(per_piece), dtype=bool)
        first[plan.block_starts[:-1][np.diff(plan.block_starts) > 0]] = True
        targets = np.where(first, targets, per_piece)
    return per_piece, targets


def pack(
    samples: Any,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> PackedBatch:
    """Pack samples into blocks of exactly ``max_seq_length`` tokens: read, planned and filled (:func:`run`).

    ``samples`` is a list of rows in any form the reader accepts (token lists, tensors, ``{"prompt",
    "completion"}``, ``{"input_ids", "loss_mask"}``, ``{"input_ids", "labels"}`` with -100 on untrained
    tokens and the ids elsewhere (other labels are refused: ``packing.torch.collate`` keeps them); see
    ``packing.reading._reader``), a ``Samples``, or a
    dataset from ``packing.read_dataset`` (read once, not checked again). The options are every entry
    point's (:class:`~packing.Recipe`, or ``recipe=``): ``strategy`` (default ``bfd``) and the
    strategy options are ``plan``'s; with a ``tokenizer`` (``packing.load_tokenizer``'s specs:
    ``"bytes"``, a folder, a tokenizer object), text rows are tokenized with their chat template and
    masks, and padding is the tokenizer's pad id unless ``pad_token_id`` is given. Ids, labels and
    positions are int32 (``int64=True``: int64; see ``packing.batches._schema``). O(total tokens) plus the
    strategy's cost.

    >>> pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split").to_lists()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> pack([[1, 2], [3, 4, 5], [6]], 4).to_lists()[0]
    [[3, 4, 5, 6], [1, 2, 0, 0]]
    >>> pack([{"text": "hi"}], 4, tokenizer="bytes").input_ids.tolist()  # the byte tokenizer pads with 257
    [[104, 105, 256, 257]]
    """
    chosen = Recipe.at("pack", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    try:
        batch = run(samples, chosen, prepare(chosen)).made()  # filled now: an id the schema cannot hold is refused
    except SampleError as error:  # a dataset read from files names the file and line of the sample
        locate = getattr(samples, "locate", None)
        raise (locate(error) if callable(locate) else error) from None
    return batch


def run(
    rows: Any,
    recipe: Recipe,
    prepared: Prepared,
    *,
    shuffle: bool = False,
    int64: bool | None = None,
    sequence_names: Int64Array | None = None,
) -> PackedBatch:
    """The one pipeline behind every door that packs rows: read once (any form the reader accepts, a ``Samples``
    or a ``read_dataset`` dataset as they are), pairs and groups fitted whole (``fit_units``), planned
    (``plan_of``), the blocks shuffled with the recipe's seed when ``shuffle``, and a batch that fills them when a
    column is read. ``recipe`` was built by the door (``Recipe.at``) and ``prepared`` is its ``prepare``: neither
    is checked or made again here. ``int64`` (default the recipe's) widens ids; ``sequence_names`` names the
    samples in ``sequence_ids``. O(total tokens) plus the strategy's cost.

    >>> batch = run([{"prompt": [1], "completions": [[2], [3]]}], Recipe(8), prepare(Recipe(8)))
    >>> batch.stats.units.groups, [c.input_ids.tolist() for c in batch.chunks()]
    (1, [[[1, 2, 1, 3, 0, 0, 0, 0]]])
    """
    wide = recipe.int64 if int64 is None else int64
    pad = check_pad(prepared.pad_id, wide)
    samples = getattr(rows, "samples", rows)
    if not isinstance(samples, Samples):
        lengths = token_array_lengths(samples) if recipe.tokenizer is None else None
        if lengths is not None:  # token arrays: joined once, straight into the blocks when they are in order
            return _token_arrays(samples, lengths, recipe, pad, wide, shuffle, sequence_names)
        samples = read_samples(samples, **prepared.read_options)
    fit = None
    if samples.units is not None:
        fitted = fit_units(samples, recipe)
        samples, fit, recipe = fitted.samples, fitted.fit, fitted.planning
    if samples.tokens is None:
        raise SettingError("samples", "token ids (lengths-only data can be planned, not packed)", "<lengths only>")
    samples.refuse_other_labels()
    blocks = plan_of(samples.lengths, recipe)
    blocks = blocks.shuffle(recipe.seed or 0) if shuffle else blocks
    return PackedBatch(blocks, samples, pad, wide, sequence_names, fit)


def _token_arrays(
    rows: list[Any], lengths: Int64Array, recipe: Recipe, pad: int, wide: bool, shuffle: bool, names: Any
) -> PackedBatch:
    """:func:`run` of token arrays (``token_array_lengths`` not None): planned from their lengths and joined once
    (checked as the reader checks them); when the plan holds them in order (``PackingPlan.in_order``) and their
    ids fit, straight into the blocks, padding and mask after them. O(total tokens), one copy."""
    blocks = plan_of(lengths, recipe)
    blocks = blocks.shuffle(recipe.seed or 0) if shuffle else blocks
    total, dtype = int(lengths.sum()), joined_dtype(rows)
    in_order = blocks.in_order() and (wide or dtype == np.int32)
    shape = (blocks.num_blocks, blocks.max_seq_length)
    size = shape[0] * shape[1] if in_order else total
    flat: IdArray = np.empty(size, dtype=np.int64 if wide and in_order else dtype)
    join_token_arrays(rows, flat[:total])
    samples = Samples(flat[:total], all_ones(total), sample_offsets(lengths, len(rows)))
    if not in_order:
        return PackedBatch(blocks, samples, pad, wide, names)
    flat[total:] = pad
    mask = np.zeros(flat.size, dtype=np.int8)
    mask[:total] = 1
    return PackedBatch(blocks, samples, pad, wide, names, None, (flat.reshape(shape), mask.reshape(shape)))


def to_arrow(
    batch: PackedBatch,
    order: npt.ArrayLike | None = None,
    loss_weights: LossMode | None = None,
    *,
    padding: bool = True,
) -> pa.Table:
    """The blocks as a ``pyarrow.Table`` of :data:`COLUMNS`, one row per block. O(blocks × max_seq_length).

    ``order`` lists the blocks to write, in order (default: every block in plan order);
    reorder the plan instead (``plan.shuffle``) to avoid the copy. Values are handed to
    Arrow without copying when already in block order. With ``loss_weights`` (an objective of
    ``packing.weighting``), also the column :data:`LOSS_WEIGHTS`, normalised over every block of ``batch``.
    With ``padding=False`` every row holds only its block's real tokens, ``sum(seq_lengths)`` values (the rows
    TRL's ``pack_dataset`` writes and its padding-free collator reads: it builds positions from ``seq_lengths``).

    >>> from packing import pack
    >>> table = to_arrow(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"))
    >>> table.column("input_ids").to_pylist(), table.column("seq_lengths").to_pylist()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[2, 2], [1, 1]])
    >>> to_arrow(pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split"), padding=False).column("input_ids").to_pylist()
    [[1, 2, 3, 4], [5, 6]]
    """
    import pyarrow as pa

    count = batch.num_blocks
    rows = np.arange(count, dtype=np.int64) if order is None else check_block_indexes(order, count, "order")
    units = tuple(column.name for column in UNIT_GRID) if batch.units is not None else ()
    grids = {name: getattr(batch, name) for name in (*GRID_COLUMNS, *units)}  # the per-slot columns
    if loss_weights is not None:
        grids[LOSS_WEIGHTS.name] = batch.loss_weights(loss_weights)
    block_starts, piece_length = batch.boundaries  # the documents each block holds, as the model sees them
    counts = np.diff(block_starts)[rows]
    pieces = piece_length[ranges(block_starts[:-1][rows], counts)].astype(np.int32, copy=False)
    used = np.bincount(row_of(counts), weights=pieces, minlength=len(rows)).astype(np.int64)
    real = None if padding else np.arange(batch.max_seq_length)[None, :] < used[:, None]
    sizes = np.full(len(rows), batch.max_seq_length, dtype=np.int64) if padding else used
    schema = arrow_schema(batch.int64, loss_weights is not None, units=batch.units is not None)
    dtypes = {column.name: column.dtype_for(batch.int64) for column in (*COLUMNS, *UNIT_GRID, LOSS_WEIGHTS)}
    columns = {"seq_lengths": arrow_column(pieces, counts, pa.int32())}
    for name, grid in grids.items():
        values = (grid if order is None else grid[rows]).astype(dtypes[name], copy=False)
        kind = schema.field(name).type.value_type
        columns[name] = arrow_column(values.reshape(-1) if real is None else values[real], sizes, kind)
    return pa.table({name: columns[name] for name in schema.names}, schema=schema)


def block_arrays(batch: PackedBatch, block: int, padding: bool = True) -> dict[str, npt.NDArray[Any]]:
    """Block ``block`` as numpy arrays of :data:`COLUMNS` with their dtypes (copies); ``padding=False``: its real
    tokens only, as :func:`to_arrow` writes them. O(max_seq_length).

    >>> from packing import pack
    >>> {name: values.dtype.name for name, values in block_arrays(pack([[1, 2], [3]], 4), 0).items()}
    {'input_ids': 'int32', 'labels': 'int32', 'loss_mask': 'int8', 'position_ids': 'int32', 'sequence_ids': 'int32', 'seq_lengths': 'int32'}
    """
    arrays: dict[str, npt.NDArray[Any]] = {}
    used = batch.max_seq_length if padding else int(batch.seq_lengths(block).sum())
    for column in (*COLUMNS, *(UNIT_GRID if batch.units is not None else ())):
        named = column.name == "seq_lengths"
        values = batch.seq_lengths(block) if named else getattr(batch, column.name)[block][:used]
        arrays[column.name] = np.array(values, dtype=column.dtype_for(batch.int64))
    return arrays
