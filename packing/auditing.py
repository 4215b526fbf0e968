"""Auditing packed datasets: what a file of packed blocks holds, and what is wrong with it.

:func:`audit` reads packed data made by this project or by another tool, recognises its layout, and
checks every invariant that keeps packed documents apart. Layouts (``format``):

- ``packing``: this project (``input_ids``, ``labels``, ``loss_mask``, ``position_ids``,
  ``sequence_ids``, ``seq_lengths``; padding after ``sum(seq_lengths)``);
- ``trl``: TRL ``pack_dataset``: ``input_ids`` with ``seq_lengths`` (``bfd``, ``bfd_split``), or
  ``input_ids`` alone (``wrapped``, which keeps no boundaries); optional ``labels``, ``completion_mask`` or
  ``assistant_masks`` mark the loss; TRL's padding-free collator drops the loss at every document start,
  so that is not a finding here, and builds its own attention mask, so a carried ``attention_mask`` is not
  checked;
- ``flattening``: transformers ``DataCollatorWithFlattening``: ``input_ids``, ``labels`` (-100 at each
  example's first token), ``position_ids`` restarting at 0, optionally ``cu_seq_lens_q`` and ``seq_idx``;
- ``torchtune``: ``tokens``, ``labels``, ``input_pos``, ``seq_lens``; the padding is one more entry of
  ``seq_lens``, where ``input_pos`` keeps counting instead of restarting at 0;
- ``megatron``: NeMo / Megatron packed rows: ``input_ids``, ``seq_start_id``, ``loss_mask`` shifted by one
  (``loss_mask[i]`` trains the prediction of token ``i + 1``; each document's last entry is 0); each
  document counts ``length - 1`` positions against the pack size;
- ``segment_ids``: LLaMA-Factory neat packing / Axolotl: ``attention_mask`` holding the document number
  1..k of each token (0 = padding), with ``labels`` and ``position_ids``; a 0/1 ``attention_mask`` is
  LLaMA-Factory's plain packing, where only position ids separate documents.

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
  segment ids that do not match the documents);
- ``all_ones_attention_mask``: a block of several documents whose 0/1 attention mask lets them see each
  other (count: blocks);
- ``label_mismatch``: a label that is neither -100 nor the token at its position (labels shifted twice);
- ``block_too_long``: a block holding more than ``max_seq_length`` positions (only with ``max_seq_length``);
- ``token_id_out_of_range``: a token id outside 0..2**31 - 1 (no vocabulary is that large; an int32 column
  would wrap it). Ids that do not even fit in int64 (uint64 above 2**63 - 1) are refused with a
  DatasetError instead: every array here is int64, so they cannot be checked at all.

A clean dataset has no findings. Everything is vectorized over the flat token arrays: O(tokens + blocks).

>>> import pyarrow as pa
>>> clean = pa.table({"input_ids": [[1, 2, 3, 4]], "seq_lengths": [[3, 1]]})
>>> report = audit(clean)
>>> report.format, report.num_blocks, report.num_documents, report.findings
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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from packing import files
from packing.arrays import ranges
from packing.errors import DatasetError, SettingError
from packing.limits import ReadLimits, check_count, limits_of

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
LayoutName = Literal["packing", "trl", "flattening", "torchtune", "megatron", "segment_ids"]

LAYOUTS: tuple[LayoutName, ...] = ("packing", "trl", "flattening", "torchtune", "megatron", "segment_ids")
"""Layouts :func:`audit` recognises (and :mod:`packing.formats` writes)."""
LAYOUT_TITLES: dict[str, str] = {
    "packing": "this project's blocks",
    "trl": "TRL pack_dataset",
    "flattening": "transformers DataCollatorWithFlattening",
    "torchtune": "torchtune PackedDataset",
    "megatron": "NeMo / Megatron packed sequences",
    "segment_ids": "segment ids in attention_mask, as LLaMA-Factory neat packing and Axolotl",
}
FINDING_KINDS = (
    "cross_document_label",
    "position_not_reset",
    "no_document_boundaries",
    "padding_trained",
    "inconsistent_boundaries",
    "all_ones_attention_mask",
    "label_mismatch",
    "block_too_long",
    "token_id_out_of_range",
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
    "label_mismatch": "labels that are neither -100 nor the token at their position (shifted twice?)",
    "block_too_long": "blocks holding more positions than max_seq_length",
    "token_id_out_of_range": "token ids outside 0..2**31 - 1: no vocabulary has them, and int32 consumers wrap them",
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
    "label_mismatch": "keep labels equal to input_ids (the model shifts them) or -100",
    "block_too_long": "repack with this max_seq_length",
    "token_id_out_of_range": "tokenize again: token ids are indexes into the vocabulary",
}
"""What to change, per kind of finding."""
MAX_EXAMPLES = 5
"""Cells listed per finding."""
IGNORE_INDEX = -100
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


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
class PackedLayout:
    """A packed dataset brought to one form: flat token arrays and per-token documents.

    Block ``b`` is ``input_ids[row_offsets[b]:row_offsets[b + 1]]``. ``document`` numbers the documents
    over the whole dataset (-1 = padding); in a block without boundaries the whole block counts as one
    document. ``targets[j]`` says whether the token at ``j`` is a prediction target (the loss the token at
    ``j - 1`` is trained with), after the layout's own conventions are applied; ``None`` when the data holds
    no loss information (every real token is then a target). ``position_ids`` and ``attention_mask`` are
    the columns as stored, or ``None``.
    """

    format: LayoutName
    row_offsets: Int64Array
    input_ids: Int64Array
    document: Int64Array
    targets: BoolArray | None
    position_ids: Int64Array | None
    attention_mask: Int64Array | None
    labels: Int64Array | None
    boundaries_known: BoolArray
    variant: str = ""

    @property
    def num_blocks(self) -> int:
        return len(self.row_offsets) - 1

    @property
    def num_documents(self) -> int:
        return int(self.document.max(initial=-1)) + 1

    def document_starts(self) -> BoolArray:
        """Whether each token opens a document. O(tokens)."""
        return _starts_of(self.row_offsets, self.document)

    def documents(self) -> list[Int64Array]:
        """The tokens of every document, in order. O(tokens).

        >>> import pyarrow as pa
        >>> [d.tolist() for d in read_packed(pa.table({"input_ids": [[1, 2, 3]], "seq_lengths": [[2, 1]]})).documents()]
        [[1, 2], [3]]
        """
        order = np.flatnonzero(self.document >= 0)
        counts = np.bincount(self.document[order], minlength=self.num_documents)
        return np.split(self.input_ids[order], np.cumsum(counts)[:-1]) if len(counts) else []

    def document_targets(self) -> list[BoolArray]:
        """Which tokens of every document are prediction targets (its first token never is). O(tokens)."""
        order = np.flatnonzero(self.document >= 0)
        targets = self.real_targets()[order]
        counts = np.bincount(self.document[order], minlength=self.num_documents)
        return np.split(targets, np.cumsum(counts)[:-1]) if len(counts) else []

    def real_targets(self) -> BoolArray:
        """``targets``, or every real token when the data has no loss information."""
        if self.targets is not None:
            return self.targets
        return self.document >= 0

    def block_of(self, cells: Int64Array) -> Int64Array:
        """The block of each flat token index. O(cells · log blocks)."""
        blocks: Int64Array = np.searchsorted(self.row_offsets, cells, side="right").astype(np.int64) - 1
        return blocks


@dataclass(frozen=True, eq=False)
class AuditReport:
    """What :func:`audit` found. ``efficiency`` = used positions / (blocks × ``max_seq_length``)."""

    source: str
    format: LayoutName
    num_blocks: int
    num_documents: int | None
    tokens: int
    padding_tokens: int
    max_seq_length: int
    max_seq_length_given: bool
    efficiency: float
    block_fill: npt.NDArray[np.float64] = field(repr=False)
    findings: tuple[Finding, ...]
    layout: PackedLayout = field(repr=False)

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
            "format": self.format,
            "variant": self.layout.variant,
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
        variant = f" ({self.layout.variant})" if self.layout.variant else ""
        lines = [f"Layout: {LAYOUT_TITLES[self.format]}{variant}."]
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


def _error(source: str, reason: str, where: str | None = None) -> DatasetError:
    """The error for a source that cannot be read as packed data."""
    return DatasetError(source, where, reason)


def _to_table(source: Any, name: str | None, limits: ReadLimits) -> files.FileTable:
    """Any accepted source as one table (with the files it came from, if any), within ``limits``
    (:func:`_check_table`)."""
    found = _any_table(source, name, limits)
    _check_table(found.table, found.label, limits)
    return found


def _check_table(table: pa.Table, label: str, limits: ReadLimits) -> None:
    """Refuse a table of more blocks, or a list column of more values, than ``limits`` allows, before its
    columns become arrays. O(columns + chunks)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    check_count(label, "blocks", table.num_rows, limits.max_rows)
    if limits.max_tokens is None:
        return
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            values = int(pc.sum(pc.list_value_length(column)).as_py() or 0)
            if values > limits.max_tokens:
                raise DatasetError(
                    label,
                    None,
                    f"column '{name}' holds {values:,} values, more than the limit of {limits.max_tokens:,}",
                )


def _any_table(source: Any, name: str | None, limits: ReadLimits) -> files.FileTable:
    """Any accepted source as one table and its name for messages."""
    import pyarrow as pa

    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview, list, tuple)) or hasattr(source, "read"):
        return files.read_table(source, limits, name)  # paths, globs, folders, save_to_disk, uploads
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
    """A dict of columns (lists of rows, or a collator's arrays/tensors of shape (rows, T) or (T,))."""
    import pyarrow as pa

    data: dict[str, Any] = {}
    for name, value in columns.items():
        array = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
        if isinstance(array, np.ndarray):
            if array.ndim in (1, 2) and array.dtype.kind in "iub":
                grid = array.reshape(1, -1) if array.ndim == 1 else array
                offsets = np.arange(grid.shape[0] + 1, dtype=np.int64) * grid.shape[1]
                data[str(name)] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(grid.reshape(-1)))
            continue  # scalars such as max_length_q carry nothing per token
        if isinstance(array, list):
            data[str(name)] = array
    rows = {len(value) for value in data.values()}
    if len(rows) > 1:  # a (T,) column next to (1, T) ones: cu_seq_lens of a one-row batch
        most = max(rows)
        data = {name: value for name, value in data.items() if len(value) == most}
    return pa.table(data)


@dataclass(frozen=True)
class _Column:
    """A list column, flat: row ``r`` is ``values[offsets[r]:offsets[r + 1]]``."""

    values: Int64Array
    lengths: Int64Array

    @property
    def offsets(self) -> Int64Array:
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return offsets


def _list_column(table: pa.Table, name: str, source: str) -> _Column | None:
    """The integer (or boolean) list column ``name`` as flat int64 values, or ``None`` when absent."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if name not in table.column_names:
        return None
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)):
        if pa.types.is_null(kind):
            return None
        raise _error(source, f"column '{name}': expected lists of integers, got {_type_name(kind)}")
    value_type = kind.value_type
    if not (pa.types.is_integer(value_type) or pa.types.is_boolean(value_type) or pa.types.is_null(value_type)):
        raise _error(source, f"column '{name}': expected lists of integers, got {_type_name(kind)}")
    if column.null_count:
        row = int(np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False))[0])
        raise _error(source, f"column '{name}': expected a list, got null", f"row {row + 1}")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(column)
    if flat.null_count:
        raise _error(source, f"column '{name}': lists must not contain nulls")
    values = flat.to_numpy(zero_copy_only=False) if len(flat) else np.zeros(0, dtype=np.int64)
    if values.dtype.kind == "u" and values.size and int(values.max()) > _INT64_MAX:
        # 2**64 - 1 would wrap to -1 in int64 and every check after it would read another value
        position = int(np.flatnonzero(values > _INT64_MAX)[0])
        row = int(np.searchsorted(np.cumsum(lengths), position, side="right"))
        reason = f"column '{name}': expected integers that fit in int64, got {int(values[position])}"
        raise _error(source, reason, f"row {row + 1}")
    return _Column(values.astype(np.int64, copy=False), lengths)


def _type_name(kind: Any, limit: int = 60) -> str:
    """An Arrow type for messages, cut to ``limit`` characters (a crafted file can nest it 60 levels deep)."""
    text = str(kind)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _detect(columns: set[str], source: str) -> LayoutName:
    """The layout a set of column names belongs to."""
    if "tokens" in columns and "seq_lens" in columns:
        return "torchtune"
    if "input_ids" not in columns:
        raise _error(
            source,
            f"no packed token column; found {', '.join(sorted(columns)) or 'none'}, expected 'input_ids' "
            "(or torchtune's 'tokens' with 'seq_lens')",
        )
    if "seq_start_id" in columns:
        return "megatron"
    if {"labels", "position_ids", "seq_lengths"} <= columns:
        return "packing"
    if "seq_lengths" in columns:
        return "trl"
    if "attention_mask" in columns and ({"labels", "position_ids"} & columns):
        return "segment_ids"
    if "position_ids" in columns or "cu_seq_lens_q" in columns:
        return "flattening"
    return "trl"


# ---------------------------------------------------------------- building documents


def _row_of(offsets: Int64Array, total: int) -> Int64Array:
    """The row of every flat index ``0..total-1``. O(total)."""
    rows: Int64Array = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    assert len(rows) == total
    return rows


@dataclass
class _Build:
    """Documents being derived from one boundary source, with the inconsistencies met on the way."""

    document: Int64Array
    bad_cells: list[Int64Array] = field(default_factory=list)


def _from_lengths(row_offsets: Int64Array, lengths: _Column, fill_exactly: bool) -> _Build:
    """Documents from per-block lengths (``seq_lengths``, ``seq_lens``, starts turned into lengths).

    Lengths that overrun their block are cut at its end, and the block is inconsistent; with
    ``fill_exactly``, lengths that do not add up to the block length are inconsistent too (the rest of the
    block then counts as padding). O(tokens + documents).
    """
    total = int(row_offsets[-1])
    row_length = np.diff(row_offsets)
    values = np.maximum(lengths.values, 0)
    entry_row = np.repeat(np.arange(len(lengths.lengths), dtype=np.int64), lengths.lengths)
    running = np.concatenate(([0], np.cumsum(values)))
    inside = running[:-1] - np.repeat(running[lengths.offsets[:-1]], lengths.lengths)
    start = row_offsets[:-1][entry_row] + inside
    end = np.minimum(start + values, row_offsets[1:][entry_row])
    kept = np.maximum(end - start, 0)
    document = np.full(total, -1, dtype=np.int64)
    real = kept > 0
    numbers = np.cumsum(real) - 1
    document[ranges(start[real], kept[real])] = np.repeat(numbers[real], kept[real])
    sums = np.bincount(entry_row, weights=values, minlength=len(row_length)).astype(np.int64)
    bad_rows = (sums > row_length) | (np.bincount(entry_row[lengths.values < 0], minlength=len(row_length)) > 0)
    if fill_exactly:
        bad_rows |= sums != row_length
    bad_rows &= row_length > 0  # an empty block has no cell to point at, and nothing to leak
    build = _Build(document)
    if bad_rows.any():
        rows = np.flatnonzero(bad_rows)
        cells = np.minimum(row_offsets[rows] + np.minimum(sums[rows], row_length[rows]), row_offsets[rows + 1] - 1)
        build.bad_cells.append(np.maximum(cells, row_offsets[rows]))
    return build


def _from_starts(row_offsets: Int64Array, starts: BoolArray, padding: BoolArray) -> Int64Array:
    """Documents from a per-token "opens a document" flag (a block's first real token always does)."""
    real = ~padding
    opens = starts & real
    row_first = row_offsets[:-1][np.diff(row_offsets) > 0]
    opens[row_first] |= real[row_first]
    # a real token after padding inside a block opens a document as well
    after_pad = np.zeros_like(opens)
    after_pad[1:] = padding[:-1] & real[1:]
    opens |= after_pad
    document = np.cumsum(opens) - 1
    document[padding] = -1
    return document.astype(np.int64)


def _starts_of(row_offsets: Int64Array, document: Int64Array) -> BoolArray:
    """Whether each token opens a document (from ``document`` numbers)."""
    real = document >= 0
    start = real.copy()
    start[1:] &= document[1:] != document[:-1]
    return start


def _renumber(document: Int64Array) -> Int64Array:
    """Documents numbered 0, 1, 2, ... again after some were turned into padding (-1); numbers only ever rise
    along the tokens. O(tokens)."""
    real = document >= 0
    kept = document[real]
    opens = np.ones(len(kept), dtype=np.int64)
    opens[1:] = kept[1:] != kept[:-1]
    out = np.full(len(document), -1, dtype=np.int64)
    out[real] = np.cumsum(opens) - 1
    return out


def _not_block_start(row_offsets: Int64Array, total: int) -> BoolArray:
    inner = np.ones(total, dtype=bool)
    firsts = row_offsets[:-1][row_offsets[:-1] < total]
    inner[firsts] = False
    return inner


# ---------------------------------------------------------------- the layouts


@dataclass
class _Parsed:
    """What a layout reader hands to the checks."""

    layout: PackedLayout
    bad_boundaries: list[Int64Array]
    extra_padding_trained: BoolArray | None = None
    used_offset: Int64Array | None = None  # positions per block not counted (megatron: one per document)


def _check_lengths(column: _Column | None, name: str, reference: _Column, reference_name: str, source: str) -> None:
    """A per-token column must have exactly as many values per row as the token column."""
    if column is None:
        return
    if len(column.lengths) != len(reference.lengths):
        raise _error(
            source, f"column '{name}' has {len(column.lengths)} rows, '{reference_name}' has {len(reference.lengths)}"
        )
    differ = np.flatnonzero(column.lengths != reference.lengths)
    if differ.size:
        row = int(differ[0])
        raise _error(
            source,
            f"column '{name}': {int(column.lengths[row])} values, expected {int(reference.lengths[row])} like "
            f"'{reference_name}'",
            f"row {row + 1}",
        )


def _position_cells(
    row_offsets: Int64Array, document: Int64Array, positions: Int64Array
) -> tuple[BoolArray, BoolArray]:
    """``(not_reset, inconsistent)``: document starts (not a block's first token) whose position is not 0, and
    tokens inside a document whose position is not the previous one plus 1. O(tokens)."""
    total = len(document)
    starts = _starts_of(row_offsets, document)
    inner = _not_block_start(row_offsets, total)
    not_reset = starts & inner & (positions != 0)
    inside = (document >= 0) & ~starts
    step = np.zeros(total, dtype=bool)
    step[1:] = positions[1:] != positions[:-1] + 1
    return not_reset, inside & step & inner


def _mismatch(row_offsets: Int64Array, document: Int64Array, other_starts: BoolArray) -> Int64Array:
    """Real tokens where another boundary source disagrees with the documents about where one opens."""
    starts = _starts_of(row_offsets, document)
    inner = _not_block_start(row_offsets, len(document))
    cells: Int64Array = np.flatnonzero((starts != other_starts) & (document >= 0) & inner).astype(np.int64)
    return cells


def _read_packing(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "input_ids", source)
    offsets = tokens.offsets
    columns = {
        name: _list_column(table, name, source)
        for name in ("labels", "loss_mask", "position_ids", "sequence_ids", "attention_mask")
    }
    for name, column in columns.items():
        _check_lengths(column, name, tokens, "input_ids", source)
    lengths = _required(table, "seq_lengths", source)
    build = _from_lengths(offsets, lengths, fill_exactly=False)
    document = build.document
    bad = list(build.bad_cells)
    sequence_ids = columns["sequence_ids"]
    if sequence_ids is not None:
        ids = sequence_ids.values
        inside = np.zeros(len(ids), dtype=bool)
        inside[1:] = (document[1:] == document[:-1]) & (document[1:] >= 0) & (ids[1:] != ids[:-1])
        wrong_padding = (document < 0) != (ids < 0)
        bad.append(np.flatnonzero(inside | wrong_padding).astype(np.int64))
    labels = columns["labels"]
    targets = labels.values != IGNORE_INDEX if labels is not None else None
    loss_mask = columns["loss_mask"]
    extra = None
    if loss_mask is not None:
        extra = (loss_mask.values != 0) & (document < 0)
        if targets is None:
            targets = loss_mask.values != 0
            targets &= ~_starts_of(offsets, document)
    layout = PackedLayout(
        "packing",
        offsets,
        tokens.values,
        document,
        targets,
        _values(columns["position_ids"]),
        _values(columns["attention_mask"]),
        _values(labels),
        np.ones(len(tokens.lengths), dtype=bool),
    )
    return _Parsed(layout, bad, extra)


def _values(column: _Column | None) -> Int64Array | None:
    return None if column is None else column.values


def _required(table: pa.Table, name: str, source: str) -> _Column:
    column = _list_column(table, name, source)
    if column is None:
        raise _error(source, f"column '{name}' is missing; found {', '.join(table.column_names)}")
    return column


def _read_trl(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "input_ids", source)
    offsets = tokens.offsets
    names = ("labels", "completion_mask", "assistant_masks", "position_ids")
    columns = {name: _list_column(table, name, source) for name in names}
    for name, column in columns.items():
        _check_lengths(column, name, tokens, "input_ids", source)
    lengths = _list_column(table, "seq_lengths", source)
    known = lengths is not None
    bad: list[Int64Array] = []
    if lengths is not None:
        build = _from_lengths(offsets, lengths, fill_exactly=True)
        document = build.document
        bad.extend(build.bad_cells)
        variant = "seq_lengths"
    else:
        document = _row_of(offsets, int(offsets[-1]))
        variant = "wrapped: no document boundaries"
    targets = document >= 0
    if columns["labels"] is not None:
        targets &= columns["labels"].values != IGNORE_INDEX
    for name in ("completion_mask", "assistant_masks"):
        mask = columns[name]
        if mask is not None:
            targets &= mask.values != 0
    if known:  # TRL's padding-free collator sets labels[position_ids == 0] = -100
        targets &= ~_starts_of(offsets, document)
    else:
        targets &= _not_block_start(offsets, len(document))
    has_loss = any(columns[name] is not None for name in ("labels", "completion_mask", "assistant_masks"))
    layout = PackedLayout(
        "trl",
        offsets,
        tokens.values,
        document,
        targets if has_loss or known else None,
        _values(columns["position_ids"]),
        None,  # TRL's collators build their own attention mask; a carried column is never used
        _values(columns["labels"]),
        np.full(len(tokens.lengths), known, dtype=bool),
        variant,
    )
    return _Parsed(layout, bad)


def _cu_starts(
    table: pa.Table, name: str, offsets: Int64Array, source: str
) -> tuple[BoolArray, list[Int64Array]] | None:
    """Document starts from a ``cu_seqlens``-like column (per row: 0, ends...), and the rows that disagree."""
    column = _list_column(table, name, source)
    if column is None:
        return None
    if len(column.lengths) != len(offsets) - 1:
        raise _error(source, f"column '{name}' has {len(column.lengths)} rows, expected {len(offsets) - 1}")
    total = int(offsets[-1])
    row_length = np.diff(offsets)
    entry_row = np.repeat(np.arange(len(column.lengths), dtype=np.int64), column.lengths)
    value = column.values
    local_ok = (value >= 0) & (value < row_length[entry_row])
    starts = np.zeros(total, dtype=bool)
    starts[(offsets[:-1][entry_row] + value)[local_ok]] = True
    last = column.offsets[1:] - 1
    has = column.lengths > 0
    bad_rows = np.zeros(len(row_length), dtype=bool)
    bad_rows[has] = value[last[has]] != row_length[has]
    bad_rows[~has] = row_length[~has] > 0
    bad_rows |= np.bincount(entry_row[~local_ok & (value != row_length[entry_row])], minlength=len(row_length)) > 0
    bad_rows &= row_length > 0
    cells = [offsets[np.flatnonzero(bad_rows)].astype(np.int64)] if bad_rows.any() else []
    return starts, cells


def _read_flattening(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "input_ids", source)
    offsets = tokens.offsets
    total = int(offsets[-1])
    columns = {name: _list_column(table, name, source) for name in ("labels", "position_ids", "seq_idx")}
    for name, column in columns.items():
        _check_lengths(column, name, tokens, "input_ids", source)
    positions = _values(columns["position_ids"])
    bad: list[Int64Array] = []
    cu = _cu_starts(table, "cu_seq_lens_q", offsets, source)
    known = True
    if cu is not None:  # explicit boundaries first; position ids are then checked against them
        document = _from_starts(offsets, cu[0], np.zeros(total, dtype=bool))
        bad.extend(cu[1])
        variant = "cu_seq_lens"
    elif positions is not None:
        document = _from_starts(offsets, positions == 0, np.zeros(total, dtype=bool))
        variant = "position ids"
    else:
        document = _row_of(offsets, total)
        known = False
        variant = "no document boundaries"
    seq_idx = columns["seq_idx"]
    if seq_idx is not None:
        changes = np.zeros(total, dtype=bool)
        changes[1:] = seq_idx.values[1:] != seq_idx.values[:-1]
        bad.append(_mismatch(offsets, document, changes))
    labels = columns["labels"]
    layout = PackedLayout(
        "flattening",
        offsets,
        tokens.values,
        document,
        labels.values != IGNORE_INDEX if labels is not None else None,
        positions,
        None,
        _values(labels),
        np.full(len(tokens.lengths), known, dtype=bool),
        variant,
    )
    return _Parsed(layout, bad)


def _read_torchtune(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "tokens", source)
    offsets = tokens.offsets
    columns = {name: _list_column(table, name, source) for name in ("labels", "input_pos")}
    for name, column in columns.items():
        _check_lengths(column, name, tokens, "tokens", source)
    lengths = _required(table, "seq_lens", source)
    build = _from_lengths(offsets, lengths, fill_exactly=True)
    document = build.document
    positions = _values(columns["input_pos"])
    if positions is not None and len(document):
        # the padding is the last entry of seq_lens: a block's last run (not its first) not restarting at 0
        values = np.maximum(lengths.values, 0)
        entry_row = np.repeat(np.arange(len(lengths.lengths), dtype=np.int64), lengths.lengths)
        sums = np.bincount(entry_row, weights=values, minlength=len(lengths.lengths)).astype(np.int64)
        rows = np.flatnonzero((lengths.lengths >= 2) & (sums == np.diff(offsets)))
        last = values[lengths.offsets[1:][rows] - 1]
        rows, last = rows[last > 0], last[last > 0]
        pad_starts = offsets[rows + 1] - last
        padded = positions[pad_starts] != 0
        if padded.any():
            document = document.copy()
            document[ranges(pad_starts[padded], last[padded])] = -1
            document = _renumber(document)
    labels = columns["labels"]
    layout = PackedLayout(
        "torchtune",
        offsets,
        tokens.values,
        document,
        labels.values != IGNORE_INDEX if labels is not None else None,
        positions,
        None,
        _values(labels),
        np.ones(len(tokens.lengths), dtype=bool),
    )
    return _Parsed(layout, list(build.bad_cells))


def _read_megatron(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "input_ids", source)
    offsets = tokens.offsets
    total = int(offsets[-1])
    loss_mask = _list_column(table, "loss_mask", source)
    _check_lengths(loss_mask, "loss_mask", tokens, "input_ids", source)
    starts_column = _required(table, "seq_start_id", source)
    if len(starts_column.lengths) != len(tokens.lengths):
        raise _error(source, "column 'seq_start_id' has another number of rows than 'input_ids'")
    entry_row = np.repeat(np.arange(len(tokens.lengths), dtype=np.int64), starts_column.lengths)
    value = starts_column.values
    row_length = np.diff(offsets)
    inside = (value >= 0) & (value < row_length[entry_row])
    opens = np.zeros(total, dtype=bool)
    opens[(offsets[:-1][entry_row] + value)[inside]] = True
    bad_rows = np.bincount(entry_row[~inside], minlength=len(row_length)) > 0
    first = starts_column.offsets[:-1]
    has = starts_column.lengths > 0
    bad_rows[has] |= value[first[has]] != 0
    bad_rows[~has] |= row_length[~has] > 0
    rising = np.ones(len(value), dtype=bool)
    rising[1:] = value[1:] > value[:-1]
    rising[first[has]] = True
    bad_rows |= np.bincount(entry_row[~rising], minlength=len(row_length)) > 0
    document = _from_starts(offsets, opens, np.zeros(total, dtype=bool))
    bad_rows &= row_length > 0
    bad = [offsets[:-1][np.flatnonzero(bad_rows)].astype(np.int64)] if bad_rows.any() else []
    targets = None
    if loss_mask is not None:
        # loss_mask[i] trains the prediction of token i + 1: the target sits one to the right
        targets = np.zeros(total, dtype=bool)
        targets[1:] = loss_mask.values[:-1] != 0
        targets &= _not_block_start(offsets, total)
    docs_per_block = np.bincount(_row_of(offsets, total)[_starts_of(offsets, document)], minlength=len(row_length))
    layout = PackedLayout(
        "megatron",
        offsets,
        tokens.values,
        document,
        targets,
        None,
        None,
        None,
        np.ones(len(tokens.lengths), dtype=bool),
    )
    return _Parsed(layout, bad, used_offset=docs_per_block.astype(np.int64))


def _read_segment_ids(table: pa.Table, source: str) -> _Parsed:
    tokens = _required(table, "input_ids", source)
    offsets = tokens.offsets
    total = int(offsets[-1])
    columns = {name: _list_column(table, name, source) for name in ("attention_mask", "labels", "position_ids")}
    for name, column in columns.items():
        _check_lengths(column, name, tokens, "input_ids", source)
    mask = _required(table, "attention_mask", source).values
    positions = _values(columns["position_ids"])
    labels = columns["labels"]
    targets = labels.values != IGNORE_INDEX if labels is not None else None
    rows = _row_of(offsets, total)
    numbered_rows = _row_max(offsets, mask) >= 2  # a block numbering its documents; others hold 0/1 or one document
    numbered = numbered_rows[rows]
    padding = mask == 0
    bad: list[Int64Array] = []
    known = np.ones(len(tokens.lengths), dtype=bool)
    changes = np.ones(total, dtype=bool)
    changes[1:] = mask[1:] != mask[:-1]
    if positions is not None:
        padding |= _trailing_padding(offsets, positions, targets) & ~numbered & ~_row_has(offsets, mask == 0)[rows]
        opens = np.where(numbered, changes, positions == 0)
        variant = "document numbers" if numbered_rows.any() else "0/1 mask: documents from position ids"
    else:
        opens = changes
        if not numbered_rows.any():
            known[:] = False
            variant = "0/1 mask: no document boundaries"
        else:
            variant = "document numbers"
    document = _from_starts(offsets, opens, padding)
    layout = PackedLayout(
        "segment_ids",
        offsets,
        tokens.values,
        document,
        targets,
        positions,
        mask,
        _values(labels),
        known,
        variant,
    )
    return _Parsed(layout, bad)


def _row_max(offsets: Int64Array, values: Int64Array) -> Int64Array:
    """The largest value of every block (-1 for an empty block). O(tokens)."""
    result = np.full(len(offsets) - 1, -1, dtype=np.int64)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    if len(nonempty):
        result[nonempty] = np.maximum.reduceat(values, offsets[:-1][nonempty])
    return result


def _row_has(offsets: Int64Array, flags: BoolArray) -> BoolArray:
    """Whether any token of every block is flagged."""
    has: BoolArray = _row_max(offsets, flags.astype(np.int64)) > 0
    return has


def _trailing_padding(offsets: Int64Array, positions: Int64Array, targets: BoolArray | None) -> BoolArray:
    """LLaMA-Factory's plain packing pads with position 0 and an attention mask of 1: the tokens after a block's
    last position above 0, when at least two and none of them a target, are padding. O(tokens)."""
    total = len(positions)
    padding = np.zeros(total, dtype=bool)
    if not total:
        return padding
    rows = _row_of(offsets, total)
    index = np.arange(total, dtype=np.int64)
    marked = np.where(positions > 0, index, -1)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    last_positive = np.full(len(offsets) - 1, -1, dtype=np.int64)
    last_positive[nonempty] = np.maximum.reduceat(marked, offsets[:-1][nonempty])
    tail_start = np.where(last_positive >= 0, last_positive + 1, offsets[:-1])
    candidate = index >= tail_start[rows]
    tail_length = offsets[1:] - tail_start
    trained = np.bincount(rows[candidate & targets], minlength=len(tail_length)) if targets is not None else 0
    ok_rows = (tail_length >= 2) & (np.asarray(trained) == 0) & (last_positive >= 0)
    result: BoolArray = candidate & ok_rows[rows]
    return result


_READERS = {
    "packing": _read_packing,
    "trl": _read_trl,
    "flattening": _read_flattening,
    "torchtune": _read_torchtune,
    "megatron": _read_megatron,
    "segment_ids": _read_segment_ids,
}


def _parse(
    source: Any, format: str | None, name: str | None = None, limits: ReadLimits | None = None
) -> tuple[_Parsed, str]:
    found = _to_table(source, name, limits_of(limits))
    table, name = found.table, found.label
    if format is not None and format not in _READERS:
        raise SettingError("format", f"one of {', '.join(LAYOUTS)}", format)
    layout = format if format is not None else _detect(set(map(str, table.column_names)), name)
    try:
        return _READERS[layout](table, name), name
    except DatasetError as error:  # a row of a dataset of several files: named by its file
        raise found.locate(error) from None


def read_packed(source: Any, *, format: str | None = None, limits: ReadLimits | None = None) -> PackedLayout:
    """Read packed data of any known layout into one form (see :class:`PackedLayout`). O(tokens).

    ``limits`` (a :class:`~packing.limits.ReadLimits`) bounds the file's bytes, the blocks
    (``max_rows``) and the values of any list column (``max_tokens``), checked before decoding (a
    Parquet file's metadata, a file's size) or, for a table given, before its columns become arrays.

    >>> import pyarrow as pa
    >>> rows = {"input_ids": [[5, 6, 7, 0]], "seq_start_id": [[0, 2]], "loss_mask": [[1, 0, 0, 0]]}
    >>> layout = read_packed(pa.table(rows))
    >>> layout.format, layout.document.tolist(), layout.targets.tolist()
    ('megatron', [0, 0, 1, 1], [False, True, False, False])
    """
    parsed, _ = _parse(source, format, limits=limits)
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


def _checks(parsed: _Parsed, capacity: int, capacity_given: bool, used: Int64Array) -> list[Finding]:
    layout = parsed.layout
    offsets, document = layout.row_offsets, layout.document
    total = len(document)
    rows = _row_of(offsets, total)
    starts = _starts_of(offsets, document)
    inner = _not_block_start(offsets, total)
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
        bad.append(np.flatnonzero(jumps & known_token))
    cells["inconsistent_boundaries"] = np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)
    unknown_blocks = np.flatnonzero(~layout.boundaries_known & (np.diff(offsets) > 0))
    cells["no_document_boundaries"] = offsets[:-1][unknown_blocks]
    mask = layout.attention_mask
    if mask is not None:
        docs = np.bincount(rows[starts], minlength=layout.num_blocks)
        open_mask = np.bincount(rows[(mask == 0) & (document >= 0)], minlength=layout.num_blocks) == 0
        flat_mask = _row_max(offsets, mask) <= 1
        blocks = np.flatnonzero((docs >= 2) & open_mask & flat_mask & layout.boundaries_known)
        second = np.flatnonzero(starts & inner)
        first_inner = second[np.searchsorted(rows[second], blocks)] if len(blocks) else np.zeros(0, dtype=np.int64)
        cells["all_ones_attention_mask"] = first_inner
    if layout.labels is not None:
        cells["label_mismatch"] = np.flatnonzero(
            (layout.labels != IGNORE_INDEX) & (layout.labels != layout.input_ids) & (document >= 0)
        )
    if capacity_given:
        cells["block_too_long"] = offsets[:-1][np.flatnonzero(used > capacity)]
    ids = layout.input_ids
    cells["token_id_out_of_range"] = np.flatnonzero((ids < 0) | (ids > _INT32_MAX))
    findings = []
    for kind in FINDING_KINDS:
        if kind in cells:
            found = _finding(kind, cells[kind], layout)
            if found is not None:
                findings.append(found)
    return findings


def audit(
    source: Any,
    *,
    max_seq_length: int | None = None,
    format: str | None = None,
    name: str | None = None,
    limits: ReadLimits | None = None,
) -> AuditReport:
    """Recognise a packed dataset's layout, count what it holds and check every invariant.

    ``source`` is what :func:`packing.read_dataset` takes (:mod:`packing.files`): a ``.parquet``,
    ``.jsonl``, ``.json`` or ``.arrow`` path, several paths, a glob, a folder of shards or a ``datasets``
    ``save_to_disk`` folder (read as one table, files in sorted order; a bad row is named by its file), a
    binary file object or ``bytes`` of such a file (an upload; ``name`` gives its file name); or a
    ``pyarrow.Table``, a ``datasets.Dataset`` or a dict of columns (rows, or a collator's arrays of shape
    ``(rows, T)``). ``max_seq_length`` is the block capacity (default:
    the longest block); ``format`` forces a layout instead of recognising it; ``name`` is how the report and
    its errors name the source; ``limits`` bounds what is read, as in :func:`read_packed`.
    O(tokens + blocks), numpy throughout.

    >>> import pyarrow as pa
    >>> table = pa.table({"input_ids": [[1, 2, 3, 9], [4, 5, 0, 0]], "labels": [[-100, 2, 3, -100], [4, 5, -100, -100]],
    ...                   "attention_mask": [[1, 1, 1, 2], [1, 1, 0, 0]], "position_ids": [[0, 1, 2, 3], [0, 1, 0, 0]]})
    >>> report = audit(table)
    >>> report.format, report.num_documents, report.padding_tokens, f"{report.efficiency:.3f}"
    ('segment_ids', 3, 2, '0.750')
    >>> [(f.kind, f.count, f.examples) for f in report.findings]
    [('position_not_reset', 1, ((0, 3),))]
    """
    if max_seq_length is not None and (
        isinstance(max_seq_length, bool) or not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < 1
    ):
        raise SettingError("max_seq_length", "an integer >= 1", max_seq_length)
    parsed, name = _parse(source, format, name, limits)
    layout = parsed.layout
    offsets, document = layout.row_offsets, layout.document
    total = len(document)
    rows = _row_of(offsets, total)
    real_per_block = np.bincount(rows[document >= 0], minlength=layout.num_blocks).astype(np.int64)
    used = real_per_block - (parsed.used_offset if parsed.used_offset is not None else 0)
    used = np.maximum(used, 0)
    given = max_seq_length is not None
    capacity = int(max_seq_length) if max_seq_length is not None else int(max(np.diff(offsets).max(initial=0), 1))
    if layout.format == "megatron" and not given:
        capacity = int(max(used.max(initial=0), 1))
    fill = used / capacity
    findings = _checks(parsed, capacity, given, used)
    tokens = int(real_per_block.sum())
    return AuditReport(
        source=name,
        format=layout.format,
        num_blocks=layout.num_blocks,
        num_documents=layout.num_documents if bool(layout.boundaries_known.all()) else None,
        tokens=tokens,
        padding_tokens=int(total - tokens),
        max_seq_length=capacity,
        max_seq_length_given=given,
        efficiency=float(used.sum() / (capacity * layout.num_blocks)) if layout.num_blocks else 0.0,
        block_fill=fill.astype(np.float64),
        findings=tuple(findings),
        layout=layout,
    )


def report_json(report: AuditReport) -> str:
    """The report's summary (:meth:`AuditReport.summary`) as JSON text.

    >>> import pyarrow as pa
    >>> summary = json.loads(report_json(audit(pa.table({"input_ids": [[1, 2]], "seq_lengths": [[2]]}))))
    >>> summary["format"], summary["num_documents"], summary["findings"]
    ('trl', 1, [])
    """
    return json.dumps(report.summary(), indent=2)
