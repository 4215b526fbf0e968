"""Internal: the attention of prefix-tree blocks (each token sees its ancestors and itself) and their padded
model columns.

A tree's token attends to exactly the tokens a row through it has before it: its ancestors. With its depth as its
position id, every row's tokens then see what they see alone, at the positions they have alone. transformers
passes a 4-D mask to the attention kernel unchanged (eager adds it to the scores, SDPA takes it as ``attn_mask``),
so the mask is made here in the kernel's form: additive, in the model's dtype, 0 where a token attends and the
dtype's minimum elsewhere. Flash-attention kernels take no mask (only intervals of tokens), so they cannot run a tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packing.errors import SettingError
from packing.trees._tree import BoolArray, Int64Array, PrefixTree


def _blocks(blocks: PrefixTree | Sequence[PrefixTree]) -> list[PrefixTree]:
    """One block or several, as a list; anything else refused. O(blocks)."""
    found = [blocks] if isinstance(blocks, PrefixTree) else list(blocks)
    for block in found:
        if not isinstance(block, PrefixTree):
            raise SettingError("blocks", "prefix-tree blocks (tree_blocks, PrefixTree)", f"<{type(block).__name__}>")
    return found


def _length(blocks: list[PrefixTree], length: int | None) -> int:
    """The batch's token count: ``length``, at least the longest block's, else the longest block's. O(blocks)."""
    longest = max((block.size for block in blocks), default=0)
    if length is None:
        return longest
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < longest:
        raise SettingError("length", f"an integer of at least the longest block's {longest} tokens", length)
    return int(length)


def ancestor_mask(tree: PrefixTree) -> BoolArray:
    """The ``(T, T)`` boolean attention of a tree (or a block) of ``T`` stored tokens: ``[i, j]`` is True where
    token ``j`` is token ``i`` or one of its ancestors (lower triangular: a parent is stored before its
    children). Built depth by depth, each token's row its parent's plus itself. O(T²).

    >>> tree = PrefixTree.from_rows([[1, 2, 3], [1, 2, 4]])
    >>> ancestor_mask(tree).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
    """
    mask = np.zeros((tree.size, tree.size), dtype=bool)
    order = np.argsort(tree.depths, kind="stable")
    levels = np.split(order, np.cumsum(np.bincount(tree.depths))[:-1]) if tree.size else []
    for level in levels:
        parents = tree.parents[level]
        inner = parents >= 0
        mask[level[inner]] = mask[parents[inner]]
        mask[level, level] = True
    return mask


def _allowed(blocks: list[PrefixTree], length: int) -> BoolArray:
    """The ``(B, 1, T, T)`` attention of ``blocks`` padded to ``length`` tokens (a padding token sees itself
    only, so no row of the softmax is empty). O(B·T²)."""
    allowed = np.zeros((len(blocks), 1, length, length), dtype=bool)
    allowed[:, 0, np.arange(length), np.arange(length)] = True
    for b, block in enumerate(blocks):
        allowed[b, 0, : block.size, : block.size] = ancestor_mask(block)
    return allowed


def _is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def additive_mask(
    blocks: PrefixTree | Sequence[PrefixTree], dtype: Any = np.float32, length: int | None = None, device: Any = None
) -> Any:
    """The ``(B, 1, T, T)`` additive attention mask of one block or several (``tree_blocks``), padded to
    ``length`` tokens (default the longest block's): 0 where a token attends (its ancestors and itself,
    :func:`ancestor_mask`), the dtype's minimum elsewhere, the form eager attention and SDPA take unchanged
    (through ``model(attention_mask=...)``, with ``use_cache=False``). ``dtype`` a numpy floating dtype gives a
    numpy array; a torch dtype (the model's: ``torch.bfloat16``, ...) a tensor on ``device``, torch imported only
    then. O(B·T²).

    >>> blocks = [PrefixTree.from_rows([[1, 2], [1, 3]])]
    >>> mask = additive_mask(blocks, np.float64)
    >>> mask.shape, mask.dtype, mask[0, 0, 0].tolist() == [0, np.finfo(np.float64).min, np.finfo(np.float64).min]
    ((1, 1, 3, 3), dtype('float64'), True)
    >>> (additive_mask(blocks, np.float16)[0, 0] == 0).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    >>> float(additive_mask(blocks, np.float16).min())
    -65504.0
    """
    found = _blocks(blocks)
    allowed = _allowed(found, _length(found, length))
    if _is_torch_dtype(dtype):
        import torch

        if not dtype.is_floating_point:
            raise SettingError("dtype", "a floating dtype (the model's)", dtype)
        kept = torch.from_numpy(allowed).to(device)
        return torch.zeros(kept.shape, dtype=dtype, device=kept.device).masked_fill_(~kept, torch.finfo(dtype).min)
    try:
        kind = np.dtype(dtype)
    except TypeError:
        kind = np.dtype(object)
    if kind.kind != "f":
        raise SettingError("dtype", "a floating dtype (numpy's, or the model's torch dtype)", dtype)
    return np.where(allowed, kind.type(0), np.finfo(kind).min).astype(kind)


def tree_arrays(
    blocks: PrefixTree | Sequence[PrefixTree], length: int | None = None, pad_id: int = 0
) -> dict[str, Int64Array]:
    """The ``(B, T)`` int64 ``input_ids`` and ``position_ids`` (each token's depth) of one block or several,
    padded to ``length`` tokens (default the longest block's) with ``pad_id`` at position 0. O(B·T).

    >>> arrays = tree_arrays([PrefixTree.from_rows([[1, 2, 3], [1, 4]]), PrefixTree.from_rows([[5, 6]])])
    >>> arrays["input_ids"].tolist(), arrays["position_ids"].tolist()
    ([[1, 2, 3, 4], [5, 6, 0, 0]], [[0, 1, 2, 1], [0, 1, 0, 0]])
    """
    found = _blocks(blocks)
    total = _length(found, length)
    ids = np.full((len(found), total), pad_id, dtype=np.int64)
    positions = np.zeros((len(found), total), dtype=np.int64)
    for b, block in enumerate(found):
        ids[b, : block.size] = block.tokens
        positions[b, : block.size] = block.depths
    return {"input_ids": ids, "position_ids": positions}
