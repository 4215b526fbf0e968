"""Context parallelism: the THD layout ``collate`` returns with ``context_parallel_size`` (every document padded to
a multiple of ``2·cp``, × ``tensor_parallel_size`` where asked), and one context-parallel rank's share of such a
batch. Internal: the public names are in ``packing.torch``; the arithmetic is ``packing.core._thd``'s.

The two boundary lists follow Megatron and Transformer Engine: ``cu_seq_lens_q`` (= ``cu_seq_lens_k``) holds the
documents' real lengths, ``cu_seqlens_padded`` their padded ones, which is where each document sits in the
tokens. Mixing them up is the classic THD bug (the auditor checks them against each other).

Labels: transformers' models shift ``labels`` by one inside the forward pass, which is wrong on a shard (a
chunk's first token would be predicted from another chunk's last). A THD batch therefore also carries
``shift_labels``, the targets already shifted within each document (``shift_labels[t]`` is what position ``t``
predicts; -100 on padding and every document's last position), which stay right when sharded: pass them, not
``labels``, to the loss of a sharded batch (transformers' causal-LM loss takes ``shift_labels=``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from packing.core._arrays import offsets_of, ranges
from packing.core._samples import IGNORE_INDEX
from packing.core._thd import padded_lengths, shard_indices
from packing.errors import SettingError

Int64Array = npt.NDArray[np.int64]
THD_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "cu_seqlens_padded", "max_length_q", "max_length_k")
"""The boundary entries of a THD batch (whole on every context-parallel rank, as Transformer Engine takes them)."""


def thd_pad(
    tokens: Int64Array,
    labels: Int64Array,
    weights: npt.NDArray[np.float32] | None,
    lengths: Int64Array,
    multiple: int,
    pad_id: int,
) -> tuple[Int64Array, Int64Array, npt.NDArray[np.float32] | None, Int64Array]:
    """Every document (``lengths``, back to back in ``tokens``) followed by padding up to a multiple of
    ``multiple``: the pad id, label -100, weight 0. Returns the padded tokens, labels, weights and lengths.
    O(T).

    >>> t, l, w, n = thd_pad(np.array([5, 6, 7]), np.array([-100, 6, -100]), None, np.array([2, 1]), 4, 0)
    >>> t.tolist(), l.tolist(), n.tolist()
    ([5, 6, 0, 0, 7, 0, 0, 0], [-100, 6, -100, -100, -100, -100, -100, -100], [4, 4])
    """
    padded = padded_lengths(lengths, multiple)
    place = ranges(offsets_of(padded)[:-1], lengths)
    total = int(padded.sum())
    out_tokens = np.full(total, pad_id, dtype=np.int64)
    out_tokens[place] = tokens
    out_labels = np.full(total, IGNORE_INDEX, dtype=np.int64)
    out_labels[place] = labels
    out_weights = None
    if weights is not None:
        out_weights = np.zeros(total, dtype=np.float32)
        out_weights[place] = weights
    return out_tokens, out_labels, out_weights, padded


def shifted(values: npt.NDArray[Any], lengths: Int64Array, fill: float) -> npt.NDArray[Any]:
    """``values`` moved one position earlier within each document (``lengths``, back to back), ``fill`` at
    every document's last position: the target of each position. O(T).

    >>> shifted(np.array([-100, 2, 3, -100, 5]), np.array([3, 2]), -100).tolist()
    [2, 3, -100, 5, -100]
    """
    out = np.full_like(values, fill)
    out[:-1] = values[1:]
    out[offsets_of(lengths)[1:] - 1] = fill
    return out


def thd_boundaries(real: Int64Array, padded: Int64Array, tensors: Callable[[npt.NDArray[Any]], Any]) -> dict[str, Any]:
    """The boundary entries of a THD batch: ``cu_seq_lens_q`` = ``cu_seq_lens_k`` (int32, real lengths),
    ``cu_seqlens_padded`` (int32, padded lengths) and ``max_length_q`` = ``max_length_k`` (the longest padded
    document, the span attention covers). O(documents)."""
    cu_real, cu_padded = offsets_of(real, np.int32), offsets_of(padded, np.int32)
    longest = int(padded.max())
    return {
        "cu_seq_lens_q": tensors(cu_real),
        "cu_seq_lens_k": tensors(cu_real.copy()),
        "cu_seqlens_padded": tensors(cu_padded),
        "max_length_q": longest,
        "max_length_k": longest,
    }


def context_parallel_shard(batch: Mapping[str, Any], cp_rank: int, cp_size: int) -> dict[str, Any]:
    """Context-parallel rank ``cp_rank``'s share of a THD batch (``collate(rows, context_parallel_size=cp_size)``):
    chunks ``cp_rank`` and ``2·cp_size − 1 − cp_rank`` of every padded document, taken from every per-token
    entry of the batch (``input_ids``, ``labels``, ``shift_labels``, ``position_ids``, ``seq_idx``, ``loss_weights``,
    ...: arrays or tensors of shape ``(1, T)``); the boundary lists and lengths (``cu_seq_lens_q``,
    ``cu_seqlens_padded``, ``max_length_q``, ...) are kept whole, as Transformer Engine takes them on every rank.
    Position ids keep their values (each token's place in its document). The shares of all ranks hold every token
    once. A batch whose documents ``2·cp_size`` does not divide is refused. O(T / cp_size) per entry.

    >>> from packing.torch import collate
    >>> batch = collate([[1, 2, 3], [4, 5, 6, 7, 8]], context_parallel_size=2)
    >>> batch["input_ids"].tolist(), batch["cu_seqlens_padded"].tolist(), batch["cu_seq_lens_q"].tolist()
    ([[1, 2, 3, 0, 4, 5, 6, 7, 8, 0, 0, 0]], [0, 4, 12], [0, 3, 8])
    >>> shard = context_parallel_shard(batch, 0, 2)
    >>> shard["input_ids"].tolist(), shard["position_ids"].tolist()
    ([[1, 0, 4, 5, 0, 0]], [[0, 3, 0, 1, 6, 7]])
    >>> context_parallel_shard(batch, 1, 2)["shift_labels"].tolist()
    [[3, -100, 7, 8, -100, -100]]
    """
    if not isinstance(batch, Mapping) or "cu_seqlens_padded" not in batch or "input_ids" not in batch:
        raise SettingError(
            "batch", "a THD batch with input_ids and cu_seqlens_padded (collate(..., context_parallel_size=cp))", batch
        )
    cu = batch["cu_seqlens_padded"]
    cu_values = cu.detach().cpu().numpy() if isinstance(cu, torch.Tensor) else np.asarray(cu)
    total = int(batch["input_ids"].shape[-1])
    if int(cu_values.reshape(-1)[-1]) != total:
        raise SettingError("cu_seqlens_padded", f"a last entry equal to the batch's {total} tokens", int(cu_values[-1]))
    index = shard_indices(cu_values, cp_rank, cp_size)
    shard: dict[str, Any] = {}
    as_tensor: torch.Tensor | None = None
    for name, value in batch.items():
        if name in THD_KEYS or not hasattr(value, "shape") or len(value.shape) == 0 or value.shape[-1] != total:
            shard[name] = value
        elif isinstance(value, torch.Tensor):
            if as_tensor is None or as_tensor.device != value.device:
                as_tensor = torch.from_numpy(index).to(value.device)
            shard[name] = value.index_select(-1, as_tensor)
        else:
            shard[name] = np.asarray(value)[..., index]
    return shard
