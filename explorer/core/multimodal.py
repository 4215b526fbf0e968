"""A multimodal example packed for the Qwen2-VL family, as plain data: documents shaped like vision-language SFT
rows (text with 0–3 images, each image's tokens set by its patch grid ``[1, h, w]`` and the merge size 2), packed
whole into blocks (``packing.plan`` over their lengths, after ``kept_length`` shortens a document too long for a
block without cutting an image), and each block's tokens with their document, image and four position rows (the
text row restarting per document, then temporal, height and width: what ``packing.torch.collate(rows,
vision=config)`` gives the model), beside the 1-D positions a text-only packing would give.

No torch: the positions are ``packing.vision``'s (numpy), the blocks ``packing.plan``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

import packing
from packing.vision import VisionConfig, token_types
from packing.vision._documents import joined_inputs, kept_length

Int64Array = npt.NDArray[np.int64]

CONFIG = VisionConfig(image_token_id=5, video_token_id=6, vision_start_token_id=3, spatial_merge_size=2)
"""The example model's numbers: image placeholder 5, video 6 (unused), vision start 3, merge size 2."""
VISION_END = 4
"""The token closing every image (a text token for the positions, as the models' ``<|vision_end|>`` is)."""
STRATEGY: Final = "ffd"
"""A strategy that keeps documents whole (first-fit decreasing): an image is never split across blocks."""
DEFAULT_MAX_SEQ_LENGTH = 128
MIN_MAX_SEQ_LENGTH = 16
MAX_MAX_SEQ_LENGTH = 256
ROW_NAMES = ("text", "temporal", "height", "width")
"""The four rows of ``position_ids`` ``(4, 1, T)``, in order."""
PADDING = -1
TEXT = 0
IMAGE = 1


def example_documents(count: int = 10, seed: int = 46) -> list[dict[str, Any]]:
    """``count`` synthetic documents in the processor's form (``input_ids``, ``image_grid_thw``), shaped like
    vision-language SFT rows: a prompt of text, 0–3 images (vision start, ``h*w/4`` image tokens for a grid
    ``[1, h, w]`` with ``h, w`` in 2..8, vision end), a question and an answer. Always the same for a seed. O(tokens).

    >>> rows = example_documents(4)
    >>> [len(row["input_ids"]) for row in rows], [len(row["image_grid_thw"]) for row in rows]
    ([25, 17, 41, 58], [0, 0, 2, 3])
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for _ in range(count):
        ids: list[int] = list(rng.integers(10, 1000, int(rng.integers(3, 8))))
        grids: list[list[int]] = []
        for _ in range(int(rng.integers(0, 4))):
            h, w = (int(n) for n in rng.choice([2, 4, 6, 8], 2))
            grids.append([1, h, w])
            ids += [CONFIG.vision_start_token_id, *[CONFIG.image_token_id] * CONFIG.tokens_per_image([1, h, w])]
            ids.append(VISION_END)
        ids += list(rng.integers(10, 1000, int(rng.integers(6, 30))))
        rows.append({"input_ids": [int(i) for i in ids], "image_grid_thw": grids})
    return rows


@dataclass(frozen=True)
class MultimodalPacking:
    """A multimodal packing as the page draws it. Every array is ``(blocks, max_seq_length)``, padding at each
    block's end: ``kind`` (``PADDING`` -1, ``TEXT`` 0, ``IMAGE`` 1), ``document`` (its index, -1 padding),
    ``image`` (the image's number within its document, -1 for text and padding), ``positions``
    ``(4, blocks, max_seq_length)`` (text, temporal, height, width; -1 padding) and ``plain`` (the 1-D
    positions ``0 .. n-1`` a text-only packing gives the block's real tokens, -1 padding); ``block_documents``
    the documents of each block in order; and the counts."""

    max_seq_length: int
    kind: Int64Array
    document: Int64Array
    image: Int64Array
    positions: Int64Array
    plain: Int64Array
    block_documents: tuple[tuple[int, ...], ...]
    documents: int
    images: int
    images_kept: int
    tokens: int
    tokens_kept: int
    padding: int

    @property
    def num_blocks(self) -> int:
        return len(self.block_documents)

    @property
    def tokens_cut(self) -> int:
        """Tokens left out by truncation (never part of an image: a cut inside one moves before it)."""
        return self.tokens - self.tokens_kept

    @property
    def images_left_out(self) -> int:
        """Images left out whole by truncation (none is ever cut in half)."""
        return self.images - self.images_kept


def _image_numbers(types: npt.NDArray[np.int8]) -> Int64Array:
    """The number (0-based) of the image each token belongs to within its document, -1 for text. O(T).

    >>> _image_numbers(np.array([0, 1, 1, 0, 1, 0], dtype=np.int8)).tolist()
    [-1, 0, 0, -1, 1, -1]
    """
    starts = (types == IMAGE) & (np.diff(types, prepend=np.int8(0)) != 0)
    return np.where(types == IMAGE, np.cumsum(starts) - 1, -1).astype(np.int64)


def pack_documents(rows: Sequence[Mapping[str, Any]], max_seq_length: int) -> MultimodalPacking:
    """``rows`` (processor-form documents of the example's ``CONFIG``) packed whole into blocks of
    ``max_seq_length``: each document first kept to ``kept_length`` (never half an image), then placed by
    ``packing.plan`` (``STRATEGY``), each block's positions those of ``joined_inputs``. O(tokens).

    >>> rows = [{"input_ids": [7, 3, 5, 4, 8], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [9, 9, 9]}]
    >>> packed = pack_documents(rows, 6)
    >>> packed.block_documents, packed.kind.tolist(), packed.image.tolist()
    (((0,), (1,)), [[0, 0, 1, 0, 0, -1], [0, 0, 0, -1, -1, -1]], [[-1, -1, 0, -1, -1, -1], [-1, -1, -1, -1, -1, -1]])
    >>> packed.positions[:, 0].tolist()
    [[0, 1, 2, 3, 4, -1], [0, 1, 2, 3, 4, -1], [0, 1, 2, 3, 4, -1], [0, 1, 2, 3, 4, -1]]
    >>> short = pack_documents(rows, 2)  # the first document ends before its image's vision start
    >>> short.tokens_cut, short.images_left_out, short.kind.tolist()
    (5, 1, [[0, 0], [0, -1]])
    """
    lengths = np.array([len(row["input_ids"]) for row in rows], dtype=np.int64)
    kept = np.array([kept_length(row, max_seq_length, CONFIG, i) for i, row in enumerate(rows)], dtype=np.int64)
    plan = packing.plan(kept, max_seq_length, strategy=STRATEGY)
    blocks = tuple(tuple(piece.sequence for piece in block) for block in plan.blocks())
    shape = (len(blocks), max_seq_length)
    kind, document, image, plain = (np.full(shape, PADDING, dtype=np.int64) for _ in range(4))
    positions = np.full((4, *shape), PADDING, dtype=np.int64)
    images = images_kept = 0
    for row, length in zip(rows, kept.tolist(), strict=True):
        types = token_types(row["input_ids"], CONFIG)
        images += int(_image_numbers(types).max(initial=-1)) + 1
        images_kept += int(_image_numbers(types[:length]).max(initial=-1)) + 1
    for b, members in enumerate(blocks):
        parts = [rows[d] for d in members]
        sizes = [int(kept[d]) for d in members]
        joined = joined_inputs(parts, sizes, CONFIG)
        used = sum(sizes)
        kinds = [token_types(rows[d]["input_ids"][:n], CONFIG) for d, n in zip(members, sizes, strict=True)]
        kind[b, :used] = np.concatenate(kinds)
        document[b, :used] = np.repeat(members, sizes)
        image[b, :used] = np.concatenate([_image_numbers(t) for t in kinds])
        positions[:, b, :used] = joined["position_ids"][:, 0]
        plain[b, :used] = np.arange(used)
    tokens_kept = int(kept.sum())
    return MultimodalPacking(
        max_seq_length=max_seq_length,
        kind=kind,
        document=document,
        image=image,
        positions=positions,
        plain=plain,
        block_documents=blocks,
        documents=len(rows),
        images=images,
        images_kept=images_kept,
        tokens=int(lengths.sum()),
        tokens_kept=tokens_kept,
        padding=len(blocks) * max_seq_length - tokens_kept,
    )


WINDOW = 32
"""Tokens of a block whose position rows are printed at once (each cell's number readable on a laptop)."""


def default_window(packed: MultimodalPacking, block: int, size: int = WINDOW) -> int:
    """The first token of the ``size`` tokens of ``block`` shown first: around the start of its second document
    (where 1-D positions go on and the packed ones restart), else around its first image, else 0. O(T).

    >>> rows = [{"input_ids": [7, 3, 5, 4, 8], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [9, 9, 9]}]
    >>> packed = pack_documents(rows, 8)
    >>> default_window(packed, 0, 4), default_window(packed, 0, 2), default_window(packed, 0, 32)
    (3, 4, 0)
    """
    document, kind = packed.document[block], packed.kind[block]
    used = int((kind != PADDING).sum())
    starts = np.flatnonzero(np.diff(document[:used]) != 0) + 1
    images = np.flatnonzero(kind == IMAGE)
    middle = int(starts[0]) if len(starts) else int(images[0]) if len(images) else 0
    return max(0, min(middle - size // 2, used - size))


def example(max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH) -> MultimodalPacking:
    """The bundled example (:func:`example_documents`) packed into blocks of ``max_seq_length``.

    >>> packed = example(128)
    >>> packed.documents, packed.images, packed.num_blocks, packed.padding, packed.tokens_cut
    (10, 14, 3, 36, 0)
    >>> packed = example(32)
    >>> packed.num_blocks, packed.tokens_cut, packed.images_left_out
    (10, 70, 0)
    """
    return pack_documents(example_documents(), max_seq_length)
