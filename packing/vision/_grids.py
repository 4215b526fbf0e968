"""Internal: the checks of a vision row's grids and pixels against its tokens, each failure a ``SampleError`` naming
the sample, the field and what was expected (one line)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError
from packing.vision._config import VisionConfig

Int64Array = npt.NDArray[np.int64]

PIXELS = {"image_grid_thw": "pixel_values", "video_grid_thw": "pixel_values_videos"}
"""Each grid column and the column of the patches it describes (one row per patch, ``t*h*w`` rows per grid)."""

KIND = {1: "image", 2: "video"}
"""The token types the models read (``mm_token_type_ids``): 0 text, 1 image, 2 video."""


def grids(value: Any, field: str, config: VisionConfig, sample: int | None = None) -> Int64Array:
    """``value`` (None or ``[[t, h, w], ...]``) as an ``(n, 3)`` int64 array, each grid of positive integers with
    ``h`` and ``w`` divisible by the merge size; else a ``SampleError`` naming the grid. O(n).

    >>> config = VisionConfig(5, 6, 4, spatial_merge_size=2)
    >>> grids([[1, 4, 6]], "image_grid_thw", config).tolist(), grids(None, "image_grid_thw", config).shape
    ([[1, 4, 6]], (0, 3))
    >>> grids([[1, 4, 6], [1, 4, 5]], "image_grid_thw", config, sample=3)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 3, 'image_grid_thw', position 1: expected a grid [t, h, w] of integers >= 1, h and w divisible by spatial_merge_size=2, got [1, 4, 5] (list)
    """
    merge = config.spatial_merge_size
    expected = f"a grid [t, h, w] of integers >= 1, h and w divisible by spatial_merge_size={merge}"
    if value is None:
        return np.zeros((0, 3), dtype=np.int64)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        raise SampleError(sample, field, None, f"a list of grids: {expected}", value) from None
    if array.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if array.ndim != 2 or array.shape[1] != 3 or not np.issubdtype(array.dtype, np.integer):
        raise SampleError(sample, field, None, f"a list of grids: {expected}", value)
    array = array.astype(np.int64)
    bad = np.flatnonzero((array < 1).any(axis=1) | (array[:, 1] % merge != 0) | (array[:, 2] % merge != 0))
    if bad.size:
        raise SampleError(sample, field, int(bad[0]), expected, array[bad[0]].tolist())
    return array


def check_pixels(pixel_values: Any, grid: Int64Array, field: str, sample: int | None = None) -> None:
    """Refuse ``pixel_values`` whose rows (patches) are not the sum of ``t*h*w`` over the grids of ``field``. O(n).

    >>> check_pixels(np.zeros((24, 8)), np.array([[1, 4, 6]]), "image_grid_thw")
    >>> check_pixels(np.zeros((20, 8)), np.array([[1, 4, 6]]), "image_grid_thw", sample=1)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 1, 'pixel_values': expected 24 rows of patches (the sum of t*h*w over 'image_grid_thw'), got <20 rows>
    """
    shape = np.shape(pixel_values)
    rows = shape[0] if shape else 0
    expected = int(grid.prod(axis=1).sum())
    if rows != expected:
        what = f"{expected:,} rows of patches (the sum of t*h*w over {field!r})"
        raise SampleError(sample, PIXELS[field], None, what, f"<{rows:,} rows>")


def check_run(
    kind: int, start: int, length: int, index: int, grid: Int64Array, config: VisionConfig, sample: int | None
) -> None:
    """Refuse a run of ``length`` tokens of ``kind`` (1 image, 2 video) from ``start`` that is not the ``index``-th
    grid's ``t*h*w / merge²`` tokens, or that has no grid. O(1).

    >>> check_run(1, 3, 5, 0, np.array([[1, 4, 4]]), VisionConfig(5, 6, 4, 2), sample=0)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 0, 'input_ids', position 3: expected 4 image tokens (image 0, grid [1, 4, 4], spatial_merge_size=2), got <5 image tokens>
    """
    name = KIND[kind]
    if index >= len(grid):
        field = "image_grid_thw" if kind == 1 else "video_grid_thw"
        raise SampleError(
            sample, field, None, f"a grid for each run of {name} tokens (at least {index + 1})", len(grid)
        )
    want = config.tokens_per_image(grid[index])
    if length != want:
        what = f"{want:,} {name} tokens ({name} {index}, grid {grid[index].tolist()}, spatial_merge_size={config.spatial_merge_size})"
        raise SampleError(sample, "input_ids", start, what, f"<{length:,} {name} tokens>")


def check_all_used(used: int, grid: Int64Array, field: str, sample: int | None) -> None:
    """Refuse grids left over once every run of tokens has taken its own (a grid without its tokens). O(1).

    >>> check_all_used(1, np.array([[1, 2, 2], [1, 2, 2]]), "image_grid_thw", sample=2)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2, 'image_grid_thw': expected one grid per run of image tokens (1 run), got <2 grids>
    """
    if used != len(grid):
        name = "image" if field == "image_grid_thw" else "video"
        what = f"one grid per run of {name} tokens ({used} run{'s' if used != 1 else ''})"
        raise SampleError(sample, field, None, what, f"<{len(grid)} grids>")
