"""Reading datasets in every format, the errors for bad files, and atomic block writers."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import packing.io as pio
from packing import pack
from packing.io import DatasetError, block_order, read_dataset, write_jsonl, write_parquet

WORKLOADS = Path(__file__).resolve().parents[1] / "packing" / "workloads"


def plain(sample: Any) -> Any:
    """A stored sample as plain lists, for comparisons."""
    if isinstance(sample, dict):
        return {key: np.asarray(value).tolist() for key, value in sample.items()}
    return np.asarray(sample).tolist()


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def error_of(source: Any, **options: Any) -> str:
    with pytest.raises(DatasetError) as caught:
        read_dataset(source, **options)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- formats


def test_jsonl_input_ids_with_optional_loss_mask(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}, {"input_ids": [4]}])
    data = read_dataset(path)
    assert data.kind == "tokens"
    assert data.source == str(path)
    assert data.lengths.dtype == np.int64
    assert data.lengths.tolist() == [3, 1]
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}, [4]]


def test_jsonl_prompt_completion_keeps_the_split(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"prompt": [1, 2], "completion": [3], "id": "a"}])
    data = read_dataset(path)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [{"prompt": [1, 2], "completion": [3]}]
    assert data.lengths.tolist() == [3]


def test_jsonl_skips_blank_lines_and_mixes_sample_forms(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n\n{"prompt": [3], "completion": [4, 5]}\n[6]\n')
    data = read_dataset(path)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]]


def test_read_samples_pack_like_the_literal_samples(tmp_path: Path) -> None:
    samples = [[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, {"input_ids": [7, 8], "loss_mask": [0, 1]}]
    data = read_dataset(write_lines(tmp_path / "d.jsonl", samples))
    assert data.samples is not None
    from_file = pack(data.samples, 4, "ffd")
    direct = pack(samples, 4, "ffd")
    assert from_file.input_ids.tolist() == direct.input_ids.tolist()
    assert from_file.labels.tolist() == direct.labels.tolist()


def test_json_list_of_lists_and_list_of_objects(tmp_path: Path) -> None:
    lists = tmp_path / "lists.json"
    lists.write_text("[[1, 2], [3], []]")
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}]))
    assert read_dataset(lists).lengths.tolist() == [2, 1, 0]
    data = read_dataset(objects)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [[5, 6, 7], [8]]


def test_json_file_holding_json_lines_is_read_as_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.json", [{"input_ids": [1]}, {"input_ids": [2, 3]}])
    assert read_dataset(path).lengths.tolist() == [1, 2]


def test_csv_token_cells_in_both_spellings(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('input_ids,loss_mask,note\n1 2 3,0 1 1,x\n"[4, 5]","[1,1]",y\n')
    data = read_dataset(path)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [
        {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]},
        {"input_ids": [4, 5], "loss_mask": [1, 1]},
    ]


def test_csv_prompt_completion_and_empty_prompt(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("prompt,completion\n1 2,3\n,4 5\n")
    data = read_dataset(path)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [
        {"prompt": [1, 2], "completion": [3]},
        {"prompt": [], "completion": [4, 5]},
    ]


def test_csv_long_token_cell_beyond_the_default_field_limit(tmp_path: Path) -> None:
    tokens = list(range(40_000))  # about 230 KB in one cell
    path = tmp_path / "d.csv"
    path.write_text("input_ids\n" + " ".join(map(str, tokens)) + "\n")
    assert read_dataset(path).lengths.tolist() == [40_000]


def test_parquet_list_columns(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    table = pa.table({"input_ids": [[1, 2, 3], [4], []], "loss_mask": [[0, 1, 1], [1], []], "text": ["a", "b", "c"]})
    pq.write_table(table, path)
    data = read_dataset(path)
    assert data.lengths.tolist() == [3, 1, 0]
    assert data.samples is not None
    assert plain(data.samples[0]) == {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}


def test_parquet_sliced_multi_chunk_table_keeps_row_boundaries(tmp_path: Path) -> None:
    chunks = pa.concat_tables([pa.table({"input_ids": [[1, 2], [3]]}), pa.table({"input_ids": [[4, 5, 6], [7]]})])
    path = tmp_path / "d.parquet"
    pq.write_table(chunks.slice(1), path, row_group_size=2)
    data = read_dataset(path)
    assert data.samples is not None
    assert [plain(s) for s in data.samples] == [[3], [4, 5, 6], [7]]


def test_parquet_prompt_completion(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": [[1, 2]], "completion": [[3, 4, 5]]}), path)
    data = read_dataset(path)
    assert data.samples is not None
    assert plain(data.samples[0]) == {"prompt": [1, 2], "completion": [3, 4, 5]}


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_length_column_gives_lengths_only(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"d.{suffix}"
    if suffix == "csv":
        path.write_text("length,name\n5,a\n0,b\n7,c\n")
    elif suffix == "jsonl":
        write_lines(path, [{"length": 5}, {"length": 0}, {"length": 7}])
    else:
        pq.write_table(pa.table({"length": [5, 0, 7]}), path)
    data = read_dataset(path)
    assert data.kind == "lengths"
    assert data.samples is None
    assert data.lengths.tolist() == [5, 0, 7]


def test_histogram_json_like_the_workloads(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"max_seq_length": 8, "histogram": [2, 0, 1]}))
    data = read_dataset(path)
    assert (data.kind, data.samples, sorted(data.lengths.tolist())) == ("lengths", None, [1, 1, 3])


def test_lengths_json_and_bundled_workload(tmp_path: Path) -> None:
    path = tmp_path / "l.json"
    path.write_text(json.dumps({"lengths": [9, 4]}))
    assert read_dataset(path).lengths.tolist() == [9, 4]
    squad = read_dataset(WORKLOADS / "squad_1_1_bert_384.json")
    assert squad.kind == "lengths"
    assert len(squad.lengths) == 88_641
    assert int(squad.lengths.max()) <= 384


def test_file_object_uses_name_for_format_and_messages() -> None:
    upload = io.BytesIO(b"input_ids\n1 2\n3\n")
    data = read_dataset(upload, name="upload.csv")
    assert data.source == "upload.csv"
    assert data.lengths.tolist() == [2, 1]
    assert not upload.closed  # the caller's object stays usable
    assert read_dataset(io.BytesIO(b"[[1, 2, 3]]"), format="JSON").lengths.tolist() == [3]
    assert read_dataset(io.BytesIO(b"[[1]]"), format=".json", name="blob").source == "blob"


def test_parquet_file_object() -> None:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"input_ids": [[1, 2], [3]]}), buffer)
    buffer.seek(0)
    assert read_dataset(buffer, format="parquet").lengths.tolist() == [2, 1]


def test_dataset_is_frozen(tmp_path: Path) -> None:
    data = read_dataset(io.BytesIO(b"[[1]]"), format="json")
    with pytest.raises(AttributeError):
        data.kind = "lengths"  # type: ignore[misc]


# ---------------------------------------------------------------- errors


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert error_of(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: no such file"
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    assert "is a directory" in error_of(folder)


def test_unknown_extension_and_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text("[[1]]")
    assert "cannot tell the format" in error_of(path)
    assert "unknown format 'xml'" in error_of(path, format="xml")
    assert "expected a .jsonl, .json, .csv or .parquet file" in error_of(io.BytesIO(b"[[1]]"))


def test_invalid_json_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"input_ids": [1]}\n{"input_ids": [2,\n')
    assert error_of(path) == f"{path}, line 2, character 18: invalid JSON (Expecting value)"
    whole = tmp_path / "d.json"
    whole.write_text("[[1, 2],\n [3,\n")
    assert error_of(whole).startswith(f"{whole}, line 3, character 1: invalid JSON")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"input_ids": [1]}\n\xff\xfe\n')
    assert error_of(path) == f"{path}, line 2: not valid UTF-8 text"


def test_unknown_columns_lists_found_and_expected(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"text": "hi", "label": 1}])
    message = error_of(path)
    assert "no usable columns" in message
    assert "found columns 'text', 'label'" in message
    assert "expected 'input_ids' (optionally with 'loss_mask'), 'prompt' and 'completion', or 'length'" in message


def test_prompt_without_completion_column(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("prompt,id\n1 2,a\n")
    assert error_of(path).startswith(f"{path}: column 'completion' is missing; found columns 'prompt', 'id'")


def test_row_without_a_value(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"prompt": [1], "completion": [2]}, {"prompt": [3]}])
    assert error_of(path) == f"{path}, line 2: no value in column 'completion'"
    nulls = tmp_path / "d.parquet"
    pq.write_table(pa.table({"input_ids": [[1], None]}), nulls)
    assert error_of(nulls) == f"{nulls}, row 2: no value in column 'input_ids'"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"input_ids": [1, "x", 3]},
            "column 'input_ids', position 1: expected a non-negative integer token id, got 'x' (str)",
        ),
        (
            {"input_ids": [1, 2, 2.5]},
            "column 'input_ids', position 2: expected a non-negative integer token id, got 2.5 (float)",
        ),
        (
            {"prompt": [1], "completion": [2, -3]},
            "column 'completion', position 1: expected a non-negative integer token id, got -3 (int)",
        ),
        ({"input_ids": [1, 2**70]}, f"column 'input_ids', position 1: token id {2**70} does not fit in 64 bits"),
        ({"input_ids": "1 2"}, "column 'input_ids': expected a list of token ids, got '1 2' (str)"),
        ({"input_ids": [1, 2], "loss_mask": [1]}, "column 'loss_mask': expected 2 values (one per token), got 1"),
        ({"input_ids": [1, 2], "loss_mask": [1, 2]}, "column 'loss_mask', position 1: expected 0 or 1, got 2"),
    ],
)
def test_bad_token_names_file_line_column_and_position(tmp_path: Path, row: dict[str, Any], expected: str) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"input_ids": [0]}, row] if "input_ids" in row else [row, row])
    line = 2 if "input_ids" in row else 1
    assert error_of(path) == f"{path}, line {line}, {expected}"


def test_bad_token_in_plain_json_list(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text("[[1, 2], [3, 4, null]]")
    assert error_of(path) == (
        f"{path}, item 2, position 2: expected a non-negative integer token id, got None (NoneType)"
    )
    numbers = tmp_path / "n.json"
    numbers.write_text("[1, 2]")
    assert error_of(numbers).startswith(f"{numbers}, item 1: expected a list of token ids")


def test_bad_token_in_csv_cell(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("input_ids\n1 2\n1 x 3\n")
    assert (
        error_of(path)
        == f"{path}, line 3, column 'input_ids', position 1: expected a non-negative integer token id, got 'x'"
    )


def test_bad_token_in_parquet(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2], [3, -4]]}), path)
    message = error_of(path)
    assert message.startswith(f"{path}, row 2, column 'input_ids', position 1: expected a non-negative integer")


def test_csv_row_with_wrong_number_of_cells(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("input_ids,id\n1 2,a\n3\n")
    assert error_of(path) == f"{path}, line 3: expected 2 cells (columns 'input_ids', 'id'), got 1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("length\n3\nfoo\n", "line 3, column 'length': expected a non-negative integer, got 'foo'"),
        ("length\n-3\n", "line 2, column 'length': expected a non-negative integer, got -3"),
    ],
)
def test_bad_length(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text(text)
    assert error_of(path) == f"{path}, {expected}"


def test_bad_histogram(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"histogram": [3, -1]}))
    assert error_of(path) == f"{path}, key 'histogram', position 1: expected a non-negative integer, got -1"
    path.write_text(json.dumps({"histogram": [0, 0]}))
    assert error_of(path) == f"{path}: the histogram holds no sequences"
    path.write_text(json.dumps({"samples": []}))
    assert "found an object with keys 'samples'" in error_of(path)


@pytest.mark.parametrize(
    ("name", "content"), [("e.csv", ""), ("h.csv", "input_ids\n"), ("e.jsonl", "\n\n"), ("e.json", "[]")]
)
def test_empty_inputs(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    message = error_of(path)
    assert "the file is empty" in message or "holds no samples" in message


def test_not_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    path.write_text("hello")
    assert error_of(path).startswith(f"{path}: not a readable Parquet file (")


def test_dataset_error_is_a_value_error() -> None:
    assert issubclass(DatasetError, ValueError)


# ---------------------------------------------------------------- writing


def tiny_batch() -> Any:
    # ffd, capacity 4: [7..10] alone, then [1, 2, 3], then the prompt/completion sample
    return pack([[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, [7, 8, 9, 10, 11]], 4, "ffd")


EXPECTED_ROWS = [
    {
        "input_ids": [7, 8, 9, 10],
        "labels": [-100, 8, 9, 10],
        "loss_mask": [1, 1, 1, 1],
        "position_ids": [0, 1, 2, 3],
        "sequence_ids": [2, 2, 2, 2],
        "seq_lengths": [4],
    },
    {
        "input_ids": [1, 2, 3, 0],
        "labels": [-100, 2, 3, -100],
        "loss_mask": [1, 1, 1, 0],
        "position_ids": [0, 1, 2, 0],
        "sequence_ids": [0, 0, 0, -1],
        "seq_lengths": [3],
    },
    {
        "input_ids": [4, 5, 6, 0],
        "labels": [-100, -100, 6, -100],
        "loss_mask": [0, 0, 1, 0],
        "position_ids": [0, 1, 2, 0],
        "sequence_ids": [1, 1, 1, -1],
        "seq_lengths": [3],
    },
]


def test_write_parquet_rows_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    write_parquet(tiny_batch(), path)
    table = pq.read_table(path)
    assert table.column_names == list(pio.OUTPUT_COLUMNS)
    assert all(pa.types.is_list(field.type) and pa.types.is_integer(field.type.value_type) for field in table.schema)
    assert table.to_pylist() == EXPECTED_ROWS


def test_write_parquet_in_given_order_and_several_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pio, "_PARQUET_CHUNK_VALUES", 4)  # one block per record batch
    path = tmp_path / "out.parquet"
    write_parquet(tiny_batch(), path, order=np.array([2, 0, 1]))
    assert pq.read_table(path).to_pylist() == [EXPECTED_ROWS[2], EXPECTED_ROWS[0], EXPECTED_ROWS[1]]


def test_write_multi_document_blocks(tmp_path: Path) -> None:
    batch = pack([[1, 2], [3, 4, 5], [6]], 4)
    path = tmp_path / "out.jsonl"
    write_jsonl(batch, path, order=[1, 0])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["seq_lengths"] for row in rows] == [[1, 1], [2, 2]]
    assert [row["position_ids"] for row in rows] == [[0, 0, 0, 0], [0, 1, 0, 1]]


def test_write_jsonl_matches_parquet(tmp_path: Path) -> None:
    order = block_order(3, seed=5)
    write_jsonl(tiny_batch(), tmp_path / "out.jsonl", order)
    write_parquet(tiny_batch(), tmp_path / "out.parquet", order)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == pq.read_table(tmp_path / "out.parquet").to_pylist()


def test_write_empty_batch(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    write_parquet(pack([[]], 4), path)
    table = pq.read_table(path)
    assert table.num_rows == 0
    assert table.column_names == list(pio.OUTPUT_COLUMNS)


def test_bad_order_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        write_parquet(tiny_batch(), tmp_path / "out.parquet", order=[0, 3])
    with pytest.raises(ValueError, match="flat array"):
        write_jsonl(tiny_batch(), tmp_path / "out.jsonl", order=[[0, 1]])
    assert list(tmp_path.iterdir()) == []


def test_failed_parquet_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.parquet"
    path.write_bytes(b"previous")

    def fail(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", fail)
    with pytest.raises(OSError, match="No space left"):
        write_parquet(tiny_batch(), path)
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_failed_jsonl_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def record(batch: Any, block: int) -> dict[str, list[int]]:
        calls.append(block)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"input_ids": [block]}

    monkeypatch.setattr(pio, "_block_record", record)
    with pytest.raises(KeyboardInterrupt):
        write_jsonl(tiny_batch(), tmp_path / "out.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_directory_raises_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_parquet(tiny_batch(), tmp_path / "missing" / "out.parquet")
    assert list(tmp_path.iterdir()) == []


def test_written_file_permissions_follow_umask(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_jsonl(tiny_batch(), path)
    assert path.stat().st_mode & 0o044 != 0  # readable by others, unlike a private temporary file


# ---------------------------------------------------------------- block order


def test_block_order_is_a_seeded_permutation() -> None:
    first = block_order(100, seed=7)
    assert first.dtype == np.int64
    assert sorted(first.tolist()) == list(range(100))
    assert first.tolist() != list(range(100))
    assert block_order(100, seed=7).tolist() == first.tolist()
    assert block_order(100, seed=8).tolist() != first.tolist()
    assert block_order(5, shuffle=False).tolist() == [0, 1, 2, 3, 4]
    assert block_order(0).tolist() == []


@pytest.mark.parametrize(("count", "seed"), [(-1, 0), (3, -1), (2.5, 0)])
def test_block_order_refuses_bad_arguments(count: Any, seed: int) -> None:
    with pytest.raises((TypeError, ValueError)):
        block_order(count, seed=seed)


def test_a_row_with_both_forms_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps({"prompt": [1, 2], "completion": [3], "input_ids": [1, 2, 3]}) + "\n")
    with pytest.raises(DatasetError, match=r"line 1: has both 'input_ids' and 'prompt'/'completion'"):
        read_dataset(path)
