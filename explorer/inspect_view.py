"""The Inspect view's content, without Streamlit: a packed file's blocks coloured by document with the audit's
findings marked on their cells, and the report in plain words.

>>> import pyarrow as pa
>>> from packing.auditing import audit
>>> rows = {"input_ids": [[1, 2, 3, 4]], "labels": [[-100, 2, 3, 4]], "attention_mask": [[1, 1, 2, 2]]}
>>> report = audit(pa.table(rows))
>>> [row["kind"] for row in findings_rows(report)]
['cross_document_label']
>>> finding_cells(report, [0])
[('cross_document_label', 0, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.figures import PAD_COLOR, SEQUENCE_COLORS
from explorer.model import MAX_SEQUENCES, MAX_TOKENS, MAX_UPLOAD_MB
from explorer.sources import MAX_FILE_VALUES
from packing.auditing import FINDING_KINDS, LAYOUT_TITLES, AuditReport, audit
from packing.limits import ReadLimits

Int64Array = npt.NDArray[np.int64]
BEYOND_COLOR = "#ffffff"
"""Cells past the end of a shorter (unpadded) block."""
TARGET_COLORS = {"target": "#15803d", "no loss": "#7c3aed", "padding": PAD_COLOR, "beyond the block": BEYOND_COLOR}
FINDING_COLOR = "#dc2626"
_FINDING_PANELS = {
    "cross_document_label": (2,),
    "padding_trained": (2,),
    "label_mismatch": (2,),
    "position_not_reset": (3,),
    "inconsistent_boundaries": (3,),
}
"""Besides the blocks, the panel (2 = loss targets, 3 = position ids) where each kind of finding shows."""
MAX_TEXT_CELLS = 400
"""Token ids are printed in the cells of drawings up to this size."""


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
"""What the Inspect tab audits (``packing.limits``, checked before decoding): blocks, list values per column
(from a Parquet file's metadata), bytes, and the values JSON lines spell out (ids, labels, masks, positions)."""


def default_blocks(report: AuditReport, count: int = 8) -> list[int]:
    """Blocks worth showing first: those with findings (in order), then the others. O(findings + count).

    >>> import pyarrow as pa
    >>> from packing.auditing import audit
    >>> default_blocks(audit(pa.table({"input_ids": [[1], [2], [3]], "seq_lengths": [[1], [1], [2]]})), 2)
    [2, 0]
    """
    flagged: dict[int, None] = {}
    for item in report.findings:
        for block in report.layout.block_of(item.cells[: count * 4]).tolist():
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
    layout = report.layout
    offsets = layout.row_offsets
    chosen = [int(block) for block in blocks]
    lengths = np.array([offsets[b + 1] - offsets[b] for b in chosen], dtype=np.int64)
    width = int(max(lengths.max(initial=0), 1))
    document = np.full((len(chosen), width), -2, dtype=np.int64)
    tokens = np.zeros((len(chosen), width), dtype=np.int64)
    positions = np.zeros((len(chosen), width), dtype=np.int64) if layout.position_ids is not None else None
    targets = np.full((len(chosen), width), -2, dtype=np.int8)
    real_targets = layout.real_targets()
    for row, block in enumerate(chosen):
        cells = slice(int(offsets[block]), int(offsets[block + 1]))
        n = int(lengths[row])
        document[row, :n] = layout.document[cells]
        tokens[row, :n] = layout.input_ids[cells]
        if positions is not None and layout.position_ids is not None:
            positions[row, :n] = layout.position_ids[cells]
        trained = real_targets[cells]
        targets[row, :n] = np.where(trained, 1, np.where(layout.document[cells] < 0, -1, 0))
    return BlockGrid(chosen, document, tokens, positions, targets)


def finding_cells(report: AuditReport, blocks: Sequence[int]) -> list[tuple[str, int, int]]:
    """``(kind, row in blocks, position)`` of every finding on the chosen blocks. O(finding cells)."""
    layout = report.layout
    row_of = {int(block): row for row, block in enumerate(blocks)}
    out = []
    chosen = np.array(sorted(row_of), dtype=np.int64)
    for item in report.findings:
        owners = layout.block_of(item.cells)
        keep = np.isin(owners, chosen)
        for cell, block in zip(item.cells[keep].tolist(), owners[keep].tolist(), strict=True):
            out.append((item.kind, row_of[block], int(cell - layout.row_offsets[block])))
    return out


def _discrete(colors: Sequence[str]) -> list[list[float | str]]:
    n = len(colors)
    scale: list[list[float | str]] = []
    for index, color in enumerate(colors):
        scale += [[index / n, color], [(index + 1) / n, color]]
    return scale


def document_colour_index(document: Int64Array) -> Int64Array:
    """Colour slot of every cell: the document modulo the palette; padding and cells past the block after it.

    >>> document_colour_index(np.array([[0, 1, 13, -1, -2]])).tolist()
    [[0, 1, 1, 12, 13]]
    """
    n = len(SEQUENCE_COLORS)
    slots: Int64Array = np.where(document >= 0, document % n, np.where(document == -1, n, n + 1))
    return slots


def inspect_figure(report: AuditReport, blocks: Sequence[int] | None = None) -> go.Figure:
    """Blocks coloured by document (padding grey), the loss targets underneath, and a red square on every cell
    a finding points at (hover names it). ``blocks`` defaults to :func:`default_blocks`. O(cells shown)."""
    chosen = list(blocks) if blocks is not None else default_blocks(report)
    grid = block_grid(report, chosen)
    rows, width = grid.document.shape
    labels = [f"Block {block}" for block in grid.blocks]
    marks = finding_cells(report, chosen)
    kinds_at: dict[tuple[int, int], list[str]] = {}
    for kind, row, position in marks:
        kinds_at.setdefault((row, position), []).append(kind)
    flagged = np.full((rows, width), "", dtype=object)
    for (row, position), kinds in kinds_at.items():
        flagged[row, position] = ", ".join(kinds)
    positions = grid.positions if grid.positions is not None else np.full((rows, width), -1, dtype=np.int64)
    hover = np.stack((grid.document + 1, grid.tokens, positions, grid.targets.astype(np.int64)), axis=-1).astype(object)
    hover = np.concatenate((hover, flagged[..., None]), axis=-1)
    template = (
        "%{y}, position %{x}<br>token id: %{customdata[1]}<br>document: %{customdata[0]} (0 = padding)"
        "<br>position id: %{customdata[2]}<br>target: %{customdata[3]} (1 = loss)<br>%{customdata[4]}<extra></extra>"
    )
    show_text = rows * width <= MAX_TEXT_CELLS
    titles = [
        "Blocks (colour = document, red = finding)",
        "Loss targets (green = trained)",
    ]
    if grid.positions is not None:
        titles.append("Position ids (0 = a document starts)")
    fig = make_subplots(
        rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=0.3 / len(titles), subplot_titles=titles
    )
    n = len(SEQUENCE_COLORS)
    gap = 1 if width <= 256 else 0
    fig.add_trace(
        go.Heatmap(
            z=document_colour_index(grid.document),
            x=np.arange(width),
            y=labels,
            customdata=hover,
            hovertemplate=template,
            colorscale=_discrete([*SEQUENCE_COLORS, PAD_COLOR, BEYOND_COLOR]),
            zmin=-0.5,
            zmax=n + 1.5,
            showscale=False,
            xgap=gap,
            ygap=2,
            text=grid.tokens.astype(str) if show_text else None,
            texttemplate="%{text}" if show_text else None,
            name="documents",
        ),
        row=1,
        col=1,
    )
    target_slot = np.select([grid.targets == 1, grid.targets == 0, grid.targets == -1], [0, 1, 2], 3)
    fig.add_trace(
        go.Heatmap(
            z=target_slot,
            x=np.arange(width),
            y=labels,
            customdata=hover,
            hovertemplate=template,
            colorscale=_discrete(list(TARGET_COLORS.values())),
            zmin=-0.5,
            zmax=3.5,
            showscale=False,
            xgap=gap,
            ygap=2,
            name="targets",
        ),
        row=2,
        col=1,
    )
    if grid.positions is not None:
        shown = np.where(grid.document == -2, np.nan, grid.positions.astype(np.float64))
        fig.add_trace(
            go.Heatmap(
                z=shown,
                x=np.arange(width),
                y=labels,
                customdata=hover,
                hovertemplate=template,
                colorscale=[[0.0, "#ffffff"], [1.0, "#1e3a8a"]],
                showscale=False,
                xgap=gap,
                ygap=2,
                text=grid.positions.astype(str) if show_text else None,
                texttemplate="%{text}" if show_text else None,
                name="position ids",
            ),
            row=3,
            col=1,
        )
    for kind in FINDING_KINDS:
        cells = [(row, position) for k, row, position in marks if k == kind]
        if not cells:
            continue
        panels = [1, *(panel for panel in _FINDING_PANELS.get(kind, ()) if panel <= len(titles))]
        for panel in panels:
            fig.add_trace(
                go.Scatter(
                    x=[position for _, position in cells],
                    y=[labels[row] for row, _ in cells],
                    mode="markers",
                    marker={"symbol": "square-open", "size": 14, "color": FINDING_COLOR, "line": {"width": 3}},
                    name=kind,
                    legendgroup=kind,
                    showlegend=panel == 1,
                    hovertemplate=f"{kind}<br>%{{y}}, position %{{x}}<extra></extra>",
                ),
                row=panel,
                col=1,
            )
    for name, color in TARGET_COLORS.items():
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", marker={"color": color, "symbol": "square", "size": 12}, name=name
            ),
            row=2,
            col=1,
        )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="position in block", row=len(titles), col=1)
    row_height = 30 if rows <= 12 else 14
    fig.update_layout(
        height=150 + 80 * len(titles) + len(titles) * row_height * rows,
        legend={"orientation": "h", "yanchor": "top", "y": -0.15, "xanchor": "left", "x": 0},
        margin={"t": 60},
    )
    return fig


def summary_rows(report: AuditReport) -> list[tuple[str, str]]:
    """``(name, value)`` rows of the counts, as the command line prints them.

    >>> import pyarrow as pa
    >>> from packing.auditing import audit
    >>> summary_rows(audit(pa.table({"input_ids": [[1, 2, 3, 0]], "seq_lengths": [[3]], "labels": [[-100, 2, 3, -100]],
    ...                                    "position_ids": [[0, 1, 2, 0]]})))[:4]
    [('format', "packing (this project's blocks)"), ('blocks', '1'), ('documents', '1'), ('tokens', '3')]
    """
    fill = report.block_fill
    documents = "unknown (no boundaries)" if report.num_documents is None else f"{report.num_documents:,}"
    rows = [
        ("format", f"{report.format} ({LAYOUT_TITLES[report.format]})"),
        ("blocks", f"{report.num_blocks:,}"),
        ("documents", documents),
        ("tokens", f"{report.tokens:,}"),
        ("padding tokens", f"{report.padding_tokens:,}"),
        ("max_seq_length", f"{report.max_seq_length:,}" + ("" if report.max_seq_length_given else " (longest block)")),
        ("efficiency", f"{100 * report.efficiency:.2f} %"),
    ]
    if len(fill):
        rows.append(("block fill (min / median / max)", " / ".join(f"{100 * v:.1f} %" for v in _spread(fill))))
    return rows


def _spread(fill: npt.NDArray[np.float64]) -> tuple[float, float, float]:
    return float(fill.min()), float(np.median(fill)), float(fill.max())


def findings_rows(report: AuditReport) -> list[dict[str, Any]]:
    """One row per finding: kind, count, first cells, what it means and what to change."""
    return [
        {
            "kind": item.kind,
            "count": item.count,
            "first cells (block, position)": ", ".join(f"({b}, {p})" for b, p in item.examples),
            "meaning": item.description,
            "fix": item.fix,
        }
        for item in report.findings
    ]


def report_lines(report: AuditReport) -> list[str]:
    """The report in plain words, one sentence a line (the same as ``AuditReport.describe``)."""
    return report.describe()
