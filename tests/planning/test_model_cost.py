"""ModelCost: a document's training FLOPs from a model's config, checked against a real transformers model's
matrices and against brute-force counts of attention pairs."""

from __future__ import annotations

import numpy as np
import pytest

import packing
from packing.planning._model_cost import TRAINING, ModelCost


def brute_pairs(length: int, window: int | None) -> int:
    """Query-key pairs of causal attention: query i sees keys max(0, i - window + 1)..i."""
    return sum(i + 1 if window is None else min(i + 1, window) for i in range(length))


@pytest.mark.parametrize("window", [None, 1, 3, 8])
def test_attention_counts_every_causal_pair(window: int | None) -> None:
    cost = ModelCost(linear=0.0, layers=((5, window), (5, window), (7, 0)))  # a linear-attention layer adds none
    lengths = np.arange(0, 20)
    attention = cost.components(lengths)["attention"]
    expected = [2 * TRAINING * 4 * 5 * brute_pairs(n, window) for n in lengths.tolist()]
    assert attention.tolist() == pytest.approx(expected)
    assert cost(lengths).tolist() == pytest.approx(expected)


def test_the_linear_part_is_every_matrix_of_a_real_llama() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=120, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cost = ModelCost.from_config(config)  # the config object itself
    assert cost.linear == TRAINING * 2 * weights  # forward: 2 FLOPs per weight and token; training: × 3
    assert cost.layers == ((48, None),) * 3
    assert ModelCost.from_config(config.to_dict()) == cost


def test_layer_kinds_from_the_config() -> None:
    base = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 128}
    mixed = ModelCost.from_config(
        {**base, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"] * 2}
    )
    assert mixed.layers == ((64, 16), (64, None)) * 2
    assert (
        ModelCost.from_config({**base, "sliding_window": 16, "use_sliding_window": False}).layers == ((64, None),) * 4
    )
    linear = ModelCost.from_config({**base, "layer_types": ["linear_attention"] * 3 + ["full_attention"]})
    assert linear.layers[:3] == ((64, 0),) * 3 and linear.linear > ModelCost.from_config(base).linear
    assert ModelCost.from_config(base, attention="linear").tokens_per_attention == float("inf")
    with pytest.raises(packing.SettingError, match=r"^sliding_window: expected a window"):
        ModelCost.from_config(base, attention="sliding")
    with pytest.raises(packing.SettingError, match=r"^hidden_size: expected an integer >= 1 in the model config"):
        ModelCost.from_config({"num_hidden_layers": 2})
    moe = ModelCost.from_config({**base, "moe_intermediate_size": 32, "num_experts_per_tok": 2})
    assert moe.linear < ModelCost.from_config(base).linear  # 2 experts of 32 instead of one MLP of 128


def test_tokens_per_attention_is_where_the_parts_cross() -> None:
    config = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "intermediate_size": 4096}
    cost = ModelCost.from_config(config)
    crossing = cost.tokens_per_attention
    parts = cost.components(np.array([round(crossing)]))
    assert parts["attention"][0] == pytest.approx(parts["tokens"][0], rel=1e-3)
    below = cost.components(np.array([round(crossing / 2)]))
    assert below["attention"][0] < below["tokens"][0]


def test_the_default_cost_is_this_shape_for_one_width() -> None:
    torch = pytest.importorskip("torch")  # noqa: F841 - packing.torch needs it
    from packing.torch import default_cost

    # verl's 24576·ℓ + ℓ² is (12h²ℓ + 2hℓ²) / 2h with h = 4096: a linear part of 12h² a token, attention 2h
    h = 4096
    lengths = np.array([1, 100, 10_000])
    assert default_cost(lengths).tolist() == ((12 * h * h * lengths + 2 * h * lengths**2) / (2 * h)).tolist()


def test_balance_reports_the_worst_step() -> None:
    torch = pytest.importorskip("torch")  # noqa: F841
    from packing.torch import PackingSampler

    sampler = PackingSampler(np.arange(1, 200) % 37 + 1, 64, num_replicas=3, rank=0)
    assert sampler.balance_stats.worst_step == sampler.schedule.worst_step_imbalance
