"""The same rows through every entry point give the same blocks or the same error.

Entry points: ``pack`` on Python rows, ``read_table`` on an Arrow table, ``read_dataset`` on
JSON lines and Parquet files, the command line, and the ``datasets`` adapter
(``pack_batch`` and ``pack_dataset``). Each divergence found before the one reader
existed has a case here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.reading
from packing import DatasetError, SampleError, pack, read_dataset, read_rows
from packing._cli import main
from packing.hf import pack_batch, pack_dataset
from packing.reading import read_table

L = 6
Outcome = tuple[str, Any]


def error_fields(error: SampleError) -> tuple[Any, ...]:
    return (error.sample, error.field, error.position, error.expected, error.got)


def real_tokens(columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Every row cut to its real tokens (``sum(seq_lengths)`` values): the datasets adapters write rows so, as TRL
    does; the other doors pad them to ``max_seq_length``. The blocks compared are the same either way."""
    used = [sum(lengths) for lengths in columns["seq_lengths"]]
    return {
        name: values if name == "seq_lengths" else [row[:n] for row, n in zip(values, used, strict=True)]
        for name, values in columns.items()
    }


def outcome(run: Callable[[], dict[str, list[Any]]]) -> Outcome:
    """``("blocks", columns)`` (rows cut to their real tokens) or ``("error", fields of the SampleError behind it)``."""
    try:
        return "blocks", real_tokens(run())
    except DatasetError as error:
        assert error.cause is not None, str(error)
        return "error", error_fields(error.cause)
    except SampleError as error:
        return "error", error_fields(error)


def columns(batch: packing.PackedBatch) -> dict[str, list[Any]]:
    result: dict[str, list[Any]] = batch.to_arrow().to_pydict()
    return result


def table_of(rows: list[Any]) -> pa.Table:
    """Rows as one table with every key any row has (``pa.Table.from_pylist`` takes the first row's keys)."""
    names = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({name: [row.get(name) for row in rows] for name in names})


def via_pack(rows: list[Any], tmp_path: Path) -> Outcome:
    return outcome(lambda: columns(pack(rows, L, strategy="ffd")))


def via_jsonl(rows: list[Any], tmp_path: Path) -> Outcome:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return outcome(lambda: columns(pack(read_dataset(path), L, strategy="ffd")))


def via_parquet(rows: list[Any], tmp_path: Path) -> Outcome:
    path = tmp_path / "rows.parquet"
    pq.write_table(table_of(rows), path)
    return outcome(lambda: columns(pack(read_dataset(path), L, strategy="ffd")))


def via_table(rows: list[Any], tmp_path: Path) -> Outcome:
    return outcome(lambda: columns(pack(read_table(table_of(rows)), L, strategy="ffd")))


def via_pack_batch(rows: list[Any], tmp_path: Path) -> Outcome:
    names = list(dict.fromkeys(key for row in rows for key in row))
    batch = {name: [row.get(name) for row in rows] for name in names}
    return outcome(lambda: pack_batch(batch, L, strategy="ffd"))


def via_pack_dataset(rows: list[Any], tmp_path: Path) -> Outcome:
    datasets = pytest.importorskip("datasets")
    rows_table = datasets.Dataset.from_dict(table_of(rows).to_pydict())
    return outcome(lambda: pack_dataset(rows_table, L, strategy="ffd", shuffle=False)[:])


def via_cli(rows: list[Any], tmp_path: Path) -> Outcome:
    """The command line: exit 0 and the written blocks, or exit 2 with the reader's error on one line."""
    source = tmp_path / "cli.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / "out.parquet"
    argv = ["pack", str(source), "--max-seq-length", str(L), "--strategy", "ffd", "--no-shuffle", "-q", "-o"]
    code = main([*argv, str(output)])
    if code == 0:
        return "blocks", real_tokens(pq.read_table(output).to_pydict())
    assert code == 2 and not output.exists()
    with pytest.raises(DatasetError) as caught:  # what the command printed
        read_dataset(source)
    assert caught.value.cause is not None
    return "error", error_fields(caught.value.cause)


ENTRY_POINTS = [via_pack, via_jsonl, via_parquet, via_table, via_pack_batch, via_pack_dataset, via_cli]

CASES = {
    "both forms in one row": [{"prompt": [1], "completion": [2], "input_ids": [9, 9, 9]}],
    "nulls in the other form's columns": [
        {"input_ids": [1, 2], "prompt": None, "completion": None},
        {"input_ids": None, "prompt": [3], "completion": [4, 5]},
    ],
    "boolean loss mask": [{"input_ids": [1, 2, 3], "loss_mask": [True, False, True]}],
    "TRL mask names": [
        {"input_ids": [1, 2, 3], "completion_mask": [0, 1, 1], "assistant_masks": [1, 1, 0]},
        {"input_ids": [4, 5], "completion_mask": None, "assistant_masks": None},
    ],
    "negative token": [{"input_ids": [1, 2]}, {"input_ids": [3, -4]}],
    "mask of the wrong length": [{"input_ids": [1, 2], "loss_mask": [1]}],
    "mask value 2": [{"input_ids": [1, 2], "loss_mask": [1, 1]}, {"input_ids": [1, 2], "loss_mask": [0, 2]}],
    "prompt without completion": [{"prompt": [1], "completion": None}],
    "a row with nothing": [{"input_ids": [1]}, {"input_ids": None}],
    "a mask on a prompt/completion row": [{"prompt": [1], "completion": [2], "loss_mask": [1, 1]}],
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_entry_point_agrees(case: str, tmp_path: Path) -> None:
    rows = CASES[case]
    expected = via_pack(rows, tmp_path)
    for entry in ENTRY_POINTS[1:]:
        assert entry(rows, tmp_path) == expected, entry.__name__


def test_the_cases_cover_both_outcomes(tmp_path: Path) -> None:
    kinds = {via_pack(rows, tmp_path)[0] for rows in CASES.values()}
    assert kinds == {"blocks", "error"}
    assert via_pack(CASES["TRL mask names"], tmp_path)[1]["loss_mask"] == [
        [0, 1, 0, 1, 1]
    ]  # real tokens: the padding is cut


# ---------------------------------------------------------------- the vectorized reader against the row reader

token = st.integers(min_value=-2, max_value=50)
tokens = st.lists(token, max_size=5)
flag = st.sampled_from([0, 1, True, False, 2])


@st.composite
def rows(draw: st.DrawFn) -> dict[str, Any]:
    form = draw(st.sampled_from(["ids", "ids+mask", "pair", "both", "empty", "half"]))
    if form in ("ids", "ids+mask"):
        ids = draw(tokens)
        row: dict[str, Any] = {"input_ids": ids}
        if form == "ids+mask":
            size = len(ids) + draw(st.sampled_from([0, 0, 0, 1]))
            name = draw(st.sampled_from(["loss_mask", "completion_mask", "assistant_masks"]))
            row[name] = [
                int(v) if v in (0, 1) and draw(st.booleans()) else v
                for v in draw(st.lists(flag, min_size=size, max_size=size))
            ]
        return row
    if form == "pair":
        return {"prompt": draw(tokens), "completion": draw(tokens)}
    if form == "both":
        return {"input_ids": draw(tokens), "prompt": draw(tokens), "completion": draw(tokens)}
    if form == "half":
        return {"prompt": draw(tokens)}
    return {"input_ids": None}


def read_outcome(read: Callable[[], packing.Samples]) -> Any:
    try:
        samples = read()
    except SampleError as error:
        return error_fields(error)
    assert samples.tokens is not None and samples.loss_mask is not None
    return samples.tokens.tolist(), samples.loss_mask.tolist(), samples.offsets.tolist()


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(rows(), min_size=1, max_size=8), st.booleans())
def test_read_table_agrees_with_read_rows(batch: list[dict[str, Any]], completion_only: bool) -> None:
    try:
        table = table_of(batch)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return  # rows Arrow cannot hold as one table (such as [True, 2] in one list)
    by_rows = read_outcome(lambda: read_rows(table.to_pylist(), completion_only_loss=completion_only))
    by_table = read_outcome(lambda: read_table(table, completion_only_loss=completion_only))
    assert by_table == by_rows


def test_reading_and_packing_a_file_checks_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2], [3, 4, 5]]}), path)
    dataset = read_dataset(path)
    calls: list[int] = []
    original = packing.reading._reader.read_row

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(packing.reading._reader, "read_row", counting)
    batch = pack(dataset, 8)
    assert calls == []  # the Samples read from the file are not read again
    assert np.array_equal(batch.stats.packed_tokens, 5)


TEXT_ROWS: list[Any] = [
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hé!"}]},
    {"prompt": "2+2=", "completion": "4"},
    {"text": "plain"},
    {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]},
]


def test_text_rows_through_every_entry_point(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    expected = columns(pack(TEXT_ROWS, 32, strategy="ffd", tokenizer="bytes"))
    path = tmp_path / "text.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in TEXT_ROWS))
    # the tokenizer read the rows and gives the padding id: the same options at both doors
    assert columns(pack(read_dataset(path, tokenizer="bytes"), 32, strategy="ffd", tokenizer="bytes")) == expected
    table = table_of(TEXT_ROWS)
    pq.write_table(table, tmp_path / "text.parquet")
    assert (
        columns(pack(read_dataset(tmp_path / "text.parquet", tokenizer="bytes"), 32, strategy="ffd", tokenizer="bytes"))
        == expected
    )
    assert columns(pack(read_table(table, tokenizer="bytes"), 32, strategy="ffd", tokenizer="bytes")) == expected
    hf_rows = datasets.Dataset.from_dict(table.to_pydict())  # from_list would keep the first row's keys only
    hf = pack_dataset(hf_rows, 32, strategy="ffd", shuffle=False, tokenizer="bytes")
    assert hf[:] == real_tokens(expected)
    output = tmp_path / "out.parquet"
    argv = ["pack", str(path), "--max-seq-length", "32", "--strategy", "ffd", "--no-shuffle", "-q"]
    assert main([*argv, "--tokenizer", "bytes", "-o", str(output)]) == 0
    assert pq.read_table(output).to_pydict() == expected
    # without a tokenizer, every entry point refuses the first text row the same way
    assert via_pack(TEXT_ROWS, tmp_path) == via_jsonl(TEXT_ROWS, tmp_path) == via_table(TEXT_ROWS, tmp_path)
    kind, fields = via_pack(TEXT_ROWS, tmp_path)
    assert kind == "error" and fields[:2] == (0, "messages")


@pytest.mark.parametrize("case", list(CASES))
def test_the_explorer_paste_box_reads_rows_as_pack_does(case: str) -> None:
    from explorer.core.parsing import InputError
    from explorer.core.sources import Paste

    rows = CASES[case]
    text = "\n".join(json.dumps(row) for row in rows)
    try:
        expected = read_rows(rows)
    except SampleError as error:
        with pytest.raises(InputError) as caught:
            Paste(text).load()
        message = str(caught.value)
        assert f"line {(error.sample or 0) + 1}" in message
        assert (f"{error.location}: " if error.location else ": ") + error.problem in message
        return
    samples = Paste(text).load().samples
    assert samples is not None and samples.tokens is not None and expected.tokens is not None
    assert samples.tokens.tolist() == expected.tokens.tolist()
    assert samples.loss_mask is not None and expected.loss_mask is not None
    assert samples.loss_mask.tolist() == expected.loss_mask.tolist()
