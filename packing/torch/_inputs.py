"""A batch of units as a model's inputs: the keyword arguments of ``model(**inputs)`` that keep every completion
apart, in the form the model's attention implementation takes. Internal: the public names are in ``packing.torch``.

transformers passes a 4-D attention mask through unchanged (``masking_utils``: a mask of four dimensions, a tensor
or a FlexAttention ``BlockMask``, is "already prepared"), so the mask must already be in the form the attention
kernel takes: eager attention adds it to its scores and SDPA takes it as ``attn_mask`` (an additive float mask in
the query's dtype), FlexAttention takes a ``BlockMask``. Flash-attention kernels take no mask at all: they keep
sequences apart by ``cu_seq_lens`` (one interval of the flattened tokens each), which cannot say that two
completions after one shared prompt must not see each other.

>>> import torch
>>> from packing.torch._collate import collate
>>> pairs = [{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}]
>>> inputs = model_inputs(collate(pairs, share_prompt=True), "sdpa", dtype=torch.bfloat16)
>>> sorted(inputs), inputs["attention_mask"].dtype, tuple(inputs["attention_mask"].shape)
(['attention_mask', 'input_ids', 'position_ids', 'use_cache'], torch.bfloat16, (1, 1, 5, 5))
>>> flat = model_inputs(collate(pairs), "flash_attention_2")
>>> flat["cu_seq_lens_q"].tolist(), flat["max_length_q"], flat["use_cache"]
([0, 3, 7], 4, False)
>>> model_inputs(collate(pairs, share_prompt=True), "flash_attention_2")
Traceback (most recent call last):
...
packing.errors.SettingError: attn_implementation: expected eager, sdpa or flex_attention for completions that share a prompt (unit 0's 2 do: flash-attention's cu_seq_lens cannot keep them from each other; or collate with share_prompt=False), got 'flash_attention_2' (str)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from packing.errors import SettingError
from packing.torch._pairs_groups_training import attention_mask, batch_column, block_mask, shared_documents

ADDITIVE = ("eager", "sdpa")
"""The implementations that take the 4-D additive mask (``(B, 1, T, T)``, 0 where a token may attend, the dtype's
minimum elsewhere) in the model's dtype; a model whose implementation is unset (None) attends eagerly."""
FLEX = "flex_attention"
"""The implementation that takes a FlexAttention ``BlockMask``."""
KNOWN = "eager, sdpa, flex_attention or a flash-attention one (flash_attention_2, flash_attention_3, a flash kernel)"
"""What an implementation may be, as the errors say it."""


def _is_flash(name: str) -> bool:
    """Whether ``name`` is a flash-attention implementation: transformers' test (``is_flash_attention_requested``),
    ``flash`` in the name (``flash_attention_2``, ``flash_attention_3``, ``kernels-community/flash-attn3``). O(1)."""
    return "flash" in name


def implementation(model: Any) -> str | None:
    """The attention implementation of ``model``: a model (its ``config``), a config (``_attn_implementation``)
    or the name itself; None for a model whose implementation is unset. O(1)."""
    if isinstance(model, str):
        return model
    config = getattr(model, "config", model)
    if not hasattr(config, "_attn_implementation"):
        expected = "a transformers model (a wrapper's .module), its config or an attn_implementation name"
        raise SettingError("model", expected, f"<{type(model).__name__}>")
    name = config._attn_implementation
    if name is not None and not isinstance(name, str):
        raise SettingError("model", f"a config whose _attn_implementation is a name ({KNOWN})", name)
    return name


def sliding_window(model: Any) -> int | None:
    """The sliding window a layer of the model attends within, or None: ``config.sliding_window`` where a layer
    slides (one of ``layer_types`` is ``sliding_attention``, as in Qwen2 and Gemma 3; without ``layer_types``,
    every layer unless ``use_sliding_window`` is False, as in Mistral). A name has none. O(layers)."""
    config = None if isinstance(model, str) else getattr(model, "config", model)
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool):
        return None
    layers = getattr(config, "layer_types", None)
    slides = "sliding_attention" in layers if layers is not None else getattr(config, "use_sliding_window", True)
    return window if slides else None


def _check_window(model: Any, columns: Mapping[str, torch.Tensor], name: str) -> None:
    """Refuse a mask for a model with a sliding window that some sequence of the batch is longer than: transformers
    passes a 4-D mask (or a ``BlockMask``) to every layer unchanged, so a sliding layer would see past its window.
    O(T)."""
    window = sliding_window(model)
    longest = int(columns["position_ids"].max()) + 1 if columns["position_ids"].numel() else 0
    if window is not None and longest > window:
        raise SettingError(
            "model",
            f"sequences of at most its sliding window's {window} tokens with {name} (a mask replaces the window in "
            "every layer; flash-attention applies it)",
            f"<a sequence of {longest} tokens>",
        )


def _placement(model: Any, dtype: torch.dtype | None, device: Any) -> tuple[torch.dtype | None, Any]:
    """The mask's dtype and the inputs' device: those given, else the model's (its first floating parameter's
    dtype, its first parameter's device; a name or a config has neither). O(parameters before the first)."""
    if isinstance(model, torch.nn.Module):
        first = next(model.parameters(), None)
        if dtype is None:
            dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        if device is None and first is not None:
            device = first.device
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise SettingError("dtype", "a floating torch dtype (the model's: torch.float32, torch.bfloat16, ...)", dtype)
    return dtype, device


def _columns(batch: Any, device: Any) -> dict[str, torch.Tensor]:
    """The columns of ``batch`` a model's inputs are made of (ids, positions, units, documents, completions; any
    batch :func:`~packing.torch._pairs_groups_training.batch_column` reads) as 2-D int64 tensors on ``device`` (None: where they
    are). O(T)."""
    names = ("input_ids", "position_ids", "unit_ids", "document_ids", "completion_ids")
    return {name: batch_column(batch, name).to(device=device, dtype=torch.int64) for name in names}


def _flash_kwargs(document: torch.Tensor) -> dict[str, Any]:
    """flash-attention's varlen boundaries of a batch: every document one interval of the flattened rows (each row
    starts one; padding, document -1, is a sequence of one token each), as ``DataCollatorWithFlattening`` gives
    them for one row, and for several rows too (transformers reads boundaries from ``position_ids`` only for one
    row). O(B·T)."""
    length = document.shape[-1]
    flat = document.reshape(-1)
    starts = torch.ones_like(flat, dtype=torch.bool)
    starts[1:] = (flat[1:] != flat[:-1]) | (flat[1:] < 0)
    starts[::length] = True
    ends = torch.tensor([flat.numel()], device=flat.device)
    cu = torch.cat((torch.nonzero(starts)[:, 0], ends)).to(torch.int32)
    longest = int(cu.diff().max())
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu.clone(), "max_length_q": longest, "max_length_k": longest}


def model_inputs(
    batch: Any, model: Any, *, dtype: torch.dtype | None = None, device: str | torch.device | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``model(**inputs)`` for a batch of units (``collate``'s, ``collate_fixed``'s, a
    ``PackedBatch``), made for the model's attention implementation so that every completion's logits are its
    sequence's alone, in either layout (``share_prompt``): ``input_ids``, ``position_ids``, ``use_cache=False``
    (a training forward builds no cache; with one, transformers would also skip its packed-sequence detection), and

    - ``eager``, ``sdpa`` (or an unset implementation): ``attention_mask``, the 4-D additive mask ``(B, 1, T, T)``
      of :func:`~packing.torch._pairs_groups_training.attention_mask` in the model's dtype (the dtype its kernels compute in), which
      transformers passes unchanged to the kernel;
    - ``flex_attention``: ``attention_mask``, a FlexAttention ``BlockMask`` (:func:`~packing.torch._pairs_groups_training.block_mask`);
    - a flash-attention implementation (``flash_attention_2``, ``flash_attention_3``, a hub kernel such as
      ``kernels-community/flash-attn3``): ``cu_seq_lens_q``, ``cu_seq_lens_k``, ``max_length_q`` and
      ``max_length_k``, one sequence a document (what the position ids say for one row, and right for several
      rows, where transformers' own detection stops). Completions that share a prompt are refused
      (``SettingError``): flash-attention keeps sequences apart only by their intervals, and a shared prompt's
      completions are one interval; collate them with ``share_prompt=False``.

    A mask replaces a model's sliding window in every layer (transformers builds the window into the masks it
    makes, never into one it is given): for a model with one (Mistral, Gemma 3, Qwen2 with ``use_sliding_window``),
    a batch with a sequence longer than the window is refused for eager, SDPA and FlexAttention (flash-attention
    applies the window itself). Given a name or a config without ``sliding_window``, nothing is known of a window.

    ``model`` is the model (its ``config._attn_implementation``, its dtype and device), its config, or an
    implementation's name; ``dtype`` (the mask's, default the model's; needed with a name or a config for eager
    and SDPA) and ``device`` (default the model's, else the batch's) override it. The mask is built on the
    device. ``labels`` are left out: the loss is read from the logits (``completion_logps``,
    ``preference_logps``). O(B·T²) for a mask (``BlockMask``: O(B·T²) to build, O(B·T²/128²) kept), O(B·T)
    for flash-attention.

    >>> from packing.torch._collate import collate
    >>> group = [{"prompt": [1], "completions": [[2], [3, 4]]}]
    >>> mask = model_inputs(collate(group, share_prompt=True), "eager", dtype=torch.float64)["attention_mask"]
    >>> (mask[0, 0] == 0).int().tolist()   # each completion sees the prompt and itself
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]
    >>> model_inputs(collate(group), "sdpa")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: dtype: expected the model's floating dtype (given an implementation's name or a config, not the model), got None (NoneType)
    >>> model_inputs(collate(group), "paged|eager")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: attn_implementation: expected eager, sdpa, flex_attention or a flash-attention one (flash_attention_2, flash_attention_3, a flash kernel), got 'paged|eager' (str)
    """
    name = implementation(model)
    flash = name is not None and _is_flash(name)
    if not flash and name is not None and name not in (*ADDITIVE, FLEX):
        raise SettingError("attn_implementation", KNOWN, name)
    dtype, device = _placement(model, dtype, device)
    columns = _columns(batch, device)
    inputs: dict[str, Any] = {"input_ids": columns["input_ids"], "position_ids": columns["position_ids"]}
    if flash:
        _refuse_shared(columns, str(name))
        inputs.update(_flash_kwargs(columns["document_ids"]))
    elif name == FLEX:
        _check_window(model, columns, name)
        inputs["attention_mask"] = block_mask(columns, device)
    else:
        _check_window(model, columns, name or "eager")
        if dtype is None:
            expected = "the model's floating dtype (given an implementation's name or a config, not the model)"
            raise SettingError("dtype", expected, None)
        inputs["attention_mask"] = attention_mask(columns, dtype)
    inputs["use_cache"] = False
    return inputs


def _refuse_shared(columns: Mapping[str, torch.Tensor], name: str) -> None:
    """Refuse a flash-attention implementation ``name`` for a batch in which completions share a prompt (a
    document of a row holds several: :func:`~packing.torch._pairs_groups_training.shared_documents`), naming the first such unit.
    O(T log T)."""
    document = columns["document_ids"]
    rows, documents, counts = shared_documents(document, columns["completion_ids"])
    if len(rows):
        row, first = int(rows[0]), documents[0]
        unit = int(columns["unit_ids"][row][document[row] == first][0])
        raise SettingError(
            "attn_implementation",
            f"eager, sdpa or flex_attention for completions that share a prompt (unit {unit}'s {int(counts[0])} "
            "do: flash-attention's cu_seq_lens cannot keep them from each other; or collate with share_prompt=False)",
            name,
        )
