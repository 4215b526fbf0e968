"""``collate`` of blocks already packed (a ``PackedDataset`` of a command-line file, ``stream`` blocks, ``hf``
rows, ``pack``'s blocks): the blocks' own layout says whether a prompt is shared, so blocks packed with
``share_prompt=True`` get the attention mask (as ``collate_fixed`` gives it) and every completion's log-probability
through a real model equals its sequence run alone; blocks of the duplicated layout get no mask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import packing  # noqa: E402
import packing.torch as pt  # noqa: E402
from packing._cli import main  # noqa: E402
from tests.helpers.tiny_models import tiny_causal_lm  # noqa: E402
from tests.helpers.units import alone_logps, completions_of, random_units  # noqa: E402

TOLERANCE = 1e-6
LENGTH = 48
DOORS = ["command line", "stream", "hf", "iter_blocks", "to_arrow"]


def _rows() -> list[dict[str, Any]]:
    """Pairs and groups, all as groups (one schema, for ``datasets``): a pair's chosen and rejected in order."""
    return [{"prompt": row["prompt"], "completions": completions_of(row)} for row in random_units(3, count=8)]


def _blocks(door: str, share_prompt: bool, folder: Path) -> list[Any]:
    """Every block of ``_rows()`` packed at ``door``, as that door hands them to a ``DataLoader``."""
    rows = _rows()
    if door == "command line":
        source, output = folder / "units.jsonl", folder / "out.parquet"
        source.write_text("".join(json.dumps(row) + "\n" for row in rows))
        argv = ["pack", str(source), "-o", str(output), "--max-seq-length", str(LENGTH), "--no-shuffle", "--quiet"]
        assert main(argv + (["--share-prompt"] if share_prompt else [])) == 0
        dataset = pt.PackedDataset(output)
        return [dataset[index] for index in range(len(dataset))]
    if door == "stream":
        return list(packing.stream(rows, LENGTH, share_prompt=share_prompt, shuffle=False))
    if door == "hf":
        datasets = pytest.importorskip("datasets")
        source = datasets.Dataset.from_list(rows)
        packed = packing.hf.pack_dataset(source, LENGTH, share_prompt=share_prompt, shuffle=False)
        return [packed[index] for index in range(len(packed))]
    batch = packing.pack(rows, LENGTH, share_prompt=share_prompt)
    if door == "iter_blocks":
        return list(batch.iter_blocks())
    table = batch.to_arrow()
    return [{name: table.column(name)[index].as_py() for name in table.column_names} for index in range(len(table))]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("share_prompt", [False, True])
def test_collate_of_packed_blocks_keeps_every_completion_alone(door: str, share_prompt: bool, tmp_path: Path) -> None:
    import packing.hf  # noqa: F401  (the hf door)

    blocks = _blocks(door, share_prompt, tmp_path)
    assert len(blocks) > 1
    batch = pt.collate(blocks)
    assert ("attention_mask" in batch) == share_prompt
    assert ("attention_mask" in pt.collate_fixed(blocks)) == share_prompt  # one rule for both collates
    model = tiny_causal_lm("llama", "sdpa")
    with torch.no_grad():
        logits = model(**pt.model_inputs(batch, model)).logits
        if share_prompt:  # the mask collate gives is the one the model takes
            given = batch["attention_mask"].double()
            inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "use_cache": False}
            assert torch.equal(model(**inputs, attention_mask=given).logits, logits)
    packed = pt.completion_logps(logits, batch)
    reference = alone_logps(model, _rows())
    assert packed.shape == reference.shape
    assert float((packed - reference).abs().max()) < TOLERANCE


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_the_mask_of_shared_blocks_is_that_of_their_rows(dtype: torch.dtype) -> None:
    """A unit collated as a row with ``share_prompt=True`` and as a block packed so: one mask, of the
    ``mask_dtype`` asked."""
    rows = _rows()[:1]  # a pair
    assert len(rows[0]["completions"]) > 1
    block = next(iter(packing.stream(rows, LENGTH, share_prompt=True, shuffle=False)))
    from_rows = pt.collate(rows, share_prompt=True, mask_dtype=dtype)["attention_mask"]
    from_block = pt.collate([block], mask_dtype=dtype)["attention_mask"]
    assert from_block.dtype == dtype
    assert torch.equal(from_block, from_rows)


@pytest.mark.parametrize("option", [False, True])
def test_the_blocks_layout_decides_not_the_option(option: bool) -> None:
    """Blocks are laid out already: ``share_prompt`` given to ``collate`` changes nothing, in either collate."""
    for shared in (False, True):
        blocks = list(packing.stream(_rows()[:2], LENGTH, share_prompt=shared, shuffle=False))
        assert ("attention_mask" in pt.collate(blocks, share_prompt=option)) == shared
        assert ("attention_mask" in pt.collate_fixed(LENGTH, share_prompt=option)(blocks)) == shared


def test_flash_kwargs_of_shared_blocks_are_refused() -> None:
    block = next(iter(packing.stream(_rows()[:2], LENGTH, share_prompt=True, shuffle=False)))
    with pytest.raises(packing.errors.SettingError, match="return_flash_attn_kwargs"):
        pt.collate([block], return_flash_attn_kwargs=True)
