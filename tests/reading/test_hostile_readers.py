"""Hostile inputs to every reader (issue 24): deep JSON, special files, bombs, ids past int64."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packing import read_dataset
from packing._cli import main
from packing.errors import DatasetError, SettingError
from packing.layouts.audit import audit, read_packed
from packing.reading._limits import ReadLimits, open_input, scan_json

ROOT = Path(__file__).resolve().parents[2]


def _deep(depth: int) -> bytes:
    return b'{"input_ids": ' + b"[" * depth + b"]" * depth + b"}\n"


def _python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _one_clean_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode not in (139, -11), result.stderr
    assert "Segmentation fault" not in result.stderr and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------- deep JSON


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("depth", [10_000, 20_000])
def test_audit_of_deep_jsonl_exits_with_one_line_not_a_segfault(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_bytes(_deep(depth))  # 20 KB / 40 KB: pyarrow.json segfaulted on it
    result = _python("", "-m", "packing", "audit", str(path), cwd=tmp_path)
    line = _one_clean_line(result)
    assert result.returncode == 2
    assert (
        line == f"packing: error: {path}, line 1: JSON nested too deeply (more than 64 levels; refused before parsing)"
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_read_packed_and_read_dataset_of_deep_json_exit_cleanly(tmp_path: Path) -> None:
    for name in ("deep.jsonl", "deep.json"):
        (tmp_path / name).write_bytes(_deep(20_000))
    code = (
        "import sys\n"
        "from packing import read_dataset\n"
        "from packing.layouts.audit import read_packed\n"
        "from packing.errors import DatasetError\n"
        "for read, name in [(read_packed, 'deep.jsonl'), (read_packed, 'deep.json'), (read_dataset, 'deep.jsonl'),\n"
        "                   (read_dataset, 'deep.json')]:\n"
        "    try:\n"
        "        read(name)\n"
        "    except DatasetError as error:\n"
        "        print(error)\n"
    )
    result = _python(code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 4
    assert all("nested too deeply (more than 64 levels" in line for line in lines)


def test_the_json_module_recursion_is_a_dataset_error() -> None:
    """With the scan's limit raised past Python's recursion limit, json.loads's RecursionError is worded too."""
    limits = ReadLimits(max_depth=1_000_000)
    for name in ("deep.jsonl", "deep.json"):
        with pytest.raises(DatasetError, match=r"JSON nested too deeply$"):
            read_dataset(io.BytesIO(_deep(100_000)), name=name, limits=limits)


def test_a_deep_messages_cell_in_csv_is_refused() -> None:
    cell = "[" * 5_000 + "]" * 5_000
    with pytest.raises(DatasetError, match=r"nested too deeply \(more than 64 levels"):
        read_dataset(io.BytesIO(f'messages\n"{cell}"\n'.encode()), name="chat.csv")


def test_brackets_in_strings_do_not_count_and_an_open_quote_hides_nothing() -> None:
    text = json.dumps({"input_ids": [1, 2], "note": '[[[{"' * 500 + "\\"}).encode() + b"\n"
    assert read_dataset(io.BytesIO(text), name="notes.jsonl").lengths.tolist() == [2]
    assert audit(io.BytesIO(text), name="notes.jsonl").num_blocks == 1
    hidden = b'{"note": "open\n' + _deep(100)  # the quote never closes on its line: line 2 is scanned as JSON
    with pytest.raises(DatasetError, match="line 2: JSON nested too deeply"):
        scan_json(hidden, "hidden.jsonl")


def test_a_line_longer_than_pyarrows_block_is_audited(tmp_path: Path) -> None:
    ids = list(range(1, 400_001))  # one block of ~2.7 MB on one line: pyarrow's default 1 MiB block refused it
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"input_ids": ids, "seq_lengths": [len(ids)]}) + "\n")
    report = audit(path)
    assert report.tokens == len(ids) and report.clean


def test_line_and_row_limits_of_json_lines() -> None:
    data = b"".join(json.dumps({"input_ids": [1] * n}).encode() + b"\n" for n in (1, 2, 300))
    with pytest.raises(DatasetError, match="line 3: a line longer than the limit of 100 bytes"):
        read_dataset(io.BytesIO(data), name="d.jsonl", limits=ReadLimits(max_line_bytes=100))
    with pytest.raises(DatasetError, match="holds 3 lines, more than the limit of 2"):
        audit(io.BytesIO(data), name="d.jsonl", limits=ReadLimits(max_rows=2))


# ---------------------------------------------------------------- special files


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["x.jsonl", "x.parquet", "x.csv"])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    os.mkfifo(path)  # no writer: opening it for reading blocked forever
    with pytest.raises(DatasetError, match="is a FIFO"):
        read_dataset(path)
    if not name.endswith(".csv"):
        with pytest.raises(DatasetError, match="is a FIFO"):
            audit(path)
    assert main(["compare", str(path), "--max-seq-length", "8"]) == 2


@pytest.mark.timeout(30)
def test_a_symlink_to_dev_zero_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "zeros.jsonl"
    path.symlink_to("/dev/zero")  # read until memory ran out
    with pytest.raises(DatasetError, match=r"zeros\.jsonl: is a device, expected a regular file"):
        read_dataset(path)
    with pytest.raises(DatasetError, match="is a device"):
        read_packed(path)
    assert main(["audit", str(path)]) == 2
    assert main(["pack", str(path), "--max-seq-length", "8", "--output", str(tmp_path / "o.parquet")]) == 2
    assert capsys.readouterr().err.count("is a device, expected a regular file") == 2


def test_the_opener_refuses_directories_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="is a directory"):
        open_input(tmp_path, "folder")
    with pytest.raises(DatasetError, match="a folder without dataset files"):
        audit(tmp_path)  # a folder of shards, here empty
    with pytest.raises(DatasetError, match="no such file"):
        open_input(tmp_path / "missing.jsonl", "missing.jsonl")
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="no such file"):
        read_dataset(tmp_path / "dangling.jsonl")


# ---------------------------------------------------------------- bounds before decoding


def _zeros_parquet(path: Path, count: int, *, corrupt: bool) -> None:
    """One row of ``count`` zeros (a few KB: RLE); with ``corrupt``, its pages overwritten so decoding fails."""
    table = pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array([0, count]), pa.array(np.zeros(count)))})
    table = table.cast(pa.schema([("input_ids", pa.large_list(pa.int64()))]))
    pq.write_table(table, path)
    if corrupt:
        chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
        start = min(filter(None, [chunk.dictionary_page_offset, chunk.data_page_offset]))
        data = bytearray(path.read_bytes())
        data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
        path.write_bytes(bytes(data))


def test_a_parquet_bomb_is_refused_from_its_metadata(tmp_path: Path) -> None:
    path = tmp_path / "bomb.parquet"
    _zeros_parquet(path, 2_000_000, corrupt=True)
    assert path.stat().st_size < 10_000
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        read_dataset(path)  # without limits the pages are decoded (and found corrupt here)
    limits = ReadLimits(max_tokens=1_000_000)
    message = r"column 'input_ids' holds 2,000,000 values \(from the file's metadata\), more than the limit"
    with pytest.raises(DatasetError, match=message):
        read_dataset(path, limits=limits)  # never decoded: the corrupt pages are not reached
    with pytest.raises(DatasetError, match=message):
        audit(path, limits=limits)


def test_parquet_rows_and_uncompressed_bytes_from_metadata(tmp_path: Path) -> None:
    path = tmp_path / "blocks.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2]] * 5_000, "seq_lengths": [[2]] * 5_000}), path)
    with pytest.raises(DatasetError, match="holds 5,000 blocks, more than the limit of 1,000"):
        read_packed(path, limits=ReadLimits(max_rows=1_000))
    with pytest.raises(DatasetError, match="once uncompressed"):
        read_dataset(path, limits=ReadLimits(max_bytes=100))
    assert read_packed(path, limits=ReadLimits(max_rows=5_000, max_tokens=10_000)).num_blocks == 5_000


def test_a_table_of_too_many_blocks_is_refused() -> None:
    table = pa.table({"input_ids": pa.array([[]] * 10_000, pa.list_(pa.int64()))})
    with pytest.raises(DatasetError, match="holds 10,000 blocks, more than the limit of 100"):
        audit(table, limits=ReadLimits(max_rows=100))
    with pytest.raises(DatasetError, match="column 'input_ids' holds 6 values, more than the limit of 5"):
        read_packed(pa.table({"input_ids": [[1, 2, 3], [4, 5, 6]]}), limits=ReadLimits(max_tokens=5))


def test_json_bytes_are_bounded_before_parsing() -> None:
    junk = b"not json at all " * 100
    for name in ("d.jsonl", "d.json", "d.csv"):
        with pytest.raises(DatasetError, match="holds 1,600 bytes, more than the limit of 1,000"):
            read_dataset(io.BytesIO(junk), name=name, limits=ReadLimits(max_bytes=1_000))
    with pytest.raises(DatasetError, match="holds 1,600 bytes"):
        audit(io.BytesIO(junk), name="d.jsonl", limits=ReadLimits(max_bytes=1_000))

    reader, writer = os.pipe()  # a stream with no size to ask: read up to one byte past the limit
    os.write(writer, junk)
    os.close(writer)
    with open(reader, "rb") as stream, pytest.raises(DatasetError, match="more than the limit of 1,000 bytes"):
        read_dataset(stream, name="d.jsonl", limits=ReadLimits(max_bytes=1_000))


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("huge.json", b'{"lengths": [1000000000000]}'),
        ("huge.csv", b"length\n1000000000000\n"),
        ("huge.jsonl", b'{"length": 1000000000000}\n'),
    ],
)
def test_a_lengths_only_input_is_bounded_by_the_tokens_it_stands_for(name: str, data: bytes) -> None:
    assert read_dataset(io.BytesIO(data), name=name).lengths.tolist() == [10**12]
    with pytest.raises(DatasetError, match="holds 1,000,000,000,000 tokens, more than the limit of 1,000,000"):
        read_dataset(io.BytesIO(data), name=name, limits=ReadLimits(max_tokens=10**6))


def test_lengths_only_parquet_and_histograms_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"length": [10**12, 5]}), path)
    with pytest.raises(DatasetError, match="holds 1,000,000,000,005 tokens"):
        read_dataset(path, limits=ReadLimits(max_tokens=10**6))
    histogram = json.dumps({"histogram": [0, 0, 0, 2**31]}).encode()  # expanded, 16 GB of lengths
    with pytest.raises(DatasetError, match="holds 2,147,483,648 sequences, more than the limit of 1,000,000"):
        read_dataset(io.BytesIO(histogram), name="h.json", limits=ReadLimits(max_rows=10**6))
    with pytest.raises(DatasetError, match="holds 6,442,450,944 tokens"):
        read_dataset(io.BytesIO(histogram), name="h.json", limits=ReadLimits(max_tokens=10**6))


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("huge.json", b'{"lengths": [1000000000000]}'),
        ("huge.csv", b"length\n1000000000000\n"),
        ("h.json", b'{"histogram": [0, 2, 0, 0]}'),
    ],
)
def test_lengths_only_input_has_its_own_token_bound(name: str, data: bytes) -> None:
    # a server allows few tokens but lengths standing for many (planning costs O(sequences)): max_length_tokens
    roomy = ReadLimits(max_tokens=1, max_length_tokens=10**13)
    assert read_dataset(io.BytesIO(data), name=name, limits=roomy).kind == "lengths"
    with pytest.raises(DatasetError, match=r"tokens, more than the limit of 1$"):
        read_dataset(io.BytesIO(data), name=name, limits=ReadLimits(max_tokens=10**13, max_length_tokens=1))
    with pytest.raises(DatasetError, match="holds 2 tokens, more than the limit of 1"):  # token data: max_tokens
        read_dataset(io.BytesIO(b"[[1, 2]]"), name="t.json", limits=roomy)


def test_json_values_are_counted_before_parsing() -> None:
    wide = b"[" + b"0," * 99 + b"0]"  # 100 values
    limits = ReadLimits(max_values=50)
    with pytest.raises(DatasetError, match=r"w.json: holds about 100 values, more than the limit of 50 \(refused"):
        read_dataset(io.BytesIO(b"[" + wide + b"]"), name="w.json", limits=limits)
    with pytest.raises(DatasetError, match="holds about 100 values"):
        read_dataset(io.BytesIO(b'{"input_ids": ' + wide + b"}\n"), name="w.jsonl", limits=limits)
    with pytest.raises(DatasetError, match="holds about 100 values"):
        audit(io.BytesIO(wide + b"\n"), name="w.jsonl", limits=limits)
    commas_in_text = b'{"text": "' + b"," * 500 + b'"}\n'  # commas inside strings are no values
    assert scan_json(commas_in_text, "t.jsonl", limits).rows == 1
    assert len(read_dataset(io.BytesIO(b"[" + wide + b"]"), name="w.json", limits=ReadLimits(max_values=101))) == 1


@pytest.mark.parametrize("name", ["sum.csv", "sum.jsonl"])
def test_lengths_adding_up_past_int64_are_refused(tmp_path: Path, name: str) -> None:
    rows = [2**62, 2**62, 1]  # their running sum wrapped to a negative offset
    text = "length\n" + "".join(f"{n}\n" for n in rows) if name.endswith(".csv") else ""
    text = text or "".join(json.dumps({"length": n}) + "\n" for n in rows)
    line = 3 if name.endswith(".csv") else 2  # the second sample: a header line comes first in CSV
    with pytest.raises(DatasetError, match=f"line {line}, 'length': expected lengths adding up to less than 2"):
        read_dataset(io.BytesIO(text.encode()), name=name)
    path = tmp_path / "sum.parquet"
    pq.write_table(pa.table({"length": rows}), path)
    with pytest.raises(DatasetError, match="row 2, 'length': expected lengths adding up"):
        read_dataset(path)


def test_limits_are_checked() -> None:
    with pytest.raises(SettingError, match="max_tokens: expected None or an integer >= 1"):
        ReadLimits(max_tokens=0)
    with pytest.raises(SettingError, match="max_depth"):
        ReadLimits(max_depth=True)
    with pytest.raises(SettingError, match="limits"):
        read_dataset(io.BytesIO(b"[[1]]"), name="a.json", limits={"max_tokens": 5})  # type: ignore[arg-type]


# ---------------------------------------------------------------- ids outside int32 / int64


def test_uint64_ids_past_int64_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    ids = pa.array([[1, 2, 3], [4, 2**64 - 1]], pa.list_(pa.uint64()))
    pq.write_table(pa.table({"input_ids": ids, "seq_lengths": [[3], [2]]}), path)
    with pytest.raises(DatasetError, match=r"row 2: column 'input_ids': expected integers that fit in int64, got 1844"):
        audit(path)  # read as int64 they wrapped to -1: accepted silently
    assert main(["audit", str(path)]) == 2


def test_ids_outside_int32_are_a_finding() -> None:
    table = pa.table({"input_ids": [[1, 2**31, 3], [4, 5]], "seq_lengths": [[3], [2]]})
    report = audit(table)
    found = report.finding("token_id_out_of_range")
    assert found is not None and found.count == 1 and found.examples == ((0, 1),)
    assert audit(pa.table({"input_ids": [[1, 2**31 - 1]], "seq_lengths": [[2]]})).clean


def test_a_nested_type_within_the_depth_limit_is_one_short_line() -> None:
    depth = 60
    data = b'{"input_ids": ' + b"[" * depth + b"1" + b"]" * depth + b', "seq_lengths": [1]}\n'
    with pytest.raises(DatasetError, match="expected lists of integers, got list<item: list") as caught:
        audit(io.BytesIO(data), name="nested.jsonl")
    assert len(str(caught.value)) <= 150
    with pytest.raises(DatasetError, match="expected a non-negative integer token id") as caught:
        read_dataset(io.BytesIO(data), name="nested.jsonl")
    assert len(str(caught.value)) <= 150


def test_a_bomb_in_a_column_named_with_a_dot_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "dotted.parquet"
    bomb = pa.LargeListArray.from_arrays(pa.array([0, 500_000]), pa.array(np.zeros(500_000, dtype=np.int64)))
    pq.write_table(pa.table({"input_ids": [[1, 2]], "seq_lengths": [[2]], "a.b": bomb}), path)
    with pytest.raises(DatasetError, match=r"column 'a\.b' holds 500,000 values"):
        audit(path, limits=ReadLimits(max_tokens=1_000))


@pytest.mark.parametrize("writer", ["file", "stream"])
def test_arrow_ipc_is_bounded_batch_by_batch(tmp_path: Path, writer: str) -> None:
    path = tmp_path / "blocks.arrow"
    table = pa.table({"input_ids": [[1, 2]] * 3_000, "seq_lengths": [[2]] * 3_000})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    new = pa.ipc.new_file if writer == "file" else pa.ipc.new_stream
    with new(path, table.schema, options=options) as sink:
        for batch in table.to_batches(max_chunksize=1_000):
            sink.write_batch(batch)
    assert audit(path).num_blocks == 3_000
    with pytest.raises(DatasetError, match="holds 2,000 blocks, more than the limit of 1,500"):
        audit(path, limits=ReadLimits(max_rows=1_500))
    with pytest.raises(DatasetError, match="more than the limit of 20,000 bytes once read"):
        audit(path, limits=ReadLimits(max_bytes=20_000))


@pytest.mark.parametrize("line", [b"null", b'"text"', b"5", b"true", b"[null]", b"{}"])
def test_a_line_pyarrow_cannot_read_is_named_not_a_crash(line: bytes) -> None:
    """``pyarrow.json`` crashes the process on a bare ``null`` line: such a block is read by Python's ``json``,
    and the reader names the line (in a child process, so a crash would show as a failed exit)."""
    code = (
        "import io, sys, packing\n"
        "try:\n"
        f"    packing.read_dataset(io.BytesIO(b'{{\"input_ids\": [1]}}\\n' + {line!r} + b'\\n'), name='d.jsonl')\n"
        "except packing.DatasetError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-400:]
    assert result.stdout.startswith("d.jsonl, line 2") and result.stdout.count("\n") == 1, result.stdout
