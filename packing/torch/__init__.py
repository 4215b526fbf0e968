"""Packing inside a PyTorch training loop: a batch sampler across data-parallel ranks, padding-free collates,
and a dataset over packed blocks.

``import packing`` never imports torch; ``import packing.torch`` does (``pip install torch``).

- ``PackingSampler(lengths, max_seq_length)``: a batch sampler; each step yields the sample indices of this rank's
  packed block. Every sample once per epoch across ranks, the same number of steps on every rank, no empty block
  unless there are fewer samples than ranks × steps (the ranks left over take an empty step, which trains nothing),
  and the blocks of one step dealt so that the slowest rank's compute is close to the mean.
- ``collate(rows)``: the padding-free batch of ``transformers.DataCollatorWithFlattening`` (one row of all tokens,
  ``position_ids`` restarting per document; optionally flash-attention boundaries and ``seq_idx``; its
  ``separator_id``, ``position_ids_start`` and ``return_tensors``, and TRL's ``pad_to_multiple_of``). ``collate_fixed(max_seq_length)``: blocks
  of exactly ``max_seq_length`` tokens (static shapes), also without ``attention_mask``.
- ``collate(rows, context_parallel_size=cp)``: the THD layout of context parallelism (every document padded to a
  multiple of ``2·cp``, ``cu_seq_lens_q`` and ``cu_seqlens_padded``); ``context_parallel_shard(batch, rank, cp)``
  one context-parallel rank's share of it.
- Preference pairs and completion groups: ``collate(rows, share_prompt=...)`` keeps each whole (a 4-D
  ``attention_mask`` with a shared prompt), ``completion_logps(logits, batch)`` and ``preference_logps(logits,
  batch)`` read every completion's log-probability from one packed forward; ``attention_mask``, ``mask_mod`` and
  ``block_mask`` build a batch's mask for eager/SDPA or FlexAttention (``packing.torch._pairs_groups_training``);
  ``model_inputs(batch, model)`` gives the keyword arguments of ``model(**inputs)`` for the model's attention
  implementation (the 4-D mask in its dtype, a ``BlockMask``, or flash-attention's boundaries).
- Prefix trees (``packing.trees``): ``tree_inputs(blocks, model)`` a model's inputs of prefix-tree blocks,
  ``completion_logps(logits, blocks, per_token=...)`` every row's log-probability, summed or per token.
- ``PackedDataset(batch_or_path)``: a map-style dataset of packed blocks, from a ``PackedBatch`` or a packed Parquet
  file read one row group at a time through a memory map, or any other layout the auditor recognises, converted.

>>> import packing.torch as pt
>>> lengths = [5, 3, 2, 4, 6, 1]
>>> sampler = pt.PackingSampler(lengths, 6, num_replicas=2, rank=0, seed=1)
>>> len(sampler), sum(len(b) for b in sampler) > 0
(2, True)
>>> batch = pt.collate([[1, 2, 3], {"prompt": [4], "completion": [5, 6]}], return_flash_attn_kwargs=True)
>>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
([[1, 2, 3, 4, 5, 6]], [[-100, 2, 3, -100, 5, 6]], [[0, 1, 2, 0, 1, 2]])
>>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"]
([0, 3, 6], 3)
"""

from __future__ import annotations

try:
    import torch  # noqa: F401 - the one check that PyTorch is installed
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError("packing.torch needs PyTorch: pip install torch") from error

from packing.torch._collate import StepDataset as StepDataset
from packing.torch._collate import StepIndices as StepIndices
from packing.torch._collate import StepLoader as StepLoader
from packing.torch._collate import collate as collate
from packing.torch._collate import collate_fixed as collate_fixed
from packing.torch._collate import weighted_loss as weighted_loss
from packing.torch._context_parallel import context_parallel_shard as context_parallel_shard
from packing.torch._dataset import BLOCK_COLUMNS as BLOCK_COLUMNS
from packing.torch._dataset import PackedDataset as PackedDataset
from packing.torch._inputs import model_inputs as model_inputs
from packing.torch._pairs_groups_training import attention_mask as attention_mask
from packing.torch._pairs_groups_training import block_mask as block_mask
from packing.torch._pairs_groups_training import mask_mod as mask_mod
from packing.torch._pairs_groups_training import preference_logps as preference_logps
from packing.torch._sampler import PackingSampler as PackingSampler
from packing.torch._sampler import Pieces as Pieces
from packing.torch._schedule import LINEAR_COST_PER_TOKEN as LINEAR_COST_PER_TOKEN
from packing.torch._schedule import CostFunction as CostFunction
from packing.torch._schedule import Schedule as Schedule
from packing.torch._schedule import build_schedule as build_schedule
from packing.torch._schedule import default_cost as default_cost
from packing.torch._trees import completion_logps as completion_logps
from packing.torch._trees import tree_inputs as tree_inputs

__all__ = [
    "BLOCK_COLUMNS",
    "LINEAR_COST_PER_TOKEN",
    "CostFunction",
    "PackedDataset",
    "PackingSampler",
    "Pieces",
    "Schedule",
    "StepDataset",
    "StepIndices",
    "StepLoader",
    "attention_mask",
    "block_mask",
    "build_schedule",
    "collate",
    "collate_fixed",
    "completion_logps",
    "context_parallel_shard",
    "default_cost",
    "mask_mod",
    "model_inputs",
    "preference_logps",
    "tree_inputs",
    "weighted_loss",
]
