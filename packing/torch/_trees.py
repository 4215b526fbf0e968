"""Prefix-tree blocks (``packing.trees``) in a training loop: a model's inputs made of blocks, and every row's
log-probability read from one packed forward. Internal: the public names are in ``packing.torch``.

A stored token is predicted from its parent's position (the token before it in every row through it; a branch's
first token from the last token of the prefix it branches from), so its log-probability is the same in every
row through it: it is computed once per stored token and read by each row that trains it. A row's summed
log-probability, and its per-token values, are then those of the row run alone.

>>> import torch
>>> from packing.trees import PrefixTree, tree_blocks
>>> blocks = tree_blocks([PrefixTree.from_rows([{"prompt": [1, 2], "completion": [3]},
...                                             {"prompt": [1, 2], "completion": [4, 5]}])], 8)
>>> inputs = tree_inputs(blocks, "sdpa", dtype=torch.float32)
>>> inputs["input_ids"].tolist(), inputs["position_ids"].tolist()
([[1, 2, 3, 4, 5]], [[0, 1, 2, 2, 3]])
>>> logits = torch.zeros(1, 5, 8)    # a model that knows nothing: ln(1/8) a token
>>> [round(float(x), 4) for x in completion_logps(logits, blocks)]
[-2.0794, -4.1589]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, overload

import numpy as np
import torch

from packing.core._arrays import row_of
from packing.errors import SettingError
from packing.torch._inputs import implementation, sliding_window
from packing.torch._pairs_groups_training import completion_logps as unit_logps
from packing.trees import PrefixTree, additive_mask, tree_arrays

TREE_ATTENTION = ("eager", "sdpa")
"""The attention implementations that take a prefix tree's 4-D additive mask (an unset one attends eagerly)."""


class TokenLogps(NamedTuple):
    """Every row's log-probabilities from one forward over prefix-tree blocks, rows in input order (their
    ``row_ids``): ``sums`` ``(rows,)`` each row's summed log-probability of its trained tokens; ``tokens`` the
    per-token values, flat, row after row, each row's trained tokens in order; ``rows`` ``(tokens,)`` the row (an
    index of ``sums``) of each value; ``lengths`` ``(rows,)`` each row's trained token count (the completion
    length of GRPO's and DPO's length-normalised losses)."""

    sums: torch.Tensor
    tokens: torch.Tensor
    rows: torch.Tensor
    lengths: torch.Tensor

    def padded(self, fill: float = 0.0) -> torch.Tensor:
        """The per-token values as ``(rows, longest)``, each row's values first and ``fill`` after them (the form
        of TRL's per-token losses; ``arange(longest) < lengths[:, None]`` is its completion mask). O(rows ×
        longest).

        >>> values = TokenLogps(torch.tensor([-3.0, -1.0]), torch.tensor([-1.0, -2.0, -1.0]),
        ...                     torch.tensor([0, 0, 1]), torch.tensor([2, 1]))
        >>> values.padded().tolist()
        [[-1.0, -2.0], [-1.0, 0.0]]
        """
        longest = int(self.lengths.max()) if self.lengths.numel() else 0
        starts = torch.cumsum(self.lengths, 0) - self.lengths
        within = torch.arange(self.tokens.numel(), device=self.tokens.device) - starts[self.rows]
        grid = self.tokens.new_full((len(self.lengths), longest), fill)
        return grid.index_put((self.rows, within), self.tokens)


def _blocks(batch: Any) -> list[PrefixTree] | None:
    """``batch`` as prefix-tree blocks (one, or a sequence of them), else None. O(blocks)."""
    if isinstance(batch, PrefixTree):
        return [batch]
    if isinstance(batch, Sequence) and batch and all(isinstance(block, PrefixTree) for block in batch):
        return list(batch)
    return None


def tree_inputs(
    blocks: PrefixTree | Sequence[PrefixTree],
    model: Any,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    pad_id: int = 0,
) -> dict[str, Any]:
    """The keyword arguments of ``model(**inputs)`` for prefix-tree blocks (``packing.trees.tree_blocks``):
    ``input_ids`` and ``position_ids`` ``(B, T)`` (each token's depth; blocks padded to the longest with
    ``pad_id``), ``attention_mask`` the 4-D additive mask ``(B, 1, T, T)`` in the model's dtype
    (``packing.trees.additive_mask``: each token attends to its ancestors and itself), ``use_cache=False`` (with
    a cache transformers would not take the mask as it is). Eager attention and SDPA run it; flash-attention
    (varlen: each sequence one interval of tokens) cannot keep a tree's branches from each other and is refused,
    as is FlexAttention (not yet made for trees). A model with a sliding window shorter than the deepest row is
    refused too (a given mask replaces the window). ``model`` is the model (its implementation, dtype and
    device), its config or an implementation's name (then ``dtype`` is needed). O(B·T²).

    >>> from packing.trees import PrefixTree
    >>> tree_inputs([PrefixTree.from_rows([[1, 2], [1, 3]])], "flash_attention_2")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: attn_implementation: expected eager or sdpa for prefix-tree blocks (a token attends to its ancestors only; flash-attention's varlen intervals cannot say so), got 'flash_attention_2' (str)
    """
    name = implementation(model)
    if name is not None and name not in TREE_ATTENTION:
        expected = ("eager or sdpa for prefix-tree blocks (a token attends to its ancestors only; flash-attention's "
                    "varlen intervals cannot say so)")  # fmt: skip
        raise SettingError("attn_implementation", expected, name)
    if isinstance(model, torch.nn.Module):
        first = next(model.parameters(), None)
        dtype = dtype or next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        device = device if device is not None or first is None else first.device
    if dtype is None:
        raise SettingError("dtype", "the model's floating dtype (given a name or a config, not the model)", None)
    arrays = tree_arrays(blocks, pad_id=pad_id)
    window = sliding_window(model)
    deepest = int(arrays["position_ids"].max()) + 1 if arrays["position_ids"].size else 0
    if window is not None and deepest > window:
        expected = f"rows of at most its sliding window's {window} tokens (a mask replaces the window)"
        raise SettingError("model", expected, f"<a row of {deepest} tokens>")
    inputs: dict[str, Any] = {name: torch.from_numpy(array).to(device) for name, array in arrays.items()}
    inputs["attention_mask"] = additive_mask(blocks, dtype, device=device)
    inputs["use_cache"] = False
    return inputs


@overload
def completion_logps(logits: torch.Tensor, batch: Any, *, per_token: Literal[False] = False) -> torch.Tensor: ...
@overload
def completion_logps(logits: torch.Tensor, batch: Any, *, per_token: Literal[True]) -> TokenLogps: ...
def completion_logps(logits: torch.Tensor, batch: Any, *, per_token: bool = False) -> torch.Tensor | TokenLogps:
    """Every row's (every completion's) summed log-probability of its trained tokens, from the logits
    ``(B, T, vocab)`` of one packed forward, in input order:

    - ``batch`` prefix-tree blocks (``packing.trees.tree_blocks``, run through :func:`tree_inputs`): one entry per
      row, in the order of the rows' ``row_ids``; each trained token is read at its parent's position, so the
      values are each row's alone. ``per_token=True`` gives a :class:`TokenLogps` (the sums, the per-token values
      flat with their rows, and each row's trained token count; ``.padded()`` for ``(rows, tokens)``).
    - a batch of pairs or groups (``collate``, ``collate_fixed``, a ``PackedBatch`` of them): one entry per
      completion, unit by unit, read at the batch's ``prediction_positions``.

    Differentiable; computed in the logits' dtype, at least float32. O(stored trained tokens × vocab + tokens).

    >>> from packing.trees import PrefixTree
    >>> blocks = [PrefixTree.from_rows([[1, 2, 3], [1, 2, 4, 4]])]
    >>> values = completion_logps(torch.zeros(1, 5, 8), blocks, per_token=True)
    >>> values.lengths.tolist(), values.rows.tolist(), [round(float(x), 4) for x in values.sums]
    ([2, 3], [0, 0, 1, 1, 1], [-4.1589, -6.2383])
    """
    blocks = _blocks(batch)
    if blocks is None:
        if per_token:
            raise SettingError("per_token", "prefix-tree blocks for per-token values (packing.trees)", True)
        return unit_logps(logits, batch)
    if not isinstance(logits, torch.Tensor):
        raise SettingError("logits", "a torch tensor (rows, tokens, vocabulary)", f"<{type(logits).__name__}>")
    longest = max(block.size for block in blocks)
    if logits.ndim != 3 or logits.shape[0] != len(blocks) or logits.shape[1] < longest:
        expected = f"logits of the blocks' shape ({len(blocks)}, {longest}, vocabulary) (rows, tokens)"
        raise SettingError("logits", expected, tuple(logits.shape))
    node_block, node_at, node_token, token_slot, token_row = [], [], [], [], []
    slots = rows = 0
    for b, block in enumerate(blocks):
        trained = np.flatnonzero(block.weights > 0)
        slot = np.full(block.size, -1, dtype=np.int64)
        slot[trained] = np.arange(slots, slots + len(trained))
        node_block.append(np.full(len(trained), b))
        node_at.append(block.parents[trained])
        node_token.append(block.tokens[trained])
        kept = block.row_loss.astype(bool)
        token_slot.append(slot[block.row_nodes[kept]])
        token_row.append(row_of(block.lengths)[kept] + rows)
        slots += len(trained)
        rows += block.num_rows
    numbers = np.concatenate([block.row_ids for block in blocks])
    place = np.empty(rows, dtype=np.int64)
    place[np.argsort(numbers, kind="stable")] = np.arange(rows)
    out_row = place[np.concatenate(token_row)]
    order = np.argsort(out_row, kind="stable")
    ids = torch.from_numpy(np.concatenate(node_token)).to(logits.device)
    if ids.numel() and int(ids.max()) >= logits.shape[-1]:
        expected = f"a score for every token id (the blocks train id {int(ids.max())})"
        raise SettingError("logits", expected, f"<{logits.shape[-1]} scores a position>")
    where = [torch.from_numpy(np.concatenate(part)).to(logits.device) for part in (node_block, node_at)]
    scores = logits[where[0], where[1]].to(torch.promote_types(logits.dtype, torch.float32))
    stored = scores.log_softmax(-1).gather(-1, ids[:, None])[:, 0]
    tokens = stored[torch.from_numpy(np.concatenate(token_slot)[order]).to(logits.device)]
    row = torch.from_numpy(out_row[order]).to(logits.device)
    sums = torch.zeros(rows, dtype=tokens.dtype, device=logits.device).index_add(0, row, tokens)
    if not per_token:
        return sums
    lengths = torch.bincount(row, minlength=rows)
    return TokenLogps(sums, tokens, row, lengths)
