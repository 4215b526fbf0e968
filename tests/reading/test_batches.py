"""Parquet and Arrow files read batch by batch: the same samples as the whole table (tokens, offsets, loss
masks, labels) and the same errors naming the same row, for any row groups, record batches and batch sizes;
memory holds the samples and one batch, not the decoded table."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.reading
import packing.reading._arrow
import packing.reading._content
import packing.reading._files
import packing.reading._reader
import packing.text
from packing.core._samples import IGNORE_INDEX, Samples
from packing.errors import DatasetError, SampleError
from packing.reading._arrow import read_table
from tests.helpers.memory import traced_peak

KINDS = {"int32": pa.int32(), "int64": pa.int64(), "uint16": pa.uint16()}

# a row: (token ids, form, per-token label choice); form 0: input_ids, 1: with a loss mask, 2: with labels,
# 3: with both, 4: prompt/completion. Label choice 0: the token, 1: -100, 2: another id.
row = st.tuples(
    st.lists(st.integers(0, 30_000), max_size=6),
    st.integers(0, 4),
    st.lists(st.integers(0, 2), min_size=6, max_size=6),
)
# an error put in one row: none, a label of -1, one label too many, a negative token
fault = st.one_of(st.none(), st.tuples(st.integers(0, 40), st.sampled_from(["label", "long", "token"])))


def _table(rows: list[Any], kind: str, label_kind: str, fault: Any) -> pa.Table:
    """A table of rows of every form (see ``row``), with ``fault`` put in one row of ``input_ids``."""
    ids: list[Any] = []
    masks: list[Any] = []
    labels: list[Any] = []
    prompts: list[Any] = []
    completions: list[Any] = []
    for index, (tokens, form, choices) in enumerate(rows):
        tokens = list(tokens)
        mine = [(t, IGNORE_INDEX, (t + 7) % 30_000)[c] for t, c in zip(tokens, choices, strict=False)]
        if fault is not None and fault[0] % len(rows) == index and form < 4:
            if fault[1] == "token" and tokens:
                tokens[-1] = -3
            elif fault[1] == "label" and mine:
                mine[-1], form = -1, form | 2
            elif fault[1] == "long":
                mine, form = [*mine, 5], form | 2
        pair = form == 4
        ids.append(None if pair else tokens)
        masks.append([(index + k) % 2 for k in range(len(tokens))] if form in (1, 3) else None)
        labels.append(mine if form in (2, 3) else None)
        prompts.append(tokens[: len(tokens) // 2] if pair else None)
        completions.append(tokens[len(tokens) // 2 :] if pair else None)
    signed = pa.int64() if kind == "int64" or any(t is not None and min(t, default=0) < 0 for t in ids) else None
    value = signed or KINDS[kind]
    return pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(value)),
            "loss_mask": pa.array(masks, pa.list_(pa.int8())),
            "labels": pa.array(labels, pa.list_(KINDS[label_kind] if label_kind != "uint16" else pa.int32())),
            "prompt": pa.array(prompts, pa.list_(value)),
            "completion": pa.array(completions, pa.list_(value)),
        }
    )


def _same(read: Samples, whole: Samples) -> None:
    """Byte for byte the same samples (a loss mask of ones compares as its values)."""
    assert read.tokens is not None and whole.tokens is not None
    assert read.tokens.dtype == whole.tokens.dtype and read.tokens.tobytes() == whole.tokens.tobytes()
    assert read.offsets.tobytes() == whole.offsets.tobytes()
    assert read.loss_mask is not None and whole.loss_mask is not None and read.loss_mask.dtype == np.int8
    assert np.ascontiguousarray(read.loss_mask).tobytes() == np.ascontiguousarray(whole.loss_mask).tobytes()
    assert (read.labels is None) == (whole.labels is None)
    if read.labels is not None and whole.labels is not None:
        assert read.labels.dtype == whole.labels.dtype and read.labels.tobytes() == whole.labels.tobytes()


def _write(table: pa.Table, path: Path, fmt: str, group: int) -> None:
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=group)
        return
    writer = pa.ipc.new_file if fmt == "arrow-file" else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, writer(sink, table.schema) as out:
        out.write_table(table, max_chunksize=group)


def _compare(table: pa.Table, path: Path, **options: Any) -> None:
    """``read_dataset`` of the file (batch by batch) against ``read_table`` of the whole table (read as the
    recipe of ``options`` says): the same samples, or the same error about the same row and position."""
    try:
        whole = read_table(table, **packing.text.prepare(packing.Recipe.for_reading(None, **options)).read_options)
    except SampleError as error:
        with pytest.raises(DatasetError) as refused:
            packing.read_dataset(path, **options)
        assert str(refused.value) == str(DatasetError.from_sample(str(path), f"row {error.sample + 1}", error))
        return
    if options.get("tokenizer") is not None:  # tokenizer ids (int64) are narrowed to int32 where they fit
        whole = _narrow(whole)
    _same(packing.read_dataset(path, **options).samples, whole)


def _narrow(samples: Samples) -> Samples:
    """``samples`` with int64 ids (and labels) as int32 where every one fits: what ``read_dataset`` keeps."""

    def narrow(values: Any) -> Any:
        fits = values is not None and values.dtype == np.int64
        fits = fits and (not values.size or (values.min() >= -(2**31) and values.max() < 2**31))
        return values.astype(np.int32) if fits else values

    return Samples(narrow(samples.tokens), samples.loss_mask, samples.offsets, narrow(samples.labels))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(row, min_size=1, max_size=30),
    kind=st.sampled_from(sorted(KINDS)),
    label_kind=st.sampled_from(sorted(KINDS)),
    fault=fault,
    fmt=st.sampled_from(["parquet", "arrow-file", "arrow-stream"]),
    group=st.integers(1, 9),
    batch=st.sampled_from([1, 2, 5, 1 << 22]),
)
@pytest.mark.slow
def test_files_read_batch_by_batch_equal_the_whole_table(
    monkeypatch: pytest.MonkeyPatch,
    rows: list[Any],
    kind: str,
    label_kind: str,
    fault: Any,
    fmt: str,
    group: int,
    batch: int,
) -> None:
    monkeypatch.setattr(packing.reading._content, "_BATCH_VALUES", batch)
    table = _table(rows, kind, label_kind, fault)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("rows.parquet" if fmt == "parquet" else "rows.arrow")
        _write(table, path, fmt, group)
        content = packing.reading._files.decode(
            packing.reading._files.resolve(path).files[0], columns=packing.core._forms.FIELDS
        )
        assert content.batches is not None and packing.reading._arrow.flat_batches(content.batches.schema)
        content.batches.close()
        _compare(table, path)
        if fault is None:
            _compare(table, path, loss="all")


def test_labels_read_batch_by_batch_refuse_other_labels_at_the_same_token(tmp_path: Path) -> None:
    table = pa.table({"input_ids": [[1, 2], [3, 4], [5, 6]], "labels": [[1, 2], [3, 4], [IGNORE_INDEX, 9]]})
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, row_group_size=1)
    read = packing.read_dataset(path).samples
    assert read.labels is not None and read.labels.tolist() == [1, 2, 3, 4, 5, 9]
    with pytest.raises(SampleError) as batchwise:
        read.refuse_other_labels()
    with pytest.raises(SampleError) as whole:
        read_table(table).refuse_other_labels()
    assert str(batchwise.value) == str(whole.value)
    assert str(whole.value).startswith("sample 2, 'labels', position 1: expected 6")


@settings(max_examples=20, deadline=None)
@given(
    texts=st.lists(st.one_of(st.text(max_size=8), st.none()), min_size=1, max_size=20),
    group=st.integers(1, 6),
    batch=st.sampled_from([1, 3, 1 << 22]),
)
def test_text_parquet_tokenized_batch_by_batch_equals_the_whole_table(
    texts: list[str | None], group: int, batch: int
) -> None:
    """Text rows (a null text is a bad row) tokenized batch by batch: the whole table's samples or error,
    and progress counts every row once, in order."""
    table = pa.table({"text": pa.array(texts, pa.string())})
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing.reading._content, "_BATCH_VALUES", batch)
        path = Path(folder) / "text.parquet"
        pq.write_table(table, path, row_group_size=group)
        _compare(table, path, tokenizer="bytes")
        if None not in texts:
            seen: list[tuple[int, int]] = []
            packing.read_dataset(path, tokenizer="bytes", progress=lambda done, total: seen.append((done, total)))
            assert seen[-1] == (len(texts), len(texts))
            assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def _token_file(path: Path, fmt: str, tokens_per_row: Any, form: str) -> tuple[int, int]:
    """A file of int32 ids and a loss mask (``form`` mask: int8, 70 % ones) or labels (``labels``: int32, -100
    on the first half of each row, else the id), in 16 record batches (row groups); its tokens and Arrow size."""
    offsets = np.concatenate(([0], np.cumsum(tokens_per_row))).astype(np.int32)
    tokens = int(offsets[-1])
    rng = np.random.default_rng(0)
    values = rng.integers(0, 30_000, tokens, dtype=np.int32)
    if form == "mask":
        name, given = "loss_mask", (rng.random(tokens) < 0.7).astype(np.int8)
    else:
        starts = np.repeat(offsets[:-1], np.diff(offsets))
        half = np.repeat(np.diff(offsets) // 2, np.diff(offsets))
        name, given = "labels", np.where(np.arange(tokens) - starts < half, IGNORE_INDEX, values).astype(np.int32)
    table = pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
            name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(given)),
        }
    )
    _write(table, path, fmt, len(tokens_per_row) // 16)
    return tokens, int(table.nbytes)


@pytest.mark.parametrize(("fmt", "form"), [("parquet", "mask"), ("parquet", "labels"), ("arrow-stream", "labels")])
def test_read_holds_the_samples_and_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, form: str
) -> None:
    """Traced memory (numpy arrays, Python) while a file is read is the samples (4-byte ids, 1-byte mask) and
    one batch's temporaries; Arrow memory held while a batch is read is a small part of the table (an Arrow
    file: none, it is mapped): the file is neither read ahead nor decoded whole."""
    lengths = np.random.default_rng(1).integers(50, 400, 8_000)
    path = tmp_path / ("rows.parquet" if fmt == "parquet" else "rows.arrow")
    tokens, arrow_size = _token_file(path, fmt, lengths, form)
    monkeypatch.setattr(packing.reading._content, "_BATCH_VALUES", tokens // 32)
    held: list[int] = []
    read_one = packing.reading._arrow.read_table

    def counted(part: Any, **options: Any) -> Any:
        held.append(pa.total_allocated_bytes())
        return read_one(part, **options)

    packing.read_dataset(path)  # warm-up: imports and compiled kernels are not the read's memory
    monkeypatch.setattr(packing.reading._arrow, "read_table", counted)
    before = pa.total_allocated_bytes()
    peak = traced_peak(lambda: packing.read_dataset(path))
    assert len(held) >= 16
    assert max(held) - before < arrow_size / 4  # the whole table: arrow_size
    assert peak < 5 * tokens * 1.15 + 2**20  # the samples' 5 bytes a token, one batch's temporaries, offsets
    read = packing.read_dataset(path).samples
    assert read.labels is None and int(np.asarray(read.loss_mask).sum()) < tokens * 0.75


@pytest.mark.slow
def test_text_parquet_read_holds_the_tokens_not_the_decoded_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text rows tokenized batch by batch: traced memory is the output (8-byte ids and a 1-byte mask, grown by
    half at most) and one batch, not every row decoded into Python as well, as the whole table's read holds."""
    rng = np.random.default_rng(0)
    texts = ["".join(chr(97 + c) for c in rng.integers(0, 26, int(n))) for n in rng.integers(20, 400, 6_000)]
    tokens = sum(map(len, texts)) + len(texts)  # a byte a token, and an end of text each
    path = tmp_path / "text.parquet"
    pq.write_table(pa.table({"text": texts}), path, row_group_size=500)
    monkeypatch.setattr(packing.reading._content, "_TEXT_BATCH_BYTES", tokens // 10)  # text batches: by bytes
    packing.read_dataset(path, tokenizer="bytes")  # warm-up
    batchwise = traced_peak(lambda: packing.read_dataset(path, tokenizer="bytes"))
    whole = traced_peak(lambda: read_table(pq.read_table(path), tokenizer="bytes"))
    assert batchwise < 9 * 1.5 * tokens + 2 * 9 * tokens / 10 + 2**20
    assert batchwise < 0.85 * whole


def _mapped_resident(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    resident, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and ":" not in line.split(" ", 1)[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            resident += int(line.split()[1]) * 1024
    return resident


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs /proc/self/smaps (Linux)")
def test_arrow_file_pages_are_let_go_batch_by_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Arrow file read batch by batch keeps about one batch of its mapped pages resident, not the file."""
    path = tmp_path / "rows.arrow"
    lengths = np.random.default_rng(2).integers(50, 400, 8_000)
    tokens, _ = _token_file(path, "arrow-file", lengths, "labels")
    size = path.stat().st_size
    monkeypatch.setattr(packing.reading._content, "_BATCH_VALUES", tokens // 64)
    batches = packing.reading._files.decode(packing.reading._files.resolve(path).files[0]).batches
    assert batches is not None
    seen, total = [], 0
    for table in batches:
        for column in table.columns:  # every value read, as the reader does
            total += int(pc.sum(column.combine_chunks().flatten()).as_py() or 0)
        seen.append(_mapped_resident(path))
    assert total > 0 and len(seen) >= 16
    assert max(seen) < size / 4  # without letting pages go: the whole file
