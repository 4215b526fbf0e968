"""Files that expand far past their size: a Parquet file of zeros whose footer says so, an Arrow IPC batch
compressed from gigabytes to kilobytes. The bounds a server passes (``ReadLimits``) are checked against the
footer's own numbers before a value is decoded, and against what pyarrow decodes batch by batch; what a footer
hides is the server's: the explorer decodes an upload in a worker process under a memory limit
(``explorer.server.workers.LOAD_MEMORY_MB``) and a deadline, and either ends in one line."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from explorer.core import audit as inspect_view
from explorer.core.parsing import InputError
from explorer.core.sources import Upload
from explorer.server import cache, workers
from packing.errors import DatasetError, LimitError
from packing.reading._limits import ReadLimits


def _parquet(rows: int, width: int, seed: int = 0, group: int | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    values = pa.array(rng.integers(0, 50, rows * width).astype(np.int32))
    column = pa.FixedSizeListArray.from_arrays(values, width).cast(pa.list_(pa.int32()))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"input_ids": column}), buffer, compression="zstd", row_group_size=group or rows)
    return buffer.getvalue()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(3, 300), st.integers(1, 3), st.booleans())
def test_a_parquet_file_is_bounded_by_its_footer(rows: int, width: int, groups: int, under: bool) -> None:
    """At the tokens its footer counts it reads whole; under them (by more than a value a row) it is refused in
    one line naming the file, before a value is decoded."""
    data = _parquet(rows, width, group=max(1, rows // groups))
    tokens = rows * width
    limits = ReadLimits(max_tokens=tokens - rows - 1 if under else tokens, max_rows=1_000)
    for read in (packing.read_dataset, packing.audit):
        if not under:
            read(io.BytesIO(data), name="d.parquet", limits=limits)
            continue
        with pytest.raises(DatasetError) as raised:
            read(io.BytesIO(data), name="d.parquet", limits=limits)
        assert str(raised.value).startswith("d.parquet: ") and "\n" not in str(raised.value)


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("writer", ["file", "stream"])
def test_a_compressed_arrow_batch_is_bounded_as_it_is_read(tmp_path: Path, compression: str, writer: str) -> None:
    """50 MB of zeros compressed to a few KB: refused once pyarrow has decoded the batch past ``max_bytes``."""
    count = 50_000_000
    column = pa.LargeListArray.from_arrays(pa.array(np.array([0, count])), pa.array(np.zeros(count, np.int8)))
    table = pa.table({"input_ids": column})
    path = tmp_path / "zeros.arrow"
    new = pa.ipc.new_file if writer == "file" else pa.ipc.new_stream
    with new(path, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as sink:
        sink.write_table(table)
    assert path.stat().st_size < 1 << 20
    for read in (packing.read_dataset, packing.audit):
        with pytest.raises(LimitError, match=r"holds more than the limit of 10,000,000 bytes once read"):
            read(str(path), limits=ReadLimits(max_bytes=10_000_000))
    assert len(packing.read_dataset(str(path), limits=ReadLimits(max_bytes=100_000_000))) == 1


def test_a_bomb_at_the_explorers_doors_ends_in_one_line() -> None:
    data = _parquet(4, 5_000_000 // 4 * 4, group=4)  # 20 M values, refused from the footer's own count
    expected = r"bomb.parquet: column 'input_ids' holds 20,000,000 values \(from the file's metadata\)"
    with pytest.raises(InputError, match=expected):
        Upload.of("bomb.parquet", data).load()
    with pytest.raises(DatasetError, match="20,000,000 values"):
        inspect_view.load_report(data, "bomb.parquet")


def _allocate(size: int) -> int:
    """In a worker: ``size`` bytes asked of pyarrow's allocator (what decoding a batch does)."""
    return int(pa.allocate_buffer(size).size)


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> object:
    """Real lanes of one worker each, the load lane's address space bounded to 3 GiB."""
    monkeypatch.setattr(workers, "WORKERS", 1)
    monkeypatch.setattr(workers, "LOAD_MEMORY_MB", 3072)
    workers.shutdown()
    yield
    workers.shutdown()


def test_decoding_past_the_load_workers_memory_limit_ends_in_one_line(one_worker: object) -> None:
    """What a footer or a batch hides is allocated in the worker, under ``RLIMIT_AS``: more than the limit is a
    MemoryError there and one line in the page, and the worker answers the next call."""
    assert workers.limit_memory(0) is False
    with pytest.raises(InputError, match=r"^it needed more than the 3,072 MB of memory the explorer gives it"):
        cache._loading(_allocate, 8 * 2**30)
    assert cache._loading(_allocate, 1 << 20) == 1 << 20
