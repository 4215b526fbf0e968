"""A folder of chat shards through every door at once, with one recipe: the same documents and masks everywhere.

The folder holds a JSONL shard and a Parquet shard of ``{"messages": [...]}`` rows; the recipe names a small
BPE tokenizer with a chat template, built here (``text_fixtures``), ``strategy="bfd"`` and ``loss="last_turn"``.
Doors: ``pack(read_dataset(folder))``, ``stream`` and ``stream_dataset``, ``PackingSampler`` with ``collate``,
``hf.pack_dataset``, ``ray.pack_dataset`` (a local Ray, started once for the module) and the command line.
Every door gives the same documents (sample, token ids, labels: the loss mask the model sees); the doors that
lay out the whole dataset in plan order (``pack``, ``hf``, Ray, the command line) give the same blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import packing
import packing.core
import packing.hf
import packing.streaming
import packing.text
from packing import Recipe
from packing._cli import main
from tests.helpers.documents import Document, documents, sampled_documents
from tests.helpers.text_fixtures import CHATML, save_tokenizer

LENGTH = 48


def _chat(*turns: str) -> dict[str, Any]:
    """A chat of ``turns``: user and assistant in turn, after a system message when there is an odd number."""
    roles = (["system"] if len(turns) % 2 else []) + ["user", "assistant"] * len(turns)
    return {"messages": [{"role": r, "content": t} for r, t in zip(roles[: len(turns)], turns, strict=True)]}


CHATS: list[dict[str, Any]] = [
    _chat("Hello world", "how are you today?"),
    _chat("What is 2 + 2?", "It is 4.", "Thanks!", "The quick brown fox."),
    _chat("Be brief.", "Hello", "world"),
    _chat("naïve café", "Größe señor"),
    _chat("Packing puts many short samples", "into one block of tokens.", "user", "assistant"),
    _chat("Thanks!", "The quick brown fox jumps over the lazy dog. " * 4),  # longer than a block: truncated
    _chat("x", "y"),
]
"""Chats of one to four turns (the last one trained), one longer than ``LENGTH`` tokens."""
SHARDS = {"a.jsonl": CHATS[:4], "b.parquet": CHATS[4:]}
"""The folder's shards, read in name order: samples 0-3, then 4-6."""


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Recipe:
    """The one recipe: ``LENGTH`` tokens, best fit decreasing, loss on each chat's last turn, a local tokenizer."""
    pytest.importorskip("transformers")
    tokenizer = save_tokenizer(tmp_path_factory.mktemp("tokenizer"), CHATML)
    return Recipe(LENGTH, strategy="bfd", loss="last_turn", tokenizer=str(tokenizer))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of chat shards: JSONL and Parquet."""
    path = tmp_path_factory.mktemp("chats")
    (path / "a.jsonl").write_text("".join(json.dumps(row) + "\n" for row in SHARDS["a.jsonl"]), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(SHARDS["b.parquet"]), path / "b.parquet")
    return path


@pytest.fixture(scope="module")
def reference(recipe: Recipe, folder: Path) -> packing.PackedBatch:
    """``pack(read_dataset(folder))``: what every door is compared with."""
    return packing.pack(packing.read_dataset(folder, recipe=recipe), recipe=recipe)


def hf_rows(folder: Path) -> Any:
    """The folder's shards as one ``datasets.Dataset``, in the folder's order."""
    datasets = pytest.importorskip("datasets")
    shards = [
        datasets.Dataset.from_json(str(folder / "a.jsonl")),
        datasets.Dataset.from_parquet(str(folder / "b.parquet")),
    ]
    return datasets.concatenate_datasets(shards)


def blocks_of(rows: Iterable[Mapping[str, Any]]) -> list[tuple[list[int], list[int], list[int]]]:
    """Each block's ids, labels and sequence ids, in order."""
    return [tuple(np.asarray(row[k]).tolist() for k in ("input_ids", "labels", "sequence_ids")) for row in rows]  # type: ignore[misc]


def test_the_reference_packs_every_chat_with_its_last_turn_trained(
    recipe: Recipe, reference: packing.PackedBatch
) -> None:
    found, pads = documents(reference.iter_blocks())
    assert pads == {packing.text.prepare(recipe).pad_id}  # the tokenizer's own pad id
    assert [sample for sample, _, _ in found] == list(range(len(CHATS)))
    for _, ids, labels in found:
        trained = [label != packing.core.IGNORE_INDEX for label in labels]
        assert any(trained) and not all(trained)  # the last turn, never the whole chat
        assert len(ids) <= LENGTH
    assert max(len(ids) for _, ids, _ in found) == LENGTH  # the long chat, truncated


def test_stream_and_stream_dataset(recipe: Recipe, folder: Path, reference: packing.PackedBatch) -> None:
    want = documents(reference.iter_blocks())[0]
    rows = hf_rows(folder)
    assert documents(packing.stream(iter(rows), recipe=recipe, buffer_size=3))[0] == want
    streamed = packing.streaming.stream_dataset(rows.to_iterable_dataset(), recipe=recipe, shuffle=False)
    assert documents(streamed)[0] == want


def test_sampler_and_collate(recipe: Recipe, folder: Path, reference: packing.PackedBatch) -> None:
    dataset = packing.read_dataset(folder, recipe=recipe)
    assert sampled_documents(dataset.lengths, recipe, dataset) == documents(reference.iter_blocks())[0]


def test_hf_pack_dataset(recipe: Recipe, folder: Path, reference: packing.PackedBatch) -> None:
    packed = packing.hf.pack_dataset(hf_rows(folder), recipe=recipe, shuffle=False).to_list()
    assert blocks_of(packed) == blocks_of(reference.to_arrow(padding=False).to_pylist())  # real tokens only, as TRL


def test_the_command_line(recipe: Recipe, folder: Path, reference: packing.PackedBatch, tmp_path: Path) -> None:
    out = tmp_path / "blocks.parquet"
    flags = ["pack", str(folder), "--max-seq-length", str(LENGTH), "--strategy", "bfd", "--loss", "last_turn"]
    assert main([*flags, "--tokenizer", str(recipe.tokenizer), "-o", str(out), "-q", "--no-shuffle"]) == 0
    assert blocks_of(pq.read_table(out).to_pylist()) == blocks_of(reference.iter_blocks())


def contents(found: list[Document]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The documents' token ids and labels, without the sample each came from, sorted."""
    return sorted((ids, labels) for _, ids, labels in found)


def test_ray_pack_dataset(recipe: Recipe, folder: Path, reference: packing.PackedBatch, cluster: Any) -> None:
    """Ray reads each shard by its own reader; their union comes in an order of Ray's, so samples are compared by
    content (each once) and blocks by the documents they hold."""
    import packing.ray

    shards = cluster.data.read_json(str(folder / "a.jsonl")).union(cluster.data.read_parquet(str(folder / "b.parquet")))
    packed = packing.ray.pack_dataset(shards, recipe=recipe, shuffle=False).take_all()
    found, pads = documents(packed)
    assert sorted(sample for sample, _, _ in found) == list(range(len(CHATS)))
    assert contents(found) == contents(documents(reference.iter_blocks())[0]) and pads == {
        packing.text.prepare(recipe).pad_id
    }
    blocks = sorted(contents(documents([block])[0]) for block in packed)
    assert blocks == sorted(contents(documents([block])[0]) for block in reference.iter_blocks())


LABELLED = [{"input_ids": [1, 2], "labels": None}, {"input_ids": [4, 5, 6], "labels": [-100, 5, 9]}]
"""Rows whose labels differ from the ids where trained: packed blocks cannot hold them."""
REFUSAL = r"sample 1, 'labels', position 2: expected 6 \(the token: packed blocks train each token on itself"


def test_every_block_door_refuses_labels_other_than_the_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets = pytest.importorskip("datasets")
    columns = {name: [row[name] for row in LABELLED] for name in ("input_ids", "labels")}
    doors = {
        "stream": lambda: list(packing.stream(LABELLED, 4)),
        "stream_dataset": lambda: list(
            packing.streaming.stream_dataset(datasets.Dataset.from_dict(columns).to_iterable_dataset(), 4)
        ),
        "hf.pack_batch": lambda: packing.hf.pack_batch(columns, 4),
        "hf.pack_dataset": lambda: packing.hf.pack_dataset(datasets.Dataset.from_dict(columns), 4),
    }
    for run in doors.values():
        with pytest.raises(packing.SampleError, match="^" + REFUSAL):
            run()
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in LABELLED))
    assert main(["pack", str(path), "--max-seq-length", "4", "-o", str(tmp_path / "out.parquet"), "-q"]) != 0
    assert re.search(REFUSAL, capsys.readouterr().err)


def test_ray_refuses_labels_other_than_the_ids(cluster: Any) -> None:
    import packing.ray

    with pytest.raises(packing.SampleError, match="^" + REFUSAL):
        packing.ray.pack_dataset(cluster.data.from_items(LABELLED), 4).take_all()
