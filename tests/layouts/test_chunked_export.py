"""The chunked writers against the whole-table export: every layout, with and without loss weights, written chunk
by chunk holds the same columns, types and values as ``export`` of the whole batch (only row groups differ)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packing import read_rows
from packing._cli import main
from packing.batches._packed import PackedBatch
from packing.layouts import LAYOUTS
from packing.layouts._export import export, export_chunks, write_jsonl, write_parquet, write_table
from packing.planning._plans import plan
from packing.weighting import LOSS_MODES
from tests.helpers.sample_rows import rows


def made(batch: PackedBatch) -> PackedBatch:
    """A copy of ``batch`` with its blocks made whole (``input_ids`` and ``loss_mask`` filled at once)."""
    copy = dataclasses.replace(batch)
    copy.input_ids  # noqa: B018 - filled now
    return copy


STRATEGIES = ("split", "next_fit", "ffd", "bfd")


@st.composite
def cases(draw: Any) -> tuple[PackedBatch, Any, str, Any, int]:
    """A lazy batch of random rows (any token form, split or cut, some samples sharing a name), an order, a
    layout, an objective (or none) and a chunk size."""
    samples = read_rows(draw(rows(12, min_size=1, max_size=25)))
    width = draw(st.integers(1, 10))
    layout = plan(
        samples.lengths,
        width,
        strategy=draw(st.sampled_from(STRATEGIES)),
        overflow=draw(st.sampled_from(["truncate", "split", "drop"])),
    )
    names = None
    if draw(st.booleans()):
        names = draw(st.lists(st.integers(0, 5), min_size=len(samples.lengths), max_size=len(samples.lengths)))
    lazy = PackedBatch.of(
        layout, samples, pad_token_id=draw(st.integers(0, 3)), sequence_names=names, int64=draw(st.booleans())
    )
    count = layout.num_blocks
    order = None
    if draw(st.booleans()):
        order = draw(st.permutations(list(range(count)))) if count else []
        order = order[: draw(st.integers(0, len(order)))]
    return (
        lazy,
        order,
        draw(st.sampled_from(LAYOUTS)),
        draw(st.sampled_from([None, *LOSS_MODES])),
        draw(st.integers(1, 40)),
    )


def reference_lines(table: pa.Table) -> str:
    """The JSON lines a whole table makes, row by row (the export's file before the writers were chunked)."""
    return "".join(json.dumps(row) + "\n" for row in table.to_pylist())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_chunks_hold_the_whole_export(case: tuple[PackedBatch, Any, str, Any, int]) -> None:
    lazy, order, layout, mode, chunk_tokens = case
    whole = export(made(lazy), layout, order, mode)
    for blocks in (lazy, made(lazy)):
        chunks = list(export_chunks(blocks, layout, order, mode, chunk_tokens=chunk_tokens))
        per_chunk = max(1, chunk_tokens // lazy.max_seq_length)
        assert all(chunk.num_rows <= per_chunk for chunk in chunks)
        assert len(chunks) == max(1, -(-whole.num_rows // per_chunk))
        joined = pa.concat_tables(chunks)
        assert joined.schema == whole.schema
        assert joined.equals(whole)
        assert joined.to_pydict() == whole.to_pydict()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_written_files_hold_the_whole_export(tmp_path: Path, case: tuple[PackedBatch, Any, str, Any, int]) -> None:
    lazy, order, layout, mode, chunk_tokens = case
    whole = export(made(lazy), layout, order, mode)
    parquet, lines = tmp_path / "chunked.parquet", tmp_path / "chunked.jsonl"
    write_parquet(lazy, parquet, order, chunk_tokens=chunk_tokens, layout=layout, loss_weights=mode)
    write_jsonl(lazy, lines, order, chunk_tokens=chunk_tokens, layout=layout, loss_weights=mode)
    written = pq.read_table(parquet)
    assert written.schema == whole.schema
    assert written.equals(whole)
    assert lines.read_text(encoding="utf-8") == reference_lines(whole)
    reference = tmp_path / "whole.parquet"
    pq.write_table(whole, reference)
    assert pq.read_table(reference).equals(written)


def test_whole_tables_go_through_the_same_writers(tmp_path: Path) -> None:
    lazy = PackedBatch.of(
        plan([3, 2, 4], 4, strategy="split"), read_rows([[1, 2, 3], {"prompt": [4], "completion": [5]}, [6, 7, 8, 9]])
    )
    for layout in LAYOUTS:
        table = export(made(lazy), layout, loss_weights="sqrt")
        write_table(table, tmp_path / "t.jsonl")
        write_jsonl(lazy, tmp_path / "c.jsonl", layout=layout, loss_weights="sqrt", chunk_tokens=4)
        assert (tmp_path / "t.jsonl").read_bytes() == (tmp_path / "c.jsonl").read_bytes()
        assert (tmp_path / "t.jsonl").read_text() == reference_lines(table)


def test_no_block_writes_the_columns(tmp_path: Path) -> None:
    lazy = PackedBatch.of(plan([5], 4, strategy="ffd", overflow="drop"), read_rows([[1, 2, 3, 4, 5]]))
    assert lazy.num_blocks == 0
    for layout in LAYOUTS:
        write_parquet(lazy, tmp_path / "empty.parquet", layout=layout, loss_weights="token")
        assert (
            pq.read_table(tmp_path / "empty.parquet").schema == export(made(lazy), layout, loss_weights="token").schema
        )


@pytest.mark.parametrize("mode", [None, "sequence"])
def test_cli_npy_is_the_whole_export_and_says_it_is_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: Any
) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10, 11]]))
    target = tmp_path / "packed.npy"
    extra = ["--loss-weights", mode] if mode else []
    argv = ["pack", str(source), "--max-seq-length", "4", "--layout", "megatron", "-o", str(target), "--no-shuffle"]
    assert main([*argv, "--strategy", "split", *extra]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "note: NeMo's .npy is written whole (one pickle of every row); .parquet and .jsonl outputs stream",
        "packing: warning: 1 of 11 tokens (9.09 %) lost: 1 sequence longer than --max-seq-length 4 truncated "
        "(--overflow split keeps every token)",
    ]
    samples = read_rows([[1, 2, 3], [4, 5], [6], [7, 8, 9, 10, 11]])
    whole = export(
        made(PackedBatch.of(plan(samples.lengths, 4, strategy="split"), samples)), "megatron", loss_weights=mode
    )
    assert np.load(target, allow_pickle=True).tolist() == whole.to_pylist()


def test_cli_says_a_json_array_is_read_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    array, lines = tmp_path / "rows.json", tmp_path / "rows.jsonl"
    array.write_text("\n  " + json.dumps([[1, 2], [3]]))
    lines.write_text("[1, 2]\n[3]\n")
    argv = ["--max-seq-length", "4", "-o", str(tmp_path / "out.parquet")]
    assert main(["pack", str(array), *argv]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"note: a JSON array is read whole; JSON lines (.jsonl) stream ({array})"
    ]
    assert main(["pack", str(lines), *argv]) == 0
    assert capsys.readouterr().err == ""
    assert main(["pack", str(array), *argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
