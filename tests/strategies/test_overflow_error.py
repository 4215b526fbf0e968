"""``overflow="error"``: a sample longer than ``max_seq_length`` is refused, as torchtune's ``PackedDataset``
refuses it without ``split_across_pack``: a short ``SequenceTooLong`` naming the sample's index and its length
against ``max_seq_length``, at every entry point, checked once (``strategies.overflow``)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
import packing.recipe
import packing.strategies
import packing.torch as pt
from packing._cli import main
from packing.hf import pack_batch, pack_dataset
from packing.streaming import stream_dataset

ROWS = [[1, 2], [3, 4, 5], [6, 7, 8, 9, 10, 11], [12], [13] * 9]
"""Sample 2 (6 tokens) is the first longer than 4."""

ENTRY_POINTS: dict[str, Callable[[], Any]] = {
    "plan": lambda: packing.plan([len(r) for r in ROWS], 4, overflow="error"),
    "pack": lambda: packing.pack(ROWS, 4, overflow="error"),
    "pack split strategy": lambda: packing.pack(ROWS, 4, strategy="split", overflow="error"),
    "recipe": lambda: packing.pack(ROWS, recipe=packing.Recipe(4, overflow="error")),
    "lower_bounds": lambda: packing.lower_bounds([len(r) for r in ROWS], 4, overflow="error"),
    "explain": lambda: packing.explain([len(r) for r in ROWS], 4, strategy="bfd", overflow="error"),
    "stream": lambda: list(packing.stream(ROWS, 4, overflow="error", buffer_size=2, shuffle=False)),
    "hf.pack_dataset": lambda: pack_dataset({"input_ids": ROWS}, 4, overflow="error"),
    "hf.pack_batch": lambda: pack_batch({"input_ids": ROWS}, 4, overflow="error"),
    "stream_dataset": lambda: list(
        stream_dataset(datasets.Dataset.from_dict({"input_ids": ROWS}), 4, overflow="error", buffer_size=2)
    ),
    "PackingSampler": lambda: pt.PackingSampler([len(r) for r in ROWS], 4, overflow="error"),
    "PackingSampler shuffled": lambda: pt.PackingSampler([len(r) for r in ROWS], 4, overflow="error", seed=7),
}


@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
def test_every_entry_point_names_the_sample(entry_point: str) -> None:
    with pytest.raises(packing.errors.SequenceTooLong) as raised:
        ENTRY_POINTS[entry_point]()
    error = raised.value
    assert (error.sample, error.length, error.max_seq_length) == (2, 6, 4)
    assert str(error) == "sample 2: expected at most max_seq_length=4 tokens (overflow='error'), got 6 tokens"
    assert isinstance(error, packing.SampleError) and isinstance(error, ValueError)


def test_stream_names_the_position_in_the_stream() -> None:
    """The sample's position counted from the stream's start, not within its buffer."""
    rows = [[1]] * 25 + [[2] * 5]
    with pytest.raises(packing.errors.SequenceTooLong, match=r"^sample 25: .* got 5 tokens$"):
        list(packing.stream(rows, 4, overflow="error", buffer_size=10))


def test_the_command_line_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The file and line are named, as for any other bad row (a blank line skipped, an empty row counted)."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"input_ids": [1]}\n\n{"input_ids": []}\n' + "".join(f'{{"input_ids": {row}}}\n' for row in ROWS))
    code = main(["pack", str(path), "--max-seq-length", "4", "--overflow", "error", "-o", str(tmp_path / "o.parquet")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"packing: error: {path}, line 6: expected at most max_seq_length=4 tokens (overflow='error'), got 6 tokens\n"
    )


def test_read_dataset_names_the_shard_and_line(tmp_path: Path) -> None:
    """Over several shards, the shard holding the sample and its line there; the cause keeps the fields."""
    for n, rows in enumerate([ROWS[:2], ROWS[2:]]):
        (tmp_path / f"part-{n}.jsonl").write_text("".join(f"{row}\n" for row in rows))
    with pytest.raises(packing.DatasetError) as raised:
        packing.read_dataset(str(tmp_path), max_seq_length=4, overflow="error")
    error = raised.value
    assert str(error).endswith(
        "part-1.jsonl, line 1: expected at most max_seq_length=4 tokens (overflow='error'), got 6 tokens"
    )
    assert isinstance(error.cause, packing.errors.SequenceTooLong) and error.cause.length == 6
    assert len(packing.read_dataset(str(tmp_path), overflow="error")) == len(ROWS)  # no length: nothing to refuse
    assert len(packing.read_dataset(str(tmp_path), max_seq_length=4)) == len(ROWS)  # truncate: read as they are
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("length\n3\n9\n")
    with pytest.raises(packing.DatasetError, match=r"lengths.csv, line 3: expected at most max_seq_length=4"):
        packing.read_dataset(str(lengths), max_seq_length=4, overflow="error")


def test_it_pickles_with_its_fields() -> None:
    """It crosses process boundaries (``datasets.map(num_proc=...)``, Ray) intact."""
    error = pickle.loads(pickle.dumps(packing.errors.SequenceTooLong(7, 9000, 8192)))
    assert (error.sample, error.length, error.max_seq_length) == (7, 9000, 8192)
    assert str(error).startswith("sample 7: expected at most max_seq_length=8,192 tokens")


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), max_size=30),
    capacity=st.integers(1, 10),
    strategy=st.sampled_from([name for name, s in packing.strategies.STRATEGIES.items() if not s.is_search]),
)
def test_refuses_exactly_when_a_sample_is_over_long(lengths: list[int], capacity: int, strategy: str) -> None:
    """The first over-long sample is named; without one the plan is the one every other policy makes."""
    over = [i for i, n in enumerate(lengths) if n > capacity]
    if over:
        with pytest.raises(packing.errors.SequenceTooLong) as raised:
            packing.plan(lengths, capacity, strategy=strategy, overflow="error")  # type: ignore[arg-type]
        assert (raised.value.sample, raised.value.length) == (over[0], lengths[over[0]])
    else:
        got = packing.plan(lengths, capacity, strategy=strategy, overflow="error")  # type: ignore[arg-type]
        want = packing.plan(lengths, capacity, strategy=strategy, overflow="truncate")  # type: ignore[arg-type]
        assert got.blocks() == want.blocks()
        assert np.array_equal(got.block_starts, want.block_starts)


def test_it_is_a_policy_of_the_recipe() -> None:
    assert "error" in packing.recipe.OVERFLOW_POLICIES
    assert packing.Recipe(4, overflow="error").describe() == "max_seq_length=4, overflow=error"
    with pytest.raises(packing.SettingError, match=r"^overflow: expected one of"):
        packing.Recipe(4, overflow="raise")  # type: ignore[arg-type]
