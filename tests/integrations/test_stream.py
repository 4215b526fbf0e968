"""packing.stream (packing/streaming.py): packing an iterable in a bounded buffer."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.streaming import stream, stream_dataset
from tests.helpers.sample_rows import rows as sample_rows

rows_strategy = sample_rows(max_tokens=10)


def expected(row: Any) -> tuple[list[int], list[int]]:
    """Tokens and loss mask of a row, worked out directly from its form."""
    if isinstance(row, list):
        return row, [1] * len(row)
    if "prompt" in row:
        return row["prompt"] + row["completion"], [0] * len(row["prompt"]) + [1] * len(row["completion"])
    return row["input_ids"], row["loss_mask"]


@settings(max_examples=80, deadline=None)
@given(
    rows=rows_strategy,
    max_seq_length=st.integers(10, 24),
    buffer_size=st.integers(1, 12),
    seed=st.one_of(st.none(), st.integers(0, 3)),
    strategy=st.sampled_from(["bfd", "ffd", "first_fit", "first_fit_shuffle", "next_fit", "spfhp"]),
)
def test_every_token_once_with_stream_positions(
    rows: list[Any], max_seq_length: int, buffer_size: int, seed: int | None, strategy: str
) -> None:
    blocks = list(
        stream(iter(rows), max_seq_length, buffer_size=buffer_size, strategy=strategy, seed=seed, pad_token_id=7)
    )
    seen: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for block in blocks:
        assert {k: v.dtype for k, v in block.items()} == {
            "input_ids": np.int32,  # the compact schema
            "labels": np.int32,
            "loss_mask": np.int8,
            "position_ids": np.int32,
            "sequence_ids": np.int32,
            "seq_lengths": np.int32,
        }
        assert all(len(block[k]) == max_seq_length for k in ("input_ids", "labels", "loss_mask", "position_ids"))
        ids = block["sequence_ids"]
        used = int(block["seq_lengths"].sum())
        assert used > 0 and np.all(ids[:used] >= 0) and np.all(ids[used:] == -1)
        assert np.all(block["input_ids"][used:] == 7)
        documents = list(dict.fromkeys(ids[:used].tolist()))
        assert [int((ids == d).sum()) for d in documents] == block["seq_lengths"].tolist()
        for d in documents:
            assert d not in seen  # whole samples: one block each
            where = ids == d
            seen[d] = (
                block["input_ids"][where].tolist(),
                block["loss_mask"][where].tolist(),
                block["labels"][where].tolist(),
            )
            assert block["position_ids"][where].tolist() == list(range(int(where.sum())))
    assert sorted(seen) == [i for i, row in enumerate(rows) if expected(row)[0]]
    for i, (tokens, mask, labels) in seen.items():
        want_tokens, want_mask = expected(rows[i])
        assert (tokens, mask) == (want_tokens[:max_seq_length], want_mask[:max_seq_length])  # overflow="truncate"
        assert labels == [-100] + [t if m else -100 for t, m in zip(tokens[1:], mask[1:], strict=True)]


def test_a_buffer_keeps_blocks_within_max_seq_length_and_truncates() -> None:
    blocks = list(stream([[1] * 9, [2, 2]], 4, buffer_size=1, shuffle=False))
    assert [b["input_ids"].tolist() for b in blocks] == [[1, 1, 1, 1], [2, 2, 0, 0]]


def lognormal_rows(count: int, seed: int = 0, max_seq_length: int = 2048) -> Iterator[np.ndarray]:
    """Rows made on demand (the stream never exists whole): log-normal lengths, median 300."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        length = int(min(max_seq_length, max(1, rng.lognormal(np.log(300), 1.0))))
        yield np.full(length, 5, dtype=np.int64)


def lognormal_lengths(count: int, seed: int = 0, max_seq_length: int = 2048) -> np.ndarray:
    return np.array([len(row) for row in lognormal_rows(count, seed, max_seq_length)])


def peak_memory(count: int, buffer_size: int) -> int:
    rows = lognormal_rows(count)
    tracemalloc.start()
    try:
        for _ in stream(rows, 2048, buffer_size=buffer_size):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_stays_flat_as_the_stream_grows() -> None:
    small, large = peak_memory(4_000, 500), peak_memory(16_000, 500)
    assert large < 1.3 * small
    # and it is set by the buffer: a buffer 8 times larger takes several times the memory
    assert peak_memory(4_000, 4_000) > 3 * small


def test_efficiency_close_to_packing_everything_at_once() -> None:
    count = 20_000
    lengths = lognormal_lengths(count)
    whole = packing.plan(lengths, 2048, strategy="bfd").stats.efficiency
    blocks = 0
    tokens = 0
    for block in stream(lognormal_rows(count), 2048, buffer_size=2_000):
        blocks += 1
        tokens += int(block["seq_lengths"].sum())
    assert tokens == int(lengths.sum())
    assert tokens / (blocks * 2048) > whole - 0.005


def test_refuses_splitting_strategies_and_bad_buffers() -> None:
    with pytest.raises(packing.SettingError, match="keeps samples whole"):
        next(stream([[1]], 4, strategy="split"))
    with pytest.raises(ValueError, match="buffer_size"):
        next(stream([[1]], 4, buffer_size=0))


def test_a_bad_row_is_named_by_its_stream_position() -> None:
    rows = [[1, 2]] * 25 + [[3, -4]]
    with pytest.raises(packing.SampleError, match=r"^sample 25, position 1: expected a non-negative") as caught:
        list(stream(rows, 4, buffer_size=10))
    assert (caught.value.sample, caught.value.position) == (25, 1)


def test_hugging_face_iterable_dataset() -> None:
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(3)
    rows = {
        "prompt": [rng.integers(1, 50, n).tolist() for n in rng.integers(1, 10, 50)],
        "completion": [rng.integers(1, 50, n).tolist() for n in rng.integers(1, 10, 50)],
        "text": ["ignored"] * 50,
    }
    source = datasets.Dataset.from_dict(rows).to_iterable_dataset(num_shards=2)
    packed = stream_dataset(source, 16, buffer_size=7, seed=1)
    assert isinstance(packed, datasets.IterableDataset)
    assert list(packed.features) == ["input_ids", "labels", "loss_mask", "position_ids", "sequence_ids", "seq_lengths"]
    plain = [{"prompt": p, "completion": c} for p, c in zip(rows["prompt"], rows["completion"], strict=True)]
    ours = [{k: v.tolist() for k, v in b.items()} for b in stream(plain, 16, buffer_size=7, seed=1)]
    for block in ours:  # the datasets door writes real tokens only, as TRL's pack_dataset does
        used = sum(block["seq_lengths"])
        block.update({k: v[:used] for k, v in block.items() if k != "seq_lengths"})
    assert list(packed) == ours


@pytest.mark.slow
def test_stream_benchmark_quick_run() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "stream.py"), "--quick"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = done.stdout.splitlines()[2:]
    assert sum("global bfd" in row for row in rows) == 2
    assert sum("`stream`, buffer" in row for row in rows) == 3
    assert "target ≤ 0.2: met" in done.stdout
