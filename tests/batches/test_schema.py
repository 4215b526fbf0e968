"""One schema makes every output: the writers, the datasets adapter, the command line and the docs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from packing import pack
from packing._cli import build_parser, main
from packing.batches import COLUMNS
from packing.batches._schema import NAMES, UNIT_GRID, arrow_schema, markdown_table
from packing.layouts._export import write_jsonl, write_parquet

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = [[1, 2, 3], {"prompt": [4, 5], "completion": [6, 7]}, {"input_ids": [8, 9], "loss_mask": [1, 0]}]


def test_columns_are_the_six_in_order_with_their_dtypes() -> None:
    assert NAMES == ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids", "seq_lengths")
    batch = pack(SAMPLES, 4)
    for column in COLUMNS[:-1]:
        assert getattr(batch, column.name).dtype == np.dtype(column.dtype), column.name


def test_every_writer_gives_the_same_table(tmp_path: Path) -> None:
    batch = pack(SAMPLES, 4)
    table = batch.to_arrow()
    assert table.schema == arrow_schema()
    write_parquet(batch, tmp_path / "b.parquet")
    write_jsonl(batch, tmp_path / "b.jsonl")
    assert pq.read_table(tmp_path / "b.parquet").equals(table)
    lines = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert lines == table.to_pylist() == [batch.block(b) for b in range(batch.num_blocks)]
    assert [batch.block(b) for b in range(batch.num_blocks)] == lines


def test_the_datasets_adapter_and_the_cli_use_it(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from packing.hf import pack_batch, pack_dataset

    rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]
    expected = pack(rows, 4).to_arrow(padding=False)  # the datasets adapters write real tokens only, as TRL does
    assert pack_dataset(datasets.Dataset.from_list(rows), 4, shuffle=False).data.table.equals(expected)
    assert pack_batch({"input_ids": [[1, 2, 3], [4, 5]]}, 4) == expected.to_pydict()
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert (
        main(["pack", str(source), "--max-seq-length", "4", "--no-shuffle", "-q", "-o", str(tmp_path / "o.parquet")])
        == 0
    )
    assert pq.read_table(tmp_path / "o.parquet").to_pydict() == pack(rows, 4).to_arrow().to_pydict()  # padded


def test_help_and_docs_list_the_schema() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert ", ".join(NAMES) in commands["pack"].description
    guide = (ROOT / "docs" / "guides" / "outputs.md").read_text(encoding="utf-8")
    assert markdown_table() in guide
    assert markdown_table(UNIT_GRID) in guide  # the columns of blocks of pairs and groups
