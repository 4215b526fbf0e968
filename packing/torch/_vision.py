"""Internal: ``collate`` of rows with images (the recipe's ``vision``: a Qwen2-VL-family model's numbers): the
placeholder tokens of images and videos are not trained, the overflow policy never cuts an image
(:func:`packing.vision._documents.kept_length`), and the batch has what the model's forward takes for a packed row:
``position_ids`` ``(4, 1, T)`` (:mod:`packing.vision`), ``mm_token_type_ids`` and the kept images' pixels and grids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from packing.core._arrays import offsets_of
from packing.core._samples import IGNORE_INDEX
from packing.errors import SettingError
from packing.recipe import Recipe
from packing.torch._schedule import Int64Array
from packing.vision import VISION_FIELDS, VisionConfig, token_types
from packing.vision._documents import joined_inputs, kept_length

PIXEL_FIELDS = ("pixel_values", "pixel_values_videos")


def check_vision_recipe(recipe: Recipe, units: bool) -> VisionConfig:
    """The recipe's vision numbers, refused with what does not lay out images (context parallelism, pairs and
    groups). O(1)."""
    assert recipe.vision is not None
    if recipe.document_multiple > 1:
        raise SettingError("vision", "None with context parallelism (its THD layout has no images)", recipe.vision)
    if units:
        raise SettingError("vision", "None with preference pairs or completion groups", recipe.vision)
    return recipe.vision


def vision_rows(rows: Sequence[Any], tokens: Int64Array, lengths: Int64Array) -> list[dict[str, Any]]:
    """Each row's token ids as the reader read them (any row form it takes) with the row's own image and video
    fields (:data:`~packing.vision.VISION_FIELDS`). O(rows).

    >>> vision_rows([{"input_ids": [4, 5], "image_grid_thw": [[1, 1, 1]]}, [7]], np.array([4, 5, 7]), np.array([2, 1]))
    [{'image_grid_thw': [[1, 1, 1]], 'input_ids': array([4, 5])}, {'input_ids': array([7])}]
    """
    bounds = offsets_of(lengths).tolist()
    return [
        {**{name: row[name] for name in VISION_FIELDS if isinstance(row, Mapping) and name in row}, "input_ids": ids}
        for row, ids in zip(rows, np.split(tokens, bounds[1:-1]), strict=True)
    ]


def untrained_placeholders(tokens: Int64Array, labels: Int64Array, config: VisionConfig) -> Int64Array:
    """``labels`` with -100 on every image and video placeholder token (nothing is learnt by predicting one). O(T).

    >>> config = VisionConfig(5, 6, 4, 2)
    >>> untrained_placeholders(np.array([4, 5, 5, 7]), np.array([4, 5, 5, 7]), config).tolist()
    [4, -100, -100, 7]
    """
    return np.where(token_types(tokens, config) > 0, IGNORE_INDEX, labels)


def kept_lengths(rows: Sequence[Any], lengths: Int64Array, recipe: Recipe) -> Int64Array:
    """Each row's tokens the overflow policy keeps with ``max_seq_length``: all, or for an over-long row none
    (``drop``) or its first ones up to the last whole image before ``max_seq_length`` (``truncate``); ``error`` and
    ``split`` refuse it (``collate`` does). O(T of the over-long rows).

    >>> recipe = Recipe(3, vision=VisionConfig(5, 6, 4, 1))
    >>> kept_lengths([{"input_ids": [1, 4, 5, 5]}, [7, 8]], np.array([4, 2]), recipe).tolist()
    [1, 2]
    """
    assert recipe.vision is not None
    capacity, kept = recipe.max_seq_length, lengths.copy()
    for row in np.flatnonzero(lengths > capacity).tolist():
        if recipe.overflow == "drop":
            kept[row] = 0
        elif recipe.overflow == "truncate":
            kept[row] = kept_length(rows[row], capacity, recipe.vision, row)
    return kept


def vision_columns(
    rows: Sequence[Any], kept: Int64Array, padding: int, recipe: Recipe, tensors: Callable[[Any], Any]
) -> dict[str, Any]:
    """The batch's vision columns for ``rows`` kept to ``kept`` tokens each and followed by ``padding`` tokens (each a
    sequence of its own: text position 0, mRoPE positions 0, token type 0); pixels keep the dtype of the rows'
    arrays or tensors (tensors joined by torch; lists of numbers read as float64, as numpy reads them). Refuses more patches than ``max_image_patches``. O(T + patches)."""
    assert recipe.vision is not None
    joined = joined_inputs(rows, kept.tolist(), recipe.vision, join=_join)
    patches = sum(len(joined[name]) for name in PIXEL_FIELDS if name in joined)
    cap = recipe.max_image_patches
    if cap is not None and patches > cap:
        raise SettingError("rows", f"at most max_image_patches={cap} vision patches in all", patches)
    if padding:
        joined["position_ids"] = np.concatenate(
            [joined["position_ids"], np.zeros((4, 1, padding), dtype=np.int64)], axis=2
        )
        joined["mm_token_type_ids"] = np.pad(joined["mm_token_type_ids"], ((0, 0), (0, padding)))
    if isinstance(tensors(np.zeros(0)), np.ndarray):  # return_tensors="np"
        return {name: _as_numpy(value) for name, value in joined.items()}
    return {name: value if isinstance(value, torch.Tensor) else tensors(value) for name, value in joined.items()}


def _as_numpy(value: Any) -> Any:
    """A column for ``return_tensors="np"``: torch pixels as a numpy array, refused in bfloat16 (numpy has none). O(1)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bfloat16:
        raise SettingError("return_tensors", "'pt' for bfloat16 pixel_values (numpy has no bfloat16)", "np")
    return value.numpy()


def _join(parts: Sequence[Any]) -> Any:
    """Pixels of several rows joined: torch tensors by torch (their dtype kept: bfloat16 has no numpy type), else
    as a numpy array. O(patches)."""
    if any(isinstance(part, torch.Tensor) for part in parts):
        return torch.cat([torch.as_tensor(part) for part in parts])
    return np.concatenate([np.asarray(part) for part in parts])
