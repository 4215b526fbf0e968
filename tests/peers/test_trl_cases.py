"""TRL's own ``pack_dataset`` test cases (``tests/test_data_utils.py`` in huggingface/trl, classes
``TestPackDatasetWrapped`` and ``TestPackDatasetBfd``), re-stated as inputs and expected outputs and run against
this project. Each case gives TRL's result, or asserts the difference and says why in its docstring. Every
expected value is also checked against the installed TRL, so a case that drifts from TRL fails here.

TRL's ``bfd`` is ``strategy="bfd"`` (``overflow="truncate"``, the default), ``bfd_split`` is ``overflow="split"``,
``wrapped`` is ``strategy="wrapped", overflow="split"``; ``tie_break="oldest"`` is TRL's tie break (none of
these cases has a tie, so the default gives the same blocks). The doors compared are the ``trl`` export of
``pack`` and the ``datasets`` adapter ``packing.hf.pack_dataset`` (``shuffle=False``: TRL keeps plan order).
"""

from __future__ import annotations

from typing import Any

import pytest

import packing

datasets = pytest.importorskip("datasets")
trl = pytest.importorskip("trl")
datasets.disable_progress_bars()

from packing.hf import pack_dataset  # noqa: E402


def trl_pack(columns: dict[str, list[list[int]]], seq_length: int, strategy: str) -> dict[str, Any]:
    """The installed TRL's ``pack_dataset`` on these columns."""
    out: dict[str, Any] = trl.pack_dataset(datasets.Dataset.from_dict(columns), seq_length, strategy=strategy)[:]
    return out


def ours(rows: list[list[int]], seq_length: int, strategy: str, overflow: str) -> dict[str, Any]:
    """The ``trl`` export of ``pack``: TRL's columns, real tokens only."""
    batch = packing.pack(rows, seq_length, strategy=strategy, overflow=overflow, loss="all")  # type: ignore[arg-type]
    table: dict[str, Any] = packing.export(batch, "trl").to_pydict()
    return table


def adapter(rows: list[list[int]], seq_length: int, strategy: str, overflow: str) -> dict[str, Any]:
    """``packing.hf.pack_dataset`` in plan order: rows of real tokens with ``seq_lengths``, as TRL writes them."""
    source = datasets.Dataset.from_dict({"input_ids": rows})
    out: dict[str, Any] = pack_dataset(source, seq_length, strategy=strategy, overflow=overflow, shuffle=False)[:]  # type: ignore[arg-type]
    return out


BFD_CASES = {
    # case: (input_ids, seq_length, TRL strategy, expected input_ids, expected seq_lengths)
    "TestPackDatasetBfd.test_with_dataset": (
        [[1, 2, 3], [4, 5, 6, 7], [8]],
        4,
        "bfd",
        [[4, 5, 6, 7], [1, 2, 3, 8]],
        [[4], [3, 1]],
    ),
    "TestPackDatasetBfd.test_with_overlong_0": (
        [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11], [12]],
        4,
        "bfd_split",
        [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7, 5, 12]],
        [[4], [4], [2, 1, 1]],
    ),
    "TestPackDatasetBfd.test_with_non_power_of_2": (
        [[1, 2, 3, 4, 5], [6], [7, 8, 9, 10], [11, 12, 13]],
        5,
        "bfd_split",
        [[1, 2, 3, 4, 5], [7, 8, 9, 10, 6], [11, 12, 13]],
        [[5], [4, 1], [3]],
    ),
    "TestPackDatasetBfd.test_default_no_split": (
        [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11], [12]],
        4,
        "bfd",
        [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7, 12]],
        [[4], [4], [2, 1]],
    ),
    "TestPackDatasetBfd.test_with_empty_sequences": (
        [[1, 2], [], [3, 4, 5], [], [6]],
        4,
        "bfd_split",
        [[3, 4, 5, 6], [1, 2]],
        [[3, 1], [2]],
    ),
}
OVERFLOW = {"bfd": "truncate", "bfd_split": "split"}


@pytest.mark.parametrize("case", list(BFD_CASES))
def test_bfd_cases_are_the_same(case: str) -> None:
    """Same: the same tokens in the same blocks in the same order, and the same ``seq_lengths``, through the
    ``trl`` export and the ``datasets`` adapter, with either tie break."""
    rows, seq_length, strategy, want_ids, want_lengths = BFD_CASES[case]
    trl_out = trl_pack({"input_ids": rows}, seq_length, strategy)
    assert (trl_out["input_ids"], trl_out["seq_lengths"]) == (want_ids, want_lengths)
    overflow = OVERFLOW[strategy]
    got = ours(rows, seq_length, "bfd", overflow)
    assert (got["input_ids"], got["seq_lengths"]) == (want_ids, want_lengths)
    got = adapter(rows, seq_length, "bfd", overflow)
    assert (got["input_ids"], got["seq_lengths"]) == (want_ids, want_lengths)
    oldest = packing.pack(rows, seq_length, strategy="bfd", overflow=overflow, tie_break="oldest")  # type: ignore[arg-type]
    assert packing.export(oldest, "trl").column("input_ids").to_pylist() == want_ids


def test_bfd_iterable_dataset_is_the_same_through_stream() -> None:
    """``TestPackDatasetBfd.test_with_iterable_dataset``. Same blocks through ``packing.stream`` (this project's door
    for data read once; ``hf.pack_dataset`` takes a whole ``Dataset``), in plan order (``shuffle=False``)."""
    rows = [[1, 2, 3], [4, 5, 6, 7], [8]]
    blocks = list(packing.stream(rows, 4, shuffle=False))
    used = [int(b["seq_lengths"].sum()) for b in blocks]
    assert [b["input_ids"][:n].tolist() for b, n in zip(blocks, used, strict=True)] == [[4, 5, 6, 7], [1, 2, 3, 8]]
    assert [b["seq_lengths"].tolist() for b in blocks] == [[4], [3, 1]]


def test_two_columns_case_differs_only_in_columns_and_signs() -> None:
    """``TestPackDatasetBfd.test_with_overlong_two_coluns``: TRL packs any list columns of equal lengths, negative
    values included (``col1``, ``col2``). Difference: this project packs token ids (``input_ids``, with their
    loss mask and labels), which are never negative (a negative id is refused with the sample and position). The
    layout is the same: the absolute values of ``col1`` as ``input_ids`` give TRL's blocks and ``seq_lengths``."""
    col1 = [[1, -2, 3, -4, 5, -6], [7, -8, 9], [-10, 11, -12], [13, -14, 15, -16]]
    col2 = [[-v for v in row] for row in col1]
    trl_out = trl_pack({"col1": col1, "col2": col2}, 4, "bfd_split")
    want = [[1, -2, 3, -4], [13, -14, 15, -16], [7, -8, 9], [-10, 11, -12], [5, -6]]
    assert trl_out["col1"] == want and trl_out["col2"] == [[-v for v in row] for row in want]
    assert trl_out["seq_lengths"] == [[4], [4], [3], [3], [2]]
    with pytest.raises(packing.SampleError, match=r"^sample 0, position 1: expected a non-negative integer"):
        packing.pack(col1, 4, strategy="bfd", overflow="split")
    got = ours([[abs(v) for v in row] for row in col1], 4, "bfd", "split")
    assert got["input_ids"] == [[abs(v) for v in row] for row in want]
    assert got["seq_lengths"] == trl_out["seq_lengths"]


WRAPPED_ROWS = [[1, 2, 3], [4, 5, 6, 7], [8]]
WRAPPED_IDS = [[1, 2, 3], [4, 5, 6], [7, 8]]


def test_wrapped_case_is_the_same_with_overflow_split() -> None:
    """``TestPackDatasetWrapped.test_with_dataset`` (``input_ids``): same with ``strategy="wrapped",
    overflow="split"``: every token in input order, cut every ``seq_length``, the last block short, and no
    ``seq_lengths`` (TRL's wrapped keeps no boundaries; the auditor finds ``no_document_boundaries`` in both).
    Difference with the default ``overflow="truncate"``: an over-long row is cut to ``seq_length`` first (as for
    every strategy here), so TRL's ``[4, 5, 6, 7]`` loses its 7. The case's carried ``attention_mask`` column and
    its ``numpy`` format are ``hf.pack_dataset``'s business (other columns), not restated here."""
    trl_out = trl_pack({"input_ids": WRAPPED_ROWS}, 3, "wrapped")
    assert trl_out == {"input_ids": WRAPPED_IDS}
    got = ours(WRAPPED_ROWS, 3, "wrapped", "split")
    assert got["input_ids"] == WRAPPED_IDS and "seq_lengths" not in got
    assert packing.audit(
        trl.pack_dataset(datasets.Dataset.from_dict({"input_ids": WRAPPED_ROWS}), 3, "wrapped")
    ).counts() == {"no_document_boundaries": 3}
    assert packing.audit(
        packing.export(packing.pack(WRAPPED_ROWS, 3, strategy="wrapped", overflow="split"), "trl")
    ).counts() == {"no_document_boundaries": 3}
    assert ours(WRAPPED_ROWS, 3, "wrapped", "truncate")["input_ids"] == [[1, 2, 3], [4, 5, 6], [8]]


def test_wrapped_iterable_dataset_differs() -> None:
    """``TestPackDatasetWrapped.test_with_iterable_dataset``. Difference: this project's door for data read once
    (``packing.stream``) keeps every sample whole within its buffer and refuses strategies that cut samples
    (``split``, ``wrapped``); wrapping a stream is concatenating it, which needs no planner."""
    with pytest.raises(packing.SettingError, match=r"^strategy: expected a strategy that keeps samples whole"):
        list(packing.stream(WRAPPED_ROWS, 3, strategy="wrapped"))


def test_docstring_example_is_the_same() -> None:
    """The example in ``pack_dataset``'s docstring (``input_ids`` part): ``bfd`` and ``bfd_split`` at
    ``seq_length=4``. Same."""
    rows = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]]
    for strategy, overflow in OVERFLOW.items():
        want = trl_pack({"input_ids": rows}, 4, strategy)
        got = ours(rows, 4, "bfd", overflow)
        assert (got["input_ids"], got["seq_lengths"]) == (want["input_ids"], want["seq_lengths"])
    assert want["input_ids"] == [[1, 2, 3, 4], [8, 9, 10, 5], [6, 7, 11]]
