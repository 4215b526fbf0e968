"""``rope_index`` against the models' own ``get_rope_index``: tiny random Qwen2-VL, Qwen2.5-VL and Qwen3-VL built
here, random documents with 0–3 images and 0–2 videos of random grids, positions equal exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packing.vision import VisionConfig, rope_index, token_types
from tests.helpers.tiny_vlms import random_document, tiny_vlm

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@pytest.fixture(scope="module", params=FAMILIES)
def model(request: pytest.FixtureRequest) -> Any:
    return tiny_vlm(request.param)


def _theirs(model: Any, row: dict[str, Any], seconds_as: str) -> np.ndarray:
    """The model's own positions of ``row`` alone (``get_rope_index``, as its forward computes them)."""
    ids = torch.tensor([row["input_ids"]])
    types = torch.tensor(token_types(row["input_ids"], model.config))[None]
    grids = {name: torch.tensor(row[name]) for name in ("image_grid_thw", "video_grid_thw") if name in row}
    seconds = row.get("second_per_grid_ts")
    extra = {}
    if seconds is not None and model.config.model_type == "qwen2_5_vl":
        extra["second_per_grid_ts"] = torch.tensor(seconds) if seconds_as == "tensor" else seconds.tolist()
    positions, _ = model.model.get_rope_index(ids, mm_token_type_ids=types, **grids, **extra)
    return positions[:, 0].numpy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    images=st.integers(0, 3),
    videos=st.integers(0, 2),
    rate=st.sampled_from([1, 2, 4, 25]),
    seconds_as=st.sampled_from(["tensor", "list", "none"]),
)
def test_positions_equal_the_models_own(
    model: Any, seed: int, images: int, videos: int, rate: int, seconds_as: str
) -> None:
    vision = model.config.vision_config
    if hasattr(vision, "tokens_per_second"):
        vision.tokens_per_second = rate
    config = VisionConfig.of(model.config)
    row = random_document(np.random.default_rng(seed), images, videos, frames_apart=config.frames_apart)
    if seconds_as == "none":
        row.pop("second_per_grid_ts", None)
    seconds = row.get("second_per_grid_ts")
    ours = rope_index(
        row["input_ids"],
        row.get("image_grid_thw"),
        row.get("video_grid_thw"),
        seconds.tolist() if seconds is not None and seconds_as == "list" else seconds,
        model.config,
    )
    assert ours.dtype == np.int64 and ours.shape == (3, len(row["input_ids"]))
    np.testing.assert_array_equal(ours, _theirs(model, row, seconds_as))


def test_fractional_seconds_are_cut_as_the_model_cuts_them() -> None:
    """Qwen2.5-VL steps a video's temporal positions by ``tokens_per_second * seconds`` in float32 and truncates:
    at 25 tokens per second and 1/3 s, the fourth frame stands at 25 (float32), not 24 (float64)."""
    model = tiny_vlm("qwen2_5_vl")
    model.config.vision_config.tokens_per_second = 25
    row = {
        "input_ids": [3, 61, 61, 61, 61, 9],
        "video_grid_thw": [[4, 2, 2]],
        "second_per_grid_ts": np.float32([1 / 3]),
    }
    ours = rope_index(row["input_ids"], None, row["video_grid_thw"], row["second_per_grid_ts"], model.config)
    np.testing.assert_array_equal(ours, _theirs(model, row, "tensor"))
    in_float64 = (np.arange(4) * (25 * (1 / 3))).astype(np.int64) + 1
    assert ours[0, 1:5].tolist() != in_float64.tolist()
