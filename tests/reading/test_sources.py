"""Every dataset shape in: files, lists, globs, folders of shards, save_to_disk folders, read as one dataset."""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
from packing._cli import main
from packing.errors import DatasetError, LimitError
from packing.layouts._export import export
from packing.reading import _files as files
from packing.reading._dataset import read_dataset
from packing.reading._limits import ReadLimits

Rows = list[dict[str, Any]]


def plain(data: Any) -> list[tuple[list[int], list[int]]]:
    """Every sample as (tokens, loss mask) lists, through the map-style interface."""
    return [(data[i]["input_ids"].tolist(), data[i]["loss_mask"].tolist()) for i in range(len(data))]


def write(path: Path, rows: Rows) -> Path:
    """``rows`` ({"input_ids", "loss_mask"}) written in the format of ``path``'s extension."""
    kind = files.format_of(path.name)
    if kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif kind == "json":
        path.write_text(json.dumps(rows))
    elif kind == "csv":
        lines = ["input_ids,loss_mask"] + [
            f'"{" ".join(map(str, row["input_ids"]))}","{" ".join(map(str, row["loss_mask"]))}"' for row in rows
        ]
        path.write_text("\n".join(lines) + "\n")
    else:
        table = pa.table({"input_ids": [r["input_ids"] for r in rows], "loss_mask": [r["loss_mask"] for r in rows]})
        if kind == "parquet":
            pq.write_table(table, path)
        else:
            with pa.ipc.new_file(path, table.schema) as sink:
                sink.write_table(table)
    return path


def rows_of(seed: int, count: int) -> Rows:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        n = rng.randint(1, 6)
        rows.append({"input_ids": [rng.randint(0, 99) for _ in range(n)], "loss_mask": [rng.randint(0, 1)] * n})
    return rows


def as_pairs(rows: Rows) -> list[tuple[list[int], list[int]]]:
    return [(row["input_ids"], row["loss_mask"]) for row in rows]


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet", "arrow", "feather"])
def test_a_folder_of_shards_of_each_format(tmp_path: Path, suffix: str) -> None:
    shards = [rows_of(seed, 3 + seed) for seed in range(3)]
    for number, rows in enumerate(shards):
        write(tmp_path / f"shard-{number:05d}.{suffix}", rows)
    (tmp_path / "README.md").write_text("not data")
    (tmp_path / ".hidden.jsonl").write_text("not read")
    data = read_dataset(tmp_path)
    assert plain(data) == as_pairs([row for rows in shards for row in rows])
    assert data.source == str(tmp_path)
    assert [Path(name).name for name in data.files] == [f"shard-{n:05d}.{suffix}" for n in range(3)]
    assert data.starts == (0, 3, 7)


def test_a_mixed_format_folder_a_list_and_a_glob(tmp_path: Path) -> None:
    parts = {name: rows_of(n, 2) for n, name in enumerate(["a.parquet", "b.jsonl", "c.csv", "d.arrow", "e.json"])}
    for name, rows in parts.items():
        write(tmp_path / name, rows)
    expected = as_pairs([row for name in sorted(parts) for row in parts[name]])
    assert plain(read_dataset(tmp_path)) == expected
    assert plain(read_dataset(str(tmp_path / "*"))) == expected
    assert plain(read_dataset([tmp_path / "e.json", tmp_path / "a.parquet"])) == as_pairs(
        parts["a.parquet"] + parts["e.json"]
    )
    assert plain(read_dataset(str(tmp_path / "[bc].*"))) == as_pairs(parts["b.jsonl"] + parts["c.csv"])


@pytest.mark.parametrize("writer", ["file", "stream"])
def test_arrow_ipc_file_and_stream(tmp_path: Path, writer: str) -> None:
    table = pa.table({"prompt": [[1, 2], [3]], "completion": [[4], [5, 6]]})
    path = tmp_path / "pairs.arrow"
    new = pa.ipc.new_file if writer == "file" else pa.ipc.new_stream
    with new(path, table.schema) as sink:
        for batch in table.to_batches(max_chunksize=1):
            sink.write_batch(batch)
    data = read_dataset(path)
    assert plain(data) == [([1, 2, 4], [0, 0, 1]), ([3, 5, 6], [0, 1, 1])]


def test_a_save_to_disk_folder_in_its_state_order(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = rows_of(7, 9)
    saved = tmp_path / "saved"
    source = datasets.Dataset.from_list(rows)
    source.save_to_disk(str(saved), num_shards=3)
    state = json.loads((saved / "state.json").read_text())
    assert len(state["_data_files"]) == 3
    data = read_dataset(saved)
    assert plain(data) == as_pairs(rows)
    assert [Path(name).name for name in data.files] == [item["filename"] for item in state["_data_files"]]
    # the order is state.json's, not the names': reversed there, reversed here
    state["_data_files"].reverse()
    (saved / "state.json").write_text(json.dumps(state))
    assert plain(read_dataset(saved)) == as_pairs(rows[6:] + rows[3:6] + rows[:3])
    splits = tmp_path / "splits"
    datasets.DatasetDict({"train": source, "test": source}).save_to_disk(str(splits))
    with pytest.raises(DatasetError, match=r"a datasets DatasetDict folder; read one of its splits: test, train$"):
        read_dataset(splits)
    assert len(read_dataset(splits / "train")) == 9


def test_the_map_style_dataset() -> None:
    data = read_dataset(io.BytesIO(b'{"input_ids": [1, 2]}\n{"prompt": [3], "completion": [4]}\n'), name="d.jsonl")
    assert len(data) == 2
    assert data[-1]["input_ids"].tolist() == [3, 4] and data[-1]["loss_mask"].tolist() == [0, 1]
    assert [len(row["input_ids"]) for row in data] == data.lengths.tolist()  # iterable: stops at the end
    with pytest.raises(IndexError, match="sample 2 out of range for 2 samples"):
        data[2]
    lengths = read_dataset(io.BytesIO(b"length\n5\n0\n"), name="l.csv")
    assert [lengths[0], lengths[1]] == [{"length": 5}, {"length": 0}]


# ---------------------------------------------------------------- stable order


SHARDS = st.lists(
    st.lists(st.lists(st.integers(0, 2**40), min_size=0, max_size=5), min_size=1, max_size=4), min_size=1, max_size=5
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shards=SHARDS,
    suffixes=st.lists(st.sampled_from(["jsonl", "json", "parquet", "arrow"]), min_size=5, max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_folder_reads_as_its_files_one_by_one_in_sorted_order(
    shards: list[list[list[int]]], suffixes: list[str], seed: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        order = list(range(len(shards)))
        random.Random(seed).shuffle(order)  # written in any order
        for number in order:
            rows = [{"input_ids": ids, "loss_mask": [1] * len(ids)} for ids in shards[number]]
            paths.append(write(Path(folder) / f"part-{number:03d}.{suffixes[number]}", rows))
        whole = read_dataset(folder)
        one_by_one = [read_dataset(path) for path in sorted(paths)]
        assert plain(whole) == [pair for data in one_by_one for pair in plain(data)]
        assert whole.lengths.tolist() == [len(ids) for rows in shards for ids in rows]
        shuffled = list(paths)
        random.Random(seed + 1).shuffle(shuffled)
        given_list = read_dataset(shuffled)
        assert plain(given_list) == plain(whole) and given_list.files == whole.files


# ---------------------------------------------------------------- errors


def test_a_bad_row_names_its_file_and_line(tmp_path: Path) -> None:
    for number in range(3):
        rows: list[Any] = [{"input_ids": [1, 2, 3, 4]} for _ in range(20)]
        if number == 2:
            rows[13] = {"input_ids": [1, 2, 3, "x"]}
        write(tmp_path / f"shard-{number:05d}.jsonl", rows)
    with pytest.raises(DatasetError) as caught:
        read_dataset(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'shard-00002.jsonl'}, line 14, 'input_ids', position 3: "
        "expected a non-negative integer token id, got 'x' (str)"
    )
    pq.write_table(pa.table({"input_ids": [[1], [2, -3]]}), tmp_path / "shard-00003.parquet")
    (tmp_path / "shard-00002.jsonl").unlink()
    with pytest.raises(DatasetError, match=r"shard-00003\.parquet, row 2, 'input_ids', position 1: expected"):
        read_dataset(tmp_path)


def test_folders_that_cannot_be_one_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"empty: a folder without dataset files \(\.jsonl, \.json, \.csv"):
        read_dataset(tmp_path / "empty")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    write(mixed / "a.jsonl", rows_of(1, 2))
    (mixed / "b.csv").write_text("length\n5\n")
    with pytest.raises(DatasetError) as caught:
        read_dataset(mixed)
    assert str(caught.value) == (
        f"{mixed / 'b.csv'}: holds lengths only, unlike {mixed / 'a.jsonl'} (token ids); "
        "every file holds token ids, or every file lengths only"
    )
    with pytest.raises(DatasetError, match=r"nowhere/\*\.jsonl: no file matches this pattern"):
        read_dataset(str(tmp_path / "nowhere" / "*.jsonl"))
    bad_state = tmp_path / "saved"
    bad_state.mkdir()
    (bad_state / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../../etc/passwd"}]}))
    with pytest.raises(DatasetError, match="expected a datasets save_to_disk state"):
        read_dataset(bad_state)


def test_limits_count_every_file(tmp_path: Path) -> None:
    for number in range(3):
        write(tmp_path / f"s{number}.jsonl", [{"input_ids": [1] * 10}] * 4)  # 4 samples, 40 tokens each file
    assert len(read_dataset(tmp_path, limits=ReadLimits(max_rows=12, max_tokens=120))) == 12
    with pytest.raises(
        LimitError, match=r"s2\.jsonl: holds 4 lines, more than the limit of 2 \(what the 2 files before"
    ):
        read_dataset(tmp_path, limits=ReadLimits(max_rows=10))  # its lines counted before it is parsed
    lengths = tmp_path / "lengths"
    lengths.mkdir()
    for name in ("a.parquet", "b.parquet"):
        pq.write_table(pa.table({"length": [1, 2, 3, 4]}), lengths / name)
    with pytest.raises(
        LimitError, match=r"b\.parquet: holds 4 samples, more than the limit of 2 \(what the file before"
    ):
        read_dataset(lengths, limits=ReadLimits(max_rows=6))  # from its metadata
    assert len(read_dataset([lengths / "b.parquet", lengths / "a.parquet", lengths / "b.parquet"])) == 8
    with pytest.raises(LimitError, match=r"holds 120 tokens in 3 files, more than the limit of 100$"):
        read_dataset(tmp_path, limits=ReadLimits(max_tokens=100))
    size = (tmp_path / "s0.jsonl").stat().st_size
    with pytest.raises(LimitError) as caught:  # refused from its size, before the third file is read
        read_dataset(tmp_path, limits=ReadLimits(max_bytes=2 * size + 10))
    assert str(caught.value) == (
        f"{tmp_path / 's2.jsonl'}: holds {size:,} bytes, more than the limit of 10 "
        f"(what the 2 files before it left of the limits over {tmp_path})"
    )
    with pytest.raises(LimitError, match=r"s2\.jsonl: holds 4 lines, more than the limit of 2 \(what the 2 files"):
        packing.audit(tmp_path, limits=ReadLimits(max_rows=10))


def test_progress_counts_rows_over_every_file(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", [{"text": "hi"}] * 2)  # type: ignore[list-item]
    write(tmp_path / "b.jsonl", [{"text": "there"}] * 3)  # type: ignore[list-item]
    seen: list[tuple[int, int]] = []
    data = read_dataset(tmp_path, tokenizer="bytes", progress=lambda done, total: seen.append((done, total)))
    assert len(data) == 5
    assert seen[-1] == (5, 5)


# ---------------------------------------------------------------- the command line and the auditor


def test_the_command_line_on_a_folder_a_glob_and_several_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for number in range(3):
        write(shards / f"shard-{number}.parquet", rows_of(number, 5))
    out = tmp_path / "out.parquet"
    assert main(["pack", str(shards), "--max-seq-length", "8", "-q", "-o", str(out)]) == 0
    by_folder = pq.read_table(out)
    assert main(["pack", str(shards / "*.parquet"), "--max-seq-length", "8", "-q", "-o", str(out)]) == 0
    assert pq.read_table(out).equals(by_folder)
    listed = [str(shards / f"shard-{n}.parquet") for n in (2, 0, 1)]
    assert main(["pack", *listed, "--max-seq-length", "8", "-q", "-o", str(out)]) == 0
    assert pq.read_table(out).equals(by_folder)
    expected = packing.pack([row for n in range(3) for row in rows_of(n, 5)], 8)
    blocks = expected.to_arrow().column("input_ids").to_pylist()
    assert sorted(by_folder.column("input_ids").to_pylist()) == sorted(blocks)  # the command shuffles blocks
    capsys.readouterr()
    assert main(["compare", str(shards), "--max-seq-length", "8", "--strategies", "bfd"]) == 0
    assert f"input: {shards}, 15 sequences" in capsys.readouterr().out
    (shards / "shard-3.jsonl").write_text('{"input_ids": [1, -2]}\n')
    assert main(["pack", str(shards), "--max-seq-length", "8", "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"packing: error: {shards / 'shard-3.jsonl'}, line 1, 'input_ids', position 1: expected a non-negative integer token id, got -2\n"
    )


def test_audit_of_a_folder_and_of_a_save_to_disk_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets = pytest.importorskip("datasets")
    batch = packing.pack([[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11, 12]], 4, strategy="ffd")
    blocks = export(batch, "trl")
    folder = tmp_path / "blocks"
    folder.mkdir()
    pq.write_table(blocks.slice(0, 2), folder / "part-0.parquet")
    (folder / "part-1.jsonl").write_text("".join(json.dumps(row) + "\n" for row in blocks.slice(2).to_pylist()))
    report = packing.audit(folder)
    assert (report.source, report.layout, report.num_blocks, report.clean) == (
        str(folder),
        "trl",
        batch.num_blocks,
        True,
    )
    assert report.num_documents == 5
    saved = tmp_path / "saved"
    datasets.Dataset(blocks).save_to_disk(str(saved), num_shards=2)
    assert packing.audit(saved).counts() == {} and packing.audit(saved).num_blocks == batch.num_blocks
    assert main(["audit", str(saved), "--strict"]) == 0
    assert main(["audit", str(folder / "part-*"), "--strict"]) == 0
    capsys.readouterr()
    bad = pa.table({"input_ids": [[1, 2], None], "labels": [[1, 2], [3]], "seq_lengths": [[2], [1]]})
    pq.write_table(bad, folder / "part-2.parquet")
    with pytest.raises(DatasetError) as caught:  # a row of the whole is named by its file and its row there
        packing.audit(folder)
    assert str(caught.value) == f"{folder / 'part-2.parquet'}, row 2: column 'input_ids': expected a list, got null"
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), folder / "part-2.parquet")
    assert main(["audit", str(folder)]) == 2
    err = capsys.readouterr().err
    assert (
        "part-2.parquet: columns 'input_ids', unlike" in err and "every file of a dataset has the same columns" in err
    )


def test_json_means_the_same_to_the_reader_and_the_auditor(tmp_path: Path) -> None:
    rows = [{"input_ids": [1, 2, 3], "seq_lengths": [2, 1]}, {"input_ids": [4], "seq_lengths": [1]}]
    array, lines = tmp_path / "array.json", tmp_path / "lines.json"
    array.write_text(json.dumps(rows))
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for path in (array, lines):
        assert packing.audit(path).num_documents == 3
        assert read_dataset(path).lengths.tolist() == [3, 1]


# ---------------------------------------------------------------- straight into torch


def test_a_folder_of_shards_into_a_torch_dataloader(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import packing.torch as pt

    shards = [rows_of(seed, 6) for seed in range(3)]
    for number, rows in enumerate(shards):
        write(tmp_path / f"train-{number:05d}-of-00003.{['parquet', 'jsonl', 'arrow'][number]}", rows)
    data = read_dataset(tmp_path)
    sampler = pt.PackingSampler(data.lengths, 8, num_replicas=1, rank=0, seed=3)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collate)
    seen: list[int] = []
    for indices, batch in zip(sampler, loader, strict=True):
        seen.extend(indices)
        expected = pt.collate([data[i] for i in indices])
        assert torch.equal(batch["input_ids"], expected["input_ids"])
        assert torch.equal(batch["labels"], expected["labels"])
        assert batch["input_ids"].shape[1] == int(data.lengths[indices].sum()) <= 8
    assert sorted(seen) == list(range(len(data)))
    everything = [row for rows in shards for row in rows]
    first = pt.collate([data[0]])
    assert first["input_ids"][0].tolist() == everything[0]["input_ids"]
    assert list(itertools.chain(*(data[i]["input_ids"].tolist() for i in range(len(data))))) == [
        token for row in everything for token in row["input_ids"]
    ]
    assert np.array_equal(data.lengths, [len(row["input_ids"]) for row in everything])
    assert os.path.basename(data.files[1]) == "train-00001-of-00003.jsonl"


@pytest.mark.timeout(30)
def test_a_fifo_among_the_shards_is_refused_without_blocking(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", rows_of(1, 2))
    os.mkfifo(tmp_path / "b.jsonl")  # no writer: opening it for reading would block forever
    with pytest.raises(DatasetError, match=r"b\.jsonl: is a FIFO \(named pipe\), expected a regular file"):
        read_dataset(tmp_path)
    with pytest.raises(DatasetError, match="is a FIFO"):
        packing.audit(str(tmp_path / "*.jsonl"))


def test_a_format_for_a_glob_of_other_extensions(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text('{"input_ids": [1, 2]}\n')
    (tmp_path / "b.txt").write_text('{"input_ids": [3]}\n')
    assert read_dataset(str(tmp_path / "*.txt"), format="jsonl").lengths.tolist() == [2, 1]
    with pytest.raises(DatasetError, match=r"\*\.txt: no \.jsonl, \.json, \.csv, \.parquet or \.arrow file matches"):
        read_dataset(str(tmp_path / "*.txt"))
    with pytest.raises(DatasetError, match="a folder without dataset files"):
        read_dataset(tmp_path, format="jsonl")  # a folder reads the known extensions only
