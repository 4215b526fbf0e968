"""Plotly figures of packings. Each builder takes plain arrays and returns a ``go.Figure``."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

import packing
import packing.core
import packing.layouts
import packing.strategies
from explorer.core.audit import BlockGrid, block_grid, default_blocks, finding_cells
from explorer.core.formatting import percent
from explorer.core.preference import REJECTED, role_names, token_roles
from explorer.core.runs import Window
from packing.core._validation import INT32_MAX
from packing.layouts.audit import FINDING_KINDS, AuditReport

Int64Array = npt.NDArray[np.int64]
IntArray = npt.NDArray[np.integer[Any]]
SEQUENCE_COLORS = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#B279A2",
    "#E45756",
    "#72B7B2",
    "#EECA3B",
    "#9D755D",
    "#FF9DA6",
    "#3B5BA5",
    "#88D27A",
    "#D67195",
)
PAD_COLOR = "#d4d4d8"
LIMIT_COLOR = "#E45756"
"""The max_seq_length line of the lengths chart."""
MASK_COLORS = {
    "target (loss mask 1, label = token)": "#15803d",
    "document start (loss mask 1, label -100)": "#86efac",
    "not trained (loss mask 0, label -100)": "#7c3aed",
    "padding": PAD_COLOR,
}
"""Dark green, light green, violet, grey: violet is no sequence's colour, so the row never echoes the block row
above it, and the first token of a document (in the loss mask, but with label -100: nothing before it may predict
it) is told apart from a real training target."""
ROLE_COLORS = ("#d4d4d8", "#a8a29e", "#64748b", "#0d9488", "#ea580c")
"""Padding (grey, as everywhere), a plain sequence among units (stone), a prompt (slate), the chosen (teal) and the
rejected (orange); a group's completions take ``COMPLETION_COLORS`` in turn."""
COMPLETION_COLORS = ("#2563eb", "#db2777", "#65a30d", "#9333ea", "#0891b2", "#a16207")
"""A group's completions: blue, pink, lime, purple, cyan, brown, none of them a pair's teal or orange."""
UNIT_MASK_NAMES = (
    "target (predicted: prediction_positions)",
    "not predicted (a document's first token)",
    "not trained (loss mask 0)",
    "padding",
)
"""The loss-mask row's legend for blocks of units, whose targets are the tokens a position predicts (a shared
completion's first token is, from the prompt's last position, though its label is -100)."""
BASELINE = "none"
"""The no-packing baseline: drawn off the scale of the strategies rather than flattening them."""
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MARKERS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down")
STRATEGY_COLORS = {
    name: SEQUENCE_COLORS[i % len(SEQUENCE_COLORS)] for i, name in enumerate(packing.strategies.STRATEGIES)
}
"""One colour per strategy of the registry, in its order (a new strategy gets its own without a hand-typed name)."""
MAX_TEXT_CELLS = 800
"""Largest drawing that prints a token id inside every cell."""
MAX_PIECE_WIDTH = 64
"""Widest block whose cells print the decoded token (wider cells are too narrow to read; the hover has it)."""
PIECE_CHARACTERS = 64
"""Characters a row of cells prints across the page: a cell of a block of ``L`` tokens shows ``64 // L`` (one in a
block of 64, which then prints its text on a laptop's page beside the sidebar)."""
PIECE_FONT = 10
MAX_STACKED_PIECES = 400
"""Most pieces the utilization chart stacks by sequence; above it, one bar per block."""
MAX_BAR_BLOCKS = 150
"""Most blocks drawn as separate bars; above it, one filled line."""
MAX_ATTENTION_CELLS = 256
"""Widest attention mask drawn pair by pair; wider ones are drawn in tiles."""
MAX_MASK_HOVER_CELLS = 8_192
"""Largest drawing whose loss-mask row repeats the full hover of the block row (the data is sent once per row)."""
MASK_HOVER = "%{y}, position %{x}: the row above has the details<extra></extra>"
MAX_LINE_BLOCKS = 20_000
"""Most blocks drawn one by one; above it, the chart shows how many blocks have each fill."""


def _compact_template(name: str = "plotly_white") -> go.layout.Template:
    """The parts of Plotly's ``name`` template that the page's charts use (axes, backgrounds, fonts, colours, and
    the bar, scatter and heatmap defaults): the same look, but a figure takes about 2.5 ms to build instead of
    8.5 ms and sends 1.4 KB of template instead of 7.6 KB (the full template styles 24 trace types and 3-D
    scenes, and Plotly copies and validates it into every figure). Built once, at import."""
    full = pio.templates[name]
    layout = full.layout.to_plotly_json()
    data = full.data.to_plotly_json()
    used = ("xaxis", "yaxis", "paper_bgcolor", "plot_bgcolor", "font", "colorway", "hovermode", "hoverlabel", "title")
    return go.layout.Template(
        layout={key: layout[key] for key in used if key in layout},
        data={kind: data[kind] for kind in ("bar", "scatter", "heatmap") if kind in data},
    )


TEMPLATE = _compact_template()
_LAYOUT = {"margin": {"l": 10, "r": 10, "t": 40, "b": 10}, "template": TEMPLATE}


def _legend_below() -> dict[str, Any]:
    """Layout with the legend in its own strip under the x-axis title, whatever the figure's width and height."""
    return {
        "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
        "margin": {"l": 10, "r": 10, "t": 40, "b": 70},
        "template": TEMPLATE,
    }


NOTE_BACKGROUND = "rgba(255, 255, 255, 0.85)"


def _note() -> dict[str, Any]:
    """Style of a line label (mean, lower bound, max_seq_length): on a white backing, readable over bars.

    A new dict every time: Plotly writes the label's position into the dict it is given.
    """
    return {"bgcolor": NOTE_BACKGROUND, "font": {"color": "#1f2937"}}


def count_axis(largest: float) -> dict[str, Any]:
    """Axis settings for whole-number counts: a tick per unit when they are few, never a fractional tick.

    >>> count_axis(3)
    {'dtick': 1, 'tickformat': ',d'}
    >>> count_axis(5000)
    {'tickformat': ',d'}
    """
    return {"dtick": 1, "tickformat": ",d"} if largest <= 10 else {"tickformat": ",d"}


def _discrete(colors: Sequence[str]) -> list[list[float | str]]:
    """A colorscale that maps integer ``z`` in ``0 .. len(colors) - 1`` to exactly one colour each."""
    n = len(colors)
    scale: list[list[float | str]] = []
    for i, color in enumerate(colors):
        scale += [[i / n, color], [(i + 1) / n, color]]
    return scale


def position_tick(width: int, most: int = 16) -> int:
    """A round tick step (1, 2 or 5 times a power of ten) that gives at most ``most`` ticks over ``width`` positions.

    >>> position_tick(4), position_tick(384), position_tick(2048), position_tick(1024, most=8)
    (1, 50, 200, 200)
    """
    wanted = max(1, -(-width // most))
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= wanted:
                return step * factor
        step *= 10


def _block_labels(first: int, count: int) -> list[str]:
    return [f"Block {first + i + 1}" for i in range(count)]


def sequence_colour_index(sequence_ids: Int64Array) -> Int64Array:
    """Colour slot of every cell: the sequence modulo the palette, and one past the palette for padding."""
    return np.where(sequence_ids >= 0, sequence_ids % len(SEQUENCE_COLORS), len(SEQUENCE_COLORS))


def heatmap(
    z: IntArray,
    colors: Sequence[str],
    *,
    y: Sequence[str] | None = None,
    x: npt.NDArray[Any] | None = None,
    text: npt.NDArray[Any] | None = None,
    customdata: npt.NDArray[Any] | None = None,
    hovertemplate: str | None = None,
    name: str = "",
    hovertext: npt.NDArray[Any] | None = None,
    textfont: dict[str, Any] | None = None,
) -> go.Heatmap:
    """The one heatmap of the page: integer ``z`` in ``0 .. len(colors) - 1``, one colour each, cells outlined when
    small, optional text printed in the cells. Used by the blocks, the loss mask, the comparison and step grids and
    the attention masks."""
    width = z.shape[1]
    gap = 1 if width <= 256 else 0
    return go.Heatmap(
        z=z,
        x=np.arange(width) if x is None else x,
        y=y,
        colorscale=_discrete(colors),
        zmin=-0.5,
        zmax=len(colors) - 0.5,
        showscale=False,
        xgap=gap,
        ygap=2 if y is not None else gap,
        text=text,
        texttemplate="%{text}" if text is not None else None,
        customdata=customdata,
        hovertemplate=hovertemplate,
        hovertext=hovertext,
        textfont=textfont,
        name=name,
    )


def exact_axes(fig: go.Figure, width: int, rows: int, **where: int) -> None:
    """Axes that span exactly the cells: positions ``0 .. width - 1`` across, rows top to bottom, nothing beyond."""
    fig.update_xaxes(range=[-0.5, width - 0.5], autorange=False, constrain="domain", **where)
    fig.update_yaxes(range=[rows - 0.5, -0.5], autorange=False, constrain="domain", **where)


def _hover(
    sequence_ids: Int64Array,
    token_ids: Int64Array | None,
    position_ids: Int64Array,
    loss_mask: IntArray,
    labels: Int64Array | None,
) -> Int64Array:
    """Numbers shown on hover, per cell: sequence (1-based, 0 = padding), position id, and with token data also
    the token id, loss mask and label (lengths-only data has nothing more to say: every real token trains).

    Kept numeric (int32 when the values fit) so the page sends as little as it can.
    """
    columns = [sequence_ids + 1, position_ids]
    if token_ids is not None:
        label = np.full_like(sequence_ids, -100) if labels is None else labels
        columns += [token_ids, loss_mask.astype(np.int64), label]
    stacked = np.stack(columns, axis=-1)
    small = stacked.size == 0 or (int(stacked.max()) <= INT32_MAX and int(stacked.min()) >= -INT32_MAX - 1)
    return stacked.astype(np.int32 if small else np.int64)


def _hover_template(has_tokens: bool) -> str:
    head = "%{y}, position %{x}<br>sequence: %{customdata[0]} (0 = padding)<br>position id: %{customdata[1]}"
    if not has_tokens:
        return head + "<extra></extra>"
    return (
        head + "<br>token id: %{customdata[2]}<br>loss mask: %{customdata[3]}<br>label: %{customdata[4]}<extra></extra>"
    )


def mask_kind(loss_mask: IntArray, sequence_ids: Int64Array, labels: Int64Array | None = None) -> Int64Array:
    """0 = a training target, 1 = a document start (loss mask 1 but label -100), 2 = not trained (masked), 3 = padding.

    Without ``labels`` the first token of every run of one sequence is taken as its document start.

    >>> mask_kind(np.array([[1, 1, 0, 0]]), np.array([[0, 0, 1, -1]])).tolist()
    [[1, 0, 2, 3]]
    """
    if labels is None:
        start = np.ones_like(sequence_ids, dtype=bool)
        start[:, 1:] = sequence_ids[:, 1:] != sequence_ids[:, :-1]
        no_label = start
    else:
        no_label = labels == -100
    kind = np.where(loss_mask == 1, np.where(no_label, 1, 0), 2)
    return np.where(sequence_ids < 0, 3, kind).astype(np.int8)


def window_figure(view: Window, pieces: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None) -> go.Figure:
    """``block_figure`` of a window of materialized blocks: its token ids and labels when the data has tokens, and
    in blocks of pairs and groups each token's role and the tokens a position predicts. O(the window's tokens)."""
    batch = view.batch
    tokens, labels = (batch.input_ids, batch.labels) if view.has_tokens else (None, None)
    roles = targets = None
    if batch.units is not None:
        roles, targets = token_roles(batch), batch.prediction_positions >= 0
    ids = view.sequence_ids
    return block_figure(ids, batch.loss_mask, batch.position_ids, tokens, view.first, labels, pieces, roles, targets)


def block_figure(
    sequence_ids: Int64Array,
    loss_mask: IntArray,
    position_ids: Int64Array,
    token_ids: Int64Array | None = None,
    first_block: int = 0,
    labels: Int64Array | None = None,
    pieces: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    roles: Int64Array | None = None,
    targets: npt.NDArray[np.bool_] | None = None,
) -> go.Figure:
    """Blocks coloured by source sequence (padding grey) with the loss mask and labels aligned underneath.
    Blocks of preference pairs and completion groups pass ``roles`` (``explorer.core.preference.token_roles``):
    each token is then coloured by its role (prompt, chosen, rejected, completion k), with a legend, and their
    ``targets`` (``prediction_positions >= 0``) are the training targets of the loss-mask row.

    Arrays have shape ``(blocks, max_seq_length)``; ``token_ids`` is None for lengths-only data.
    Small drawings print the token id in every cell (and the loss mask underneath). ``pieces`` (text data) is the
    cell labels and hover texts of every position (``text_view.window_cells``, already made safe for Plotly):
    the decoded piece is printed in the cell when cells are wide enough, and its id and text are on hover.
    """
    blocks, width = sequence_ids.shape
    names = _block_labels(first_block, blocks)
    hover = _hover(sequence_ids, token_ids, position_ids, loss_mask, labels)
    template = _hover_template(token_ids is not None)
    show_text = token_ids is not None and blocks * width <= MAX_TEXT_CELLS
    text = token_ids.astype(str) if show_text and token_ids is not None else None
    hovertext = None
    if pieces is not None:
        text = np.array(pieces[0], dtype=object) if show_text and width <= MAX_PIECE_WIDTH else None
        hovertext = np.array(pieces[1], dtype=object)
        template = template.replace("<extra></extra>", "<br>%{hovertext}<extra></extra>")
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.16,
        subplot_titles=(
            "Blocks (colour = source sequence)" if roles is None else "Blocks (colour = role of the token)",
            "Loss mask and labels",
        ),
    )
    z, colors = (
        (sequence_colour_index(sequence_ids), [*SEQUENCE_COLORS, PAD_COLOR])
        if roles is None
        else (
            roles,
            role_colors(roles),
        )
    )
    fig.add_trace(
        heatmap(
            z,
            colors,
            y=names,
            text=text,
            customdata=hover,
            hovertemplate=template,
            name="blocks",
            hovertext=hovertext,
            textfont={"size": PIECE_FONT} if pieces is not None else None,
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        heatmap(
            mask_kind(loss_mask, sequence_ids, labels if targets is None else np.where(targets, 0, -100)),
            list(MASK_COLORS.values()),
            y=names,
            text=loss_mask.astype(str) if show_text else None,
            customdata=hover if blocks * width <= MAX_MASK_HOVER_CELLS else None,
            hovertemplate=template if blocks * width <= MAX_MASK_HOVER_CELLS else MASK_HOVER,
            name="loss mask",
        ),
        row=2,
        col=1,
    )
    if roles is None:  # pairs and groups: their two legends are drawn under the chart (``unit_legend_html``)
        for name, color in MASK_COLORS.items():  # legend entries for the mask colours
            fig.add_trace(_legend_square(name, color), row=2, col=1)
    for row in (1, 2):
        exact_axes(fig, width, blocks, row=row, col=1)
    fig.update_xaxes(dtick=position_tick(width, most=10))
    fig.update_xaxes(title_text="position in block", row=2, col=1)
    row_height = 30 if blocks <= 12 else 14
    layout = _legend_below()
    bottom = 110 if roles is None else 60  # room for the legend on a phone, one a line; none with units
    layout["margin"] = {"l": 10, "r": 10, "t": 40, "b": bottom}
    fig.update_layout(height=150 + bottom + 2 * row_height * blocks, showlegend=roles is None, **layout)
    return fig


def unit_legends(roles: Int64Array) -> list[tuple[str, list[tuple[str, str]]]]:
    """The two legends of a drawing of pairs and groups, apart: the roles present in the top row and the loss
    states of the bottom row, each ``(title, [(name, colour), ...])``.

    >>> roles, states = unit_legends(np.array([[2, 3, 4, 0]]))
    >>> roles[0], [name for name, _ in roles[1]], states[0], len(states[1])
    ('Role of the token (top row)', ['prompt', 'chosen', 'rejected'], 'Loss mask (bottom row)', 4)
    """
    colors, names = role_colors(roles), role_names(roles)
    present = [code for code in np.unique(roles).tolist() if code != 0]  # padding: the mask row's
    return [
        ("Role of the token (top row)", [(names[code], colors[code]) for code in present]),
        ("Loss mask (bottom row)", list(zip(UNIT_MASK_NAMES, MASK_COLORS.values(), strict=True))),
    ]


def legend_html(legends: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> str:
    """Legends as HTML, one line each that wraps at any width: its title, then a coloured square and the name of
    every entry (the page's own names, escaped all the same). O(entries).

    >>> legend_html([("Role", [("prompt", "#64748b")])])  # doctest: +ELLIPSIS
    '<div ...><b>Role:</b> <span ...><span style="...background:#64748b..."></span>prompt</span></div>'
    """
    square = "display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em;vertical-align:-0.05em;background:"
    lines = []
    for title, items in legends:
        entries = "".join(
            f'<span style="white-space:nowrap;margin-right:1em"><span style="{square}{color}"></span>'
            f"{html.escape(name)}</span>"
            for name, color in items
        )
        lines.append(f'<div style="font-size:0.85rem;line-height:1.7"><b>{html.escape(title)}:</b> {entries}</div>')
    return "".join(lines)


def role_colors(roles: Int64Array) -> list[str]:
    """The colour of every role code up to the largest in ``roles`` (``ROLE_COLORS``, then the sequence palette
    for a group's completions).

    >>> role_colors(np.array([6]))[4:]
    ['#ea580c', '#2563eb', '#db2777']
    """
    names = role_names(roles)
    return [*ROLE_COLORS, *(COMPLETION_COLORS[k % len(COMPLETION_COLORS)] for k in range(len(names) - REJECTED - 1))]


def _legend_square(name: str, color: str) -> go.Scatter:
    """A legend entry: a square of ``color`` named ``name`` (no data drawn)."""
    return go.Scatter(
        x=[None], y=[None], mode="markers", marker={"color": color, "symbol": "square", "size": 12}, name=name
    )


def grid_figure(
    sequence_ids: Int64Array,
    title: str = "",
    token_ids: Int64Array | None = None,
    highlight: Sequence[tuple[int, int, int]] = (),
) -> go.Figure:
    """A compact heatmap of blocks coloured by sequence (for comparisons and step-through).

    Cells show token ids when given (padding shows the pad id; a negative id leaves the cell blank), else the
    1-based sequence number (small drawings only).
    ``highlight`` lists runs ``(block, position, length)`` to outline (the piece being placed).
    """
    blocks, width = sequence_ids.shape
    text = None
    if token_ids is not None and blocks * width <= MAX_TEXT_CELLS:
        text = np.where(token_ids >= 0, token_ids.astype(str), "")
    elif blocks * width <= MAX_TEXT_CELLS:
        text = np.where(sequence_ids >= 0, (sequence_ids + 1).astype(str), "")
    fig = go.Figure(
        heatmap(
            sequence_colour_index(sequence_ids),
            [*SEQUENCE_COLORS, PAD_COLOR],
            y=_block_labels(0, blocks),
            text=text,
            customdata=np.where(sequence_ids >= 0, (sequence_ids + 1).astype(object), "empty"),
            hovertemplate="%{y}, position %{x}<br>sequence: %{customdata}<extra></extra>",
        )
    )
    for block, position, length in highlight:
        fig.add_shape(
            type="rect",
            x0=position - 0.5,
            x1=position + length - 0.5,
            y0=block - 0.5,
            y1=block + 0.5,
            line={"color": "black", "width": 3},
        )
    exact_axes(fig, width, blocks)
    fig.update_xaxes(dtick=position_tick(width, most=10))
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=90 + 32 * max(1, blocks), **_LAYOUT)
    return fig


def plan_figure(plan: packing.PackingPlan) -> go.Figure:
    """``utilization_figure`` of a plan: each bar stacked by sequence when there are at most 60 blocks."""
    pieces = (plan.piece_block(), plan.piece_sequence, plan.piece_length) if plan.num_blocks <= 60 else None
    return utilization_figure(plan.stats.block_utilization, pieces, plan.max_seq_length)


def utilization_figure(
    utilization: npt.NDArray[np.float64],
    pieces: tuple[IntArray, IntArray, IntArray] | None = None,
    max_seq_length: int = 1,
) -> go.Figure:
    """Per-block fill with the mean marked. ``pieces`` = (block, sequence, length) arrays stacks each bar by sequence."""
    blocks = len(utilization)
    mean = float(utilization.mean()) if blocks else 0.0
    fig = go.Figure()
    if blocks > MAX_LINE_BLOCKS:
        counts, edges = np.histogram(utilization * 100, bins=np.linspace(0, 100, 51))
        fig.add_trace(
            go.Bar(
                x=(edges[:-1] + edges[1:]) / 2,
                y=counts,
                width=np.diff(edges),
                marker_color=SEQUENCE_COLORS[0],
                name="blocks",
                hovertemplate="fill %{x:.0f}% (±1): %{y:,} blocks<extra></extra>",
            )
        )
        fig.add_vline(
            x=mean * 100,
            line_dash="dash",
            annotation_text=f"mean {percent(mean)}",
            annotation_position="top left",
            annotation=_note(),
        )
        fig.update_xaxes(range=[0, 101])
        fig.update_yaxes(count_axis(int(counts.max())))
        fig.update_layout(
            title=f"Fill of {blocks:,} blocks", xaxis_title="fill (%)", yaxis_title="blocks", bargap=0.05, **_LAYOUT
        )
        return fig
    x = np.arange(1, blocks + 1)
    if pieces is not None and len(pieces[0]) <= MAX_STACKED_PIECES:
        block, sequence, length = pieces
        for seq in np.unique(sequence):
            chosen = sequence == seq
            fig.add_trace(
                go.Bar(
                    x=block[chosen] + 1,
                    y=length[chosen] / max_seq_length * 100,
                    name=f"sequence {seq + 1}",
                    marker_color=SEQUENCE_COLORS[seq % len(SEQUENCE_COLORS)],
                    hovertemplate=f"sequence {seq + 1}<br>block %{{x}}: %{{y:.1f}}% of the block<extra></extra>",
                    showlegend=len(np.unique(sequence)) <= 12,
                )
            )
        fig.update_layout(barmode="stack", legend={"traceorder": "normal"})
    elif blocks <= MAX_BAR_BLOCKS:
        fig.add_trace(
            go.Bar(
                x=x,
                y=utilization * 100,
                marker_color=SEQUENCE_COLORS[0],
                name="fill",
                hovertemplate="block %{x}: %{y:.1f}%<extra></extra>",
            )
        )
    else:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=utilization * 100,
                mode="lines",
                fill="tozeroy",
                line={"color": SEQUENCE_COLORS[0], "width": 1},
                name="fill",
                hovertemplate="block %{x}: %{y:.1f}%<extra></extra>",
            )
        )
    fig.add_hline(
        y=mean * 100,
        line_dash="dash",
        annotation_text=f"mean {percent(mean)}",
        annotation_position="bottom left",
        annotation=_note(),
    )
    fig.update_xaxes(count_axis(blocks) if blocks <= 20 else {"tickformat": ",d"})
    fig.update_layout(
        title="Block utilization", xaxis_title="block", yaxis_title="fill (%)", yaxis_range=[0, 105], **_LAYOUT
    )
    return fig


def length_histogram(lengths: Int64Array, max_seq_length: int, bins: int = 60) -> go.Figure:
    """Histogram of input lengths with ``max_seq_length`` marked (computed with numpy, fast on millions)."""
    fig = go.Figure()
    top = max(int(lengths.max()) if len(lengths) else 0, max_seq_length)
    if len(lengths):
        # one bar per length for short sequences, else ``bins`` equal bars
        edges = np.arange(0, top + 1) + 0.5 if top <= bins else np.linspace(0, top + 1, bins + 1)
        counts, edges = np.histogram(lengths, bins=edges)
        centres = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(
            go.Bar(
                x=centres,
                y=counts,
                width=np.diff(edges),
                marker_color=SEQUENCE_COLORS[0],
                name="sequences",
                hovertemplate="length %{x:.0f}: %{y:,} sequences<extra></extra>",
            )
        )
        fig.update_yaxes(count_axis(int(counts.max())))
    fig.add_vline(x=max_seq_length, line_color=LIMIT_COLOR, line_dash="dash")
    fig.add_trace(  # the line's name in the legend, under the chart: never on the bars or at the chart's edge
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            line={"color": LIMIT_COLOR, "dash": "dash"},
            name=f"max_seq_length = {max_seq_length:,}",
        )
    )
    fig.update_traces(showlegend=False, selector={"type": "bar"})
    fig.update_xaxes(range=[0, top * 1.02 + 1])
    fig.update_layout(
        title="Input lengths", xaxis_title="tokens", yaxis_title="sequences", bargap=0.05, **_legend_below()
    )
    return fig


def _off_scale(values: Sequence[float], names: Sequence[str]) -> float | None:
    """The axis end that keeps the packing strategies readable when the no-packing baseline is far larger
    (None when no clipping is needed)."""
    others = [v for v, n in zip(values, names, strict=True) if n != BASELINE and v == v]
    baseline = [v for v, n in zip(values, names, strict=True) if n == BASELINE and v == v]
    if not others or not baseline or max(others) <= 0 or baseline[0] <= 1.6 * max(others):
        return None
    return 1.25 * max(others)


def compare_bars(names: Sequence[str], values: Sequence[float], title: str, number: str = ",d") -> go.Figure:
    """One measure per strategy as horizontal bars (names stay readable at any width), values printed level.
    The no-packing baseline runs off the scale with its value printed, so it never flattens the strategies."""
    colors = [STRATEGY_COLORS.get(n.split("/")[0], SEQUENCE_COLORS[0]) for n in names]  # bfd/1,000 as bfd
    end = _off_scale(values, names)
    clipped = [end is not None and n == BASELINE for n in names]
    shown = [end if c else v for v, c in zip(values, clipped, strict=True)]
    labels = [
        (f"{round(v):,}" if number == ",d" else f"{v:{number}}") + (" (off the scale)" if c else "")
        for v, c in zip(values, clipped, strict=True)
    ]
    fig = go.Figure(
        go.Bar(
            y=list(names),
            x=shown,
            orientation="h",
            marker_color=colors,
            text=labels,
            textposition=["inside" if c else "outside" for c in clipped],
            insidetextanchor="end",
            textangle=0,
            cliponaxis=False,
            customdata=list(values),
            hovertemplate="%{y}: %{customdata:" + number + "}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(rangemode="tozero", tickformat=number if number != ".2f" else None, nticks=5, automargin=True)
    top = max((v for v, c in zip(values, clipped, strict=True) if not c and v == v), default=0.0)
    right = end if end is not None else 1.25 * top if top > 0 else 1
    fig.update_xaxes(range=[0, right])  # room for the values
    if number == ",d":  # whole numbers: a tick per unit when they are few, never "0 1 1" from rounded halves
        fig.update_xaxes(count_axis(right))
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=70 + 28 * max(1, len(names)),
        showlegend=False,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        template=TEMPLATE,
    )
    return fig


def compare_figures(frame: pd.DataFrame, lower_bound: int) -> list[go.Figure]:
    """Blocks (lower bound marked), efficiency, tokens lost, sequences cut and planning time: one small chart each.

    ``frame`` is ``tables.compare_table``'s output; strategies that did not run are left out.
    """
    ran = frame.dropna(subset=["blocks"])
    names = ran["short"].tolist() if "short" in ran else ran["strategy"].tolist()
    blocks = compare_bars(names, ran["blocks"].astype(float).tolist(), f"Blocks (dashed: lower bound {lower_bound:,})")
    blocks.add_vline(x=lower_bound, line_dash="dash", line_color="#1f2937")
    efficiency = compare_bars(names, (ran["efficiency"] * 100).tolist(), "Efficiency %", number=".2f")
    lost = compare_bars(names, ran["tokens lost"].astype(float).tolist(), "Tokens lost (overflow policy)")
    cut = compare_bars(names, ran["sequences cut"].astype(float).tolist(), "Sequences cut across blocks")
    time_ms = compare_bars(names, ran["time (ms)"].tolist(), "Planning time (ms)", number=".2f")
    return [blocks, efficiency, lost, cut, time_ms]


def sweep_figure(
    sizes: Sequence[int],
    series: Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]],
    lost: Mapping[str, Sequence[float | None]] | None = None,
) -> go.Figure:
    """Efficiency, tokens lost (% of the input) and blocks against max_seq_length, one line per strategy, stacked
    so that no axis title can sit on another chart at any width: ``series[name] = (efficiency, blocks)``,
    ``lost[name]`` = share of the input tokens lost. Lines that coincide are told apart by dash and marker."""
    rows = 3 if lost is not None else 2
    titles = ["Efficiency (%)"]
    if lost is not None:
        titles.append("Tokens lost (% of the input)")
    titles.append("Blocks")
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.09, subplot_titles=titles)
    for i, (name, (eff, blocks)) in enumerate(series.items()):
        style = {
            "line": {"color": STRATEGY_COLORS.get(name, SEQUENCE_COLORS[0]), "dash": DASHES[i % len(DASHES)]},
            "marker": {"symbol": MARKERS[i % len(MARKERS)], "size": 8},
            "mode": "lines+markers",
            "legendgroup": name,
        }
        x = list(sizes)
        fig.add_trace(go.Scatter(x=x, y=[None if e is None else e * 100 for e in eff], name=name, **style), 1, 1)
        if lost is not None:
            share = [None if v is None else v * 100 for v in lost.get(name, [])]
            fig.add_trace(go.Scatter(x=x, y=share, name=name, showlegend=False, **style), 2, 1)
        fig.add_trace(go.Scatter(x=x, y=list(blocks), name=name, showlegend=False, **style), rows, 1)
    wide = len(sizes) > 1 and max(sizes) >= 16 * max(1, min(sizes))
    ticks = list(sizes) if len(sizes) <= 8 else None
    fig.update_xaxes(type="log" if wide else "linear", tickvals=ticks, tickformat=",d", tickangle=0)
    fig.update_xaxes(title_text="max_seq_length", row=rows, col=1)
    fig.update_yaxes(rangemode="tozero", tickformat=",.0f", nticks=5)
    fig.update_yaxes(range=[0, 105], row=1, col=1)
    if lost is not None:
        fig.update_yaxes(range=[0, 105], row=2, col=1)
    all_blocks = [b for _, blocks in series.values() for b in blocks if b]
    if all_blocks and max(all_blocks) > 10 * max(1, min(all_blocks)):
        fig.update_yaxes(type="log", rangemode=None, tickformat="~s", row=rows, col=1)  # the baseline keeps its place
    fig.update_layout(height=260 * rows, **_legend_below())
    return fig


def pool_max(z: Int64Array, factor: int) -> Int64Array:
    """Shrink a square matrix by ``factor`` in each direction, keeping the largest value of every tile.

    >>> pool_max(np.array([[0, 1, 0], [2, 0, 0], [0, 0, 1]]), 2).tolist()
    [[2, 0], [0, 1]]
    """
    if factor <= 1:
        return z
    size = -(-len(z) // factor) * factor
    padded = np.zeros((size, size), dtype=z.dtype)
    padded[: len(z), : len(z)] = z
    tiles = size // factor
    pooled: Int64Array = padded.reshape(tiles, factor, tiles, factor).max(axis=(1, 3))
    return pooled


def attention_figures(
    causal: npt.NDArray[np.bool_], document: npt.NDArray[np.bool_], max_cells: int = MAX_ATTENTION_CELLS
) -> tuple[go.Figure, go.Figure]:
    """The plain causal mask (cross-document pairs in red) and the block-diagonal mask, as two square figures
    whose axes span exactly the block (query and key positions ``0 .. max_seq_length - 1``).

    Blocks longer than ``max_cells`` are drawn in tiles of factor × factor pairs (a tile shows its
    most notable pair: a leak over an allowed pair over a blocked one); counts are always exact.
    """
    cross = causal & ~document
    size = len(causal)
    factor = max(1, -(-size // max_cells))
    left = pool_max(np.where(cross, 2, np.where(causal, 1, 0)), factor)
    right = pool_max(document.astype(np.int64), factor)
    colors = ["#f4f4f5", "#4C78A8", "#dc2626"]
    tiles = f" ({factor}×{factor} pairs a cell)" if factor > 1 else ""
    figures = []
    for z, title in ((left, "Plain causal mask"), (right, "Block-diagonal mask")):
        axis = np.arange(len(z)) * factor + (factor - 1) / 2
        fig = go.Figure(
            heatmap(
                z,
                colors,
                x=axis,
                hovertemplate="query %{y} → key %{x}<br>0 blocked, 1 allowed, 2 cross-document: %{z}<extra></extra>",
            )
        )
        fig.data[0].y = axis
        step = position_tick(size, most=6)
        fig.update_xaxes(
            range=[-0.5, size - 0.5], autorange=False, dtick=step, title_text="key position" + tiles, showgrid=False
        )
        fig.update_yaxes(
            range=[size - 0.5, -0.5],
            autorange=False,
            dtick=step,
            title_text="query position",
            showgrid=False,
            zeroline=False,
        )
        fig.update_xaxes(zeroline=False)
        fig.update_layout(title={"text": title, "font": {"size": 14}}, height=380, **_LAYOUT)
        figures.append(fig)
    return figures[0], figures[1]


def unit_attention_figure(mask: npt.NDArray[np.bool_], roles: Int64Array, title: str) -> go.Figure:
    """One block's attention mask (``PackedBatch.attention_mask``) with every allowed pair coloured by the role of
    the key it attends to (``roles``: the block's ``token_roles``), blocked pairs blank: a chosen answer's row shows
    its prompt and itself, never the rejected. Square, axes spanning exactly the block; blocks wider than
    ``MAX_ATTENTION_CELLS`` in tiles (a tile shows the latest role it allows)."""
    size = len(mask)
    factor = max(1, -(-size // MAX_ATTENTION_CELLS))
    z = pool_max(np.where(mask, roles[None, :] + 1, 0).astype(np.int64), factor)
    names, colors = ["blocked", *role_names(roles)], ["#f4f4f5", *role_colors(roles)]
    axis = np.arange(len(z)) * factor + (factor - 1) / 2
    names_of = np.array(names, dtype=object)[z]
    fig = go.Figure(
        heatmap(
            z,
            colors,
            x=axis,
            customdata=names_of,
            hovertemplate="query %{y} → key %{x}: %{customdata}<extra></extra>",
        )
    )
    fig.data[0].y = axis
    for code in np.unique(z).tolist():
        if code:
            fig.add_trace(_legend_square(names[code], colors[code]))
    tiles = f" ({factor}×{factor} pairs a cell)" if factor > 1 else ""
    step = position_tick(size, most=6)
    fig.update_xaxes(
        range=[-0.5, size - 0.5], autorange=False, dtick=step, title_text="key position" + tiles, showgrid=False
    )
    fig.update_xaxes(zeroline=False)
    fig.update_yaxes(range=[size - 0.5, -0.5], autorange=False, dtick=step, title_text="query position", showgrid=False)
    fig.update_yaxes(zeroline=False)
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=440, **_legend_below())
    return fig


def positions_figure(plain: Int64Array, restart: Int64Array, sequence_ids: Int64Array) -> go.Figure:
    """Position ids along a block: counting straight through vs restarting at every document."""
    x = np.arange(len(plain))
    real = sequence_ids >= 0
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x[real],
            y=plain[real],
            mode="lines+markers" if len(plain) <= 256 else "lines",
            name="without restarts (0 .. n-1)",
            line={"color": "#E45756", "dash": "dash"},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x[real],
            y=restart[real],
            mode="lines+markers" if len(plain) <= 256 else "lines",
            name="with restarts (PackedBatch.position_ids)",
            line_color="#4C78A8",
            marker={"color": [SEQUENCE_COLORS[s % len(SEQUENCE_COLORS)] for s in sequence_ids[real]], "size": 8},
        )
    )
    fig.update_xaxes(dtick=position_tick(len(plain)))
    fig.update_layout(
        title="Position ids",
        xaxis_title="position in block",
        yaxis_title="position id",
        height=370,
        **_legend_below(),
    )
    return fig


# ---------------------------------------------------------------- the Inspect tab: a packed file's audit

BEYOND_COLOR = "#ffffff"
"""Cells past the end of a shorter (unpadded) block."""
TARGET_COLORS = {"target": "#15803d", "no loss": "#7c3aed", "padding": PAD_COLOR, "beyond the block": BEYOND_COLOR}
FINDING_COLOR = "#dc2626"
FINDING_PANELS = {
    "cross_document_label": (2,),
    "padding_trained": (2,),
    "label_mismatch": (2,),
    "position_not_reset": (3,),
    "inconsistent_boundaries": (3,),
}
"""Besides the blocks, the panel (2 = loss targets, 3 = position ids) where each kind of finding shows."""
MAX_AUDIT_TEXT_CELLS = 400
"""Token ids are printed in the cells of audit drawings up to this size."""
AUDIT_HOVER = (
    "%{y}, position %{x}<br>token id: %{customdata[1]}<br>document: %{customdata[0]} (0 = padding)"
    "<br>position id: %{customdata[2]}<br>target: %{customdata[3]} (1 = loss)<br>%{customdata[4]}<extra></extra>"
)


AUDIT_DOCUMENT_COLORS = tuple(c for c in SEQUENCE_COLORS if c not in ("#E45756", "#FF9DA6", "#D67195"))
"""The documents' colours on the Inspect tab: the sequence palette without its reds and pinks, since red there
means a finding (a clean file must not look alarming)."""


def document_colour_index(document: Int64Array) -> Int64Array:
    """Colour slot of every cell: the document modulo the audit palette (``AUDIT_DOCUMENT_COLORS``); padding and
    cells past the block after it.

    >>> document_colour_index(np.array([[0, 1, 10, -1, -2]])).tolist()
    [[0, 1, 1, 9, 10]]
    """
    n = len(AUDIT_DOCUMENT_COLORS)
    slots: Int64Array = np.where(document >= 0, document % n, np.where(document == -1, n, n + 1))
    return slots


def _audit_hover(grid: BlockGrid, marks: list[tuple[str, int, int]]) -> npt.NDArray[Any]:
    """Per cell: document (1-based), token id, position id, target, and the findings on it. O(cells)."""
    rows, width = grid.document.shape
    flagged = np.full((rows, width), "", dtype=object)
    for kind, row, position in marks:
        flagged[row, position] = f"{flagged[row, position]}, {kind}" if flagged[row, position] else kind
    positions = grid.positions if grid.positions is not None else np.full((rows, width), -1, dtype=np.int64)
    numbers = np.stack((grid.document + 1, grid.tokens, positions, grid.targets.astype(np.int64)), axis=-1)
    return np.concatenate((numbers.astype(object), flagged[..., None]), axis=-1)


def _audit_panels(grid: BlockGrid, labels: list[str], hover: npt.NDArray[Any]) -> list[go.Heatmap]:
    """The heatmaps: documents, loss targets and (when the file has them) position ids. O(cells)."""
    show_text = grid.document.size <= MAX_AUDIT_TEXT_CELLS
    shared: dict[str, Any] = {"y": labels, "customdata": hover, "hovertemplate": AUDIT_HOVER}
    documents = heatmap(
        document_colour_index(grid.document),
        [*AUDIT_DOCUMENT_COLORS, PAD_COLOR, BEYOND_COLOR],
        text=grid.tokens.astype(str) if show_text else None,
        name="documents",
        **shared,
    )
    slots = np.select([grid.targets == 1, grid.targets == 0, grid.targets == -1], [0, 1, 2], 3)
    panels = [documents, heatmap(slots, list(TARGET_COLORS.values()), name="targets", **shared)]
    if grid.positions is not None:
        width = grid.document.shape[1]
        panels.append(
            go.Heatmap(
                z=np.where(grid.document == -2, np.nan, grid.positions.astype(np.float64)),
                x=np.arange(width),
                colorscale=[[0.0, "#ffffff"], [1.0, "#1e3a8a"]],
                showscale=False,
                xgap=1 if width <= 256 else 0,
                ygap=2,
                text=grid.positions.astype(str) if show_text else None,
                texttemplate="%{text}" if show_text else None,
                name="position ids",
                **shared,
            )
        )
    return panels


def _finding_marks(marks: list[tuple[str, int, int]], labels: list[str], panels: int) -> list[tuple[go.Scatter, int]]:
    """A red open square on every flagged cell, on the blocks and on the panel its kind concerns. O(marks)."""
    out = []
    for kind in FINDING_KINDS:
        cells = [(row, position) for k, row, position in marks if k == kind]
        for panel in [1, *(p for p in FINDING_PANELS.get(kind, ()) if p <= panels)] if cells else []:
            scatter = go.Scatter(
                x=[position for _, position in cells],
                y=[labels[row] for row, _ in cells],
                mode="markers",
                marker={"symbol": "square-open", "size": 14, "color": FINDING_COLOR, "line": {"width": 3}},
                name=kind,
                legendgroup=kind,
                showlegend=panel == 1,
                hovertemplate=f"{kind}<br>%{{y}}, position %{{x}}<extra></extra>",
            )
            out.append((scatter, panel))
    return out


def _target_legend() -> list[go.Scatter]:
    """Legend entries for the loss targets' colours (invisible points)."""
    marker = {"symbol": "square", "size": 12}
    return [
        go.Scatter(x=[None], y=[None], mode="markers", marker={**marker, "color": color}, name=name)
        for name, color in TARGET_COLORS.items()
    ]


def inspect_figure(report: AuditReport, blocks: Sequence[int] | None = None) -> go.Figure:
    """Blocks coloured by document (padding grey), the loss targets underneath, the position ids when the file
    has them, and a red square on every cell a finding points at (hover names it). ``blocks`` defaults to
    :func:`explorer.core.audit.default_blocks`. O(cells shown)."""
    chosen = list(blocks) if blocks is not None else default_blocks(report)
    grid, marks = block_grid(report, chosen), finding_cells(report, chosen)
    labels = [f"Block {block + 1}" for block in grid.blocks]  # numbered from 1, as on the Result tab
    titles = ["Blocks (colour = document, red = finding)", "Loss targets (green = trained)"]
    if grid.positions is not None:
        titles.append("Position ids (0 = a document starts)")
    fig = make_subplots(
        rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=0.3 / len(titles), subplot_titles=titles
    )
    for row, panel in enumerate(_audit_panels(grid, labels, _audit_hover(grid, marks)), start=1):
        fig.add_trace(panel, row=row, col=1)
    for scatter, row in _finding_marks(marks, labels, len(titles)):
        fig.add_trace(scatter, row=row, col=1)
    for entry in _target_legend():
        fig.add_trace(entry, row=2, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="position in block", row=len(titles), col=1)
    row_height = 30 if len(labels) <= 12 else 14
    fig.update_layout(
        height=150 + 80 * len(titles) + len(titles) * row_height * len(labels),
        legend={"orientation": "h", "yanchor": "top", "y": -0.15, "xanchor": "left", "x": 0},
        margin={"t": 60},
        template=TEMPLATE,
    )
    return fig


MODE_COLORS = {"token": SEQUENCE_COLORS[0], "sequence": SEQUENCE_COLORS[1], "sequence_sum": SEQUENCE_COLORS[2]}
MODE_COLORS["sqrt"] = SEQUENCE_COLORS[3]


def loss_weight_figure(labels: Sequence[str], weights: dict[str, Sequence[float]]) -> go.Figure:
    """Each document's share of the loss (``weights[mode]``, one value per label) as grouped horizontal bars,
    one colour per objective: how much a long and a short document count under each.

    >>> fig = loss_weight_figure(["doc 1", "doc 2"], {"token": [0.1, 0.9], "sequence": [0.5, 0.5]})
    >>> [trace.name for trace in fig.data], fig.data[0].x
    (['token', 'sequence'], (0.1, 0.9))
    """
    fig = go.Figure(
        [
            go.Bar(
                y=list(labels),
                x=list(values),
                name=mode,
                orientation="h",
                marker_color=MODE_COLORS.get(mode, SEQUENCE_COLORS[0]),
                hovertemplate="%{y}: %{x:.4f} of the loss under " + mode + "<extra></extra>",
            )
            for mode, values in weights.items()
        ]
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(rangemode="tozero", title_text="share of the loss", automargin=True)
    fig.update_layout(
        title={"text": "What each document weighs in the loss", "font": {"size": 14}},
        barmode="group",
        height=140 + 22 * len(labels) * max(1, len(weights)),
        **_legend_below(),
    )
    return fig
