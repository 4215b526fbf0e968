"""``strategy="wrapped"``: TRL's ``wrapped``, every token in input order cut every ``max_seq_length``, keeping no
document boundaries; the auditor's finding about it (``no_document_boundaries``) said wherever it is chosen."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.layouts
import packing.strategies
from packing._cli import main
from packing.strategies._registry import STRATEGIES, WRAPPED_WARNING
from tests.helpers.trl_packing import trl_blocks

datasets.disable_progress_bars()
IGNORE = packing.core.IGNORE_INDEX


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=40).filter(any), capacity=st.integers(1, 16))
def test_with_overflow_split_it_is_trls_wrapped(lengths: list[int], capacity: int) -> None:
    """The same tokens in the same blocks as TRL's own ``pack_dataset(strategy="wrapped")``, the last block short
    (compared as runs of one sequence: a sequence split by ``overflow`` is two adjacent pieces of the plan)."""
    layout = packing.plan(lengths, capacity, strategy="wrapped", overflow="split")
    ours = [runs([(p.sequence, p.start, p.length) for p in block]) for block in layout.blocks()]
    assert ours == trl_blocks(lengths, capacity, "wrapped")


def runs(pieces: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent pieces that continue one sequence, merged."""
    merged: list[tuple[int, int, int]] = []
    for sequence, start, length in pieces:
        if merged and merged[-1][0] == sequence and merged[-1][1] + merged[-1][2] == start:
            merged[-1] = (sequence, merged[-1][1], merged[-1][2] + length)
        else:
            merged.append((sequence, start, length))
    return merged


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 20), max_size=25),
    capacity=st.integers(1, 12),
    overflow=st.sampled_from(["truncate", "split", "drop"]),
)
def test_each_block_is_one_run(lengths: list[int], capacity: int, overflow: str) -> None:
    """The tokens of ``split`` (same pieces), but one document per block: positions 0..used-1, labels -100 only at
    the block's first token and in padding, ``seq_lengths`` the block's length, attention causal over the whole run;
    the statistics count one target fewer per block."""
    rows = [[(i * 31 + k) % 97 + 1 for k in range(n)] for i, n in enumerate(lengths)]
    wrapped = packing.pack(rows, capacity, strategy="wrapped", overflow=overflow, loss="all")  # type: ignore[arg-type]
    split = packing.pack(rows, capacity, strategy="split", overflow=overflow, loss="all")  # type: ignore[arg-type]
    assert wrapped.plan.blocks() == split.plan.blocks()
    assert np.array_equal(wrapped.input_ids, split.input_ids)
    ramp = np.arange(capacity)
    for b in range(wrapped.num_blocks):
        used = sum(p.length for p in wrapped.plan.block(b))
        assert wrapped.seq_lengths(b).tolist() == [used]
        assert wrapped.position_ids[b].tolist() == ramp[:used].tolist() + [0] * (capacity - used)
        want = [IGNORE] + wrapped.input_ids[b, 1:used].tolist() + [IGNORE] * (capacity - used)
        assert wrapped.labels[b].tolist() == want
        mask = wrapped.attention_mask(b)
        assert mask[:used, :used].tolist() == np.tril(np.ones((used, used), dtype=bool)).tolist()
    assert wrapped.stats.target_tokens == int((wrapped.labels != IGNORE).sum())
    assert wrapped.plan.stats.target_tokens == wrapped.stats.target_tokens


def test_the_auditor_finds_what_it_is_warned_with() -> None:
    """Its ``trl``, ``flattening`` and ``segment_ids`` exports get ``no_document_boundaries`` (TRL's own wrapped
    output gets the same), this project's layout ``inconsistent_boundaries`` (``sequence_ids`` name several
    samples in one document); the lengths of ``torchtune`` and ``megatron`` say one document per block, and
    nothing in those files says otherwise (the auditing guide says so)."""
    batch = packing.pack([[1, 2], [3, 4, 5], [6], [7, 8, 9, 10, 11]], 4, strategy="wrapped", overflow="split")
    found = {layout: packing.audit(packing.export(batch, layout)).counts() for layout in packing.layouts.LAYOUTS}
    assert found == {
        "packing": {"inconsistent_boundaries": 3},
        "trl": {"no_document_boundaries": 3},
        "flattening": {"no_document_boundaries": 3},
        "torchtune": {},
        "megatron": {},
        "segment_ids": {"no_document_boundaries": 3},
    }
    assert packing.export(batch, "trl").column_names == ["input_ids", "labels"]  # TRL's wrapped has no seq_lengths


def test_it_is_warned_where_it_is_chosen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The registry holds the warning (its description says it too); the command line prints it in one line; the
    explorer shows ``Strategy.warning`` under the strategy menu. Strategies that keep boundaries have none."""
    entry = STRATEGIES["wrapped"]
    assert entry.warning == WRAPPED_WARNING and "no_document_boundaries" in entry.warning
    assert "no_document_boundaries" in entry.description and not entry.keeps_boundaries
    assert [name for name, s in STRATEGIES.items() if s.warning] == ["wrapped"]
    path = tmp_path / "rows.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n{"input_ids": [3, 4, 5]}\n')
    args = ["pack", str(path), "--max-seq-length", "4", "-o", str(tmp_path / "out.parquet"), "--quiet"]
    assert main([*args, "--strategy", "wrapped"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert lines == [f"packing: warning: {WRAPPED_WARNING}"]
    assert main([*args, "--strategy", "split"]) == 0
    assert "warning" not in capsys.readouterr().err
    sidebar = (Path(__file__).parents[2] / "explorer" / "ui" / "sidebar.py").read_text()
    assert "st.warning(info.warning)" in sidebar


def test_doors_that_keep_samples_whole_refuse_it() -> None:
    with pytest.raises(packing.SettingError, match=r"^strategy: expected a strategy that keeps samples whole"):
        list(packing.stream([[1, 2, 3]], 2, strategy="wrapped"))
