"""Internal: :class:`PrefixTree`, token rows stored as a trie (every shared prefix once), and the block-sized
forests of :func:`tree_blocks`.

A stored token (a node) has its id, its parent (the node before it in every row through it; -1 for a row's first
token), its depth (its position in those rows: the model's position id) and its loss weight (how many rows train
on it). A row is the path from a root to its last node; rows that start alike share the nodes of their common
prefix, and rows equal to each other share every node (their trained tokens then weigh twice).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, row_of
from packing.errors import SampleError, SettingError
from packing.reading._reader import read_rows

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class PrefixTree:
    """Token rows stored as a prefix tree (a forest when rows start differently): ``tokens``, ``parents``,
    ``depths`` and ``weights`` of every stored token (node), in depth-first order (a parent before its children),
    and every row as the nodes of its tokens (``row_nodes[row_offsets[r]:row_offsets[r + 1]]``) with its loss mask
    (``row_loss``, 0 where the row does not train the token; a row's first token is never trained, nothing
    predicts it). ``row_ids`` number the rows in the input (``0..rows-1`` for :meth:`from_rows`; across trees in
    the blocks of :func:`tree_blocks`). Built by :meth:`from_rows`, joined by :meth:`join`; not checked again.

    >>> tree = PrefixTree.from_rows([[1, 2, 3], [1, 2, 4, 5], [1, 6]])
    >>> tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist()
    ([1, 2, 3, 4, 5, 6], [-1, 0, 1, 1, 3, 0], [0, 1, 2, 2, 3, 1])
    >>> tree.weights.tolist(), tree.size, tree.unshared_size
    ([0, 2, 1, 1, 1, 1], 6, 9)
    >>> tree.row(1).tolist()
    [0, 1, 3, 4]
    """

    tokens: Int64Array
    parents: Int64Array
    depths: Int64Array
    weights: Int64Array
    row_nodes: Int64Array
    row_offsets: Int64Array
    row_loss: npt.NDArray[np.int8]
    row_ids: Int64Array

    @property
    def size(self) -> int:
        """Tokens stored (the trie's node count). O(1)."""
        return len(self.tokens)

    @property
    def num_rows(self) -> int:
        """Rows stored. O(1)."""
        return len(self.row_offsets) - 1

    @property
    def lengths(self) -> Int64Array:
        """Every row's token count. O(rows)."""
        return np.diff(self.row_offsets)

    @property
    def unshared_size(self) -> int:
        """Tokens the rows take one after the other (each prefix stored once per row). O(1)."""
        return int(self.row_offsets[-1])

    def row(self, row: int) -> Int64Array:
        """The nodes of row ``row``'s tokens (its index here, not its ``row_ids`` number), in order. O(its length)."""
        return self.row_nodes[self.row_offsets[row] : self.row_offsets[row + 1]]

    @classmethod
    def from_rows(cls, rows: Iterable[Any], completion_only_loss: bool = True) -> PrefixTree:
        """The prefix tree of token ``rows`` in any plain form :func:`packing.read_rows` reads (token ids,
        ``{"input_ids", "loss_mask"}`` or TRL's mask names, ``labels`` equal to the ids where trained,
        ``{"prompt", "completion"}`` trained on the completion unless ``completion_only_loss=False``): each
        shared prefix stored once, a node's weight the number of rows whose loss mask trains it, so a row's
        completion weighs in that row only. Rows keep their order (``row_ids`` 0, 1, ...). Pairs and groups are
        refused: give their whole rows (prompt and completion in each); so are rows of lengths only and labels
        other than the ids. O(total tokens · log rows) (rows sorted to find each one's longest shared prefix).

        >>> tree = PrefixTree.from_rows([{"prompt": [7, 8], "completion": [9]}, {"prompt": [7, 8], "completion": [5, 6]}])
        >>> tree.tokens.tolist(), tree.weights.tolist(), tree.row_loss.tolist()
        ([7, 8, 5, 6, 9], [0, 0, 1, 1, 1], [0, 0, 1, 0, 0, 1, 1])
        >>> PrefixTree.from_rows([{"prompt": [1], "completions": [[2], [3]]}])
        Traceback (most recent call last):
        ...
        packing.errors.SettingError: rows: expected token rows (a pair or a group: give its whole rows, the prompt in each), got <pairs or groups>
        """
        samples = read_rows(rows, completion_only_loss)
        if samples.units is not None:
            raise SettingError("rows", "token rows (a pair or a group: give its whole rows, the prompt in each)",
                               "<pairs or groups>")  # fmt: skip
        if samples.tokens is None:
            raise SettingError("rows", "token rows (ids to store)", "<lengths only>")
        if samples.labels is not None:
            raise SettingError("rows", "labels equal to the ids where trained (a tree stores each token once)",
                               "<other labels>")  # fmt: skip
        tokens = samples.tokens.astype(np.int64)
        offsets = samples.offsets.astype(np.int64)
        loss = np.array(samples.loss_mask, dtype=np.int8)
        loss[offsets[:-1][np.diff(offsets) > 0]] = 0  # a row's first token: nothing predicts it
        return _built(tokens, offsets, loss)

    @staticmethod
    def join(trees: Sequence[PrefixTree]) -> PrefixTree:
        """The forest of ``trees`` one after the other (nodes and rows renumbered, ``row_ids`` kept). O(their
        nodes + tokens).

        >>> joined = PrefixTree.join([PrefixTree.from_rows([[1, 2]]), PrefixTree.from_rows([[3, 4], [3, 5]])])
        >>> joined.parents.tolist(), joined.row_nodes.tolist(), joined.row_ids.tolist()
        ([-1, 0, -1, 2, 2], [0, 1, 2, 3, 2, 4], [0, 0, 1])
        """
        starts = offsets_of([tree.size for tree in trees])
        row_starts = offsets_of([tree.unshared_size for tree in trees])
        parents = [np.where(t.parents >= 0, t.parents + s, -1) for t, s in zip(trees, starts.tolist(), strict=False)]
        return PrefixTree(
            tokens=_joined([tree.tokens for tree in trees]),
            parents=_joined(parents),
            depths=_joined([tree.depths for tree in trees]),
            weights=_joined([tree.weights for tree in trees]),
            row_nodes=_joined([tree.row_nodes + s for tree, s in zip(trees, starts.tolist(), strict=False)]),
            row_offsets=np.concatenate(
                [[0]] + [t.row_offsets[1:] + s for t, s in zip(trees, row_starts.tolist(), strict=False)]
            ).astype(np.int64),
            row_loss=np.concatenate([tree.row_loss for tree in trees]).astype(np.int8) if trees else _no(np.int8),
            row_ids=_joined([tree.row_ids for tree in trees]),
        )

    def numbered(self, first: int) -> PrefixTree:
        """The same tree, its rows numbered ``first``, ``first + 1``, ... (their places among every tree's
        rows). O(rows)."""
        ids = np.arange(first, first + self.num_rows, dtype=np.int64)
        return PrefixTree(self.tokens, self.parents, self.depths, self.weights, self.row_nodes, self.row_offsets,
                          self.row_loss, ids)  # fmt: skip


def _no(dtype: Any) -> npt.NDArray[Any]:
    return np.zeros(0, dtype=dtype)


def _joined(parts: Sequence[Int64Array]) -> Int64Array:
    return np.concatenate(parts).astype(np.int64) if parts else _no(np.int64)


def _shared(before: Int64Array, after: Int64Array) -> int:
    """The length of the longest common prefix of two rows. O(the shorter)."""
    common = min(len(before), len(after))
    different = np.flatnonzero(before[:common] != after[:common])
    return int(different[0]) if len(different) else common


def _built(tokens: Int64Array, offsets: Int64Array, loss: npt.NDArray[np.int8]) -> PrefixTree:
    """The trie of the rows ``tokens[offsets[r]:offsets[r + 1]]``: in lexicographic order each row shares with
    the row before it its longest prefix shared with any row before it, so it adds its tokens after that prefix
    as new nodes (depth-first order). O(total tokens · log rows)."""
    rows = [tokens[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    order = sorted(range(len(rows)), key=lambda r: rows[r].tolist())
    row_nodes = np.empty(len(tokens), dtype=np.int64)
    node_tokens, parents, depths = [], [], []
    size = 0
    before, path = _no(np.int64), _no(np.int64)
    for r in order:
        ids = rows[r]
        shared = _shared(before, ids)
        new = np.arange(size, size + len(ids) - shared, dtype=np.int64)
        node_tokens.append(ids[shared:])
        depths.append(np.arange(shared, len(ids), dtype=np.int64))
        parents.append(np.concatenate([[path[shared - 1] if shared else -1], new[:-1]])[: len(new)])
        path = np.concatenate([path[:shared], new])
        row_nodes[offsets[r] : offsets[r + 1]] = path
        size += len(new)
        before = ids
    trained = row_nodes[loss.astype(bool)]
    return PrefixTree(
        tokens=_joined(node_tokens),
        parents=_joined(parents),
        depths=_joined(depths),
        weights=np.bincount(trained, minlength=size).astype(np.int64),
        row_nodes=row_nodes,
        row_offsets=offsets,
        row_loss=loss,
        row_ids=np.arange(len(rows), dtype=np.int64),
    )


def _too_long(tree: PrefixTree, number: int, max_seq_length: int) -> SampleError:
    """The error for tree ``number``, more than ``max_seq_length`` nodes: it names the first row (by its
    ``row_ids`` number) with which the tree's rows so far store more. O(tree's tokens)."""
    _, first = np.unique(tree.row_nodes, return_index=True)
    first_row = row_of(tree.lengths)[first]
    stored = np.cumsum(np.bincount(first_row, minlength=tree.num_rows))
    row = int(np.flatnonzero(stored > max_seq_length)[0])
    expected = (f"a prefix tree of at most max_seq_length={max_seq_length:,} tokens (tree {number} is kept whole in "
                "one block, a row never split)")  # fmt: skip
    got = f"<{int(stored[row]):,} tokens stored by tree {number}'s rows up to this one>"
    return SampleError(int(tree.row_ids[row]), None, None, expected, got)


def tree_blocks(trees: Sequence[PrefixTree], max_seq_length: int) -> list[PrefixTree]:
    """``trees`` placed whole into blocks of at most ``max_seq_length`` stored tokens, first fit in input order
    (each tree into the first block with room, else a new block): every block the forest of its trees (in
    input order, :meth:`PrefixTree.join`), its rows numbered across all trees in input order (tree 0's rows
    0..k-1, tree 1's next, ...; ``row_ids``). A row is never split, nor a tree: one that stores more than
    ``max_seq_length`` tokens is refused, the error naming the row with which it grows too long (a
    ``SampleError`` whose ``sample`` is that row's number). O(trees × blocks + tokens).

    >>> trees = [PrefixTree.from_rows([[1, 2, 3], [1, 2, 4]]), PrefixTree.from_rows([[5, 6]]),
    ...          PrefixTree.from_rows([[7, 8, 9]])]
    >>> [(block.size, block.row_ids.tolist()) for block in tree_blocks(trees, 6)]
    [(6, [0, 1, 2]), (3, [3])]
    >>> tree_blocks([PrefixTree.from_rows([[5, 6]]), PrefixTree.from_rows([[1, 2, 3], [1, 2, 4, 5]])], 4)
    Traceback (most recent call last):
    ...
    packing.errors.SampleError: sample 2: expected a prefix tree of at most max_seq_length=4 tokens (tree 1 is kept whole in one block, a row never split), got <5 tokens stored by tree 1's rows up to this one>
    """
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 1:
        raise SettingError("max_seq_length", "a positive integer", max_seq_length)
    numbered, first = [], 0
    for number, tree in enumerate(trees):
        if not isinstance(tree, PrefixTree):
            raise SettingError("trees", "PrefixTree objects (PrefixTree.from_rows)", f"<{type(tree).__name__}>")
        numbered.append(tree.numbered(first))
        if tree.size > max_seq_length:
            raise _too_long(numbered[-1], number, int(max_seq_length))
        first += tree.num_rows
    members: list[list[PrefixTree]] = []
    free: list[int] = []
    for tree in numbered:
        place = next((b for b, room in enumerate(free) if room >= tree.size), None)
        if place is None:
            members.append([])
            free.append(int(max_seq_length))
            place = len(free) - 1
        members[place].append(tree)
        free[place] -= tree.size
    return [PrefixTree.join(block) for block in members]
