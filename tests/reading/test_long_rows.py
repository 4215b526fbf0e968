"""One JSON line or one CSV cell of millions of ids is read as the rest is, within the same bound: its lists of
integers parsed straight into arrays (:mod:`packing.reading.longrows`), giving the reader what it reads of the same
rows parsed whole: the same samples and the same errors, which the properties here check with every line and
every list taken the long way."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.reading import longrows

INTEGERS = st.one_of(st.integers(-3, 60), st.integers(2**31 - 2, 2**31 + 2), st.integers(2**63 - 2, 2**64 + 2))
ODD = st.one_of(st.floats(allow_nan=False, width=16), st.booleans(), st.text(max_size=3), st.none())
IDS = st.lists(st.one_of(INTEGERS, INTEGERS, INTEGERS, ODD), max_size=6)
FLAGS = st.lists(st.one_of(st.integers(0, 1), st.integers(0, 1), st.integers(-1, 2), st.booleans()), max_size=6)
FIELDS = {
    "input_ids": IDS,
    "labels": st.lists(st.one_of(st.just(-100), INTEGERS), max_size=6),
    "loss_mask": FLAGS,
    "prompt": st.one_of(IDS, st.text(max_size=3)),
    "completion": st.one_of(IDS, st.text(max_size=3)),
    "text": st.one_of(st.text(max_size=3), IDS),
    "length": st.one_of(st.integers(0, 9), IDS),
    "note": st.one_of(IDS, st.text(max_size=3)),
}
ROWS = st.one_of(
    IDS,
    st.dictionaries(st.sampled_from(list(FIELDS)), st.just(None), min_size=1, max_size=3).flatmap(
        lambda keys: st.fixed_dictionaries({key: FIELDS[key] for key in keys})
    ),
    st.fixed_dictionaries({"input_ids": st.lists(st.integers(0, 9), max_size=5)}),
    st.lists(st.integers(0, 9), min_size=1, max_size=5),
)


def _line(row: Any, spaced: bool) -> str:
    return json.dumps(row, separators=(" , ", " : ") if spaced else (",", ":"))


def _read(data: bytes, name: str, monkeypatch: pytest.MonkeyPatch, long: bool, **options: Any) -> Any:
    with monkeypatch.context() as patch:
        if long:
            patch.setattr(longrows, "LONG_LINE", 0)
            patch.setattr(longrows, "LONG_LIST", 0)
        try:
            data_set = packing.read_dataset(io.BytesIO(data), name=name, **options)
        except packing.PackingError as error:
            return ("error", type(error).__name__, str(error))
    samples = data_set.samples
    arrays = [samples.offsets, samples.tokens, samples.loss_mask, samples.labels]
    return tuple(None if a is None else (a.dtype.name, a.tolist()) for a in arrays)


@settings(max_examples=400, deadline=None)
@given(st.lists(ROWS, min_size=1, max_size=5), st.booleans(), st.sampled_from([None, 1, 64]))
def test_long_lines_read_as_short_ones(rows: list[Any], spaced: bool, chunk: int | None) -> None:
    data = "\n".join(_line(row, spaced) for row in rows).encode() + b"\n"
    patch = pytest.MonkeyPatch()
    short = _read(data, "rows.jsonl", patch, long=False, _chunk_bytes=chunk)
    assert _read(data, "rows.jsonl", patch, long=True, _chunk_bytes=chunk) == short
    for row in rows:  # the long way is taken where it may be: lists of ids become arrays
        parsed = longrows.json_line(_line(row, spaced).encode(), "rows.jsonl", "line 1", least=0)
        assert _same(parsed, row)
        if isinstance(row, list) and row and all(type(v) is int and abs(v) < 2**63 for v in row):
            assert isinstance(parsed, np.ndarray)


def _same(parsed: Any, row: Any) -> bool:
    """``parsed`` is ``row`` but for arrays standing for lists."""
    if isinstance(parsed, np.ndarray):
        return isinstance(row, list) and parsed.tolist() == row
    if isinstance(row, dict):
        return isinstance(parsed, dict) and parsed.keys() == row.keys() and all(_same(parsed[k], row[k]) for k in row)
    if isinstance(row, list):
        return isinstance(parsed, list) and len(parsed) == len(row) and all(map(_same, parsed, row))
    return parsed == row or (parsed != parsed and row != row)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 99), min_size=1, max_size=8),
    st.sampled_from(["", "1.5", "01", "-", ",", " ,,", "true", '"x"', "[1]", "99999999999999999999", "{}", "\x00"]),
    st.integers(0, 8),
)
def test_a_broken_long_list_is_the_error_json_gives(ids: list[int], garbage: str, at: int) -> None:
    """Text that is not a list of JSON integers where one is expected: parsed by json as before, the same value or
    the same error (line, character)."""
    body = ", ".join(map(str, ids[:at])) + (", " if ids[:at] and garbage else "") + garbage
    data = ('{"input_ids": [' + body + '], "loss_mask": [' + ", ".join("1" for _ in ids) + "]}\n").encode()
    patch = pytest.MonkeyPatch()
    assert _read(data, "r.jsonl", patch, long=True) == _read(data, "r.jsonl", patch, long=False)


CELLS = st.lists(
    st.one_of(
        st.integers(-2, 60),
        st.integers(2**63 - 2, 2**63 + 2),
        st.integers(10**19, 10**20),
        st.sampled_from(["x", "+4", "07", "-0", "1.5"]),
    ),
    max_size=6,
).map(lambda items: " ".join(map(str, items)))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(CELLS, st.lists(st.integers(0, 2), max_size=6)), min_size=1, max_size=4),
    st.sampled_from([" ", ", ", ",", "  \t"]),
    st.booleans(),
)
def test_long_csv_cells_read_as_short_ones(rows: list[tuple[str, list[int]]], separator: str, brackets: bool) -> None:
    lines = ["input_ids,loss_mask"]
    for ids, mask in rows:
        cell = ids.replace(" ", separator)
        cell = f"[{cell}]" if brackets else cell
        lines.append(f'"{cell}","{" ".join(map(str, mask))}"')
    data = ("\n".join(lines) + "\n").encode()
    patch = pytest.MonkeyPatch()
    assert _read(data, "rows.csv", patch, long=True) == _read(data, "rows.csv", patch, long=False)
    for ids, _ in rows:
        items = ids.split()
        plain = all(item.lstrip("+-").isdigit() and item not in ("+", "-") and abs(int(item)) < 2**63 for item in items)
        cell = longrows.id_cell(ids.replace(" ", separator), least=0)
        assert (cell is not None) == plain
        if cell is not None:
            assert cell.tolist() == [int(item) for item in items]


def test_a_long_line_is_not_held_as_python_ints() -> None:
    """28.6 M ids on one line held 2.13 GiB as bytes, text and a list; measured in ``benchmarks/forms.py``
    (``--layouts line``). Here: 2 M ids parsed into one int64 array, the reader narrowing it to int32."""
    count = 2_000_000
    ids = np.arange(count, dtype=np.int64) % 50_000
    line = json.dumps({"input_ids": ids.tolist(), "loss_mask": [1] * count}, separators=(",", ":")).encode()
    row = longrows.json_line(line, "one.jsonl", "line 1")
    assert isinstance(row["input_ids"], np.ndarray) and row["input_ids"].dtype == np.int64
    data = packing.read_dataset(io.BytesIO(line + b"\n" + line), name="two.jsonl")
    assert data.samples.tokens.dtype == np.int32 and data.lengths.tolist() == [count, count]
    assert np.array_equal(data.samples.tokens[:count], ids)
    cell = longrows.id_cell(" ".join(map(str, ids.tolist())))
    assert cell is not None and np.array_equal(cell, ids)


@pytest.mark.slow
def test_no_view_of_the_buffer_outlives_a_compiling_read(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile leaves its frames (and its callers') in a reference cycle until the next garbage collection: the
    first read of a long line in a process kept an array over the memory-mapped file alive, and closing the
    map raised ``BufferError`` (gc disabled here to make the timing certain). The compiler is given types only."""
    import gc

    from numba import njit

    from packing.reading import limits

    # the parser's and the scanner's compiled functions made anew, with no version and no cache: their next call
    # compiles, as a process's first call does when numba's cache is missing or stale
    for module, name in ((longrows, "_plain_lists"), (longrows, "_integers"), (limits, "_scan")):
        monkeypatch.setattr(module, name, njit(nogil=True)(getattr(module, name).py_func))

    line = json.dumps({"input_ids": list(range(200_000)), "note": "x"}).encode()
    assert len(line) >= longrows.LONG_LINE
    path = tmp_path / "long.jsonl"
    path.write_bytes(line + b"\n")
    held = bytearray(line)
    gc.disable()
    try:
        assert packing.read_dataset(path).samples.lengths.tolist() == [200_000]  # the map closed once read
        with memoryview(held) as raw:
            assert longrows.json_line(raw, "held", "line 1")["input_ids"][-1] == 199_999
        held += b"\n"  # no export left: the bytearray can be resized
    finally:
        gc.enable()
