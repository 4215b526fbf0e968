"""Typed errors with fields, and messages that never repeat more than a few dozen characters of the data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packing import DatasetError, PackingError, SampleError, SettingError, explain, pack, read_dataset
from packing.errors import QUOTE_LIMIT, TooManyDocuments, quote


def test_every_error_raised_on_purpose_is_a_packing_error() -> None:
    for kind in (SampleError, SettingError, TooManyDocuments, DatasetError):
        assert issubclass(kind, PackingError) and issubclass(kind, ValueError)


def test_a_huge_value_is_quoted_briefly(tmp_path: Path) -> None:
    huge = "x" * 50_000_000
    with pytest.raises(SampleError) as caught:
        pack([[1], [2, huge]], 4)
    assert (caught.value.sample, caught.value.field, caught.value.position) == (1, None, 1)
    assert len(str(caught.value)) < 200
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"input_ids": huge}) + "\n")
    with pytest.raises(DatasetError) as file_error:
        read_dataset(path)
    assert len(str(file_error.value)) < 200
    assert file_error.value.cause is not None and file_error.value.cause.field == "input_ids"


def test_quote_cuts_long_values_and_nested_ones() -> None:
    assert len(quote(list(range(10**6)))) <= QUOTE_LIMIT
    assert len(quote("é" * 1000)) <= QUOTE_LIMIT
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    assert len(quote(nested)) <= QUOTE_LIMIT


def test_too_many_documents_carries_its_limit_and_count() -> None:
    with pytest.raises(TooManyDocuments) as caught:
        explain([1] * 501, 4)
    assert (caught.value.strategy, caught.value.limit, caught.value.count) == ("explain", 500, 501)


def test_setting_errors_name_the_argument() -> None:
    with pytest.raises(SettingError) as caught:
        pack([[1]], 0)
    assert caught.value.name == "max_seq_length"
    with pytest.raises(SettingError) as option:
        pack([[1]], 4, strategy="bfd", max_sequences_per_block=2)
    assert option.value.name == "max_sequences_per_block" and "spfhp" in option.value.expected
