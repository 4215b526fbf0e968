"""Pairs and groups as a careless or hostile user writes them: any value in any part, a unit carrying another
form's column, a text part among token ids, CSV cells. Every door reads them through the one reader, which either
reads a unit or refuses it in one located line (``SampleError``), whatever the row holds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.errors import QUOTE_LIMIT, DatasetError, NeedsTokenizer, SampleError, UnitError

PAIR = {"prompt": [1, 2, 3], "chosen": [4, 5], "rejected": [6]}
LONGEST_LINE = 400
"""A message's longest line: its fixed words and a few quoted values of at most ``QUOTE_LIMIT`` characters."""

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=60),
    st.binary(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.sampled_from(["role", "content", "a"]), inner, max_size=2),
        st.sets(st.integers(0, 9), max_size=3),
        st.builds(np.array, st.lists(st.integers(0, 2**40), max_size=4)),
        st.builds(lambda n: np.zeros((n, 2, 2), dtype=np.int64), st.integers(0, 2)),
    ),
    max_leaves=12,
)
_parts = st.one_of(st.lists(st.integers(0, 50), max_size=4), _values)


def _one_line(error: BaseException) -> None:
    text = str(error)
    assert "\n" not in text and len(text) <= LONGEST_LINE, text
    assert text.startswith("sample 0") or text.startswith("sample 1"), text


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "prompt": _parts,
            "chosen": _parts,
            "rejected": _parts,
            "completions": st.one_of(st.lists(_parts, max_size=4), _values),
            "completion": _parts,
            "input_ids": _parts,
            "chosen_mask": _parts,
            "completion_masks": _parts,
        },
    ),
    st.booleans(),
    st.booleans(),
)
def test_any_unit_row_is_read_or_refused_in_one_located_line(row: dict[str, Any], first: bool, shared: bool) -> None:
    """Whatever a pair or group holds, first or after a pair: a unit, another form, or one ``SampleError``."""
    if row.get("chosen") is None and row.get("rejected") is None and row.get("completions") is None:
        row["chosen"] = [1]  # a unit row, by its keys
    rows = [row] if first else [PAIR, row]
    try:
        samples = packing.read_rows(rows, share_prompt=shared)
    except SampleError as error:
        _one_line(error)
        return
    assert samples.units is not None  # a unit row is never read as a plain row
    kinds = samples.units.kind.tolist()
    assert kinds[-1] in (1, 2), kinds


@pytest.mark.parametrize("other", [{"completion": [9]}, {"input_ids": [9]}, {"labels": [2, 4]}])
@pytest.mark.parametrize("where", ["alone", "after a plain row", "after a pair"])
def test_a_unit_with_another_forms_column_is_refused_wherever_it_comes(other: dict[str, Any], where: str) -> None:
    """Never read as the other form (its chosen and rejected silently lost): refused, by name, as a unit."""
    row = {"prompt": [1], "chosen": [2], "rejected": [3], **other}
    before = {"alone": [], "after a plain row": [[7, 8]], "after a pair": [PAIR]}[where]
    with pytest.raises(UnitError) as refused:
        packing.read_rows([*before, row])
    field = next(iter(other))
    assert str(refused.value) == (
        f"sample {len(before)}, {field!r}: expected one form: a pair or group has no {field!r} (the row has "
        "'chosen'), got <both>"
    )


def test_a_parquet_pair_with_another_forms_column_names_its_row(tmp_path: Path) -> None:
    table = pa.table({"prompt": [[1], [2]], "chosen": [None, [3]], "rejected": [None, [4]], "completion": [[5], [6]]})
    pq.write_table(table, tmp_path / "both.parquet")
    with pytest.raises(DatasetError, match=r"both\.parquet, row 2, 'completion': expected one form: a pair or group"):
        packing.read_dataset(tmp_path / "both.parquet")


@pytest.mark.parametrize(
    ("row", "field", "text"),
    [
        ({"prompt": [1], "chosen": "yes", "rejected": [2]}, "chosen", "'yes' (str)"),
        ({"prompt": [1], "chosen": [2], "rejected": [{"role": "assistant", "content": "no"}]}, "rejected", "[{"),
        ({"prompt": [1], "completions": [[2], "three"]}, "completions[1]", "'three' (str)"),
        ({"prompt": "hi", "completions": [[2]]}, "prompt", "'hi' (str)"),
    ],
)
def test_a_text_part_among_token_ids_is_named(row: dict[str, Any], field: str, text: str) -> None:
    """The part that is text is the one named (not the prompt of ids before it), at every position in the rows."""
    for rows in ([row], [PAIR, row], [[5, 6], row]):
        with pytest.raises(NeedsTokenizer) as refused:
            packing.read_rows(rows)
        message = str(refused.value)
        assert refused.value.field == field and f", got {text}" in message, message


@pytest.mark.parametrize(
    ("completions", "got"),
    [
        (5, "got 5"),
        ({1, 2}, "got {1, 2} (set)"),
        ({"a": [1]}, "got {'a': [1]} (dict)"),
        ("abc", "got 'abc' (str)"),
        (np.array(3), "got array(3) (ndarray)"),
        (iter([[1]]), "(list_iterator)"),
        (math.nan, "got nan (float)"),
        ([], "got <no completions>"),
    ],
)
def test_completions_not_a_list_are_quoted(completions: Any, got: str) -> None:
    with pytest.raises(UnitError) as refused:
        packing.read_rows([{"prompt": [1], "completions": completions}])
    message = str(refused.value)
    assert message.startswith("sample 0, 'completions': expected at least one completion") and got in message
    assert "\n" not in message and len(message) < 2 * QUOTE_LIMIT + 120


def test_an_array_of_completions_reads_each_row_and_names_a_bad_one() -> None:
    read = packing.read_rows([{"prompt": [1], "completions": np.array([[2, 3], [4, 5]])}])
    assert read.tokens.tolist() == [1, 2, 3, 1, 4, 5]
    with pytest.raises(SampleError, match=r"^sample 0, 'completions\[0\]': expected a flat list of token ids, got "):
        packing.read_rows([{"prompt": [1], "completions": np.zeros((2, 2, 2), dtype=np.int64)}])


def test_csv_files_of_pairs_and_groups_are_read(tmp_path: Path) -> None:
    (tmp_path / "pairs.csv").write_text('prompt,chosen,rejected,chosen_mask\n"[1, 2]",3 4,5,1 0\n1,2,oops,\n')
    with pytest.raises(DatasetError, match=r"pairs\.csv, line 3, 'rejected', position 0: expected a non-negative"):
        packing.read_dataset(tmp_path / "pairs.csv")
    (tmp_path / "pairs.csv").write_text('prompt,chosen,rejected,chosen_mask\n"[1, 2]",3 4,5,1 0\n')
    data = packing.read_dataset(tmp_path / "pairs.csv", share_prompt=True)
    assert data.samples.tokens.tolist() == [1, 2, 3, 4, 5] and data.samples.loss_mask.tolist() == [0, 0, 1, 0, 1]
    (tmp_path / "groups.csv").write_text('prompt,completions\n1 2,"[[3], [4, 5]]"\n7,[[8]]\n')
    assert packing.read_dataset(tmp_path / "groups.csv").lengths.tolist() == [7, 2]
    (tmp_path / "groups.csv").write_text("prompt,completions\n1 2,not json\n")
    with pytest.raises(DatasetError, match=r"line 2, 'completions': expected JSON text \(a list of completions\)"):
        packing.read_dataset(tmp_path / "groups.csv")
    (tmp_path / "text.csv").write_text("prompt,chosen,rejected\nHi,yes,no\n")
    text = packing.read_dataset(tmp_path / "text.csv", tokenizer="bytes")
    assert text.samples.units.kind.tolist() == [1] and text.lengths.tolist() == [2 + 4 + 2 + 3]


def test_a_text_unit_whose_prompt_is_token_ids_names_the_prompt() -> None:
    """Token ids and text do not mix in one unit: the prompt of ids is named, not a completion of text."""
    for row in ({"prompt": [1, 2], "chosen": "yes", "rejected": "no"}, {"prompt": [1], "completions": ["a", "b"]}):
        with pytest.raises(SampleError) as refused:
            packing.read_rows([row], tokenizer="bytes")
        message = str(refused.value)
        assert message.startswith("sample 0, 'prompt': expected a string, as the unit's completions are")
        assert message.endswith(f"got {row['prompt']} (list)")
    with pytest.raises(
        UnitError, match=r"^sample 0, 'completions': expected at least one completion .* got 'ab' \(str\)"
    ):
        packing.read_rows([{"prompt": "hi", "completions": "ab"}], tokenizer="bytes")


def test_a_tensor_of_floats_is_quoted_as_a_number() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(SampleError) as refused:
        packing.read_rows([{"prompt": torch.tensor([1.0, 2.0]), "chosen": [3], "rejected": [4]}])
    assert (
        str(refused.value)
        == "sample 0, 'prompt', position 0: expected a non-negative integer token id, got 1.0 (float)"
    )
