"""Files whose metadata lies about what they hold: a Parquet footer that claims fewer values, bytes or rows than
its pages hold, and an Arrow IPC batch compressed from gigabytes to kilobytes. The bounds a server passes
(``ReadLimits``) are checked against what will be decoded, before it is: the pages' own headers, the buffers' own
decoded lengths."""

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
from packing.errors import DatasetError, LimitError
from packing.reading.limits import ReadLimits, parquet_pages
from tests.helpers.thrift import parquet_with_footer

LIES = {
    "values": (4, 1, 3, 5),  # every column chunk's num_values
    "uncompressed": (4, 1, 3, 6),  # and total_uncompressed_size
    "rows": (3,),  # the file's num_rows
    "group rows": (4, 3),  # every row group's num_rows
}


def _parquet(rows: int, width: int, seed: int = 0, group: int | None = None) -> bytes:
    rng = np.random.default_rng(seed)
    values = pa.array(rng.integers(0, 50, rows * width).astype(np.int32))
    column = pa.FixedSizeListArray.from_arrays(values, width).cast(pa.list_(pa.int32()))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"input_ids": column}), buffer, compression="zstd", row_group_size=group or rows)
    return buffer.getvalue()


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 300),
    st.sets(st.sampled_from(sorted(LIES)), min_size=1),
    st.integers(1, 9),
    st.integers(1, 3),
)
def test_a_footer_that_claims_less_than_its_pages_hold_is_refused(
    rows: int, width: int, lies: set[str], divide: int, groups: int
) -> None:
    data = _parquet(rows, width, group=max(1, rows // groups))
    for lie in sorted(lies):
        data = parquet_with_footer(data, LIES[lie], lambda value, d=divide: max(value // (d + 1), 0))
    limits = ReadLimits(max_tokens=rows * width + rows, max_bytes=1 << 30, max_rows=1_000)
    understated = "values" in lies or _pages_exceed(data)  # a smaller byte count the pages still fit in is no lie
    readers = [
        lambda: packing.read_dataset(io.BytesIO(data), name="lie.parquet", limits=limits),
        lambda: packing.audit(io.BytesIO(data), name="lie.parquet", limits=limits),
    ]
    for read in readers:
        try:
            read()
        except DatasetError as error:  # one line: the lie named, or the pages the reader could not make sense of
            text = str(error)
            assert text.startswith("lie.parquet") and "\n" not in text
            if understated:
                assert "a footer that does not match its data" in text
        else:
            assert not understated  # values and bytes are checked against the pages


def _pages_exceed(data: bytes) -> bool:
    """Whether some column chunk's pages hold more bytes than the footer says (brute force over the chunks)."""
    footer = pq.ParquetFile(io.BytesIO(data)).metadata
    for group in range(footer.num_row_groups):
        chunk = footer.row_group(group).column(0)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        if parquet_pages(io.BytesIO(data), start, chunk.total_compressed_size)[1] > chunk.total_uncompressed_size:
            return True
    return False


def test_the_pages_say_what_the_footer_should() -> None:
    data = _parquet(30, 200, group=10)
    footer = pq.ParquetFile(io.BytesIO(data)).metadata
    for group in range(footer.num_row_groups):
        chunk = footer.row_group(group).column(0)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        values, decoded = parquet_pages(io.BytesIO(data), start, chunk.total_compressed_size)
        assert values == chunk.num_values == 2_000
        assert decoded <= chunk.total_uncompressed_size  # the headers themselves are counted there too


def test_a_lying_footer_at_the_explorers_doors() -> None:
    data = parquet_with_footer(_parquet(4, 5_000_000 // 4 * 4, group=4), LIES["values"], lambda value: 10)
    expected = "lie.parquet: column 'input_ids': its pages hold 20,000,000 values"
    with pytest.raises(InputError, match=expected):
        Upload.of("lie.parquet", data).load()
    with pytest.raises(DatasetError, match=expected):
        inspect_view.load_report(data, "lie.parquet")


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("writer", ["file", "stream"])
def test_a_compressed_arrow_batch_is_bounded_from_its_headers(tmp_path: Path, compression: str, writer: str) -> None:
    """50 MB of zeros compressed to a few KB: refused from the decoded lengths its buffers start with, before
    decompressing (measured by hand on a 1.5 GB batch of 46 KB: peak RSS 1,606 MB before, 166 MB after)."""
    count = 50_000_000
    column = pa.LargeListArray.from_arrays(pa.array(np.array([0, count])), pa.array(np.zeros(count, np.int8)))
    table = pa.table({"input_ids": column})
    path = tmp_path / "zeros.arrow"
    new = pa.ipc.new_file if writer == "file" else pa.ipc.new_stream
    with new(path, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as sink:
        sink.write_table(table)
    assert path.stat().st_size < 1 << 20
    message = r"holds more than the limit of 10,000,000 bytes once read \(from its batches' headers\)"
    for read in (packing.read_dataset, packing.audit):
        with pytest.raises(LimitError, match=message):
            read(str(path), limits=ReadLimits(max_bytes=10_000_000))
    assert len(packing.read_dataset(str(path), limits=ReadLimits(max_bytes=100_000_000))) == 1
