"""The peers' own cases, run against this project: TRL (``pack_dataset``, its padding-free collator, ``SFTTrainer``),
transformers (``DataCollatorWithFlattening``) and torchtune (``PackedDataset``, ``padded_collate_packed``).

Every case either gives the peer's result or asserts the difference and says why. The peers are the installed
packages, never mocks; torchtune is not installable here (no distribution in the package index this machine
reads), so its packed batches are built from its source as read (``torchtune/datasets/_packed.py``,
``torchtune/data/_collate.py``) and that is said where they are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import packing
from packing.core import IGNORE_INDEX

datasets = pytest.importorskip("datasets")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

from trl.trainer.sft_trainer import DataCollatorForLanguageModeling  # noqa: E402

from packing.hf import pack_batch, pack_dataset  # noqa: E402
from packing.streaming import stream_dataset  # noqa: E402
from tests.helpers.peer_batches import check_trl_reads  # noqa: E402
from tests.helpers.tiny_models import VOCAB, local_tokenizer, tiny_llama  # noqa: E402

Dataset = datasets.Dataset


def trl_padding_free(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """TRL's own padding-free collator, as ``SFTTrainer`` makes it for packed data."""
    return dict(DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows))


# ---------------------------------------------------------------- the crash: TRL's padding-free collator


def test_the_issue_case_no_longer_crashes_trls_padding_free_collator() -> None:
    """``pack_dataset`` padded every row but left the padding out of ``seq_lengths``: TRL's collator builds
    positions from ``seq_lengths`` and failed on the first batch (IndexError: mask [1, 5] vs tensor [1, 8])."""
    ds = pack_dataset(Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]]}), 4, shuffle=False)
    batch = trl_padding_free([ds[0], ds[1]])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["labels"].tolist() == [[-100, 2, 3, -100, 5]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5]


def _random_token_rows(seed: int, count: int, longest: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, VOCAB, int(n)).tolist() for n in rng.integers(1, longest, count)]


@pytest.mark.parametrize("strategy", ["bfd", "ffd", "split", "next_fit"])
def test_every_datasets_door_gives_trl_what_it_reads(strategy: str) -> None:
    rows = _random_token_rows(3, 40, 30)
    masks = [[int(i % 3 != 0) for i in range(len(row))] for row in rows]
    source = Dataset.from_dict({"input_ids": rows, "loss_mask": masks})
    whole = pack_dataset(source, 32, strategy=strategy, seed=1)
    local = source.map(
        pack_batch,
        batched=True,
        batch_size=16,
        remove_columns=source.column_names,
        fn_kwargs={"max_seq_length": 32, "strategy": strategy},
    )
    doors = [list(whole), list(local)]
    if strategy != "split":  # stream keeps samples whole
        doors.append(list(stream_dataset(source.to_iterable_dataset(), 32, strategy=strategy, buffer_size=10)))
    for blocks in doors:
        for row in blocks:
            assert len(row["input_ids"]) == sum(row["seq_lengths"])  # the rows TRL's pack_dataset writes
        for first in range(0, len(blocks), 4):
            check_trl_reads(blocks[first : first + 4])


def test_the_trl_export_gives_trl_what_it_reads() -> None:
    batch = packing.pack(_random_token_rows(4, 30, 20), 24)
    table = packing.export(batch, "trl")
    blocks = table.to_pylist()
    check_trl_reads(blocks)


# ---------------------------------------------------------------- SFTTrainer on a tiny local model


def unpacked_token_loss(model: Any, blocks: list[dict[str, Any]]) -> float:
    """The mean cross-entropy over trained tokens, every document through the model alone."""
    total, count = 0.0, 0
    with torch.no_grad():
        for block in blocks:
            at = 0
            for n in block["seq_lengths"]:
                ids = torch.tensor(block["input_ids"][at : at + n])
                labels = torch.tensor(block["labels"][at : at + n])
                at += n
                if n < 2:
                    continue
                logits = model(input_ids=ids[None], use_cache=False).logits[0, :-1]
                ce = torch.nn.functional.cross_entropy(logits.float(), labels[1:], reduction="sum")
                total += float(ce)
                count += int((labels[1:] != IGNORE_INDEX).sum())
    return total / count


@pytest.mark.slow
def test_sft_trainer_trains_on_pack_dataset_output_unchanged(tmp_path: Path) -> None:
    from trl import SFTConfig, SFTTrainer

    rows = _random_token_rows(5, 48, 40)
    rows = [{"prompt": row[: len(row) // 3], "completion": row[len(row) // 3 :]} for row in rows]
    packed = pack_dataset(Dataset.from_list(rows), 64, seed=0)
    model = tiny_llama()
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2, padding_free=True,
        max_length=None, learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
        dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    trainer = SFTTrainer(model=model, args=args, train_dataset=packed, processing_class=local_tokenizer(tmp_path))
    first = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in first  # documents are kept apart by position_ids alone
    assert first["position_ids"].shape == first["input_ids"].shape
    # the batch TRL made from the packed rows gives each document's loss as if it were alone
    with torch.no_grad():
        packed_loss = float(model(**{k: first[k] for k in ("input_ids", "labels", "position_ids")}).loss)
    starts = [*(first["position_ids"][0] == 0).nonzero().flatten().tolist(), first["input_ids"].shape[1]]
    ids, labels = first["input_ids"][0].tolist(), first["labels"][0].tolist()
    blocks = [{"input_ids": ids, "labels": labels, "seq_lengths": np.diff(starts).tolist()}]
    assert abs(packed_loss - unpacked_token_loss(model, blocks)) < 1e-5
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(np.isfinite(losses))


# ---------------------------------------------------------------- the auditor: each peer's batch, made by the peer


def test_wrapped_blocks_with_positions_that_never_restart_are_not_certified_clean() -> None:
    """TRL's ``wrapped`` cuts documents and runs them together; positions ``0..T-1`` in every block carry no
    boundary, so the blocks get the same finding as without the column (they audited clean before)."""
    from trl.data_utils import pack_dataset as trl_pack

    source = Dataset.from_dict({"input_ids": _random_token_rows(6, 40, 30)})
    wrapped = trl_pack(source, 64, strategy="wrapped", map_kwargs={"load_from_cache_file": False})
    plain = packing.audit(wrapped)
    positioned = wrapped.map(lambda row: {"position_ids": list(range(len(row["input_ids"])))})
    report = packing.audit(positioned)
    assert plain.counts() == {"no_document_boundaries": wrapped.num_rows}
    assert report.counts() == {"no_document_boundaries": wrapped.num_rows}
    assert report.num_documents is None


def test_trls_padded_collator_with_positions_is_named_trl() -> None:
    from trl.data_utils import pack_dataset as trl_pack

    source = Dataset.from_dict({"input_ids": _random_token_rows(7, 20, 30)})
    wrapped = trl_pack(source, 32, strategy="wrapped", map_kwargs={"load_from_cache_file": False})
    rows = [wrapped[i] for i in range(wrapped.num_rows)][-3:]  # the last row is shorter: padding
    batch = DataCollatorForLanguageModeling(pad_token_id=0, return_position_ids=True)(rows)
    assert {"attention_mask", "position_ids"} <= set(batch)
    report = packing.audit(dict(batch))
    assert report.layout == "trl"  # was read as segment ids, and certified clean
    assert report.counts() == {"no_document_boundaries": 3}
    assert report.padding_tokens == int((batch["attention_mask"] == 0).sum())


def test_flattening_without_position_ids_is_named_flattening() -> None:
    from transformers import DataCollatorWithFlattening

    features = [{"input_ids": row} for row in _random_token_rows(8, 4, 10)]
    batch = DataCollatorWithFlattening(return_position_ids=False)(features)
    assert set(batch) == {"input_ids", "labels"}
    report = packing.audit(dict(batch))
    assert report.layout == "flattening"  # was named trl
    assert report.counts() == {"no_document_boundaries": 1}  # the model sees one sequence
    with_positions = packing.audit(dict(DataCollatorWithFlattening()(features)))
    assert (with_positions.layout, with_positions.num_documents, with_positions.findings) == ("flattening", 4, ())


def torchtune_padded_collate_packed(packs: list[dict[str, list[int]]]) -> dict[str, Any]:
    """torchtune's ``padded_collate_packed`` (``torchtune/data/_collate.py``, 0.6.1) as its source reads on a CPU:
    ``tokens``, ``labels`` and ``input_pos`` stacked, and ``mask`` = ``create_block_causal_mask(seq_lens)`` (a
    lower-triangular block per ``seq_lens`` entry, ``torch.block_diag``). torchtune is not importable here (it
    needs ``torchao``), so the batch is built from that source."""
    out = {name: torch.stack([torch.tensor(p[name]) for p in packs]) for name in ("tokens", "labels", "input_pos")}
    blocks = [[torch.tril(torch.ones(n, n, dtype=torch.bool)) for n in p["seq_lens"]] for p in packs]
    out["mask"] = torch.stack([torch.block_diag(*parts) for parts in blocks])
    return out


def test_torchtunes_collated_batch_is_read() -> None:
    batch = packing.pack(_random_token_rows(9, 20, 12), 16, strategy="ffd")
    packs = packing.export(batch, "torchtune").to_pylist()  # PackedDataset's packs, padding as a last entry
    collated = torchtune_padded_collate_packed(packs)
    report = packing.audit(collated)  # could not be read at all: no seq_lens in the batch
    assert report.layout == "torchtune"
    assert report.num_documents == sum(len(batch.seq_lengths(b)) for b in range(batch.num_blocks))
    assert report.findings == ()
    assert report.padding_tokens == int(
        batch.num_blocks * 16 - sum(int(batch.seq_lengths(b).sum()) for b in range(batch.num_blocks))
    )
    leaky = dict(collated, mask=torch.tril(torch.ones(16, 16, dtype=torch.bool)).expand(len(packs), 16, 16))
    assert packing.audit(leaky).counts().get("inconsistent_boundaries", 0) > 0  # positions restart inside a "document"
