"""Token ids of 2**31 and more: the command line widens to int64 by itself (the reader narrows to int32 where ids fit)
and ``--int64`` asks for int64 whatever the ids; the library's refusal names the file and line of the sample."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
from explorer.core import runs
from explorer.core.sources import Upload
from packing._cli import build_parser, main
from packing.errors import DatasetError

WIDE = 2**31 + 5


def _jsonl(rows: list[list[int]], blank_every: int = 0) -> str:
    lines = []
    for index, row in enumerate(rows):
        if blank_every and index % blank_every == 0:
            lines.append("")
        lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5), min_size=1, max_size=12),
    st.integers(0, 11),
    st.integers(0, 3),
)
def test_pack_widens_by_itself_and_the_library_names_the_line(
    tmp_path_factory: pytest.TempPathFactory, rows: list[list[int]], at: int, blank_every: int
) -> None:
    folder = tmp_path_factory.mktemp("wide")
    at = at % len(rows)
    rows[at] = [*rows[at], WIDE]
    source = folder / "ids.jsonl"
    text = _jsonl(rows, blank_every)
    source.write_text(text)
    output = folder / "blocks.parquet"
    assert main(["pack", str(source), "--max-seq-length", "8", "--output", str(output), "-q", "--no-shuffle"]) == 0
    table = pq.read_table(output)
    for name in ("input_ids", "labels", "position_ids"):
        assert table.schema.field(name).type == pa.list_(pa.int64())
    written = [t for block in table.column("input_ids").to_pylist() for t in block]
    assert WIDE in written
    line = [number for number, raw in enumerate(text.splitlines(), 1) if raw.strip()][at]
    with pytest.raises(DatasetError) as caught:
        packing.pack(packing.read_dataset(str(source)), 8, overflow="split")
    assert str(caught.value).startswith(f"{source}, line {line}, position {len(rows[at]) - 1}: expected a token id at")
    assert packing.pack(packing.read_dataset(str(source)), 8, overflow="split", int64=True).input_ids.dtype == np.int64


def test_the_summary_says_so_and_int64_is_a_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "ids.jsonl"
    source.write_text("[1, 2]\n[3]\n")
    output = tmp_path / "blocks.parquet"
    assert main(["pack", str(source), "--max-seq-length", "4", "--output", str(output)]) == 0
    assert "as int64" not in capsys.readouterr().out
    assert pq.read_table(output).schema.field("input_ids").type == pa.list_(pa.int32())
    assert main(["pack", str(source), "--max-seq-length", "4", "--output", str(output), "--int64"]) == 0
    assert pq.read_table(output).schema.field("input_ids").type == pa.list_(pa.int64())
    source.write_text(f"[1, {WIDE}]\n[3]\n")
    assert main(["pack", str(source), "--max-seq-length", "4", "--output", str(output)]) == 0
    assert "ids, labels and positions as int64 (an id is above 2**31 - 1)" in capsys.readouterr().out
    assert build_parser().parse_args(["pack", "x", "--max-seq-length", "4", "-o", "y.parquet", "--int64"]).int64
    assert "--no-int64" not in build_parser()._subparsers._group_actions[0].choices["pack"].format_help()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        ("ids.csv", f"input_ids\n1 2\n\n3 {WIDE}\n".encode(), "line 4, position 1"),
        ("ids.json", json.dumps([[1], {"input_ids": [WIDE]}]).encode(), "item 2, position 0"),
    ],
)
def test_the_place_in_every_kind_of_file(tmp_path: Path, name: str, data: bytes, where: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DatasetError, match=f"^{path}, {where}: expected a token id at most 2147483647"):
        packing.pack(packing.read_dataset(str(path)), 4)
    parquet = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"input_ids": [[1], [2], [WIDE, 3]]}), parquet)
    with pytest.raises(DatasetError, match=f"^{parquet}, row 3, position 0: "):
        packing.pack(packing.read_dataset([str(path), str(parquet)][1:]), 4)
    with pytest.raises(DatasetError, match=r"^up\.jsonl, sample 1, position 0: "):  # a file object is read once
        packing.pack(packing.read_dataset(io.BytesIO(f"[1]\n[{WIDE}]\n".encode()), name="up.jsonl"), 4)


def test_the_explorer_draws_wide_ids() -> None:
    loaded = Upload.of("ids.jsonl", f"[1, 2]\n[3, {WIDE}]\n".encode()).load()
    assert loaded.samples is not None
    layout = packing.plan(loaded.lengths, 4)
    drawn = runs.window(layout, loaded.samples, 0, 4, 0)
    assert WIDE in drawn.batch.input_ids.tolist()[0] + drawn.batch.input_ids.tolist()[-1]
