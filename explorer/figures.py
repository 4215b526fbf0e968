"""Plotly figures of packings. Each builder takes plain arrays and returns a ``go.Figure``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer.formatting import percent

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
MASK_COLORS = {"trained": "#15803d", "masked prompt": "#7c3aed", "padding": PAD_COLOR}
"""Green, violet, grey: violet is no sequence's colour, so the loss-mask row never echoes the block row above it."""
STRATEGY_COLORS = dict(
    zip(
        ("split", "next_fit", "first_fit", "ffd", "bfd", "spfhp", "optimal", "none"),
        ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D"),
        strict=True,
    )
)
MAX_TEXT_CELLS = 800
"""Largest drawing that prints a token id inside every cell."""
MAX_STACKED_PIECES = 400
"""Most pieces the utilization chart stacks by sequence; above it, one bar per block."""
MAX_BAR_BLOCKS = 150
"""Most blocks drawn as separate bars; above it, one filled line."""
MAX_ATTENTION_CELLS = 256
"""Widest attention mask drawn pair by pair; wider ones are drawn in tiles."""
MAX_LINE_BLOCKS = 20_000
"""Most blocks drawn one by one; above it, the chart shows how many blocks have each fill."""
_LAYOUT = {"margin": {"l": 10, "r": 10, "t": 40, "b": 10}, "template": "plotly_white"}


def _legend_below() -> dict[str, Any]:
    """Layout with the legend in its own strip under the x-axis title, whatever the figure's width and height."""
    return {
        "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
        "margin": {"l": 10, "r": 10, "t": 40, "b": 70},
        "template": "plotly_white",
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


def _hover(
    sequence_ids: Int64Array, token_ids: Int64Array | None, position_ids: Int64Array, loss_mask: IntArray
) -> Int64Array:
    """Numbers shown on hover, per cell: sequence (1-based, 0 = padding), token id, position id, loss mask.

    Kept numeric so Plotly sends it as a compact binary array.
    """
    token = np.zeros_like(sequence_ids) if token_ids is None else token_ids
    return np.stack((sequence_ids + 1, token, position_ids, loss_mask.astype(np.int64)), axis=-1).astype(np.int64)


def _hover_template(has_tokens: bool) -> str:
    token = "token id: %{customdata[1]}<br>" if has_tokens else ""
    return (
        "%{y}, position %{x}<br>" + token + "sequence: %{customdata[0]} (0 = padding)"
        "<br>position id: %{customdata[2]}<br>loss mask: %{customdata[3]}<extra></extra>"
    )


def mask_kind(loss_mask: IntArray, sequence_ids: Int64Array) -> Int64Array:
    """0 = trained, 1 = masked prompt, 2 = padding."""
    return np.where(sequence_ids < 0, 2, np.where(loss_mask == 1, 0, 1))


def block_figure(
    sequence_ids: Int64Array,
    loss_mask: IntArray,
    position_ids: Int64Array,
    token_ids: Int64Array | None = None,
    first_block: int = 0,
) -> go.Figure:
    """Blocks coloured by source sequence (padding grey) with the loss mask aligned underneath.

    Arrays have shape ``(blocks, max_seq_length)``; ``token_ids`` is None for lengths-only data.
    Small drawings print the token id in every cell.
    """
    blocks, width = sequence_ids.shape
    labels = _block_labels(first_block, blocks)
    hover = _hover(sequence_ids, token_ids, position_ids, loss_mask)
    template = _hover_template(token_ids is not None)
    show_text = token_ids is not None and blocks * width <= MAX_TEXT_CELLS
    text = token_ids.astype(str) if show_text and token_ids is not None else None
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=("Blocks (colour = source sequence)", "Loss mask"),
    )
    n = len(SEQUENCE_COLORS)
    fig.add_trace(
        go.Heatmap(
            z=sequence_colour_index(sequence_ids),
            x=np.arange(width),
            y=labels,
            customdata=hover,
            hovertemplate=template,
            colorscale=_discrete([*SEQUENCE_COLORS, PAD_COLOR]),
            zmin=-0.5,
            zmax=n + 0.5,
            showscale=False,
            xgap=1 if width <= 256 else 0,
            ygap=2,
            text=text,
            texttemplate="%{text}" if text is not None else None,
            name="blocks",
        ),
        row=1,
        col=1,
    )
    kinds = mask_kind(loss_mask, sequence_ids)
    fig.add_trace(
        go.Heatmap(
            z=kinds,
            x=np.arange(width),
            y=labels,
            customdata=hover,
            hovertemplate=template,
            colorscale=_discrete(list(MASK_COLORS.values())),
            zmin=-0.5,
            zmax=2.5,
            showscale=False,
            xgap=1 if width <= 256 else 0,
            ygap=2,
            text=loss_mask.astype(str) if show_text else None,
            texttemplate="%{text}" if show_text else None,
            name="loss mask",
        ),
        row=2,
        col=1,
    )
    for name, color in MASK_COLORS.items():  # legend entries for the three mask colours
        fig.add_trace(
            go.Scatter(
                x=[None], y=[None], mode="markers", marker={"color": color, "symbol": "square", "size": 12}, name=name
            ),
            row=2,
            col=1,
        )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(dtick=position_tick(width))
    fig.update_xaxes(title_text="position in block", row=2, col=1)
    row_height = 30 if blocks <= 12 else 14
    fig.update_layout(height=210 + 2 * row_height * blocks, **_legend_below())
    return fig


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
    labels = _block_labels(0, blocks)
    text = None
    if token_ids is not None and blocks * width <= MAX_TEXT_CELLS:
        text = np.where(token_ids >= 0, token_ids.astype(str), "")
    elif blocks * width <= MAX_TEXT_CELLS:
        text = np.where(sequence_ids >= 0, (sequence_ids + 1).astype(str), "")
    n = len(SEQUENCE_COLORS)
    fig = go.Figure(
        go.Heatmap(
            z=sequence_colour_index(sequence_ids),
            x=np.arange(width),
            y=labels,
            customdata=np.where(sequence_ids >= 0, (sequence_ids + 1).astype(object), "empty"),
            hovertemplate="%{y}, position %{x}<br>sequence: %{customdata}<extra></extra>",
            colorscale=_discrete([*SEQUENCE_COLORS, PAD_COLOR]),
            zmin=-0.5,
            zmax=n + 0.5,
            showscale=False,
            xgap=1 if width <= 256 else 0,
            ygap=2,
            text=text,
            texttemplate="%{text}" if text is not None else None,
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
    fig.update_xaxes(dtick=position_tick(width))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=title, height=90 + 32 * max(1, blocks), **_LAYOUT)
    return fig


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
    fig.add_vline(
        x=max_seq_length,
        line_color="#E45756",
        line_dash="dash",
        annotation_text=f"max_seq_length = {max_seq_length:,}",
        annotation_position="top left" if max_seq_length >= top / 2 else "top right",
        annotation=_note(),
    )
    fig.update_xaxes(range=[0, top * 1.02 + 1])
    fig.update_layout(title="Input lengths", xaxis_title="tokens", yaxis_title="sequences", bargap=0.05, **_LAYOUT)
    return fig


def compare_figure(frame: pd.DataFrame, lower_bound: int) -> go.Figure:
    """Blocks (lower bound marked), efficiency, tokens lost and sequences cut, and planning time per strategy.

    ``frame`` is ``tables.compare_table``'s output; strategies that did not run are left out.
    """
    ran = frame.dropna(subset=["blocks"])
    names = ran["strategy"].tolist()
    colors = [STRATEGY_COLORS.get(s, SEQUENCE_COLORS[0]) for s in names]
    fig = make_subplots(
        rows=2,
        cols=2,
        vertical_spacing=0.18,
        subplot_titles=(
            "Blocks (fewer is better)",
            "Efficiency % (higher is better)",
            "Tokens lost and sequences cut",
            "Planning time (ms)",
        ),
    )
    fig.add_trace(go.Bar(x=names, y=ran["blocks"], marker_color=colors, name="blocks"), row=1, col=1)
    fig.add_hline(
        y=lower_bound,
        line_dash="dash",
        annotation_text=f"lower bound {lower_bound:,}",
        annotation_position="top left",
        annotation=_note(),
        row=1,
        col=1,
    )
    fig.add_trace(go.Bar(x=names, y=ran["efficiency"] * 100, marker_color=colors, name="efficiency %"), row=1, col=2)
    fig.add_trace(go.Bar(x=names, y=ran["tokens lost"], marker_color="#E45756", name="tokens lost"), row=2, col=1)
    fig.add_trace(go.Bar(x=names, y=ran["sequences cut"], marker_color="#4C78A8", name="sequences cut"), row=2, col=1)
    fig.add_trace(
        go.Bar(x=names, y=ran["time (ms)"], marker_color=colors, name="time (ms)", showlegend=False), row=2, col=2
    )
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 105], row=1, col=2)
    fig.update_yaxes(count_axis(float(ran["blocks"].max()) if len(ran) else 0), row=1, col=1)
    lost_or_cut = ran[["tokens lost", "sequences cut"]].to_numpy().max() if len(ran) else 0
    fig.update_yaxes(count_axis(float(lost_or_cut)), row=2, col=1)
    for trace in fig.data:
        if trace.name in ("blocks", "efficiency %"):
            trace.showlegend = False
    fig.update_layout(barmode="group", height=650, **_legend_below())
    return fig


def sweep_figure(
    sizes: Sequence[int], series: Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]]
) -> go.Figure:
    """Efficiency and block count against max_seq_length, one line per strategy: ``series[name] = (efficiency, blocks)``."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Efficiency vs max_seq_length", "Blocks vs max_seq_length"))
    for name, (eff, blocks) in series.items():
        color = STRATEGY_COLORS.get(name, SEQUENCE_COLORS[0])
        fig.add_trace(
            go.Scatter(
                x=list(sizes),
                y=[None if e is None else e * 100 for e in eff],
                mode="lines+markers",
                name=name,
                line_color=color,
                legendgroup=name,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=list(sizes),
                y=list(blocks),
                mode="lines+markers",
                name=name,
                line_color=color,
                legendgroup=name,
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    wide = len(sizes) > 1 and max(sizes) >= 16 * max(1, min(sizes))
    fig.update_xaxes(type="log" if wide else "linear", title_text="max_seq_length", tickvals=list(sizes))
    fig.update_yaxes(title_text="efficiency (%)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="blocks", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=420, **_LAYOUT)
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


def attention_figure(
    causal: npt.NDArray[np.bool_], document: npt.NDArray[np.bool_], max_cells: int = MAX_ATTENTION_CELLS
) -> go.Figure:
    """The plain causal mask (cross-document pairs in red) next to the block-diagonal mask.

    Blocks longer than ``max_cells`` are drawn in tiles of factor × factor pairs (a tile shows its
    most notable pair: a leak over an allowed pair over a blocked one); counts are always exact.
    """
    cross = causal & ~document
    factor = max(1, -(-len(causal) // max_cells))
    left = pool_max(np.where(cross, 2, np.where(causal, 1, 0)), factor)
    right = pool_max(document.astype(np.int64), factor)
    axis = np.arange(len(left)) * factor
    colors = ["#f4f4f5", "#4C78A8", "#dc2626"]
    tiles = f" (each cell: {factor}×{factor} pairs)" if factor > 1 else ""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=(
            f"Plain causal mask (red: {int(cross.sum()):,} cross-document pairs)",
            "Block-diagonal mask (PackedBatch.attention_mask)",
        ),
    )
    gap = 1 if len(left) <= 64 else 0
    for col, z in ((1, left), (2, right)):
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=axis,
                y=axis,
                colorscale=_discrete(colors),
                zmin=-0.5,
                zmax=2.5,
                showscale=False,
                hovertemplate="query %{y} → key %{x}<br>0 blocked, 1 allowed, 2 cross-document: %{z}<extra></extra>",
                xgap=gap,
                ygap=gap,
            ),
            row=1,
            col=col,
        )
    fig.update_yaxes(autorange="reversed", title_text="query position", scaleanchor="x", row=1, col=1)
    fig.update_yaxes(autorange="reversed", scaleanchor="x2", row=1, col=2)
    step = position_tick(len(causal), most=8)
    fig.update_yaxes(dtick=step, showgrid=False, zeroline=False)
    fig.update_xaxes(title_text="key position" + tiles, dtick=step, showgrid=False, zeroline=False)
    fig.update_layout(height=480, **_LAYOUT)
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
