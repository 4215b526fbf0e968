"""Documents with images cut without cutting an image (``kept_length``, against a brute force over every cut) and
joined in one row (``joined_inputs``): what is kept is a document of its own, and through a tiny random Qwen2-VL
and Qwen3-VL each kept document's logits equal that document alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing.errors import SampleError
from packing.vision import VisionConfig, rope_index, row_positions, token_types
from packing.vision._documents import joined_inputs, kept_length
from tests.helpers.tiny_vlms import IMAGE, MERGE, START, VIDEO, random_document, tiny_vlm

CONFIGS = {
    frames_apart: VisionConfig(IMAGE, VIDEO, START, MERGE, frames_apart=frames_apart) for frames_apart in (False, True)
}


def _valid(row: dict[str, Any], cut: int, config: VisionConfig) -> bool:
    """Whether ``cut`` keeps every image and video whole: the kept tokens join, and no vision start token is left
    just before the placeholders it opens."""
    ids = row["input_ids"]
    if 0 < cut < len(ids) and ids[cut - 1] == START and ids[cut] in (IMAGE, VIDEO):
        return False
    try:
        joined_inputs([row], [cut], config)
    except SampleError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    images=st.integers(0, 3),
    videos=st.integers(0, 2),
    frames_apart=st.booleans(),
    at=st.floats(0, 1.2),
)
def test_the_kept_length_is_the_longest_cut_that_keeps_images_whole(
    seed: int, images: int, videos: int, frames_apart: bool, at: float
) -> None:
    config = CONFIGS[frames_apart]
    row = random_document(np.random.default_rng(seed), images, videos, frames_apart=frames_apart)
    limit = int(at * len(row["input_ids"]))
    kept = kept_length(row, limit, config)
    assert kept == max(cut for cut in range(min(limit, len(row["input_ids"])) + 1) if _valid(row, cut, config))
    joined = joined_inputs([row], [kept], config)
    ids = row["input_ids"][:kept]
    # what is kept is a document of its own: its positions, from its own grids, are the whole one's first
    alone = rope_index(ids, joined.get("image_grid_thw"), joined.get("video_grid_thw"), None, config)
    assert np.array_equal(alone, row_positions(row, config)[:, :kept])
    assert np.array_equal(joined["position_ids"][1:, 0], alone)
    for grid, pixels in (("image_grid_thw", "pixel_values"), ("video_grid_thw", "pixel_values_videos")):
        if grid in joined:
            assert len(joined[pixels]) == int(joined[grid].prod(axis=1).sum())
            assert np.array_equal(joined[pixels], np.asarray(row[pixels])[: len(joined[pixels])])


def test_joined_rows_restart_their_text_positions_and_keep_their_order() -> None:
    rng = np.random.default_rng(3)
    rows = [random_document(rng, 2, 1), random_document(rng, 0), random_document(rng, 1)]
    config = CONFIGS[False]
    lengths = [len(row["input_ids"]) for row in rows]
    joined = joined_inputs(rows, lengths, config)
    bounds = np.cumsum([0, *lengths])
    for row, a, b in zip(rows, bounds, bounds[1:], strict=False):
        assert joined["position_ids"][0, 0, a:b].tolist() == list(range(b - a))
        assert np.array_equal(joined["position_ids"][1:, 0, a:b], row_positions(row, config))
        assert np.array_equal(joined["mm_token_type_ids"][0, a:b], token_types(row["input_ids"], config))
    assert joined["image_grid_thw"].tolist() == rows[0]["image_grid_thw"] + rows[2]["image_grid_thw"]


def test_a_cut_inside_an_image_is_refused_naming_the_sample() -> None:
    row = random_document(np.random.default_rng(0), 1, text=(2, 3))
    inside = row["input_ids"].index(IMAGE) + 1
    with pytest.raises(SampleError, match=r"^sample 1, 'input_ids', position \d+: expected a cut outside an image"):
        joined_inputs([{"input_ids": [7]}, row], [1, inside], CONFIGS[False])


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_documents_cut_and_joined_give_each_kept_document_its_logits_alone(family: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model = tiny_vlm(family)
    config = VisionConfig.of(model.config)
    rng = np.random.default_rng(11)
    rows = [random_document(rng, 2, 1, frames_apart=config.frames_apart) for _ in range(3)]
    lengths = [kept_length(row, int(len(row["input_ids"]) * 0.6), config) for row in rows]
    joined = joined_inputs(rows, lengths, config)
    vision = {name: torch.tensor(joined[name]) for name in ("pixel_values", "pixel_values_videos") if name in joined}
    vision = {name: value.to(model.dtype) for name, value in vision.items()}
    vision |= {name: torch.tensor(joined[name]) for name in ("image_grid_thw", "video_grid_thw") if name in joined}
    ids = torch.tensor([[i for row, n in zip(rows, lengths, strict=True) for i in row["input_ids"][:n]]])
    with torch.no_grad():
        packed = model(ids, position_ids=torch.tensor(joined["position_ids"]), use_cache=False, **vision).logits[0]
        bounds = np.cumsum([0, *lengths])
        for row, n, a, b in zip(rows, lengths, bounds, bounds[1:], strict=False):
            own = joined_inputs([row], [n], config)
            inputs = {k: torch.tensor(own[k]) for k in ("image_grid_thw", "video_grid_thw") if k in own}
            inputs |= {
                k: torch.tensor(own[k]).to(model.dtype) for k in ("pixel_values", "pixel_values_videos") if k in own
            }
            types = torch.tensor(own["mm_token_type_ids"])
            alone = model(torch.tensor([row["input_ids"][:n]]), mm_token_type_ids=types, **inputs).logits[0]
            assert float((packed[a:b] - alone).abs().max()) <= 1e-9
