"""Packing for vision-language models of the Qwen2-VL family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): their 3-D rotary
positions (mRoPE) computed per document, and the ``(4, 1, T)`` positions that keep documents with images apart
when they are packed into one row. Imports nothing of the library but ``packing.core`` and ``packing.errors``.

A packed row of these models is exact when each document keeps its own mRoPE positions and the text positions
restart at every document (transformers 5.x builds the attention mask from them); 1-D positions mix the
documents. The modules behind these names are internal.

>>> from packing.vision import VisionConfig, packed_position_ids
>>> config = VisionConfig(image_token_id=5, video_token_id=6, vision_start_token_id=4, spatial_merge_size=2)
>>> rows = [{"input_ids": [1, 4, 5, 2], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [1, 4, 5, 5, 2],
...         "image_grid_thw": [[1, 2, 4]]}]
>>> packed_position_ids(rows, config)[:, 0].tolist()
[[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 2, 3, 0, 1, 2, 2, 4], [0, 1, 2, 3, 0, 1, 2, 2, 4], [0, 1, 2, 3, 0, 1, 2, 3, 4]]
"""

from packing.vision._config import VisionConfig as VisionConfig
from packing.vision._rope import VISION_FIELDS as VISION_FIELDS
from packing.vision._rope import packed_position_ids as packed_position_ids
from packing.vision._rope import rope_index as rope_index
from packing.vision._rope import row_positions as row_positions
from packing.vision._rope import token_types as token_types

__all__ = ["VISION_FIELDS", "VisionConfig", "packed_position_ids", "rope_index", "row_positions", "token_types"]
