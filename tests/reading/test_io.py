"""Reading datasets in every format, the errors for bad files, and atomic block writers."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import packing.layouts._export as pio
from packing import SettingError, pack
from packing.batches import COLUMNS
from packing.batches._schema import arrow_schema
from packing.layouts._export import write_jsonl, write_parquet
from packing.reading._dataset import DatasetError, read_dataset

WORKLOADS = Path(__file__).resolve().parents[2] / "packing" / "_workloads"


def plain(data: Any) -> list[tuple[list[int], list[int]]]:
    """Every sample of a dataset as (tokens, loss mask) lists, for comparisons."""
    samples = data.samples
    assert samples.tokens is not None and samples.loss_mask is not None
    edges = samples.offsets.tolist()
    return [(samples.tokens[a:b].tolist(), samples.loss_mask[a:b].tolist()) for a, b in itertools.pairwise(edges)]


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
    assert plain(data) == [([1, 2, 3], [0, 1, 1]), ([4], [1])]


def test_jsonl_prompt_completion_keeps_the_split(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"prompt": [1, 2], "completion": [3], "id": "a"}])
    data = read_dataset(path)
    assert plain(data) == [([1, 2, 3], [0, 0, 1])]
    assert data.lengths.tolist() == [3]


def test_jsonl_skips_blank_lines_and_mixes_sample_forms(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n\n{"prompt": [3], "completion": [4, 5]}\n[6]\n')
    data = read_dataset(path)
    assert plain(data) == [([1, 2], [1, 1]), ([3, 4, 5], [0, 1, 1]), ([6], [1])]


def test_read_samples_pack_like_the_literal_samples(tmp_path: Path) -> None:
    samples = [[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, {"input_ids": [7, 8], "loss_mask": [0, 1]}]
    data = read_dataset(write_lines(tmp_path / "d.jsonl", samples))
    from_file = pack(data, 4, strategy="ffd")
    direct = pack(samples, 4, strategy="ffd")
    assert from_file.input_ids.tolist() == direct.input_ids.tolist()
    assert from_file.labels.tolist() == direct.labels.tolist()


def test_json_list_of_lists_and_list_of_objects(tmp_path: Path) -> None:
    lists = tmp_path / "lists.json"
    lists.write_text("[[1, 2], [3], []]")
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}]))
    assert read_dataset(lists).lengths.tolist() == [2, 1, 0]
    data = read_dataset(objects)
    assert plain(data) == [([5, 6, 7], [1, 1, 1]), ([8], [1])]


def test_json_file_holding_json_lines_is_read_as_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.json", [{"input_ids": [1]}, {"input_ids": [2, 3]}])
    assert read_dataset(path).lengths.tolist() == [1, 2]


def test_csv_token_cells_in_both_spellings(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('input_ids,loss_mask,note\n1 2 3,0 1 1,x\n"[4, 5]","[1,1]",y\n')
    data = read_dataset(path)
    assert plain(data) == [([1, 2, 3], [0, 1, 1]), ([4, 5], [1, 1])]


def test_csv_prompt_completion_and_empty_prompt(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("prompt,completion\n1 2,3\n[],4 5\n")
    data = read_dataset(path)
    assert plain(data) == [([1, 2, 3], [0, 0, 1]), ([4, 5], [1, 1])]
    path.write_text("prompt,completion\n1 2,3\n,4 5\n")  # an empty cell is a null, not an empty list
    assert error_of(path) == (
        f"{path}, line 3, 'prompt': expected a list of token ids (a prompt needs a completion), got None (NoneType)"
    )


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
    assert plain(data)[0] == ([1, 2, 3], [0, 1, 1])


def test_parquet_sliced_multi_chunk_table_keeps_row_boundaries(tmp_path: Path) -> None:
    chunks = pa.concat_tables([pa.table({"input_ids": [[1, 2], [3]]}), pa.table({"input_ids": [[4, 5, 6], [7]]})])
    path = tmp_path / "d.parquet"
    pq.write_table(chunks.slice(1), path, row_group_size=2)
    data = read_dataset(path)
    assert [tokens for tokens, _ in plain(data)] == [[3], [4, 5, 6], [7]]


def test_parquet_prompt_completion(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": [[1, 2]], "completion": [[3, 4, 5]]}), path)
    data = read_dataset(path)
    assert plain(data) == [([1, 2, 3, 4, 5], [0, 0, 1, 1, 1])]


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
    assert data.samples.tokens is None
    assert data.lengths.tolist() == [5, 0, 7]


def test_histogram_json_like_the_workloads(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"max_seq_length": 8, "histogram": [2, 0, 1]}))
    data = read_dataset(path)
    assert (data.kind, data.samples.tokens, sorted(data.lengths.tolist())) == ("lengths", None, [1, 1, 3])


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
        data.source = "other"  # type: ignore[misc]


# ---------------------------------------------------------------- errors


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert error_of(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: no such file"
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    assert (
        error_of(folder)
        == f"{folder}: a folder without dataset files (.jsonl, .json, .csv, .parquet or .arrow; subfolders are not read)"
    )


def test_unknown_extension_and_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text("[[1]]")
    assert "cannot tell the format" in error_of(path)
    assert "unknown format 'xml'" in error_of(path, format="xml")
    assert "expected a .jsonl, .json, .csv, .parquet or .arrow file" in error_of(io.BytesIO(b"[[1]]"))


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
    path = write_lines(tmp_path / "d.jsonl", [{"note": "hi", "label": 1}])
    message = error_of(path)
    assert "no usable columns" in message
    assert "found 'note', 'label'" in message
    assert "expected 'input_ids' (with a loss mask), 'prompt' and 'completion', 'length', or text" in message


def test_prompt_without_completion_column(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("prompt,id\n1 2,a\n")
    assert error_of(path) == (
        f"{path}, line 2, 'completion': expected a list of token ids (a prompt needs a completion), got None (NoneType)"
    )


def test_row_without_a_value(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "d.jsonl", [{"prompt": [1], "completion": [2]}, {"prompt": [3]}])
    assert error_of(path) == (
        f"{path}, line 2, 'completion': expected a list of token ids (a prompt needs a completion), got None (NoneType)"
    )
    nulls = tmp_path / "d.parquet"
    pq.write_table(pa.table({"input_ids": [[1], None]}), nulls)
    assert error_of(nulls).startswith(f"{nulls}, row 2: expected a list of token ids, or a dict with")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"input_ids": [1, "x", 3]},
            "'input_ids', position 1: expected a non-negative integer token id, got 'x' (str)",
        ),
        (
            {"input_ids": [1, 2, 2.5]},
            "'input_ids', position 2: expected a non-negative integer token id, got 2.5 (float)",
        ),
        (
            {"prompt": [1], "completion": [2, -3]},
            "'completion', position 1: expected a non-negative integer token id, got -3",
        ),
        (
            {"input_ids": [1, 2**70]},
            "'input_ids', position 1: expected a token id that fits in 64 bits, got 1180591620717411303424",
        ),
        ({"input_ids": "1 2"}, "'input_ids': expected a list of token ids, got '1 2' (str)"),
        ({"input_ids": [1, 2], "loss_mask": [1]}, "'loss_mask': expected 2 values (one per token), got <1 values>"),
        ({"input_ids": [1, 2], "loss_mask": [1, 2]}, "'loss_mask', position 1: expected 0 or 1, got 2"),
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
        == f"{path}, line 3, 'input_ids', position 1: expected a non-negative integer token id, got 'x' (str)"
    )


def test_bad_token_in_parquet(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2], [3, -4]]}), path)
    message = error_of(path)
    assert message == f"{path}, row 2, 'input_ids', position 1: expected a non-negative integer token id, got -4"


def test_csv_row_with_wrong_number_of_cells(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("input_ids,id\n1 2,a\n3\n")
    assert error_of(path) == f"{path}, line 3: expected 2 cells ('input_ids', 'id'), got 1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("length\n3\nfoo\n", "line 3, 'length': expected a non-negative integer, got 'foo' (str)"),
        ("length\n-3\n", "line 2, 'length': expected a non-negative integer, got -3"),
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
    assert "found \"an object with keys 'samples'\"" in error_of(path)


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
    return pack([[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, [7, 8, 9, 10, 11]], 4, strategy="ffd")


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
    assert table.column_names == [column.name for column in COLUMNS]
    assert table.schema == arrow_schema()
    assert table.to_pylist() == EXPECTED_ROWS


def test_write_parquet_in_given_order_and_several_chunks(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    write_parquet(tiny_batch(), path, order=np.array([2, 0, 1]), chunk_tokens=4)  # one block per row group
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    assert pq.read_table(path).to_pylist() == [EXPECTED_ROWS[2], EXPECTED_ROWS[0], EXPECTED_ROWS[1]]


def test_write_multi_document_blocks(tmp_path: Path) -> None:
    batch = pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    path = tmp_path / "out.jsonl"
    write_jsonl(batch, path, order=[1, 0])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["seq_lengths"] for row in rows] == [[1, 1], [2, 2]]
    assert [row["position_ids"] for row in rows] == [[0, 0, 0, 0], [0, 1, 0, 1]]


def test_write_jsonl_matches_parquet(tmp_path: Path) -> None:
    order = np.random.default_rng(5).permutation(3)
    write_jsonl(tiny_batch(), tmp_path / "out.jsonl", order)
    write_parquet(tiny_batch(), tmp_path / "out.parquet", order)
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == pq.read_table(tmp_path / "out.parquet").to_pylist()


def test_write_empty_batch(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    write_parquet(pack([[]], 4), path)
    table = pq.read_table(path)
    assert table.num_rows == 0
    assert table.column_names == [column.name for column in COLUMNS]


def test_bad_order_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=r"block indexes in 0\.\.2"):
        write_parquet(tiny_batch(), tmp_path / "out.parquet", order=[0, 3])
    with pytest.raises(SettingError, match="flat list"):
        write_jsonl(tiny_batch(), tmp_path / "out.jsonl", order=[[0, 1]])
    assert list(tmp_path.iterdir()) == []


def test_failed_parquet_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.parquet"
    path.write_bytes(b"previous")

    def fail(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", fail)
    with pytest.raises(OSError, match="No space left"):
        write_parquet(tiny_batch(), path)
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_failed_jsonl_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    dumps = json.dumps

    def interrupted(value: Any) -> str:
        calls.append(value)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return dumps(value)

    monkeypatch.setattr(pio.json, "dumps", interrupted)
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


def test_a_row_with_both_forms_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps({"prompt": [1, 2], "completion": [3], "input_ids": [1, 2, 3]}) + "\n")
    with pytest.raises(
        DatasetError, match=r"line 1: expected one form, 'input_ids' or 'prompt'/'completion', got <both>"
    ):
        read_dataset(path)


# ---------------------------------------------------------------- interrupted and concurrent writes

SLOW_WRITER = """
import sys, time, pathlib
import pyarrow.parquet as pq
from packing._cli import main

def stalled(self, *args, **kwargs):
    pathlib.Path(sys.argv[1]).write_text("writing")
    time.sleep(60)

pq.ParquetWriter.write_table = stalled
sys.exit(main(["pack", sys.argv[2], "--max-seq-length", "4", "-q", "-o", sys.argv[3]]))
"""


def start_slow_writer(tmp_path: Path, output: Path) -> Any:
    import signal
    import subprocess
    import sys
    import time

    source = tmp_path / "in.jsonl"
    source.write_text('{"input_ids": [1, 2, 3]}\n')
    ready = tmp_path / "ready"
    # as if started from a terminal: a job started in the background of a script inherits SIGINT ignored, and
    # Python then never turns Ctrl-C into KeyboardInterrupt
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(ready), str(source), str(output)],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 180  # the writer's interpreter and imports: seconds, minutes on a busy machine
    while time.monotonic() < deadline:
        if ready.exists():
            return process
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the writer never started writing")


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_write_keeps_the_old_output_and_leaves_no_temporary(tmp_path: Path, signal_name: str) -> None:
    import signal

    output = tmp_path / "out.parquet"
    output.write_bytes(b"previous run")
    process = start_slow_writer(tmp_path, output)
    process.send_signal(getattr(signal, signal_name))
    code = process.wait(timeout=30)
    assert code == (128 + signal.SIGTERM if signal_name == "SIGTERM" else 130)
    assert output.read_bytes() == b"previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet", "ready"]


@pytest.mark.slow
def test_a_second_writer_of_the_same_output_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from packing._cli import main

    output = tmp_path / "out.parquet"
    process = start_slow_writer(tmp_path, output)
    try:
        code = main(["pack", str(tmp_path / "in.jsonl"), "--max-seq-length", "4", "-q", "-o", str(output)])
        err = capsys.readouterr().err
    finally:
        process.kill()
        process.wait(timeout=30)
    assert code == 2
    assert f"another run (process {process.pid}) is writing this file; wait for it" in err
    # the killed writer left its lock and temporary file behind; the next run cleans up and succeeds
    assert main(["pack", str(tmp_path / "in.jsonl"), "--max-seq-length", "4", "-q", "-o", str(output)]) == 0
    assert pq.read_table(output).column("input_ids").to_pylist() == [[1, 2, 3, 0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet", "ready"]
