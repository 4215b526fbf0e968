"""Packed rows through tiny random Qwen2-VL-family models built here: documents with images (and videos) packed
into one row with ``packed_position_ids`` give each document the logits it has alone; 1-D positions, or the three
mRoPE rows without the text row, mix the documents."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from packing.vision import VisionConfig, packed_position_ids, token_types
from tests.helpers.tiny_vlms import random_document, tiny_vlm

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TOLERANCE = 1e-5
MIXED = 1e-3
"""Packed and alone agree within ``TOLERANCE``; positions that mix documents are off by more than ``MIXED``."""
CASES = [(family, dtype) for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") for dtype in ("float32", "float64")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(case) for case in CASES])
def model(request: pytest.FixtureRequest) -> Any:
    family, dtype = request.param
    return tiny_vlm(family, dtype=dtype)


def _tensors(rows: list[dict[str, Any]], model: Any) -> dict[str, Any]:
    """The forward's vision inputs of ``rows`` in order: pixels, grids (and Qwen2.5-VL's seconds) concatenated."""
    dtype = model.dtype
    found: dict[str, Any] = {}
    for name in ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "second_per_grid_ts"):
        parts = [np.asarray(row[name]) for row in rows if name in row]
        if parts and (name != "second_per_grid_ts" or model.config.model_type == "qwen2_5_vl"):
            value = torch.tensor(np.concatenate(parts))
            found[name] = value.to(dtype) if name.startswith("pixel") else value
    return found


def _alone(model: Any, row: dict[str, Any]) -> Any:
    """The logits of ``row`` run by itself, the model computing its own positions."""
    types = torch.tensor(token_types(row["input_ids"], model.config))[None]
    return model(torch.tensor([row["input_ids"]]), mm_token_type_ids=types, **_tensors([row], model)).logits[0]


def _packed(model: Any, rows: list[dict[str, Any]], positions: np.ndarray) -> Any:
    ids = torch.tensor([[i for row in rows for i in row["input_ids"]]])
    return model(ids, position_ids=torch.tensor(positions), use_cache=False, **_tensors(rows, model)).logits[0]


def _worst(model: Any, rows: list[dict[str, Any]], alone: list[Any], positions: np.ndarray) -> float:
    """The largest difference between a document's logits packed (with ``positions``) and ``alone``."""
    packed = _packed(model, rows, positions)
    bounds = np.cumsum([0] + [len(row["input_ids"]) for row in rows])
    return max(float((packed[a:b] - own).abs().max()) for own, a, b in zip(alone, bounds, bounds[1:], strict=False))


SEEDS = [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 4))]


@pytest.mark.parametrize("seed", SEEDS)
def test_packed_documents_with_images_equal_each_alone(model: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames_apart = VisionConfig.of(model.config).frames_apart
    count = int(rng.integers(2, 4))
    rows = [
        random_document(rng, int(rng.integers(0, 4)), int(rng.integers(0, 2)), frames_apart=frames_apart)
        for _ in range(count)
    ]
    rows[0] = random_document(rng, 1 + seed % 3, frames_apart=frames_apart)  # at least one image
    with torch.no_grad():
        four = packed_position_ids(rows, model.config)
        assert four.shape == (4, 1, sum(len(row["input_ids"]) for row in rows))
        alone = [_alone(model, row) for row in rows]
        assert _worst(model, rows, alone, four) <= TOLERANCE
        plain = np.arange(four.shape[2])[None]  # 1-D positions: one long sequence
        assert _worst(model, rows, alone, plain) > MIXED
        assert _worst(model, rows, alone, four[1:]) > MIXED  # each document's mRoPE rows, no text row to cut the mask


def test_the_model_keeps_documents_apart_only_without_a_cache_or_a_mask() -> None:
    """transformers builds the packed mask from the text row only when no attention mask is given and no cache is
    made: a row of ones as the mask, or the cache on (``use_cache`` defaults to true, in training too), mixes the
    documents although the positions are right; so a packed row goes with ``use_cache=False`` and no mask."""
    model = tiny_vlm("qwen2_vl").train()
    rng = np.random.default_rng(0)
    rows = [random_document(rng, 1), random_document(rng, 2)]
    four = packed_position_ids(rows, model.config)
    ids = torch.tensor([[i for row in rows for i in row["input_ids"]]])
    with torch.no_grad():
        alone = [_alone(model, row) for row in rows]
        assert _worst(model, rows, alone, four) <= TOLERANCE
        bounds = np.cumsum([0] + [len(row["input_ids"]) for row in rows])
        for extra in ({}, {"use_cache": False, "attention_mask": torch.ones_like(ids)}):
            packed = model(ids, position_ids=torch.tensor(four), **_tensors(rows, model), **extra).logits[0]
            worst = max(
                float((packed[a:b] - own).abs().max()) for own, a, b in zip(alone, bounds, bounds[1:], strict=False)
            )
            assert worst > MIXED, extra


def _loss(logits: Any, ids: list[int]) -> Any:
    """The summed next-token loss of one document's ``logits``."""
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="sum")


def test_a_packed_training_step_has_the_gradients_of_the_documents_alone() -> None:
    model = tiny_vlm("qwen2_vl").train()
    rng = np.random.default_rng(5)
    rows = [random_document(rng, 2, 1), random_document(rng, 0), random_document(rng, 1)]
    packed = _packed(model, rows, packed_position_ids(rows, model.config))
    bounds = np.cumsum([0] + [len(row["input_ids"]) for row in rows])
    sum(_loss(packed[a:b], row["input_ids"]) for row, a, b in zip(rows, bounds, bounds[1:], strict=False)).backward()
    together = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    sum(_loss(_alone(model, row), row["input_ids"]) for row in rows).backward()
    alone = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert together.keys() == alone.keys() and len(alone) > 10
    assert max(float((together[name] - alone[name]).abs().max()) for name in alone) <= 1e-9
