"""``hf.pack_dataset`` (and ``pack_batch``) carry the other list columns TRL's ``pack_dataset`` carries
(``attention_mask``, ``token_type_ids``, any column aligned with the tokens), cut and packed as the tokens are,
checked against TRL's own output on random rows; what is refused, and how."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

datasets = pytest.importorskip("datasets")
pytest.importorskip("trl")

from trl.data_utils import pack_dataset as trl_pack_dataset  # noqa: E402

import packing  # noqa: E402
from packing.hf import pack_batch, pack_dataset  # noqa: E402

Dataset = datasets.Dataset
datasets.disable_progress_bars()
CARRIED = ("attention_mask", "token_type_ids")


def documents(rows: Any, names: tuple[str, ...] = ("input_ids", *CARRIED)) -> list[tuple[tuple[int, ...], ...]]:
    """Every packed document piece, as its values in each of ``names``, sorted (block order left out)."""
    out = []
    for row in rows:
        at = 0
        for n in row["seq_lengths"]:
            out.append(tuple(tuple(row[name][at : at + n]) for name in names))
            at += n
    return sorted(out)


@st.composite
def token_rows(draw: Any) -> dict[str, list[list[int]]]:
    lengths = draw(st.lists(st.integers(0, 20), min_size=1, max_size=24))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    return {
        "input_ids": [rng.integers(1, 90, n).tolist() for n in lengths],
        "attention_mask": [rng.integers(0, 2, n).tolist() for n in lengths],
        "token_type_ids": [rng.integers(0, 3, n).tolist() for n in lengths],
    }


@settings(max_examples=30, deadline=None)
@given(columns=token_rows(), seq_length=st.integers(4, 24), split=st.booleans())
def test_carried_columns_are_trls_document_for_document(columns: dict[str, Any], seq_length: int, split: bool) -> None:
    """Same document pieces with the same values in every column as TRL's ``bfd`` / ``bfd_split``, and the same
    block count. Blocks themselves may differ where the best fit ties (the strategies' tie rule, not a column's)."""
    source = Dataset.from_dict(columns)
    ours = pack_dataset(source, seq_length, strategy="bfd", overflow="split" if split else "truncate", shuffle=False)
    if not any(columns["input_ids"]):  # a difference: TRL fails on rows that are all empty, packing packs none
        import pyarrow as pa

        with pytest.raises(pa.ArrowNotImplementedError):
            trl_pack_dataset(source, seq_length, strategy="bfd_split" if split else "bfd")
        assert ours.num_rows == 0
        return
    theirs = trl_pack_dataset(source, seq_length, strategy="bfd_split" if split else "bfd")
    assert set(CARRIED) <= set(ours.column_names)
    assert documents(ours) == documents(theirs)
    assert ours.num_rows == theirs.num_rows
    for row in ours:
        assert all(len(row[name]) == len(row["input_ids"]) for name in CARRIED)


@settings(max_examples=30, deadline=None)
@given(columns=token_rows(), seq_length=st.integers(4, 24), strategy=st.sampled_from(["ffd", "split", "next_fit"]))
def test_a_copy_of_the_tokens_is_carried_as_the_tokens(columns: dict[str, Any], seq_length: int, strategy: str) -> None:
    """Any strategy, shuffled or not, a dict of columns or a dataset, whole or batch by batch: a column equal to
    ``input_ids`` comes out equal to ``input_ids``, so each carried value sits at its own token."""
    columns = {**columns, "ids_again": columns["input_ids"]}
    whole = pack_dataset(Dataset.from_dict(columns), seq_length, strategy=strategy, seed=2)
    assert whole["ids_again"] == whole["input_ids"]
    from_dict = pack_dataset(columns, seq_length, strategy=strategy, seed=2)
    assert from_dict["ids_again"] == from_dict["input_ids"] and from_dict["attention_mask"] == whole["attention_mask"]
    local = pack_batch(columns, seq_length, strategy=strategy)
    assert local["ids_again"] == local["input_ids"]
    assert documents([dict(zip(local, v, strict=True)) for v in zip(*local.values(), strict=True)]) == documents(whole)


def test_trls_own_example_gives_trls_rows() -> None:
    """TRL's ``pack_dataset`` docstring case (bfd, seq_length 4): the same rows, column for column."""
    source = Dataset.from_dict(
        {
            "input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]],
            "attention_mask": [[1, 1, 1, 0, 0], [1, 0], [1, 1, 0], [1]],
        }
    )
    ours = pack_dataset(source, 4, strategy="bfd", shuffle=False)
    theirs = trl_pack_dataset(source, 4)
    for name in ("input_ids", "attention_mask", "seq_lengths"):
        assert ours[name] == theirs[name], name


def test_columns_out_of_line_or_not_lists_are_left_out_and_refused_when_asked_for() -> None:
    """TRL refuses a table with any such column (TypeError, ValueError); packing leaves it out, unless named in
    ``carry``, where it is refused with the row."""
    columns = {"input_ids": [[1, 2], [3, 4, 5]], "tags": [["a"], ["b", "c"]], "id": [7, 8], "mask": [[1, 0], [1, 1, 1]]}
    out = pack_dataset(columns, 4, shuffle=False)
    assert "tags" not in out.column_names and "id" not in out.column_names and out["mask"] == [[1, 1, 1], [1, 0]]
    with pytest.raises(ValueError, match="same length"):
        trl_pack_dataset(Dataset.from_dict(columns), 4)
    with pytest.raises(TypeError, match="lists of lists"):
        trl_pack_dataset(Dataset.from_dict({"input_ids": [[1, 2]], "id": [7]}), 4)
    with pytest.raises(
        packing.SampleError, match=r"^sample 0, 'tags': expected 2 values \(one per token of the row\), got <1 value>$"
    ):
        pack_dataset(columns, 4, carry=["tags"])
    with pytest.raises(
        packing.SettingError, match=r"^carry: expected a column of lists, one per row, got <column 'id'>$"
    ):
        pack_dataset(columns, 4, carry=["id"])
    with pytest.raises(
        packing.SettingError, match=r"^carry: expected a column of the dataset \(columns: 'input_ids', "
    ):
        pack_dataset(columns, 4, carry=["nope"])
    with pytest.raises(packing.SettingError, match=r"^carry: expected a column the reader does not read"):
        pack_dataset(columns, 4, carry=["input_ids"])
    assert pack_dataset(columns, 4, carry=[]).column_names == list(packing.hf.PACKED_COLUMNS)


def test_a_dataset_dict_is_refused_with_its_splits() -> None:
    splits = datasets.DatasetDict(
        {"train": Dataset.from_dict({"input_ids": [[1, 2]]}), "test": Dataset.from_dict({"input_ids": [[3]]})}
    )
    message = (
        r"^dataset: expected one split, e.g. dataset\['train'\] \(pack each split on its own\), "
        r"got <a DatasetDict with splits 'train', 'test'>$"
    )
    with pytest.raises(packing.SettingError, match=message):
        pack_dataset(splits, 4)
    assert set(trl_pack_dataset(splits, 4)) == {"train", "test"}  # a difference: TRL packs every split


def test_an_iterable_dataset_is_pointed_to_stream_dataset() -> None:
    stream = Dataset.from_dict({"input_ids": [[1, 2], [3]]}).to_iterable_dataset()
    message = (
        r"^dataset: expected a datasets.Dataset \(an IterableDataset is packed as it streams by "
        r"packing.streaming.stream_dataset\), got <an IterableDataset>$"
    )
    with pytest.raises(packing.SettingError, match=message):
        pack_dataset(stream, 4)
    assert [row["input_ids"] for row in trl_pack_dataset(stream, 4)] == [[1, 2, 3]]  # TRL maps the stream
    from packing.streaming import stream_dataset  # the name the error gives exists and packs the stream

    assert [row["input_ids"] for row in stream_dataset(stream, 4, shuffle=False)] == [[1, 2, 3]]
    with pytest.raises(packing.SettingError, match=r"got <a IterableDatasetDict with splits 'train'>$"):
        pack_dataset(datasets.IterableDatasetDict({"train": stream}), 4)


def test_a_carried_attention_mask_is_never_passed_on_and_the_auditor_names_it() -> None:
    """Carried as TRL carries it; a model given an all-ones mask over several documents would let them attend to
    each other, so the auditor reports it, and neither TRL's padding-free collator nor ``collate`` passes it on."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from packing.torch import PackedDataset, collate

    source = Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]], "attention_mask": [[1, 1], [1, 1, 1], [1]]})
    packed = pack_dataset(source, 4, shuffle=False)
    assert packing.audit(packed).counts() == {"all_ones_attention_mask": 1}  # the block [3, 4, 5, 6]
    assert packing.audit(pack_dataset(source, 4, shuffle=False, carry=[])).findings == ()
    rows = [packed[0], packed[1]]
    assert "attention_mask" not in DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    blocks = PackedDataset(packed)
    assert "attention_mask" not in collate([blocks[0], blocks[1]])
