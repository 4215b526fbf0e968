"""Figures and table rows of a multimodal packing (``explorer.core.multimodal``): the blocks with image tokens as
image tiles, one block's four position rows, and the 1-D positions a text-only packing gives beside them."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

from explorer.core.multimodal import IMAGE, PADDING, ROW_NAMES, TEXT, MultimodalPacking
from explorer.views.figures import PAD_COLOR, SEQUENCE_COLORS, TEMPLATE, exact_axes, heatmap, position_tick

Int64Array = npt.NDArray[np.int64]
TINT = 0.6
"""How far a document's text cells are blended towards white (its image tiles take the full colour)."""
ROW_COLORS = {"text": "#1f2937", "temporal": "#7c3aed", "height": "#0d9488", "width": "#ea580c"}
PLAIN_COLOR = "#E45756"
IMAGE_SHADE = "rgba(100, 116, 139, 0.15)"
CELL_FONT = {"size": 9}
ONE_D = "1-D (text-only)"


def tint(color: str, amount: float = TINT) -> str:
    """``color`` (``#rrggbb``) blended ``amount`` of the way to white.

    >>> tint("#000000", 0.5), tint("#4C78A8", 0.0)
    ('#808080', '#4c78a8')
    """
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


PALETTE = (*(c for color in SEQUENCE_COLORS for c in (tint(color), color)), PAD_COLOR)
"""Two slots per document colour (its text tinted, its image tiles full), then padding."""


def colour_slots(kind: Int64Array, document: Int64Array) -> Int64Array:
    """Each cell's slot in ``PALETTE``: the document's colour, tinted for text, full for an image tile; padding
    last.

    >>> colour_slots(np.array([[0, 1, -1]]), np.array([[1, 1, -1]])).tolist()
    [[2, 3, 24]]
    """
    slot = 2 * (document % len(SEQUENCE_COLORS)) + (kind == IMAGE)
    return np.where(kind == PADDING, len(PALETTE) - 1, slot).astype(np.int64)


def _words(kind: int, document: int, image: int) -> str:
    if kind == PADDING:
        return "padding"
    if kind == TEXT:
        return f"document {document + 1}, text"
    return f"document {document + 1}, image {image + 1}"


def cell_words(packed: MultimodalPacking, block: int | None = None) -> npt.NDArray[Any]:
    """What each cell holds, in words ("document 3, image 2"), for every block or for ``block`` only."""
    rows = range(packed.num_blocks) if block is None else [block]
    cells = [
        zip(packed.kind[b].tolist(), packed.document[b].tolist(), packed.image[b].tolist(), strict=True) for b in rows
    ]
    return np.array([[_words(k, d, i) for k, d, i in row] for row in cells], dtype=object)


def _tile_text(packed: MultimodalPacking, rows: slice) -> npt.NDArray[Any]:
    """An image tile's number within its document, printed in its cell ("" elsewhere)."""
    image = packed.image[rows]
    return np.where(image >= 0, (image + 1).astype(str), "").astype(object)


def _layout(fig: go.Figure, title: str, height: int) -> None:
    fig.update_layout(
        title=title, height=height, margin={"l": 10, "r": 10, "t": 40, "b": 40}, template=TEMPLATE, showlegend=False
    )


def blocks_figure(packed: MultimodalPacking) -> go.Figure:
    """One row per block, one cell per token: each document's text in its colour tinted, its image tokens as
    image tiles in its full colour with the image's number, padding grey. O(cells)."""
    width = packed.max_seq_length
    labels = [f"Block {b + 1}" for b in range(packed.num_blocks)]
    fig = go.Figure(
        heatmap(
            colour_slots(packed.kind, packed.document),
            PALETTE,
            y=labels,
            text=_tile_text(packed, slice(None)),
            hovertext=cell_words(packed),
            hovertemplate="%{y}, position %{x}<br>%{hovertext}<extra></extra>",
            textfont=CELL_FONT,
        )
    )
    exact_axes(fig, width, packed.num_blocks)
    fig.update_xaxes(dtick=position_tick(width, 8), title="position in block")
    _layout(fig, "Blocks (dark: image tiles)", 100 + 34 * packed.num_blocks)
    return fig


def block_rows_figure(packed: MultimodalPacking, block: int, start: int = 0, stop: int | None = None) -> go.Figure:
    """Tokens ``start .. stop - 1`` of block ``block`` (to its last real token when ``stop`` is None) as rows of
    cells, each printing its position: the 1-D positions a text-only packing gives (counting straight through
    every document), then ``position_ids``' four rows (text restarting per document, temporal, height, width).
    Coloured as :func:`blocks_figure`. O(cells).

    >>> from explorer.core.multimodal import pack_documents
    >>> rows = [{"input_ids": [7, 3, 5, 4, 8], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [9, 9, 9]}]
    >>> fig = block_rows_figure(pack_documents(rows, 8), 0, 3, 7)
    >>> list(fig.data[0].y), fig.data[0].text.tolist()
    (['1-D (text-only)', 'text', 'temporal', 'height', 'width'], [['3', '4', '5', '6'], ['3', '4', '0', '1'], ['3', '4', '0', '1'], ['3', '4', '0', '1'], ['3', '4', '0', '1']])
    """
    used = int((packed.kind[block] != PADDING).sum())
    stop = used if stop is None else min(stop, used)
    cells = slice(start, stop)
    slots = colour_slots(packed.kind[block, cells], packed.document[block, cells])
    rows = np.vstack([packed.plain[block, cells], packed.positions[:, block, cells]])
    names = [ONE_D, *ROW_NAMES]
    words = cell_words(packed, block)[0, cells]
    fig = go.Figure(
        heatmap(
            np.tile(slots, (len(names), 1)),
            PALETTE,
            y=names,
            x=np.arange(start, stop),
            text=rows.astype(str).astype(object),
            hovertext=np.tile(words, (len(names), 1)),
            hovertemplate="%{y} position %{text}<br>token %{x}: %{hovertext}<extra></extra>",
            textfont=CELL_FONT,
        )
    )
    exact_axes(fig, stop - start, len(names))
    fig.update_xaxes(range=[start - 0.5, stop - 0.5], dtick=position_tick(stop - start, 8), title="token in block")
    _layout(fig, f"Block {block + 1}, tokens {start}–{stop - 1}", 300)
    return fig


def _document_starts(packed: MultimodalPacking, block: int) -> list[int]:
    document = packed.document[block]
    real = document[document >= 0]
    return np.flatnonzero(np.diff(real, prepend=-2) != 0).tolist()


def _image_spans(packed: MultimodalPacking, block: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` of every run of image tokens in ``block``."""
    edges = np.diff(np.concatenate([[0], packed.kind[block] == IMAGE, [0]]).astype(np.int8))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _lines(packed: MultimodalPacking, block: int, fig: go.Figure) -> None:
    """Document starts (dotted) and image spans (shaded) of ``block`` on ``fig``: set at once (Plotly's
    ``add_vline`` and ``add_vrect`` validate the whole layout for every shape)."""
    across = {"yref": "paper", "y0": 0, "y1": 1}
    starts = [
        {"type": "line", "x0": x - 0.5, "x1": x - 0.5, "line": {"dash": "dot", "color": "#64748b", "width": 1}}
        for x in _document_starts(packed, block)[1:]
    ]
    spans = [
        {"type": "rect", "x0": a - 0.5, "x1": b - 0.5, "fillcolor": IMAGE_SHADE, "line": {"width": 0}, "layer": "below"}
        for a, b in _image_spans(packed, block)
    ]
    fig.update_layout(shapes=[{**shape, **across} for shape in (*spans, *starts)])


def plain_figure(packed: MultimodalPacking, block: int) -> go.Figure:
    """The text-only picture of block ``block``: its tokens' 1-D positions ``0 .. n-1`` counting straight through
    every document (each marker in its document's colour), so a later document continues an earlier one."""
    used = int((packed.kind[block] != PADDING).sum())
    document = packed.document[block, :used]
    fig = go.Figure(
        go.Scatter(
            x=np.arange(used),
            y=packed.plain[block, :used],
            mode="lines+markers",
            line={"color": PLAIN_COLOR, "dash": "dash"},
            marker={"color": [SEQUENCE_COLORS[d % len(SEQUENCE_COLORS)] for d in document.tolist()], "size": 6},
            hovertext=cell_words(packed, block)[0, :used],
            hovertemplate="token %{x}: %{hovertext}<br>1-D position %{y}<extra></extra>",
            name=ONE_D,
        )
    )
    _lines(packed, block, fig)
    fig.update_xaxes(title="token in block", dtick=position_tick(used, 8))
    fig.update_yaxes(title="position id", rangemode="tozero")
    _layout(fig, "Text-only: 1-D positions", 340)
    return fig


def rope_figure(packed: MultimodalPacking, block: int) -> go.Figure:
    """Block ``block``'s ``position_ids`` rows as lines: text (restarting at every document), temporal, height
    and width (an image's tokens take its grid of heights and widths), image spans shaded."""
    used = int((packed.kind[block] != PADDING).sum())
    fig = go.Figure()
    words = cell_words(packed, block)[0, :used]
    for row, name in enumerate(ROW_NAMES):
        fig.add_trace(
            go.Scatter(
                x=np.arange(used),
                y=packed.positions[row, block, :used],
                mode="lines",
                line={"color": ROW_COLORS[name], "dash": "solid" if row else "dot", "width": 1.5 if row else 2.5},
                name=name,
                hovertext=words,
                hovertemplate=f"token %{{x}}: %{{hovertext}}<br>{name} %{{y}}<extra></extra>",
            )
        )
    _lines(packed, block, fig)
    fig.update_xaxes(title="token in block", dtick=position_tick(used, 8))
    fig.update_yaxes(title="position id", rangemode="tozero")
    _layout(fig, "Multimodal: position_ids", 340)
    fig.update_layout(
        showlegend=True, legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
        margin={"l": 10, "r": 10, "t": 40, "b": 70},
    )  # fmt: skip
    return fig


def block_table_rows(packed: MultimodalPacking) -> list[dict[str, Any]]:
    """One row per block: its documents (1-based), its images (``document·image``), its text and image tokens
    and its padding.

    >>> from explorer.core.multimodal import pack_documents
    >>> rows = [{"input_ids": [7, 3, 5, 4, 8], "image_grid_thw": [[1, 2, 2]]}, {"input_ids": [9, 9, 9]}]
    >>> block_table_rows(pack_documents(rows, 8))
    [{'block': 1, 'documents': '1, 2', 'images': '1·1', 'text tokens': 7, 'image tokens': 1, 'padding': 0}]
    """
    table = []
    for b, members in enumerate(packed.block_documents):
        kind, document, image = packed.kind[b], packed.document[b], packed.image[b]
        starts = (kind == IMAGE) & (np.diff(image, prepend=-1) != 0)
        images = [f"{d + 1}·{i + 1}" for d, i in zip(document[starts].tolist(), image[starts].tolist(), strict=True)]
        table.append(
            {
                "block": b + 1,
                "documents": ", ".join(str(d + 1) for d in members),
                "images": ", ".join(images) or "none",
                "text tokens": int((kind == TEXT).sum()),
                "image tokens": int((kind == IMAGE).sum()),
                "padding": int((kind == PADDING).sum()),
            }
        )
    return table
