"""Headline numbers, the classic text, block, comparison and sweep tables."""

from __future__ import annotations

import numpy as np

import packing
from explorer import compute, tables


def test_classic_text_form() -> None:
    batch = packing.pack([[1, 2], [3, 4, 5], [6]], 4)
    assert tables.classic_text(batch.input_ids, batch.loss_mask) == (
        "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\nBlock 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]"
    )
    assert tables.classic_text(batch.input_ids[1:], batch.loss_mask[1:], 1).startswith("Block 2: [5, 6, 0, 0]")


def test_headline_numbers() -> None:
    lengths = [2, 3, 1, 9]
    layout = packing.plan(lengths, 4, "ffd", "split")
    bounds = packing.lower_bounds(lengths, 4, "split")
    metrics = {m.label: m.value for m in tables.headline(layout.stats, bounds, "ffd", 12)}
    assert metrics["Blocks"] == str(layout.num_blocks)
    assert metrics["Lower bound"] == str(max(bounds.simple, bounds.l2))
    assert metrics["Efficiency"] == f"{layout.stats.efficiency:.2%}"
    assert metrics["Padding"] == str(layout.stats.padding_tokens)
    assert metrics["Trainable tokens"] == "12"
    truncated = packing.plan(lengths, 4, "split", "truncate")
    numbers = {m.label: m.value for m in tables.headline(truncated.stats, bounds, "split", 0)}
    assert numbers["Tokens truncated / dropped"] == "5 / 0"


def test_blocks_table() -> None:
    samples = [[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]]
    batch = packing.pack(samples, 4)
    frame = tables.blocks_table(batch.input_ids, batch.loss_mask, batch.sequence_ids)
    assert frame["block"].tolist() == [1, 2]
    assert frame["sequences"].tolist() == ["1, 2", "2, 3"]
    assert frame["tokens"].tolist() == [4, 2] and frame["padding"].tolist() == [0, 2]
    assert frame["trained"].tolist() == [3, 2]
    assert frame["input_ids"].tolist() == ["[1, 2, 3, 4]", "[5, 6, 0, 0]"]
    lengths_only = tables.blocks_table(batch.input_ids, batch.loss_mask, batch.sequence_ids, 5, with_tokens=False)
    assert "input_ids" not in lengths_only and lengths_only["block"].tolist() == [6, 7]


def test_compare_table_shows_refusals() -> None:
    lengths = np.full(50, 3)
    runs = compute.compare(lengths, 8, "truncate")
    costs = {r.strategy: packing.compute_cost(r.layout) for r in runs if r.layout is not None}
    frame = tables.compare_table(runs, costs).set_index("strategy")
    assert list(frame.index) == list(packing.STRATEGIES)
    assert "40" in frame.at["optimal", "note"]
    assert frame.at["none", "blocks"] == 50
    assert frame.at["split", "attention (full blocks)"] == frame.at["split", "blocks"] * 64
    assert frame.at["none", "attention (document-masked)"] == 50 * 9


def test_sweep_series_regroups_rows() -> None:
    rows = compute.sweep(np.array([3, 5, 2]), [8, 4], ["split", "none"], "truncate")
    sizes, series = tables.sweep_series(rows)
    assert sizes == [4, 8]
    assert series["split"][1] == [3.0, 2.0] and series["none"][1] == [3.0, 3.0]
