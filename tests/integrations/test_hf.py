"""Packing Hugging Face datasets: global (pack_dataset) and shard-local (Dataset.map + pack_batch)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from packing import SampleError, SettingError, pack  # noqa: E402
from packing.batches import COLUMNS  # noqa: E402
from packing.core import IGNORE_INDEX  # noqa: E402
from packing.hf import PACKED_COLUMNS, pack_batch, pack_dataset  # noqa: E402

Dataset = datasets.Dataset


def rows(dataset: object) -> list[dict[str, list[int]]]:
    return [dict(row) for row in dataset]  # type: ignore[attr-defined]


def real(grid: np.ndarray, seq_lengths: list[list[int]]) -> list[list[int]]:
    """The rows of a padded ``(blocks, max_seq_length)`` grid cut to their real tokens: what the adapters write."""
    return [row[: sum(lengths)] for row, lengths in zip(grid.tolist(), seq_lengths, strict=True)]


def test_importing_the_module_imports_neither_datasets_nor_pyarrow() -> None:
    code = "import sys, packing.hf; print('datasets' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_pack_dataset_tiny_input_by_hand() -> None:
    ds = Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]], "text": ["a", "b", "c"]})
    packed = pack_dataset(ds, 4, shuffle=False)
    assert packed.column_names == list(PACKED_COLUMNS)
    # bfd: [3, 4, 5] opens block 0, [1, 2] does not fit there and opens block 1, [6] fills block 0.
    # Rows hold the real tokens only, as TRL's pack_dataset writes them (its collator reads seq_lengths).
    assert packed[:] == {
        "input_ids": [[3, 4, 5, 6], [1, 2]],
        "labels": [[-100, 4, 5, -100], [-100, 2]],
        "loss_mask": [[1, 1, 1, 1], [1, 1]],
        "position_ids": [[0, 1, 2, 0], [0, 1]],
        "sequence_ids": [[1, 1, 1, 2], [0, 0]],
        "seq_lengths": [[3, 1], [2]],
    }
    for column in COLUMNS:  # the one schema's dtypes
        assert str(packed.features[column.name].feature.dtype) == column.dtype


def test_pack_dataset_pad_token_strategy_and_overflow() -> None:
    ds = Dataset.from_dict({"input_ids": [[1, 2, 3, 4, 5, 6], [7], [8, 9]]})
    packed = pack_dataset(ds, 4, strategy="next_fit", overflow="split", pad_token_id=99, shuffle=False)
    # overflow="split" cuts the first row into [1..4] and [5, 6]; next_fit keeps input order.
    assert packed["input_ids"] == [[1, 2, 3, 4], [5, 6, 7], [8, 9]]  # no padding kept: 99 never written
    assert packed["seq_lengths"] == [[4], [2, 1], [2]]
    assert packed["position_ids"] == [[0, 1, 2, 3], [0, 1, 0], [0, 1]]
    truncated = pack_dataset(ds, 4, strategy="next_fit", shuffle=False)
    assert truncated["input_ids"] == [[1, 2, 3, 4], [7, 8, 9]]


def test_pack_dataset_shuffles_blocks_reproducibly() -> None:
    rng = np.random.default_rng(1)
    ids = [rng.integers(1, 1000, int(n)).tolist() for n in rng.integers(1, 30, 60)]
    ds = Dataset.from_dict({"input_ids": ids})
    ordered = rows(pack_dataset(ds, 32, shuffle=False))
    shuffled = rows(pack_dataset(ds, 32, seed=7))
    assert len(ordered) > 5
    assert shuffled != ordered
    assert sorted(map(str, shuffled)) == sorted(map(str, ordered))
    assert rows(pack_dataset(ds, 32, seed=7)) == shuffled
    assert rows(pack_dataset(ds, 32, seed=8)) != shuffled


@pytest.mark.parametrize("strategy", ["split", "next_fit", "first_fit", "ffd", "bfd", "spfhp", "none"])
def test_pack_dataset_matches_pack_on_the_same_rows(strategy: str) -> None:
    rng = np.random.default_rng(2)
    ids = [rng.integers(0, 50_000, int(n)).tolist() for n in rng.integers(0, 70, 200)]
    masks = [rng.integers(0, 2, len(row)).tolist() for row in ids]
    ds = Dataset.from_dict({"input_ids": ids, "loss_mask": masks})
    expected = pack([{"input_ids": i, "loss_mask": m} for i, m in zip(ids, masks, strict=True)], 64, strategy=strategy)
    got = pack_dataset(ds, 64, strategy=strategy, shuffle=False)
    lengths = [expected.seq_lengths(b).tolist() for b in range(expected.num_blocks)]
    assert got["seq_lengths"] == lengths
    for name in ("input_ids", "labels", "loss_mask", "position_ids", "sequence_ids"):
        assert got[name] == real(getattr(expected, name), lengths), name


def test_pack_dataset_reads_the_selected_rows_not_the_underlying_table() -> None:
    ds = Dataset.from_dict({"input_ids": [[1], [2, 2], [3, 3, 3], [4, 4, 4, 4]]})
    view = ds.select([3, 1])  # an indices mapping over the full table
    packed = pack_dataset(view, 8, shuffle=False)
    assert packed["input_ids"] == [[4, 4, 4, 4, 2, 2]]
    assert pack_dataset(ds.shuffle(seed=0).select(range(2)), 8, shuffle=False).num_rows == 1


def test_pack_dataset_reads_wide_and_chunked_arrow_columns() -> None:
    import pyarrow as pa

    part = pa.array([[1, 2], [3]], type=pa.large_list(pa.int32()))
    table = pa.Table.from_batches(
        [pa.record_batch([part], names=["input_ids"]), pa.record_batch([part.slice(1)], names=["input_ids"])]
    )
    packed = pack_dataset(Dataset(table), 3, strategy="next_fit", shuffle=False)
    assert packed["input_ids"] == [[1, 2, 3], [3]]


def test_pack_dataset_loss_mask_and_null_masks() -> None:
    ds = Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]], "loss_mask": [[0, 1, 1], None]})
    packed = pack_dataset(ds, 5, strategy="next_fit", shuffle=False)
    assert packed["loss_mask"] == [[0, 1, 1, 1, 1]]  # a null mask trains on every token
    assert packed["labels"] == [[-100, 2, 3, -100, 5]]


def test_prompt_completion_masking_global_and_shard_local() -> None:
    ds = Dataset.from_dict({"prompt": [[1, 2], [5]], "completion": [[3, 4], [6, 7]]})
    packed = pack_dataset(ds, 8, strategy="next_fit", shuffle=False)
    assert packed[:] == {
        "input_ids": [[1, 2, 3, 4, 5, 6, 7]],
        "labels": [[-100, -100, 3, 4, -100, 6, 7]],
        "loss_mask": [[0, 0, 1, 1, 0, 1, 1]],
        "position_ids": [[0, 1, 2, 3, 0, 1, 2]],
        "sequence_ids": [[0, 0, 0, 0, 1, 1, 1]],
        "seq_lengths": [[4, 3]],
    }
    mapped = ds.map(
        pack_batch,
        batched=True,
        remove_columns=ds.column_names,
        fn_kwargs={"max_seq_length": 8, "strategy": "next_fit"},
    )
    assert mapped[:] == packed[:]
    everything = pack_dataset(ds, 8, strategy="next_fit", loss="all", shuffle=False)
    assert everything["loss_mask"] == [[1, 1, 1, 1, 1, 1, 1]]
    assert everything["labels"] == [[-100, 2, 3, 4, -100, 6, 7]]


def test_map_batched_packs_within_each_batch_and_keeps_every_token_once() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 9, 11)
    # token ids are unique and name their row: row r holds 100 * r + 1, 100 * r + 2, ...
    ids = [[100 * r + j + 1 for j in range(int(n))] for r, n in enumerate(lengths)]
    ds = Dataset.from_dict({"input_ids": ids, "other": list(range(len(ids)))})
    mapped = ds.map(
        pack_batch,
        batched=True,
        batch_size=2,
        remove_columns=ds.column_names,
        fn_kwargs={"max_seq_length": 10, "strategy": "bfd"},
    )
    assert mapped.column_names == list(PACKED_COLUMNS)
    packed_tokens = []
    for block in mapped:
        tokens = block["input_ids"]
        assert sum(block["seq_lengths"]) == len(tokens) and 0 not in tokens  # real tokens only
        assert {(t - 1) // 100 // 2 for t in tokens} <= {(tokens[0] - 1) // 100 // 2}  # one batch of 2 rows
        packed_tokens.extend(tokens)
    assert Counter(packed_tokens) == Counter(t for row in ids for t in row)
    assert len(packed_tokens) == int(lengths.sum())
    assert any(len(block) > 1 for block in mapped["seq_lengths"])
    # global packing sees every row at once and needs fewer blocks here (4 against 7)
    assert pack_dataset(ds, 10).num_rows < mapped.num_rows


def test_pack_batch_reads_loss_mask_column_and_ignores_other_columns() -> None:
    out = pack_batch({"input_ids": [[1, 2], [3]], "loss_mask": [[1, 0], None], "text": ["x", "y"]}, 4)
    assert out["input_ids"] == [[1, 2, 3]]
    assert out["loss_mask"] == [[1, 0, 1]]
    assert out["labels"] == [[IGNORE_INDEX] * 3]  # first tokens and a masked token


@pytest.mark.parametrize(
    ("columns", "error", "message"),
    [
        ({"note": [[1]]}, SampleError, "sample 0: expected a list of token ids, or a dict with 'input_ids'"),
        ({"text": ["hello"]}, SampleError, "sample 0, 'text': expected token ids \\(a text row needs a tokenizer"),
        ({"prompt": [[1]]}, SampleError, "sample 0, 'completion': expected a list of token ids"),
        ({"input_ids": [[1, -2]]}, SampleError, "sample 0, 'input_ids', position 1"),
        ({"input_ids": [[1, 2], [3]], "loss_mask": [[1, 1], [2]]}, SampleError, "sample 1, 'loss_mask', position 0"),
        ({"input_ids": [[1, 2]], "loss_mask": [[1]]}, SampleError, "expected 2 values"),
        ({"input_ids": [[1.5]]}, SampleError, r"position 0: expected a non-negative integer token id, got 1\.5"),
        ({"input_ids": [[1], None]}, SampleError, "sample 1: expected a list of token ids"),
    ],
)
def test_pack_dataset_reports_bad_input(columns: dict[str, list[object]], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        pack_dataset(Dataset.from_dict(columns), 4)


def test_pack_dataset_checks_its_arguments() -> None:
    ds = Dataset.from_dict({"input_ids": [[1]]})
    with pytest.raises(SettingError, match="strategy: expected one of split, wrapped, next_fit"):
        pack_dataset(ds, 4, strategy="best")
    with pytest.raises(SettingError, match="max_seq_length"):
        pack_dataset(ds, 4.0)  # type: ignore[arg-type]
    with pytest.raises(SettingError, match="shuffle"):
        pack_dataset(ds, 4, shuffle=1)  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=r"dataset: expected a datasets\.Dataset"):
        pack_dataset([[1, 2]], 4)


def test_pack_dataset_of_nothing_is_an_empty_dataset_with_the_columns() -> None:
    empty = pack_dataset(Dataset.from_dict({"input_ids": [[1]]}).select([]), 4)
    assert empty.num_rows == 0
    assert empty.column_names == list(PACKED_COLUMNS)


def test_pack_dataset_fingerprint_follows_the_source_and_the_settings() -> None:
    ds = Dataset.from_dict({"input_ids": [[1, 2], [3]]})
    first = pack_dataset(ds, 4, seed=1)._fingerprint
    assert pack_dataset(ds, 4, seed=1)._fingerprint == first
    assert pack_dataset(ds, 4, seed=2)._fingerprint != first
    assert pack_dataset(ds, 8, seed=1)._fingerprint != first
    assert pack_dataset(Dataset.from_dict({"input_ids": [[1, 2], [4]]}), 4, seed=1)._fingerprint != first


def test_both_sample_forms_in_one_dataset_are_refused() -> None:
    both = {"input_ids": [[1, 2, 3]], "prompt": [[1, 2]], "completion": [[3]]}
    message = "sample 0: expected one form, 'input_ids' or 'prompt'/'completion', got <both>"
    with pytest.raises(SampleError, match=message):
        pack_dataset(datasets.Dataset.from_dict(both), 4)
    with pytest.raises(SampleError, match=message):
        pack_batch(both, 4)
    # rows of mixed forms, as Dataset.from_list makes them (nulls in the other form's columns), are fine
    mixed = [{"input_ids": [1, 2], "prompt": None, "completion": None}, {"prompt": [3], "completion": [4]}]
    assert pack_dataset(datasets.Dataset.from_list(mixed), 4, shuffle=False)["input_ids"] == [[1, 2, 3, 4]]
    assert pack_batch({"input_ids": [[1, 2], None], "prompt": [None, [3]], "completion": [None, [4]]}, 4)[
        "loss_mask"
    ] == [[1, 1, 0, 1]]


def test_a_column_named_loss_weights_is_not_carried() -> None:
    """A user column called ``loss_weights`` would be read by ``collate`` as this project's per-token weights:
    it is not carried, and naming it in ``carry`` is refused."""
    datasets = pytest.importorskip("datasets")
    from packing.hf import pack_dataset

    rows = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]], "loss_weights": [[9.0, 9.0, 9.0], [9.0, 9.0]]})
    assert "loss_weights" not in pack_dataset(rows, 8, shuffle=False).column_names
    from packing.errors import SettingError

    with pytest.raises(SettingError, match="carry"):
        pack_dataset(rows, 8, shuffle=False, carry=["loss_weights"])


CACHED_RECIPES = [
    {"roles_to_train": ["user", "assistant"]},
    {"roles_to_train": ["user"]},
    {"roles_to_train": ["assistant"], "train_on_eos": "none"},
    {"loss": "all"},
    {"roles_to_train": ["user"]},
]


def test_a_dataset_on_disk_is_never_served_another_recipes_cache(tmp_path: Any) -> None:
    """Packing the same saved rows with recipes that differ in one option (roles, EOS rule, loss, template) each
    time gives that recipe's masks, as ``pack`` does, not an earlier packing's cache file."""
    chat = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
        ]
    }
    datasets.Dataset.from_list([chat] * 3).save_to_disk(str(tmp_path / "saved"))
    saved = datasets.load_from_disk(str(tmp_path / "saved"))
    for options in CACHED_RECIPES:
        packed = pack_dataset(saved, 64, tokenizer="bytes", **options)
        expected = pack([chat] * 3, 64, tokenizer="bytes", **options)
        assert sum(map(sum, packed["loss_mask"])) == int(expected.loss_mask.sum()), options
    assert len(list((tmp_path / "saved").glob("packing-*.arrow"))) == len(CACHED_RECIPES) - 1  # the last one reused
