"""Preference pairs and completion groups at every door: the same blocks (and unit columns) from ``pack``, a file
read by ``read_dataset``, the ``datasets`` adapter, a stream, Ray and the command line, in both layouts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packing
import packing.hf
from packing._cli import main
from packing.core._pairs_groups import UNIT_COLUMNS
from tests.helpers.units import random_units

LENGTH = 64
NAMES = ("input_ids", "labels", "position_ids", "sequence_ids", *UNIT_COLUMNS)


def _rows() -> list[dict[str, Any]]:
    return random_units(9, count=12)


PARTS = ("prompt", "chosen", "rejected", "completions")


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Columns of equal length (a null where a row lacks a unit's part), as a table holds mixed pairs and groups."""
    return {name: [row.get(name) for row in rows] for name in PARTS}


def _expected(share_prompt: bool) -> dict[str, list[Any]]:
    table = packing.pack(_rows(), LENGTH, share_prompt=share_prompt).to_arrow(padding=False)
    return {name: table.column(name).to_pylist() for name in (*NAMES, "seq_lengths")}


def _jsonl(folder: Path) -> Path:
    path = folder / "units.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _rows()))
    return path


@pytest.mark.parametrize("share_prompt", [False, True])
def test_read_dataset_then_pack(share_prompt: bool, tmp_path: Path) -> None:
    data = packing.read_dataset(_jsonl(tmp_path), share_prompt=share_prompt)
    table = packing.pack(data, LENGTH, share_prompt=share_prompt).to_arrow(padding=False)
    assert {name: table.column(name).to_pylist() for name in (*NAMES, "seq_lengths")} == _expected(share_prompt)


@pytest.mark.parametrize("share_prompt", [False, True])
def test_the_datasets_adapter(share_prompt: bool) -> None:
    datasets = pytest.importorskip("datasets")
    source = datasets.Dataset.from_dict(_columns(_rows()))
    packed = packing.hf.pack_dataset(source, LENGTH, share_prompt=share_prompt, shuffle=False)
    assert {name: packed[name] for name in (*NAMES, "seq_lengths")} == _expected(share_prompt)
    batch = packing.hf.pack_batch(_columns(_rows()), LENGTH, share_prompt=share_prompt)
    assert {name: batch[name] for name in (*NAMES, "seq_lengths")} == _expected(share_prompt)


@pytest.mark.parametrize("share_prompt", [False, True])
def test_a_stream_of_one_buffer(share_prompt: bool) -> None:
    blocks = list(packing.stream(_rows(), LENGTH, share_prompt=share_prompt, shuffle=False, buffer_size=100))
    expected = _expected(share_prompt)
    for name in NAMES:
        got = [block[name][: int(block["seq_lengths"].sum())].tolist() for block in blocks]
        assert got == expected[name], name


def test_a_stream_resumes_units(tmp_path: Path) -> None:
    rows = _rows() * 3
    whole = [block["input_ids"].tolist() for block in packing.stream(rows, LENGTH, share_prompt=True, buffer_size=7)]
    first = packing.stream(rows, LENGTH, share_prompt=True, buffer_size=7)
    taken = [next(first)["input_ids"].tolist() for _ in range(3)]
    state = first.state_dict()
    rest = [
        b["input_ids"].tolist() for b in packing.stream(rows, LENGTH, share_prompt=True, buffer_size=7, state=state)
    ]
    assert taken + rest == whole


def test_a_stream_dataset_declares_the_unit_columns() -> None:
    datasets = pytest.importorskip("datasets")
    source = datasets.Dataset.from_dict(_columns(_rows())).to_iterable_dataset()
    out = list(packing.streaming.stream_dataset(source, LENGTH, share_prompt=True, shuffle=False))
    assert [row["input_ids"] for row in out] == _expected(True)["input_ids"]
    assert [row["completion_ids"] for row in out] == _expected(True)["completion_ids"]


@pytest.mark.parametrize("share_prompt", [False, True])
def test_the_command_line(share_prompt: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    output = tmp_path / "out.parquet"
    argv = ["pack", str(_jsonl(tmp_path)), "-o", str(output), "--max-seq-length", str(LENGTH), "--no-shuffle"]
    assert main(argv + (["--share-prompt"] if share_prompt else [])) == 0
    summary = capsys.readouterr().out
    assert "pairs and groups" in summary and "units cut" in summary
    table = pq.read_table(output)
    expected = packing.pack(_rows(), LENGTH, share_prompt=share_prompt).to_arrow()
    for name in (*NAMES, "seq_lengths"):
        assert table.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert main(["audit", str(output)]) == 0


def test_the_command_line_names_a_bad_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": [1], "chosen": [2], "rejected": [3]}\n{"prompt": [1], "chosen": [2]}\n')
    assert main(["pack", str(path), "-o", str(tmp_path / "o.parquet"), "--max-seq-length", "8"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        f"packing: error: {path}, line 2, 'rejected': expected a completion (a pair has 'prompt', 'chosen' and "
        "'rejected'), got None (NoneType)"
    )


@pytest.mark.parametrize("share_prompt", [False, True])
def test_ray_packs_units_as_pack_does(cluster: Any, share_prompt: bool) -> None:
    import packing.ray

    dataset = cluster.data.from_items([{name: row.get(name) for name in PARTS} for row in _rows()])
    packed = packing.ray.pack_dataset(dataset, LENGTH, share_prompt=share_prompt, shuffle=False).take_all()
    batch = packing.pack(_rows(), LENGTH, share_prompt=share_prompt)
    expected = batch.to_arrow()
    for name in NAMES:
        assert [list(row[name]) for row in packed] == expected.column(name).to_pylist(), name
    assert np.isin(batch.unit_ids, -1).sum() > 0


def test_every_overflow_policy_at_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A unit longer than a block: cut and counted (truncate), left out and counted (drop), refused with its file
    and line (error), refused by name (split)."""
    path = tmp_path / "long.jsonl"
    long = {"prompt": [1] * 10, "chosen": [2] * 40, "rejected": [3] * 8}
    path.write_text(json.dumps({"prompt": [1], "chosen": [2], "rejected": [3]}) + "\n" + json.dumps(long) + "\n")
    argv = ["pack", str(path), "-o", str(tmp_path / "o.parquet"), "--max-seq-length", "32"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "1 truncated (2 completions cut), 0 dropped" in captured.out
    assert "(a pair or group is never split: a longer --max-seq-length keeps every token)" in captured.err
    assert main([*argv, "--overflow", "drop"]) == 0
    assert "0 truncated (0 completions cut), 1 dropped" in capsys.readouterr().out
    assert main([*argv, "--overflow", "error"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"packing: error: {path}, line 2: expected a pair of at most max_seq_length=32 tokens (overflow='error'; a "
        "pair is never split), got 68 tokens"
    )
    assert main([*argv, "--overflow", "split"]) == 2
    assert "--overflow: expected another value with preference pairs" in capsys.readouterr().err


def test_compare_keeps_units_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(_jsonl(tmp_path)), "--max-seq-length", str(LENGTH), "--share-prompt"]) == 0
    out = capsys.readouterr().out
    assert "pairs and groups: each unit whole" in out
    assert "\nsplit " not in out and "wrapped" not in out


@pytest.mark.parametrize("command", ["pack", "compare"])
def test_share_prompt_on_plain_rows_is_harmless_and_said(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As at every door, --share-prompt on a file of plain rows changes nothing; the command line says so."""
    path = tmp_path / "plain.jsonl"
    path.write_text("[1, 2, 3]\n[4, 5]\n")
    output = ["-o", str(tmp_path / "o.parquet")] if command == "pack" else []
    assert main([command, str(path), "--max-seq-length", "8", "--share-prompt", *output]) == 0
    said = capsys.readouterr()
    assert said.err.strip() == (
        f"packing: note: --share-prompt changes nothing: {path} holds no preference pair or completion group"
    )
    assert main([command, str(path), "--max-seq-length", "8", *output]) == 0
    before_time = lambda out: " ".join(out.split("time")[0].split())  # noqa: E731  # column widths follow the time's
    assert before_time(capsys.readouterr().out) == before_time(said.out)  # the same summary
    assert main([command, str(_jsonl(tmp_path)), "--max-seq-length", str(LENGTH), "--share-prompt", *output]) == 0
    assert "note: --share-prompt" not in capsys.readouterr().err  # units: it shares their prompts
