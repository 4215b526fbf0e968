"""Internal: the 3-D rotary positions (mRoPE) of the Qwen2-VL family, one document at a time and packed.

A document's text tokens step by one on all three rows; an image's or a video's tokens take a grid of positions
(temporal, height, width) from where the text stands, and the text after it resumes ``max(h, w) / merge`` later,
as the models' ``get_rope_index`` places them (transformers 5.x), proved equal on random documents in the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError
from packing.vision._config import VisionConfig
from packing.vision._grids import PIXELS, Int64Array, check_all_used, check_pixels, check_run, grids

VISION_FIELDS = ("image_grid_thw", "pixel_values", "video_grid_thw", "pixel_values_videos", "second_per_grid_ts")
"""The columns of a row that hold images or videos (besides their placeholder tokens in ``input_ids``)."""


def without_vision(row: Mapping[str, Any], sample: int | None) -> SampleError | None:
    """The error for a row that holds images or videos (a non-empty field of :data:`VISION_FIELDS`) where no vision
    config is given, naming the field; None for a row without. O(fields).

    >>> str(without_vision({"input_ids": [5], "image_grid_thw": [[1, 2, 2]]}, 3))
    "sample 3, 'image_grid_thw': expected no images or videos without a vision config (vision=...), got <1 grid>"
    """
    field = next((name for name in VISION_FIELDS if _values(row.get(name)) > 0), None)
    if field is None:
        return None
    count = len(row[field])
    got = f"<{count} {'grid' if count == 1 else 'grids'}>" if field.endswith("_thw") else f"<{field}>"
    return SampleError(sample, field, None, "no images or videos without a vision config (vision=...)", got)


def _values(value: Any) -> int:
    """How many numbers ``value`` (None, a list, an array or a tensor) holds. O(its numbers) for lists, O(1) else."""
    if value is None:
        return 0
    count = getattr(value, "numel", None)  # a torch tensor (its .size is a method)
    return int(count()) if callable(count) else int(np.size(value))


def token_types(input_ids: Any, config: Any) -> npt.NDArray[np.int8]:
    """The models' ``mm_token_type_ids`` of ``input_ids``: 0 for text, 1 for an image token, 2 for a video token.
    O(T).

    >>> token_types([4, 5, 5, 9, 6], {"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4,
    ...                               "spatial_merge_size": 1}).tolist()
    [0, 1, 1, 0, 2]
    """
    config = VisionConfig.of(config)
    ids = np.asarray(input_ids)
    types: npt.NDArray[np.int8] = ((ids == config.image_token_id) + 2 * (ids == config.video_token_id)).astype(np.int8)
    return types


def rope_index(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    config: Any = None,
    sample: int | None = None,
) -> Int64Array:
    """The ``(3, T)`` mRoPE positions of one document: ``input_ids`` (its ``T`` token ids), the patch grids
    ``[t, h, w]`` of its images and videos in order, Qwen2.5-VL's seconds per temporal patch of each video
    (``second_per_grid_ts``; 1 when not given), and ``config`` (:meth:`VisionConfig.of` reads it). Each run of image
    (video) tokens takes the next image (video) grid and must have its ``t*h*w / merge²`` tokens; else a
    ``SampleError`` naming ``sample``. Temporal positions of a video step by ``tokens_per_second * seconds`` in
    float32, cut to integers, as the models do. O(T + images + videos).

    >>> config = {"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4, "spatial_merge_size": 2}
    >>> rope_index([1, 4, 5, 5, 5, 5, 5, 5, 2], [[1, 4, 6]], config=config).tolist()
    [[0, 1, 2, 2, 2, 2, 2, 2, 5], [0, 1, 2, 2, 2, 3, 3, 3, 5], [0, 1, 2, 3, 4, 2, 3, 4, 5]]
    >>> rope_index([1, 4, 5, 5, 2], [[1, 4, 6]], config=config, sample=7)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 7, 'input_ids', position 2: expected 6 image tokens (image 0, grid [1, 4, 6], spatial_merge_size=2), got <2 image tokens>
    """
    config = VisionConfig.of(config)
    ids = token_ids(input_ids, sample)
    found = {1: grids(image_grid_thw, "image_grid_thw", config, sample)}
    videos = grids(video_grid_thw, "video_grid_thw", config, sample)
    steps = _time_steps(second_per_grid_ts, len(videos), config, sample)
    if config.frames_apart:  # every frame its own run of tokens (between timestamps), its own grid [1, h, w]
        steps = np.repeat(steps, videos[:, 0])
        videos = np.repeat(videos, videos[:, 0], axis=0)
        videos[:, 0] = 1
    found[2] = videos
    types = token_types(ids, config)
    starts = np.flatnonzero(np.diff(types, prepend=np.int8(-1)))
    ends = np.append(starts[1:], len(ids))[: len(starts)]  # no run in an empty document
    positions = np.empty((3, len(ids)), dtype=np.int64)
    used = {1: 0, 2: 0}
    now = 0
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        kind = int(types[start])
        if kind == 0:
            positions[:, start:end] = np.arange(now, now + end - start)
            now += end - start
            continue
        index = used[kind]
        check_run(kind, start, end - start, index, found[kind], config, sample)
        step = steps[index] if kind == 2 else 1
        positions[:, start:end] = _grid_positions(found[kind][index], config.spatial_merge_size, step) + now
        now += int(found[kind][index, 1:].max()) // config.spatial_merge_size
        used[kind] += 1
    check_all_used(used[1], found[1], "image_grid_thw", sample)
    check_all_used(used[2], found[2], "video_grid_thw", sample)
    return positions


def row_positions(row: Mapping[str, Any], config: Any = None, sample: int | None = None) -> Int64Array:
    """The ``(3, T)`` mRoPE positions of one row in the processor's form (``input_ids``, ``image_grid_thw``,
    ``pixel_values``, ``video_grid_thw``, ``pixel_values_videos``, ``second_per_grid_ts``), after checking its
    tokens and its pixel rows (when given) against its grids. Without ``config`` a row of text only steps by one on all three
    rows, and a row with images is refused (it needs the model's numbers). O(T + images + videos).

    >>> row_positions({"input_ids": [7, 8, 9]}).tolist()
    [[0, 1, 2], [0, 1, 2], [0, 1, 2]]
    >>> row_positions({"input_ids": [7, 5], "image_grid_thw": [[1, 2, 2]]}, sample=4)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 4, 'image_grid_thw': expected no images or videos without a vision config (vision=...), got <1 grid>
    """
    if config is None:
        refused = without_vision(row, sample)
        if refused is not None:
            raise refused
        ids = token_ids(row.get("input_ids"), sample)
        return np.broadcast_to(np.arange(len(ids), dtype=np.int64), (3, len(ids))).copy()
    config = VisionConfig.of(config)
    for field, pixels in PIXELS.items():
        if pixels in row:  # positions need only the grids; pixels, when given, must match them
            check_pixels(row.get(pixels), grids(row.get(field), field, config, sample), field, sample)
    return rope_index(
        row.get("input_ids"),
        row.get("image_grid_thw"),
        row.get("video_grid_thw"),
        row.get("second_per_grid_ts"),
        config,
        sample,
    )


def packed_position_ids(rows: Sequence[Mapping[str, Any]], config: Any = None) -> Int64Array:
    """The ``(4, 1, T)`` positions of ``rows`` packed in order into one row of ``T`` tokens, as transformers' Qwen2-VL
    family reads them to keep packed documents apart: row 0 the text positions, restarting at 0 at every document
    (the attention mask is built from it), rows 1–3 each document's own mRoPE positions (:func:`row_positions`,
    also restarting). A row that fails a check is named by its index in ``rows``. O(T + images + videos).

    >>> config = {"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4, "spatial_merge_size": 2}
    >>> rows = [{"input_ids": [4, 5, 9], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [3, 3]}]
    >>> packed_position_ids(rows, config)[:, 0].tolist()
    [[0, 1, 2, 0, 1], [0, 1, 2, 0, 1], [0, 1, 2, 0, 1], [0, 1, 2, 0, 1]]
    """
    parts = [row_positions(row, config, sample) for sample, row in enumerate(rows)]
    text = [np.arange(part.shape[1], dtype=np.int64) for part in parts]
    if not parts:
        return np.zeros((4, 1, 0), dtype=np.int64)
    return np.concatenate([np.concatenate(text)[None], np.concatenate(parts, axis=1)])[:, None, :]


def token_ids(input_ids: Any, sample: int | None) -> Int64Array:
    """``input_ids`` as a 1-D int64 array, else a ``SampleError``. O(T)."""
    ids = np.asarray(input_ids) if input_ids is not None else np.zeros(0, dtype=object)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)) or input_ids is None:
        raise SampleError(sample, "input_ids", None, "a 1-D list of token ids", input_ids)
    return ids.astype(np.int64)


def _time_steps(seconds: Any, videos: int, config: VisionConfig, sample: int | None) -> npt.NDArray[Any]:
    """Each video's step between temporal patches: 1 without ``tokens_per_second`` (Qwen2-VL, Qwen3-VL), else
    ``tokens_per_second * seconds`` (seconds 1 when not given) in float32 for fractional seconds, as the models
    multiply them. O(videos)."""
    rate = config.tokens_per_second
    if rate is None:
        return np.ones(videos, dtype=np.int64)
    if seconds is None:
        return np.full(videos, rate)
    given = np.asarray(seconds).reshape(-1)
    if len(given) != videos or not np.issubdtype(given.dtype, np.number):
        raise SampleError(sample, "second_per_grid_ts", None, f"one number per video ({videos})", seconds)
    if np.issubdtype(given.dtype, np.integer) and isinstance(rate, int):
        return given.astype(np.int64) * rate
    steps: npt.NDArray[np.float32] = (
        np.asarray(rate, dtype=given.dtype if given.dtype.kind == "f" else np.float64) * given
    ).astype(np.float32)
    return steps


def _grid_positions(grid: Int64Array, merge: int, step: Any) -> Int64Array:
    """The ``(3, t*h*w / merge²)`` positions of one image or video from 0: temporal ``floor(i * step)`` (float32
    when ``step`` is fractional), height and width the merged row and column. O(its tokens)."""
    t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
    if isinstance(step, (np.floating, float)):
        temporal = (np.arange(t, dtype=np.float32) * np.float32(step)).astype(np.int64)
    else:
        temporal = np.arange(t, dtype=np.int64) * int(step)
    return np.stack(
        [
            np.repeat(temporal, h * w),
            np.tile(np.repeat(np.arange(h, dtype=np.int64), w), t),
            np.tile(np.arange(w, dtype=np.int64), t * h),
        ]
    )
