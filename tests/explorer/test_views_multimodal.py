"""The Images tab's figures and table: image tiles in their document's colour with their number, the position
rows printed in the cells, the 1-D line beside the four mRoPE lines."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.core import multimodal
from explorer.views import figures
from explorer.views import multimodal as views

PACKED = multimodal.example()


def test_blocks_figure_tiles_images_in_their_documents_colour_with_their_number() -> None:
    fig = views.blocks_figure(PACKED)
    (trace,) = fig.data
    assert isinstance(trace, go.Heatmap)
    z, text = np.asarray(trace.z), np.asarray(trace.text)
    assert z.shape == (PACKED.num_blocks, PACKED.max_seq_length)
    assert list(trace.y) == [f"Block {b + 1}" for b in range(PACKED.num_blocks)]
    image, pad = PACKED.kind == multimodal.IMAGE, PACKED.kind == multimodal.PADDING
    colours = len(figures.SEQUENCE_COLORS)
    assert (z[pad] == len(views.PALETTE) - 1).all() and views.PALETTE[-1] == figures.PAD_COLOR
    assert (z[image] == 2 * (PACKED.document[image] % colours) + 1).all()
    assert (z[~image & ~pad] == 2 * (PACKED.document[~image & ~pad] % colours)).all()
    assert (text[image] == (PACKED.image[image] + 1).astype(str)).all() and (text[~image] == "").all()
    hover = np.asarray(trace.hovertext)
    b, t = np.argwhere(image)[0]
    assert hover[b, t] == f"document {PACKED.document[b, t] + 1}, image {PACKED.image[b, t] + 1}"
    assert set(hover[pad].tolist()) <= {"padding"}


def test_block_rows_figure_prints_the_1d_row_above_the_four_position_rows() -> None:
    start = multimodal.default_window(PACKED, 0)
    fig = views.block_rows_figure(PACKED, 0, start, start + multimodal.WINDOW)
    (trace,) = fig.data
    assert list(trace.y) == [views.ONE_D, *multimodal.ROW_NAMES]
    shown = np.asarray(trace.text).astype(int)
    cells = slice(start, start + multimodal.WINDOW)
    assert (shown[0] == PACKED.plain[0, cells]).all()
    assert (shown[1:] == PACKED.positions[:, 0, cells]).all()
    assert list(trace.x) == list(range(start, start + multimodal.WINDOW))
    assert list(fig.layout.xaxis.range) == [start - 0.5, start + multimodal.WINDOW - 0.5]
    assert not (shown[0] == shown[1]).all()  # the 1-D row goes on where the text row restarts


def test_plain_and_rope_figures_draw_the_block_with_document_starts_and_image_spans() -> None:
    used = int((PACKED.document[0] >= 0).sum())
    plain = views.plain_figure(PACKED, 0)
    assert list(plain.data[0].y) == list(range(used))
    rope = views.rope_figure(PACKED, 0)
    assert [trace.name for trace in rope.data] == list(multimodal.ROW_NAMES)
    for row, trace in enumerate(rope.data):
        assert list(trace.y) == PACKED.positions[row, 0, :used].tolist()
    starts = [shape.x0 for shape in rope.layout.shapes if shape.type == "line"]
    spans = [(shape.x0, shape.x1) for shape in rope.layout.shapes if shape.type == "rect"]
    assert len(starts) == len(PACKED.block_documents[0]) - 1
    images = views.block_table_rows(PACKED)[0]["images"].split(", ")
    assert len(spans) == len(images) > 0  # one shaded span per image of the block
    assert all((PACKED.kind[0, int(a + 0.5) : int(b + 0.5)] == multimodal.IMAGE).all() for a, b in spans)
    assert len(plain.layout.shapes) == len(rope.layout.shapes)


def test_block_table_rows_name_each_blocks_documents_and_images() -> None:
    table = views.block_table_rows(PACKED)
    assert [row["block"] for row in table] == list(range(1, PACKED.num_blocks + 1))
    assert sum(row["padding"] for row in table) == PACKED.padding
    assert sum(row["text tokens"] + row["image tokens"] for row in table) == PACKED.tokens_kept
    named = sum(0 if row["images"] == "none" else len(row["images"].split(", ")) for row in table)
    assert named == PACKED.images_kept
    for row, members in zip(table, PACKED.block_documents, strict=True):
        assert row["documents"] == ", ".join(str(d + 1) for d in members)
