"""``packing.layouts``: each peer's own output (TRL, transformers) or files written the way its code writes them
(torchtune, NeMo), named right, audited without false findings, planted defects counted exactly, read by
``PackedDataset``; NeMo's ``.npy`` read without running anything; ``collate`` against transformers' options."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
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
from packing.errors import DatasetError
from packing.layouts import LAYOUTS
from packing.layouts._export import export, write_table
from packing.layouts.audit import audit

torch = pytest.importorskip("torch")
from packing.torch import PackedDataset, collate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _samples(seed: int, count: int, longest: int) -> list[tuple[list[int], int]]:
    """``(tokens, prompt length)`` pairs; every prompt holds at least one token."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = int(rng.integers(2, longest + 1))
        out.append((list(map(int, rng.integers(3, 1000, length))), int(rng.integers(1, length))))
    return out


def _dataset_documents(data: PackedDataset) -> list[tuple[list[int], list[int]]]:
    """Every document of a ``PackedDataset`` as ``(tokens, labels)``, from its items' ``seq_lengths``."""
    out = []
    for index in range(len(data)):
        item = data[index]
        start = 0
        for length in item["seq_lengths"].tolist():
            out.append(
                (item["input_ids"][start : start + length].tolist(), item["labels"][start : start + length].tolist())
            )
            start += length
        assert item["loss_mask"].tolist() == (item["labels"] != -100).to(torch.int8).tolist()
    return out


def _trained(tokens: list[int], prompt: int) -> list[int]:
    """Labels of a document whose prompt is masked (its first token is then never trained)."""
    return [-100] * prompt + tokens[prompt:]


# ---------------------------------------------------------------- TRL pack_dataset (the peer's own code)


@pytest.fixture(scope="module")
def trl_packed() -> dict[str, Any]:
    datasets = pytest.importorskip("datasets")
    from trl.data_utils import pack_dataset

    samples = _samples(1, 200, 30)
    source = datasets.Dataset.from_dict(
        {
            "input_ids": [tokens for tokens, _ in samples],
            "labels": [_trained(tokens, prompt) for tokens, prompt in samples],
            "attention_mask": [[1] * len(tokens) for tokens, _ in samples],
        }
    )
    kwargs = {"map_kwargs": {"load_from_cache_file": False}}
    out = {strategy: pack_dataset(source, 32, strategy=strategy, **kwargs) for strategy in ("bfd", "bfd_split")}
    out["wrapped"] = pack_dataset(source, 32, strategy="wrapped", **kwargs)
    out["samples"] = samples
    return out


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split"])
def test_trl_bfd_named_clean_and_read(trl_packed: dict[str, Any], strategy: str) -> None:
    packed = trl_packed[strategy]
    report = audit(packed, max_seq_length=32)
    assert (report.layout, report.packed.variant, report.findings) == ("trl", "seq_lengths", ())
    data = PackedDataset(packed)
    assert data.report.findings == () and len(data) == len(packed)
    documents = sorted(_dataset_documents(data))
    if strategy == "bfd":  # every sample once, each at most 32 tokens (bfd truncates)
        expected = sorted((t[:32], [-100, *_trained(t, p)[1:32]]) for t, p in trl_packed["samples"])
        assert documents == expected
    else:  # bfd_split: the same tokens, pieces of at most 32
        assert sum(len(tokens) for tokens, _ in documents) == sum(len(t) for t, _ in trl_packed["samples"])


def test_trl_bfd_planted_defects_are_counted(trl_packed: dict[str, Any]) -> None:
    table = trl_packed["bfd"].with_format("arrow")[:]
    lengths = table.column("seq_lengths").to_pylist()
    ids = table.column("input_ids").to_pylist()
    for row in (0, 3, 5):  # lengths overrunning their block: one inconsistent block each
        lengths[row][-1] += 1
    for row, cell in ((1, 0), (2, 4), (7, 1)):
        ids[row][cell] = 2**31
    table = table.set_column(table.column_names.index("seq_lengths"), "seq_lengths", pa.array(lengths))
    table = table.set_column(table.column_names.index("input_ids"), "input_ids", pa.array(ids))
    assert audit(table).counts() == {"inconsistent_boundaries": 3, "token_id_out_of_range": 3}


def test_trl_wrapped_with_labels_and_attention_mask_is_trl(trl_packed: dict[str, Any]) -> None:
    packed = trl_packed["wrapped"]
    assert {"labels", "attention_mask"} <= set(packed.column_names) and "position_ids" not in packed.column_names
    report = audit(packed)
    assert (report.layout, report.packed.variant) == ("trl", "wrapped: no document boundaries")
    assert report.counts() == {"no_document_boundaries": len(packed)}  # the one true finding, once per block
    data = PackedDataset(packed)
    assert len(data) == len(packed) and data[0]["seq_lengths"].tolist() == [32]


# ---------------------------------------------------------------- transformers DataCollatorWithFlattening (real)


@pytest.mark.parametrize("flash, seq_idx", list(itertools.product([False, True], repeat=2)))
def test_flattening_collator_named_clean_planted_and_read(flash: bool, seq_idx: bool) -> None:
    transformers = pytest.importorskip("transformers")
    samples = _samples(2, 12, 9)
    features = [{"input_ids": t, "labels": _trained(t, p)} for t, p in samples]
    collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=flash, return_seq_idx=seq_idx)
    batch = collator(features, return_tensors="np")
    report = audit(batch)
    assert (report.layout, report.findings, report.num_documents) == ("flattening", (), len(samples))
    data = PackedDataset(batch)
    assert _dataset_documents(data) == [(t, [-100, *_trained(t, p)[1:]]) for t, p in samples]
    starts = np.cumsum([0] + [len(t) for t, _ in samples])[1:-1]
    leaky = dict(batch)
    leaky["labels"] = batch["labels"].copy()
    leaky["labels"][0, starts[:4]] = batch["input_ids"][0, starts[:4]]  # four documents' first tokens trained
    assert audit(leaky).counts() == {"cross_document_label": 4}


# ---------------------------------------------------------------- torchtune PackedDataset (written as its code does)


def torchtune_packs(
    samples: list[tuple[list[int], list[int]]], max_seq_len: int, split_across_pack: bool = False
) -> list[dict[str, list[int]]]:
    """Packs as torchtune 0.6's ``PackedDataset._pack`` builds them (facts from its source, written here):
    samples appended in order with ``input_pos`` ``x % max_seq_len``; once a pack overflows, it is cut at the
    previous sample's boundary (or at ``max_seq_len`` with ``split_across_pack``, the cut sample's rest opening
    the next pack); each pack is padded with id 0, labels -100, the padding appended to ``seq_lens`` and
    ``input_pos`` counting on from its last value, clamped to ``max_seq_len - 1``."""
    packs: list[dict[str, list[int]]] = []

    def add(pack: dict[str, list[int]]) -> None:
        pad = max_seq_len - len(pack["tokens"])
        last = pack["input_pos"][-1]
        packs.append(
            {
                "tokens": pack["tokens"] + [0] * pad,
                "labels": pack["labels"] + [-100] * pad,
                "input_pos": pack["input_pos"] + [min(last + 1 + k, max_seq_len - 1) for k in range(pad)],
                "seq_lens": pack["seq_lens"] + ([pad] if pad > 0 else []),
            }
        )

    current: dict[str, list[int]] = {"tokens": [], "labels": [], "input_pos": [], "seq_lens": []}
    boundary = 0
    for tokens, labels in samples:
        current["tokens"] += tokens
        current["labels"] += labels
        current["input_pos"] += [x % max_seq_len for x in range(len(tokens))]
        current["seq_lens"] += [len(tokens)]
        while len(current["tokens"]) > max_seq_len:
            if split_across_pack:
                cut = max_seq_len
                leftover = max_seq_len - sum(current["seq_lens"][:-1])
                lengths = current["seq_lens"][:-1] + ([leftover] if leftover > 0 else [])
                rest_length = len(current["tokens"]) - cut
            else:
                cut = boundary
                lengths = current["seq_lens"][:-1]
                rest_length = current["seq_lens"][-1]
            add({key: current[key][:cut] for key in ("tokens", "labels", "input_pos")} | {"seq_lens": lengths})
            current = {key: current[key][cut:] for key in ("tokens", "labels", "input_pos")}
            current["seq_lens"] = [rest_length]
        boundary = len(current["tokens"])
    if current["tokens"]:
        add(current)
    return packs


@pytest.mark.parametrize("split", [False, True])
def test_torchtune_named_clean_and_read(split: bool) -> None:
    samples = [(t, _trained(t, p)) for t, p in _samples(3, 120, 20)]
    table = pa.Table.from_pylist(torchtune_packs(samples, 24, split_across_pack=split))
    report = audit(table)
    assert (report.layout, report.findings) == ("torchtune", ())
    assert report.tokens == sum(len(t) for t, _ in samples)
    data = PackedDataset(table)
    documents = _dataset_documents(data)
    if not split:
        assert documents == [(t, [-100, *labels[1:]]) for t, labels in samples]
    else:
        assert [t for doc, _ in documents for t in doc] == [t for doc, _ in samples for t in doc]


def test_torchtune_last_document_of_a_full_pack_not_reset() -> None:
    samples = [(t, _trained(t, p)) for t, p in _samples(4, 80, 12)]
    packs = torchtune_packs(samples, 16, split_across_pack=True)  # every pack but the last is full
    chosen = []
    for pack in packs:
        start = 16 - pack["seq_lens"][-1]
        if (
            sum(pack["seq_lens"]) == 16
            and len(pack["seq_lens"]) >= 2
            and any(x != -100 for x in pack["labels"][start:])
        ):
            chosen.append(pack)
    assert len(chosen) >= 3
    for pack in chosen[:3]:  # the last document's positions run on from the one before instead of restarting
        start = 16 - pack["seq_lens"][-1]
        first = pack["input_pos"][start - 1] + 1
        pack["input_pos"][start:] = list(range(first, first + 16 - start))
    report = audit(pa.Table.from_pylist(packs))
    assert report.counts() == {"position_not_reset": 3}  # not padding_trained: torchtune's padding is never trained


# ---------------------------------------------------------------- NeMo packed .npy (written as its code does)


def nemo_rows(samples: list[tuple[list[int], int]], bins: list[list[int]], nemo1: bool, pad_id: int) -> list[Any]:
    """Packed rows as NeMo's ``fill_packing_strategy`` builds them (facts from its source, written here): each
    sequence's mask either its per-sequence ``loss_mask`` rolled by one (NeMo 2; floats from the tokenizer with a
    ``False`` appended), or ``idx >= answer_start_idx - 1 and input_ids[idx] != pad_id`` (NeMo 1, booleans);
    sequences concatenated per bin with ``seq_start_id`` their starts."""
    rows = []
    for members in bins:
        ids: list[int] = []
        mask: list[Any] = []
        starts: list[int] = []
        for member in members:
            tokens, answer = samples[member]
            starts.append(len(ids))
            ids += tokens
            if nemo1:
                mask += [index >= answer - 1 and tokens[index] != pad_id for index in range(len(tokens))]
            else:
                per_sequence = [float(index >= answer) for index in range(len(tokens))]
                mask += [*per_sequence[1:], False]
        rows.append({"input_ids": ids, "loss_mask": mask, "seq_start_id": starts})
    return rows


def nemo_loader(row: dict[str, Any]) -> tuple[list[list[int]], list[list[int]]]:
    """What NeMo's ``GPTSFTPackedDataset`` trains from one stored row (facts from its source, written here):
    boundaries ``seq_start_id + [len(input_ids)]``; each document's inputs ``ids[start:end - 1]``, labels
    ``ids[start + 1:end]`` and mask ``loss_mask[start:end - 1]``. Returns per document its inputs and the
    labels the mask trains."""
    ids = row["input_ids"]
    boundaries = row["seq_start_id"] + [len(ids)]  # a list: NeMo concatenates, it does not add
    inputs, trained = [], []
    for start, end in itertools.pairwise(boundaries):
        labels = ids[start + 1 : end]
        mask = row["loss_mask"][start : end - 1]
        inputs.append(list(ids[start : end - 1]))
        trained.append([label for label, flag in zip(labels, mask, strict=True) if flag])
    return inputs, trained


def _nemo_bins(samples: list[tuple[list[int], int]], pack_size: int) -> list[list[int]]:
    """First-fit decreasing over ``length - 1`` (NeMo's histogram counts each sequence one position short)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(samples)), key=lambda i: -len(samples[i][0])):
        need = len(samples[index][0]) - 1
        slot = next((b for b, r in enumerate(room) if r >= need), None)
        if slot is None:
            bins.append([])
            room.append(pack_size)
            slot = len(bins) - 1
        bins[slot].append(index)
        room[slot] -= need
    return bins


@pytest.mark.parametrize("nemo1", [False, True])
def test_nemo_npy_named_clean_planted_and_read(tmp_path: Path, nemo1: bool) -> None:
    samples = _samples(5, 300, 40)
    bins = _nemo_bins(samples, 64)
    rows = nemo_rows(samples, bins, nemo1, pad_id=2)
    path = tmp_path / "packed.npy"
    np.save(path, rows)  # as NeMo saves its list of dicts
    report = audit(path, max_seq_length=64)
    assert (report.layout, report.findings, report.num_documents) == ("megatron", (), len(samples))
    assert report.packed.variant == (
        "NeMo 1 mask: answer_start_idx - 1" if nemo1 else "NeMo 2 mask: loss_mask rolled by one"
    )
    # the auditor's targets are exactly the labels NeMo's loader trains
    data = PackedDataset(path)
    ours = [[t for t, label in zip(*doc, strict=True) if label != -100] for doc in _dataset_documents(data)]
    assert ours == [trained for row in rows for trained in nemo_loader(row)[1]]
    # planted: three rows with a start past their end, two tokens out of range
    planted = [dict(row) for row in rows]
    for index in (0, 4, 9):
        planted[index]["seq_start_id"] = [*planted[index]["seq_start_id"], len(planted[index]["input_ids"]) + 5]
    planted[1]["input_ids"] = [-5, *planted[1]["input_ids"][1:]]
    planted[2]["input_ids"] = [*planted[2]["input_ids"][:-1], 2**40]
    np.save(path, planted)
    counts = audit(path, max_seq_length=64).counts()
    assert counts["inconsistent_boundaries"] == 3 and counts["token_id_out_of_range"] == 2
    assert "cross_document_label" not in counts and "padding_trained" not in counts


def test_nemo_export_is_read_unchanged_by_nemos_loader(tmp_path: Path) -> None:
    rows = [{"prompt": t[:p], "completion": t[p:]} for t, p in _samples(6, 60, 20)]
    batch = packing.pack(rows, 32)
    path = tmp_path / "export.npy"
    write_table(export(batch, "megatron"), path)
    stored = np.load(path, allow_pickle=True)  # NeMo's own loading
    expected = []
    for block in range(batch.num_blocks):
        start = 0
        for length in batch.seq_lengths(block).tolist():
            cells = slice(start, start + length)
            labels = batch.labels[block, cells]
            expected.append((batch.input_ids[block, cells][:-1].tolist(), labels[labels != -100].tolist()))
            start += length
    loaded = [pair for row in stored for pair in zip(*nemo_loader(row), strict=True)]
    assert loaded == expected
    assert audit(path).findings == () and audit(path).layout == "megatron"


class _System:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


class _Popen(_System):
    def __reduce__(self) -> Any:
        return (subprocess.Popen, (["touch", str(self.marker)],))


@pytest.mark.parametrize("payload", [_System, _Popen])
def test_a_crafted_npy_runs_nothing(tmp_path: Path, payload: type[_System], capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "created"
    rows = np.empty(2, dtype=object)
    rows[:] = [{"input_ids": [1, 2], "seq_start_id": [0], "loss_mask": [1, 0]}, {"input_ids": payload(marker)}]
    path = tmp_path / "evil.npy"
    np.save(path, rows, allow_pickle=True)
    with pytest.raises(DatasetError, match=r"refused: it asks for (posix\.system|subprocess\.Popen)") as caught:
        audit(path)
    assert "\n" not in str(caught.value)
    with pytest.raises(DatasetError, match="refused"):
        PackedDataset(path)
    assert main(["audit", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not marker.exists()
    # the payload is real: numpy's own unrestricted loading runs it
    code = f"import numpy as np; np.load({str(path)!r}, allow_pickle=True)"
    subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, timeout=120)
    for _ in range(50):
        if marker.exists():
            break
        subprocess.run(["sleep", "0.1"], check=True)
    assert marker.exists()


def test_npy_masks_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "rows.npy"
    np.save(path, [{"input_ids": [5, 6, 7], "seq_start_id": [0], "loss_mask": [1.0, True, 0.5]}])
    with pytest.raises(DatasetError, match=r"key 'loss_mask': expected 0 or 1, got 0\.5 \(row 1\)|row 1"):
        audit(path)
    np.save(path, np.arange(6).reshape(2, 3))
    with pytest.raises(DatasetError, match="expected an array of dicts"):
        audit(path)
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(DatasetError, match=r"not a NumPy \.npy file"):
        audit(tmp_path / "junk.npy")
    # a Parquet file with NeMo's float masks is read as 0/1 too
    table = pa.table({"input_ids": [[5, 6, 7]], "seq_start_id": [[0]], "loss_mask": [[1.0, 0.0, 0.0]]})
    pq.write_table(table, tmp_path / "floats.parquet")
    assert audit(tmp_path / "floats.parquet").packed.targets.tolist() == [False, True, False]


# ---------------------------------------------------------------- every export, read back by PackedDataset


@st.composite
def _batches(draw: st.DrawFn) -> packing.PackedBatch:
    width = draw(st.integers(2, 16))
    rows: list[Any] = []
    for _ in range(draw(st.integers(1, 12))):
        prompt = draw(st.lists(st.integers(1, 500), min_size=1, max_size=width))
        completion = draw(st.lists(st.integers(1, 500), max_size=width))
        rows.append({"prompt": prompt, "completion": completion})
    return packing.pack(rows, width, strategy=draw(st.sampled_from(["bfd", "next_fit"])))


@settings(max_examples=100, deadline=None)
@given(_batches(), st.sampled_from(LAYOUTS))
def test_packed_dataset_reads_every_export_as_the_batch(batch: packing.PackedBatch, layout: str) -> None:
    exported = export(batch, layout)
    reference = PackedDataset(batch)
    single = all(len(batch.seq_lengths(block)) <= 1 for block in range(batch.num_blocks))
    used = [int(batch.seq_lengths(block).sum()) for block in range(batch.num_blocks)]
    filled = [length for length in used if length]
    if single and layout == "flattening" and 2 * filled.count(max(filled, default=0)) < len(filled):
        # unpadded rows, most shorter than the longest, each with position ids 0..T-1: packing without boundaries
        # fills its blocks to one length, so these are samples as far as anyone can tell
        with pytest.raises(DatasetError, match="cannot tell how these rows are packed"):
            PackedDataset(exported)
        return
    data = PackedDataset(exported)
    if single and layout in ("flattening", "segment_ids"):
        # one document a block and nothing but position ids 0..T-1: cannot be told from documents run together
        assert data.report.counts() == {"no_document_boundaries": batch.num_blocks}
        return
    assert data.report.layout == layout and data.report.findings == () and len(data) == len(reference)
    for index in range(len(data)):
        ours, theirs = data[index], reference[index]
        used = int(theirs["seq_lengths"].sum())
        assert ours["seq_lengths"].tolist() == theirs["seq_lengths"].tolist()
        for key in ("input_ids", "labels", "loss_mask", "position_ids"):
            assert ours[key][:used].tolist() == theirs[key][:used].tolist(), key


# ---------------------------------------------------------------- collate against transformers, every option


@pytest.mark.parametrize("options", list(itertools.product([False, True], repeat=3)))
def test_collate_matches_every_option_of_data_collator_with_flattening(options: tuple[bool, bool, bool]) -> None:
    transformers = pytest.importorskip("transformers")
    names = ("return_position_ids", "return_flash_attn_kwargs", "return_seq_idx")
    kwargs = dict(zip(names, options, strict=True))
    rows = [
        {"input_ids": [1, 2, 3], "completion_mask": [0, 0, 1]},
        {"input_ids": []},
        {"input_ids": torch.tensor([4, 5]), "labels": torch.tensor([-100, 5])},
        {"input_ids": [6]},
    ]
    theirs = transformers.DataCollatorWithFlattening(**kwargs)(rows)
    exact = collate(rows, ignore_masks=True, **kwargs)  # transformers ignores completion_mask
    ours = collate(rows, **kwargs)
    assert list(exact) == list(ours) == list(theirs)  # the same keys, in the same order
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert exact[key].dtype == value.dtype and torch.equal(exact[key], value), key
        else:
            assert type(exact[key]) is type(value) and exact[key] == value, key
    assert ours["labels"].tolist() == [[-100, -100, 3, -100, 5, -100]]  # the mask applied by default
    assert exact["labels"].tolist() == [[-100, 2, 3, -100, 5, -100]]
    if kwargs["return_seq_idx"]:
        assert ours["seq_idx"].dtype == torch.int32 and ours["seq_idx"].tolist() == [[0, 0, 0, 1, 1, 2]]
    assert set(transformers.DataCollatorWithFlattening()(rows)) == {"input_ids", "labels", "position_ids"}


# ---------------------------------------------------------------- the CLI on a closed pipe


@pytest.mark.slow
def test_audit_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    table = pa.table(
        {"input_ids": [[1, 2, 3, 4]] * 50, "labels": [[1, 2, 3, 4]] * 50, "position_ids": [[0, 1, 0, 1]] * 50}
    )
    path = tmp_path / "blocks.parquet"
    pq.write_table(table, path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "packing", "audit", str(path), "--json"]
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write meets a closed pipe
    try:
        done = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, env=env, timeout=300, check=False)
    finally:
        os.close(write_end)
    assert done.stderr == b"" and done.returncode == 141
    shell = subprocess.run(
        f"{command[0]} -m packing audit {path} | head -n 1", shell=True, capture_output=True, env=env, timeout=300
    )
    assert shell.stdout.decode().startswith("input") and shell.stderr == b""


def test_cli_packs_to_nemo_npy(tmp_path: Path) -> None:
    source = tmp_path / "data.jsonl"
    source.write_text('{"prompt": [1, 2], "completion": [3, 4]}\n{"prompt": [5], "completion": [6, 7, 8]}\n')
    target = tmp_path / "packed.npy"
    assert main(["pack", str(source), "--max-seq-length", "8", "--layout", "megatron", "-o", str(target)]) == 0
    rows = np.load(target, allow_pickle=True)
    assert sorted(len(row["input_ids"]) for row in rows) == [8]
    assert audit(target).layout == "megatron" and audit(target).findings == ()
    assert main(["pack", str(source), "--max-seq-length", "8", "-o", str(tmp_path / "x.npy")]) == 2


class _Huge:
    def __reduce__(self) -> Any:
        return (np._core.multiarray._reconstruct, (np.ndarray, (10**12,), b"b"))


def test_npy_arrays_inside_rows_and_arrays_larger_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npy"
    row = {"input_ids": np.array([5, 6, 7, 8]), "seq_start_id": [0, np.int64(2)], "loss_mask": np.array([1.0, 0, 1, 0])}
    np.save(path, [row])
    report = audit(path)
    assert (report.layout, report.num_documents, report.findings) == ("megatron", 2, ())
    rows = np.empty(1, dtype=object)
    rows[0] = {"input_ids": _Huge()}
    np.save(path, rows, allow_pickle=True)
    with pytest.raises(DatasetError, match=r"refused: an array of shape \(1000000000000,\), larger than the file"):
        audit(path)
    rows[0] = {"input_ids": [[[1]]], "seq_start_id": [0]}
    np.save(path, rows, allow_pickle=True)
    with pytest.raises(DatasetError, match=r"key 'input_ids': expected a list of numbers \(row 1\)|row 1"):
        audit(path)


def test_npy_that_is_not_rows_or_ends_early_or_shares_its_lists(tmp_path: Path) -> None:
    """Each refused in one line naming the file: a single dict (a 0-d array), a file cut short, and rows that
    repeat one list (a small file that would unpack into far more numbers than it holds bytes)."""
    path = tmp_path / "rows.npy"
    np.save(path, np.array({"input_ids": [1, 2], "seq_start_id": [0]}, dtype=object), allow_pickle=True)
    with pytest.raises(
        DatasetError, match=r"rows\.npy: expected a list of dicts \(NeMo's packed rows\), got an array of shape \(\)$"
    ):
        audit(path)
    np.save(path, [{"input_ids": list(range(1, 101)), "seq_start_id": [0, 50], "loss_mask": [1] * 100}])
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.raises(DatasetError, match=r"rows\.npy: the file ends early \(truncated\)$"):
            audit(path)
    row = {"input_ids": list(range(1, 2001)), "seq_start_id": [0], "loss_mask": [1] * 2000}
    rows = np.empty(500, dtype=object)
    rows[:] = [row] * 500  # one dict, pickled once and referred to 500 times: 2,000,000 numbers
    np.save(path, rows, allow_pickle=True)
    assert path.stat().st_size < 20_000
    with pytest.raises(
        DatasetError, match=r"refused: more numbers than the file has bytes .*: rows share their lists$"
    ):
        audit(path)
    assert main(["audit", str(path)]) == 2
    np.save(path, [{key: list(value) for key, value in row.items()} for _ in range(3)])  # lists of their own: read
    assert audit(path).num_blocks == 3


@pytest.mark.parametrize("int64", [False, True])
def test_exports_write_ids_labels_and_positions_in_the_schemas_dtype(int64: bool) -> None:
    from packing import pack
    from packing.layouts._export import export

    batch = pack([[1, 2], [3, 4, 5]], 4, strategy="split", int64=int64)
    want = pa.int64() if int64 else pa.int32()
    columns = {
        "trl": ("input_ids", "labels"),
        "flattening": ("input_ids", "labels", "position_ids"),
        "segment_ids": ("input_ids", "labels", "position_ids"),
        "torchtune": ("tokens", "labels", "input_pos"),
    }
    for format, names in columns.items():
        table = export(batch, format)
        for name in names:
            assert table.schema.field(name).type == pa.list_(want), (format, name)
    assert export(batch, "torchtune").schema.field("seq_lens").type == pa.list_(pa.int32())


def test_layout_names_are_listed_once_and_every_module_is_a_layout() -> None:
    """``LayoutName`` is the one list: every name has its module (in the same order), every module has the
    ``LayoutModule`` members, and the export formats are the same names."""
    import inspect

    from packing.layouts import LAYOUTS, MODULES, LayoutModule

    assert tuple(MODULES) == LAYOUTS
    members = {name for name in dir(LayoutModule) if not name.startswith("_")}
    for name, module in MODULES.items():
        assert name == module.NAME
        assert members <= set(dir(module)), name
        assert inspect.signature(module.read).parameters.keys() == {"table", "source"}
