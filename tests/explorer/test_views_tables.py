"""Headline numbers, the classic text, block, comparison and sweep tables."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import packing
import packing.batches
import packing.errors
import packing.strategies
from explorer.core import runs as compute
from explorer.views import tables
from packing.comparison import Contender, Row, compare


def test_classic_text_form() -> None:
    batch = packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    assert tables.classic_text(batch.input_ids, batch.loss_mask) == (
        "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\nBlock 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]"
    )
    assert tables.classic_text(batch.input_ids[1:], batch.loss_mask[1:], 1).startswith("Block 2: [5, 6, 0, 0]")


def test_headline_numbers() -> None:
    lengths = [2, 3, 1, 9]
    layout = packing.plan(lengths, 4, strategy="ffd", overflow="split")
    bounds = packing.lower_bounds(lengths, 4, overflow="split")
    counts = packing.batches.TrainableCounts(12, 9, 1)
    metrics = {m.label: m.value for m in tables.headline(layout.stats, bounds, "ffd", counts)}
    assert metrics["Blocks"] == str(layout.num_blocks)
    assert metrics["Lower bound"] == str(max(bounds.simple, bounds.l2))
    assert metrics["Efficiency"] == f"{layout.stats.efficiency:.2%}"
    assert metrics["Padding"] == str(layout.stats.padding_tokens)
    assert metrics["Tokens with mask 1"] == "12"
    assert metrics["Training targets"] == "9"
    truncated = packing.plan(lengths, 4, strategy="split", overflow="truncate")
    numbers = {
        m.label: m.value
        for m in tables.headline(truncated.stats, bounds, "split", packing.batches.TrainableCounts(0, 0, 0))
    }
    assert numbers["Truncated / dropped"] == "5 / 0"


def test_blocks_table() -> None:
    samples = [[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]]
    batch = packing.pack(samples, 4, strategy="split")
    frame = tables.blocks_table(batch.input_ids, batch.loss_mask, batch.sequence_ids)
    assert frame["block"].tolist() == [1, 2]
    assert frame["documents"].tolist() == ["1, 2", "2, 3"]
    assert frame["tokens"].tolist() == [4, 2] and frame["padding"].tolist() == [0, 2]
    assert frame["loss mask 1"].tolist() == [3, 2]
    assert frame["input_ids"].tolist() == ["[1, 2, 3, 4]", "[5, 6, 0, 0]"]
    lengths_only = tables.blocks_table(batch.input_ids, batch.loss_mask, batch.sequence_ids, 5, with_tokens=False)
    assert "input_ids" not in lengths_only and lengths_only["block"].tolist() == [6, 7]


def _rows(lengths: object, max_seq_length: int) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
    """``packing.compare``'s rows with optimal's replaced by a refusal (as a strategy with a size limit gives)."""
    rows = compare(lengths, max_seq_length)  # type: ignore[arg-type]
    costs = {r.label: packing.compute_cost(r.plan) for r in rows if r.plan is not None}
    return [
        replace(r, stats=None, plan=None, refusal="expected at most 40 documents, got 50")
        if r.label == "optimal"
        else r
        for r in rows
    ], costs


def test_compare_table_shows_refusals_gaps_and_trls_windows() -> None:
    rows, costs = _rows(np.full(50, 3), 8)
    frame = tables.compare_table(rows, costs).set_index("strategy")
    assert list(frame.index) == [
        *(n for n, s in packing.strategies.STRATEGIES.items() if s.keeps_boundaries),
        "bfd/1,000 (TRL's default)",
    ]
    assert frame.at["bfd/1,000 (TRL's default)", "short"] == "bfd/1,000"
    assert "40" in frame.at["optimal", "note"]
    assert (
        frame.at["none", "blocks"] == 50 and frame.at["none", "above the bound"] == 50 - 25
    )  # whole: L2, two per block
    assert frame.at["split", "above the bound"] == frame.at["split", "blocks"] - 19  # cut: 150 tokens / 8
    assert frame.at["split", "attention (full blocks)"] == frame.at["split", "blocks"] * 64
    assert frame.at["none", "attention (document-masked)"] == 50 * 9


def test_sweep_series_regroups_rows() -> None:
    rows = compute.sweep(np.array([3, 5, 2]), packing.Recipe(1), [8, 4], ["split", "none"])
    sizes, series, lost = tables.sweep_series(rows)
    assert sizes == [4, 8]
    assert series["split"][1] == [3.0, 2.0] and series["none"][1] == [3.0, 3.0]
    assert lost["split"] == [1 / 10, 0.0]  # the 5-token sequence loses 1 token at 4


def test_compare_display_keeps_the_strategies_that_ran_in_percent_and_whole_numbers() -> None:
    rows, costs = _rows(np.full(50, 3), 8)
    shown = tables.compare_display(tables.compare_table(rows, costs))
    expected = [s for s, e in packing.strategies.STRATEGIES.items() if s != "optimal" and e.keeps_boundaries] + [
        "bfd/1,000 (TRL's default)"
    ]
    assert shown["strategy"].tolist() == expected
    assert "note" not in shown and "short" not in shown and not shown.isna().any().any()  # no row of empty cells
    assert shown.set_index("strategy").at["none", "efficiency (%)"] == 3 / 8 * 100
    assert str(shown["blocks"].dtype) == "int64" and str(shown["above the bound"].dtype) == "int64"


def test_compare_counts_attention_past_32_bits() -> None:
    lengths = np.full(1_000, 50_000)  # squared lengths sum to 2.5e12
    rows = compare(lengths, 65_536)
    costs = {r.label: packing.compute_cost(r.plan) for r in rows if r.plan is not None}
    frame = tables.compare_table(rows, costs).set_index("strategy")
    assert frame.at["bfd", "attention (document-masked)"] == 1_000 * 50_000**2


def test_the_compare_caption_names_the_proven_bound_when_it_beats_l2() -> None:
    lengths = [26, 26, 26, 25, 25, 24, 24, 23, 23] * 8 + [49, 50, 51] * 5  # greedy 28 blocks, optimum 26
    rows = compare(lengths, 100, time_limit=5)
    bounds = packing.lower_bounds(lengths, 100)
    caption = tables.compare_caption(rows, bounds, 100, "truncate")
    proven = next(r.bound for r in rows if r.label == "bfd")
    if proven > max(bounds.simple, bounds.l2):
        assert f"{proven:,} if not (proven by the optimum's certificate)" in caption
    else:
        assert f"{proven:,} if not (Martello–Toth L2)" in caption
    assert "(TRL's default; bfd/1,000 below)" in caption


def test_sweep_display_shows_notes_only_when_a_strategy_did_not_run() -> None:
    rows = compute.sweep(np.array([3, 5, 2]), packing.Recipe(1), [8], ["split", "none"])
    shown = tables.sweep_display(rows)
    assert "note" not in shown and shown["efficiency (%)"].tolist() == [10 / 16 * 100, 10 / 24 * 100]
    rows = compute.sweep(np.ones(50, dtype=np.int64), packing.Recipe(1), [8], ["bfd"])
    rows[0].update({"blocks": None, "efficiency": None, "tokens lost": None, "lost share": None, "note": "refused"})
    assert tables.sweep_display(rows).at[0, "note"] == "refused"


def test_efficiency_never_reads_100_percent_with_padding_left() -> None:
    lengths = [383] + [384] * 999
    layout = packing.plan(lengths, 384, strategy="bfd")
    bounds = packing.lower_bounds(lengths, 384)
    metrics = {
        m.label: m.value for m in tables.headline(layout.stats, bounds, "bfd", packing.batches.TrainableCounts(0, 0, 0))
    }
    assert metrics["Efficiency"] == "99.9997%" and metrics["Padding"] == "1"


def test_refusals_and_losses_are_explained_in_plain_words() -> None:
    error = packing.errors.TooManyDocuments("optimal", 40, 88_641)
    refused = Row(Contender("optimal"), None, 0, 0.0, "too many", error=error)
    message = tables.refusal(refused)
    assert "at most 40 documents; this data has 88,641" in message and "Compare tab" in message
    title = packing.strategies.STRATEGIES["ffd"].title
    assert (
        tables.refusal(Row(Contender("ffd"), None, 0, 0.0, "some reason"))
        == f"{title} cannot pack this data: some reason"
    )
    assert tables.loss_note(packing.plan([4, 4, 5], 4, strategy="split").stats, 5) is None  # 1 of 13 tokens: under 10 %
    assert "longer than max_seq_length 4" in str(
        tables.loss_note(packing.plan([299, 3], 4, strategy="split").stats, 299)
    )
