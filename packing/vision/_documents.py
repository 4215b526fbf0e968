"""Internal: documents with images cut and joined without cutting an image: where a document may end when it is
too long (:func:`kept_length`), and the model's vision inputs of documents joined in one row, each kept to its first
tokens (:func:`joined_inputs`).

An image (or a video, all its frames) is a unit: its vision start token, its run (or runs) of placeholder tokens
and its patches are kept together or left out together, so the positions of what is kept are the positions it has
in the whole document (the positions of a prefix are a prefix of the positions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.errors import SampleError
from packing.vision._config import VisionConfig
from packing.vision._grids import PIXELS, Int64Array, grids
from packing.vision._rope import VISION_FIELDS, row_positions, token_ids, token_types


def _runs(types: npt.NDArray[np.int8]) -> tuple[Int64Array, Int64Array, npt.NDArray[np.int8]]:
    """The runs of vision tokens in ``types``: their starts, ends and kinds (1 image, 2 video). O(T)."""
    starts = np.flatnonzero((types > 0) & (np.diff(types, prepend=np.int8(0)) != 0))
    ends = np.flatnonzero((types > 0) & (np.diff(types, append=np.int8(0)) != 0)) + 1
    return starts, ends, types[starts]


def _video_of_run(
    row: Mapping[str, Any], kinds: npt.NDArray[np.int8], config: VisionConfig, sample: int | None
) -> Int64Array:
    """For each run of ``kinds``, the unit it belongs to: each image run its own; each video run its own, or with
    ``frames_apart`` (Qwen3-VL) the video whose frames it is one of (a video of grid ``[t, h, w]`` has ``t``
    runs). Units are numbered images and videos apart: ``(kind, index)`` packed as ``index * 3 + kind``. O(runs)."""
    unit = np.empty(len(kinds), dtype=np.int64)
    images = kinds == 1
    unit[images] = np.arange(int(images.sum())) * 3 + 1
    videos = ~images
    runs = np.arange(int(videos.sum()))
    if config.frames_apart:
        frames = grids(row.get("video_grid_thw"), "video_grid_thw", config, sample)[:, 0]
        runs = np.minimum(np.searchsorted(np.cumsum(frames), runs, side="right"), max(len(frames) - 1, 0))
    unit[videos] = runs * 3 + 2
    return unit


def kept_length(row: Mapping[str, Any], limit: int, config: Any, sample: int | None = None) -> int:
    """How many of ``row``'s first tokens a cut at ``limit`` keeps without cutting an image or a video: ``limit``,
    or less when it falls inside one (from its vision start token to the end of its last run of placeholder
    tokens; all frames of a video), moved back to before its vision start token. ``row`` is in the processor's
    form (:func:`~packing.vision.row_positions`). O(T).

    >>> config = {"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4, "spatial_merge_size": 2}
    >>> row = {"input_ids": [1, 2, 4, 5, 5, 3, 7], "image_grid_thw": [[1, 2, 4]]}
    >>> [kept_length(row, limit, config) for limit in (1, 2, 3, 4, 5, 6, 9)]
    [1, 2, 2, 2, 5, 6, 7]
    """
    config = VisionConfig.of(config)
    ids = token_ids(row.get("input_ids"), sample)
    if len(ids) <= limit:
        return len(ids)
    starts, ends, kinds = _runs(token_types(ids, config))
    if not len(starts):
        return limit
    units = _video_of_run(row, kinds, config, sample)
    first = np.flatnonzero(np.diff(units, prepend=-1) != 0)  # each unit's first run (its runs are consecutive)
    last = np.append(first[1:] - 1, len(units) - 1)
    unit_begin, unit_end = starts[first], ends[last]
    unit_begin = unit_begin - ((unit_begin > 0) & (ids[np.maximum(unit_begin - 1, 0)] == config.vision_start_token_id))
    inside = np.flatnonzero((unit_begin < limit) & (limit < unit_end))
    return int(unit_begin[inside[0]]) if len(inside) else limit


def joined_inputs(
    rows: Sequence[Mapping[str, Any]],
    lengths: Sequence[int],
    config: Any,
    join: Callable[[Sequence[Any]], Any] = np.concatenate,
) -> dict[str, Any]:
    """The vision inputs of ``rows`` joined in one row, each kept to its first ``lengths[i]`` tokens (ends that
    :func:`kept_length` gave, or whole rows): ``position_ids`` ``(4, 1, T)`` (the text row restarting per document,
    then the three mRoPE rows), ``mm_token_type_ids`` ``(1, T)``, and the kept images' and videos'
    ``pixel_values``, ``image_grid_thw``, ``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts`` in
    order, as numpy arrays (a field no kept row has is left out; ``join`` joins the rows' pixels, which are sliced
    as they are given). Each row is checked as
    :func:`~packing.vision.row_positions` checks it, named by its index; a length that cuts an image is refused.
    O(T + patches).

    >>> config = {"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4, "spatial_merge_size": 1}
    >>> rows = [{"input_ids": [4, 5, 9, 4, 5], "image_grid_thw": [[1, 1, 1], [1, 1, 1]],
    ...          "pixel_values": [[0.5], [0.25]]}, {"input_ids": [8, 8]}]
    >>> joined = joined_inputs(rows, [3, 2], config)
    >>> joined["position_ids"][:, 0].tolist(), joined["pixel_values"].tolist(), joined["image_grid_thw"].tolist()
    ([[0, 1, 2, 0, 1], [0, 1, 2, 0, 1], [0, 1, 2, 0, 1], [0, 1, 2, 0, 1]], [[0.5]], [[1, 1, 1]])
    """
    config = VisionConfig.of(config)
    text: list[Int64Array] = []
    positions: list[Int64Array] = []
    types: list[npt.NDArray[np.int8]] = []
    found: dict[str, list[Any]] = {name: [] for name in VISION_FIELDS}
    for sample, (row, length) in enumerate(zip(rows, lengths, strict=True)):
        whole = row_positions(row, config, sample)
        kept = token_types(token_ids(row.get("input_ids"), sample)[:length], config)
        text.append(np.arange(length, dtype=np.int64))
        positions.append(whole[:, :length])
        types.append(kept)
        for name, value in _kept_fields(row, kept, config, sample).items():
            found[name].append(value)
    joined: dict[str, Any] = {
        "position_ids": np.concatenate([np.concatenate(text or [np.zeros(0, np.int64)])[None],
                                        np.concatenate(positions or [np.zeros((3, 0), np.int64)], axis=1)])[:, None],
        "mm_token_type_ids": np.concatenate(types or [np.zeros(0, np.int8)])[None].astype(np.int64),
    }  # fmt: skip
    for name, parts in found.items():
        if parts:
            joined[name] = join(parts) if name in PIXELS.values() else np.concatenate(parts)
    return joined


def _kept_fields(
    row: Mapping[str, Any], kept: npt.NDArray[np.int8], config: VisionConfig, sample: int
) -> dict[str, Any]:
    """The grids, pixels and seconds of the images and videos whose tokens ``kept`` (the kept tokens' types) holds
    whole; a cut inside one is refused. O(T + patches)."""
    _, _, kinds = _runs(kept)
    counts = {1: int((kinds == 1).sum()), 2: int((kinds == 2).sum())}
    fields: dict[str, Any] = {}
    for kind, field in ((1, "image_grid_thw"), (2, "video_grid_thw")):
        grid = grids(row.get(field), field, config, sample)
        runs = counts[kind]
        if kind == 2 and config.frames_apart:  # runs are frames: the videos whose every frame is kept
            whole = np.cumsum(grid[:, 0])
            keep = int(np.searchsorted(whole, runs, side="right"))
            if runs and (keep == 0 or whole[keep - 1] != runs):
                raise SampleError(sample, "input_ids", len(kept), "a cut outside a video (all its frames)", runs)
        else:
            keep = runs
        if keep == 0:
            continue
        fields[field] = grid[:keep]
        pixels = row.get(PIXELS[field])
        if pixels is not None:
            fields[PIXELS[field]] = pixels[: int(grid[:keep].prod(axis=1).sum())]
        if kind == 2 and row.get("second_per_grid_ts") is not None:
            fields["second_per_grid_ts"] = np.asarray(row["second_per_grid_ts"]).reshape(-1)[:keep]
    if len(kept) and kept[-1] and len(kept) < len(token_ids(row.get("input_ids"), sample)):
        following = token_ids(row.get("input_ids"), sample)[len(kept)]
        if token_types(np.array([following]), config)[0] == kept[-1]:
            raise SampleError(sample, "input_ids", len(kept), "a cut outside an image or a video", "<inside one>")
    return fields
