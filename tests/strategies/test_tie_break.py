"""``tie_break``: ``bfd`` on equal room takes the block that reached it last (the default) or first
(``oldest``, TRL's choice). With ``oldest`` the blocks are TRL's exactly: checked against TRL's own
``pack_dataset`` (``bfd`` and ``bfd_split``) on random inputs, and through every entry point."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing._cli import main
from packing.hf import pack_batch, pack_dataset
from packing.strategies import _reference as reference
from packing.strategies._registry import STRATEGIES, Options, strategy_blocks
from tests.helpers.trl_packing import tokens_of, trl_blocks

datasets.disable_progress_bars()

TRL_OVERFLOW = {"bfd": "truncate", "bfd_split": "split"}
"""TRL's strategies as this project's overflow policies (``bfd`` cuts an over-long row, ``bfd_split`` splits it)."""


def our_blocks(lengths: list[int], capacity: int, overflow: str, tie_break: str) -> list[list[tuple[int, int, int]]]:
    layout = packing.plan(lengths, capacity, strategy="bfd", overflow=overflow, tie_break=tie_break)  # type: ignore[arg-type]
    return [[(p.sequence, p.start, p.length) for p in block] for block in layout.blocks()]


lengths_lists = st.lists(st.integers(0, 40), min_size=1, max_size=60).filter(any)  # TRL fails on no tokens at all


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(lengths=lengths_lists, capacity=st.integers(1, 24), trl_strategy=st.sampled_from(["bfd", "bfd_split"]))
def test_oldest_gives_trls_blocks(lengths: list[int], capacity: int, trl_strategy: str) -> None:
    """Same documents (sequence, start, length) in the same blocks in the same order as TRL's."""
    expected = trl_blocks(lengths, capacity, trl_strategy)
    assert our_blocks(lengths, capacity, TRL_OVERFLOW[trl_strategy], "oldest") == expected


def test_the_default_differs_from_trl_on_a_tie() -> None:
    """Two blocks with room 1 when the 1 comes: the default takes the newer (block 1), TRL the older (block 0).
    The number of blocks is the same either way."""
    lengths, capacity = [3, 3, 1], 4
    assert trl_blocks(lengths, capacity) == [[(0, 0, 3), (2, 0, 1)], [(1, 0, 3)]]
    assert our_blocks(lengths, capacity, "truncate", "oldest") == trl_blocks(lengths, capacity)
    assert our_blocks(lengths, capacity, "truncate", "newest") == [[(0, 0, 3)], [(1, 0, 3), (2, 0, 1)]]


def test_trls_map_batches_are_windows() -> None:
    """TRL packs each map batch (1,000 rows) on its own: ``window=1000`` with ``oldest`` gives its blocks."""
    rng = np.random.default_rng(3)
    lengths = [int(n) for n in rng.integers(1, 30, size=2_345)]
    plan = packing.plan(lengths, 32, strategy="bfd", tie_break="oldest", window=1000)
    ours = [[(p.sequence, p.start, p.length) for p in block] for block in plan.blocks()]
    assert ours == trl_blocks(lengths, 32)


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), max_size=80), capacity=st.integers(12, 16))
def test_oldest_matches_the_plain_reference(lengths: list[int], capacity: int) -> None:
    """The grouped simulation against the one-document-at-a-time reference, both tie breaks."""
    for tie_break in ("newest", "oldest"):
        block_starts, items, *_ = strategy_blocks(
            "bfd",
            np.array(lengths, dtype=np.int64),
            capacity,
            Options(tie_break=tie_break),  # type: ignore[arg-type]
        )
        blocks = np.zeros(len(lengths), dtype=np.int64)
        for b in range(len(block_starts) - 1):
            blocks[items[block_starts[b] : block_starts[b + 1]]] = b
        assert blocks.tolist() == reference.best_fit_decreasing(lengths, capacity, tie_break)


def test_every_entry_point_takes_it(tmp_path: Path) -> None:
    """``pack``, the ``datasets`` adapters, ``stream``, ``read_dataset`` + ``pack`` and the command line: TRL's
    token rows exactly, and its ``seq_lengths``."""
    from trl import pack_dataset as trl_pack_dataset

    lengths, capacity = [3, 3, 1, 2, 2, 7, 1, 1], 4
    rows = tokens_of(lengths)
    source = datasets.Dataset.from_dict({"input_ids": rows})
    trl = trl_pack_dataset(source, capacity)[:]
    want_ids, want_lengths = trl["input_ids"], trl["seq_lengths"]

    def real(ids: list[list[int]], seq_lengths: list[list[int]]) -> list[list[int]]:
        return [row[: sum(n)] for row, n in zip(ids, seq_lengths, strict=True)]

    batch = packing.pack(rows, capacity, tie_break="oldest").to_arrow(padding=False).to_pydict()
    assert (batch["input_ids"], batch["seq_lengths"]) == (want_ids, want_lengths)
    adapted = pack_dataset(source, capacity, shuffle=False, tie_break="oldest")[:]
    assert (real(adapted["input_ids"], adapted["seq_lengths"]), adapted["seq_lengths"]) == (want_ids, want_lengths)
    mapped = pack_batch({"input_ids": rows}, capacity, tie_break="oldest")
    assert (mapped["input_ids"], mapped["seq_lengths"]) == (want_ids, want_lengths)
    streamed = list(packing.stream(rows, capacity, shuffle=False, tie_break="oldest"))
    assert [b["seq_lengths"].tolist() for b in streamed] == want_lengths
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"input_ids": {row}}}\n' for row in rows))
    read = packing.pack(packing.read_dataset(path), capacity, tie_break="oldest").to_arrow(padding=False)
    assert read.column("input_ids").to_pylist() == want_ids
    out = tmp_path / "blocks.parquet"
    args = ["pack", str(path), "--max-seq-length", str(capacity), "--tie-break", "oldest", "--no-shuffle"]
    assert main([*args, "--layout", "trl", "-o", str(out)]) == 0
    written = pq.read_table(out).to_pydict()
    assert real(written["input_ids"], written["seq_lengths"]) == want_ids


def test_only_bfd_takes_it() -> None:
    """Checked once, in the recipe: a strategy without ties to break refuses it, a wrong value is named."""
    assert "tie_break" in STRATEGIES["bfd"].options
    with pytest.raises(packing.SettingError, match="tie_break: expected no value with strategy 'ffd'"):
        packing.plan([1, 2], 4, strategy="ffd", tie_break="oldest")
    with pytest.raises(packing.SettingError, match="tie_break: expected one of"):
        packing.Recipe(4, tie_break="first")  # type: ignore[arg-type]
    assert packing.Recipe(4, tie_break="oldest").describe() == "max_seq_length=4, tie_break=oldest"
