"""A packed file's audit for the Inspect tab, without Streamlit or Plotly: reading it within the page's bounds,
the blocks worth showing first, and their cells as arrays with the findings located on them.

>>> import pyarrow as pa
>>> from packing.layouts.audit import audit
>>> rows = {"input_ids": [[1, 2, 3, 4]], "labels": [[-100, 2, 3, 4]], "attention_mask": [[1, 1, 2, 2]]}
>>> finding_cells(audit(pa.table(rows)), [0])
[('cross_document_label', 0, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from explorer.core.model import MAX_SEQUENCES, MAX_TOKENS, MAX_UPLOAD_MB
from explorer.core.sources import MAX_FILE_VALUES
from packing.layouts.audit import AuditReport, audit
from packing.reading._limits import ReadLimits

Int64Array = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BlockGrid:
    """Blocks of a report as ``(rows, width)`` arrays; cells past a block's end hold -2 in ``document``."""

    blocks: list[int]
    document: Int64Array
    tokens: Int64Array
    positions: Int64Array | None
    targets: npt.NDArray[np.int8]
    """1 = a target (padding included: that is a finding), 0 = no loss, -1 = padding, -2 = beyond the block."""


def load_report(data: bytes, name: str, max_seq_length: int | None = None) -> AuditReport:
    """Audit an uploaded ``.parquet`` / ``.jsonl`` file; a file that cannot be read raises
    :class:`packing.errors.DatasetError` (show ``str(error)``). O(tokens).

    >>> load_report(b'{"input_ids": [1, 2, 3], "seq_lengths": [2, 1]}\\n', "rows.jsonl").num_documents
    2
    """
    return audit(data, max_seq_length=max_seq_length, name=name, limits=AUDIT_LIMITS)


AUDIT_LIMITS = ReadLimits(
    max_bytes=MAX_UPLOAD_MB * 2**20, max_tokens=MAX_TOKENS, max_rows=MAX_SEQUENCES, max_values=MAX_FILE_VALUES
)
"""What the Inspect tab audits (``packing.reading._limits``, checked before decoding): blocks, list values per column
(from a Parquet file's metadata), bytes, and the values JSON lines spell out (ids, labels, masks, positions)."""


def default_blocks(report: AuditReport, count: int = 8) -> list[int]:
    """Blocks worth showing first: those with findings (in order), then the others. O(findings + count).

    >>> import pyarrow as pa
    >>> from packing.layouts.audit import audit
    >>> default_blocks(audit(pa.table({"input_ids": [[1], [2], [3]], "seq_lengths": [[1], [1], [2]]})), 2)
    [2, 0]
    """
    flagged: dict[int, None] = {}
    for item in report.findings:
        for block in report.packed.block_of(item.cells[: count * 4]).tolist():
            flagged.setdefault(int(block), None)
    chosen = list(flagged)[:count]
    for block in range(report.num_blocks):
        if len(chosen) >= count:
            break
        if block not in flagged:
            chosen.append(block)
    return chosen


def block_grid(report: AuditReport, blocks: Sequence[int]) -> BlockGrid:
    """The chosen blocks' cells: document numbers, token ids, position ids and loss targets. O(cells)."""
    packed = report.packed
    offsets = packed.row_offsets
    chosen = [int(block) for block in blocks]
    lengths = np.array([offsets[b + 1] - offsets[b] for b in chosen], dtype=np.int64)
    width = int(max(lengths.max(initial=0), 1))
    document = np.full((len(chosen), width), -2, dtype=np.int64)
    tokens = np.zeros((len(chosen), width), dtype=np.int64)
    positions = np.zeros((len(chosen), width), dtype=np.int64) if packed.position_ids is not None else None
    targets = np.full((len(chosen), width), -2, dtype=np.int8)
    real_targets = packed.real_targets()
    for row, block in enumerate(chosen):
        cells = slice(int(offsets[block]), int(offsets[block + 1]))
        n = int(lengths[row])
        document[row, :n] = packed.document[cells]
        tokens[row, :n] = packed.input_ids[cells]
        if positions is not None and packed.position_ids is not None:
            positions[row, :n] = packed.position_ids[cells]
        trained = real_targets[cells]
        targets[row, :n] = np.where(trained, 1, np.where(packed.document[cells] < 0, -1, 0))
    return BlockGrid(chosen, document, tokens, positions, targets)


def finding_cells(report: AuditReport, blocks: Sequence[int]) -> list[tuple[str, int, int]]:
    """``(kind, row in blocks, position)`` of every finding on the chosen blocks. O(finding cells)."""
    packed = report.packed
    row_of = {int(block): row for row, block in enumerate(blocks)}
    out = []
    chosen = np.array(sorted(row_of), dtype=np.int64)
    for item in report.findings:
        owners = packed.block_of(item.cells)
        keep = np.isin(owners, chosen)
        for cell, block in zip(item.cells[keep].tolist(), owners[keep].tolist(), strict=True):
            out.append((item.kind, row_of[block], int(cell - packed.row_offsets[block])))
    return out
