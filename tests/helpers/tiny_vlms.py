"""Tiny random vision-language models of the Qwen2-VL family built here (nothing downloaded): one or two text layers
of width 32, a vision tower of depth 1 over patches of 2x2 pixels, in float64 unless told, the same weights for a
seed; and random documents for them (text with images or videos in the processor's row form)."""

from __future__ import annotations

from typing import Any

import numpy as np

VOCAB = 64
IMAGE, VIDEO, START, END = 60, 61, 62, 63
"""The placeholder ids of the tiny models: image, video, vision start, vision end (text takes 1 to 59)."""
MERGE = 2
PATCH = 2
TEMPORAL_PATCH = 2
CHANNELS = 3
PATCH_DIM = CHANNELS * TEMPORAL_PATCH * PATCH * PATCH
"""Values per row of ``pixel_values`` (one row per patch)."""
FAMILIES = ("qwen2_vl", "qwen2_5_vl")


def tiny_config(family: str, tokens_per_second: int = 4) -> Any:
    """The config of a tiny ``family`` model (``qwen2_vl``, ``qwen2_5_vl`` or ``qwen3_vl``)."""
    import transformers

    text = {
        "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
        "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    }  # fmt: skip
    vision = {
        "depth": 1, "num_heads": 2, "in_channels": CHANNELS, "patch_size": PATCH,
        "spatial_merge_size": MERGE, "temporal_patch_size": TEMPORAL_PATCH,
    }  # fmt: skip
    ids = {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": START, "vision_end_token_id": END}
    if family == "qwen2_vl":
        vision |= {"embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2}
        return transformers.Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    if family == "qwen2_5_vl":
        vision |= {
            "hidden_size": 16, "intermediate_size": 32, "out_hidden_size": 32, "window_size": 8,
            "fullatt_block_indexes": [0], "tokens_per_second": tokens_per_second,
        }  # fmt: skip
        return transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    text["rope_parameters"] = {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    vision |= {"hidden_size": 16, "intermediate_size": 32, "out_hidden_size": 32, "num_position_embeddings": 64,
               "deepstack_visual_indexes": []}  # fmt: skip
    return transformers.Qwen3VLConfig(text_config=text, vision_config=vision, **ids)


def tiny_vlm(family: str, dtype: str = "float64", seed: int = 0, attention: str = "sdpa") -> Any:
    """A tiny random ``family`` model for conditional generation in ``dtype``, in eval mode."""
    import torch
    import transformers

    config = tiny_config(family)
    config._attn_implementation = attention
    torch.manual_seed(seed)
    kind = {
        "qwen2_vl": transformers.Qwen2VLForConditionalGeneration,
        "qwen2_5_vl": transformers.Qwen2_5_VLForConditionalGeneration,
        "qwen3_vl": transformers.Qwen3VLForConditionalGeneration,
    }[family]
    return kind(config).to(getattr(torch, dtype)).eval()


def random_document(
    rng: np.random.Generator, images: int, videos: int = 0, text: tuple[int, int] = (1, 12), frames_apart: bool = False
) -> dict[str, Any]:
    """A document in the processor's row form: text of random length around ``images`` images and ``videos`` videos
    in random order, each opened by the vision start token and closed by the vision end token, of random grids
    (``h`` and ``w`` multiples of the merge size), with random ``pixel_values`` and seconds per temporal patch.
    ``frames_apart`` (Qwen3-VL): each frame of a video stands apart, after a timestamp of text."""
    kinds = rng.permutation([IMAGE] * images + [VIDEO] * videos)
    ids: list[int] = [int(i) for i in rng.integers(1, 60, rng.integers(*text))]
    grid: dict[int, list[list[int]]] = {IMAGE: [], VIDEO: []}
    for kind in kinds:
        t = 1 if kind == IMAGE else int(rng.integers(1, 4))
        h, w = (int(n) * MERGE for n in rng.integers(1, 4, 2))
        grid[kind].append([t, h, w])
        frames = t if kind == VIDEO and frames_apart else 1
        for _ in range(frames):
            stamp = list(rng.integers(1, 60, 2)) if frames_apart and kind == VIDEO else []
            ids += [*stamp, START] + [int(kind)] * (t * h * w // MERGE**2 // frames) + [END]
        ids += list(rng.integers(1, 60, rng.integers(*text)))
    row: dict[str, Any] = {"input_ids": [int(i) for i in ids]}
    for kind, name, pixels in (
        (IMAGE, "image_grid_thw", "pixel_values"),
        (VIDEO, "video_grid_thw", "pixel_values_videos"),
    ):
        if grid[kind]:
            row[name] = grid[kind]
            row[pixels] = rng.standard_normal((sum(t * h * w for t, h, w in grid[kind]), PATCH_DIM))
    if videos:
        row["second_per_grid_ts"] = rng.choice([0.5, 1.0, 1 / 3, 0.7, 2.0], videos).astype(np.float32)
    return row
