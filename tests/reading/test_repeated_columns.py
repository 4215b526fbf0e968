"""A table with two columns of one name (Parquet and Arrow files allow it): one line naming the file and the
column at every door (the library, ``pack``, ``compare``, ``audit``, the explorer's upload and Inspect tab),
never a ``KeyError`` from the schema."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import packing
import packing.reading
from explorer.core import audit as inspect_view
from explorer.core.parsing import InputError
from explorer.core.sources import Upload
from packing._cli import main
from packing.errors import DatasetError, SettingError

IDS = pa.array([[1, 2, 3], [4, 5]])


def _twice(*names: str) -> pa.Table:
    return pa.Table.from_arrays([IDS if name != "seq_lengths" else pa.array([[3], [2]]) for name in names], names=names)


def _write(table: pa.Table, path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
@pytest.mark.parametrize(
    ("names", "repeated"),
    [
        (("input_ids", "input_ids"), "input_ids"),
        (("input_ids", "seq_lengths", "seq_lengths"), "seq_lengths"),
        (("labels", "input_ids", "labels"), "labels"),
    ],
)
def test_every_door_names_the_repeated_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, names: tuple[str, ...], repeated: str
) -> None:
    path = _write(_twice(*names), tmp_path / f"twice{suffix}")
    expected = f"{path}: two columns named '{repeated}'; expected every column name once"
    with pytest.raises(DatasetError) as caught:
        packing.audit(str(path))
    assert str(caught.value) == expected
    sample_column = repeated in ("input_ids", "labels")  # seq_lengths is not a column samples are read from
    if sample_column:
        with pytest.raises(DatasetError) as caught:
            packing.read_dataset(str(path))
        assert str(caught.value) == expected
    commands = [["audit", str(path)]]
    if sample_column:
        commands += [
            ["pack", str(path), "--max-seq-length", "4", "--output", str(tmp_path / "out.parquet")],
            ["compare", str(path), "--max-seq-length", "4"],
        ]
    for command in commands:
        assert main(command) == 2
        captured = capsys.readouterr()
        assert captured.err == f"packing: error: {expected}\n", command
    data = path.read_bytes()
    name = path.name
    with pytest.raises(DatasetError, match=f"^{name}: two columns named '{repeated}'"):
        inspect_view.load_report(data, name)
    if sample_column:
        with pytest.raises(InputError, match=f"two columns named '{repeated}'"):
            Upload.of(name, data).load()


def test_a_column_the_reader_does_not_use_may_repeat(tmp_path: Path) -> None:
    table = pa.Table.from_arrays([IDS, pa.array(["a", "b"]), pa.array(["c", "d"])], names=["input_ids", "note", "note"])
    path = _write(table, tmp_path / "notes.parquet")
    assert packing.read_dataset(str(path)).lengths.tolist() == [3, 2]


def test_tables_given_as_they_are() -> None:
    table = _twice("input_ids", "input_ids")
    with pytest.raises(DatasetError, match=r"^<table>: two columns named 'input_ids'"):
        packing.audit(table)
    with pytest.raises(SettingError, match=r"^table: expected every column name once, got <two columns named"):
        packing.reading.read_table(table)


def test_json_lines_with_a_repeated_key_are_one_line() -> None:
    data = b'{"input_ids": [1], "input_ids": [2]}\n'
    with pytest.raises(DatasetError, match=r"^x\.jsonl: not a readable JSON file"):
        packing.audit(io.BytesIO(data), name="x.jsonl")
    assert packing.read_dataset(io.BytesIO(data), name="x.jsonl").lengths.tolist() == [1]  # the last, as json does
