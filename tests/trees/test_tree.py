"""``PrefixTree.from_rows`` and ``tree_blocks`` against counts made apart: random conversation trees of depth 3 and
GRPO groups of whole rows store each shared prefix once, every row is its path, every stored token weighs as many
rows as train it, and blocks hold whole trees."""

from __future__ import annotations

import numpy as np
import pytest

from packing.errors import SampleError, SettingError
from packing.trees import PrefixTree, tree_blocks
from tests.helpers.trees import conversation_rows, group_rows, ids_and_mask, prefix_count, prefix_weights

SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("make", [conversation_rows, group_rows], ids=["conversation", "group"])
def test_every_prefix_once_every_row_its_path(seed: int, make: object) -> None:
    rows = make(seed)  # type: ignore[operator]
    tree = PrefixTree.from_rows(rows)
    assert tree.size == prefix_count(rows)
    assert tree.unshared_size == sum(len(ids_and_mask(row)[0]) for row in rows)
    weights = prefix_weights(rows)
    for r, row in enumerate(rows):
        ids, mask = ids_and_mask(row)
        nodes = tree.row(r)
        assert tree.tokens[nodes].tolist() == ids
        assert tree.depths[nodes].tolist() == list(range(len(ids)))
        assert tree.parents[nodes].tolist() == [-1, *nodes[:-1].tolist()]
        assert tree.row_loss[tree.row_offsets[r] : tree.row_offsets[r + 1]].tolist() == [0, *mask[1:]]
        assert [int(tree.weights[n]) for n in nodes] == [weights[tuple(ids[: i + 1])] for i in range(len(ids))]
    assert (tree.parents < np.arange(tree.size)).all()  # depth-first: a parent before its children


def test_equal_rows_share_every_token_and_weigh_twice() -> None:
    tree = PrefixTree.from_rows([{"prompt": [1, 2], "completion": [3]}] * 2 + [[4]])
    assert tree.size == 4 and tree.weights.tolist() == [0, 0, 2, 0]
    assert tree.row(0).tolist() == tree.row(1).tolist() == [0, 1, 2] and tree.row(2).tolist() == [3]


def test_eight_completions_four_to_one_store_three_times_fewer_tokens() -> None:
    rows = group_rows(0, completions=8, prompt=64, completion=16)
    rows = [{"prompt": row["prompt"], "completion": row["completion"] + [7] * (16 - len(row["completion"]))}
            for row in rows]  # fmt: skip
    tree = PrefixTree.from_rows(rows)
    assert tree.unshared_size == 8 * 80 and tree.size <= 64 + 8 * 16
    assert tree.unshared_size / tree.size >= 3.0


def test_blocks_hold_whole_trees_in_input_order() -> None:
    trees = [PrefixTree.from_rows(conversation_rows(seed)) for seed in range(10)]
    longest = max(tree.size for tree in trees)
    blocks = tree_blocks(trees, longest + 5)
    assert all(block.size <= longest + 5 for block in blocks)
    assert sum(block.size for block in blocks) == sum(tree.size for tree in trees)
    numbers = np.concatenate([block.row_ids for block in blocks])
    assert sorted(numbers.tolist()) == list(range(sum(tree.num_rows for tree in trees)))
    assert all((np.diff(block.row_ids) > 0).all() for block in blocks)
    first = 0
    for tree in trees:  # every tree's rows together, in one block, as they were
        block = next(b for b in blocks if first in b.row_ids.tolist())
        at = block.row_ids.tolist().index(first)
        for r in range(tree.num_rows):
            assert block.tokens[block.row(at + r)].tolist() == tree.tokens[tree.row(r)].tolist()
        first += tree.num_rows
    one = tree_blocks([trees[0]], trees[0].size)
    assert len(one) == 1 and one[0].size == trees[0].size == prefix_count(conversation_rows(0))


def test_a_tree_too_long_is_refused_naming_its_row() -> None:
    trees = [PrefixTree.from_rows([[1, 2]]), PrefixTree.from_rows([[3, 4, 5], [3, 4, 6], [3, 7, 8, 9]])]
    with pytest.raises(SampleError, match=r"sample 3: expected a prefix tree of at most max_seq_length=5 tokens "
                                          r"\(tree 1 is kept whole in one block, a row never split\), got <7 tokens"):  # fmt: skip
        tree_blocks(trees, 5)
    with pytest.raises(SampleError, match=r"sample 0: .* got <3 tokens stored by tree 0's rows up to this one>"):
        tree_blocks([PrefixTree.from_rows([[1, 2, 3]])], 2)
    with pytest.raises(SettingError, match="max_seq_length: expected a positive integer"):
        tree_blocks(trees, 0)
    with pytest.raises(SettingError, match="trees: expected PrefixTree objects"):
        tree_blocks([[1, 2]], 4)  # type: ignore[list-item]


def test_rows_it_cannot_store_are_refused() -> None:
    with pytest.raises(SettingError, match=r"rows: expected token rows .* got <lengths only>"):
        PrefixTree.from_rows([{"length": 3}])
    with pytest.raises(SettingError, match="labels equal to the ids"):
        PrefixTree.from_rows([{"input_ids": [1, 2], "labels": [-100, 5]}])
    with pytest.raises(SampleError, match="sample 1"):
        PrefixTree.from_rows([[1, 2], [-3]])
