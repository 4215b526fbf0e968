"""``packing.layouts.audit``: real producers (TRL, transformers), hand-built layouts of other frameworks, planted defects."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing._cli import main
from packing.errors import DatasetError, SettingError
from packing.layouts._export import export
from packing.layouts.audit import FINDING_DESCRIPTIONS, FINDING_FIXES, FINDING_KINDS, audit, read_packed


def _random_ids(seed: int, count: int, longest: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(1, 1000, int(rng.integers(1, longest + 1))))) for _ in range(count)]


# ---------------------------------------------------------------- TRL pack_dataset (real output)


@pytest.fixture(scope="module")
def trl_source() -> Any:
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("trl")
    ids = _random_ids(0, 300, 40)
    completion = [[0] * (len(row) // 2) + [1] * (len(row) - len(row) // 2) for row in ids]
    attention = [[1] * len(row) for row in ids]  # what a tokenizer adds; TRL's collators never use it
    return ids, datasets.Dataset.from_dict(
        {"input_ids": ids, "attention_mask": attention, "completion_mask": completion}
    )


def _trl_pack(dataset: Any, length: int, strategy: str) -> Any:
    from trl.data_utils import pack_dataset

    return pack_dataset(dataset, length, strategy=strategy, map_kwargs={"load_from_cache_file": False})


def test_trl_bfd_is_recognised_and_clean(trl_source: Any) -> None:
    ids, dataset = trl_source
    packed = _trl_pack(dataset, 64, "bfd")
    report = audit(packed, max_seq_length=64)
    assert report.layout == "trl"
    assert report.findings == ()
    assert report.num_blocks == len(packed)
    assert report.num_documents == len(ids)  # nothing longer than 64: no truncation
    assert report.tokens == sum(map(len, ids))
    assert report.padding_tokens == 0
    assert report.efficiency == pytest.approx(report.tokens / (64 * len(packed)))
    # the documents read back are the input rows (bfd reorders them)
    documents = read_packed(packed).documents()
    assert Counter(tuple(d.tolist()) for d in documents) == Counter(map(tuple, ids))


def test_trl_bfd_targets_follow_completion_mask_and_skip_document_starts(trl_source: Any) -> None:
    ids, dataset = trl_source
    layout = read_packed(_trl_pack(dataset, 64, "bfd"))
    by_tokens = {tuple(row): len(row) - len(row) // 2 for row in ids}
    for tokens, targets in zip(layout.documents(), layout.document_targets(), strict=True):
        expected = by_tokens[tuple(tokens.tolist())] - (1 if len(tokens) == 1 else 0) * 0
        # the first token is never a target; the completion half otherwise is
        mask = np.zeros(len(tokens), dtype=bool)
        mask[len(tokens) // 2 :] = True
        mask[0] = False
        assert targets.tolist() == mask.tolist()
        assert expected >= int(targets.sum())


def test_trl_wrapped_has_no_document_boundaries(trl_source: Any) -> None:
    ids, dataset = trl_source
    packed = _trl_pack(dataset, 64, "wrapped")
    report = audit(packed)
    assert report.layout == "trl"
    assert report.num_documents is None
    assert report.counts() == {"no_document_boundaries": len(packed)}
    assert report.tokens == sum(map(len, ids))
    assert np.concatenate(read_packed(packed).documents()).tolist() == [t for row in ids for t in row]


def test_cli_audits_trl_files(trl_source: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids, dataset = trl_source
    wrapped = tmp_path / "wrapped.parquet"
    _trl_pack(dataset, 64, "wrapped").to_parquet(wrapped)
    bfd = tmp_path / "bfd.parquet"
    _trl_pack(dataset, 64, "bfd").to_parquet(bfd)
    capsys.readouterr()
    assert main(["audit", str(wrapped), "--max-seq-length", "64", "--strict"]) == 1
    out = capsys.readouterr().out
    assert "layout          trl (wrapped: no document boundaries)" in out
    assert f"tokens          {sum(map(len, ids)):,}" in out
    assert "no_document_boundaries" in out
    assert main(["audit", str(bfd), "--max-seq-length", "64", "--strict"]) == 0
    out = capsys.readouterr().out
    assert f"documents       {len(ids):,}" in out and "findings: none" in out


def test_trl_bfd_split_and_truncation(trl_source: Any) -> None:
    ids, dataset = trl_source
    report = audit(_trl_pack(dataset, 16, "bfd"), max_seq_length=16)
    assert report.findings == ()
    assert report.tokens == sum(min(len(row), 16) for row in ids)
    try:
        split_packed = _trl_pack(dataset, 16, "bfd_split")
    except ValueError:  # TRL before bfd_split
        pytest.skip("this TRL has no strategy 'bfd_split'")
    split = audit(split_packed, max_seq_length=16)
    assert split.findings == ()
    assert split.tokens == sum(map(len, ids))
    assert split.num_documents == sum(-(-len(row) // 16) for row in ids)


def test_trl_seq_lengths_that_overrun_are_inconsistent(trl_source: Any) -> None:
    _, dataset = trl_source
    table = _trl_pack(dataset, 64, "bfd").with_format("arrow")[:]
    lengths = table.column("seq_lengths").to_pylist()
    broken = [1, 4, 7]
    for row in broken:
        lengths[row][-1] += 3
    table = table.set_column(table.column_names.index("seq_lengths"), "seq_lengths", pa.array(lengths))
    report = audit(table)
    assert report.counts() == {"inconsistent_boundaries": len(broken)}
    assert [block for block, _ in report.finding("inconsistent_boundaries").examples] == broken


# ---------------------------------------------------------------- transformers DataCollatorWithFlattening


def _flatten(features: list[dict[str, list[int]]], **options: Any) -> dict[str, Any]:
    transformers = pytest.importorskip("transformers")
    collator = transformers.DataCollatorWithFlattening(return_tensors="np", **options)
    return dict(collator(features))


def test_flattening_collator_output_is_clean() -> None:
    ids = _random_ids(1, 12, 30)
    batch = _flatten([{"input_ids": row} for row in ids])
    report = audit(batch)
    assert report.layout == "flattening"
    assert report.findings == ()
    assert report.num_blocks == 1
    assert report.num_documents == len(ids)
    assert [d.tolist() for d in read_packed(batch).documents()] == ids


def test_flattening_with_flash_attention_kwargs_is_clean() -> None:
    ids = _random_ids(2, 8, 20)
    batch = _flatten(
        [{"input_ids": row, "labels": row} for row in ids], return_flash_attn_kwargs=True, return_seq_idx=True
    )
    assert "cu_seq_lens_q" in batch and "seq_idx" in batch
    report = audit(batch)
    assert (report.layout, report.findings, report.num_documents) == ("flattening", (), len(ids))
    assert report.packed.variant == "cu_seq_lens"


def test_flattening_planted_defects() -> None:
    ids = [row for row in _random_ids(3, 10, 20) if len(row) >= 2][:6]
    batch = _flatten([{"input_ids": row} for row in ids], return_flash_attn_kwargs=True)
    starts = np.cumsum([0] + [len(row) for row in ids])[:-1]
    labels = batch["labels"].copy()
    leaked = starts[[2, 4]]
    labels[0, leaked] = batch["input_ids"][0, leaked]  # a label on a document's first token
    positions = batch["position_ids"].copy()
    third = slice(int(starts[3]), int(starts[4]))
    positions[0, third] += 7  # the fourth document's positions run on
    report = audit({**batch, "labels": labels, "position_ids": positions})
    assert report.counts() == {"cross_document_label": 2, "position_not_reset": 1}
    assert report.finding("cross_document_label").examples == ((0, int(leaked[0])), (0, int(leaked[1])))
    assert report.finding("position_not_reset").examples == ((0, int(starts[3])),)
    # without cu_seq_lens the position ids are the only boundaries: the run-on document merges with the one before
    # (and the jump from its last position to 7 is a bad step inside the merged document)
    merged = audit({"input_ids": batch["input_ids"], "labels": labels, "position_ids": positions})
    assert merged.num_documents == len(ids) - 1
    jump = int(len(ids[2]) != 7)
    assert merged.counts() == {"cross_document_label": 2, **({"inconsistent_boundaries": 1} if jump else {})}


# ---------------------------------------------------------------- torchtune PackedDataset (hand-built, as documented)


def _torchtune_pack(samples: list[tuple[list[int], list[int]]], width: int) -> dict[str, list[int]]:
    """One pack as torchtune's PackedDataset lays it out: labels per sample, input_pos restarting per sample,
    padding appended to seq_lens, input_pos counting on through the padding (capped at width - 1)."""
    tokens: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    lengths: list[int] = []
    for sample_tokens, sample_labels in samples:
        tokens += sample_tokens
        labels += sample_labels
        positions += list(range(len(sample_tokens)))
        lengths.append(len(sample_tokens))
    pad = width - len(tokens)
    if pad:
        tokens += [0] * pad
        labels += [-100] * pad
        positions += [min(positions[-1] + 1 + step, width - 1) for step in range(pad)]
        lengths.append(pad)
    return {"tokens": tokens, "labels": labels, "input_pos": positions, "seq_lens": lengths}


def _masked_first(tokens: list[int]) -> tuple[list[int], list[int]]:
    return tokens, [-100, *tokens[1:]]


def test_torchtune_layout_clean() -> None:
    packs = [
        _torchtune_pack([_masked_first([5, 6, 7]), _masked_first([8, 9])], 6),
        _torchtune_pack([_masked_first([1, 2, 3, 4, 5, 6])], 6),
        _torchtune_pack([_masked_first([3, 4])], 6),
    ]
    table = pa.Table.from_pylist(packs)
    report = audit(table)
    assert report.layout == "torchtune"
    assert report.findings == ()
    assert (report.num_blocks, report.num_documents, report.tokens, report.padding_tokens) == (3, 4, 13, 5)
    assert [d.tolist() for d in read_packed(table).documents()] == [[5, 6, 7], [8, 9], [1, 2, 3, 4, 5, 6], [3, 4]]


def test_torchtune_training_on_inputs_leaks_across_documents() -> None:
    # labels equal to tokens (train_on_input): each later document's first token is predicted by the one before
    table = pa.Table.from_pylist([_torchtune_pack([([5, 6, 7], [5, 6, 7]), ([8, 9], [8, 9]), ([4], [4])], 8)])
    report = audit(table)
    assert report.counts() == {"cross_document_label": 2}
    assert report.finding("cross_document_label").examples == ((0, 3), (0, 5))


def test_torchtune_split_across_packs_continues_positions() -> None:
    # split_across_pack=True: the rest of a sample opens the next pack with its positions running on
    first = {"tokens": [1, 2, 3, 4], "labels": [-100, 2, 3, 4], "input_pos": [0, 1, 2, 3], "seq_lens": [4]}
    rest = {"tokens": [5, 6, 7, 0], "labels": [5, 6, -100, -100], "input_pos": [4, 5, 0, 3], "seq_lens": [2, 1, 1]}
    report = audit(pa.Table.from_pylist([first, rest]))
    assert report.findings == ()
    assert report.num_documents == 3 and report.padding_tokens == 1


# ---------------------------------------------------------------- Megatron / NeMo packed rows (hand-built)


def _megatron_row(documents: list[tuple[list[int], int]]) -> dict[str, list[int]]:
    """A packed row as NeMo's fill_packing_strategy writes it: loss on tokens at or after the answer start,
    rolled by one per sequence (the last entry of each sequence 0), and the start of every sequence."""
    ids: list[int] = []
    mask: list[int] = []
    starts: list[int] = []
    for tokens, answer_start in documents:
        starts.append(len(ids))
        ids += tokens
        flags = [int(index >= answer_start) for index in range(len(tokens))]
        mask += [*flags[1:], 0]
    return {"input_ids": ids, "loss_mask": mask, "seq_start_id": starts}


def test_megatron_layout_clean() -> None:
    rows = [_megatron_row([([1, 2, 3, 4], 2), ([5, 6, 7], 1)]), _megatron_row([([8, 9, 10, 11, 12], 3)])]
    table = pa.Table.from_pylist(rows)
    report = audit(table, max_seq_length=5)
    assert report.layout == "megatron"
    assert report.findings == ()
    assert (report.num_blocks, report.num_documents, report.tokens) == (2, 3, 12)
    # each document counts length - 1 positions against the pack size: (3 + 2) / 5 and 4 / 5
    assert report.block_fill.tolist() == [1.0, 0.8]
    layout = read_packed(table)
    assert [t.tolist() for t in layout.document_targets()] == [
        [False, False, True, True],
        [False, True, True],
        [False, False, False, True, True],
    ]


def test_megatron_loss_mask_rolled_over_the_whole_row_trains_nothing_across_documents() -> None:
    documents = [([1, 2, 3], 0), ([4, 5], 0), ([6, 7, 8], 1)]
    row = _megatron_row(documents)
    flags = [int(i >= start) for tokens, start in documents for i in range(len(tokens))]
    row["loss_mask"] = [*flags[1:], 0]  # shifted across documents instead of within each
    report = audit(pa.Table.from_pylist([row]))
    # NeMo's loader cuts every document to ids[start:end - 1]: a document's last mask entry is never used
    assert report.counts() == {}
    too_long = audit(pa.Table.from_pylist([row]), max_seq_length=4)
    assert too_long.counts() == {"block_too_long": 1}


# ---------------------------------------------------------------- segment ids (LLaMA-Factory layouts, hand-built)


def _llamafactory_row(documents: list[tuple[list[int], int]], cutoff: int, neat: bool) -> dict[str, list[int]]:
    """A packed row as LLaMA-Factory's packed supervised processor writes it (length cutoff + 1): labels -100 on
    each prompt, position ids restarting per sequence and 0 in padding; neat packing numbers the documents in
    attention_mask (0 = padding), plain packing writes 1 everywhere, padding included."""
    ids: list[int] = []
    labels: list[int] = []
    mask: list[int] = []
    positions: list[int] = []
    for number, (tokens, prompt) in enumerate(documents, start=1):
        ids += tokens
        labels += [-100] * prompt + tokens[prompt:]
        mask += [number if neat else 1] * len(tokens)
        positions += list(range(len(tokens)))
    pad = cutoff + 1 - len(ids)
    ids += [0] * pad
    labels += [-100] * pad
    mask += [0 if neat else 1] * pad
    positions += [0] * pad
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "position_ids": positions}


LF_DOCS = [[([1, 2, 3, 4], 2), ([5, 6, 7], 1)], [([8, 9, 10, 11, 12], 1)], [([2, 3], 1), ([4, 5], 1), ([6, 7], 1)]]


def test_neat_packing_clean() -> None:
    table = pa.Table.from_pylist([_llamafactory_row(docs, 9, neat=True) for docs in LF_DOCS])
    report = audit(table)
    assert report.layout == "segment_ids" and report.packed.variant == "document numbers"
    assert report.findings == ()
    assert (report.num_documents, report.tokens, report.padding_tokens) == (6, 18, 12)


def test_plain_packing_all_ones_mask() -> None:
    table = pa.Table.from_pylist([_llamafactory_row(docs, 9, neat=False) for docs in LF_DOCS])
    report = audit(table)
    assert report.layout == "segment_ids"
    assert (report.num_documents, report.padding_tokens) == (6, 12)
    # the two blocks with several documents let them see each other
    assert report.counts() == {"all_ones_attention_mask": 2}
    assert report.finding("all_ones_attention_mask").examples == ((0, 4), (2, 2))


def test_segment_ids_disagreeing_with_position_ids() -> None:
    row = _llamafactory_row([([1, 2, 3, 4], 1), ([5, 6, 7], 1)], 9, neat=True)
    row["attention_mask"][4] = 1  # the second document's first token numbered as the first document
    report = audit(pa.Table.from_pylist([row]))
    # documents follow the numbers: position 4 is inside document 1 with position 0, and document 2 opens at 5,
    # where its position is 1 and its label (token 6) is trained
    assert report.counts() == {"cross_document_label": 1, "position_not_reset": 1, "inconsistent_boundaries": 1}
    assert report.finding("position_not_reset").examples == ((0, 5),)
    assert report.finding("inconsistent_boundaries").examples == ((0, 4),)


# ---------------------------------------------------------------- planted defects in this project's blocks


@st.composite
def _batches(draw: st.DrawFn) -> packing.PackedBatch:
    width = draw(st.integers(4, 24))
    count = draw(st.integers(2, 25))
    rows = []
    for _ in range(count):
        prompt = draw(st.lists(st.integers(1, 60), min_size=0, max_size=width // 2))
        completion = draw(st.lists(st.integers(1, 60), min_size=1, max_size=width))
        rows.append({"prompt": prompt, "completion": completion})
    strategy = draw(st.sampled_from(["split", "bfd", "next_fit", "first_fit"]))
    return packing.pack(rows, width, strategy=strategy)


def _table(batch: packing.PackedBatch) -> dict[str, np.ndarray[Any, Any]]:
    table = export(batch, "packing")
    return {name: np.array(table.column(name).to_pylist(), dtype=object) for name in table.column_names}


def _grid_table(batch: packing.PackedBatch, **grids: np.ndarray[Any, Any]) -> pa.Table:
    table = export(batch, "packing")
    for name, grid in grids.items():
        table = table.set_column(table.column_names.index(name), name, pa.array(grid.tolist(), pa.list_(pa.int64())))
    return table


def _document_starts(batch: packing.PackedBatch) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """Inner document starts ``(block, position, length)`` and padding cells of ``batch``, worked out from the
    plan's lengths alone."""
    inner = []
    padding = []
    for block in range(batch.num_blocks):
        lengths = batch.seq_lengths(block).tolist()
        position = 0
        for index, length in enumerate(lengths):
            if index:
                inner.append((block, position, length))
            position += length
        padding += [(block, cell) for cell in range(position, batch.max_seq_length)]
    return inner, padding


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(_batches(), st.data())
def test_planted_cross_document_labels_are_counted(batch: packing.PackedBatch, data: st.DataObject) -> None:
    inner, _ = _document_starts(batch)
    chosen = data.draw(st.lists(st.sampled_from(inner), unique=True, max_size=6)) if inner else []
    labels = batch.labels.copy()
    for block, position, _ in chosen:
        labels[block, position] = batch.input_ids[block, position]
    report = audit(_grid_table(batch, labels=labels))
    assert report.counts() == ({"cross_document_label": len(chosen)} if chosen else {})
    if chosen:
        assert list(report.finding("cross_document_label").examples) == sorted((b, p) for b, p, _ in chosen)[:5]


@settings(max_examples=40, deadline=None)
@given(_batches(), st.data(), st.integers(1, 50))
def test_planted_positions_not_reset_are_counted(batch: packing.PackedBatch, data: st.DataObject, shift: int) -> None:
    inner, _ = _document_starts(batch)
    chosen = data.draw(st.lists(st.sampled_from(inner), unique=True, max_size=6)) if inner else []
    positions = batch.position_ids.copy()
    for block, position, length in chosen:
        positions[block, position : position + length] += shift  # the whole document runs on
    report = audit(_grid_table(batch, position_ids=positions))
    assert report.counts() == ({"position_not_reset": len(chosen)} if chosen else {})


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(_batches(), st.data())
def test_planted_padding_losses_are_counted(batch: packing.PackedBatch, data: st.DataObject) -> None:
    _, padding = _document_starts(batch)
    chosen = data.draw(st.lists(st.sampled_from(padding), unique=True, max_size=8)) if padding else []
    labels = batch.labels.copy()
    for block, cell in chosen:
        labels[block, cell] = 3
    report = audit(_grid_table(batch, labels=labels))
    assert report.counts() == ({"padding_trained": len(chosen)} if chosen else {})


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(_batches(), st.data())
def test_planted_position_jumps_are_inconsistent(batch: packing.PackedBatch, data: st.DataObject) -> None:
    # the last token of a document of two or more tokens jumps ahead: exactly one bad step per planted cell
    ends = []
    for block in range(batch.num_blocks):
        position = 0
        for length in batch.seq_lengths(block).tolist():
            position += length
            if length >= 2:
                ends.append((block, position - 1))
    chosen = data.draw(st.lists(st.sampled_from(ends), unique=True, max_size=6)) if ends else []
    positions = batch.position_ids.copy()
    for block, cell in chosen:
        positions[block, cell] += 2
    report = audit(_grid_table(batch, position_ids=positions))
    assert report.counts() == ({"inconsistent_boundaries": len(chosen)} if chosen else {})


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(_batches(), st.data())
def test_planted_all_ones_masks_are_counted(batch: packing.PackedBatch, data: st.DataObject) -> None:
    table = export(batch, "segment_ids")
    masks = table.column("attention_mask").to_pylist()
    # a full block ending in one-token documents without labels reads as LLaMA-Factory's padding once its mask is
    # all ones (position 0, no label): the planted blocks keep either padding or a longer last document
    several = [
        block
        for block in range(batch.num_blocks)
        if len(batch.seq_lengths(block)) >= 2
        and (batch.seq_lengths(block).sum() < batch.max_seq_length or batch.seq_lengths(block)[-1] >= 2)
    ]
    chosen = data.draw(st.lists(st.sampled_from(several), unique=True, max_size=5)) if several else []
    for block in chosen:
        masks[block] = [int(value > 0) for value in masks[block]]
    table = table.set_column(table.column_names.index("attention_mask"), "attention_mask", pa.array(masks))
    report = audit(table)
    if all(len(batch.seq_lengths(block)) <= 1 for block in range(batch.num_blocks)):
        # one document a block: position ids restart nowhere, so nothing tells it from documents run together
        assert report.counts() == {"no_document_boundaries": batch.num_blocks}
        return
    assert report.counts() == ({"all_ones_attention_mask": len(chosen)} if chosen else {})


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(_batches(), st.data())
def test_planted_label_mismatches_are_counted(batch: packing.PackedBatch, data: st.DataObject) -> None:
    targets = [tuple(cell) for cell in np.argwhere(batch.labels != -100).tolist()]
    chosen = data.draw(st.lists(st.sampled_from(targets), unique=True, max_size=6)) if targets else []
    labels = batch.labels.copy()
    for block, cell in chosen:
        labels[block, cell] = batch.input_ids[block, cell] + 1
    report = audit(_grid_table(batch, labels=labels))
    assert report.counts() == ({"label_mismatch": len(chosen)} if chosen else {})


def test_sequence_ids_that_disagree_and_no_boundaries() -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 8, strategy="split")
    sequence_ids = batch.sequence_ids.astype(np.int64).copy()
    sequence_ids[0, 7] = 0  # padding claimed by a document
    report = audit(_grid_table(batch, sequence_ids=sequence_ids))
    assert report.counts() == {"inconsistent_boundaries": 1}
    wrapped = export(batch, "trl").drop_columns(["seq_lengths"])
    assert audit(wrapped).counts() == {"no_document_boundaries": 1}


def test_block_too_long_only_with_a_given_capacity() -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 5, strategy="bfd")
    table = export(batch, "trl")
    assert audit(table).findings == ()
    report = audit(table, max_seq_length=4)
    used = [int(batch.seq_lengths(b).sum()) for b in range(batch.num_blocks)]
    assert report.counts() == {"block_too_long": sum(u > 4 for u in used)}


def test_every_kind_is_documented() -> None:
    assert set(FINDING_KINDS) == set(FINDING_DESCRIPTIONS) == set(FINDING_FIXES)


# ---------------------------------------------------------------- inputs and errors


def test_files_and_errors(tmp_path: Path) -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
    table = export(batch, "packing")
    parquet = tmp_path / "blocks.parquet"
    pq.write_table(table, parquet)
    jsonl = tmp_path / "blocks.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    for path in (parquet, jsonl, str(parquet)):
        report = audit(path)
        assert (report.layout, report.num_documents, report.findings) == ("packing", 3, ())
    with pytest.raises(DatasetError, match="no such file"):
        audit(tmp_path / "missing.parquet")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        audit(tmp_path / "bad.parquet")
    with pytest.raises(DatasetError, match="no packed token column"):
        audit(pa.table({"text": [[1]]}))
    with pytest.raises(DatasetError, match="row 2: column 'labels': 1 values, expected 2"):
        audit(pa.table({"input_ids": [[1], [2, 3]], "labels": [[1], [2]], "position_ids": [[0], [0, 1]]}))
    with pytest.raises(ValueError, match="max_seq_length"):
        audit(table, max_seq_length=0)
    with pytest.raises(SettingError, match=r"^layout: expected one of packing, trl"):
        audit(table, layout="keras")


def test_cli_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
    clean = tmp_path / "clean.parquet"
    pq.write_table(export(batch, "segment_ids"), clean)
    assert main(["audit", str(clean), "--strict"]) == 0
    out = capsys.readouterr().out
    assert "layout          segment_ids (document numbers)" in out and "findings: none" in out
    leaky = tmp_path / "leaky.parquet"
    pq.write_table(export(batch, "trl").drop_columns(["seq_lengths"]), leaky)
    assert main(["audit", str(leaky), "--max-seq-length", "4"]) == 0
    assert main(["audit", str(leaky), "--strict"]) == 1
    out = capsys.readouterr().out
    assert "no_document_boundaries" in out and "documents       unknown (no boundaries)" in out
    assert main(["audit", str(leaky), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["layout"], summary["num_documents"], summary["findings"][0]["kind"]) == (
        "trl",
        None,
        "no_document_boundaries",
    )
    assert summary["findings"][0]["count"] == batch.num_blocks
    assert main(["audit", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"packing: error: {tmp_path / 'missing.jsonl'}: no such file"]


def test_cli_pack_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data.jsonl"
    rows = _random_ids(5, 40, 12)
    source.write_text("".join(json.dumps({"input_ids": row}) + "\n" for row in rows))
    for layout in ("torchtune", "megatron", "packing"):
        output = tmp_path / f"{layout}.parquet"
        code = main(
            [
                "pack",
                str(source),
                "--max-seq-length",
                "16",
                "--strategy",
                "bfd",
                "--layout",
                layout,
                "-o",
                str(output),
                "-q",
            ]
        )
        assert code == 0
        report = audit(output, max_seq_length=16)
        assert (report.layout, report.findings, report.num_documents) == (layout, (), len(rows))
        assert Counter(tuple(d.tolist()) for d in report.packed.documents()) == Counter(map(tuple, rows))
    capsys.readouterr()
    assert (
        main(
            [
                "pack",
                str(source),
                "--max-seq-length",
                "16",
                "--strategy",
                "bfd",
                "--layout",
                "keras",
                "-o",
                str(tmp_path / "x.parquet"),
            ]
        )
        == 2
    )


def test_uploads_as_bytes_or_file_objects(tmp_path: Path) -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
    target = tmp_path / "blocks.parquet"
    pq.write_table(export(batch, "megatron"), target)
    data = target.read_bytes()
    report = audit(data, name="upload.parquet")
    assert (report.source, report.layout, report.num_documents, report.findings) == (
        "upload.parquet",
        "megatron",
        3,
        (),
    )
    with open(target, "rb") as handle:
        assert audit(handle).source == str(target)
    lines = "".join(json.dumps(row) + "\n" for row in export(batch, "flattening").to_pylist()).encode()
    assert audit(lines, name="rows.jsonl").layout == "flattening"
    with pytest.raises(
        DatasetError,
        match=r"^upload\.bin: cannot tell the format from the file name; expected a \.jsonl, \.json, \.csv, \.parquet or \.arrow file$",
    ):
        audit(data, name="upload.bin")
    with pytest.raises(DatasetError, match=r"^rows\.parquet: not a readable Parquet file"):
        audit(lines, name="rows.parquet")


def test_arrow_files_and_streams(tmp_path: Path) -> None:
    import pyarrow.feather as feather

    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 4, strategy="ffd")
    table = export(batch, "segment_ids")
    ipc_file = tmp_path / "blocks.arrow"
    feather.write_feather(table, ipc_file)
    stream = tmp_path / "stream.arrow"
    with pa.OSFile(str(stream), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    for path in (ipc_file, stream):
        report = audit(path)
        assert (report.layout, report.num_documents, report.findings) == ("segment_ids", 3, ())
    (tmp_path / "bad.arrow").write_bytes(b"nope")
    with pytest.raises(DatasetError, match=r"bad\.arrow: not a readable Arrow file"):
        audit(tmp_path / "bad.arrow")


def test_this_projects_datasets_adapter_and_an_empty_table() -> None:
    datasets = pytest.importorskip("datasets")
    from packing.hf import pack_batch, pack_dataset

    source = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]]})
    whole = audit(pack_dataset(source, max_seq_length=5))
    shards = source.map(
        pack_batch, batched=True, batch_size=2, remove_columns=source.column_names, fn_kwargs={"max_seq_length": 5}
    )
    for report in (whole, audit(shards.with_format("torch"))):
        assert (report.layout, report.num_documents, report.tokens, report.findings) == ("packing", 4, 10, ())
    empty = audit(
        pa.table({"input_ids": pa.array([], pa.list_(pa.int64())), "seq_lengths": pa.array([], pa.list_(pa.int32()))})
    )
    assert (empty.num_blocks, empty.num_documents, empty.tokens, empty.efficiency, empty.findings) == (0, 0, 0, 0.0, ())


_LAYOUT_COLUMNS = {
    "packing": (["input_ids", "labels", "loss_mask", "position_ids", "sequence_ids"], ["seq_lengths"]),
    "trl": (["input_ids", "completion_mask"], ["seq_lengths"]),
    "flattening": (["input_ids", "labels", "position_ids", "seq_idx"], ["cu_seq_lens_q"]),
    "torchtune": (["tokens", "labels", "input_pos"], ["seq_lens"]),
    "megatron": (["input_ids", "loss_mask"], ["seq_start_id"]),
    "segment_ids": (["input_ids", "labels", "attention_mask", "position_ids"], []),
}


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_LAYOUT_COLUMNS)), st.data())
def test_arbitrary_values_give_a_report_or_a_dataset_error(layout: str, data: st.DataObject) -> None:
    per_token, per_block = _LAYOUT_COLUMNS[layout]
    blocks = data.draw(st.integers(0, 4))
    lengths = data.draw(st.lists(st.integers(0, 7), min_size=blocks, max_size=blocks))
    values = st.integers(-101, 9)
    columns: dict[str, list[list[int]]] = {}
    for name in per_token:
        columns[name] = [data.draw(st.lists(values, min_size=n, max_size=n)) for n in lengths]
    for name in per_block:
        columns[name] = [data.draw(st.lists(values, max_size=4)) for _ in lengths]
    table = pa.table({name: pa.array(rows, pa.list_(pa.int64())) for name, rows in columns.items()})
    try:
        report = audit(table, layout=layout)
    except packing.PackingError:
        return
    assert report.num_blocks == blocks
    assert report.tokens + report.padding_tokens == sum(lengths)
    assert set(report.counts()) <= set(FINDING_KINDS)
    for item in report.findings:
        assert item.count >= len(item.examples) >= 1
        assert all(0 <= b < blocks and 0 <= p < max(lengths[b], 1) for b, p in item.examples)
