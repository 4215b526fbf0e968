"""The door matrix: for the same rows and recipe, every door gives ``pack``'s columns and blocks and the same
accounting (``PackingStats.accounting``: tokens and units in, kept, truncated, split, dropped, padding; kept +
lost = input), for every row form and overflow policy, shown where the door can show it (its ``stats``, its
``TokensLost`` warning, the command line's ``--json``). And pairs and groups at every door: the blocks carry the
unit columns of the one schema (``UNIT_GRID``), so the 4-D attention mask and ``completion_logps`` built from any
door's output are those of ``pack``'s blocks. Where a door owned elsewhere still differs, its cases are
``xfail(strict=True)`` naming the door and the field."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
import packing.hf
import packing.ray
import packing.streaming
import packing.torch as pt
from packing._cli import main
from packing.batches._schema import UNIT_GRID
from packing.core._pairs_groups import UNIT_COLUMNS
from packing.errors import SettingError, TokensLost
from tests.helpers.units import completions_of, random_units

datasets = pytest.importorskip("datasets")

LENGTH = 40
VOCAB = 96
PARTS = ("prompt", "chosen", "rejected", "completions")
Block = dict[str, np.ndarray]


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {name: [row.get(name) for row in rows] for name in PARTS}


def _jsonl(rows: list[dict[str, Any]], folder: Path) -> Path:
    path = folder / "units.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _real(block: dict[str, Any]) -> Block:
    """A block's real tokens (its documents), every column as a numpy array (``seq_lengths`` as it is)."""
    arrays = {name: np.asarray(value.numpy() if hasattr(value, "numpy") else value) for name, value in block.items()}
    used = int(arrays["seq_lengths"].sum())
    return {name: values if name == "seq_lengths" else values[:used] for name, values in arrays.items()}


def _table_blocks(table: Any) -> list[Block]:
    return [_real(row) for row in table.to_pylist()]


# ---------------------------------------------------------------- the doors: the blocks each gives


def _pack(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    batch = packing.pack(rows, LENGTH, share_prompt=share)
    return [_real({name: getattr(batch, name)[b] for name in ("input_ids", *UNIT_COLUMNS)} | {
        "seq_lengths": batch.seq_lengths(b)}) for b in range(batch.num_blocks)]  # fmt: skip


def _to_arrow(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    return _table_blocks(packing.pack(rows, LENGTH, share_prompt=share).to_arrow())


def _parquet(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    import pyarrow.parquet as pq

    path = folder / "blocks.parquet"
    pq.write_table(packing.pack(rows, LENGTH, share_prompt=share).to_arrow(), path)
    return _table_blocks(pq.read_table(path))


def _command_line(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    import pyarrow.parquet as pq

    output = folder / "cli.parquet"
    argv = ["pack", str(_jsonl(rows, folder)), "-o", str(output), "--max-seq-length", str(LENGTH), "--no-shuffle"]
    assert main(argv + (["--share-prompt"] if share else []) + ["--quiet"]) == 0
    return _table_blocks(pq.read_table(output))


def _dataset_items(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    """``PackedDataset`` items of the command line's file, each through ``collate`` (one padding-free row)."""
    _command_line(rows, share, folder)
    data = pt.PackedDataset(folder / "cli.parquet")
    out = []
    for index in range(len(data)):
        item = data[index]
        batch = pt.collate([item], share_prompt=share)
        if share:  # the mask collate gives is the one built from the item's own columns
            assert torch.equal(batch["attention_mask"], pt.attention_mask(_real(item)))
        out.append({name: batch[name][0].numpy() for name in ("input_ids", *UNIT_COLUMNS)} | {
            "seq_lengths": item["seq_lengths"].numpy()})  # fmt: skip
    return out


def _stream(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    blocks = packing.stream(rows, LENGTH, share_prompt=share, shuffle=False, buffer_size=len(rows) + 1)
    return [_real(block) for block in blocks]


def _stream_dataset(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    source = datasets.Dataset.from_dict(_columns(rows)).to_iterable_dataset()
    out = packing.streaming.stream_dataset(source, LENGTH, share_prompt=share, shuffle=False, buffer_size=len(rows) + 1)
    return [_real(row) for row in out]


def _hf_dataset(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    packed = packing.hf.pack_dataset(
        datasets.Dataset.from_dict(_columns(rows)), LENGTH, share_prompt=share, shuffle=False
    )
    return [_real(row) for row in packed]


def _hf_batch(rows: list[dict[str, Any]], share: bool, folder: Path) -> list[Block]:
    out = packing.hf.pack_batch(_columns(rows), LENGTH, share_prompt=share)
    return [_real(dict(zip(out, values, strict=True))) for values in zip(*out.values(), strict=True)]


DOORS: dict[str, Callable[[list[dict[str, Any]], bool, Path], list[Block]]] = {
    "to_arrow": _to_arrow,
    "parquet": _parquet,
    "command line": _command_line,
    "PackedDataset + collate": _dataset_items,
    "stream": _stream,
    "stream_dataset": _stream_dataset,
    "hf.pack_dataset": _hf_dataset,
    "hf.pack_batch": _hf_batch,
}


def _logits(tokens: np.ndarray) -> torch.Tensor:
    """Scores that depend on the tokens and their order (the same blocks give the same scores at every door)."""
    table = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ids = torch.as_tensor(tokens, dtype=torch.int64)
    return (table[ids] + torch.cumsum(table[ids], 0) / 10)[None]


@pytest.mark.parametrize("share", [False, True], ids=["duplicated", "shared"])
@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_gives_the_mask_and_logps_of_packs_blocks(door: str, share: bool, tmp_path: Path) -> None:
    rows = random_units(11, count=10)
    expected = _pack(rows, share, tmp_path)
    got = DOORS[door](rows, share, tmp_path)
    assert len(got) == len(expected)
    for index, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        for name in ("input_ids", *UNIT_COLUMNS):  # the same values: documents numbered in their block
            assert ours[name].tolist() == theirs[name].tolist(), (door, index, name)
        mask = pt.attention_mask(ours, torch.float64)
        assert torch.equal(mask, pt.attention_mask(theirs, torch.float64)), (door, index)
        logits = _logits(theirs["input_ids"])
        assert torch.equal(pt.completion_logps(logits, ours), pt.completion_logps(logits, theirs)), (door, index)


def test_the_mask_of_a_whole_table_is_the_batchs() -> None:
    """``to_arrow()`` (blocks of one length) gives the batch's mask whole; rows of real tokens only, one at a time."""
    batch = packing.pack(random_units(3, count=8), LENGTH, share_prompt=True)
    assert torch.equal(pt.attention_mask(batch.to_arrow()), pt.attention_mask(batch))
    with pytest.raises(SettingError, match=r"^batch: expected a table of blocks of one length"):
        pt.attention_mask(batch.to_arrow(padding=False))


def test_the_schema_writes_the_unit_columns_in_order() -> None:
    table = packing.pack(random_units(2), LENGTH, share_prompt=True).to_arrow()
    assert tuple(column.name for column in UNIT_GRID) == UNIT_COLUMNS == tuple(table.column_names[-len(UNIT_COLUMNS) :])
    assert packing.audit(table).findings == ()


def test_a_file_without_the_new_columns_is_still_read(tmp_path: Path) -> None:
    """A file of blocks of units written before ``document_ids`` and ``unit_kinds``: read, collated (documents from
    ``seq_lengths``), audited; ``preference_logps`` refuses it for want of the kinds, ``completion_logps`` reads it."""
    import pyarrow.parquet as pq

    rows = [{"prompt": [5, 6], "chosen": [7], "rejected": [8, 9]}]
    table = packing.pack(rows, 16, share_prompt=True).to_arrow().drop_columns(["document_ids", "unit_kinds"])
    pq.write_table(table, tmp_path / "old.parquet")
    item = pt.PackedDataset(tmp_path / "old.parquet")[0]
    assert "document_ids" not in item and "completion_ids" in item
    batch = pt.collate([item], share_prompt=True)
    assert torch.equal(batch["attention_mask"], pt.collate(rows, share_prompt=True)["attention_mask"])
    assert packing.audit(tmp_path / "old.parquet").findings == ()
    logits = torch.zeros(1, 5, 16)
    assert pt.completion_logps(logits, batch).shape == (2,)
    with pytest.raises(SettingError, match=r"a unit of unknown kind"):
        pt.preference_logps(logits, batch)


@pytest.mark.parametrize("door", ["pack", "collate", "PackedDataset + collate", "stream"])
def test_a_group_of_two_is_never_read_as_a_pair(door: str, tmp_path: Path) -> None:
    rows = [{"prompt": [5, 6], "completions": [[7], [8, 9]]}, {"prompt": [5], "chosen": [7], "rejected": [8]}]
    if door == "pack":
        batch: Any = packing.pack(rows, 16)
        assert sorted(set(batch.unit_kinds[0].tolist())) == [-1, 1, 2]  # padding, the pair, the group
    elif door == "collate":
        batch = pt.collate(rows)
    elif door == "stream":
        batch = _real(next(iter(packing.stream(rows, 16, shuffle=False))))
    else:
        batch = pt.collate([pt.PackedDataset(packing.pack(rows, 16))[0]])
    logits = torch.zeros(
        1, np.asarray(batch["input_ids"] if isinstance(batch, dict) else batch.input_ids).shape[-1], 16
    )
    with pytest.raises(
        SettingError,
        match=r"^batch: expected preference pairs only \(a group.*completion_logps\), got <a completion group \(unit 0\)>$",
    ):
        pt.preference_logps(logits, batch)
    assert pt.completion_logps(logits, batch).shape == (4,)
    pair = pt.collate(rows[1:])
    assert len(pt.preference_logps(torch.zeros(1, pair["input_ids"].shape[1], 16), pair)[0]) == 1


# ---------------------------------------------------------------- what each door cut, counted


def _laid_tokens(row: dict[str, Any], share: bool) -> int:
    """A unit's tokens in a layout, counted from the row itself: ``k·P + Σc``, or ``P + Σc``."""
    answers = completions_of(row)
    prompt = len(row["prompt"])
    return (prompt if share else prompt * len(answers)) + sum(len(a) for a in answers)


def _warned(call: Callable[[], Any]) -> tuple[Any, packing.PackingStats | None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    lost = [w.message for w in caught if isinstance(w.message, TokensLost)]
    assert len(lost) <= 1
    return result, (lost[0].stats if lost else None)  # type: ignore[return-value]


def _kept(blocks: list[Block]) -> tuple[int, int]:
    """Units and tokens in the blocks (units counted by their ids, tokens by their real slots)."""
    units = {int(u) for block in blocks for u in block["unit_ids"].tolist() if u >= 0}
    return len(units), sum(int((block["unit_ids"] >= 0).sum()) for block in blocks)


def _door_counts(
    door: str, rows: list[dict[str, Any]], share: bool, overflow: str, length: int
) -> tuple[int, int, Any]:
    """``(units kept, tokens kept, stats)`` of a door: its blocks and the statistics it gives (or warns with)."""
    options = {"share_prompt": share, "overflow": overflow}
    if door == "pack":
        batch = packing.pack(rows, length, **options)
        return (*_kept([_real({"unit_ids": batch.unit_ids[b], "seq_lengths": batch.seq_lengths(b)})
                        for b in range(batch.num_blocks)]), batch.stats)  # fmt: skip
    if door == "stream":
        stream = packing.stream(rows, length, buffer_size=5, **options)
        return (*_kept([_real(block) for block in stream]), stream.stats)
    if door == "hf.pack_dataset":
        source = datasets.Dataset.from_dict(_columns(rows))
        packed, stats = _warned(lambda: packing.hf.pack_dataset(source, length, **options))
        return (*_kept([_real(row) for row in packed]), stats)
    if door == "hf.pack_batch":
        out, stats = _warned(lambda: packing.hf.pack_batch(_columns(rows), length, **options))
        return (*_kept([_real(dict(zip(out, v, strict=True))) for v in zip(*out.values(), strict=True)]), stats)
    if door == "stream_dataset":
        source = datasets.Dataset.from_dict(_columns(rows)).to_iterable_dataset()
        out, stats = _warned(lambda: list(packing.streaming.stream_dataset(source, length, buffer_size=5, **options)))
        return (*_kept([_real(row) for row in out]), stats)
    if door == "collate":  # a batch of at most max_seq_length tokens: every unit its own, the counts added
        units = tokens = 0
        total: Any = None
        for row in rows:
            batch, stats = _warned(lambda row=row: pt.collate([row], length, **options))
            units += int(bool((batch["unit_ids"] >= 0).any()))
            tokens += int((batch["unit_ids"] >= 0).sum())
            if stats is None:  # nothing lost: the unit's own counts are the kept ones
                one = packing.read_rows([row])
                stats = pt.PackingSampler(one, length, shuffle=False, **options).stats
            total = stats if total is None else total.plus(stats)
        return units, tokens, total
    assert door == "PackingSampler"
    sampler = pt.PackingSampler(packing.read_rows(rows), length, shuffle=False, **options)
    kept = [index for step in sampler for index in step]
    return len(kept), int(sampler.lengths[kept].sum()), sampler.stats


COUNTING = ["pack", "stream", "hf.pack_dataset", "hf.pack_batch", "stream_dataset", "collate", "PackingSampler"]


@pytest.mark.parametrize("door", COUNTING)
def test_every_door_counts_a_pair_whose_prompt_is_over_the_length(door: str) -> None:
    """The attack: a pair whose prompt alone is over the length is left out, and the door says so."""
    rows = [{"prompt": [3] * 20, "chosen": [4], "rejected": [5]}, {"prompt": [3], "chosen": [4], "rejected": [5, 6]}]
    units, tokens, stats = _door_counts(door, rows, False, "truncate", 12)
    assert stats is not None and stats.units is not None, door
    assert (units, stats.units.units_dropped, stats.units.pairs) == (1, 1, 2)
    assert (tokens, stats.tokens_dropped, stats.input_tokens) == (5, 42, 47)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**16),
    count=st.integers(1, 9),
    length=st.integers(4, 30),
    share=st.booleans(),
    overflow=st.sampled_from(["truncate", "drop"]),
    door=st.sampled_from(COUNTING),
)
def test_kept_and_lost_add_up_to_the_input_at_every_door(
    seed: int, count: int, length: int, share: bool, overflow: str, door: str
) -> None:
    rows = random_units(seed, count=count, prompt=(1, 12), answer=(1, 12))
    try:
        units, tokens, stats = _door_counts(door, rows, share, overflow, length)
    except SettingError as error:  # a sampler refuses an epoch that trains nothing: every unit over the length
        assert door == "PackingSampler" and "at least one sample with tokens" in str(error)
        dropped = packing.pack(rows, length, share_prompt=share, overflow=overflow).stats.units
        assert dropped is not None and dropped.units_dropped == len(rows)
        return
    laid = sum(_laid_tokens(row, share) for row in rows)
    if stats is None:  # nothing was lost: no warning, and every unit and token is in the blocks
        assert (units, tokens) == (len(rows), laid), door
        return
    assert stats.units is not None and stats.units.pairs + stats.units.groups == len(rows)
    assert units + stats.units.units_dropped == len(rows), door
    assert stats.input_tokens == laid, door
    assert tokens + stats.tokens_lost == laid, door
    assert stats.units.units_truncated <= stats.sequences_truncated


@settings(max_examples=25, deadline=None)
@given(share=st.booleans(), cell=st.integers(0, 10**6), shift=st.integers(1, 5))
def test_the_auditor_finds_a_tampered_document_id(share: bool, cell: int, shift: int) -> None:
    """Any cell whose ``document_ids`` is not its document's number in its block (a mask built from it would join
    or part tokens) is reported where it is, as boundaries that disagree."""
    import pyarrow as pa

    table = packing.pack(random_units(4, count=8), LENGTH, share_prompt=share).to_arrow()
    columns = table.to_pydict()
    block, column = divmod(cell % (table.num_rows * LENGTH), LENGTH)
    columns["document_ids"][block][column] += shift
    findings = {f.kind: f for f in packing.audit(pa.table(columns, schema=table.schema)).findings}
    assert findings["inconsistent_boundaries"].examples == ((block, column),)
    assert packing.audit(table).findings == ()


# ---------------------------------------------------------------- every row form, every policy, every door

CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a reply longer than a block"}]
LONG = 12
"""The matrix's ``max_seq_length``: every form has rows longer than it."""

FORMS: dict[str, tuple[list[Any], dict[str, Any]]] = {
    "token lists": ([[1, 2, 3], [4] * 20, [5] * 7, []], {}),
    "input_ids": ([{"input_ids": [1, 2, 3]}, {"input_ids": [4] * 20}, {"input_ids": [5] * 7}], {}),
    "labels": ([{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"input_ids": [4] * 20, "labels": [4] * 20}], {}),
    "loss_mask": ([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}, {"input_ids": [4] * 20, "loss_mask": [1] * 20}], {}),
    "prompt/completion": ([{"prompt": [1, 2], "completion": [3, 4]}, {"prompt": [4] * 10, "completion": [5] * 10}], {}),
    "text": ([{"text": "hello"}, {"text": "a much longer text than a block"}], {"tokenizer": "bytes"}),
    "chat": ([{"messages": CHAT}, {"messages": [*CHAT[:1], {"role": "assistant", "content": "ok"}]}], {"tokenizer": "bytes"}),
    "pairs": ([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}, {"prompt": [1] * 5, "chosen": [3] * 9, "rejected": [4] * 3},
               {"prompt": [2] * 14, "chosen": [3], "rejected": [4]}], {}),
    "groups": ([{"prompt": [1, 2], "completions": [[3], [4, 5], [6]]}, {"prompt": [7] * 4, "completions": [[8] * 9, [9]]}], {}),
    "pairs, shared prompt": ([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}, {"prompt": [1] * 5, "chosen": [3] * 9, "rejected": [4] * 3},
                              {"prompt": [2] * 14, "chosen": [3], "rejected": [4]}], {"share_prompt": True}),
    "groups, shared prompt": ([{"prompt": [1, 2], "completions": [[3], [4, 5], [6]]}, {"prompt": [7] * 4, "completions": [[8] * 9, [9], [8] * 3]}],
                              {"share_prompt": True}),
    "plain and units": ([{"input_ids": [1] * 15}, {"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]},
                         {"input_ids": [6, 7]}, {"prompt": [2] * 3, "completions": [[5] * 12]}], {}),
}  # fmt: skip
POLICIES = ("truncate", "split", "drop")
UNIT_FORMS = ("pairs", "groups", "pairs, shared prompt", "groups, shared prompt", "plain and units")


def _fields(rows: list[Any]) -> list[str]:
    """The row fields of ``rows``, in first-seen order (a token list is ``input_ids``)."""
    names = {name: None for row in rows for name in (row if isinstance(row, dict) else ["input_ids"])}
    return list(names)


def _as_records(rows: list[Any]) -> list[dict[str, Any]]:
    """``rows`` as dicts (a token list is ``{"input_ids": ...}``)."""
    return [row if isinstance(row, dict) else {"input_ids": row} for row in rows]


def _as_columns(rows: list[Any]) -> dict[str, list[Any]]:
    """``rows`` as a dict of columns (a missing field is None, as Arrow fills it)."""
    return {name: [row.get(name) for row in _as_records(rows)] for name in _fields(rows)}


def _dataset(rows: list[Any]) -> Any:
    """``rows`` as a ``datasets.Dataset`` of every row's fields, the missing ones null (as Arrow fills them;
    ``Dataset.from_list`` keeps only the first row's keys, so it would drop the fields of the other forms)."""
    return datasets.Dataset.from_dict(_as_columns(rows))


def _block_dicts(table: Any) -> list[dict[str, list[Any]]]:
    """Rows of blocks (a table, a dataset, a list of dicts) as their real tokens, column by column."""
    rows = table.to_pylist() if hasattr(table, "to_pylist") else list(table)
    return [{name: list(np.asarray(value).tolist())[: int(np.sum(row["seq_lengths"]))] if name != "seq_lengths"
             else list(np.asarray(value).tolist()) for name, value in row.items()} for row in rows]  # fmt: skip


@dataclass
class Seen:
    """What a door gave: its column names (a collate's keys), its blocks (None where it gives none: the collates,
    a stream in other buffers), its accounting (its statistics, those it warned with, or the command line's JSON;
    None when it warned of nothing), whether it shows them when nothing was lost (``stats_always``), and the real
    tokens it kept where it gives no blocks."""

    columns: Any
    blocks: Any
    stats: Any
    stats_always: bool
    kept: int | None = None


def _matrix_pack(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    batch = packing.pack(rows, LONG, **options)
    table = batch.to_arrow(padding=False)
    return Seen(table.column_names, _block_dicts(table), batch.stats, True)


def _matrix_stream(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    stream = packing.stream(rows, LONG, shuffle=False, buffer_size=len(rows) + 1, **options)
    blocks = list(stream)
    return Seen(list(blocks[0]) if blocks else None, _block_dicts(blocks), stream.stats, True)


def _matrix_stream_buffers(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``stream`` in buffers of two rows: other blocks (each buffer planned alone), the same counts."""
    stream = packing.stream(rows, LONG, shuffle=False, buffer_size=2, **options)
    blocks = list(stream)
    return Seen(list(blocks[0]) if blocks else None, None, stream.stats, True)


def _matrix_stream_dataset(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    source = _dataset(rows).to_iterable_dataset()
    out, stats = _warned(lambda: list(packing.streaming.stream_dataset(
        source, LONG, shuffle=False, buffer_size=len(rows) + 1, **options)))  # fmt: skip
    return Seen(list(out[0]) if out else None, _block_dicts(out), stats, False)


def _matrix_pack_batch(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    out, stats = _warned(lambda: packing.hf.pack_batch(_as_columns(rows), LONG, **options))
    blocks = [dict(zip(out, values, strict=True)) for values in zip(*out.values(), strict=True)]
    return Seen(list(out), _block_dicts(blocks), stats, False)


def _matrix_map(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``hf.pack_batch`` under ``Dataset.map`` (one batch: the blocks of ``pack``), Arrow batches as TRL maps."""
    source = _dataset(rows)
    out, stats = _warned(lambda: source.with_format("arrow").map(
        packing.hf.pack_batch, batched=True, batch_size=len(rows), remove_columns=source.column_names,
        fn_kwargs={"max_seq_length": LONG, **options}).with_format(None))  # fmt: skip
    return Seen(out.column_names, _block_dicts(out), stats, False)


def _matrix_pack_dataset(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    source = _dataset(rows)
    out, stats = _warned(lambda: packing.hf.pack_dataset(source, LONG, shuffle=False, **options))
    return Seen(out.column_names, _block_dicts(out), stats, False)


def _matrix_pack_dataset_cached(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``hf.pack_dataset`` of a saved dataset, packed, then found in its one cache file: warned of again."""
    saved = folder / "source"
    _dataset(rows).save_to_disk(saved)
    call = lambda: packing.hf.pack_dataset(datasets.load_from_disk(saved), LONG, shuffle=False, **options)  # noqa: E731
    first, before = _warned(call)
    out, stats = _warned(call)
    assert len(list(saved.glob("packing-*.arrow"))) == 1 and out.to_dict() == first.to_dict()
    assert (stats is None) == (before is None) and (stats is None or stats.accounting() == before.accounting())
    return Seen(out.column_names, _block_dicts(out), stats, False)


def _matrix_cli(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``packing pack`` on a JSON lines file to Parquet, ``--json``: the statistics it printed."""
    import contextlib
    import io

    import pyarrow.parquet as pq

    output = folder / "matrix.parquet"
    source = folder / "matrix.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in _as_records(rows)))
    argv = ["pack", str(source), "-o", str(output), "--max-seq-length", str(LONG), "--no-shuffle", "--json"]
    argv += ["--overflow", options["overflow"]] + (
        ["--tokenizer", options["tokenizer"]] if "tokenizer" in options else []
    )
    argv += ["--share-prompt"] if options.get("share_prompt") else []
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        code = main(argv)
    if code:  # refused: the one line it said, as the error the library raises
        raise _Refused(stderr.getvalue().removeprefix("packing: error: "))
    printed = json.loads(stdout.getvalue())
    _loss_line(printed, stderr.getvalue())
    table = pq.read_table(output)
    return Seen(table.column_names, _block_dicts(table), printed, True)


def _loss_line(printed: dict[str, Any], stderr: str) -> None:
    """The command line says on stderr what it lost, in the words of ``loss_text``, exactly when it lost tokens."""
    lost = [line for line in stderr.splitlines() if " lost: " in line]
    assert len(lost) == (1 if printed["tokens_lost"] else 0), stderr
    assert all(line.startswith("packing: warning: ") and "--max-seq-length" in line for line in lost), lost


class _Refused(Exception):
    """The command line's refusal (exit 2), its message without the program's prefix."""


def _matrix_collate(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``collate``, a row at a time (a batch holds at most ``max_seq_length`` tokens): the warnings added."""
    kept, total, names = 0, None, set()
    for row in rows:
        batch, stats = _warned(lambda row=row: pt.collate([row], LONG, **options))
        names |= set(batch)
        width = int((batch["unit_ids"] >= 0).sum()) if "unit_ids" in batch else batch["input_ids"].shape[1]
        if stats is not None:  # what it kept is what it said it kept (a row left out is one padding token)
            assert stats.packed_tokens == (0 if stats.packed_tokens == 0 else width)
            width = stats.packed_tokens
            total = stats if total is None else total.plus(stats)
        kept += width if any(_as_records([row])[0].values()) else 0
    return Seen(sorted(names), None, total, False, kept)


def _matrix_collate_fixed(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``collate_fixed`` of every row at once: its warning, and its real tokens (in a unit, or not the pad id)."""
    batch, stats = _warned(lambda: pt.collate_fixed(LONG, **options)(rows))
    pad = packing.text.prepare(packing.Recipe(LONG, **options)).pad_id
    real = batch["unit_ids"] >= 0 if "unit_ids" in batch else batch["input_ids"] != pad
    return Seen(sorted(batch), None, stats, False, int(real.sum()))


def _matrix_sampler(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``PackingSampler`` over the rows (read once): its statistics, and its steps (rows, or the pieces of
    ``sampler.pieces`` under ``split``) collated by its own collate, which says nothing more."""
    reading = {"tokenizer": options["tokenizer"]} if "tokenizer" in options else {}
    sampler = pt.PackingSampler(packing.read_rows(rows, **reading), LONG, shuffle=False, **options)
    items, kept = sampler.pieces(rows), 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", TokensLost)
        for step in sampler:
            batch = sampler.collate([items[index] for index in step])
            real = batch["unit_ids"] >= 0 if "unit_ids" in batch else batch["labels"] > -200
            kept += int(real.sum()) if len(step) else 0
    return Seen(None, None, sampler.stats, True, kept)


def _matrix_ray(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``ray.pack_dataset`` of the rows in two blocks (every field in every row, None where a row lacks it)."""
    import ray.data

    columns = _as_columns(rows)
    items = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    source = ray.data.from_items(items, override_num_blocks=2)
    out, stats = _warned(lambda: packing.ray.pack_dataset(source, LONG, shuffle=False, **options).take_all())
    return Seen(list(out[0]) if out else None, _block_dicts(out), stats, False)


def _matrix_packed_dataset(rows: list[Any], options: dict[str, Any], folder: Path) -> Seen:
    """``PackedDataset`` of the command line's Parquet file: its items, the blocks' real tokens column by column."""
    _matrix_cli(rows, options, folder)
    data = pt.PackedDataset(folder / "matrix.parquet")
    items = [{name: value.numpy() for name, value in data[index].items()} for index in range(len(data))]
    return Seen(list(items[0]) if items else None, _block_dicts(items), None, False)


MATRIX_DOORS: dict[str, Callable[[list[Any], dict[str, Any], Path], Seen]] = {
    "pack": _matrix_pack,
    "stream": _matrix_stream,
    "stream, buffers of 2": _matrix_stream_buffers,
    "stream_dataset": _matrix_stream_dataset,
    "hf.pack_batch": _matrix_pack_batch,
    "hf.pack_batch under Dataset.map": _matrix_map,
    "hf.pack_dataset": _matrix_pack_dataset,
    "hf.pack_dataset cached": _matrix_pack_dataset_cached,
    "command line": _matrix_cli,
    "collate": _matrix_collate,
    "collate_fixed": _matrix_collate_fixed,
    "PackingSampler": _matrix_sampler,
    "PackedDataset": _matrix_packed_dataset,
}
RAY_DOOR = {"ray.pack_dataset": _matrix_ray}
"""Ray's door, apart: its tests share one slow Ray session (``cluster``)."""

MATRIX_XFAILS: dict[tuple[str, str, str], str] = {}
"""(door, form, policy) where a door owned elsewhere still differs: the door and the field."""


LOSS_FIELDS = ("tokens_truncated", "tokens_dropped", "sequences_truncated", "sequences_dropped", "units_truncated",
               "completions_truncated", "units_dropped")  # fmt: skip
"""What ``collate`` (a row at a time, each a batch of its own) can count alike: what overflow cut or left out."""


def _shown(door: str, counts: dict[str, int]) -> dict[str, int]:
    """The accounting a door can show: every count at the doors that plan as ``pack`` does; without the padding
    at ``collate_fixed`` (its own next-fit rows); what was lost at ``collate`` (a row at a time)."""
    if door == "collate":
        return {name: value for name, value in counts.items() if name in LOSS_FIELDS}
    if door in ("collate_fixed", "stream, buffers of 2"):
        return {name: value for name, value in counts.items() if name != "padding_tokens"}
    return counts


REFUSED = {
    ("collate", "split"): r"^rows: expected samples of at most 12 tokens with overflow='split' \(read the dataset",
}
"""Where a door refuses a policy on purpose: ``collate`` never splits (a sampler's pieces come split)."""
SILENT = {"PackedDataset"}
"""Doors that read blocks packed already: they have no accounting to show."""


def _cases(
    doors: Iterable[str] = MATRIX_DOORS, xfails: Mapping[tuple[str, str, str], str] = MATRIX_XFAILS
) -> list[Any]:
    """Every (door, form, policy), those that still differ marked xfail (strict) with the door and the field."""
    return [
        pytest.param(door, form, policy, marks=[pytest.mark.xfail(strict=True, reason=xfails[door, form, policy])]
                     if (door, form, policy) in xfails else [])
        for door in doors for form in FORMS for policy in POLICIES
    ]  # fmt: skip


@pytest.mark.parametrize(("door", "form", "policy"), _cases())
def test_every_door_gives_packs_columns_and_accounting(door: str, form: str, policy: str, tmp_path: Path) -> None:
    _check_matrix(door, form, policy, tmp_path)


@pytest.mark.parametrize(("door", "form", "policy"), _cases(RAY_DOOR))
def test_ray_gives_packs_columns_and_accounting(
    cluster: Any, door: str, form: str, policy: str, tmp_path: Path
) -> None:
    _check_matrix(door, form, policy, tmp_path)


def _check_matrix(door: str, form: str, policy: str, tmp_path: Path) -> None:
    rows, reading = FORMS[form]
    _check_rows(door, rows, {**reading, "overflow": policy}, tmp_path)


def _check_rows(
    door: str, rows: list[Any], options: dict[str, Any], tmp_path: Path, also: tuple[str, ...] = ()
) -> None:
    """For the same rows and recipe, every door gives ``pack``'s columns (the unit columns too) and blocks, and
    the same accounting (kept + truncated + dropped = in), shown where the door can show it: its statistics, or
    the :class:`~packing.errors.TokensLost` it warns with when something was lost (and no warning otherwise)."""
    policy = options["overflow"]
    if (
        any(isinstance(row, dict) and ("chosen" in row or "completions" in row) for row in rows) and policy == "split"
    ):  # a unit is never cut across blocks: every door refuses alike
        refusal = r"^(--)?overflow: expected another value with preference pairs"
        if door == "collate":  # a row at a time: a plain row among them is refused as any over-long plain row
            refusal += "|" + REFUSED["collate", "split"]
        with pytest.raises((SettingError, _Refused), match=refusal):
            (MATRIX_DOORS | RAY_DOOR)[door](rows, options, tmp_path)
        return
    expected = packing.pack(rows, LONG, **options).stats
    counts = expected.accounting()
    assert counts["packed_tokens"] + counts["tokens_truncated"] + counts["tokens_dropped"] == counts["input_tokens"]
    if expected.units is not None:
        assert counts["units_kept"] + counts["units_dropped"] == counts["pairs"] + counts["groups"]
    if (door, policy) in REFUSED and expected.sequences_truncated + expected.sequences_split > 0:
        with pytest.raises(SettingError, match=REFUSED[door, policy]):
            (MATRIX_DOORS | RAY_DOOR)[door](rows, options, tmp_path)
        return
    if door == "PackingSampler" and expected.packed_tokens == 0:  # an epoch that trains nothing is refused
        with pytest.raises(SettingError, match=r"expected at least one sample with tokens"):
            (MATRIX_DOORS | RAY_DOOR)[door](rows, options, tmp_path)
        return
    seen = (MATRIX_DOORS | RAY_DOOR)[door](rows, options, tmp_path)
    want = packing.pack(rows, LONG, **options).to_arrow(padding=False)
    if door in ("collate", "collate_fixed"):  # the collator's keys: the unit columns with units, as pack's
        assert (set(UNIT_COLUMNS) <= set(seen.columns)) == (set(UNIT_COLUMNS) <= set(want.column_names)), door
    elif seen.columns is not None:  # the schema's columns, in its order
        assert list(seen.columns) == want.column_names, door
    if seen.blocks is not None:
        assert seen.blocks == _block_dicts(want), door
    if door in SILENT:
        return
    lost = expected.tokens_lost > 0 or (expected.units is not None and expected.units.units_dropped > 0)
    if seen.stats is None:
        assert not lost and not seen.stats_always, (door, "said nothing of what it lost")
        return
    got = seen.stats if isinstance(seen.stats, dict) else seen.stats.summary()
    want_counts = _shown(door, counts) | {name: getattr(expected, name) for name in also}
    differ = {name: (got.get(name), value) for name, value in want_counts.items() if got.get(name) != value}
    assert differ == {}, (door, "(door's, pack's)", differ)
    if seen.kept is not None:
        assert seen.kept == counts["packed_tokens"], door


RANDOM_FORMS = ("list", "input_ids", "labels", "loss_mask", "prompt/completion", "pair", "group")


def _random_row(draw: Any, form: str | None = None) -> Any:
    """A row of ``form`` (default: drawn at random), of up to twice the matrix's length (ids from 1, as above)."""
    ids = lambda low=0: draw(st.lists(st.integers(1, 90), min_size=low, max_size=2 * LONG))  # noqa: E731
    form = form or draw(st.sampled_from(RANDOM_FORMS))
    if form == "list":
        return ids()
    tokens = ids()
    if form == "input_ids":
        return {"input_ids": tokens}
    if form == "labels":
        return {"input_ids": tokens, "labels": [t if draw(st.booleans()) else -100 for t in tokens]}
    if form == "loss_mask":
        return {"input_ids": tokens, "loss_mask": [int(draw(st.booleans())) for _ in tokens]}
    if form == "prompt/completion":
        return {"prompt": tokens, "completion": ids()}
    if form == "pair":
        return {"prompt": ids(1), "chosen": ids(1), "rejected": ids(1)}
    return {"prompt": ids(1), "completions": draw(st.lists(st.lists(st.integers(1, 90), min_size=1, max_size=LONG),
                                                           min_size=1, max_size=3))}  # fmt: skip


MIX_DOORS = ["stream", "hf.pack_batch", "collate", "collate_fixed", "PackingSampler", "command line"]
"""The doors the random mixes attack (those that take rows of several forms in one list or dict of columns)."""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), door=st.sampled_from(MIX_DOORS), policy=st.sampled_from(POLICIES))
def test_every_door_gives_packs_accounting_for_a_random_mix(data: Any, door: str, policy: str) -> None:
    """Rows of every form in one list, some longer than the length: the door gives ``pack``'s columns, blocks
    and accounting."""
    import tempfile

    count = data.draw(st.integers(1, 6))
    rows = [_random_row(data.draw) for _ in range(count)]
    with tempfile.TemporaryDirectory() as folder:
        _check_rows(door, rows, {"overflow": policy}, Path(folder))


DATASET_DOORS = ["stream_dataset", "hf.pack_batch under Dataset.map", "hf.pack_dataset"]
"""The doors of ``datasets``: random rows of one form each time."""


@settings(max_examples=20, deadline=None)
@given(
    data=st.data(),
    door=st.sampled_from(DATASET_DOORS),
    form=st.sampled_from(RANDOM_FORMS[1:]),  # a dataset's rows are dicts
    policy=st.sampled_from(POLICIES),
)
def test_the_datasets_doors_give_packs_accounting_for_random_rows(data: Any, door: str, form: str, policy: str) -> None:
    import tempfile

    rows = [_random_row(data.draw, form) for _ in range(data.draw(st.integers(1, 5)))]
    with tempfile.TemporaryDirectory() as folder:
        _check_rows(door, rows, {"overflow": policy}, Path(folder))


TRAINED = ("trainable_tokens", "target_tokens", "samples_without_trainable_tokens")
"""The loss-mask counts of the statistics (beside the accounting)."""


@pytest.mark.parametrize(
    ("door", "form", "policy"),
    _cases([door for door in MATRIX_DOORS if door != "collate"], MATRIX_XFAILS),  # collate counts a row at a time
)
def test_every_door_counts_packs_trained_tokens(door: str, form: str, policy: str, tmp_path: Path) -> None:
    """Where a door shows statistics, their loss-mask counts are ``pack``'s (the masks read, not every token)."""
    rows, reading = FORMS[form]
    _check_rows(door, rows, {**reading, "overflow": policy}, tmp_path, also=TRAINED)


@pytest.mark.parametrize("policy", ["truncate", "drop"])
@pytest.mark.parametrize("form", [form for form in FORMS if form not in UNIT_FORMS])
def test_collate_warns_with_packs_trained_tokens_row_by_row(form: str, policy: str) -> None:
    """``collate`` of one row (a batch of its own): the loss-mask counts it warns with are ``pack``'s of the row."""
    rows, reading = FORMS[form]
    options = {**reading, "overflow": policy}
    warned = 0
    for row in rows:
        _, stats = _warned(lambda row=row: pt.collate([row], LONG, **options))
        if stats is not None:
            expected = packing.pack([row], LONG, **options).stats
            assert [getattr(stats, name) for name in TRAINED] == [getattr(expected, name) for name in TRAINED], row
            warned += 1
    assert warned > 0  # every form has a row longer than the length


def test_a_samplers_collate_warns_of_nothing() -> None:
    """The sampler counts what it cut in its stats; its collate (and its loader's) says nothing more."""
    rows = [[1 + (i + j) % 50 for j in range(n)] for i, n in enumerate([3, 20, 5, 9, 0, 14])]
    sampler = pt.PackingSampler([len(row) for row in rows], 8, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TokensLost)
        batches = [sampler.collate([rows[i] for i in step]) for step in sampler]
    assert sampler.stats.tokens_truncated > 0 and len(batches) == len(sampler)
    _, stats = _warned(lambda: pt.collate([rows[1]], 8))  # the same row, collated alone: warned of
    assert stats is not None and stats.tokens_truncated == 12
