"""Packed rows (rows with ``seq_lengths``: ``PackedDataset`` items, rows of packed files) read by ``collate`` and
``collate_fixed`` through the reader, as every other row: a batch never holds more than ``max_seq_length`` tokens,
and bad ids, labels, lengths and weights are the library's errors, never numpy's or a ``KeyError``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
from packing.errors import PackingError, SampleError, SettingError
from packing.torch import PackedDataset, collate, collate_fixed


@st.composite
def _blocks(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Blocks of documents, some padded (the padding after ``sum(seq_lengths)``), with labels masking some tokens."""
    rows = []
    for _ in range(draw(st.integers(1, 3))):
        lengths = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
        total = sum(lengths)
        padding = draw(st.integers(0, 2))
        ids = draw(st.lists(st.integers(0, 50), min_size=total, max_size=total)) + [0] * padding
        trained = draw(st.lists(st.booleans(), min_size=total, max_size=total)) + [False] * padding
        row: dict[str, Any] = {"input_ids": ids, "seq_lengths": lengths}
        if draw(st.booleans()):
            row["labels"] = [t if keep else -100 for t, keep in zip(ids, trained, strict=True)]
        if draw(st.booleans()):
            row = {key: torch.tensor(value) for key, value in row.items()}
        rows.append(row)
    return rows


def _as_samples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks' documents as samples, each with its labels (what collate reads of a sample)."""
    samples = []
    for row in rows:
        ids = np.asarray(row["input_ids"]).tolist()
        labels = np.asarray(row["labels"]).tolist() if "labels" in row else ids
        at = 0
        for length in np.asarray(row["seq_lengths"]).tolist():
            samples.append({"input_ids": ids[at : at + length], "labels": labels[at : at + length]})
            at += length
    return samples


@settings(max_examples=120, deadline=None)
@given(_blocks(), st.one_of(st.none(), st.integers(1, 30)))
def test_blocks_collate_as_their_documents_do(rows: list[dict[str, Any]], capacity: int | None) -> None:
    documents = _as_samples(rows)
    total = sum(len(d["input_ids"]) for d in documents)
    if total == 0 and capacity is None:
        with pytest.raises(SettingError, match="at least one token"):
            collate(rows, capacity)
        return
    if total == 0:  # a block's collate: an empty step, padding alone, which trains nothing
        empty = collate(rows, capacity, return_tensors="np", loss_weights="token")
        assert empty["input_ids"].shape == (1, 1) and empty["labels"].tolist() == [[packing.core.IGNORE_INDEX]]
        assert empty["loss_weights"].tolist() == [[0.0]]
        return
    if capacity is not None and total > capacity:
        with pytest.raises(SettingError, match=rf"^rows: expected at most max_seq_length={capacity} tokens in all"):
            collate(rows, capacity)
        return
    got = collate(rows, capacity, return_tensors="np", return_seq_idx=True)
    expected = collate(documents, return_tensors="np", return_seq_idx=True)
    for key in ("input_ids", "labels", "position_ids", "seq_idx"):
        assert got[key].tolist() == expected[key].tolist(), key
    assert got["input_ids"].shape[1] <= (capacity or total)


CORRUPT = [
    ({"labels": [1, 2]}, r"^sample 0, 'labels': expected 4 values \(one per token\), got <2 values>$"),
    ({"seq_lengths": [1.5, 2]}, r"^sample 0, 'seq_lengths', position 0: expected a non-negative integer, got 1\.5"),
    ({"seq_lengths": [3, 2]}, r"^sample 0, 'seq_lengths': expected lengths adding up to at most the 4 tokens"),
    ({"seq_lengths": [-1, 2]}, r"^sample 0, 'seq_lengths', position 0: expected a non-negative integer, got -1$"),
    ({"input_ids": [1, -3, 3, 0]}, r"^sample 0, 'input_ids', position 1: expected a non-negative integer token id"),
    ({"input_ids": [1, 2.5, 3, 0]}, r"^sample 0, 'input_ids', position 1: expected a non-negative integer token id"),
    ({"loss_weights": [0.5, float("nan"), 0, 0]}, r"^sample 0, 'loss_weights', position 1: expected a finite number"),
    ({"loss_weights": [0.5]}, r"^sample 0, 'loss_weights': expected 4 values \(one per token\)"),
    ({"sequence_ids": [0, 0.5, 1, -1]}, r"^sample 0, 'sequence_ids', position 1: expected an integer"),
    ({"seq_lengths": "3"}, r"^sample 0, 'seq_lengths': expected a list of lengths, got '3' \(str\)$"),
]


@pytest.mark.parametrize(("change", "error"), CORRUPT)
@pytest.mark.parametrize("as_tensors", [False, True])
def test_a_bad_block_is_the_readers_error(change: dict[str, Any], error: str, as_tensors: bool) -> None:
    row: dict[str, Any] = {
        "input_ids": [1, 2, 3, 0],
        "labels": [-100, 2, -100, -100],
        "seq_lengths": [2, 1],
        "sequence_ids": [0, 0, 1, -1],
        "loss_weights": [0.0, 1.0, 0.0, 0.0],
    }
    row.update(change)
    if as_tensors:  # a float tensor is floats from its first value on
        row = {k: torch.tensor(v) if not isinstance(v, str) else v for k, v in row.items()}
        error = error.replace("position 1", r"position \d")
    mode = "sequence" if "sequence_ids" in change else None
    with pytest.raises(SampleError, match=error):
        collate([row], 8, loss_weights=mode)
    if "loss_weights" not in change and "sequence_ids" not in change:
        with pytest.raises(SampleError, match=error):
            collate_fixed(8)([row])


def test_two_full_blocks_are_more_than_one_batch_holds() -> None:
    data = PackedDataset(packing.pack([[1, 2, 3, 4], [5, 6, 7, 8]], 4))
    with pytest.raises(SettingError, match=r"^rows: expected at most max_seq_length=4 tokens in all .*, got 8$"):
        collate([data[0], data[1]], 4)
    assert collate([data[0], data[1]])["input_ids"].shape == (1, 8)  # without a cap: as transformers' collator
    with pytest.raises(SettingError, match=r"^rows: expected packed blocks of at most max_seq_length=2 tokens"):
        collate_fixed(2)([data[0]])


def test_collate_fixed_reads_blocks_without_positions() -> None:
    """TRL's rows: no ``position_ids``, no padding (a raw ``KeyError`` before)."""
    rows = [{"input_ids": [5, 6, 7], "seq_lengths": [2, 1]}, {"input_ids": [8], "seq_lengths": [1], "labels": [8]}]
    batch = collate_fixed(4, pad_token_id=9)(rows)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 9], [8, 9, 9, 9]]
    assert batch["labels"].tolist() == [[-100, 6, -100, -100], [-100, -100, -100, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]
    data = PackedDataset(packing.pack([[1, 2], [3, 4, 5], [6]], 4))
    stacked = collate_fixed(4)([data[i] for i in range(len(data))])
    for key in ("input_ids", "labels", "position_ids"):
        assert stacked[key].tolist() == [data[i][key].tolist() for i in range(len(data))]
    with pytest.raises(PackingError):
        collate_fixed(4)([{"seq_lengths": [1]}])


# ---------------------------------------------------------------- both collates as a DataLoader's collate_fn


def _text_file(tmp_path: Any, rows: int = 9) -> PackedDataset:
    """A packed file of text rows written by the command line with the byte tokenizer (pad id 257)."""
    from packing._cli import main

    source = tmp_path / "data.jsonl"
    source.write_text("".join(f'{{"text": "row {i}{"!" * (i % 4)}"}}\n' for i in range(rows)))
    out = tmp_path / "blocks.parquet"
    code = main(["pack", str(source), "--tokenizer", "bytes", "--max-seq-length", "24", "-o", str(out), "-q"])
    assert code == 0
    return PackedDataset(out)


def test_both_collates_are_a_collate_fn_with_their_own_shapes(tmp_path: Any) -> None:
    from torch.utils.data import DataLoader

    blocks = _text_file(tmp_path)
    flat = list(DataLoader(blocks, batch_size=4, collate_fn=collate))
    stacked = list(DataLoader(blocks, batch_size=4, collate_fn=collate_fixed))
    assert len(flat) == len(stacked) == -(-len(blocks) // 4)
    for step, (one_row, rows) in enumerate(zip(flat, stacked, strict=True)):
        items = [blocks[i] for i in range(4 * step, min(4 * step + 4, len(blocks)))]
        assert one_row["input_ids"].shape == (1, sum(int(item["seq_lengths"].sum()) for item in items))
        assert rows["input_ids"].shape == (len(items), 24)
        assert rows == {key: rows[key] for key in ("input_ids", "labels", "position_ids")}
        for key in ("input_ids", "labels", "position_ids"):  # the stacked form is the items, padding kept
            assert rows[key].tolist() == [item[key].tolist() for item in items], key
        assert rows["input_ids"].tolist() == collate_fixed(24)(items)["input_ids"].tolist()
    assert 257 in stacked[0]["input_ids"]  # the file's own pad id, never replaced by 0


@given(_blocks(), st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_collate_fixed_of_blocks_is_collate_fixed_at_their_width(rows: list[dict[str, Any]], wider: int) -> None:
    width = max(1, *(len(row["input_ids"]) for row in rows))
    direct = collate_fixed(rows)
    assert {k: v.tolist() for k, v in direct.items()} == {k: v.tolist() for k, v in collate_fixed(width)(rows).items()}
    if wider:  # a wider row pads past the blocks' end with the pad id
        padded = collate_fixed(width + wider, pad_token_id=7)(rows)["input_ids"]
        assert (padded[:, width:] == 7).all()


def test_collate_fixed_refuses_samples_without_a_length() -> None:
    with pytest.raises(SettingError, match=r"^collate_fixed: expected a max_seq_length"):
        collate_fixed([[1, 2], [3]])
    with pytest.raises(SettingError, match=r"^collate_fixed: expected a max_seq_length"):
        collate_fixed([])


def test_decode_documents_reads_a_dataset_of_blocks_as_it_reads_the_batch(tmp_path: Any) -> None:
    batch = packing.pack([{"text": t} for t in ("héllo", "a", "日本", "xyz")], 8, tokenizer="bytes", strategy="bfd")
    assert packing.decode_documents(PackedDataset(batch), "bytes") == packing.decode_documents(batch, "bytes")
    items = [PackedDataset(batch)[i] for i in range(batch.num_blocks)]
    assert packing.decode_documents(items, "bytes") == packing.decode_documents(batch, "bytes")
    blocks = _text_file(tmp_path, rows=5)
    assert sorted(packing.decode_documents(blocks, "bytes")) == sorted(
        f"row {i}{'!' * (i % 4)}<|endoftext|>" for i in range(5)
    )
    with pytest.raises(SampleError, match=r"^sample 1: expected a packed block"):
        packing.decode_documents([items[0], [1, 2]], "bytes")
    with pytest.raises(SettingError, match=r"^batch: expected a PackedBatch or a dataset of packed blocks"):
        packing.decode_documents(5, "bytes")
