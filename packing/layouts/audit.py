"""Auditing packed datasets: what a file of packed blocks holds, and what is wrong with it.

:func:`audit` reads packed data made by this project or by another tool, recognises its layout, and
checks every invariant that keeps packed documents apart. The layouts (``layout``: ``packing``, ``trl``,
``flattening``, ``torchtune``, ``megatron``, ``segment_ids``) are read by their modules in
:mod:`packing.layouts`, each into one common form (:class:`~packing.layouts.common.PackedLayout`); the checks
below are written once over that form. Files are opened by :mod:`packing.reading._files` (NeMo's ``.npy`` included).

Labels follow the Hugging Face convention everywhere: the model shifts them, so a label at position ``j``
is what the token at ``j - 1`` learns to predict, and a label on a document's first token makes the last
token of the document before it predict it.

Findings (``Finding.kind``), each with a count and the first few ``(block, position)`` cells:

- ``cross_document_label``: a loss that makes a token predict the first token of another document;
- ``position_not_reset``: a document (other than a block's first) whose position ids do not restart at 0;
- ``no_document_boundaries``: a block with nothing that tells its documents apart (count: blocks);
- ``padding_trained``: a loss on padding;
- ``inconsistent_boundaries``: boundary sources that disagree (lengths that overrun their block,
  position ids that jump or restart inside a document, ``cu_seqlens`` / ``seq_idx`` / ``sequence_ids`` /
  segment ids that do not match the documents; in this project's blocks of units, ``document_ids`` that are not
  each document's number in its block, which a mask built from them would follow);
- ``all_ones_attention_mask``: a block of several documents whose 0/1 attention mask lets them see each
  other (count: blocks);
- ``segment_id_reused``: a document whose segment number (``attention_mask`` numbering documents) an earlier
  document of its block has: tokens of equal numbers attend to each other (LLaMA-Factory, Axolotl);
- ``label_mismatch``: a label that is neither -100 nor the token at its position (labels shifted twice);
- ``block_too_long``: a block holding more than ``max_seq_length`` positions (only with ``max_seq_length``);
- ``token_id_out_of_range``: a token id outside 0..2**31 - 1 (no vocabulary is that large; an int32 column
  would wrap it). Ids that do not even fit in int64 (uint64 above 2**63 - 1) are refused with a
  DatasetError instead: every array here is int64, so they cannot be checked at all;
- ``sibling_visible``: in blocks of preference pairs or completion groups (read in any layout with their
  ``unit_ids`` and ``completion_ids`` columns), a completion in the same document as an earlier completion of its
  unit whose positions do not restart at the prompt's end: it can see its sibling. Both layouts read clean: each
  completion its own document (its prompt before it), or the prompt stored once with every completion's positions
  continuing from its end (``share_prompt``, whose attention mask keeps the siblings apart).

A clean dataset has no findings. Everything is vectorized over the flat token arrays: O(tokens + blocks).

>>> import pyarrow as pa
>>> clean = pa.table({"input_ids": [[1, 2, 3, 4]], "seq_lengths": [[3, 1]]})
>>> report = audit(clean)
>>> report.layout, report.num_blocks, report.num_documents, report.findings
('trl', 1, 2, ())
>>> leaky = pa.table({"input_ids": [[1, 2, 3, 4]], "labels": [[-100, 2, 3, 4]], "position_ids": [[0, 1, 0, 1]],
...                   "attention_mask": [[1, 1, 1, 1]]})
>>> [(f.kind, f.count, f.examples) for f in audit(leaky).findings]
[('cross_document_label', 1, ((0, 2),)), ('all_ones_attention_mask', 1, ((0, 2),))]
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import row_of
from packing.core._validation import INT32_MAX, check_integer
from packing.errors import DatasetError, SettingError
from packing.layouts import LAYOUT_TITLES, LAYOUTS, read_layout, takes_layout
from packing.layouts.common import (
    IGNORE_INDEX,
    BoolArray,
    Int64Array,
    PackedLayout,
    Parsed,
    not_block_start,
    row_max,
    starts_of,
)
from packing.reading import _files as files
from packing.reading._content import list_values
from packing.reading._limits import ReadLimits, check_count, limits_of
from packing.reading._rowfiles import repeated, twice

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

__all__ = ["LAYOUTS", "LAYOUT_TITLES", "AuditReport", "Finding", "PackedLayout", "audit", "read_packed", "report_json"]
FINDING_KINDS = (
    "cross_document_label",
    "position_not_reset",
    "no_document_boundaries",
    "padding_trained",
    "inconsistent_boundaries",
    "all_ones_attention_mask",
    "segment_id_reused",
    "label_mismatch",
    "block_too_long",
    "token_id_out_of_range",
    "sibling_visible",
)
"""Every kind of finding, in the order reports list them."""
FINDING_DESCRIPTIONS = {
    "cross_document_label": "a loss on a document's first token: the last token of the document before it "
    "learns to predict it",
    "position_not_reset": "position ids that run on into the next document instead of restarting at 0",
    "no_document_boundaries": "documents concatenated with nothing that tells them apart: attention and labels "
    "cross them",
    "padding_trained": "a loss on padding tokens",
    "inconsistent_boundaries": "document boundaries that disagree between columns (lengths, position ids, "
    "cu_seqlens, segment or sequence ids)",
    "all_ones_attention_mask": "an all-ones attention mask over several documents: a kernel that uses it lets "
    "them attend to each other",
    "segment_id_reused": "a segment number given to two documents of one block: kernels that let equal numbers "
    "attend to each other (LLaMA-Factory, Axolotl) join them",
    "label_mismatch": "labels that are neither -100 nor the token at their position (shifted twice?)",
    "block_too_long": "blocks holding more positions than max_seq_length",
    "token_id_out_of_range": "token ids outside 0..2**31 - 1: no vocabulary has them, and int32 consumers wrap them",
    "sibling_visible": "a completion of a pair or group in the same document as an earlier completion of its unit, "
    "its positions not restarting at its prompt's end: it sees its sibling (a preference or reward leaks)",
}
FINDING_FIXES = {
    "cross_document_label": "set the label of every document's first token to -100",
    "position_not_reset": "restart position ids at 0 at every document",
    "no_document_boundaries": "pack with boundaries (TRL: strategy='bfd'; this project: any strategy), or train "
    "without packing",
    "padding_trained": "set labels to -100 (and the loss mask to 0) on padding",
    "inconsistent_boundaries": "derive every boundary column from the same document lengths",
    "all_ones_attention_mask": "drop the attention mask and pass position ids to a kernel that uses them "
    "(flash-attention varlen, SDPA packed), or number the documents in the mask",
    "segment_id_reused": "number the documents of each block 1, 2, 3, ..., each number once",
    "label_mismatch": "keep labels equal to input_ids (the model shifts them) or -100",
    "block_too_long": "repack with this max_seq_length",
    "token_id_out_of_range": "tokenize again: token ids are indexes into the vocabulary",
    "sibling_visible": "give every completion its own document after its prompt, or store the prompt once with each "
    "completion's positions continuing from its end and the attention mask that keeps them apart (share_prompt)",
}
"""What to change, per kind of finding."""
MAX_EXAMPLES = 5
"""Cells listed per finding."""


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Finding:
    """One kind of problem: how often it occurs and where.

    ``cells`` holds the flat token index of every occurrence (for block-level kinds, one cell per block:
    the evidence); ``examples`` the first few as ``(block, position in block)``.
    """

    kind: str
    count: int
    examples: tuple[tuple[int, int], ...]
    cells: Int64Array = field(repr=False, compare=False)

    @property
    def description(self) -> str:
        """The finding in plain words."""
        return FINDING_DESCRIPTIONS[self.kind]

    @property
    def fix(self) -> str:
        """What to change."""
        return FINDING_FIXES[self.kind]


@dataclass(frozen=True, eq=False)
class AuditReport:
    """What :func:`audit` found. ``efficiency`` = used positions / (blocks × ``max_seq_length``), and ``block_fill``
    each block's used positions / ``max_seq_length``, counting at most ``max_seq_length`` a block (what a longer
    block holds past it is the finding ``block_too_long``): never above 1."""

    source: str
    layout: str
    num_blocks: int
    num_documents: int | None
    tokens: int
    padding_tokens: int
    max_seq_length: int
    max_seq_length_given: bool
    efficiency: float
    block_fill: npt.NDArray[np.float64] = field(repr=False)
    findings: tuple[Finding, ...]
    packed: PackedLayout = field(repr=False)
    """The data read, in the common form."""

    @property
    def clean(self) -> bool:
        """Whether nothing was found."""
        return not self.findings

    def finding(self, kind: str) -> Finding | None:
        """The finding of ``kind``, or ``None``."""
        return next((item for item in self.findings if item.kind == kind), None)

    def counts(self) -> dict[str, int]:
        """``{kind: count}`` of the findings."""
        return {item.kind: item.count for item in self.findings}

    def summary(self) -> dict[str, Any]:
        """The report as plain values (JSON-friendly)."""
        fill = self.block_fill
        return {
            "source": self.source,
            "layout": self.layout,
            "variant": self.packed.variant,
            "num_blocks": self.num_blocks,
            "num_documents": self.num_documents,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "max_seq_length": self.max_seq_length,
            "efficiency": self.efficiency,
            "block_fill": {
                "min": float(fill.min()) if len(fill) else 0.0,
                "median": float(np.median(fill)) if len(fill) else 0.0,
                "max": float(fill.max()) if len(fill) else 0.0,
            },
            "findings": [
                {"kind": item.kind, "count": item.count, "examples": [list(cell) for cell in item.examples]}
                for item in self.findings
            ],
        }

    def describe(self) -> list[str]:
        """The report in plain words, one sentence a line.

        >>> import pyarrow as pa
        >>> for line in audit(pa.table({"input_ids": [[1, 2, 3, 4], [5, 6]]})).describe():
        ...     print(line)
        Layout: TRL pack_dataset (wrapped: no document boundaries).
        2 blocks of up to 4 positions hold 6 tokens and 0 padding tokens: 75.00 % of the positions are used.
        The number of documents is unknown: nothing marks where one ends.
        1 problem found:
        - no_document_boundaries in 2 blocks (first at block 0, position 0; block 1, position 0): documents concatenated with nothing that tells them apart: attention and labels cross them. Fix: pack with boundaries (TRL: strategy='bfd'; this project: any strategy), or train without packing.
        """
        variant = f" ({self.packed.variant})" if self.packed.variant else ""
        lines = [f"Layout: {LAYOUT_TITLES[self.layout]}{variant}."]
        one = self.num_blocks == 1
        lines.append(
            f"{self.num_blocks:,} block{'' if one else 's'} of up to {self.max_seq_length:,} positions "
            f"hold{'s' if one else ''} {self.tokens:,} tokens and {self.padding_tokens:,} padding tokens: "
            f"{100 * self.efficiency:.2f} % of the positions are used."
        )
        if self.num_documents is None:
            lines.append("The number of documents is unknown: nothing marks where one ends.")
        else:
            count = self.num_documents
            lines.append(f"{'It holds' if one else 'They hold'} {count:,} document{'' if count == 1 else 's'}.")
        if self.clean:
            lines.append("No problems found: documents cannot see or predict each other, and padding is not trained.")
            return lines
        lines.append(f"{len(self.findings)} problem{'s' if len(self.findings) != 1 else ''} found:")
        for item in self.findings:
            unit = "blocks" if item.kind in _BLOCK_KINDS else "cells"
            if item.count == 1:
                unit = unit[:-1]
            where = "; ".join(f"block {b}, position {p}" for b, p in item.examples[:2])
            lines.append(
                f"- {item.kind} in {item.count:,} {unit} (first at {where}): {item.description}. Fix: {item.fix}."
            )
        return lines


_BLOCK_KINDS = frozenset({"no_document_boundaries", "all_ones_attention_mask", "block_too_long"})


# ---------------------------------------------------------------- reading


def _to_table(source: Any, name: str | None, limits: ReadLimits) -> files.FileTable:
    """Any accepted source as one table (with the files it came from, if any), within ``limits``
    (:func:`_check_table`)."""
    found = _any_table(source, name, limits)
    double = repeated(found.table.column_names)  # a table given as it is, or a JSON file's rows
    if double is not None:
        raise DatasetError(found.label, None, twice(double))
    _check_table(found.table, found.label, limits)
    return found


def _check_table(table: pa.Table, label: str, limits: ReadLimits) -> None:
    """Refuse a table of more blocks, or a list column of more values, than ``limits`` allows, before its
    columns become arrays. O(columns + chunks)."""
    check_count(label, "blocks", table.num_rows, limits.max_rows)
    for name, column in zip(table.column_names, table.columns, strict=True):
        values = 0 if limits.max_tokens is None else list_values(column)
        if limits.max_tokens is not None and values > limits.max_tokens:
            reason = f"column '{name}' holds {values:,} values, more than the limit of {limits.max_tokens:,}"
            raise DatasetError(label, None, reason)


def _any_table(source: Any, name: str | None, limits: ReadLimits) -> files.FileTable:
    """Any accepted source as one table and its name for messages."""
    import pyarrow as pa

    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview, list, tuple)) or hasattr(source, "read"):
        return files.read_file(source, limits, name)  # paths, globs, folders, save_to_disk, uploads
    if isinstance(source, pa.Table):
        return files.FileTable(source, name or "<table>", ())
    if hasattr(source, "with_format") and hasattr(source, "column_names"):  # datasets.Dataset
        table = source.with_format("arrow")[:]
        if isinstance(table, pa.Table):
            return files.FileTable(table, name or "<dataset>", ())
    if isinstance(source, Mapping):
        return files.FileTable(_mapping_table(source), name or "<batch>", ())
    raise SettingError(
        "source",
        "a path, glob or folder of .parquet/.jsonl/.json/.arrow files, a file object, a pyarrow.Table, "
        "a datasets.Dataset or a dict of columns",
        type(source),
    )


def _mapping_table(columns: Mapping[str, Any]) -> pa.Table:
    """A dict of columns (lists of rows, or a collator's arrays/tensors of shape (rows, T) or (T,)).

    A table made from arrays is marked as a collator's batch (:data:`~packing.layouts.common.COLLATED`), which
    layouts read apart from datasets of the same columns. torchtune's ``padded_collate_packed`` gives no
    ``seq_lens`` but a ``(rows, T, T)`` block-causal ``mask``: its documents become ``seq_lens``
    (:func:`packing.layouts.torchtune.seq_lens_of_mask`)."""
    import pyarrow as pa

    from packing.layouts.common import COLLATED
    from packing.layouts.torchtune import seq_lens_of_mask

    data: dict[str, Any] = {}
    collated = False
    for name, value in columns.items():
        array = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
        if isinstance(array, np.ndarray):
            collated = True
            if array.ndim in (1, 2) and array.dtype.kind in "iub":
                grid = array.reshape(1, -1) if array.ndim == 1 else array
                offsets = np.arange(grid.shape[0] + 1, dtype=np.int64) * grid.shape[1]
                data[str(name)] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(grid.reshape(-1)))
            elif str(name) == "mask" and array.ndim == 3 and "seq_lens" not in columns:
                data["seq_lens"] = seq_lens_of_mask(array)
            continue  # scalars such as max_length_q carry nothing per token
        if isinstance(array, list):
            data[str(name)] = array
    rows = {len(value) for value in data.values()}
    if len(rows) > 1:  # a (T,) column next to (1, T) ones: cu_seq_lens of a one-row batch
        most = max(rows)
        data = {name: value for name, value in data.items() if len(value) == most}
    table = pa.table(data)
    return table.replace_schema_metadata({COLLATED: b"1"}) if collated else table


def _parse(
    source: Any, layout: str | None, name: str | None = None, limits: ReadLimits | None = None
) -> tuple[Parsed, str]:
    found = _to_table(source, name, limits_of(limits))
    try:
        return read_layout(found.table, layout, found.label), found.label
    except DatasetError as error:  # a row of a dataset of several files: named by its file
        raise found.locate(error) from None


@takes_layout
def read_packed(source: Any, *, layout: str | None = None, limits: ReadLimits | None = None) -> PackedLayout:
    """Read packed data of any known layout into one form (see :class:`PackedLayout`). O(tokens).

    ``limits`` (a :class:`~packing.reading._limits.ReadLimits`) bounds the file's bytes, the blocks
    (``max_rows``) and the values of any list column (``max_tokens``), checked before decoding (a
    Parquet file's metadata, a file's size) or, for a table given, before its columns become arrays.

    >>> import pyarrow as pa
    >>> rows = {"input_ids": [[5, 6, 7, 0]], "seq_start_id": [[0, 2]], "loss_mask": [[1, 0, 0, 0]]}
    >>> packed = read_packed(pa.table(rows))
    >>> packed.name, packed.document.tolist(), packed.targets.tolist()
    ('megatron', [0, 0, 1, 1], [False, True, False, False])
    """
    parsed, _ = _parse(source, layout, limits=limits)
    return parsed.layout


# ---------------------------------------------------------------- checks


def _finding(kind: str, cells: Int64Array, layout: PackedLayout, count: int | None = None) -> Finding | None:
    cells = cells.astype(np.int64, copy=False)
    if len(cells) > 1 and not bool(np.all(cells[1:] > cells[:-1])):
        cells = np.unique(cells)
    if not len(cells):
        return None
    first = cells[:MAX_EXAMPLES]
    blocks = layout.block_of(first)
    examples = tuple((int(b), int(c - layout.row_offsets[b])) for b, c in zip(blocks, first, strict=True))
    return Finding(kind, int(count if count is not None else len(cells)), examples, cells)


def _position_cells(
    row_offsets: Int64Array, document: Int64Array, positions: Int64Array
) -> tuple[BoolArray, BoolArray]:
    """``(not_reset, inconsistent)``: document starts (not a block's first token) whose position is not 0, and
    tokens inside a document whose position is not the previous one plus 1. O(tokens)."""
    total = len(document)
    starts = starts_of(row_offsets, document)
    inner = not_block_start(row_offsets, total)
    not_reset = starts & inner & (positions != 0)
    inside = (document >= 0) & ~starts
    step = np.zeros(total, dtype=bool)
    step[1:] = positions[1:] != positions[:-1] + 1
    return not_reset, inside & step & inner


def _unit_cells(
    document: Int64Array, unit: Int64Array, completion: Int64Array, positions: Int64Array
) -> tuple[BoolArray, BoolArray]:
    """``(shared, sibling)`` over the tokens of blocks of units: ``shared`` marks a completion's first token whose
    position is its prompt's length in the document (a shared prompt's layout: its positions restart at the prompt's
    end), ``sibling`` the first token of a completion in a document that holds an earlier completion of its unit,
    not so restarted (it sees that sibling). O(tokens log tokens).

    >>> document, unit = np.zeros(5, dtype=np.int64), np.zeros(5, dtype=np.int64)
    >>> completion = np.array([-1, 0, 0, 1, 1])
    >>> [cells.astype(int).tolist() for cells in _unit_cells(document, unit, completion, np.array([0, 1, 2, 1, 2]))]
    [[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]]
    >>> _unit_cells(document, unit, completion, np.array([0, 1, 2, 3, 4]))[1].astype(int).tolist()
    [0, 0, 0, 1, 0]
    """
    real = (document >= 0) & (unit >= 0)
    starts = real & (completion >= 0)
    starts[1:] &= (completion[1:] != completion[:-1]) | (document[1:] != document[:-1])
    width = int(unit.max(initial=0)) + 2
    key = np.where(real, document * width + unit + 1, -1)
    prompt = real & (completion < 0)
    keys, counts = np.unique(key[prompt], return_counts=True)
    found = np.clip(np.searchsorted(keys, key), 0, max(len(keys) - 1, 0))
    prompt_length = np.where((len(keys) > 0) & (keys[found] == key) if len(keys) else False, counts[found], 0)
    shared = starts & (prompt_length > 0) & (positions == prompt_length)
    first = np.flatnonzero(starts)
    groups, first_of = np.unique(key[first], return_index=True)
    earliest = np.full(len(key), -1, dtype=np.int64)
    earliest[first] = first[first_of[np.searchsorted(groups, key[first])]]
    sibling = starts & (earliest >= 0) & (earliest < np.arange(len(key))) & ~shared
    return shared, sibling


def _checks(parsed: Parsed, capacity: int, capacity_given: bool, used: Int64Array) -> list[Finding]:
    layout = parsed.layout
    offsets, document = layout.row_offsets, layout.document
    total = len(document)
    rows = row_of(np.diff(offsets))
    starts = starts_of(offsets, document)
    inner = not_block_start(offsets, total)
    known_token = layout.boundaries_known[rows] if total else np.zeros(0, dtype=bool)
    cells: dict[str, Int64Array] = {}
    targets = layout.real_targets() if layout.targets is not None else None
    if targets is not None:
        cells["cross_document_label"] = np.flatnonzero(starts & inner & targets & known_token)
        trained_padding = targets & (document < 0)
        if parsed.extra_padding_trained is not None:
            trained_padding = trained_padding | parsed.extra_padding_trained
        cells["padding_trained"] = np.flatnonzero(trained_padding)
    bad = list(parsed.bad_boundaries)
    if layout.position_ids is not None:
        not_reset, jumps = _position_cells(offsets, document, layout.position_ids)
        cells["position_not_reset"] = np.flatnonzero(not_reset & known_token)
        if layout.unit is not None and layout.completion is not None:
            shared, sibling = _unit_cells(document, layout.unit, layout.completion, layout.position_ids)
            jumps &= ~shared  # a shared prompt's completion starts again at the prompt's end
            cells["sibling_visible"] = np.flatnonzero(sibling)
        bad.append(np.flatnonzero(jumps & known_token))
    elif layout.unit is not None and layout.completion is not None:  # positions counted within each document
        implied = np.arange(total) - np.maximum.accumulate(np.where(starts, np.arange(total), 0))
        cells["sibling_visible"] = np.flatnonzero(_unit_cells(document, layout.unit, layout.completion, implied)[1])
    cells["inconsistent_boundaries"] = np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)
    unknown_blocks = np.flatnonzero(~layout.boundaries_known & (np.diff(offsets) > 0))
    cells["no_document_boundaries"] = offsets[:-1][unknown_blocks]
    mask = layout.attention_mask
    if mask is not None:
        docs = np.bincount(rows[starts], minlength=layout.num_blocks)
        open_mask = np.bincount(rows[(mask == 0) & (document >= 0)], minlength=layout.num_blocks) == 0
        flat_mask = row_max(offsets, mask) <= 1
        blocks = np.flatnonzero((docs >= 2) & open_mask & flat_mask & layout.boundaries_known)
        second = np.flatnonzero(starts & inner)
        first_inner = second[np.searchsorted(rows[second], blocks)] if len(blocks) else np.zeros(0, dtype=np.int64)
        cells["all_ones_attention_mask"] = first_inner
    if parsed.reused_segments is not None:
        cells["segment_id_reused"] = parsed.reused_segments
    if layout.labels is not None:
        cells["label_mismatch"] = np.flatnonzero(
            (layout.labels != IGNORE_INDEX) & (layout.labels != layout.input_ids) & (document >= 0)
        )
    if capacity_given:
        cells["block_too_long"] = offsets[:-1][np.flatnonzero(used > capacity)]
    ids = layout.input_ids
    cells["token_id_out_of_range"] = np.flatnonzero((ids < 0) | (ids > INT32_MAX))
    findings = []
    for kind in FINDING_KINDS:
        if kind in cells:
            found = _finding(kind, cells[kind], layout)
            if found is not None:
                findings.append(found)
    return findings


@takes_layout
def audit(
    source: Any,
    *,
    max_seq_length: int | None = None,
    layout: str | None = None,
    name: str | None = None,
    limits: ReadLimits | None = None,
) -> AuditReport:
    """Recognise a packed dataset's layout, count what it holds and check every invariant.

    ``source`` is what :func:`packing.read_dataset` takes (:mod:`packing.reading._files`): a ``.parquet``,
    ``.jsonl``, ``.json`` or ``.arrow`` path, several paths, a glob, a folder of shards or a ``datasets``
    ``save_to_disk`` folder (read as one table, files in sorted order; a bad row is named by its file), a
    binary file object or ``bytes`` of such a file (an upload; ``name`` gives its file name); or a
    ``pyarrow.Table``, a ``datasets.Dataset`` or a dict of columns (rows, or a collator's arrays of shape
    ``(rows, T)``). ``max_seq_length`` is the block capacity (default:
    the longest block); ``layout`` forces a layout instead of recognising it; ``name`` is how the report and
    its errors name the source; ``limits`` bounds what is read, as in :func:`read_packed`.
    O(tokens + blocks), numpy throughout.

    >>> import pyarrow as pa
    >>> table = pa.table({"input_ids": [[1, 2, 3, 9], [4, 5, 0, 0]], "labels": [[-100, 2, 3, -100], [4, 5, -100, -100]],
    ...                   "attention_mask": [[1, 1, 1, 2], [1, 1, 0, 0]], "position_ids": [[0, 1, 2, 3], [0, 1, 0, 0]]})
    >>> report = audit(table)
    >>> report.layout, report.num_documents, report.padding_tokens, f"{report.efficiency:.3f}"
    ('segment_ids', 3, 2, '0.750')
    >>> [(f.kind, f.count, f.examples) for f in report.findings]
    [('position_not_reset', 1, ((0, 3),))]
    """
    if max_seq_length is not None:
        check_integer(max_seq_length, "max_seq_length")
    parsed, name = _parse(source, layout, name, limits)
    packed = parsed.layout
    if layout is None:
        _refuse_unpacked(packed, name, max_seq_length)
    offsets, document = packed.row_offsets, packed.document
    total = len(document)
    rows = row_of(np.diff(offsets))
    real_per_block = np.bincount(rows[document >= 0], minlength=packed.num_blocks).astype(np.int64)
    used = real_per_block - (parsed.used_offset if parsed.used_offset is not None else 0)
    used = np.maximum(used, 0)
    given = max_seq_length is not None
    longest = used if parsed.used_offset is not None else np.diff(offsets)  # rows that hold uncounted positions
    capacity = int(max_seq_length) if max_seq_length is not None else int(max(longest.max(initial=0), 1))
    findings = _checks(parsed, capacity, given, used)
    used = np.minimum(used, capacity)  # a longer block fills its capacity: the rest is a block_too_long finding
    fill = used / capacity
    tokens = int(real_per_block.sum())
    return AuditReport(
        source=name,
        layout=packed.name,
        num_blocks=packed.num_blocks,
        num_documents=packed.num_documents if bool(packed.boundaries_known.all()) else None,
        tokens=tokens,
        padding_tokens=int(total - tokens),
        max_seq_length=capacity,
        max_seq_length_given=given,
        efficiency=float(used.sum() / (capacity * packed.num_blocks)) if packed.num_blocks else 0.0,
        block_fill=fill.astype(np.float64),
        findings=tuple(findings),
        packed=packed,
    )


def _refuse_unpacked(layout: PackedLayout, source: str, max_seq_length: int | None) -> None:
    """Refuse rows recognised as blocks without boundaries (TRL's ``wrapped``) that cannot be such blocks: packing
    without boundaries fills every block to one length but the last of a batch, so rows longer than
    ``max_seq_length``, or of many lengths, are most likely samples, not packed; the error says so and how to read
    them as blocks anyway (``layout=``). O(blocks).

    >>> import pyarrow as pa
    >>> audit(pa.table({"input_ids": [[1, 2, 3], [4]]}), max_seq_length=2)
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: <table>: not packed blocks of 2 positions: 1 of 2 rows holds more (up to 3 tokens), ...
    """
    if layout.boundaries_known.any() or not layout.num_blocks:
        return
    lengths = np.diff(layout.row_offsets)
    filled = lengths[lengths > 0]
    if not len(filled):
        return
    longest = int(filled.max())
    anyway = f"layout='{layout.name}' reads the rows as blocks anyway"
    if max_seq_length is not None and longest > max_seq_length:
        over = int((filled > max_seq_length).sum())
        reason = (
            f"not packed blocks of {max_seq_length:,} positions: {over:,} of {len(filled):,} rows "
            f"hold{'s' if over == 1 else ''} more (up to {longest:,} tokens), and nothing marks documents; "
            f"samples, not packed? ({anyway})"
        )
        raise DatasetError(source, None, reason)
    if 2 * int((filled == longest).sum()) < len(filled):
        reason = (
            f"cannot tell how these rows are packed: they are of {len(np.unique(filled)):,} lengths from "
            f"{int(filled.min()):,} to {longest:,} tokens, where packing without boundaries fills blocks to one "
            f"length, and nothing marks documents; samples, not packed? ({anyway})"
        )
        raise DatasetError(source, None, reason)


def report_json(report: AuditReport) -> str:
    """The report's summary (:meth:`AuditReport.summary`) as JSON text.

    >>> import pyarrow as pa
    >>> summary = json.loads(report_json(audit(pa.table({"input_ids": [[1, 2]], "seq_lengths": [[2]]}))))
    >>> summary["layout"], summary["num_documents"], summary["findings"]
    ('trl', 1, [])
    """
    return json.dumps(report.summary(), indent=2)
