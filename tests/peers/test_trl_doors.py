"""Every door whose output claims TRL's packed layout gives rows TRL's padding-free collator
(``DataCollatorForLanguageModeling(padding_free=True)``, what ``SFTTrainer`` uses for packed data) reads as they are:
``hf.pack_dataset`` (with carried columns), ``hf.pack_batch`` through ``Dataset.map``, ``streaming.stream_dataset``,
``export(batch, "trl")`` written and read back with ``datasets``, and the command line's ``--layout trl`` read back
with ``datasets.load_dataset``; a few ``SFTTrainer`` steps on the command line's output. The command line's own
``packing`` layout (padded rows) is not TRL's: asserted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

import packing  # noqa: E402
from packing._cli import main  # noqa: E402
from packing.hf import pack_batch, pack_dataset  # noqa: E402
from packing.layouts._export import write_table  # noqa: E402
from packing.streaming import stream_dataset  # noqa: E402
from tests.helpers.peer_batches import check_trl_reads  # noqa: E402
from tests.helpers.tiny_models import VOCAB, local_tokenizer, tiny_llama  # noqa: E402

Dataset = datasets.Dataset
datasets.disable_progress_bars()


def source_rows(seed: int, count: int = 40, longest: int = 30) -> list[dict[str, list[int]]]:
    """Rows of three forms: plain tokens, prompt/completion, tokens with TRL's completion mask."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, list[int]]] = []
    for i, n in enumerate(rng.integers(1, longest, count).tolist()):
        ids = rng.integers(3, VOCAB, n).tolist()
        if i % 3 == 0:
            rows.append({"input_ids": ids})
        elif i % 3 == 1:
            rows.append({"prompt": ids[: n // 2], "completion": ids[n // 2 :]})
        else:
            rows.append({"input_ids": ids, "completion_mask": [int(j >= n // 3) for j in range(n)]})
    return rows


def as_dataset(rows: list[dict[str, Any]]) -> Any:
    """Rows of mixed forms as one dataset, absent fields null (``Dataset.from_list`` keeps the first row's keys)."""
    names = sorted({name for row in rows for name in row})
    return Dataset.from_dict({name: [row.get(name) for row in rows] for name in names})


def in_batches(blocks: list[dict[str, Any]], size: int = 4) -> None:
    assert blocks
    for row in blocks:
        assert len(row["input_ids"]) == sum(row["seq_lengths"]) == len(row["labels"])  # TRL's pack_dataset rows
    for first in range(0, len(blocks), size):
        check_trl_reads(blocks[first : first + size])


def documents(blocks: list[dict[str, Any]]) -> list[tuple[int, ...]]:
    out = []
    for row in blocks:
        at = 0
        for n in row["seq_lengths"]:
            out.append(tuple(row["input_ids"][at : at + n]))
            at += n
    return sorted(out)


def whole_documents(rows: list[dict[str, list[int]]]) -> list[tuple[int, ...]]:
    return sorted(tuple(row.get("input_ids") or row["prompt"] + row["completion"]) for row in rows)


@pytest.mark.parametrize(("strategy", "overflow"), [("bfd", "truncate"), ("bfd", "split"), ("ffd", "drop")])
def test_pack_dataset_with_carried_columns(strategy: str, overflow: str) -> None:
    rows = [
        {**row, "token_type_ids": [0] * len(row.get("input_ids", []))} for row in source_rows(1) if "input_ids" in row
    ]
    blocks = list(pack_dataset(as_dataset(rows), 24, strategy=strategy, overflow=overflow, seed=3))
    assert all(len(row["token_type_ids"]) == len(row["input_ids"]) for row in blocks)
    in_batches(blocks)
    batch = check_trl_reads(blocks[:2])
    assert "token_type_ids" not in batch and "attention_mask" not in batch  # TRL's collator passes neither on


def test_pack_batch_through_map() -> None:
    source = as_dataset(source_rows(2))
    packed = source.map(
        pack_batch, batched=True, batch_size=16, remove_columns=source.column_names, fn_kwargs={"max_seq_length": 32}
    )
    in_batches(list(packed))
    assert documents(list(packed)) == whole_documents(source_rows(2))


def test_stream_dataset() -> None:
    stream = as_dataset(source_rows(3)).to_iterable_dataset()
    blocks = list(stream_dataset(stream, 32, buffer_size=12))
    in_batches(blocks)
    assert documents(blocks) == whole_documents(source_rows(3))


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_trl_export_written_and_read_back_with_datasets(tmp_path: Path, suffix: str) -> None:
    rows = source_rows(4)
    table = packing.export(packing.pack(rows, 32), "trl")
    path = tmp_path / f"blocks{suffix}"
    write_table(table, path)
    back = datasets.load_dataset(suffix[1:].replace("jsonl", "json"), data_files=str(path), split="train")
    assert back.column_names == ["input_ids", "labels", "seq_lengths"]
    in_batches(list(back))
    assert documents(list(back)) == whole_documents(rows)


def run_cli(tmp_path: Path, rows: list[dict[str, Any]], output: str, *options: str) -> Path:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / output
    assert main(["pack", str(source), "--max-seq-length", "32", "--output", str(out), "--quiet", *options]) == 0
    return out


@pytest.mark.parametrize("output", ["blocks.parquet", "blocks.jsonl"])
def test_the_command_lines_trl_format_read_back_with_datasets(tmp_path: Path, output: str) -> None:
    rows = source_rows(5)
    path = run_cli(tmp_path, rows, output, "--layout", "trl")
    kind = "parquet" if output.endswith(".parquet") else "json"
    back = datasets.load_dataset(kind, data_files=str(path), split="train")
    in_batches(list(back))
    assert documents(list(back)) == whole_documents(rows)


def test_the_command_lines_own_layout_is_not_trls(tmp_path: Path) -> None:
    """A difference, on purpose: the default ``packing`` layout pads every row to ``--max-seq-length`` (static
    shapes) and ``seq_lengths`` count the documents only, so TRL's collator, which builds positions from
    ``seq_lengths``, fails on it; ``--layout trl`` (above) is the layout for TRL."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    path = run_cli(tmp_path, source_rows(6), "blocks.parquet")
    back = list(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    assert all(len(row["input_ids"]) == 32 for row in back)
    padded = [row for row in back if sum(row["seq_lengths"]) < 32][:2]
    assert padded
    with pytest.raises((IndexError, RuntimeError)):
        DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(padded)


@pytest.mark.slow
def test_sft_trainer_trains_on_the_command_lines_trl_output(tmp_path: Path) -> None:
    from trl import SFTConfig, SFTTrainer

    path = run_cli(tmp_path, source_rows(7, count=24), "blocks.parquet", "--layout", "trl")
    back = datasets.load_dataset("parquet", data_files=str(path), split="train")
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, padding_free=True,
        max_length=None, learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
        dataloader_num_workers=0, seed=0,
    )  # fmt: skip
    trainer = SFTTrainer(model=tiny_llama(), args=args, train_dataset=back, processing_class=local_tokenizer(tmp_path))
    first = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in first and first["position_ids"].shape == first["input_ids"].shape
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(np.isfinite(losses))
