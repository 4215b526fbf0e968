"""``packing.torch.collate(rows, vision=config)``: rows with images packed into one row that the model's forward takes
as it is (``model(**batch, use_cache=False)``), each document's logits and loss equal to the document alone; the
overflow policy never cuts an image and counts what it cut; bad combinations refused by name."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.errors import OptionNotUsed, SettingError, TokensLost
from packing.vision import VisionConfig, row_positions
from packing.vision._documents import kept_length
from tests.helpers.tiny_vlms import IMAGE, MERGE, START, VIDEO, random_document, tiny_vlm

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pt = pytest.importorskip("packing.torch")

CONFIG = VisionConfig(IMAGE, VIDEO, START, MERGE)
FAMILIES = ["qwen2_vl", pytest.param("qwen2_5_vl", marks=pytest.mark.slow), "qwen3_vl"]


def _alone(model: Any, row: dict[str, Any]) -> Any:
    """``row``'s own batch (collated alone) through ``model``: its logits."""
    return model(**pt.collate([row], vision=model.config), use_cache=False).logits[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_collated_batch_gives_each_document_its_logits_and_loss_alone(family: str) -> None:
    model = tiny_vlm(family)
    frames_apart = VisionConfig.of(model.config).frames_apart
    rng = np.random.default_rng(2)
    rows = [
        random_document(rng, images, videos, frames_apart=frames_apart) for images, videos in [(2, 1), (0, 0), (1, 0)]
    ]
    batch = pt.collate(rows, vision=model.config, pad_to_multiple_of=16)
    assert "attention_mask" not in batch  # the model keeps packed documents apart only without one
    assert batch["position_ids"].shape == (4, 1, batch["input_ids"].shape[1])
    with torch.no_grad():
        packed = model(**batch, use_cache=False)
        bounds = np.cumsum([0] + [len(row["input_ids"]) for row in rows])
        losses = []
        for row, a, b in zip(rows, bounds, bounds[1:], strict=False):
            alone = model(**pt.collate([row], vision=model.config), use_cache=False)
            assert float((packed.logits[0, a:b] - alone.logits[0]).abs().max()) <= 1e-9
            losses.append((alone.loss, int((pt.collate([row], vision=model.config)["labels"] != -100).sum())))
        targets = sum(n for _, n in losses)  # transformers' loss is a float32 mean over the targets
        assert abs(float(packed.loss) - float(sum(loss * n for loss, n in losses) / targets)) <= 1e-6


def test_placeholders_and_every_documents_first_token_are_not_trained() -> None:
    rng = np.random.default_rng(4)
    rows = [random_document(rng, 1, 1), random_document(rng, 2)]
    batch = pt.collate(rows, vision=CONFIG, return_tensors="np")
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    vision = np.isin(ids, [IMAGE, VIDEO])
    assert (labels[vision] == -100).all()
    assert labels[0] == -100 and labels[len(rows[0]["input_ids"])] == -100
    text = ~vision
    text[[0, len(rows[0]["input_ids"])]] = False
    assert np.array_equal(labels[text], ids[text])


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), images=st.integers(0, 3), videos=st.integers(0, 2), at=st.floats(0.05, 1))
def test_truncation_never_cuts_an_image_and_counts_what_it_cut(seed: int, images: int, videos: int, at: float) -> None:
    row = random_document(np.random.default_rng(seed), images, videos)
    capacity = max(1, int(at * len(row["input_ids"])))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = pt.collate([row], capacity, vision=CONFIG, return_tensors="np")
    kept = kept_length(row, capacity, CONFIG)  # the longest cut keeping images whole (tests/vision/test_documents.py)
    assert batch["input_ids"].shape[1] == max(kept, 1)  # nothing kept: padding alone, one token
    ids = np.asarray(row["input_ids"][:kept])
    grids = batch.get("image_grid_thw", np.zeros((0, 3), dtype=np.int64))
    assert int((ids == IMAGE).sum()) == int(grids.prod(axis=1).sum()) // MERGE**2  # every kept image whole
    assert len(batch.get("pixel_values", [])) == int(grids.prod(axis=1).sum())
    assert np.array_equal(batch["position_ids"][1:, 0, :kept], row_positions(row, CONFIG)[:, :kept])
    lost = [w.message for w in caught if isinstance(w.message, TokensLost)]
    cut = len(row["input_ids"]) - kept
    assert (cut > 0) == bool(lost)
    if lost:
        stats = lost[0].stats
        assert stats.tokens_truncated + stats.tokens_dropped == cut


def test_dropped_rows_take_their_images_with_them() -> None:
    rng = np.random.default_rng(6)
    short, long = random_document(rng, 1, text=(1, 3)), random_document(rng, 3, text=(20, 30))
    with pytest.warns(TokensLost):
        batch = pt.collate([long, short], len(short["input_ids"]) + 2, vision=CONFIG, overflow="drop")
    assert batch["image_grid_thw"].tolist() == short["image_grid_thw"]
    assert batch["pixel_values"].shape[0] == len(short["pixel_values"])


def test_pixels_keep_their_dtype_and_the_patch_cap_is_held() -> None:
    rng = np.random.default_rng(8)
    rows = [random_document(rng, 1), random_document(rng, 2)]
    tensors = [{**row, "pixel_values": torch.tensor(row["pixel_values"], dtype=torch.bfloat16)} for row in rows]
    batch = pt.collate(tensors, vision=CONFIG)
    assert batch["pixel_values"].dtype == torch.bfloat16
    patches = sum(len(row["pixel_values"]) for row in rows)
    assert len(pt.collate(rows, vision=CONFIG, max_image_patches=patches)["pixel_values"]) == patches
    with pytest.raises(SettingError, match=f"^rows: expected at most max_image_patches={patches - 1} vision patches"):
        pt.collate(rows, vision=CONFIG, max_image_patches=patches - 1)


def test_what_does_not_lay_out_images_is_refused_by_name() -> None:
    row = random_document(np.random.default_rng(1), 1)
    pair = {"prompt": [1, 2], "chosen": [3], "rejected": [4]}
    with pytest.raises(SettingError, match=r"^vision: expected None with preference pairs or completion groups"):
        pt.collate([pair], vision=CONFIG)
    with pytest.raises(SettingError, match=r"^vision: expected None with context parallelism"):
        pt.collate([row], 64, vision=CONFIG, context_parallel_size=2)
    with pytest.raises(SettingError, match=r"^max_image_patches: expected no value without vision"):
        pt.collate([row], max_image_patches=4)
    with pytest.raises(
        OptionNotUsed, match=r"^vision: expected no value at pack \(it does not use vision; collate does\)"
    ):
        packing.pack([row], 64, vision=CONFIG)
    with pytest.raises(
        packing.errors.SampleError, match=r"^sample 0, 'input_ids', position \d+: expected \d+ image tokens"
    ):
        pt.collate([{"input_ids": row["input_ids"], "image_grid_thw": [[1, 2, 4]]}], vision=CONFIG)
    with pytest.raises(packing.errors.SampleError, match=r"^sample 1, 'pixel_values': expected \d+ rows of patches"):
        pt.collate([[7], {**row, "image_grid_thw": [[1, 2, 4]]}], vision=CONFIG)
