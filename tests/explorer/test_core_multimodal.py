"""The Images tab's example: documents shaped like VLM SFT rows, packed whole, never half an image, every block's
positions the library's (``packing.vision`` for each document alone, and ``packing.torch.collate`` with
``vision=`` for the block)."""

from __future__ import annotations

import numpy as np
import pytest

import packing
from explorer.core import multimodal
from packing.vision import row_positions, token_types

ROWS = multimodal.example_documents()


def test_example_documents_are_vlm_rows_with_zero_to_three_images_of_merge_size_grids() -> None:
    counts = [len(row["image_grid_thw"]) for row in ROWS]
    assert set(counts) <= {0, 1, 2, 3} and 0 in counts and sum(counts) > 5
    for row in ROWS:
        ids = np.asarray(row["input_ids"])
        types = token_types(ids, multimodal.CONFIG)
        assert types[0] == 0 and not (types == 2).any()
        for grid in row["image_grid_thw"]:
            assert grid[0] == 1 and grid[1] % 2 == 0 and grid[2] % 2 == 0
        expected = sum(multimodal.CONFIG.tokens_per_image(grid) for grid in row["image_grid_thw"])
        assert int((types == 1).sum()) == expected
        assert int((ids == multimodal.CONFIG.vision_start_token_id).sum()) == len(row["image_grid_thw"])
        row_positions(row, multimodal.CONFIG)  # the library takes every row as it is
    assert multimodal.example_documents() == ROWS  # the same every time


@pytest.mark.parametrize("size", [16, 24, 32, 64, 128, 256])
def test_every_document_is_whole_in_one_block_with_its_own_positions(size: int) -> None:
    packed = multimodal.example(size)
    assert packed.kind.shape == (packed.num_blocks, size) and packed.positions.shape == (4, packed.num_blocks, size)
    placed = sorted(d for block in packed.block_documents for d in block)
    assert placed == list(range(len(ROWS)))  # every document in exactly one block (none is empty)
    kept = 0
    for b, members in enumerate(packed.block_documents):
        document = packed.document[b]
        used = int((document >= 0).sum())
        assert (document[used:] == -1).all() and (packed.kind[b, used:] == multimodal.PADDING).all()
        order = document[:used][np.flatnonzero(np.diff(document[:used], prepend=-2) != 0)]
        assert tuple(order.tolist()) == members  # each document one run, in the block's order
        assert packed.plain[b, :used].tolist() == list(range(used))
        for d in members:
            where = np.flatnonzero(document == d)
            row = ROWS[d]
            whole = row_positions(row, multimodal.CONFIG)
            assert (packed.positions[0, b, where] == np.arange(len(where))).all()  # text row restarts
            assert (packed.positions[1:, b, where] == whole[:, : len(where)]).all()  # mRoPE of the document alone
            types = token_types(row["input_ids"][: len(where)], multimodal.CONFIG)
            assert (packed.kind[b, where] == types).all()
            images = packed.image[b, where]
            for number, grid in enumerate(row["image_grid_thw"][: int(images.max(initial=-1)) + 1]):
                assert int((images == number).sum()) == multimodal.CONFIG.tokens_per_image(grid)  # never half
            kept += len(where)
    assert packed.tokens_kept == kept and packed.tokens == sum(len(row["input_ids"]) for row in ROWS)
    assert packed.padding == packed.num_blocks * size - kept
    assert packed.tokens_cut == packed.tokens - kept


def test_blocks_are_the_plan_of_the_kept_lengths_and_truncation_keeps_whole_images() -> None:
    packed = multimodal.example(16)
    lengths = [int((packed.document == d).sum()) for d in range(len(ROWS))]
    plan = packing.plan(lengths, 16, strategy=multimodal.STRATEGY)
    assert packed.block_documents == tuple(tuple(p.sequence for p in block) for block in plan.blocks())
    assert packed.tokens_cut > 0 and packed.images_left_out > 0
    assert packed.images == sum(len(row["image_grid_thw"]) for row in ROWS)
    assert packed.images_kept == sum(
        int(packed.image[packed.document == d].max(initial=-1)) + 1 for d in range(len(ROWS))
    )
    wide = multimodal.example(256)
    assert wide.tokens_cut == 0 and wide.images_left_out == 0 and wide.images_kept == wide.images


def test_default_window_shows_the_second_document_starting() -> None:
    packed = multimodal.example()
    for block, members in enumerate(packed.block_documents):
        start = multimodal.default_window(packed, block)
        used = int((packed.document[block] >= 0).sum())
        assert 0 <= start <= max(used - multimodal.WINDOW, 0)
        shown = packed.document[block, start : start + multimodal.WINDOW]
        assert len(members) == 1 or len(set(shown.tolist())) >= 2


def test_positions_equal_collate_with_vision() -> None:
    """The block's four rows are what ``packing.torch.collate(rows, vision=config)`` gives the model."""
    pytest.importorskip("torch")
    import packing.torch

    for size in (32, 128):
        packed = multimodal.example(size)
        for b, members in enumerate(packed.block_documents):
            batch = packing.torch.collate([ROWS[d] for d in members], size, vision=multimodal.CONFIG)
            used = int((packed.document[b] >= 0).sum())
            assert batch["position_ids"].shape == (4, 1, used)
            assert (batch["position_ids"][:, 0].numpy() == packed.positions[:, b, :used]).all()
