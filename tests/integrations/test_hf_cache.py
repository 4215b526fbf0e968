"""The ``datasets`` door as bounded as the command line: ``pack_batch`` takes Arrow batches (``with_format("arrow")``,
as TRL's ``pack_dataset`` maps) and gives the blocks Python batches give; ``pack_dataset`` reads a dataset with
cache files batch by batch and writes its blocks chunk by chunk to a cache file next to them, the same blocks as in
memory, found again rather than packed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

datasets = pytest.importorskip("datasets")

import packing  # noqa: E402
import packing.hf  # noqa: E402
from packing.hf import pack_batch, pack_dataset  # noqa: E402

LENGTH = 16


def token_rows(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 900, int(n)).tolist() for n in rng.integers(1, 2 * LENGTH, count)]


def mixed_rows() -> dict[str, list[Any]]:
    """Token rows, prompt/completion rows and masks in one table (nulls in the other form's columns), with an
    ``attention_mask`` aligned with the tokens (carried)."""
    ids = token_rows(60, seed=1)
    rows: dict[str, list[Any]] = {
        "input_ids": [],
        "prompt": [],
        "completion": [],
        "loss_mask": [],
        "attention_mask": [],
    }
    for i, row in enumerate(ids):
        pair = i % 3 == 1 and len(row) > 1
        rows["input_ids"].append(None if pair else row)
        rows["prompt"].append(row[: len(row) // 2] if pair else None)
        rows["completion"].append(row[len(row) // 2 :] if pair else None)
        rows["loss_mask"].append([int(t % 2) for t in row] if i % 3 == 2 else None)
        rows["attention_mask"].append([1] * (len(row) - 1) + [0])
    return rows


def saved(rows: dict[str, list[Any]], folder: Path) -> Any:
    """The rows as a user's dataset: saved to disk and loaded back (memory-mapped, with cache files)."""
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder))
    return datasets.load_from_disk(str(folder))


def test_arrow_batches_give_the_blocks_python_batches_give() -> None:
    ds = datasets.Dataset.from_dict(mixed_rows())
    kwargs: dict[str, Any] = {
        "batched": True,
        "batch_size": 7,
        "remove_columns": ds.column_names,
        "fn_kwargs": {"max_seq_length": LENGTH, "strategy": "bfd", "loss": "all"},
    }
    by_python = ds.map(pack_batch, **kwargs)
    by_arrow = ds.with_format("arrow").map(pack_batch, **kwargs)  # TRL's map path: no Python list in between
    assert by_arrow.with_format(None)[:] == by_python[:]
    assert "attention_mask" in by_arrow.column_names
    table = pack_batch(pa.table({"input_ids": [[1, 2], [3, 4, 5], [6]]}), 4)
    assert isinstance(table, pa.Table)
    assert table.to_pydict() == pack_batch({"input_ids": [[1, 2], [3, 4, 5], [6]]}, 4)
    assert pack_batch(pa.table({"input_ids": [[1, 2]]}).to_batches()[0], 4).num_rows == 1  # a record batch too


def test_a_python_format_batch_is_read_from_its_arrow_columns_and_a_column_set_on_it_is_honoured() -> None:
    """``Dataset.map`` in the default format hands over a batch whose columns are Arrow until one is read: packed
    from them without a Python list (the columns stay unread), the same blocks as ``pack`` on the rows; a column the
    map function set first is the one packed."""
    rows = mixed_rows()
    ds = datasets.Dataset.from_dict(rows)
    unread: list[set[str]] = []

    def packed(batch: Any) -> Any:
        out = pack_batch(batch, LENGTH)
        unread.append(set(batch.keys_to_format))
        return out

    by_map = ds.map(packed, batched=True, batch_size=len(ds), remove_columns=ds.column_names)
    assert unread == [set(ds.column_names)]
    listed = [
        {name: value for name, value in zip(rows, values, strict=True)} for values in zip(*rows.values(), strict=True)
    ]
    reference = packing.pack(listed, LENGTH)
    assert by_map["seq_lengths"] == [reference.seq_lengths(b).tolist() for b in range(reference.num_blocks)]

    def doubled(batch: Any) -> Any:
        batch["input_ids"] = [None if ids is None else ids + ids for ids in batch["input_ids"]]
        batch["loss_mask"] = [None] * len(batch["input_ids"])
        return pack_batch(batch, 4 * LENGTH, carry=[])

    by_set = ds.map(doubled, batched=True, batch_size=len(ds), remove_columns=ds.column_names)
    tokens = sum(2 * len(ids) if ids else 0 for ids in rows["input_ids"])
    tokens += sum(len(p) + len(c) for p, c in zip(rows["prompt"], rows["completion"], strict=True) if p is not None)
    assert sum(map(sum, by_set["seq_lengths"])) == tokens


def test_a_bad_row_in_an_arrow_batch_is_named_as_in_a_python_batch() -> None:
    with pytest.raises(packing.SampleError) as by_arrow:
        pack_batch(pa.table({"input_ids": [[1, 2], [3, -4]]}), 4)
    with pytest.raises(packing.SampleError) as by_python:
        pack_batch({"input_ids": [[1, 2], [3, -4]]}, 4)
    assert (
        str(by_arrow.value)
        == str(by_python.value)
        == ("sample 1, 'input_ids', position 1: expected a non-negative integer token id, got -4")
    )


def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of three blocks: the cache file is written in many parts."""
    monkeypatch.setattr(packing.hf, "_CHUNK_SLOTS", 3 * LENGTH)


def test_pack_dataset_writes_its_blocks_to_a_cache_file_chunk_by_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_chunks(monkeypatch)
    rows = mixed_rows()
    ds = saved(rows, tmp_path / "rows")
    packed = pack_dataset(ds, LENGTH, loss="all")
    (cache,) = packed.cache_files
    written = Path(cache["filename"])
    assert written.parent == Path(ds.cache_files[0]["filename"]).parent and written.name.startswith("packing-")
    in_memory = pack_dataset(datasets.Dataset.from_dict(rows), LENGTH, loss="all")
    assert in_memory.cache_files == []
    assert packed[:] == in_memory[:]  # every column, the carried attention_mask too, across chunk edges
    assert len(packed) > 3 * 4  # many chunks
    assert [p.name for p in written.parent.iterdir() if p.name.startswith(".")] == []  # no temporary, no lock left

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("packed again")

    monkeypatch.setattr(packing.hf, "run", never)
    again = pack_dataset(ds, LENGTH, loss="all")  # the same rows and settings: the file is found
    assert again.cache_files == packed.cache_files and again[:] == packed[:]
    with pytest.raises(AssertionError, match="packed again"):
        pack_dataset(ds, LENGTH, loss="completion")  # other settings: another file


def test_pack_dataset_reads_a_shuffled_selection_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small_chunks(monkeypatch)
    rows = token_rows(3000, seed=5)
    ds = saved({"input_ids": rows}, tmp_path / "rows")
    chosen = ds.shuffle(seed=3).select(range(0, 3000, 2))  # an indices mapping over the memory-mapped table
    packed = pack_dataset(chosen, LENGTH, strategy="ffd", shuffle=False)
    order = [rows[i] for i in chosen._indices.column(0).to_pylist()]
    expected = packing.pack(order, LENGTH, strategy="ffd").to_arrow(padding=False).to_pydict()
    assert packed[:] == expected
    assert packed.cache_files


def test_pack_dataset_writes_where_it_is_told(tmp_path: Path) -> None:
    target = tmp_path / "blocks.arrow"
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]]}), 4, cache_file_name=target)
    assert Path(packed.cache_files[0]["filename"]) == target
    assert sorted(packed["input_ids"]) == [[1, 2, 3]]
    other = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[4]]}), 4, cache_file_name=target)
    assert other["input_ids"] == [[4]]  # a named file is written again, never taken for another packing's
    empty = pack_dataset(
        datasets.Dataset.from_dict({"input_ids": [[9] * 9]}), 4, overflow="drop", cache_file_name=tmp_path / "e.arrow"
    )
    assert len(empty) == 0 and empty.column_names == list(packing.hf.PACKED_COLUMNS)
