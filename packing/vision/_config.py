"""Internal: :class:`VisionConfig`, the few numbers of a Qwen2-VL-family model that place its image and video tokens."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packing.core._validation import check_integer, is_integer
from packing.errors import SettingError

FRAMES_APART_FAMILIES = ("qwen3",)
"""Model types (prefixes) whose videos put every frame in its own run of video tokens, between timestamps
(Qwen3-VL): their ``get_rope_index`` splits a video's grid ``[t, h, w]`` into ``t`` grids ``[1, h, w]``."""

NAME = "vision"
"""How messages name the option."""


@dataclass(frozen=True)
class VisionConfig:
    """The numbers that place a Qwen2-VL-family model's image and video tokens: the placeholder ids, the vision
    start id (the token that opens every image or video), the spatial merge size (one token per
    ``merge x merge`` patches), Qwen2.5-VL's ``tokens_per_second`` (None for Qwen2-VL and Qwen3-VL: their video
    frames step by 1) and ``frames_apart`` (Qwen3-VL: a video's frames stand in separate runs of video tokens).

    >>> config = VisionConfig.of({"image_token_id": 5, "video_token_id": 6, "vision_start_token_id": 4,
    ...                           "spatial_merge_size": 2})
    >>> config.tokens_per_image([1, 4, 6]), config.frames_apart
    (6, False)
    >>> VisionConfig.of({"image_token_id": 5})
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: vision: expected a Qwen2-VL-family config or a mapping with 'video_token_id', got <no video_token_id>
    """

    image_token_id: int
    video_token_id: int
    vision_start_token_id: int
    spatial_merge_size: int
    tokens_per_second: float | None = None
    frames_apart: bool = False

    def __post_init__(self) -> None:
        for name in ("image_token_id", "video_token_id", "vision_start_token_id"):
            check_integer(getattr(self, name), f"{NAME}.{name}", least=0)
        check_integer(self.spatial_merge_size, f"{NAME}.spatial_merge_size")
        ids = {self.image_token_id, self.video_token_id, self.vision_start_token_id}
        if len(ids) < 3:
            raise SettingError(f"{NAME}.image_token_id", "three different ids (image, video, vision start)", ids)
        second = self.tokens_per_second
        if second is not None and (isinstance(second, bool) or not isinstance(second, (int, float)) or second <= 0):
            raise SettingError(f"{NAME}.tokens_per_second", "None or a number > 0", second)

    @classmethod
    def of(cls, config: Any) -> VisionConfig:
        """The numbers read from ``config``: a transformers config of a Qwen2-VL, Qwen2.5-VL or Qwen3-VL model
        (ids at its top, merge size and ``tokens_per_second`` in its ``vision_config``), a mapping of the same
        names (flat or with a ``vision_config``), or a ``VisionConfig`` (returned as is). O(1).

        >>> import transformers
        >>> VisionConfig.of(transformers.Qwen2_5_VLConfig()).tokens_per_second
        4
        >>> VisionConfig.of(transformers.Qwen3VLConfig()).frames_apart
        True
        """
        if isinstance(config, cls):
            return config
        model_type = _read(config, "model_type", required=False)
        frames_apart = _read(config, "frames_apart", required=False)
        if frames_apart is None:
            frames_apart = isinstance(model_type, str) and model_type.startswith(FRAMES_APART_FAMILIES)
        return cls(
            image_token_id=_read(config, "image_token_id"),
            video_token_id=_read(config, "video_token_id"),
            vision_start_token_id=_read(config, "vision_start_token_id"),
            spatial_merge_size=_read(config, "spatial_merge_size"),
            tokens_per_second=_read(config, "tokens_per_second", required=False),
            frames_apart=bool(frames_apart),
        )

    def tokens_per_image(self, grid: Any) -> int:
        """The placeholder tokens an image or video of patch grid ``[t, h, w]`` takes: ``t*h*w / merge²``. O(1).

        >>> VisionConfig(151655, 151656, 151652, 2).tokens_per_image([2, 8, 12])
        48
        """
        t, h, w = (int(n) for n in grid)
        return t * h * w // self.spatial_merge_size**2


def _read(config: Any, name: str, required: bool = True) -> Any:
    """``name`` at the top of ``config`` (a mapping or an object) or in its ``vision_config``; None if absent and not
    ``required``, else a ``SettingError`` naming it. O(1)."""
    for source in (config, _get(config, "vision_config")):
        value = _get(source, name)
        if value is not None:
            return int(value) if is_integer(value) else value
    if required:
        raise SettingError(NAME, f"a Qwen2-VL-family config or a mapping with {name!r}", f"<no {name}>")
    return None


def _get(source: Any, name: str) -> Any:
    """``source[name]`` of a mapping, ``source.name`` of an object, None when absent. O(1)."""
    if source is None:
        return None
    if isinstance(source, Mapping):
        return source.get(name)
    return getattr(source, name, None)
