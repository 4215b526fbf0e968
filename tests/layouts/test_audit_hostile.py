"""The auditor against files that fooled it: segment ids that number two documents of a block alike (a leak under
LLaMA-Factory's and Axolotl's rule, equal numbers attend to each other), and samples that are not packed at all
(named as TRL's ``wrapped`` blocks with a fill of 845 %). At every door: ``packing.audit``, ``packing audit
--strict``, the explorer's Inspect tab."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from explorer.core import audit as inspect_view
from packing._cli import main
from packing.errors import DatasetError
from packing.layouts.audit import audit

# ---------------------------------------------------------------- segment numbers given twice in a block


def _segment_table(blocks: list[list[tuple[int, int]]], width: int) -> pa.Table:
    """Blocks of ``(number, length)`` runs, padded with 0 to ``width``; positions restart at every run."""
    ids, masks, positions, labels = [], [], [], []
    for runs in blocks:
        mask = [number for number, length in runs for _ in range(length)]
        position = [p for _, length in runs for p in range(length)]
        pad = width - len(mask)
        row_ids = list(range(1, len(mask) + 1))
        ids.append(row_ids + [0] * pad)
        masks.append(mask + [0] * pad)
        positions.append(position + [0] * pad)
        labels.append([-100 if p == 0 else t for t, p in zip(row_ids, position, strict=True)] + [-100] * pad)
    return pa.table({"input_ids": ids, "attention_mask": masks, "position_ids": positions, "labels": labels})


def _reused_cells(blocks: list[list[tuple[int, int]]], width: int) -> list[tuple[int, int]]:
    """By brute force: the first cell of every run whose number an earlier run of its block has."""
    cells = []
    for b, runs in enumerate(blocks):
        if max((number for number, _ in runs), default=0) < 2:
            continue  # a 0/1 mask numbers nothing
        seen: set[int] = set()
        at = 0
        previous = None
        for number, length in runs:
            if number != previous and number in seen:
                cells.append((b, at))
            seen.add(number)
            previous = number
            at += length
    return cells


@st.composite
def _numbered_blocks(draw: st.DrawFn) -> tuple[list[list[tuple[int, int]]], int]:
    count = draw(st.integers(1, 4))
    blocks = []
    for _ in range(count):
        numbers = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
        runs: list[tuple[int, int]] = []
        for number in numbers:  # adjacent equal numbers are one run, as a reader sees them
            if runs and runs[-1][0] == number:
                continue
            runs.append((number, draw(st.integers(1, 3))))
        blocks.append(runs)
    width = max(sum(length for _, length in runs) for runs in blocks) + draw(st.integers(0, 2))
    return blocks, width


@settings(max_examples=150, deadline=None)
@given(_numbered_blocks())
def test_a_segment_number_given_twice_in_a_block_is_a_leak(case: tuple[list[list[tuple[int, int]]], int]) -> None:
    blocks, width = case
    report = audit(_segment_table(blocks, width))
    assert report.layout == "segment_ids"
    expected = _reused_cells(blocks, width)
    found = report.finding("segment_id_reused")
    if not expected:
        assert found is None
        return
    assert found is not None and found.count == len(expected)
    assert list(found.examples) == expected[:5]
    assert (
        "segment_id_reused" not in packing.audit(packing.export(packing.pack([[1, 2], [3]], 4), "segment_ids")).counts()
    )


def test_the_reported_leak_at_every_door(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = _segment_table([[(1, 2), (2, 2), (1, 2)]], 6)
    path = tmp_path / "leak.parquet"
    pq.write_table(table, path)
    report = packing.audit(str(path))
    assert report.counts() == {"segment_id_reused": 1}
    assert report.num_documents == 3
    assert main(["audit", str(path), "--strict"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^segment_id_reused +1 +\(0, 4\)$", out, re.M), out
    assert "segment_id_reused: a segment number given to two documents of one block" in out
    inspected = inspect_view.load_report(path.read_bytes(), "leak.parquet")
    assert inspected.counts() == {"segment_id_reused": 1}
    assert inspect_view.finding_cells(inspected, [0]) == [("segment_id_reused", 0, 4)]
    assert any(
        line.startswith("- segment_id_reused in 1 cell (first at block 0, position 4)") for line in inspected.describe()
    )


# ---------------------------------------------------------------- samples that are not packed


def _samples_jsonl(lengths: list[int]) -> bytes:
    return b"".join(json.dumps({"input_ids": list(range(1, n + 1))}).encode() + b"\n" for n in lengths)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=12), st.one_of(st.none(), st.integers(1, 12)))
def test_rows_without_boundaries_are_blocks_of_one_length_or_refused(lengths: list[int], capacity: int | None) -> None:
    """Packing without boundaries (TRL's ``wrapped``) fills every block to one length but a batch's last: rows
    longer than ``max_seq_length``, or of many lengths, are refused with what they look like; otherwise the report
    never fills a block past 100 %."""
    data = _samples_jsonl(lengths)
    filled = [n for n in lengths if n]
    longest = max(filled, default=0)
    too_long = capacity is not None and longest > capacity
    ragged = bool(filled) and 2 * filled.count(longest) < len(filled)
    if too_long or ragged:
        with pytest.raises(DatasetError, match=r"^rows\.jsonl: .*nothing marks documents; samples, not packed\?"):
            audit(io.BytesIO(data), max_seq_length=capacity, name="rows.jsonl")
        forced = audit(io.BytesIO(data), max_seq_length=capacity, name="rows.jsonl", layout="trl")
    else:
        forced = audit(io.BytesIO(data), max_seq_length=capacity, name="rows.jsonl")
        assert forced.layout == "trl"
    assert float(forced.block_fill.max(initial=0)) <= 1.0 and forced.efficiency <= 1.0
    over = sum(n > (capacity or longest) for n in lengths)
    assert forced.counts().get("block_too_long", 0) == over


def test_a_file_of_samples_longer_than_the_blocks_at_every_door(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    lengths = [int(n) for n in rng.integers(5, 3000, 40)]
    path = tmp_path / "samples.jsonl"
    path.write_bytes(_samples_jsonl(lengths))
    expected = (
        f"{path}: not packed blocks of 355 positions: {sum(n > 355 for n in lengths)} of 40 rows hold more (up to "
        f"{max(lengths):,} tokens), and nothing marks documents; samples, not packed? (layout='trl' reads the rows "
        "as blocks anyway)"
    )
    with pytest.raises(DatasetError) as caught:
        packing.audit(str(path), max_seq_length=355)
    assert str(caught.value) == expected
    assert main(["audit", str(path), "--max-seq-length", "355", "--strict"]) == 2
    assert capsys.readouterr().err == f"packing: error: {expected}\n"
    assert main(["audit", str(path)]) == 2  # of 40 lengths: no blocks of one length either
    assert "cannot tell how these rows are packed: they are of" in capsys.readouterr().err
    with pytest.raises(DatasetError, match=r"^samples\.jsonl: cannot tell how these rows are packed"):
        inspect_view.load_report(path.read_bytes(), "samples.jsonl")
    assert main(["audit", str(path), "--max-seq-length", "355", "--layout", "trl"]) == 0
    out = capsys.readouterr().out
    assert "max 100.00 %" in out and "block_too_long" in out


@pytest.mark.slow
def test_the_inspect_tab_shows_the_leak_and_refuses_the_samples(tmp_path: Path) -> None:
    from tests.helpers.apptest import errors_of, no_leak, open_link

    buffer = io.BytesIO()
    pq.write_table(_segment_table([[(1, 2), (2, 2), (1, 2)]], 6), buffer)
    at = open_link({"tab": "Inspect"})
    at.get("file_uploader")[0].upload("leak.parquet", buffer.getvalue()).run()
    no_leak(at)
    (findings,) = [t.value for t in at.dataframe if "kind" in t.value.columns]  # blocks numbered from 1, as shown
    assert findings["kind"].tolist() == ["segment_id_reused"], findings
    assert findings["first cells (block, position)"].tolist() == ["(1, 4)"], findings
    at.get("file_uploader")[0].upload("samples.jsonl", _samples_jsonl([3, 50, 7, 12])).run()
    no_leak(at)
    assert any("samples.jsonl: cannot tell how these rows are packed" in e for e in errors_of(at)), errors_of(at)
