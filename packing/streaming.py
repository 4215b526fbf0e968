"""Streaming packing: blocks from an iterable of samples of any length, in memory bounded by a buffer.

``stream(samples, max_seq_length)`` reads samples into a buffer of ``buffer_size``, packs the buffer with a
strategy (``bfd`` by default), yields its blocks, and carries the documents of under-filled blocks into the
next buffer (once each), so the blocks are nearly as full as when packing the whole dataset at once. Every
token of every sample comes out exactly once (up to the overflow policy); memory depends on ``buffer_size``,
never on the length of the stream. ``stream_dataset`` wraps a Hugging Face ``IterableDataset``.

``stream`` returns a :class:`PackingStream`: stopped after any block, its ``state_dict()`` resumes it exactly
(``stream(..., state=saved)``), with the blocks waiting in its buffer and the documents carried to the next one
inside the state, the counts of its ``stats``, and the source's own position where the source can say it
(``datasets.IterableDataset``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.batches._packed import PackedBatch, block_arrays, check_pad, has_masked
from packing.batches._schema import datasets_features
from packing.batches._units import UnitFit, fit_units, unit_planning
from packing.core._arrays import offsets_of
from packing.core._forms import UNIT_FIELDS, unit_kind
from packing.core._pairs_groups import PLAIN, Units
from packing.core._samples import Samples, all_ones
from packing.core._validation import (
    INT32_MAX,
    INT64_MAX,
    OverflowPolicy,
    check_flag,
    check_integer,
    check_state_form,
    integer_list,
    is_integer,
)
from packing.errors import SampleError, SequenceTooLong, SettingError, StateMismatch, quote
from packing.planning._plans import PackingPlan, drawn_plan_of
from packing.reading._reader import read_samples
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._registry import StrategyName, check_whole_samples
from packing.strategies._stats import SUMMED, UNIT_SUMMED, PackingStats, compute_stats
from packing.text._prepare import Prepared, prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

Int64Array = npt.NDArray[np.int64]
Block = dict[str, npt.NDArray[Any]]

CHUNK_BLOCKS = 256
"""Blocks materialized at once."""
CARRY_BELOW = 0.99
"""A block filled below this fraction of ``max_seq_length`` goes back into the buffer (each document once)."""


def _concat(parts: list[Samples]) -> Samples:
    """One ``Samples`` from several, in order (``Samples.join`` of those not empty). O(tokens)."""
    parts = [part for part in parts if len(part)]
    return Samples.join(parts) if parts else _NOTHING


def _capped(carry: npt.NDArray[np.bool_], fill: Int64Array, count: Int64Array, limit: int) -> npt.NDArray[np.bool_]:
    """``carry`` kept for the emptiest blocks only, at most ``limit`` documents in all. O(blocks log blocks)."""
    if int(count[carry].sum()) <= limit:
        return carry
    candidates = np.flatnonzero(carry)
    candidates = candidates[np.argsort(fill[candidates], kind="stable")]
    chosen = candidates[np.cumsum(count[candidates]) <= limit]
    capped = np.zeros_like(carry)
    capped[chosen] = True
    return capped


def _read(
    rows: list[Any], first: int, completions: int | None, recipe: Recipe, prepared: Prepared
) -> tuple[Samples, UnitFit | None]:
    """Read a buffer of rows, and for pairs and groups what fitting them did (it counts what was cut); an error
    names the sample by its position in the stream. Their completions are numbered from ``completions`` (those
    read before them; None: the stream has read no pair or group yet), as ``pack`` numbers them over the whole
    input; once a stream has read one, its plain rows are units of their own (its blocks keep the unit columns)."""
    try:  # an error names the sample by its position in the stream
        samples = read_samples(rows, **prepared.read_options)
        samples.refuse_other_labels()  # blocks are made from subsets of the buffer, which do not carry labels
        if samples.tokens is None:
            raise SettingError("samples", "samples with token ids", "<lengths only>")
        if samples.units is None and completions is not None:
            samples = replace(samples, units=Units.plain(samples.lengths, recipe.share_prompt))
        if samples.units is None:
            return samples, None
        # pairs and groups: fitted whole by the overflow policy before they are planned
        fitted = fit_units(replace(samples, units=samples.units.numbered(completions or 0)), recipe)
    except SampleError as error:
        raise error.after(first) from None
    return fitted.samples, fitted.fit


def _buffer_stats(planned: PackingPlan, emitted: PackedBatch, fit: UnitFit | None, recipe: Recipe) -> PackingStats:
    """What one buffer adds to a stream's statistics: its emitted blocks with their loss-mask counts (a carried
    document is counted in the buffer that emits it), and what its plan and the fitting of its units cut or left
    out (only rows read into this buffer lose tokens: a carried document fits). O(tokens of the buffer)."""
    lost, kept = planned.stats, emitted.stats
    part = replace(
        kept,
        num_sequences=kept.num_sequences + lost.sequences_dropped + lost.empty_sequences,
        empty_sequences=lost.empty_sequences,
        input_tokens=kept.input_tokens + lost.tokens_lost,
        tokens_truncated=lost.tokens_truncated,
        tokens_dropped=lost.tokens_dropped,
        sequences_truncated=lost.sequences_truncated,
        sequences_dropped=lost.sequences_dropped,
    )
    return part if fit is None else fit.stats(part, recipe)


def stream(
    samples: Iterable[Any],
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    buffer_size: int = 10_000,
    shuffle: bool = True,
    recipe: Recipe | None = None,
    state: dict[str, Any] | None = None,
    **options: Unpack[RecipeOptions],
) -> PackingStream:
    """Pack an iterable of samples (any form ``pack`` accepts, text rows with a ``tokenizer``, any length,
    read once) into blocks of ``max_seq_length`` tokens, holding at most ``buffer_size`` samples at a time.

    The options are every entry point's (:class:`~packing.Recipe`, or ``recipe=``), except ``window``
    (the buffer is the window here: refused, in a recipe too) and strategies that split samples (``split``). Yields one dict per
    block with the packed schema's columns (``packing.batches._schema.COLUMNS``) as numpy arrays, all of length
    ``max_seq_length`` but ``seq_lengths`` (the block's documents); ``sequence_ids`` is the sample's
    position in the stream, counted from its start (-1 in padding). Pairs and groups add the unit columns
    (``packing.core._pairs_groups.UNIT_COLUMNS``; every block after the first pair or group read has them), their
    ``completion_ids`` numbered over the whole stream in input order, as ``pack`` numbers them. Each buffer is packed with
    ``strategy``; documents of blocks filled below 99 % are carried into the next buffer once; with
    ``shuffle`` the blocks of a buffer come out in a random order drawn from ``seed`` (default 0),
    otherwise in plan order. The last buffer is flushed whole. O(tokens) plus the strategy's cost per
    buffer; memory O(buffer_size × sample length), independent of the stream's length.

    Resumable: the returned :class:`PackingStream` has ``state_dict()`` (the blocks of the buffer not yet
    yielded, the documents carried to the next one, the counts of its ``stats``, and where the source stands);
    ``stream(samples, ..., state=saved)`` goes on from there, every token still once, every column as the
    uninterrupted stream's.

    >>> blocks = list(stream([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 5, shuffle=False))
    >>> [b["input_ids"].tolist() for b in blocks]
    [[6, 7, 8, 9, 0], [1, 2, 3, 4, 5]]
    >>> [b["sequence_ids"].tolist() for b in blocks]
    [[2, 2, 2, 2, -1], [0, 0, 0, 1, 1]]
    >>> [b["input_ids"].tolist() for b in stream([{"text": "hi"}], 4, tokenizer="bytes")]
    [[104, 105, 256, 257]]
    """
    chosen = Recipe.at("stream", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    return PackingStream(samples, chosen, buffer_size, shuffle, state)


_NOTHING = Samples(np.zeros(0, np.int32), all_ones(0), np.zeros(1, np.int64))
STATE_FORMAT = "packing.stream/2"
"""The ``format`` entry of a stream's state."""


class PackingStream(Iterator[Block]):
    """The blocks of :func:`stream`, one at a time, and where they stand (``state_dict``).

    The state holds what a resume needs so that nothing is lost or packed twice: the blocks of the current
    buffer not yet yielded (their documents' tokens and masks, and where each piece goes), the documents carried
    into the next buffer, the stream position, the counts of :attr:`stats` (which go on from them), the random
    state, and the source's own position when the source
    can say it (an object with ``state_dict``/``load_state_dict``, such as a ``datasets.IterableDataset``: it is
    restored, not re-read). A source that cannot is iterated again from its start, the rows already read skipped
    unread: pass the same rows. A state saved with another recipe, buffer size or shuffle is refused
    (:class:`~packing.errors.StateMismatch`), and so is one resumed over a source with fewer rows than it had read
    (the data changed); a field no state holds, counts that contradict each other, waiting completions not
    numbered below those read, or waiting samples that are not what the reader makes (units whose kind does not
    match their completions, an empty completion, a trained prompt token, the other layout, unit structure
    missing in a stream that has read pairs or groups or present in one that has not, a random state not of the
    bit generator's form), are refused in one ``SettingError`` line. The state is plain data:
    lists, ints, strings, flags and None (``torch.save`` with ``torch.load(weights_only=True)``, JSON, ``pickle``);
    its size is that of one buffer at most. O(the pending tokens) to save or load.

    >>> rows = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10], [11, 12]]
    >>> blocks = stream(rows, 5, buffer_size=2, shuffle=False)
    >>> first = next(blocks)
    >>> saved = blocks.state_dict()
    >>> rest = [b["sequence_ids"].tolist() for b in stream(rows, 5, buffer_size=2, shuffle=False, state=saved)]
    >>> [first["sequence_ids"].tolist()] + rest == [b["sequence_ids"].tolist() for b in stream(rows, 5, buffer_size=2, shuffle=False)]
    True
    """

    def __init__(
        self, samples: Iterable[Any], recipe: Recipe, buffer_size: int, shuffle: bool, state: dict[str, Any] | None
    ) -> None:
        self.recipe = recipe
        self._prepared = prepare(recipe)  # once: the tokenizer, the pad id and the state's description
        self._pad = check_pad(self._prepared.pad_id, recipe.int64)
        self._unit_planning = unit_planning(recipe)  # pairs and groups: planned whole once fitted
        self.buffer_size = check_integer(buffer_size, "buffer_size")
        check_whole_samples(recipe.strategy)
        self.shuffle = check_flag(shuffle, "shuffle")
        self._samples = samples
        self._rng = np.random.default_rng(recipe.seed or 0)
        self._carried = _NOTHING
        self._carried_ids = np.zeros(0, dtype=np.int64)
        self._position = 0  # rows read from the source
        self._finished = False
        self._source_state: Any = None  # the source's own state after the rows read so far
        self._pending: PackedBatch | None = None  # the current buffer's blocks not yet yielded, in order
        self._yielded = 0  # of them
        self._skip = 0
        self._stats: PackingStats | None = None  # what the buffers planned so far packed and lost
        if state is not None:
            self._load(state)
        self._blocks = self._run()

    def __iter__(self) -> PackingStream:
        return self

    @property
    def stats(self) -> PackingStats:
        """What the stream has packed and lost so far, as ``pack`` counts it: the blocks of the buffers planned
        (yielded or waiting), every sample read, and every token, sequence, pair and group the overflow policy cut
        or left out (``tokens_lost``, ``stats.units``); counted from the stream's start (a resumed stream goes on
        from the counts in its state), without ``block_utilization``. O(1).

        >>> blocks = stream([[1, 2, 3], [4] * 9], 4, overflow="drop", shuffle=False)
        >>> [b["input_ids"].tolist() for b in blocks], blocks.stats.tokens_dropped, blocks.stats.sequences_dropped
        ([[1, 2, 3, 0]], 9, 1)
        """
        return _no_stats(self.recipe.max_seq_length) if self._stats is None else self._stats

    def _completions_read(self) -> int | None:
        """The completions of the pairs and groups read so far (``stats.units.completions``): the number of the
        next one; None before the first pair or group. O(1)."""
        units = None if self._stats is None else self._stats.units
        return None if units is None else units.completions

    def __next__(self) -> Block:
        return next(self._blocks)

    # ------------------------------------------------------------ packing

    def _read_round(self, source: Iterator[Any]) -> tuple[list[Any], bool]:
        rows: list[Any] = []
        room = self.buffer_size - len(self._carried_ids)
        for row in source:
            rows.append(row)
            if len(rows) >= room:
                return rows, False
        return rows, True

    def _source(self) -> Iterator[Any]:
        samples = self._samples
        if self._restores_source():
            try:  # a source such as datasets' takes its state when it starts: its first row says if it could
                samples.load_state_dict(copy.deepcopy(self._source_state))  # type: ignore[attr-defined]
                rows = iter(samples)
                first = list(itertools.islice(rows, 1))
            except (KeyError, TypeError, ValueError, IndexError) as error:  # the source refuses it: not its state
                expected = f"{STATE_WHAT} ('source': the source's own state_dict())"
                raise SettingError("state", expected, f"<{type(error).__name__} from the source>") from None
            return itertools.chain(first, rows)
        return _skipped(iter(samples), self._skip)

    def _run(self) -> Iterator[Block]:
        chosen, capacity = self.recipe, self.recipe.max_seq_length
        yield from self._emit()
        if self._finished:
            return
        source = self._source()
        saves = callable(getattr(self._samples, "state_dict", None))
        while not self._finished:
            rows, self._finished = self._read_round(source)
            if saves:
                self._source_state = copy.deepcopy(self._samples.state_dict())  # type: ignore[attr-defined]
            count = len(rows)
            fresh, fit = _read(rows, self._position, self._completions_read(), chosen, self._prepared)
            del rows  # the rows as given are not held while the buffer is packed
            carried_ids = self._carried_ids
            buffer = _concat([self._carried, fresh])
            self._carried = _NOTHING  # held once, in the buffer, while it is packed
            del fresh
            ids = np.concatenate((carried_ids, np.arange(self._position, self._position + count, dtype=np.int64)))
            was_carried = np.arange(len(ids)) < len(carried_ids)
            self._position += count
            if len(ids) == 0:
                break
            try:
                planning = self._unit_planning if buffer.units is not None else chosen
                blocks = drawn_plan_of(buffer.lengths, planning, self._rng)
            except SequenceTooLong as error:  # overflow="error": named by its position in the stream
                raise error.moved(sample=int(ids[error.sample or 0])) from None
            fill = np.zeros(blocks.num_blocks, dtype=np.int64)
            np.add.at(fill, blocks.piece_block(), blocks.piece_length)
            carry_block = np.zeros(blocks.num_blocks, dtype=bool)
            if not self._finished:
                carry_block = fill < CARRY_BELOW * capacity
                # a document is carried once, and a sample cut in pieces (overflow="split") never: a block holding
                # one of these is emitted
                cut = np.bincount(blocks.piece_sequence, minlength=len(ids)) > 1
                again = np.zeros(blocks.num_blocks, dtype=bool)
                np.logical_or.at(
                    again, blocks.piece_block(), was_carried[blocks.piece_sequence] | cut[blocks.piece_sequence]
                )
                carry_block &= ~again
                carry_block = _capped(carry_block, fill, np.diff(blocks.block_starts), self.buffer_size // 2)
            piece_carry = carry_block[blocks.piece_block()]
            keep_rows = np.unique(blocks.piece_sequence[piece_carry]).astype(np.int64)
            self._carried = buffer.take(keep_rows)
            self._carried_ids = ids[keep_rows]
            emit = np.flatnonzero(~carry_block)
            if self.shuffle:
                emit = self._rng.permutation(emit)
            self._pending = PackedBatch(blocks.select(emit), buffer, self._pad, chosen.int64, ids)
            part = _buffer_stats(blocks, self._pending, fit, chosen)
            self._stats = part if self._stats is None else self._stats.plus(part)
            self._yielded = 0
            del buffer, blocks
            yield from self._emit()

    def _emit(self) -> Iterator[Block]:
        """The pending blocks not yet yielded, a few at a time (memory is the buffer's)."""
        pending = self._pending
        if pending is None:
            return
        capacity = self.recipe.max_seq_length
        order = np.arange(self._yielded, pending.num_blocks)
        for batch in pending.chunks(order, CHUNK_BLOCKS * capacity):
            for b in range(batch.num_blocks):
                self._yielded += 1
                yield block_arrays(batch, b)
        self._pending = None

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands after the blocks yielded so far (see the class): plain lists, ints, strings
        and None. O(pending tokens)."""
        pending = None
        if self._pending is not None and self._yielded < self._pending.num_blocks:
            rest = np.arange(self._yielded, self._pending.num_blocks)
            pending = _pending_state(self._pending, rest)
        return {
            "format": STATE_FORMAT,
            "recipe": self._prepared.description,
            "buffer_size": self.buffer_size,
            "shuffle": self.shuffle,
            "position": self._position,
            "finished": self._finished,
            "rng": copy.deepcopy(self._rng.bit_generator.state),  # a dict of ints and strings
            "source": copy.deepcopy(self._source_state),
            "pending": pending,
            "carried": _samples_state(self._carried, self._carried_ids),
            "stats": None if self._stats is None else self._stats.state(),
        }

    def _load_rng(self, saved: Any) -> None:
        """Take the saved random state: exactly the form of the stream's bit generator's ``state`` (its name,
        the same keys, plain ints), checked before numpy reads it. O(1)."""
        template = self._rng.bit_generator.state
        expected = f"{STATE_WHAT} ('rng': a {template['bit_generator']} bit generator's state of plain ints)"
        if not _same_form(saved, template):
            raise SettingError("state", expected, "<other>")
        try:
            self._rng.bit_generator.state = saved
        except (KeyError, TypeError, ValueError, OverflowError):  # ints numpy cannot take (out of range)
            raise SettingError("state", expected, "<other>") from None

    def _check_units(self) -> None:
        """Refuse waiting samples (pending or carried) with unit structure in a stream that has read no pair or
        group (``stats.units`` None), or without it in one that has (its blocks keep the unit columns); and waiting
        pairs and groups whose completions are not numbered, not below the completions read
        (``stats.units.completions``), or not in the order of the stream, once each: a resumed stream numbers them
        as the uninterrupted one does. O(waiting units log waiting units)."""
        numbered = self._completions_read()
        read = numbered or 0
        pending = None if self._pending is None else self._pending.samples
        pending_ids = None if self._pending is None else self._pending.sequence_names
        ids, firsts, counts = ([np.zeros(0, dtype=np.int64)] for _ in range(3))
        for field, samples, names in (("carried", self._carried, self._carried_ids), ("pending", pending, pending_ids)):
            units = None if samples is None else samples.units
            if samples is not None and (units is None) != (numbered is None):
                has = "with units: the stream has read pairs or groups" if units is None else "without units"
                raise SettingError("state", f"{STATE_WHAT}'s {field} ({has})", "<other>")
            counted = np.zeros(0, dtype=bool) if units is None else units.kind != PLAIN
            if units is None or not counted.any():
                continue
            what = f"{STATE_WHAT}'s {field} units"
            if units.first_completion is None:
                raise SettingError("state", f"{what} (a first_completion per sample)", "<none>")
            last = int((units.first_completion + units.counts)[counted].max()) - 1
            if last >= read:
                raise SettingError("state", f"{what} (completions numbered below the {read:,} read)", last)
            assert names is not None  # a stream's pending blocks name their samples
            ids.append(names[counted])
            firsts.append(units.first_completion[counted])
            counts.append(units.counts[counted])
        _refuse_out_of_order(np.concatenate(ids), np.concatenate(firsts), np.concatenate(counts))

    def _restores_source(self) -> bool:
        """Whether the source is restored from its own saved state (else read again, the rows read skipped)."""
        return self._source_state is not None and callable(getattr(self._samples, "load_state_dict", None))

    def _load(self, state: Any) -> None:
        """Take ``state`` (see :meth:`state_dict`), every field checked against what a state holds: one
        ``SettingError`` line (``StateMismatch`` for a state of another stream, or over a source with fewer rows
        than the state had read). O(the state's size)."""
        check_state_form(state, STATE_FORMAT, STATE_KEYS, STATE_WHAT)
        ours = {"recipe": self._prepared.description, "buffer_size": self.buffer_size, "shuffle": self.shuffle}
        for name, value in ours.items():
            if not isinstance(state[name], type(value)) or state[name] != value:
                if name == "recipe" and isinstance(state[name], str):
                    raise StateMismatch.recipes(value, state[name])  # type: ignore[arg-type]
                raise StateMismatch(name, str(value), quote(state[name]))
        position = state["position"]
        if not is_integer(position) or not 0 <= position <= INT32_MAX + 1:  # no stream reads more: ids are int32
            raise SettingError("state", f"{STATE_WHAT} ('position': rows read, 0..{INT32_MAX + 1:,})", position)
        if not isinstance(state["finished"], bool) or not isinstance(state["source"], (dict, type(None))):
            raise SettingError("state", f"{STATE_WHAT} ('finished' a bool, 'source' a dict or None)", "<other>")
        self._load_rng(state["rng"])
        self._position, self._finished = int(position), state["finished"]
        self._stats = _stats_of(state["stats"], self.recipe, self._position)
        self._source_state = copy.deepcopy(state["source"])
        self._carried, self._carried_ids = _samples_of(state["carried"], "carried", self._position, self.recipe)
        self._pending = (
            None if state["pending"] is None else _pending_of(state["pending"], self.recipe, self._position, self._pad)
        )
        pending = None if self._pending is None else self._pending.sequence_names
        waiting = self._carried_ids if pending is None else np.concatenate((self._carried_ids, pending))
        if len(np.unique(waiting)) != len(waiting):
            raise SettingError("state", f"{STATE_WHAT} (each sample waiting once, pending or carried)", "<twice>")
        self._check_units()
        most = 0 if self._finished else self.buffer_size // 2  # what the stream carries into its next buffer
        if len(self._carried_ids) > most:
            raise SettingError("state", f"{STATE_WHAT} ('carried': at most {most} samples)", len(self._carried_ids))
        self._yielded = 0
        self._skip = self._position
        rows = _rows_in(self._samples)
        if not self._finished and not self._restores_source() and rows is not None and rows < self._position:
            raise _shorter(rows, self._position)


STATE_KEYS = (
    "format",
    "recipe",
    "buffer_size",
    "shuffle",
    "position",
    "finished",
    "rng",
    "source",
    "pending",
    "carried",
    "stats",
)
STATE_WHAT = "a PackingStream.state_dict()"


def _no_stats(max_seq_length: int) -> PackingStats:
    """The statistics of nothing packed (a stream before its first buffer). O(1)."""
    nothing = np.zeros(0, dtype=np.int64)
    return compute_stats(nothing, max_seq_length, np.zeros(1, np.int64), nothing, nothing)


def _stats_of(state: Any, recipe: Recipe, position: int) -> PackingStats | None:
    """The statistics of ``PackingStats.state``, checked (:func:`_refuse_contradictions`). O(1)."""
    if state is None:
        return None
    what = f"{STATE_WHAT}'s stats"
    counts = _counts(state, SUMMED, what)
    units = None if state.get("units") is None else _counts(state["units"], UNIT_SUMMED, f"{what} units")
    _refuse_contradictions(counts, units or dict.fromkeys(UNIT_SUMMED, 0), position, recipe, what)
    return PackingStats.of_state({**counts, "units": units}, recipe.max_seq_length, recipe.share_prompt)


def _refuse_contradictions(c: dict[str, int], u: dict[str, int], position: int, recipe: Recipe, what: str) -> None:
    """Refuse saved counts (``c`` of ``PackingStats``, ``u`` of ``UnitStats``) of which a part is larger than its
    whole: tokens kept and lost beyond those read, sequences, pairs and groups beyond the ``position`` rows read
    (each counted once read, a carried one included), tokens beyond the blocks' slots, ... O(1)."""
    sequences, units, slots = c["num_sequences"], u["pairs"] + u["groups"], c["num_blocks"] * recipe.max_seq_length
    read = f"the {position:,} rows read"
    parts = (  # (a count, its value, the whole it is part of, that whole's value)
        ("tokens packed and lost", c["packed_tokens"] + c["tokens_truncated"] + c["tokens_dropped"], "input_tokens",
         c["input_tokens"]),
        ("num_sequences", sequences, read, position),
        ("sequences cut, dropped and empty", c["sequences_truncated"] + c["sequences_dropped"] + c["empty_sequences"],
         read, position),
        ("sequences_split", c["sequences_split"], "num_sequences", sequences),
        ("samples_without_trainable_tokens", c["samples_without_trainable_tokens"], "num_sequences", sequences),
        ("trainable_tokens", c["trainable_tokens"], "packed_tokens", c["packed_tokens"]),
        ("target_tokens", c["target_tokens"], "trainable_tokens", c["trainable_tokens"]),
        ("packed_tokens", c["packed_tokens"], f"the {slots:,} slots of num_blocks", slots),
        ("pairs and groups", units, read, position),
        ("units cut and dropped", u["units_truncated"] + u["units_dropped"], "pairs and groups", units),
        ("the completions of pairs and groups", 2 * u["pairs"] + u["groups"], "completions", u["completions"]),
        ("completions_truncated", u["completions_truncated"], "completions", u["completions"]),
    )  # fmt: skip
    for part, value, whole, most in parts:
        if value > most:
            raise SettingError("state", f"{what} ({part} at most {whole})", value)


def _counts(state: Any, names: tuple[str, ...], what: str) -> dict[str, int]:
    """The non-negative integers ``names`` of a saved ``state`` dict, else one ``SettingError``. O(names)."""
    if not isinstance(state, dict):
        raise SettingError("state", f"{what} (a dict of counts)", "<other>")
    for name in names:
        value = state.get(name)
        if not is_integer(value) or not 0 <= value <= INT64_MAX:
            raise SettingError("state", f"{what} ('{name}': a non-negative integer)", value)
    return {name: int(state[name]) for name in names}


def _rows_in(samples: Iterable[Any]) -> int | None:
    """The number of rows of a source that says it (a list, a ``datasets.Dataset``), else None. O(1)."""
    try:
        return len(samples)  # type: ignore[arg-type]
    except TypeError:
        return None


def _shorter(rows: int, position: int) -> StateMismatch:
    """A state saved after ``position`` rows, resumed over a source of ``rows`` rows: other data."""
    return StateMismatch("source", f"{rows:,} rows", f"{position:,} rows read when saved")


def _skipped(rows: Iterator[Any], count: int) -> Iterator[Any]:
    """``rows`` after the first ``count``, refused when they end before (another source). O(count)."""
    read = sum(1 for _ in itertools.islice(rows, count))
    if read < count:
        raise _shorter(read, count)
    return rows


def _samples_state(samples: Samples, ids: Int64Array) -> dict[str, Any]:
    """Samples (tokens, loss mask, lengths) and their stream positions ``ids`` as plain lists; the mask None when
    every token is trained. O(tokens)."""
    assert samples.tokens is not None and samples.loss_mask is not None  # checked when read
    mask = samples.loss_mask
    state: dict[str, Any] = {
        "tokens": samples.tokens.tolist(),
        "loss_mask": mask.tolist() if has_masked(mask) else None,
        "lengths": samples.lengths.tolist(),
        "ids": ids.tolist(),
    }
    if samples.units is not None:
        state["units"] = samples.units.state()
    return state


def _refuse_out_of_order(ids: Int64Array, firsts: Int64Array, counts: Int64Array) -> None:
    """Refuse waiting pairs and groups (their stream positions ``ids``, their first completion's number and their
    completions) not numbered in the order of the stream: a later one's completions after every completion of an
    earlier one, so that each number is one completion's. O(n log n).

    >>> _refuse_out_of_order(np.array([9, 2]), np.array([4, 0]), np.array([2, 3]))
    >>> _refuse_out_of_order(np.array([9, 2]), np.array([4, 0]), np.array([2, 5]))
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: state: expected a PackingStream.state_dict()'s waiting units (completions numbered in the order of the stream, once each), got 4
    """
    order = np.argsort(ids, kind="stable")
    starts, ends = firsts[order], (firsts + counts)[order]
    wrong = np.flatnonzero(starts[1:] < ends[:-1])
    if len(wrong):
        what = f"{STATE_WHAT}'s waiting units (completions numbered in the order of the stream, once each)"
        raise SettingError("state", what, int(starts[1:][wrong[0]]))


def _same_form(value: Any, template: Any) -> bool:
    """Whether ``value`` has the form of ``template`` (a numpy bit generator's state): dicts of the same keys,
    the same strings, plain ints (not bools, numpy scalars or arrays) where it has ints. O(size).

    >>> _same_form({"a": 1, "b": "x"}, {"a": 5, "b": "x"}), _same_form({"a": np.int64(1), "b": "x"}, {"a": 5, "b": "x"})
    (True, False)
    """
    if isinstance(template, dict):
        return (
            isinstance(value, dict)
            and value.keys() == template.keys()
            and all(_same_form(value[key], template[key]) for key in template)
        )
    if isinstance(template, str):
        return isinstance(value, str) and value == template
    return type(value) is int and type(template) is int


def _samples_of(state: Any, field: str, position: int, recipe: Recipe) -> tuple[Samples, Int64Array]:
    """The samples of :func:`_samples_state` (lists, or the arrays of earlier states), checked: lengths summing
    to the tokens, a 0/1 mask as long, one distinct stream position below ``position`` each, units in the
    recipe's layout (``Units.of_state``) whose prompts are not trained. O(tokens)."""
    if not isinstance(state, dict):
        raise SettingError("state", f"{STATE_WHAT} ('{field}': a dict of tokens, loss_mask, lengths, ids)", "<other>")
    what = f"{STATE_WHAT}'s {field}"
    tokens = integer_list(state.get("tokens"), "state", f"{what} tokens")
    total = len(tokens)
    lengths = integer_list(state.get("lengths"), "state", f"{what} lengths", 0, total)
    ids = integer_list(state.get("ids"), "state", f"{what} ids", 0, position - 1)
    if int(lengths.sum()) != total or len(ids) != len(lengths):
        raise SettingError("state", f"{what} (lengths summing to its {total} tokens, one id each)", "<other counts>")
    if state.get("loss_mask") is None:
        mask = all_ones(total)
    else:
        mask = integer_list(state["loss_mask"], "state", f"{what} loss_mask", 0, 1).astype(np.int8)
        if len(mask) != total:
            raise SettingError("state", f"{what} (a loss_mask of its {total} tokens)", f"<{len(mask)} values>")
        if mask.all():
            mask = all_ones(total)
    units = None
    if state.get("units") is not None:
        units = Units.of_state(state["units"], lengths, f"{what} units", recipe.share_prompt)
        if mask[units.roles() == 0].any():  # the reader never trains a prompt
            raise SettingError("state", f"{what} (a loss_mask of 0 on every prompt token)", "<a trained prompt>")
    fits = total == 0 or int(tokens.max()) <= np.iinfo(np.int32).max  # as the reader keeps them
    samples = Samples(tokens.astype(np.int32) if fits else tokens, mask, offsets_of(lengths), None, units)
    return samples, ids


def _pending_state(pending: PackedBatch, blocks: Int64Array) -> dict[str, Any]:
    """Blocks ``blocks`` of ``pending``: their documents (only the samples they hold) and pieces, as lists."""
    plan = pending.plan.select(blocks)
    used, sequence = np.unique(plan.piece_sequence, return_inverse=True)
    names = pending.sequence_names
    ids = names[used] if names is not None else used.astype(np.int64)
    state = _samples_state(pending.samples.take(used.astype(np.int64)), ids)
    state.update(
        block_starts=plan.block_starts.tolist(),
        piece_sequence=sequence.tolist(),
        piece_start=plan.piece_start.tolist(),
        piece_length=plan.piece_length.tolist(),
    )
    return state


def _pending_of(state: Any, recipe: Recipe, position: int, pad: int) -> PackedBatch:
    """The pending blocks of :func:`_pending_state`, checked as a plan of its samples (``check_pieces``) before
    anything reads them. O(tokens + pieces)."""
    samples, ids = _samples_of(state, "pending", position, recipe)
    what = f"{STATE_WHAT}'s pending"
    starts = integer_list(state.get("block_starts"), "state", f"{what} block_starts")
    sequence, first, length = (
        integer_list(state.get(k), "state", f"{what} {k}", 0, INT32_MAX).astype(np.int32)
        for k in ("piece_sequence", "piece_start", "piece_length")
    )
    overflow = (recipe if samples.units is None else unit_planning(recipe)).overflow
    unchecked = _no_stats(recipe.max_seq_length)  # until the plan has checked its pieces (blocks, sequences, room)
    try:
        plan = PackingPlan(
            recipe.max_seq_length,
            recipe.strategy,
            overflow,
            samples.lengths,
            starts,
            sequence,
            first,
            length,
            unchecked,
        )
        stats = compute_stats(samples.lengths, recipe.max_seq_length, starts, sequence, length)
        checked = replace(plan, stats=stats, _trusted=True)
        return PackedBatch.of(checked, samples, pad_token_id=pad, int64=recipe.int64, sequence_names=ids)
    except SettingError as error:  # the plan's or the blocks' own check, said of the state
        got = error.got if error.got.startswith("<") else f"<{error.got}>"
        raise SettingError("state", f"{what} blocks ({error.expected})", got) from None


def _dataset_blocks(dataset: Any, settings: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The blocks of ``stream`` as rows of real tokens only (``sum(seq_lengths)`` values), as ``packing.hf``
    writes them: what TRL's padding-free collator reads."""
    blocks = PackingStream(dataset, **settings)
    for block in blocks:
        used = int(block["seq_lengths"].sum())
        yield {name: (values if name == "seq_lengths" else values[:used]).tolist() for name, values in block.items()}
    blocks.stats.warn_lost("stream_dataset")


def stream_dataset(
    dataset: Any,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    buffer_size: int = 10_000,
    shuffle: bool = True,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Any:
    """A Hugging Face ``datasets.IterableDataset`` of packed blocks from an iterable dataset (or any iterable of
    rows ``stream`` reads; other columns are ignored). The options are ``stream``'s, checked now; the columns
    the packed schema's (and the unit columns when the first row is a pair or group: a dataset of them), each row holding its block's real tokens only (``sum(seq_lengths)`` values), as
    ``packing.hf`` and TRL's ``pack_dataset`` write them. Lazy: nothing is read until iterated; once every row is
    read, what the overflow policy cut or left out is warned of (:class:`~packing.errors.TokensLost`, with the
    stream's ``stats``). Resumed by ``datasets`` (the dataset's ``state_dict``), it packs the stream again from its
    start and skips the rows given: the same rows (``completion_ids`` too) and the whole stream's counts.

    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]]}).to_iterable_dataset()
    >>> [b["input_ids"] for b in stream_dataset(rows, 4, shuffle=False)]
    [[3, 4, 5, 6], [1, 2]]
    """
    try:
        import datasets
    except ImportError as error:  # pragma: no cover - exercised only without datasets
        raise ImportError("stream_dataset needs Hugging Face datasets: pip install datasets") from error
    chosen = Recipe.at("stream", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    settings: dict[str, Any] = {"recipe": chosen, "buffer_size": buffer_size, "shuffle": shuffle, "state": None}
    next(PackingStream([], **settings), None)  # the settings, now
    # pairs and groups add their columns: the dataset's columns (a pair's fields among them, null in plain rows) or
    # its first row say whether they come
    first = next(iter(dataset), None)
    names = set(getattr(dataset, "column_names", None) or ())
    units = unit_kind(first) is not None or bool(names & set(UNIT_FIELDS))
    return datasets.IterableDataset.from_generator(
        _dataset_blocks,
        features=datasets_features(chosen.int64, units=units),
        gen_kwargs={"dataset": dataset, "settings": settings},
    )
