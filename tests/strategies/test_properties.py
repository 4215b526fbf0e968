"""Property tests: every strategy under every overflow policy, on random samples of every form.

The checks never trust the library's own bookkeeping: documents are found again
from ``sequence_ids`` and ``position_ids`` alone, each sample is rebuilt from
the blocks and compared with its input tokens and loss mask, and every
statistic is recounted from the inputs.
"""

from __future__ import annotations

import copy
import itertools
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.reading
import packing.recipe
import packing.strategies
from packing.strategies import _reference as reference
from packing.strategies._reference import documents as reference_documents
from packing.strategies._registry import STRATEGIES, assign_blocks

STRATEGY_NAMES = list(packing.strategies.STRATEGIES)
OVERFLOW_NAMES = [p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"]
NO_SPLIT = [name for name, strategy in packing.strategies.STRATEGIES.items() if not strategy.splits_sequences]
BOUNDED = [name for name, strategy in packing.strategies.STRATEGIES.items() if strategy.keeps_boundaries]
"""Every strategy but ``wrapped``, which keeps no boundaries on purpose (its own properties: tests/strategies)."""
IGNORE = -100


def test_the_registries_name_every_strategy_and_policy() -> None:
    assert set(STRATEGY_NAMES) == {
        "split",
        "wrapped",
        "next_fit",
        "first_fit",
        "first_fit_shuffle",
        "ffd",
        "bfd",
        "spfhp",
        "optimal",
        "none",
    }
    assert set(OVERFLOW_NAMES) == {"truncate", "split", "drop"}  # the policies that make documents
    assert set(packing.recipe.OVERFLOW_POLICIES) == {
        *OVERFLOW_NAMES,
        "error",
    }  # and the one that refuses (tests/strategies)
    assert [name for name in STRATEGY_NAMES if packing.strategies.STRATEGIES[name].splits_sequences] == [
        "split",
        "wrapped",
    ]
    assert [name for name in STRATEGY_NAMES if not packing.strategies.STRATEGIES[name].keeps_boundaries] == ["wrapped"]
    assert set(typing.get_args(packing.StrategyName)) == set(STRATEGY_NAMES)
    assert set(typing.get_args(packing.OverflowPolicy)) == set(packing.recipe.OVERFLOW_POLICIES)
    for name, entry in packing.strategies.STRATEGIES.items():
        assert entry.name == name
        assert entry.order in ("input", "longest_first", "random")
        assert entry.bound == ("simple" if entry.splits_sequences else "l2")
        assert (entry.blocks is None) == entry.splits_sequences


# ---------------------------------------------------------------------------------------------------------------
# Random samples, each with the tokens and loss mask it stands for
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Case:
    samples: list[Any]
    tokens: list[list[int]]  # what each sample means: its tokens ...
    masks: list[list[int]]  # ... and its loss mask
    max_seq_length: int
    completion_only_loss: bool
    pad_token_id: int


TOKEN = st.integers(min_value=0, max_value=60_000)


@st.composite
def one_sample(draw: st.DrawFn, max_tokens: int, completion_only_loss: bool) -> tuple[Any, list[int], list[int]]:
    tokens = draw(st.lists(TOKEN, max_size=max_tokens))
    form = draw(st.sampled_from(["list", "tuple", "array", "prompt_completion", "masked", "unmasked_dict", "chat"]))
    ones = [1] * len(tokens)
    if form == "list":
        return list(tokens), tokens, ones
    if form == "tuple":
        return tuple(tokens), tokens, ones
    if form == "array":
        dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16]))
        return np.array(tokens, dtype=dtype), tokens, ones
    if form == "prompt_completion":
        cut = draw(st.integers(min_value=0, max_value=len(tokens)))
        prompt_mask = [0 if completion_only_loss else 1] * cut
        return {"prompt": tokens[:cut], "completion": tokens[cut:]}, tokens, prompt_mask + ones[cut:]
    if form == "masked":
        mask = draw(st.lists(st.integers(min_value=0, max_value=1), min_size=len(tokens), max_size=len(tokens)))
        as_bools = draw(st.booleans())
        given_mask: list[Any] = [bool(m) for m in mask] if as_bools else list(mask)
        return {"input_ids": list(tokens), "loss_mask": given_mask}, tokens, mask
    if form == "unmasked_dict":
        return {"input_ids": list(tokens)}, tokens, ones
    # chat: cut the tokens into turns with random roles
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(tokens)), max_size=3)))
    bounds = [0, *cuts, len(tokens)]
    turns, mask = [], []
    for lo, hi in itertools.pairwise(bounds):
        role = draw(st.sampled_from(["system", "user", "assistant"]))
        turns.append((role, tokens[lo:hi]))
        mask += [int(role == "assistant")] * (hi - lo)
    return packing.reading.chat_sample(turns), tokens, mask


@st.composite
def cases(draw: st.DrawFn, max_samples: int = 8, max_seq_length: int = 10) -> Case:
    capacity = draw(st.integers(min_value=1, max_value=max_seq_length))
    completion_only_loss = draw(st.booleans())
    # up to a bit over two blocks per sample, so every overflow policy has work to do
    drawn = draw(st.lists(one_sample(2 * capacity + 2, completion_only_loss), max_size=max_samples))
    pad = draw(st.sampled_from([0, 0, 7, 60_001]))
    return Case(
        [s for s, _, _ in drawn],
        [t for _, t, _ in drawn],
        [m for _, _, m in drawn],
        capacity,
        completion_only_loss,
        pad,
    )


def kept_prefix(length: int, capacity: int, overflow: str) -> int:
    """How many leading tokens of a sequence of ``length`` tokens a policy keeps."""
    if overflow == "truncate":
        return min(length, capacity)
    if overflow == "drop":
        return length if length <= capacity else 0
    return length


def assert_unchanged(before: Any, after: Any) -> None:
    """Deep equality that also compares numpy arrays by dtype and content."""
    assert type(before) is type(after)
    if isinstance(before, np.ndarray):
        assert before.dtype == after.dtype
        assert np.array_equal(before, after)
    elif isinstance(before, dict):
        assert before.keys() == after.keys()
        for key in before:
            assert_unchanged(before[key], after[key])
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after)
        for a, b in zip(before, after, strict=True):
            assert_unchanged(a, b)
    else:
        assert before == after


def pack_case(case: Case, strategy: str, overflow: str, **options: Any) -> packing.PackedBatch:
    return packing.pack(
        case.samples,
        case.max_seq_length,
        strategy=strategy,
        overflow=overflow,
        pad_token_id=case.pad_token_id,
        loss="completion" if case.completion_only_loss else "all",
        **options,
    )


# ---------------------------------------------------------------------------------------------------------------
# Finding documents again from sequence ids and position ids only
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Fragment:
    sample: int
    block: int
    start: int  # position in the block
    tokens: list[int]
    mask: list[int]
    labels: list[int]


def fragments(batch: packing.PackedBatch) -> list[Fragment]:
    """Every run of one document, in block order: a new one starts where the sample changes or position is 0."""
    found: list[Fragment] = []
    for b in range(batch.num_blocks):
        sids = batch.sequence_ids[b].tolist()
        positions = batch.position_ids[b].tolist()
        real = sum(1 for s in sids if s >= 0)
        starts = [i for i in range(real) if i == 0 or sids[i] != sids[i - 1] or positions[i] == 0]
        for lo, hi in zip(starts, [*starts[1:], real], strict=True):
            assert positions[lo:hi] == list(range(hi - lo)), f"block {b}: positions do not restart per document"
            found.append(
                Fragment(
                    sids[lo],
                    b,
                    lo,
                    batch.input_ids[b, lo:hi].tolist(),
                    batch.loss_mask[b, lo:hi].tolist(),
                    batch.labels[b, lo:hi].tolist(),
                )
            )
    return found


def check_blocks(batch: packing.PackedBatch, case: Case) -> None:
    """Shapes, padding, loss mask and labels of every block."""
    capacity, pad = case.max_seq_length, case.pad_token_id
    arrays = (batch.input_ids, batch.labels, batch.loss_mask, batch.position_ids, batch.sequence_ids)
    for array in arrays:
        assert array.shape == (batch.num_blocks, capacity)
        assert array.dtype.kind in "iu"
    assert set(np.unique(batch.loss_mask).tolist()) <= {0, 1}
    for b in range(batch.num_blocks):
        sids = batch.sequence_ids[b]
        real = int((sids >= 0).sum())
        assert real >= 1, "a block with no tokens"
        assert (sids[:real] >= 0).all() and (sids[real:] == -1).all(), "padding must follow the tokens"
        assert (sids[:real] < len(case.samples)).all()
        assert (batch.input_ids[b, real:] == pad).all()
        assert (batch.loss_mask[b, real:] == 0).all()
        assert (batch.labels[b, real:] == IGNORE).all()
        assert (batch.position_ids[b, real:] == 0).all()
    lists = batch.to_lists()
    assert lists == (batch.input_ids.tolist(), batch.loss_mask.tolist())
    assert all(len(row) == capacity for rows in lists for row in rows)


def check_documents(batch: packing.PackedBatch, case: Case, strategy: str, overflow: str) -> list[Fragment]:
    """Rebuild every sample from the blocks; compare with what it should keep. Check labels and seq lengths."""
    capacity = case.max_seq_length
    found = fragments(batch)
    for b in range(batch.num_blocks):
        lengths = [len(f.tokens) for f in found if f.block == b]
        assert batch.seq_lengths(b).tolist() == lengths
        assert batch.cu_seqlens(b).tolist() == np.concatenate(([0], np.cumsum(lengths))).astype(int).tolist()
    for f in found:
        # no loss where the mask is 0, and none on the first token of a document
        expected_labels = [t if m == 1 else IGNORE for t, m in zip(f.tokens, f.mask, strict=True)]
        expected_labels[0] = IGNORE
        assert f.labels == expected_labels
    for index, (tokens, mask) in enumerate(zip(case.tokens, case.masks, strict=True)):
        keep = kept_prefix(len(tokens), capacity, overflow)
        pieces = [f for f in found if f.sample == index]
        if strategy == "split":
            # in input order: the pieces, read block after block, are exactly the kept tokens
            assert [t for f in pieces for t in f.tokens] == tokens[:keep]
            assert [m for f in pieces for m in f.mask] == mask[:keep]
        elif overflow == "split":
            # every piece of max_seq_length tokens (and the rest) is one whole document, somewhere
            chunks = [(tokens[i : i + capacity], mask[i : i + capacity]) for i in range(0, len(tokens), capacity)]
            assert sorted((f.tokens, f.mask) for f in pieces) == sorted(chunks)
        else:
            # no-split strategy: the kept tokens are one contiguous document in exactly one block
            assert len(pieces) == (1 if keep else 0)
            if keep:
                assert (pieces[0].tokens, pieces[0].mask) == (tokens[:keep], mask[:keep])
    return found


def check_stats(batch: packing.PackedBatch, case: Case, overflow: str, found: list[Fragment]) -> None:
    """Every statistic, recounted from the inputs and the rebuilt documents."""
    capacity, stats = case.max_seq_length, batch.stats
    lengths = [len(t) for t in case.tokens]
    kept = [kept_prefix(n, capacity, overflow) for n in lengths]
    packed = sum(kept)
    real_tokens = int((batch.sequence_ids >= 0).sum())
    assert real_tokens == packed
    assert stats.num_sequences == len(lengths)
    assert stats.empty_sequences == lengths.count(0)
    assert stats.num_blocks == batch.num_blocks
    assert stats.input_tokens == sum(lengths)
    assert stats.packed_tokens == packed
    assert stats.tokens_lost == sum(lengths) - real_tokens
    assert stats.lower_bound == -(-packed // capacity)
    assert stats.padding_tokens == batch.num_blocks * capacity - packed
    if batch.num_blocks:
        assert stats.efficiency == pytest.approx(packed / (batch.num_blocks * capacity))
    over = [n for n in lengths if n > capacity]
    assert stats.tokens_truncated == (sum(n - capacity for n in over) if overflow == "truncate" else 0)
    assert stats.sequences_truncated == (len(over) if overflow == "truncate" else 0)
    assert stats.tokens_dropped == (sum(over) if overflow == "drop" else 0)
    assert stats.sequences_dropped == (len(over) if overflow == "drop" else 0)
    pieces_per_sample = [sum(1 for f in found if f.sample == i) for i in range(len(lengths))]
    assert stats.sequences_split == sum(1 for p in pieces_per_sample if p > 1)
    kept_masks = [mask[:k] for mask, k in zip(case.masks, kept, strict=True)]
    assert stats.trainable_tokens == sum(map(sum, kept_masks)) == int(batch.loss_mask.sum())
    # a target is a trainable token that is not the first of its document piece (labels != -100)
    targets = [sum(sum(f.mask[1:]) for f in found if f.sample == i) for i in range(len(lengths))]
    assert stats.target_tokens == sum(targets) == int((batch.labels != packing.core.IGNORE_INDEX).sum())
    assert stats.samples_without_trainable_tokens == sum(
        1 for m, t in zip(kept_masks, targets, strict=True) if m and t == 0
    )
    utilization = [sum(len(f.tokens) for f in found if f.block == b) / capacity for b in range(batch.num_blocks)]
    assert np.allclose(stats.block_utilization, utilization)


def check_strategy_shape(batch: packing.PackedBatch, case: Case, strategy: str, found: list[Fragment]) -> None:
    capacity, packed = case.max_seq_length, batch.stats.packed_tokens
    if strategy == "split":
        assert batch.num_blocks == -(-packed // capacity)
        assert all(batch.seq_lengths(b).sum() == capacity for b in range(batch.num_blocks - 1))
    if strategy == "none":
        assert all(len(batch.seq_lengths(b)) == 1 for b in range(batch.num_blocks))
        assert batch.num_blocks == len(found)


def small_enough(strategy: str) -> st.SearchStrategy[Case]:
    # optimal is exponential: at most 6 sequences of at most 4 documents each
    return cases(max_samples=8 if strategy != "optimal" else 6)


# ---------------------------------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@pytest.mark.parametrize("strategy", BOUNDED)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_pack_keeps_every_token_once_with_correct_masks_labels_positions_and_stats(
    strategy: str, overflow: str, data: st.DataObject
) -> None:
    case = data.draw(small_enough(strategy))
    before = copy.deepcopy(case.samples)
    batch = pack_case(case, strategy, overflow)
    assert_unchanged(before, case.samples)
    check_blocks(batch, case)
    found = check_documents(batch, case, strategy, overflow)
    check_stats(batch, case, overflow, found)
    check_strategy_shape(batch, case, strategy, found)


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@pytest.mark.parametrize("strategy", BOUNDED)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_attention_mask_is_block_diagonal_causal(strategy: str, overflow: str, data: st.DataObject) -> None:
    case = data.draw(small_enough(strategy))
    batch = pack_case(case, strategy, overflow)
    capacity = case.max_seq_length
    q = np.arange(capacity)[:, None]
    k = np.arange(capacity)[None, :]
    for b in range(batch.num_blocks):
        sids, positions = batch.sequence_ids[b], batch.position_ids[b]
        # q may see k when both are tokens of the same document and k is not later: same sample, k <= q,
        # and no restart of the positions between them
        expected = (
            (sids[:, None] >= 0)
            & (sids[:, None] == sids[None, :])
            & (k <= q)
            & (positions[:, None] - positions[None, :] == q - k)
        )
        mask = batch.attention_mask(b)
        assert mask.shape == (capacity, capacity)
        assert mask.dtype == np.bool_
        assert np.array_equal(mask, expected)


@pytest.mark.slow
@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@settings(max_examples=100, deadline=None)
@given(data=st.data(), cap=st.integers(min_value=1, max_value=4))
def test_spfhp_never_puts_more_than_max_sequences_per_block_into_a_block(
    overflow: str, cap: int, data: st.DataObject
) -> None:
    case = data.draw(cases())
    batch = pack_case(case, "spfhp", overflow, max_sequences_per_block=cap)
    check_blocks(batch, case)
    found = check_documents(batch, case, "spfhp", overflow)
    check_stats(batch, case, overflow, found)
    for b in range(batch.num_blocks):
        assert 1 <= len(batch.seq_lengths(b)) <= cap
        assert sum(1 for f in found if f.block == b) <= cap


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@pytest.mark.parametrize("strategy", BOUNDED)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=16))
def test_plan_pieces_cover_exactly_the_kept_tokens(
    strategy: str, overflow: str, capacity: int, data: st.DataObject
) -> None:
    if strategy == "optimal":  # at most 8 sequences of at most three documents each
        lengths = data.draw(st.lists(st.integers(min_value=0, max_value=3 * capacity), max_size=8))
    else:
        lengths = data.draw(st.lists(st.integers(min_value=0, max_value=40), max_size=30))
    docs = reference_documents(lengths, capacity, overflow)
    before = list(lengths)
    layout = packing.plan(lengths, capacity, strategy=strategy, overflow=overflow)
    assert lengths == before
    starts = layout.block_starts.tolist()
    assert starts[0] == 0 and starts[-1] == len(layout.piece_length)
    assert all(lo < hi for lo, hi in itertools.pairwise(starts)), "every block holds a piece"
    blocks = layout.blocks()
    assert len(blocks) == layout.num_blocks == layout.stats.num_blocks
    for b, pieces in enumerate(blocks):
        assert sum(p.length for p in pieces) <= capacity
        assert all(p.length >= 1 for p in pieces)
        assert layout.seq_lengths(b).tolist() == [p.length for p in pieces]
        assert layout.cu_seqlens(b).tolist() == np.concatenate(([0], np.cumsum([p.length for p in pieces]))).tolist()
    assert layout.piece_block().tolist() == [b for b, pieces in enumerate(blocks) for _ in pieces]
    assert layout.piece_position().tolist() == [
        sum(p.length for p in pieces[:i]) for pieces in blocks for i in range(len(pieces))
    ]
    if strategy == "split":
        # read block after block, the pieces are the documents in input order, cut only at block boundaries
        assert layout.num_blocks == -(-sum(n for _, _, n in docs) // capacity)
        merged: list[tuple[int, int, int]] = []
        ends_block = False
        for pieces in blocks:
            position = 0
            for i, p in enumerate(pieces):
                continues = merged and merged[-1][0] == p.sequence and merged[-1][1] + merged[-1][2] == p.start
                if continues and p.start % capacity:  # the rest of a document cut at the end of the last block
                    assert ends_block and i == 0
                    merged[-1] = (p.sequence, merged[-1][1], merged[-1][2] + p.length)
                else:
                    merged.append((p.sequence, p.start, p.length))
                position += p.length
            ends_block = position == capacity
        assert merged == docs
    else:
        # no-split: every document is exactly one piece
        assert sorted((p.sequence, p.start, p.length) for p in (p for pieces in blocks for p in pieces)) == docs


REFERENCED = [name for name, entry in STRATEGIES.items() if entry.reference is not None]
"""The strategies with a plain-Python version in their registry entry."""


def _reference(strategy: str) -> Callable[[Sequence[int], int], list[int]]:
    function = STRATEGIES[strategy].reference
    assert function is not None
    return function


def test_the_referenced_strategies() -> None:
    assert REFERENCED == ["next_fit", "first_fit", "ffd", "bfd", "none"]


@pytest.mark.parametrize("strategy", REFERENCED)
@settings(max_examples=200, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=64))
def test_fast_strategy_equals_the_reference_implementation(strategy: str, capacity: int, data: st.DataObject) -> None:
    lengths = data.draw(st.lists(st.integers(min_value=1, max_value=capacity), max_size=60))
    blocks, order = assign_blocks(strategy, np.array(lengths, dtype=np.int64), capacity)
    assert blocks.tolist() == _reference(strategy)(lengths, capacity)
    expected_order = reference.longest_first(lengths) if strategy in ("ffd", "bfd") else list(range(len(lengths)))
    assert order.tolist() == expected_order


def reference_blocks(strategy: str, lengths: list[int], capacity: int) -> list[list[int]]:
    """The sequences in each block, in placement order, as the plain-Python reference packs the truncated lengths."""
    sequences = [i for i, n in enumerate(lengths) if n > 0]
    docs = [min(lengths[i], capacity) for i in sequences]
    assigned = _reference(strategy)(docs, capacity)
    placement = reference.longest_first(docs) if strategy in ("ffd", "bfd") else range(len(docs))
    blocks: list[list[int]] = [[] for _ in range(max(assigned, default=-1) + 1)]
    for item in placement:
        blocks[assigned[item]].append(sequences[item])
    return blocks


@pytest.mark.parametrize("strategy", REFERENCED)
def test_fast_strategy_equals_the_reference_on_larger_inputs(strategy: str) -> None:
    rng = np.random.default_rng(20240611)
    for capacity in (7, 128, 2048):
        skewed = np.minimum(rng.geometric(4 / capacity, size=600), capacity)
        uniform = rng.integers(1, capacity + 1, size=600)
        few_lengths = rng.choice([1, capacity // 3 + 1, capacity // 2 + 1, capacity], size=600)
        for lengths in (skewed, uniform, few_lengths):
            blocks, _ = assign_blocks(strategy, lengths.astype(np.int64), capacity)
            assert blocks.tolist() == _reference(strategy)(lengths.tolist(), capacity)
        with_overflow = rng.integers(0, 2 * capacity, size=600)  # empty and over-long sequences too
        for lengths in (uniform, few_lengths, with_overflow):
            layout = packing.plan(lengths, capacity, strategy=strategy)
            assert [[p.sequence for p in pieces] for pieces in layout.blocks()] == reference_blocks(
                strategy, lengths.tolist(), capacity
            )


@pytest.mark.parametrize("strategy", REFERENCED)
@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=20))
def test_plan_groups_documents_as_the_reference_assigns_them(strategy: str, capacity: int, data: st.DataObject) -> None:
    # lengths 1..capacity take the path where every sequence is one document; 0 and over-long ones the other
    top = data.draw(st.sampled_from([capacity, 2 * capacity]))
    lengths = data.draw(st.lists(st.integers(min_value=0 if top > capacity else 1, max_value=top), max_size=25))
    layout = packing.plan(lengths, capacity, strategy=strategy)
    assert [[p.sequence for p in pieces] for pieces in layout.blocks()] == reference_blocks(strategy, lengths, capacity)


@pytest.mark.parametrize("overflow", OVERFLOW_NAMES)
@pytest.mark.parametrize("strategy", NO_SPLIT)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=12))
def test_blocks_are_numbered_by_opening_and_hold_documents_in_placement_order(
    strategy: str, overflow: str, capacity: int, data: st.DataObject
) -> None:
    lengths = data.draw(st.lists(st.integers(min_value=0, max_value=2 * capacity), max_size=8))
    blocks = packing.plan(lengths, capacity, strategy=strategy, overflow=overflow).blocks()

    order = packing.strategies.STRATEGIES[strategy].order
    docs = reference_documents(lengths, capacity, overflow)
    # first_fit_shuffle places documents in the order of a permutation drawn from its seed (0 by default)
    shuffled = np.random.default_rng(0).permutation(len(docs)).tolist()
    drawn_at = {(docs[d][0], docs[d][1]): rank for rank, d in enumerate(shuffled)}

    def placed(piece: packing.Piece) -> tuple[int, ...]:
        """When a document is placed: input order, longest first with ties in input order, or shuffled."""
        if order == "input":
            return (piece.sequence, piece.start)
        if order == "random":
            return (drawn_at[piece.sequence, piece.start],)
        return (-piece.length, piece.sequence, piece.start)

    for pieces in blocks:
        assert [placed(p) for p in pieces] == sorted(placed(p) for p in pieces)
    firsts = [placed(pieces[0]) for pieces in blocks]
    assert firsts == sorted(firsts)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=16), max_size=40),
    capacity=st.integers(min_value=16, max_value=24),
    cap=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
)
def test_spfhp_makes_the_packs_of_the_published_algorithm(lengths: list[int], capacity: int, cap: int | None) -> None:
    layout = packing.plan(lengths, capacity, strategy="spfhp", max_sequences_per_block=cap)
    packs = [[p.length for p in block] for block in layout.blocks()]
    assert sorted(packs, key=lambda p: (-sum(p), p)) == reference.shortest_pack_first(lengths, capacity, cap)
