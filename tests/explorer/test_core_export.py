"""Downloads and the reproducing snippet."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import packing
from explorer.core import export
from explorer.core.examples import synthetic_lengths

pytest.importorskip("pyarrow")


def test_jsonl_and_parquet_hold_the_packed_blocks() -> None:
    batch = packing.pack([[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]], 4, strategy="split")
    lines = [json.loads(line) for line in export.jsonl_bytes(batch).decode().splitlines()]
    assert [line["input_ids"] for line in lines] == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert lines[0]["labels"] == [-100, 2, -100, 4]
    assert lines[1]["seq_lengths"] == [1, 1]
    for column in ("input_ids", "labels", "loss_mask", "position_ids", "seq_lengths"):
        assert column in lines[0]
    table = pq.read_table(io.BytesIO(export.parquet_bytes(batch)))
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert table.column("loss_mask").to_pylist() == [[1, 1, 0, 1], [1, 1, 0, 0]]


def test_plan_csv() -> None:
    text = export.plan_csv(packing.plan([2, 3, 1], 4, strategy="split")).decode()
    assert text.splitlines() == [
        "block,position,sequence,start,length",
        "1,0,1,0,2",
        "1,2,2,0,2",
        "2,0,2,2,1",
        "2,1,3,0,1",
    ]


def _run(code: str) -> tuple[dict[str, object], str]:
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, namespace)
    return namespace, out.getvalue()


def test_snippet_reproduces_a_token_packing() -> None:
    samples = [[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]]
    code = export.snippet(
        export.DataOrigin(samples=samples), packing.Recipe(4, strategy="ffd", pad_token_id=9, loss="all"), tokens=True
    )
    namespace, printed = _run(code)
    expected = packing.pack(samples, 4, strategy="ffd", pad_token_id=9, loss="all")
    assert namespace["blocks"] == expected.input_ids.tolist()
    assert namespace["masks"] == expected.loss_mask.tolist()
    assert "Block 1:" in printed


def test_snippet_reproduces_synthetic_lengths() -> None:
    code = export.snippet(export.DataOrigin(synthetic=(500, "bimodal", 4, 1024)), packing.Recipe(1024), tokens=False)
    namespace, _ = _run(code)
    expected = packing.plan(synthetic_lengths(500, "bimodal", 4, 1024), 1024, strategy="bfd")
    assert namespace["plan"].num_blocks == expected.num_blocks  # type: ignore[attr-defined]


def test_snippet_for_workloads_and_uploads() -> None:
    namespace, _ = _run(
        export.snippet(
            export.DataOrigin(workload=("openchat_v1_2048", 100)), packing.Recipe(2048, strategy="split"), False
        )
    )
    assert len(namespace["lengths"]) == 100  # type: ignore[arg-type]
    every, _ = _run(export.snippet(export.DataOrigin(workload=("openchat_v1_2048", 0)), packing.Recipe(2048), False))
    assert len(every["lengths"]) == 6_144  # type: ignore[arg-type]
    upload = export.snippet(export.DataOrigin(upload_name="train.jsonl"), packing.Recipe(8, strategy="split"), True)
    assert "packing.read_dataset('train.jsonl', loss='completion')" in upload and "packing.pack(" in upload
    # a dataset is written to a file (the page's download limit sends people here), not printed block by block
    assert 'write_parquet(batch, "packed.parquet")' in upload and "to_lists" not in upload
    assert "from packing import write_parquet\n" in upload


def test_the_upload_snippet_writes_the_packed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n')
    monkeypatch.chdir(tmp_path)
    _run(export.snippet(export.DataOrigin(upload_name="train.jsonl"), packing.Recipe(4, strategy="split"), True))
    written = pq.read_table(tmp_path / "packed.parquet").column("input_ids").to_pylist()
    assert written == [[1, 2, 3, 4], [5, 0, 0, 0]]
    # loss on every token: the prompt is trained on too, as on the page
    (tmp_path / "train.jsonl").write_text('{"prompt": [1, 2], "completion": [3]}\n')
    _run(
        export.snippet(
            export.DataOrigin(upload_name="train.jsonl"), packing.Recipe(4, strategy="split", loss="all"), True
        )
    )
    mask = pq.read_table(tmp_path / "packed.parquet").column("loss_mask").to_pylist()
    assert mask == [[1, 1, 1, 0]]


def test_snippet_elides_long_sample_lists() -> None:
    samples = [list(range(100))] * 100
    code = export.snippet(export.DataOrigin(samples=samples), packing.Recipe(8, strategy="split"), True)
    assert "samples = [...]" in code and len(code) < 1000
    with pytest.raises(ValueError, match="no data"):
        export.snippet(export.DataOrigin(), packing.Recipe(8, strategy="split"), True)
    assert np.iinfo(np.int64).max > export.MAX_EXPORT_CELLS


def test_the_upload_snippet_tokenizes_a_file_of_chats_as_the_page_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from explorer.core.sources import Upload

    rows = [{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}] * 3
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    (tmp_path / "chats.jsonl").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    source = Upload.of("chats.jsonl", data, "bytes")
    code = export.snippet(source.origin(), packing.Recipe(64), True)
    assert "tokenizer='bytes')" in code  # read with the tokenizer; pack gets tokens
    _run(code)
    page = packing.pack(source.load().samples, 64, strategy="bfd")
    written = pq.read_table(tmp_path / "packed.parquet")
    assert written.column("input_ids").to_pylist() == page.input_ids.tolist()
    assert written.column("loss_mask").to_pylist() == page.loss_mask.tolist()


def test_the_snippet_passes_the_strategys_own_options_as_the_page_plans() -> None:
    """A shuffle's seed and spfhp's cap change the blocks: the snippet repeats them, so it packs the page's plan."""
    samples = [[1] * n for n in (3, 1, 2, 2, 1, 3, 1, 1)]
    recipe = packing.Recipe(4, strategy="first_fit_shuffle", seed=3)
    namespace, _ = _run(export.snippet(export.DataOrigin(samples=samples), recipe, True))
    page = packing.plan([len(s) for s in samples], recipe=recipe)
    assert (
        namespace["batch"].sequence_ids.tolist()
        == packing.materialize(page, packing.read_rows(samples)).sequence_ids.tolist()
    )  # type: ignore[attr-defined]
    capped = packing.Recipe(8, strategy="spfhp", max_sequences_per_block=2)
    code = export.snippet(export.DataOrigin(synthetic=(50, "uniform", 1, 8)), capped, False)
    namespace, _ = _run(code)
    assert "max_sequences_per_block=2" in code
    expected = packing.plan(synthetic_lengths(50, "uniform", 1, 8), recipe=capped)
    assert namespace["plan"].num_blocks == expected.num_blocks  # type: ignore[attr-defined]
