"""``tree_inputs`` and ``completion_logps`` on prefix-tree blocks without a model: the inputs' form, the per-token
values against a hand computation, rows in input order across blocks, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from packing.errors import SettingError
from packing.trees import PrefixTree, ancestor_mask, tree_blocks

torch = pytest.importorskip("torch")
from packing.torch import collate, completion_logps, tree_inputs  # noqa: E402 - after the skip without torch


def _blocks() -> list[PrefixTree]:
    trees = [PrefixTree.from_rows([{"prompt": [1, 2], "completion": [3, 4]}, {"prompt": [1, 2], "completion": [5]}]),
             PrefixTree.from_rows([[6, 7, 8]]), PrefixTree.from_rows([{"input_ids": [6, 9], "loss_mask": [1, 1]}])]  # fmt: skip
    return tree_blocks(trees, 5)


def test_the_inputs_are_ids_depths_and_the_mask_in_the_models_dtype() -> None:
    blocks = _blocks()
    inputs = tree_inputs(blocks, "eager", dtype=torch.float64, pad_id=0)
    assert sorted(inputs) == ["attention_mask", "input_ids", "position_ids", "use_cache"] and not inputs["use_cache"]
    assert inputs["input_ids"].tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 6, 9]]  # trees apart, even alike
    assert inputs["position_ids"].tolist() == [[0, 1, 2, 3, 2], [0, 1, 2, 0, 1]]
    mask = inputs["attention_mask"]
    assert mask.dtype == torch.float64 and mask.shape == (2, 1, 5, 5)
    assert ((mask[0, 0] == 0).numpy() == ancestor_mask(blocks[0])).all()


def test_per_token_values_are_read_at_the_parents_position_rows_in_input_order() -> None:
    blocks = _blocks()
    logits = torch.randn(2, 5, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logps = logits.log_softmax(-1)
    values = completion_logps(logits[[1, 0]], blocks[::-1], per_token=True)  # blocks in any order: rows by number
    expected = [[logps[0, 1, 3], logps[0, 2, 4]], [logps[0, 1, 5]], [logps[1, 0, 7], logps[1, 1, 8]], [logps[1, 3, 9]]]
    expected = [[float(x) for x in row] for row in expected]  # a row's first token is never trained
    assert values.lengths.tolist() == [2, 1, 2, 1] and values.rows.tolist() == [0, 0, 1, 2, 2, 3]
    assert np.allclose(values.tokens.tolist(), [x for row in expected for x in row], atol=1e-12)
    assert np.allclose(values.sums.tolist(), [sum(row) for row in expected], atol=1e-12)
    assert torch.equal(completion_logps(logits, blocks), values.sums)
    padded = values.padded(fill=7.0)
    assert padded.shape == (4, 2) and padded[1].tolist() == [expected[1][0], 7.0]


def test_pairs_and_groups_are_read_as_before() -> None:
    batch = collate([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}], share_prompt=True)
    sums = completion_logps(torch.zeros(1, 5, 8), batch)
    assert [round(float(x), 4) for x in sums] == [-2.0794, -4.1589]
    with pytest.raises(SettingError, match="per_token: expected prefix-tree blocks"):
        completion_logps(torch.zeros(1, 5, 8), batch, per_token=True)


def test_what_a_tree_cannot_run_on_is_refused() -> None:
    blocks = _blocks()
    for name in ("flash_attention_2", "flash_attention_3", "flex_attention"):
        with pytest.raises(SettingError, match=f"attn_implementation: expected eager or sdpa .* got '{name}'"):
            tree_inputs(blocks, name, dtype=torch.float32)
    with pytest.raises(SettingError, match="dtype: expected the model's floating dtype"):
        tree_inputs(blocks, "sdpa")
    with pytest.raises(SettingError, match=r"logits: expected logits of the blocks' shape \(2, 5, vocabulary\)"):
        completion_logps(torch.zeros(2, 4, 12), blocks)
    with pytest.raises(SettingError, match="logits: expected a score for every token id"):
        completion_logps(torch.zeros(2, 5, 6), blocks)
    with pytest.raises(SettingError, match="logits: expected a torch tensor"):
        completion_logps(np.zeros((2, 5, 12)), blocks)  # type: ignore[arg-type]


def test_a_sliding_window_shorter_than_a_row_is_refused() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(sliding_window=2, use_sliding_window=True, layer_types=["sliding_attention"],
                                      num_hidden_layers=1)  # fmt: skip
    with pytest.raises(SettingError, match="model: expected rows of at most its sliding window's 2 tokens"):
        tree_inputs(_blocks(), config, dtype=torch.float32)
