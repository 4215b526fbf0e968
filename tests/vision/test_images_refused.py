"""Rows with images where no vision config reads them are refused at every door that reads rows, naming the sample
and the field, never read as text (the one reader refuses them; ``collate(vision=...)`` reads them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import packing
from packing.errors import DatasetError, SampleError

ROWS: list[Any] = [[1, 2], {"input_ids": [3]}, {"input_ids": [5, 5], "image_grid_thw": [[1, 2, 2]]}]
EXPECTED = (
    r"^sample 2, 'image_grid_thw': expected no images or videos without a vision config \(vision=\.\.\.\), "
    r"got <1 grid>$"
)


def _doors(folder: Path) -> dict[str, Callable[[], Any]]:
    datasets = pytest.importorskip("datasets")
    pt = pytest.importorskip("packing.torch")
    import pyarrow as pa

    import packing.hf

    dicts = [row if isinstance(row, dict) else {"input_ids": row} for row in ROWS]
    columns = {name: [row.get(name) for row in dicts] for name in dicts[2]}  # every row's columns
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in dicts))
    return {
        "pack": lambda: packing.pack(ROWS, 8),
        "stream": lambda: list(packing.stream(iter(ROWS), 8)),
        "read_rows": lambda: packing.read_rows(ROWS),
        "read_table": lambda: packing.reading.read_table(pa.table(columns)),
        "read_dataset": lambda: packing.pack(packing.read_dataset(path), 8),
        "hf.pack_batch": lambda: packing.hf.pack_batch(columns, 8),
        "hf.pack_dataset": lambda: packing.hf.pack_dataset(datasets.Dataset.from_dict(columns), 8),
        "collate": lambda: pt.collate(ROWS),
        "collate_fixed": lambda: pt.collate_fixed(8)(ROWS),
    }


@pytest.mark.parametrize(
    "door",
    ["pack", "stream", "read_rows", "read_table", "hf.pack_batch", "hf.pack_dataset", "collate", "collate_fixed"],
)  # fmt: skip
def test_images_without_a_vision_config_are_refused_naming_the_sample(door: str, tmp_path: Path) -> None:
    with pytest.raises(SampleError, match=EXPECTED):
        _doors(tmp_path)[door]()


def test_a_file_of_them_is_refused_naming_its_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"rows\.jsonl, line 3, 'image_grid_thw': expected no images or videos"):
        _doors(tmp_path)["read_dataset"]()


def test_the_command_line_refuses_them_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from packing._cli import main

    source = tmp_path / "rows.jsonl"
    source.write_text('{"input_ids": [1]}\n{"input_ids": [5], "pixel_values": [[0.5, 0.25]]}\n')
    assert main(["pack", str(source), "--output", str(tmp_path / "out.parquet"), "--max-seq-length", "8"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "line 2" in error[0] and "'pixel_values': expected no images or videos" in error[0]


@pytest.mark.parametrize("suffix", ["parquet", "arrow", "csv"])
def test_files_of_every_format_refuse_them(suffix: str, tmp_path: Path) -> None:
    """The image grids are read beside the reader's columns (never the pixels), so a Parquet, Arrow or CSV file
    with images is refused as a JSON lines file is."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.feather
    import pyarrow.parquet

    grids = [None, None, [[1, 2, 2]]]
    table = pa.table(
        {"input_ids": [[1, 2], [3], [5, 5]], "image_grid_thw": grids, "pixel_values": [None, None, [[0.5]]]}
    )
    path = tmp_path / f"rows.{suffix}"
    if suffix == "parquet":
        pyarrow.parquet.write_table(table, path)
    elif suffix == "arrow":
        pyarrow.feather.write_feather(table, path)
    else:
        text = [json.dumps(ids) for ids in table.column("input_ids").to_pylist()]
        cells = pa.table({"input_ids": text, "image_grid_thw": ["" if g is None else json.dumps(g) for g in grids]})
        pyarrow.csv.write_csv(cells, path)
    with pytest.raises(DatasetError, match=r"'image_grid_thw': expected no images or videos without a vision config"):
        packing.read_dataset(path)


def test_tensor_rows_are_refused_in_one_line_and_an_empty_grid_is_no_image() -> None:
    torch = pytest.importorskip("torch")
    row = {"input_ids": torch.tensor([4, 5, 5, 6]), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    with pytest.raises(SampleError, match=r"^sample 0, 'image_grid_thw': expected no images or videos"):
        packing.pack([row], 8)
    empty = {"input_ids": torch.tensor([4, 5]), "image_grid_thw": torch.zeros(0, 3, dtype=torch.int64)}
    assert packing.pack([empty], 4).input_ids.tolist() == [[4, 5, 0, 0]]


def test_an_arrow_column_of_empty_grids_then_a_grid_is_refused_at_the_grid() -> None:
    import pyarrow as pa

    table = pa.table({"input_ids": [[1], [4, 5, 5, 6]], "image_grid_thw": [[[]], [[1, 2, 2]]]})
    with pytest.raises(SampleError, match=r"^sample 1, 'image_grid_thw': expected no images"):
        packing.reading.read_table(table)
