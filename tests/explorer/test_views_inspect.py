"""The Inspect view's pure functions: blocks coloured by document, findings on their cells, the report in words."""

from __future__ import annotations

import doctest

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa

import packing
from explorer.core import audit as audit_view
from explorer.views import figures, tables
from explorer.views.figures import AUDIT_DOCUMENT_COLORS, FINDING_COLOR, PAD_COLOR
from packing.layouts._export import export
from packing.layouts.audit import AuditReport, audit


def _leaky_report() -> AuditReport:
    batch = packing.pack([[1, 2, 3], [4, 5], [6, 7], [8]], 5, strategy="next_fit")  # [1 2 3 4 5] [6 7 8 . .]
    table = export(batch, "packing")
    labels = table.column("labels").to_pylist()
    labels[0][3] = 4  # document 2 of block 0 starts at position 3: its first token is now predicted
    labels[1][4] = 9  # a loss on padding
    table = table.set_column(table.column_names.index("labels"), "labels", pa.array(labels))
    return audit(table)


def test_docstring_examples() -> None:
    result = doctest.testmod(audit_view, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_planted_defects_are_marked_on_their_cells() -> None:
    report = _leaky_report()
    assert report.counts() == {"cross_document_label": 1, "padding_trained": 1}
    assert audit_view.default_blocks(report) == [0, 1]
    fig = figures.inspect_figure(report)
    markers = {
        trace.name: trace
        for trace in fig.data
        if isinstance(trace, go.Scatter) and trace.x[0] is not None and trace.showlegend
    }
    repeated = [trace.name for trace in fig.data if isinstance(trace, go.Scatter) and trace.showlegend is False]
    assert sorted(repeated) == ["cross_document_label", "padding_trained"]  # again on the loss targets
    assert set(markers) == {"cross_document_label", "padding_trained"}
    assert (list(markers["cross_document_label"].x), list(markers["cross_document_label"].y)) == ([3], ["Block 1"])
    assert (list(markers["padding_trained"].x), list(markers["padding_trained"].y)) == ([4], ["Block 2"])
    # the hover of the flagged cell names the finding
    documents = fig.data[0]
    assert documents.customdata[0][3][4] == "cross_document_label"
    assert documents.customdata[0][2][4] == ""


def test_blocks_are_coloured_by_document_and_padding_is_grey() -> None:
    report = _leaky_report()
    fig = figures.inspect_figure(report, [0, 1])
    documents, targets = fig.data[0], fig.data[1]
    pad_slot = len(AUDIT_DOCUMENT_COLORS)
    assert np.asarray(documents.z).tolist() == [[0, 0, 0, 1, 1], [2, 2, 3, pad_slot, pad_slot]]
    assert documents.colorscale[2 * pad_slot][1] == PAD_COLOR
    assert np.asarray(documents.text).tolist()[0] == ["1", "2", "3", "4", "5"]
    # targets: 0 target, 1 no loss, 2 padding; the planted labels show as targets, the trained padding too
    assert np.asarray(targets.z).tolist() == [[1, 0, 0, 0, 0], [1, 0, 1, 2, 0]]


def _hue(color: str) -> tuple[float, float]:
    """Hue (degrees) and saturation of ``#rrggbb``."""
    import colorsys

    r, g, b = (int(color.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))
    hue, saturation, _ = colorsys.rgb_to_hsv(r, g, b)
    return 360 * hue, saturation


def test_no_document_of_a_clean_file_is_drawn_in_the_red_of_a_finding() -> None:
    """Red marks a finding on the Inspect tab: a clean file's many documents never take a red or pink."""
    report = audit(export(packing.pack([[i + 1] * 2 for i in range(40)], 8, strategy="next_fit"), "packing"))
    assert report.findings == ()
    fig = figures.inspect_figure(report)
    used = {fig.data[0].colorscale[2 * slot][1] for slot in np.unique(np.asarray(fig.data[0].z)).tolist()}
    red, _ = _hue(FINDING_COLOR)
    assert len(used - {PAD_COLOR}) >= 9  # every colour of the palette is used
    for color in used - {PAD_COLOR}:
        hue, saturation = _hue(color)
        assert min(abs(hue - red), 360 - abs(hue - red)) > 25 or saturation < 0.5, (color, FINDING_COLOR)


def test_ragged_blocks_leave_cells_beyond_the_block_white() -> None:
    report = audit(pa.table({"input_ids": [[1, 2, 3], [4]], "seq_lengths": [[2, 1], [1]]}))
    grid = audit_view.block_grid(report, [0, 1])
    assert grid.document.tolist() == [[0, 0, 1], [2, -2, -2]]
    assert grid.targets.tolist() == [[0, 1, 0], [0, -2, -2]]
    fig = figures.inspect_figure(report, [0, 1])
    assert np.asarray(fig.data[0].z).tolist()[1][1:] == [len(AUDIT_DOCUMENT_COLORS) + 1] * 2


def test_report_in_words_and_tables() -> None:
    report = _leaky_report()
    lines = report.describe()
    assert lines[0] == "Layout: this project's blocks."
    assert lines[1].startswith("2 blocks of up to 5 positions hold 8 tokens and 2 padding tokens: 80.00 %")
    assert any(line.startswith("- cross_document_label in 1 cell (first at block 0, position 3)") for line in lines)
    rows = tables.audit_findings_rows(report)
    assert [(row["kind"], row["count"], row["first cells (block, position)"]) for row in rows] == [
        ("cross_document_label", 1, "(1, 3)"),  # blocks numbered from 1, as the page numbers them
        ("padding_trained", 1, "(2, 4)"),
    ]
    summary = dict(tables.audit_summary_rows(report))
    assert summary["documents"] == "4" and summary["efficiency"] == "80.00 %"
    clean = audit(export(packing.pack([[1, 2], [3]], 4), "torchtune"))
    assert clean.describe()[-1].startswith("No problems found")
    assert tables.audit_findings_rows(clean) == []


def test_position_findings_show_on_the_position_ids() -> None:
    batch = packing.pack([[1, 2, 3], [4, 5]], 6, strategy="next_fit")  # [1 2 3 4 5 .]
    table = export(batch, "segment_ids")
    positions = table.column("position_ids").to_pylist()
    positions[0][3:5] = [3, 4]  # the second document's positions run on
    table = table.set_column(table.column_names.index("position_ids"), "position_ids", pa.array(positions))
    report = audit(table)
    assert report.counts() == {"position_not_reset": 1}
    fig = figures.inspect_figure(report)
    heatmaps = [trace for trace in fig.data if isinstance(trace, go.Heatmap)]
    assert [trace.name for trace in heatmaps] == ["documents", "targets", "position ids"]
    assert np.asarray(heatmaps[2].text).tolist() == [["0", "1", "2", "3", "4", "0"]]
    marks = [trace for trace in fig.data if isinstance(trace, go.Scatter) and trace.name == "position_not_reset"]
    assert sorted((trace.yaxis, list(trace.x)) for trace in marks) == [("y", [3]), ("y3", [3])]
