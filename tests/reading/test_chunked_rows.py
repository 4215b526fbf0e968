"""Row files (JSON lines, JSON, CSV) decoded by pyarrow block by block give what a whole-file read gives, byte
for byte: the same samples (ids narrowed to int32 alike) for any block size, or an error naming the file (each
block's first); and the whole-file read gives the values (or the refusal) of the rows parsed by Python's
``json`` and ``csv`` and read at once by the row reader."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packing.core._samples import Samples
from packing.errors import DatasetError, SampleError
from packing.reading._cells import cells_row
from packing.reading._dataset import _check_columns, read_dataset
from packing.reading._reader import read_rows

WHOLE = 1 << 62
BIG = 2**31 + 7  # past int32: the samples are int64 then, however they are chunked

ids = st.lists(st.one_of(st.integers(0, 50), st.just(BIG)), max_size=6)
masked = ids.flatmap(
    lambda values: st.fixed_dictionaries(
        {
            "input_ids": st.just(values),
            "loss_mask": st.lists(st.integers(0, 1), min_size=len(values), max_size=len(values)),
        }
    )
)
labelled = ids.flatmap(
    lambda values: st.fixed_dictionaries(
        {
            "input_ids": st.just(values),
            "labels": st.lists(st.sampled_from([-100, 3, BIG]), min_size=len(values), max_size=len(values)),
        }
    )
)
pairs = st.fixed_dictionaries({"prompt": ids, "completion": ids})
good_row = st.one_of(ids, masked, labelled, pairs)
bad_row = st.sampled_from(
    [
        [1, "x"],
        [-3],
        [True],
        {"length": 4},
        {"note": 1},
        {"input_ids": [1, 2], "loss_mask": [1]},
        {"input_ids": [1], "labels": [-5]},
        {"prompt": [1]},
        "hello",
        None,
    ]
)
length_row = st.builds(lambda n: {"length": n}, st.integers(0, 9))
bad_line = st.sampled_from(["", "   ", '{"input_ids": [1,', "\ufeff[2]", "[3]\r"])


@st.composite
def json_lines(draw: Any) -> str:
    """A JSON lines text: rows of every token form (or lengths), with now and then a bad row or a bad line."""
    lengths = draw(st.booleans())
    rows = draw(st.lists(length_row if lengths else good_row, max_size=25))
    text = [json.dumps(row) for row in rows]
    for _ in range(draw(st.integers(0, 2))):
        extra = draw(st.one_of(bad_row.map(json.dumps), bad_line))
        text.insert(draw(st.integers(0, len(text))), extra)
    return "\n".join(text) + draw(st.sampled_from(["", "\n", "\n\n"]))


def _cells(row: Any) -> tuple[str, str, str]:
    if isinstance(row, list):
        return " ".join(map(str, row)), "", ""
    if "length" in row:
        return "", "", str(row["length"])
    return " ".join(map(str, row["input_ids"])), " ".join(map(str, row.get("loss_mask", []))), ""


@st.composite
def csv_text(draw: Any) -> str:
    """A CSV text of ids, masks and lengths, with now and then a bad cell, a bad line or a blank line."""
    lengths = draw(st.booleans())
    rows = draw(st.lists(length_row if lengths else st.one_of(ids, masked), max_size=25))
    lines = [",".join(_cells(row)) for row in rows]
    faults = ["1 x,,", ",,", "1 2,1,", "-4,,", "5,,3", ",,-1", "1,2", "", "  ,  ,  "]
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(faults)))
    return "input_ids,loss_mask,length\n" + "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


def _read(data: bytes, fmt: str, chunk: int, path: str | None = None) -> Samples | str:
    """The samples ``read_dataset`` reads, or its error's message and row."""
    source: Any = path if path is not None else io.BytesIO(data)
    try:
        return read_dataset(source, format=fmt, name=None if path else f"d.{fmt}", _chunk_bytes=chunk).samples
    except DatasetError as error:
        cause = error.cause
        return f"{error} | sample {cause.sample if isinstance(cause, SampleError) else None}"


def _at_once(data: bytes, fmt: str) -> Samples | str:
    """The rows parsed by Python's ``json`` or ``csv`` and read at once by the row reader (a reference that
    shares nothing with pyarrow's blocks), or its error."""
    label = f"d.{fmt}"
    try:
        if fmt == "csv":
            lines = list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
            header, body = [name.strip() for name in lines[0]], lines[1:]
            raw = [dict(zip(header, cells, strict=False)) for cells in body if any(cell.strip() for cell in cells)]
            rows = [cells_row(cells, index) for index, cells in enumerate(raw)]
        else:
            rows = None
            try:
                rows = json.loads(data.decode("utf-8-sig")) if fmt == "json" else None
                if not isinstance(rows, list) and fmt == "json":
                    raise ValueError("not a list of rows")
            except json.JSONDecodeError as error:
                if error.msg != "Extra data":
                    raise
            if rows is None:
                rows = [json.loads(line.decode("utf-8-sig")) for line in data.split(b"\n") if line.strip()]
        if not rows:
            raise DatasetError(label, None, "the file holds no samples")
        _check_columns(rows, label)
        return read_rows(rows)
    except (DatasetError, SampleError, ValueError) as error:
        return f"refused ({type(error).__name__})"


def _bytes(samples: Samples) -> tuple[Any, ...]:
    """Everything a Samples holds, byte for byte (a broadcast mask of ones as its values)."""

    def raw(values: Any) -> Any:
        return None if values is None else (values.dtype.str, np.ascontiguousarray(values).tobytes())

    return raw(samples.tokens), raw(samples.loss_mask), raw(samples.offsets), raw(samples.labels)


def _values(samples: Samples) -> tuple[Any, ...]:
    def listed(values: Any) -> Any:
        return None if values is None else np.asarray(values).tolist()

    return listed(samples.tokens), listed(samples.loss_mask), listed(samples.offsets), listed(samples.labels)


def _check(data: bytes, fmt: str, chunk: int, path: str | None = None) -> None:
    whole = _read(data, fmt, WHOLE)
    chunked = _read(data, fmt, chunk, path)
    if isinstance(whole, str) or isinstance(chunked, str):
        if path is not None and isinstance(chunked, str):  # named by its path instead
            chunked = chunked.replace(path, f"d.{fmt}")
        assert isinstance(chunked, str) and isinstance(whole, str), (chunked, whole)  # both refused
        assert chunked.startswith(f"d.{fmt}")  # naming the file (a row's error: its line, in its block)
    else:
        assert _bytes(chunked) == _bytes(whole)
        if whole.tokens is not None:  # narrowed as the ids fit: int32 unless one does not; labels at least as wide
            labels = whole.labels if whole.labels is not None else whole.tokens
            wide = max(int(np.max(whole.tokens, initial=0)), int(np.max(labels, initial=0))) > 2**31 - 1
            assert labels.dtype == (np.int64 if wide else np.int32)
            assert whole.tokens.dtype == (np.int64 if int(np.max(whole.tokens, initial=0)) > 2**31 - 1 else np.int32)
    before = _at_once(data, fmt)
    if isinstance(before, str) or isinstance(whole, str):
        assert isinstance(before, str) == isinstance(whole, str), (whole, before)
    else:
        assert _values(whole) == _values(before)


@settings(max_examples=150, deadline=None)
@given(text=json_lines(), chunk=st.integers(1, 300))
@example(text='[]\n{"input_ids": [2147483655], "labels": [3]}', chunk=1)  # wide ids, narrow labels
@example(text='{"input_ids": [1], "labels": [3]}\n[2147483655]', chunk=1)  # the ids widen after the labels
def test_json_lines_read_in_chunks_equal_the_whole_file(text: str, chunk: int) -> None:
    _check(text.encode(), "jsonl", chunk)


@settings(max_examples=40, deadline=None)
@given(text=json_lines(), chunk=st.integers(1, 300))
def test_json_lines_mapped_from_a_path_equal_the_whole_file(text: str, chunk: int) -> None:
    """A path's bytes are memory-mapped and let go chunk by chunk: the same samples and errors."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "d.jsonl")
        with open(path, "wb") as handle:
            handle.write(text.encode())
        _check(text.encode(), "jsonl", chunk, path)


@settings(max_examples=80, deadline=None)
@given(text=json_lines(), chunk=st.integers(1, 300))
def test_json_file_of_lines_read_in_chunks_equals_the_whole_file(text: str, chunk: int) -> None:
    _check(text.encode(), "json", chunk)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.one_of(good_row, bad_row), min_size=1, max_size=25), chunk=st.integers(1, 20_000))
def test_json_list_read_in_chunks_equals_the_whole_file(rows: list[Any], chunk: int) -> None:
    """A JSON list is parsed whole, its rows read (and let go) a chunk of about a KiB a row at a time."""
    _check(json.dumps(rows).encode(), "json", chunk)


@settings(max_examples=150, deadline=None)
@given(text=csv_text(), chunk=st.integers(1, 200))
def test_csv_read_in_chunks_equals_the_whole_file(text: str, chunk: int) -> None:
    _check(text.encode(), "csv", chunk)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.one_of(
            st.builds(lambda t: {"text": t}, st.text(max_size=12)),
            st.builds(lambda p, c: {"prompt": p, "completion": c}, st.text(max_size=6), st.text(max_size=6)),
            good_row,
        ),
        min_size=1,
        max_size=20,
    ),
    chunk=st.integers(1, 300),
)
def test_text_rows_tokenized_in_chunks_equal_the_whole_file(rows: list[Any], chunk: int) -> None:
    """Text rows (and token rows among them) through a tokenizer, chunk by chunk: the same samples."""
    data = "\n".join(json.dumps(row) for row in rows).encode()
    whole = read_dataset(io.BytesIO(data), format="jsonl", tokenizer="bytes", _chunk_bytes=WHOLE).samples
    chunked = read_dataset(io.BytesIO(data), format="jsonl", tokenizer="bytes", _chunk_bytes=chunk).samples
    assert _bytes(chunked) == _bytes(whole)
    before = read_rows([json.loads(line) for line in data.splitlines()], tokenizer="bytes")
    assert _values(whole) == _values(before)


def test_a_length_row_in_a_later_chunk_is_named_as_in_the_whole_file() -> None:
    """The first row of a chunk is not the first of the file: a row of the other kind is refused there."""
    data = b'[1]\n[2]\n{"length": 3}\n[4]\n'
    errors = {_read(data, "jsonl", chunk) for chunk in (1, 4, 8, WHOLE)}
    assert errors == {
        "d.jsonl, line 3: expected token ids like sample 0 (all rows have tokens or all have lengths only), "
        "got <a length only> | sample 2"
    }


@pytest.mark.parametrize("chunk", [1, 7, WHOLE])
def test_rows_without_a_usable_column_are_refused_as_in_the_whole_file(chunk: int) -> None:
    """Objects without one column the reader uses: refused as a file, even when the first chunk's rows fail."""
    data = b'{"a": 1}\n{"b": 2}\n{"c": [3]}\n'
    message = _read(data, "jsonl", chunk)
    assert message.startswith("d.jsonl: no usable columns; found 'a', 'b', 'c'")  # type: ignore[union-attr]
    assert _read(data + b'{"input_ids": [1]}\n', "jsonl", chunk).startswith("d.jsonl, line 1: expected")  # type: ignore[union-attr]


text_row = st.one_of(
    st.builds(lambda t: {"text": t}, st.text(max_size=12)),
    st.builds(lambda p, c: {"prompt": p, "completion": c}, st.text(max_size=6), st.text(max_size=6)),
)
bad_text_row = st.sampled_from([{"text": 5}, {"prompt": "a"}, {"text": "a", "prompt": "b"}, {"messages": []}])


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.one_of(text_row, good_row, bad_row, bad_text_row), min_size=1, max_size=16),
    chunk=st.integers(1, 200),
)
@example(rows=[{"length": 4}, {"text": ""}, {"text": 5}], chunk=1)  # a text row unlike the first, a bad one after
def test_text_and_token_rows_in_chunks_fail_as_the_whole_file(rows: list[Any], chunk: int) -> None:
    """With a tokenizer, text rows are tokenized before the other rows are read: a bad text row anywhere in the
    file is named before a bad token row, in chunks as whole, as the row reader names it for the rows at once."""
    data = "\n".join(json.dumps(row) for row in rows).encode()

    def read(size: int) -> Any:
        try:
            found = read_dataset(io.BytesIO(data), format="jsonl", name="d.jsonl", tokenizer="bytes", _chunk_bytes=size)
            return _bytes(found.samples)
        except DatasetError as error:
            return str(error)

    whole = read(WHOLE)
    chunked = read(chunk)
    assert chunked == whole or (isinstance(chunked, str) and isinstance(whole, str))  # each block's first error
    try:
        _check_columns(rows, "d.jsonl")
        before: Any = _values(read_rows(rows, tokenizer="bytes"))
    except SampleError as error:
        before = str(DatasetError.from_sample("d.jsonl", f"line {(error.sample or 0) + 1}", error))
    except DatasetError as error:
        before = str(error)
    assert isinstance(whole, str) == isinstance(before, str), (whole, before)  # refused alike (Arrow's nulls: keys)


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (WHOLE, "d.jsonl, line 4, 'text': expected a string, got 5"),
        (1, "d.jsonl, line 2, 'input_ids', position 0: expected a non-negative integer token id, got -3"),
    ],
)
def test_a_bad_text_row_comes_before_a_bad_token_row_of_its_block(chunk: int, expected: str) -> None:
    """Within a block, text rows are tokenized before the other rows are read (the row reader's rule); blocks
    are read in order, so a block's error comes before a later block's."""
    data = b'[1]\n[-3]\n{"text": "ok"}\n{"text": 5}\n'
    with pytest.raises(DatasetError) as refused:
        read_dataset(io.BytesIO(data), format="jsonl", name="d.jsonl", tokenizer="bytes", _chunk_bytes=chunk)
    assert str(refused.value) == expected
