"""Prefix trees of token rows: rows that share prefixes (multi-turn conversations that branch, agent trajectories
up to a tool call, a GRPO group's completions after their prompt) stored as a trie, every shared prefix once.
Imports nothing of the library but ``packing.reading``, ``packing.core`` and ``packing.errors``; torch only when a
mask is asked for in a torch dtype.

Each stored token keeps its parent, its depth (its position id: where it stands in every row through it) and its
loss weight (how many rows train on it), so the weighted loss over the stored tokens equals the loss over the rows
one by one. :func:`tree_blocks` puts whole trees into blocks of ``max_seq_length`` stored tokens; in a block each
token attends to its ancestors and itself only (:func:`ancestor_mask`, :func:`additive_mask`), so every row's
logits are its own. ``packing.torch.tree_inputs`` makes a model's inputs of blocks and
``packing.torch.completion_logps`` reads every row's log-probability (summed, or per token) from one forward. The
modules behind these names are internal.

>>> from packing.trees import PrefixTree, tree_blocks
>>> prompt = [5, 6, 7, 8]
>>> group = PrefixTree.from_rows([{"prompt": prompt, "completion": [c, 9]} for c in (1, 2, 3)])
>>> group.size, group.unshared_size, group.weights.tolist()
(10, 18, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
>>> [block.size for block in tree_blocks([group, group], 24)]
[20]
"""

from packing.trees._masks import additive_mask as additive_mask
from packing.trees._masks import ancestor_mask as ancestor_mask
from packing.trees._masks import tree_arrays as tree_arrays
from packing.trees._tree import PrefixTree as PrefixTree
from packing.trees._tree import tree_blocks as tree_blocks

__all__ = ["PrefixTree", "additive_mask", "ancestor_mask", "tree_arrays", "tree_blocks"]
