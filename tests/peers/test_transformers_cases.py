"""transformers' own published test cases for ``DataCollatorWithFlattening`` (its ``tests/trainer/test_data_collator.py``,
class ``TestDataCollatorWithFlattening``), re-stated (inputs and expected outputs, not its code) and run against
``packing.torch.collate``; each case is the same, or an asserted, explained difference (said in its docstring).
Each case also runs the installed collator on the same inputs, so a change on either side shows here."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import packing  # noqa: E402
from packing.torch import collate  # noqa: E402
from tests.helpers.peer_batches import assert_same_batch  # noqa: E402

Flattening = transformers.DataCollatorWithFlattening
THREE = [[10, 11, 12], [20, 21, 22, 23, 24, 25], [30, 31, 32, 33, 34, 35, 36]]
"""The three documents of transformers' cases (lengths 3, 6, 7)."""
FLAT = [10, 11, 12, 20, 21, 22, 23, 24, 25, 30, 31, 32, 33, 34, 35, 36]
POSITIONS = [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6]


def features() -> list[dict[str, list[int]]]:
    return [{"input_ids": list(ids)} for ids in THREE]


def test_basic_flattening() -> None:
    """Same: one row of the 16 tokens, positions restarting per document, and by default no ``attention_mask``,
    no ``cu_seq_lens_q``/``_k``, no ``seq_idx``."""
    ours = collate(features())
    assert tuple(ours["input_ids"].shape) == (1, 16) and ours["input_ids"][0].tolist() == FLAT
    assert ours["position_ids"][0].tolist() == POSITIONS
    assert not {"attention_mask", "cu_seq_lens_k", "cu_seq_lens_q", "seq_idx"} & set(ours)
    assert_same_batch(ours, Flattening(return_tensors="pt")(features()))


def test_flash_attn_kwargs() -> None:
    """Same: ``cu_seq_lens_q`` = ``cu_seq_lens_k`` = [0, 3, 9, 16], ``max_length_q`` = ``max_length_k`` = 7."""
    ours = collate(features(), return_flash_attn_kwargs=True)
    assert ours["cu_seq_lens_k"].tolist() == ours["cu_seq_lens_q"].tolist() == [0, 3, 9, 16]
    assert ours["max_length_k"] == ours["max_length_q"] == 7
    assert_same_batch(ours, Flattening(return_tensors="pt", return_flash_attn_kwargs=True)(features()))


def test_seq_idx() -> None:
    """Same: ``seq_idx`` numbers every token's document."""
    ours = collate(features(), return_seq_idx=True)
    assert ours["seq_idx"][0].tolist() == [0] * 3 + [1] * 6 + [2] * 7
    assert_same_batch(ours, Flattening(return_tensors="pt", return_seq_idx=True)(features()))


def test_with_labels() -> None:
    """Same: labels given as tensors or lists (values other than the ids) give ``(1, 5)`` labels, kept, with the
    separator (-100) on each document's first token."""
    as_tensors = [
        {"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([10, 11, 12])},
        {"input_ids": torch.tensor([4, 5]), "labels": torch.tensor([13, 14])},
    ]
    as_lists = [{"input_ids": [1, 2, 3], "labels": [10, 11, 12]}, {"input_ids": [4, 5], "labels": [13, 14]}]
    for rows in (as_tensors, as_lists):
        ours = collate(rows)
        assert tuple(ours["input_ids"].shape) == tuple(ours["labels"].shape) == (1, 5)
        assert ours["labels"].tolist() == [[-100, 11, 12, -100, 14]]
        assert_same_batch(ours, Flattening(return_tensors="pt")(rows))


def test_numpy_output() -> None:
    """Same: ``return_tensors="np"`` gives numpy ``input_ids`` and ``position_ids`` of shape ``(1, 16)``."""
    ours = collate(features(), return_tensors="np")
    assert isinstance(ours["input_ids"], np.ndarray)
    assert ours["input_ids"].shape == ours["position_ids"].shape == (1, 16)
    assert_same_batch(ours, Flattening(return_tensors="np")(features()))


def test_numpy_flash_attn_kwargs() -> None:
    """Same: with numpy output, ``cu_seq_lens_k`` = [0, 3, 9, 16] and ``max_length_k`` = 7 (a Python int)."""
    ours = collate(features(), return_tensors="np", return_flash_attn_kwargs=True)
    assert ours["cu_seq_lens_k"].tolist() == [0, 3, 9, 16] and ours["max_length_k"] == 7
    assert type(ours["max_length_k"]) is int
    assert_same_batch(ours, Flattening(return_tensors="np", return_flash_attn_kwargs=True)(features()))


@pytest.mark.parametrize("tensors", ["pt", "np"])
def test_immutability(tensors: str) -> None:
    """Same: collating leaves the rows as they were (lists, tensors and arrays), for both output kinds."""
    for make in (list, torch.tensor, np.array):
        rows = [{"input_ids": make(ids), "labels": make(ids)} for ids in THREE]
        before = copy.deepcopy(rows)
        collate(rows, return_tensors=tensors)  # type: ignore[arg-type]
        Flattening(return_tensors=tensors)(copy.deepcopy(before))
        for row, kept in zip(rows, before, strict=True):
            assert all(np.array_equal(np.asarray(row[k]), np.asarray(kept[k])) for k in kept)


# ---------------------------------------------------------------- cases from the collator's source and docstring


def test_every_example_empty() -> None:
    """Same kind of error, other words: transformers raises ``ValueError`` ("received a batch where every example
    is empty"); packing's ``SettingError`` is a ``ValueError`` too, worded as every packing error."""
    rows = [{"input_ids": []}, {"input_ids": []}]
    with pytest.raises(ValueError, match="every example is empty"):
        Flattening()(rows)
    with pytest.raises(ValueError, match=r"^rows: expected at least one token \(.*sampler\.collate\), got <no token>$"):
        collate(rows)


def test_empty_examples_are_skipped() -> None:
    """Same: an empty example among others is left out (no zero-length document in ``cu_seq_lens``)."""
    rows = [{"input_ids": [1, 2]}, {"input_ids": []}, {"input_ids": [3]}]
    assert_same_batch(collate(rows, return_flash_attn_kwargs=True), Flattening(return_flash_attn_kwargs=True)(rows))


def test_separator_and_position_start() -> None:
    """Same: ``separator_id`` labels every document's first token; ``position_ids_start`` (for RoBERTa-like
    models, whose positions start at ``padding_idx + 1``) starts every document's positions."""
    ours = collate(features(), separator_id=-1, position_ids_start=2)
    assert ours["labels"][0].tolist()[:4] == [-1, 11, 12, -1]
    assert ours["position_ids"][0].tolist()[:4] == [2, 3, 4, 2]
    assert_same_batch(ours, Flattening(separator_id=-1, position_ids_start=2)(features()))


def test_pad_to_multiple_of_is_a_difference() -> None:
    """Difference: transformers' collator takes no ``pad_to_multiple_of`` (``TypeError``); packing's pads as TRL's
    padding-free collator does (pad id, label -100, each padding token a sequence of its own)."""
    with pytest.raises(TypeError):
        Flattening(pad_to_multiple_of=8)
    ours = collate(features(), pad_to_multiple_of=8, return_flash_attn_kwargs=True)
    assert ours["input_ids"].shape[1] == 16  # already a multiple
    ours = collate(features()[:2], pad_to_multiple_of=8, return_flash_attn_kwargs=True)
    assert ours["input_ids"][0].tolist()[9:] == [0] * 7 and ours["cu_seq_lens_q"].tolist() == [0, 3, *range(9, 17)]


def test_labels_read_per_row_is_a_difference() -> None:
    """Difference: transformers reads ``labels`` for every example when the first has them (a later example
    without them is a ``KeyError``) and for none when the first has none (a later example's labels are dropped);
    packing reads each row on its own: given labels are kept, a row without them trains on its ids."""
    first_has = [{"input_ids": [1, 2], "labels": [-100, 9]}, {"input_ids": [3, 4]}]
    with pytest.raises(KeyError):
        Flattening()(first_has)
    assert collate(first_has)["labels"].tolist() == [[-100, 9, -100, 4]]
    first_lacks = first_has[::-1]
    assert Flattening()(first_lacks)["labels"].tolist() == [[-100, 4, -100, 2]]  # the 9 is lost
    assert collate(first_lacks)["labels"].tolist() == [[-100, 4, -100, 9]]


def test_loss_masks_are_a_difference() -> None:
    """Difference, on purpose: a loss mask in a row (``completion_mask``, ``assistant_masks``, ``loss_mask``) masks
    its labels in packing, where transformers ignores it and trains every token but each first;
    ``ignore_masks=True`` gives transformers' labels exactly."""
    rows = [{"input_ids": [1, 2, 3], "completion_mask": [0, 0, 1]}, {"input_ids": [4, 5], "assistant_masks": [0, 1]}]
    theirs = Flattening()(rows)
    assert theirs["labels"].tolist() == [[-100, 2, 3, -100, 5]]
    assert collate(rows)["labels"].tolist() == [[-100, -100, 3, -100, 5]]
    assert_same_batch(collate(rows, ignore_masks=True), theirs)


def test_other_keys_are_a_difference() -> None:
    """Difference: transformers' output has only its own keys, whatever else a row holds; so has packing's (an
    ``attention_mask`` in a row is never passed on: the model must not get one with flattened documents). Rows of
    other forms (prompt/completion, text with a tokenizer, packed blocks) are packing's alone."""
    rows: list[dict[str, Any]] = [{"input_ids": [1, 2], "attention_mask": [1, 1], "token_type_ids": [0, 0]}]
    assert set(collate(rows)) == set(Flattening()(rows)) == {"input_ids", "labels", "position_ids"}
    assert collate([{"prompt": [1, 2], "completion": [3]}])["labels"].tolist() == [[-100, -100, 3]]
    with pytest.raises(packing.SettingError, match=r"^return_tensors: expected 'pt' or 'np'"):
        collate(rows, return_tensors="tf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="return_tensors must be one of"):
        Flattening(return_tensors="tf")(rows)
