"""Packed batches: the arrays a trainer consumes, checked on small hand-worked examples."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packing
import packing.batches
import packing.strategies
from packing import SettingError, materialize, pack, plan, read_rows
from packing.core import IGNORE_INDEX
from packing.reading import chat_sample

X = IGNORE_INDEX


def test_ignore_index_is_the_hugging_face_value() -> None:
    assert IGNORE_INDEX == -100


def test_plain_and_prompt_completion_samples() -> None:
    # [1, 2] then prompt [3] + completion [4, 5], blocks of 4: the completion is cut after the 4.
    batch = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4, strategy="split")
    assert batch.num_blocks == 2
    assert batch.max_seq_length == 4
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [5, 0, 0, 0]]
    assert batch.loss_mask.tolist() == [[1, 1, 0, 1], [1, 0, 0, 0]]
    # first token of every document (1, 3, and 5 which starts block 1) has no label; 3 is a prompt token
    assert batch.labels.tolist() == [[X, 2, X, 4], [X, X, X, X]]
    assert batch.position_ids.tolist() == [[0, 1, 0, 1], [0, 0, 0, 0]]
    assert batch.sequence_ids.tolist() == [[0, 0, 1, 1], [1, -1, -1, -1]]
    assert batch.seq_lengths(0).tolist() == [2, 2]
    assert batch.seq_lengths(1).tolist() == [1]
    assert batch.cu_seqlens(0).tolist() == [0, 2, 4]
    assert batch.cu_seqlens(1).tolist() == [0, 1]
    assert batch.stats.trainable_tokens == 4
    assert batch.stats.samples_without_trainable_tokens == 0


def test_loss_all_trains_on_the_prompt_too() -> None:
    batch = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4, strategy="split", loss="all")
    assert batch.loss_mask.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    assert batch.labels.tolist() == [[X, 2, X, 4], [X, X, X, X]]
    assert batch.stats.trainable_tokens == 5


def test_classic_example_through_pack() -> None:
    batch = pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    assert batch.to_lists() == ([[1, 2, 3, 4], [5, 6, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]])
    assert batch.labels.tolist() == [[X, 2, X, 4], [X, X, X, X]]
    assert batch.position_ids.tolist() == [[0, 1, 0, 1], [0, 0, 0, 0]]
    assert batch.sequence_ids.tolist() == [[0, 0, 1, 1], [1, 2, -1, -1]]


def test_to_lists_gives_plain_ints() -> None:
    blocks, masks = pack([[1, 2], [3]], 2, strategy="split").to_lists()
    assert (blocks, masks) == ([[1, 2], [3, 0]], [[1, 1], [1, 0]])
    assert all(type(v) is int for rows in (blocks, masks) for row in rows for v in row)


def test_first_fit_decreasing_reorders_documents() -> None:
    # ffd on lengths [2, 3, 1] into 4: 3 (seq 1) opens b0, 2 (seq 0) opens b1, 1 (seq 2) fits b0
    batch = pack([[1, 2], [3, 4, 5], [6]], 4, strategy="ffd")
    assert batch.input_ids.tolist() == [[3, 4, 5, 6], [1, 2, 0, 0]]
    assert batch.sequence_ids.tolist() == [[1, 1, 1, 2], [0, 0, -1, -1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]
    assert batch.labels.tolist() == [[X, 4, 5, X], [X, 2, X, X]]


def test_pad_token_id_fills_padding_but_not_the_masks() -> None:
    batch = pack([[1, 2], [3]], 2, strategy="split", pad_token_id=9)
    assert batch.pad_token_id == 9
    assert batch.input_ids.tolist() == [[1, 2], [3, 9]]
    assert batch.loss_mask.tolist() == [[1, 1], [1, 0]]
    assert batch.labels.tolist() == [[X, 2], [X, X]]
    assert batch.sequence_ids.tolist() == [[0, 0], [1, -1]]


def test_masked_samples_and_chat_samples() -> None:
    chat = chat_sample([("user", [1, 2]), ("assistant", [3, 4])])
    assert chat == {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}
    batch = pack([chat, {"input_ids": [5, 6], "loss_mask": [1, 0]}], 5, strategy="split")
    # stream [1, 2, 3, 4, 5 | 6]: sample 1 is cut after its first token, so 6 starts a piece and has no label
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [6, 0, 0, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]]
    assert batch.labels.tolist() == [[X, X, 3, 4, X], [X, X, X, X, X]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 0], [0, 0, 0, 0, 0]]
    assert batch.sequence_ids.tolist() == [[0, 0, 0, 0, 1], [1, -1, -1, -1, -1]]
    assert batch.stats.trainable_tokens == 3


def test_numpy_arrays_and_masks_given_as_booleans() -> None:
    samples = [np.array([7, 8], dtype=np.int32), {"input_ids": np.array([9, 10]), "loss_mask": [True, False]}]
    batch = pack(samples, 4, strategy="split")
    assert batch.input_ids.tolist() == [[7, 8, 9, 10]]
    assert batch.loss_mask.tolist() == [[1, 1, 1, 0]]
    assert batch.labels.tolist() == [[X, 8, X, X]]


def test_split_overflow_restarts_positions_and_labels_at_every_piece() -> None:
    # [1..5] into 2 with split overflow: documents [1, 2], [3, 4], [5], each its own block under 'none'
    batch = pack([[1, 2, 3, 4, 5]], 2, strategy="none", overflow="split")
    assert batch.input_ids.tolist() == [[1, 2], [3, 4], [5, 0]]
    assert batch.position_ids.tolist() == [[0, 1], [0, 1], [0, 0]]
    assert batch.labels.tolist() == [[X, 2], [X, 4], [X, X]]
    assert batch.sequence_ids.tolist() == [[0, 0], [0, 0], [0, -1]]
    assert batch.stats.sequences_split == 1
    assert batch.stats.tokens_lost == 0


def test_two_pieces_of_one_sequence_in_one_block_are_separate_documents() -> None:
    # Split overflow makes documents [1, 2, 3, 4] and [5, 6] of sample 1; the split strategy then cuts the stream
    # [9, 1, 2, 3 | 4, 5, 6], so block 1 holds the rest of the first document ([4]) and then the second one.
    batch = pack([[9], [1, 2, 3, 4, 5, 6]], 4, strategy="split", overflow="split")
    assert batch.input_ids.tolist() == [[9, 1, 2, 3], [4, 5, 6, 0]]
    assert batch.position_ids.tolist() == [[0, 0, 1, 2], [0, 0, 1, 0]]
    assert batch.sequence_ids.tolist() == [[0, 1, 1, 1], [1, 1, 1, -1]]
    assert batch.seq_lengths(1).tolist() == [1, 2]
    assert batch.labels.tolist() == [[X, X, 2, 3], [X, X, 6, X]]
    assert batch.attention_mask(1).astype(int).tolist() == [
        [1, 0, 0, 0],
        [0, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 0, 0],
    ]


def test_attention_mask_is_causal_within_documents_only() -> None:
    batch = pack([[1, 2], [3]], 4, strategy="split")
    mask = batch.attention_mask(0)
    assert mask.dtype == np.bool_
    assert mask.astype(int).tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 0, 0],
    ]


def test_attention_mask_of_a_continued_document() -> None:
    batch = pack([[1, 2, 3], [4, 5, 6]], 4, strategy="split")  # block 1 is [5, 6, pad, pad]: one document piece
    assert batch.attention_mask(1).astype(int).tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
    ]


def test_block_and_iter_blocks_give_json_ready_dicts_of_the_schema_columns() -> None:
    batch = pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    first = {
        "input_ids": [1, 2, 3, 4],
        "labels": [X, 2, X, 4],
        "loss_mask": [1, 1, 1, 1],
        "position_ids": [0, 1, 0, 1],
        "sequence_ids": [0, 0, 1, 1],
        "seq_lengths": [2, 2],
    }
    second = {
        "input_ids": [5, 6, 0, 0],
        "labels": [X, X, X, X],
        "loss_mask": [1, 1, 0, 0],
        "position_ids": [0, 0, 0, 0],
        "sequence_ids": [1, 2, -1, -1],
        "seq_lengths": [1, 1],
    }
    assert batch.block(0) == first
    # exactly the schema's columns, in the schema's order (flash-attention's cu_seqlens stays a method)
    assert list(batch.block(0)) == [column.name for column in packing.batches.COLUMNS]
    assert batch.cu_seqlens(0).tolist() == [0, 2, 4] and batch.cu_seqlens(1).tolist() == [0, 1, 2]
    assert batch.block(1) == second
    assert batch.block(-1) == second
    assert list(batch.iter_blocks()) == [first, second]
    assert json.loads(json.dumps(list(batch.iter_blocks()))) == [first, second]


def test_block_out_of_range() -> None:
    with pytest.raises(IndexError):
        pack([[1, 2]], 4, strategy="split").block(1)


@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
def test_no_samples_or_only_empty_ones_give_zero_blocks(strategy: str) -> None:
    for samples in ([], [[], {"prompt": [], "completion": []}]):
        batch = pack(samples, 3, strategy=strategy)
        assert batch.num_blocks == 0
        for array in (batch.input_ids, batch.labels, batch.loss_mask, batch.position_ids, batch.sequence_ids):
            assert array.shape == (0, 3)
        assert batch.to_lists() == ([], [])
        assert list(batch.iter_blocks()) == []
        assert batch.stats.trainable_tokens == 0


def test_samples_without_trainable_tokens_counts_completions_cut_off_by_truncation() -> None:
    # sample 0 is truncated to its prompt [1, 2, 3]: packed, but nothing to learn from
    samples = [{"prompt": [1, 2, 3], "completion": [4, 5]}, [6], {"prompt": [7], "completion": []}]
    batch = pack(samples, 3, strategy="none")
    assert batch.input_ids.tolist() == [[1, 2, 3], [6, 0, 0], [7, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 0], [1, 0, 0], [0, 0, 0]]
    # sample 0 (completion cut off), sample 1 (one token: nothing predicts it), sample 2 (no completion)
    assert batch.stats.samples_without_trainable_tokens == 3
    assert batch.stats.trainable_tokens == 1
    assert batch.stats.tokens_truncated == 2
    assert batch.stats.sequences_truncated == 1


def test_dropped_samples_are_not_counted_as_without_trainable_tokens() -> None:
    samples = [{"prompt": [1, 2, 3], "completion": [4, 5]}, [6, 7]]
    batch = pack(samples, 3, strategy="none", overflow="drop")
    assert batch.input_ids.tolist() == [[6, 7, 0]]
    assert batch.stats.samples_without_trainable_tokens == 0
    assert batch.stats.tokens_dropped == 5
    assert batch.stats.sequences_dropped == 1


def test_targets_exclude_every_document_start() -> None:
    # [5] and [6, 7] share a block: token 5 is trainable but nothing may predict it, nor 6 from 5
    batch = pack([[5], [6, 7]], 4, strategy="ffd")
    assert batch.input_ids.tolist() == [[6, 7, 5, 0]]
    assert batch.labels.tolist() == [[-100, 7, -100, -100]]
    assert (batch.stats.trainable_tokens, batch.stats.target_tokens) == (3, 1)
    assert batch.stats.samples_without_trainable_tokens == 1  # the one-token sample trains nothing


def test_spfhp_cap_through_pack() -> None:
    # lengths [3, 1, 1, 1] into 6 with at most 2 per block: (3, 1), (1), (1)
    batch = pack([[1, 1, 1], [2], [3], [4]], 6, strategy="spfhp", max_sequences_per_block=2)
    assert batch.input_ids.tolist() == [[1, 1, 1, 2, 0, 0], [3, 0, 0, 0, 0, 0], [4, 0, 0, 0, 0, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0, 0, 0], [0] * 6, [0] * 6]


def test_pack_is_plan_then_materialize() -> None:
    samples = [[1, 2, 3], {"prompt": [4], "completion": [5, 6]}, [7]]
    packed = pack(samples, 4, strategy="bfd", pad_token_id=3)
    layout = plan([3, 3, 1], 4, strategy="bfd")
    built = materialize(layout, read_rows(samples), pad_token_id=3)
    for name in ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids"):
        assert np.array_equal(getattr(packed, name), getattr(built, name))
    assert packed.stats == built.stats
    assert packed.plan.blocks() == layout.blocks()


def test_stats_of_a_batch_use_the_real_loss_masks() -> None:
    batch = pack([{"prompt": [1, 2], "completion": [3]}, [4, 5]], 4, strategy="split")
    assert batch.stats.trainable_tokens == 3
    assert batch.plan.stats.trainable_tokens == 5  # the plan alone assumes every token is trained on
    assert batch.stats.num_blocks == 2
    assert batch.stats.efficiency == 5 / 8


MISMATCHED_PLAN = """
from packing import SettingError, materialize, plan, read_rows
try:
    materialize(plan({lengths}, 1000, strategy="split"), read_rows({samples}))
except SettingError as error:
    print(type(error).__name__, error.name)
else:
    print("accepted")
"""


@pytest.mark.parametrize(
    ("lengths", "samples"),
    [([5], [[1, 2]]), ([5, 3, 900], [[1, 2]]), ([2], [[1, 2], [3]])],
    ids=["plan longer than the sample", "far longer", "fewer planned sequences"],
)
def test_materialize_refuses_a_plan_made_for_other_lengths(lengths: list[int], samples: list[list[int]]) -> None:
    # in a child process: reading past the end of a buffer may crash the interpreter
    code = MISMATCHED_PLAN.format(lengths=lengths, samples=samples)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "SettingError plan"


def test_materialize_checks_the_pad_token_id() -> None:
    with pytest.raises(SettingError, match=r"^pad_token_id: expected a non-negative integer, got -5$"):
        materialize(plan([1], 4), read_rows([[1]]), pad_token_id=-5)


def test_the_readme_recipe_for_flash_attention_varlen_inputs() -> None:
    batch = pack([[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]], 5, strategy="bfd")
    lo, hi = 0, batch.num_blocks
    tokens = batch.input_ids[lo:hi][batch.sequence_ids[lo:hi] >= 0]
    lengths = np.concatenate([batch.seq_lengths(b) for b in range(lo, hi)])
    cu_seqlens = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    documents = [tokens[a:b].tolist() for a, b in itertools.pairwise(cu_seqlens)]
    assert sorted(documents) == [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    assert int(lengths.max()) == 4 and cu_seqlens.dtype == np.int32


def tampered(layout: packing.PackingPlan, change: dict[str, Any]) -> packing.PackingPlan:
    """A plan whose fields were overwritten after it was made (past the check at construction)."""
    copy = dataclasses.replace(layout)
    for name, value in change.items():
        object.__setattr__(copy, name, value)
    return copy


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"piece_length": np.array([6], dtype=np.int32)}, "pieces within their sequences"),
        ({"piece_start": np.array([10**9], dtype=np.int32)}, "pieces within their sequences"),
        ({"piece_sequence": np.array([3], dtype=np.int32)}, "pieces naming sequences the plan has"),
        ({"block_starts": np.array([0, 0, 1])}, "every block holding a piece"),
        ({"piece_length": np.array([0], dtype=np.int32)}, "pieces with a length >= 1"),
    ],
    ids=["too long", "far start", "unknown sequence", "empty block", "empty piece"],
)
def test_a_hand_built_plan_that_would_write_out_of_bounds_is_refused(change: dict[str, Any], message: str) -> None:
    samples = read_rows([[1, 2, 3, 4, 5]])
    layout = plan(samples.lengths, 8, strategy="bfd")
    with pytest.raises(SettingError, match=f"^plan: expected .*{re.escape(message)}") as error:
        dataclasses.replace(layout, **change)  # refused when it is made
    assert error.value.name == "plan"
    with pytest.raises(SettingError, match=f"^plan: expected .*{re.escape(message)}"):
        materialize(tampered(layout, change), samples)  # and again before any block is written


def test_a_plan_that_overfills_a_block_is_refused() -> None:
    samples = read_rows([[1, 2, 3], [4, 5, 6]])
    layout = plan(samples.lengths, 4, strategy="bfd")  # two blocks of one piece each
    message = r"^plan: expected blocks of at most max_seq_length=4 tokens"
    with pytest.raises(SettingError, match=message):
        dataclasses.replace(layout, block_starts=np.array([0, 2]))
    with pytest.raises(SettingError, match=message):
        materialize(tampered(layout, {"block_starts": np.array([0, 2])}), samples)


def test_to_arrow_holds_the_schema_columns_one_row_per_block() -> None:
    pa = pytest.importorskip("pyarrow")
    batch = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}, [6, 7, 8]], 4, strategy="split", pad_token_id=9)
    table = batch.to_arrow()
    assert table.column_names == [column.name for column in packing.batches.COLUMNS]
    for column in packing.batches.COLUMNS:
        assert table.schema.field(column.name).type == pa.list_(pa.from_numpy_dtype(np.dtype(column.dtype)))
    assert table.num_rows == batch.num_blocks == 2
    assert table.to_pylist() == list(batch.iter_blocks())
    # worked by hand: stream [1, 2, 3, 4 | 5, 6, 7, 8]
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert table.column("seq_lengths").to_pylist() == [[2, 2], [1, 3]]
    assert table.column("sequence_ids").to_pylist() == [[0, 0, 1, 1], [1, 2, 2, 2]]


def test_to_arrow_in_an_order_gives_those_blocks() -> None:
    pytest.importorskip("pyarrow")
    batch = pack([[1], [2, 2], [3, 3, 3], [4, 4, 4, 4]], 4, strategy="none")
    rows = batch.to_arrow().to_pylist()
    assert batch.to_arrow([3, 0, 0]).to_pylist() == [rows[3], rows[0], rows[0]]
    assert batch.to_arrow([]).num_rows == 0
    with pytest.raises(SettingError, match=r"^order: expected block indexes in 0\.\.3"):
        batch.to_arrow([4])


def test_materialize_takes_samples_that_were_read() -> None:
    with pytest.raises(SettingError, match=r"^samples: expected a Samples") as error:
        materialize(plan([2], 4), [[1, 2]])  # type: ignore[arg-type]
    assert error.value.name == "samples"
    lengths_only = read_rows([{"length": 2}])
    assert plan(lengths_only, 4).num_blocks == 1  # lengths are enough to plan ...
    with pytest.raises(SettingError, match=r"^samples: expected token ids \(lengths-only data"):
        materialize(plan(lengths_only, 4), lengths_only)  # ... but not to pack


COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids")


@pytest.mark.parametrize(
    ("strategy", "overflow", "dtype", "int64"),
    [
        ("split", "split", np.int32, False),  # in order: joined straight into the blocks
        ("split", "split", np.int16, True),
        ("split", "truncate", np.int32, False),  # cut: not in order
        ("bfd", "split", np.int32, False),
        ("split", "split", np.int64, False),  # wide ids: read and checked first
    ],
)
def test_token_arrays_pack_as_lists_do(strategy: str, overflow: str, dtype: type, int64: bool) -> None:
    rng = np.random.default_rng(3)
    rows = [rng.integers(0, 1000, n).astype(dtype) for n in rng.integers(0, 40, 60)]
    arrays = pack(rows, 16, strategy=strategy, overflow=overflow, pad_token_id=7, int64=int64)  # type: ignore[arg-type]
    lists = pack([row.tolist() for row in rows], 16, strategy=strategy, overflow=overflow, pad_token_id=7, int64=int64)  # type: ignore[arg-type]
    assert arrays.stats == lists.stats
    for name in COLUMNS:
        got, want = getattr(arrays, name), getattr(lists, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name


def test_in_order_plans() -> None:
    assert plan([3, 2, 4], 4, strategy="split").in_order()
    assert plan([], 4, strategy="split").in_order()
    assert not plan([3, 2, 4], 4, strategy="ffd").in_order()
    assert not plan([5, 2], 4, strategy="split", overflow="truncate").in_order()  # a token cut
    assert plan([5, 2], 4, strategy="split", overflow="split").in_order()


def test_token_arrays_joined_into_the_blocks_are_checked() -> None:
    with pytest.raises(packing.SampleError, match="sample 1, position 2"):
        pack(
            [np.arange(3, dtype=np.int32), np.array([1, 2, -3], dtype=np.int32)], 4, strategy="split", overflow="split"
        )
    with pytest.raises(SettingError, match="pad_token_id"):
        pack([np.arange(3, dtype=np.int32)], 4, strategy="split", pad_token_id=2**31)


@pytest.mark.parametrize("strategy", ["split", "bfd"])
def test_columns_filled_by_threads_are_the_same(monkeypatch: pytest.MonkeyPatch, strategy: str) -> None:
    rng = np.random.default_rng(5)
    rows = [{"prompt": rng.integers(0, 99, n).tolist(), "completion": [1, 2, 3]} for n in rng.integers(0, 30, 80)]
    serial = pack(rows, 16, strategy=strategy, overflow="split")  # type: ignore[arg-type]
    monkeypatch.setattr(
        packing.batches._packed, "THREAD_SLOTS", 16 * 3
    )  # parts of three blocks, on two or more threads
    monkeypatch.setattr(packing.batches._packed, "_cores", lambda: 2)
    threaded = pack(rows, 16, strategy=strategy, overflow="split")  # type: ignore[arg-type]
    for name in COLUMNS:
        assert np.array_equal(getattr(threaded, name), getattr(serial, name)), name


def test_token_arrays_joined_and_checked_by_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    rows = [rng.integers(0, 99, n).astype(np.int32) for n in rng.integers(0, 30, 80)]
    serial = pack(rows, 16, strategy="split", overflow="split", pad_token_id=3)
    monkeypatch.setattr(packing.batches._packed, "THREAD_SLOTS", 16 * 3)
    monkeypatch.setattr(packing.batches._packed, "_cores", lambda: 2)
    threaded = pack(rows, 16, strategy="split", overflow="split", pad_token_id=3)
    for name in COLUMNS:
        assert np.array_equal(getattr(threaded, name), getattr(serial, name)), name
    rows[70] = np.array([5, -1], dtype=np.int32)  # in a late part: still found, with its row
    with pytest.raises(packing.SampleError, match="sample 70, position 1"):
        pack(rows, 16, strategy="split", overflow="split")


@pytest.mark.parametrize("strategy", [name for name in packing.strategies.STRATEGIES if name != "optimal"])
@pytest.mark.parametrize("overflow", ["truncate", "split"])
def test_targets_per_sample_are_the_labels_of_each_sample_in_the_blocks(strategy: str, overflow: str) -> None:
    """``targets_per_sample``: per sample, the labels that are not -100 in the filled blocks (what
    ``loss_weights`` weighs), without filling them; lengths only: the plan's own count of training targets."""
    from packing.batches._packed import targets_per_sample

    rng = np.random.default_rng(11)
    rows: list[Any] = []
    for n in rng.integers(1, 30, 60):
        ids = rng.integers(1, 99, n).tolist()
        rows.append({"input_ids": ids, "loss_mask": rng.integers(0, 2, n).tolist()} if n % 3 else ids)
    samples = read_rows(rows)
    batch = materialize(plan(samples.lengths, 16, strategy=strategy, overflow=overflow), samples)  # type: ignore[arg-type]
    ids = batch.sequence_ids.astype(np.int64)
    real = ids >= 0
    expected = np.bincount(ids[real], weights=(batch.labels != IGNORE_INDEX)[real], minlength=len(rows))
    assert targets_per_sample(batch.plan, samples).tolist() == expected.astype(np.int64).tolist()
    assert int(targets_per_sample(batch.plan, samples).sum()) == packing.count_trainable(batch.plan, samples)[1]
    lengths_only = plan(samples.lengths, 16, strategy=strategy, overflow=overflow)  # type: ignore[arg-type]
    assert int(targets_per_sample(lengths_only).sum()) == lengths_only.stats.target_tokens
