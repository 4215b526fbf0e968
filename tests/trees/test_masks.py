"""``ancestor_mask``, ``additive_mask`` and ``tree_arrays`` against the rows: a stored token attends to exactly the
tokens before it in a row through it, and itself; padding sees itself only."""

from __future__ import annotations

import numpy as np
import pytest

from packing.errors import SettingError
from packing.trees import PrefixTree, additive_mask, ancestor_mask, tree_arrays, tree_blocks
from tests.helpers.trees import conversation_rows


@pytest.mark.parametrize("seed", range(8))
def test_a_token_sees_what_comes_before_it_in_its_rows(seed: int) -> None:
    tree = PrefixTree.from_rows(conversation_rows(seed))
    expected = np.eye(tree.size, dtype=bool)
    for r in range(tree.num_rows):
        nodes = tree.row(r)
        for i, node in enumerate(nodes.tolist()):
            expected[node, nodes[:i]] = True
    assert (ancestor_mask(tree) == expected).all()


def test_the_additive_mask_pads_and_takes_the_models_dtype() -> None:
    blocks = tree_blocks([PrefixTree.from_rows(conversation_rows(seed)) for seed in range(4)], 100)
    length = max(block.size for block in blocks) + 3
    mask = additive_mask(blocks, np.float32, length=length)
    assert mask.shape == (len(blocks), 1, length, length) and mask.dtype == np.float32
    for b, block in enumerate(blocks):
        assert ((mask[b, 0, : block.size, : block.size] == 0) == ancestor_mask(block)).all()
        pad = mask[b, 0, block.size :]
        assert ((pad == 0) == np.eye(length, dtype=bool)[block.size :]).all()
    assert set(np.unique(mask).tolist()) == {0.0, float(np.finfo(np.float32).min)}
    arrays = tree_arrays(blocks, length=length, pad_id=3)
    assert arrays["input_ids"][0, blocks[0].size :].tolist() == [3] * (length - blocks[0].size)
    assert arrays["position_ids"][0, : blocks[0].size].tolist() == blocks[0].depths.tolist()


def test_a_torch_dtype_gives_a_tensor() -> None:
    torch = pytest.importorskip("torch")
    blocks = [PrefixTree.from_rows([[1, 2, 3], [1, 4]])]
    mask = additive_mask(blocks, torch.bfloat16)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.bfloat16 and mask.shape == (1, 1, 4, 4)
    assert ((mask == 0).numpy() == (additive_mask(blocks) == 0)).all()
    assert float(mask.min()) == torch.finfo(torch.bfloat16).min
    with pytest.raises(SettingError, match="dtype: expected a floating dtype"):
        additive_mask(blocks, torch.int64)


def test_what_it_cannot_mask_is_refused() -> None:
    blocks = [PrefixTree.from_rows([[1, 2, 3]])]
    with pytest.raises(SettingError, match="dtype: expected a floating dtype"):
        additive_mask(blocks, np.int32)
    with pytest.raises(SettingError, match="length: expected an integer of at least the longest block's 3 tokens"):
        tree_arrays(blocks, length=2)
    with pytest.raises(SettingError, match="blocks: expected prefix-tree blocks"):
        additive_mask([[1, 2]])  # type: ignore[list-item]
