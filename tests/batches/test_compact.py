"""The compact schema and chunked output: int32 columns by default, int64 on request, ids past int32 refused
with where they are, derived columns equal to a direct computation, chunked writing equal to unchunked
writing, and memory bounded by a chunk rather than by the output."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
import packing.batches
import packing.core
import packing.layouts
import packing.reading
from packing import SampleError, SettingError, pack, plan, read_rows
from packing.batches._packed import PackedBatch
from packing.batches._schema import arrow_schema
from packing.core import IGNORE_INDEX
from packing.core._validation import INT32_MAX
from packing.layouts._export import write_jsonl, write_parquet
from packing.streaming import stream
from tests.helpers.memory import traced_peak
from tests.helpers.sample_rows import rows as sample_rows


def made(batch: PackedBatch) -> PackedBatch:
    """A copy of ``batch`` with its blocks made whole (``input_ids`` and ``loss_mask`` filled at once)."""
    copy = dataclasses.replace(batch)
    copy.input_ids  # noqa: B018 - filled now
    return copy


WIDE = ("input_ids", "labels", "position_ids")


def test_columns_are_int32_and_one_byte_by_default() -> None:
    batch = pack([[1, 2], {"prompt": [3], "completion": [4, 5]}], 4, strategy="split")
    dtypes = {name: getattr(batch, name).dtype for name in ("input_ids", "labels", "loss_mask", "position_ids")}
    assert dtypes == {"input_ids": np.int32, "labels": np.int32, "loss_mask": np.int8, "position_ids": np.int32}
    assert batch.sequence_ids.dtype == np.int32
    assert batch.to_arrow().schema == arrow_schema()
    assert {str(arrow_schema().field(name).type.value_type) for name in WIDE} == {"int32"}


def test_int64_on_request_everywhere_it_is_asked() -> None:
    batch = pack([[1, 2], [3]], 4, int64=True)
    assert {getattr(batch, name).dtype for name in WIDE} == {np.dtype(np.int64)}
    assert batch.loss_mask.dtype == np.int8 and batch.sequence_ids.dtype == np.int32
    assert batch.to_arrow().schema == arrow_schema(int64=True)
    assert packing.Recipe(8, int64=True).int64 is True
    with pytest.raises(SettingError, match="int64"):
        packing.Recipe(8, int64="yes")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match="int64"):
        pack([[1]], 4, int64=1)  # type: ignore[arg-type]
    blocks = list(stream([[1, 2], [3]], 4, int64=True, seed=None))
    assert {blocks[0][name].dtype for name in WIDE} == {np.dtype(np.int64)}


def test_an_id_past_int32_is_refused_with_sample_and_position_and_kept_in_int64() -> None:
    rows = [[1, 2], [5, 6, 2**31, 7], [3]]
    with pytest.raises(SampleError) as caught:
        pack(rows, 8)
    assert (caught.value.sample, caught.value.position) == (1, 2)
    assert "2147483647" in str(caught.value) and "int64=True" in str(caught.value)
    assert int(pack(rows, 8, int64=True).input_ids.max()) == 2**31
    assert int(pack([[INT32_MAX]], 2).input_ids[0, 0]) == INT32_MAX  # the largest that fits is kept
    with pytest.raises(SettingError, match="pad_token_id"):
        pack([[1]], 4, pad_token_id=2**31)


def test_32_bit_input_stays_32_bit_and_an_unmasked_input_has_no_mask_memory() -> None:
    samples = read_rows([np.array([1, 2], np.int32), np.array([3], np.int16)])
    assert samples.tokens is not None and samples.loss_mask is not None
    assert samples.tokens.dtype == np.int32
    assert samples.loss_mask.strides == (0,) and samples.loss_mask.tolist() == [1, 1, 1]
    assert read_rows([np.array([1], np.uint32)]).tokens.dtype == np.int64  # type: ignore[union-attr]


def direct(batch: packing.PackedBatch) -> dict[str, list[list[int]]]:
    """Labels, positions and sequence ids worked out from the plan's pieces, block by block, in Python."""
    out: dict[str, list[list[int]]] = {"labels": [], "position_ids": [], "sequence_ids": []}
    for b, pieces in enumerate(batch.plan.blocks()):
        ids, mask = batch.input_ids[b].tolist(), batch.loss_mask[b].tolist()
        labels, positions, sequences = [], [], []
        for piece in pieces:
            for k in range(piece.length):
                at = len(labels)
                labels.append(ids[at] if mask[at] and k > 0 else IGNORE_INDEX)
                positions.append(k)
                sequences.append(piece.sequence)
        pad = batch.max_seq_length - len(labels)
        out["labels"].append(labels + [IGNORE_INDEX] * pad)
        out["position_ids"].append(positions + [0] * pad)
        out["sequence_ids"].append(sequences + [-1] * pad)
    return out


@settings(max_examples=60, deadline=None)
@given(
    rows=sample_rows(max_tokens=12, min_size=1, max_size=12),
    max_seq_length=st.integers(1, 16),
    strategy=st.sampled_from(["split", "bfd", "next_fit"]),
)
def test_derived_columns_equal_a_direct_computation(rows: list[Any], max_seq_length: int, strategy: str) -> None:
    overflow = "split" if strategy == "split" else "truncate"
    batch = pack(rows, max_seq_length, strategy=strategy, overflow=overflow)
    assert {name: getattr(batch, name).tolist() for name in ("labels", "position_ids", "sequence_ids")} == direct(batch)


def lazy_of(rows: list[Any], max_seq_length: int, int64: bool = False) -> PackedBatch:
    samples = read_rows(rows)
    return PackedBatch.of(plan(samples.lengths, max_seq_length, strategy="bfd"), samples, pad_token_id=3, int64=int64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=sample_rows(max_tokens=9, min_size=1, max_size=20),
    max_seq_length=st.integers(1, 8),
    chunk_tokens=st.integers(1, 64),
    shuffled=st.booleans(),
    int64=st.booleans(),
)
def test_chunked_writing_equals_writing_at_once(
    tmp_path: Path, rows: list[Any], max_seq_length: int, chunk_tokens: int, shuffled: bool, int64: bool
) -> None:
    lazy = lazy_of(rows, max_seq_length, int64)
    whole = made(lazy)
    order = np.random.default_rng(chunk_tokens).permutation(whole.num_blocks) if shuffled else None
    expected = whole.to_arrow(order)
    for source in (lazy, whole):
        write_parquet(source, tmp_path / "out.parquet", order, chunk_tokens=chunk_tokens)
        written = pq.read_table(tmp_path / "out.parquet")
        assert written.schema == arrow_schema(int64) and written.equals(expected)
        groups = pq.ParquetFile(tmp_path / "out.parquet").metadata.num_row_groups
        assert groups == -(-whole.num_blocks // max(1, chunk_tokens // max_seq_length))
        write_jsonl(source, tmp_path / "out.jsonl", order, chunk_tokens=chunk_tokens)
        lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        assert lines == expected.to_pylist()


def test_chunks_of_a_batch_reuse_derived_columns_already_made() -> None:
    batch = pack([[1, 2, 3], [4, 5], [6]], 4)
    labels = batch.labels
    parts = list(batch.chunks(tokens=4))
    assert np.concatenate([p.labels for p in parts]).tolist() == labels.tolist()
    assert np.shares_memory(parts[0].labels, labels)
    assert np.concatenate([p.position_ids for p in parts]).tolist() == batch.position_ids.tolist()
    with pytest.raises(SettingError, match="chunk_tokens"):
        list(batch.chunks(tokens=0))


def test_chunked_writing_holds_one_chunk_not_the_output(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = [rng.integers(1, 30_000, int(n), dtype=np.int32) for n in rng.integers(50, 400, 4_000)]
    lazy = lazy_of(rows, 512)
    output = lazy.num_blocks * 512 * 17  # bytes a token slot takes in the compact schema
    chunk = 1 << 14  # token slots per chunk: 278 KB of columns
    write_parquet(lazy_of(rows[:10], 512), tmp_path / "out.parquet")  # kernels loaded before tracing
    lazy_peak = traced_peak(lambda: write_parquet(lazy, tmp_path / "out.parquet", chunk_tokens=chunk))
    assert output > 10_000_000
    assert lazy_peak < output / 10
    assert lazy_peak < 4 * chunk * 17  # a few chunks' worth, whatever the output's size
    whole_peak = traced_peak(lambda: write_parquet(made(lazy), tmp_path / "out.parquet", chunk_tokens=chunk))
    assert whole_peak > output / 4  # the made batch's ids and mask alone are 5 of the 17 bytes


def test_stream_holds_a_few_bytes_per_buffered_token() -> None:
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(np.log(200), 0.8, 6_000).astype(np.int64), 1, 1024)

    def rows(count: int) -> Any:
        for n in lengths[:count].tolist():
            yield np.ones(n, dtype=np.int32)

    def run(count: int) -> None:
        for _ in stream(rows(count), 1024, buffer_size=2_000):
            pass

    buffered = int(np.sort(lengths)[-2_000:].sum())  # at most this many tokens are in the buffer
    run(100)  # kernels loaded before tracing
    small, large = traced_peak(lambda: run(2_000)), traced_peak(lambda: run(6_000))
    assert large < 1.3 * small
    assert large < 12 * buffered + 256 * 1024 * 40  # plus one chunk of 256 blocks being made


def test_parquet_refusal_in_a_later_row_group_names_the_row(tmp_path: Path) -> None:
    import pyarrow as pa

    from packing.reading._dataset import DatasetError, read_dataset

    path = tmp_path / "rows.parquet"
    ids = [[1, 2], [3], [4, -5], [6]]
    pq.write_table(pa.table({"input_ids": ids}), path, row_group_size=2)
    with pytest.raises(DatasetError, match="row 3, 'input_ids', position 1"):
        read_dataset(path)


# ---------------------------------------------------------------- Parquet read batch by batch


def _parquet_rows(ids: list[list[int]], form: list[int], masked: bool, kind: str) -> Any:
    """A table of rows of three forms (0: input_ids, 1: input_ids with a loss mask, 2: prompt/completion)."""
    import pyarrow as pa

    value = {"int32": pa.int32(), "int64": pa.int64(), "uint16": pa.uint16()}[kind]
    columns: dict[str, Any] = {
        "input_ids": pa.array([r if f < 2 else None for r, f in zip(ids, form, strict=True)], pa.list_(value)),
        "prompt": pa.array(
            [r[: len(r) // 2] if f == 2 else None for r, f in zip(ids, form, strict=True)], pa.list_(value)
        ),
        "completion": pa.array(
            [r[len(r) // 2 :] if f == 2 else None for r, f in zip(ids, form, strict=True)], pa.list_(value)
        ),
    }
    if masked:
        masks = [
            [(i + k) % 2 for k in range(len(r))] if f == 1 else None
            for i, (r, f) in enumerate(zip(ids, form, strict=True))
        ]
        columns["loss_mask"] = pa.array(masks, pa.list_(pa.int8()))
    return pa.table(columns)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(st.lists(st.integers(0, 60_000), max_size=7), st.integers(0, 2)), min_size=1, max_size=25),
    masked=st.booleans(),
    kind=st.sampled_from(["int32", "int64", "uint16"]),
    group=st.integers(1, 8),
    batch=st.sampled_from([1, 3, 1 << 22]),
)
def test_parquet_read_batch_by_batch_equals_the_whole_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[Any], masked: bool, kind: str, group: int, batch: int
) -> None:
    import packing.reading._content
    from packing.reading._arrow import read_table

    monkeypatch.setattr(packing.reading._content, "_BATCH_VALUES", batch)
    ids, form = [r for r, _ in rows], [f if masked or f != 1 else 0 for _, f in rows]
    path = tmp_path / "rows.parquet"
    pq.write_table(_parquet_rows(ids, form, masked, kind), path, row_group_size=group)
    read, whole = packing.read_dataset(path).samples, read_table(pq.read_table(path))
    assert read.tokens is not None and whole.tokens is not None and read.loss_mask is not None
    assert read.tokens.dtype == whole.tokens.dtype and read.tokens.tobytes() == whole.tokens.tobytes()
    assert read.loss_mask.dtype == np.int8 and read.loss_mask.tolist() == whole.loss_mask.tolist()  # type: ignore[union-attr]
    assert read.offsets.tolist() == whole.offsets.tolist()
    if not masked:
        loss_all = packing.read_dataset(path, loss="all").samples.loss_mask
        assert loss_all is not None and loss_all.tolist() == [1] * len(read.tokens)


@pytest.mark.parametrize(
    ("columns", "reason"),
    [
        ({"input_ids": [[1, 2], [3], [4], [5, -6], [7]]}, "row 4, 'input_ids', position 1: expected a non-negative"),
        (
            {"input_ids": [[1], [2], [3], [4, 5], [6]], "loss_mask": [[1], [0], None, [1, 2], [1]]},
            "row 4, 'loss_mask', position 1: expected 0 or 1",
        ),
        (
            {"input_ids": [[1], [2], [3], [4], [5]], "loss_mask": [[1], [0], [1], [1], [1, 0]]},
            "row 5, 'loss_mask'",
        ),
        ({"input_ids": [[1], [2], [3], None, [5]]}, "row 4: expected"),
    ],
)
def test_parquet_refusal_in_a_later_batch_names_the_file_and_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: dict[str, Any], reason: str
) -> None:
    import pyarrow as pa

    import packing.reading._content

    monkeypatch.setattr(packing.reading._content, "_BATCH_VALUES", 2)
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table(columns), path, row_group_size=2)
    with pytest.raises(packing.DatasetError) as refused:
        packing.read_dataset(path)
    assert str(refused.value).startswith(f"{path}, {reason}")
    whole = pa.table(columns)  # the whole-table reader words it the same way
    with pytest.raises(SampleError) as same:
        packing.reading._arrow.read_table(whole)
    assert str(refused.value).endswith(str(same.value).split(", ", 1)[1].split(": ", 1)[-1])
