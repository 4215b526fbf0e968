"""Tables and text of packing results: headline numbers, the classic text form, per-block and comparison tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import packing
from explorer.compute import StrategyRun

Int64Array = npt.NDArray[np.int64]
IntArray = npt.NDArray[np.integer[Any]]


@dataclass(frozen=True)
class Metric:
    """One headline number: label, formatted value and a one-line explanation."""

    label: str
    value: str
    help: str


def _pct(value: float) -> str:
    return f"{value:.2%}"


def headline(stats: packing.PackingStats, bounds: packing.LowerBounds, strategy: str, trainable: int) -> list[Metric]:
    """The numbers every packing should be judged by (they always cover the whole input)."""
    splits = packing.STRATEGIES[strategy].splits_sequences
    bound = bounds.simple if splits else max(bounds.simple, bounds.l2)
    bound_help = (
        "ceil(tokens / max_seq_length): no packing can use fewer blocks."
        if splits
        else "Martello–Toth L2 bound: no packing that keeps sequences whole can use fewer blocks."
    )
    return [
        Metric("Blocks", f"{stats.num_blocks:,}", f"Blocks of {stats.max_seq_length:,} tokens."),
        Metric("Lower bound", f"{bound:,}", bound_help),
        Metric("Efficiency", _pct(stats.efficiency), "Real tokens / (blocks × max_seq_length)."),
        Metric("Padding", f"{stats.padding_tokens:,}", "Pad tokens added to fill the blocks."),
        Metric(
            "Tokens truncated / dropped",
            f"{stats.tokens_truncated:,} / {stats.tokens_dropped:,}",
            f"{stats.sequences_truncated:,} sequences truncated, {stats.sequences_dropped:,} dropped by the overflow policy.",
        ),
        Metric(
            "Sequences cut", f"{stats.sequences_split:,}", "Sequences whose tokens are spread over more than one block."
        ),
        Metric("Trainable tokens", f"{trainable:,}", "Tokens with loss mask 1 (real, not a masked prompt)."),
    ]


def classic_text(input_ids: Int64Array, loss_mask: IntArray, first_block: int = 0) -> str:
    """The interview form: ``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]``, one line per block.

    >>> print(classic_text(np.array([[1, 2, 3, 4], [5, 6, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 0, 0]])))
    Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]
    Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]
    """
    return "\n".join(
        f"Block {first_block + i + 1}: {ids.tolist()} -> mask: {mask.tolist()}"
        for i, (ids, mask) in enumerate(zip(input_ids, loss_mask, strict=True))
    )


def blocks_table(
    input_ids: Int64Array,
    loss_mask: IntArray,
    sequence_ids: Int64Array,
    first_block: int = 0,
    with_tokens: bool = True,
) -> pd.DataFrame:
    """One row per block: its sequences (1-based), fill, padding, and the token ids and mask when known."""
    rows = []
    for i, (ids, mask, seqs) in enumerate(zip(input_ids, loss_mask, sequence_ids, strict=True)):
        real = seqs >= 0
        order = seqs[real][np.r_[True, seqs[real][1:] != seqs[real][:-1]]] if real.any() else seqs[:0]
        row = {
            "block": first_block + i + 1,
            "sequences": ", ".join(str(s + 1) for s in order.tolist()),
            "tokens": int(real.sum()),
            "padding": int((~real).sum()),
            "trained": int(mask.sum()),
        }
        if with_tokens:
            row["input_ids"] = str(ids.tolist())
            row["loss_mask"] = str(mask.tolist())
        rows.append(row)
    return pd.DataFrame(rows)


def compare_table(runs: Sequence[StrategyRun], costs: dict[str, packing.ComputeCost]) -> pd.DataFrame:
    """Every strategy's numbers side by side; a strategy that refused shows why."""
    rows = []
    for run in runs:
        row: dict[str, object] = {"strategy": run.strategy}
        if run.layout is None:
            row["note"] = run.error
            rows.append(row)
            continue
        stats, cost = run.layout.stats, costs[run.strategy]
        row.update(
            {
                "blocks": stats.num_blocks,
                "efficiency": stats.efficiency,
                "padding": stats.padding_tokens,
                "tokens lost": stats.tokens_lost,
                "sequences cut": stats.sequences_split,
                "time (ms)": run.seconds * 1000,
                "token slots": cost.token_slots,
                "attention (document-masked)": cost.attention_masked,
                "attention (full blocks)": cost.attention_full,
                "note": "",
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def sweep_series(
    rows: Sequence[dict[str, object]],
) -> tuple[list[int], dict[str, tuple[list[float | None], list[float | None]]]]:
    """Sweep rows regrouped for ``figures.sweep_figure``: sizes, and per strategy (efficiency, blocks)."""
    frame = pd.DataFrame(rows)
    sizes = sorted({int(s) for s in frame["max_seq_length"]})
    series = {}
    for name, group in frame.groupby("strategy", sort=False):
        by_size = group.set_index("max_seq_length")
        series[str(name)] = (
            [_maybe(by_size.at[s, "efficiency"]) for s in sizes],
            [_maybe(by_size.at[s, "blocks"]) for s in sizes],
        )
    return sizes, series


def _maybe(value: object) -> float | None:
    return None if value is None or pd.isna(value) else float(value)  # type: ignore[arg-type]
