"""The proof: tiny float64 Llama and Qwen2 models built here (eager and SDPA attention). For random conversation
trees of depth 3 and GRPO groups of whole rows, one packed forward over prefix-tree blocks gives every row the
summed and per-token log-probabilities it has alone, and the gradients of their sum are the unshared ones."""

from __future__ import annotations

from typing import Any

import pytest

from packing.trees import PrefixTree, tree_blocks
from tests.helpers.tiny_models import tiny_causal_lm
from tests.helpers.trees import conversation_rows, group_rows, ids_and_mask

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from packing.torch import completion_logps, tree_inputs  # noqa: E402 - after the skip without torch

TOLERANCE = 1e-6
"""Packed and alone agree within this (float64 models). Measured: SDPA 1.4e-14 (sums) and 9e-16 (tokens); eager
2.4e-8 and 1.9e-8, its softmax being computed in float32 (``eager_attention_forward``), for packed and alone alike."""
SDPA_TOLERANCE = 1e-12
"""SDPA computes in the model's dtype throughout: packed and alone agree to float64 rounding."""
GRADIENT_TOLERANCE = 1e-6
"""The gradients agree within this times the largest gradient: measured 1.4e-7 of it (3.5e-6 of 26), the stock
RMSNorm computing in float32 inside (it casts its float64 input to float32 and back), and eager its softmax."""
EXACT_GRADIENT_TOLERANCE = 1e-12
"""With RMSNorm computing in the model's dtype, SDPA's gradients agree to float64 rounding (measured 2.1e-14)."""
CASES = [(kind, attention) for kind in ("llama", "qwen2") for attention in ("eager", "sdpa")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(case) for case in CASES])
def model(request: pytest.FixtureRequest) -> Any:
    kind, attention = request.param
    return tiny_causal_lm(kind, attention)


def _alone(model: Any, rows: list[dict[str, Any]]) -> list[Any]:
    """Every row's per-token log-probabilities of its trained tokens, the row run by itself."""
    found = []
    for row in rows:
        ids, mask = ids_and_mask(row)
        logps = model(torch.tensor([ids])).logits[0].log_softmax(-1)
        values = [logps[t - 1, ids[t]] for t in range(1, len(ids)) if mask[t]]
        found.append(torch.stack(values) if values else logps.new_zeros(0))
    return found


def _packed(model: Any, trees: list[PrefixTree], max_seq_length: int) -> Any:
    blocks = tree_blocks(trees, max_seq_length)
    return completion_logps(model(**tree_inputs(blocks, model)).logits, blocks, per_token=True)


def _worst(packed: Any, alone: list[Any]) -> tuple[float, float]:
    """The largest difference of a row's sum, and of one of its per-token values, packed and alone."""
    sums = max(abs(float(packed.sums[r]) - float(own.sum())) for r, own in enumerate(alone))
    assert packed.lengths.tolist() == [len(own) for own in alone]
    starts = [0, *torch.cumsum(packed.lengths, 0).tolist()]
    pieces = zip(alone, starts, starts[1:], strict=False)
    tokens = max((float((packed.tokens[a:b] - own).abs().max()) for own, a, b in pieces if len(own)), default=0.0)
    return sums, tokens


def _case(make: Any, seeds: range) -> tuple[list[PrefixTree], list[dict[str, Any]]]:
    sets = [make(seed) for seed in seeds]
    return [PrefixTree.from_rows(rows) for rows in sets], [row for rows in sets for row in rows]


SEEDS = [range(2), pytest.param(range(2, 8), marks=pytest.mark.slow)]


@pytest.mark.parametrize("seeds", SEEDS, ids=["few", "more"])
@pytest.mark.parametrize("make", [conversation_rows, group_rows], ids=["conversations", "groups"])
def test_one_packed_forward_gives_every_row_its_own_log_probabilities(model: Any, make: Any, seeds: range) -> None:
    trees, rows = _case(make, seeds)
    with torch.no_grad():
        packed = _packed(model, trees, max(tree.size for tree in trees) + 40)
        alone = _alone(model, rows)
    sums, tokens = _worst(packed, alone)
    tolerance = SDPA_TOLERANCE if model.config._attn_implementation == "sdpa" else TOLERANCE
    assert sums <= tolerance and tokens <= tolerance, (sums, tokens)


def test_a_tree_in_one_block_stores_its_trie_and_nothing_else(model: Any) -> None:
    rows = conversation_rows(3)
    tree = PrefixTree.from_rows(rows)
    blocks = tree_blocks([tree], tree.size)
    inputs = tree_inputs(blocks, model)
    assert inputs["input_ids"].shape == (1, tree.size) and tree.size < tree.unshared_size
    with torch.no_grad():
        packed = completion_logps(model(**inputs).logits, blocks, per_token=True)
        assert max(_worst(packed, _alone(model, rows))) <= TOLERANCE


def test_without_the_tree_mask_the_rows_mix(model: Any) -> None:
    """The check can fail: the same blocks under a plain causal mask give other log-probabilities."""
    trees, rows = _case(conversation_rows, range(2))
    blocks = tree_blocks(trees, 400)
    inputs = tree_inputs(blocks, model)
    del inputs["attention_mask"]
    with torch.no_grad():
        packed = completion_logps(model(**inputs).logits, blocks, per_token=True)
        assert _worst(packed, _alone(model, rows))[0] > 1e-3


def _gradients(model: Any, trees: list[PrefixTree], rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The largest difference of a parameter's gradient of the rows' summed log-probabilities, packed and alone,
    and the largest gradient."""
    model.zero_grad()
    _packed(model, trees, 400).sums.sum().backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    torch.stack([own.sum() for own in _alone(model, rows)]).sum().backward()
    worst = max(float((packed[name] - p.grad).abs().max()) for name, p in model.named_parameters())
    scale = max(float(p.grad.abs().max()) for _, p in model.named_parameters())
    model.zero_grad()
    return worst, scale


@pytest.mark.parametrize("make", [conversation_rows, group_rows], ids=["conversations", "groups"])
def test_the_gradients_are_the_unshared_ones(model: Any, make: Any) -> None:
    worst, scale = _gradients(model, *_case(make, range(2)))
    assert worst <= GRADIENT_TOLERANCE * scale, (worst, scale)


def _norm_in_the_models_dtype(self: Any, hidden: Any) -> Any:
    """RMSNorm without its float32 cast."""
    return self.weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def test_with_the_norm_in_float64_sdpa_gradients_are_equal_to_rounding(model: Any, monkeypatch: Any) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    monkeypatch.setattr(LlamaRMSNorm, "forward", _norm_in_the_models_dtype)
    monkeypatch.setattr(Qwen2RMSNorm, "forward", _norm_in_the_models_dtype)
    worst, scale = _gradients(model, *_case(conversation_rows, range(2)))
    if model.config._attn_implementation == "sdpa":
        assert worst <= EXACT_GRADIENT_TOLERANCE, worst
    else:  # eager's float32 softmax is left: measured 1.2e-8 of the largest gradient
        assert worst <= GRADIENT_TOLERANCE * scale, (worst, scale)
