"""Figure builders: the right traces, colours, text and markers."""

from __future__ import annotations

import colorsys

import numpy as np
import plotly.graph_objects as go

import packing
import packing.strategies
from explorer.core import runs as compute
from explorer.views import figures, tables


def _classic() -> compute.Window:
    batch = packing.pack([[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]], 4, strategy="split")
    return compute.window(batch.plan, packing.read_rows([[1, 2], {"prompt": [3], "completion": [4, 5]}, [6]]), 0, 9, 0)


def test_block_figure_colours_sequences_and_greys_padding() -> None:
    view = _classic()
    fig = figures.block_figure(
        view.sequence_ids, view.batch.loss_mask, view.batch.position_ids, view.batch.input_ids, 0, view.batch.labels
    )
    blocks, mask = fig.data[0], fig.data[1]
    assert isinstance(blocks, go.Heatmap) and isinstance(mask, go.Heatmap)
    z = np.asarray(blocks.z)
    pad_slot = len(figures.SEQUENCE_COLORS)
    assert z.tolist() == [[0, 0, 1, 1], [1, 2, pad_slot, pad_slot]]
    assert blocks.colorscale[-1][1] == figures.PAD_COLOR
    assert list(blocks.y) == ["Block 1", "Block 2"]
    assert np.asarray(blocks.text).tolist() == [["1", "2", "3", "4"], ["5", "6", "0", "0"]]
    # loss mask row: target 0, document start (mask 1, label -100) 1, masked prompt 2, padding 3;
    # sequence 1 = [1, 2]: 1 starts it; sequence 2 = prompt 3 + completion 4 5, whose piece in block 2 starts
    # that block's part of the document (label -100 again); sequence 3 = [6] starts at 6
    labels = view.batch.labels.tolist()
    assert labels == [[-100, 2, -100, 4], [-100, -100, -100, -100]]
    assert np.asarray(mask.z).tolist() == [[1, 0, 2, 0], [1, 1, 3, 3]]
    hover = np.asarray(blocks.customdata)
    assert hover[0, 2].tolist() == [2, 0, 3, 0, -100]  # sequence 2 (1-based), position 0, token 3, mask 0, label
    assert "token id" in blocks.hovertemplate and "label" in blocks.hovertemplate
    legend = [trace.name for trace in fig.data if isinstance(trace, go.Scatter)]
    assert legend == list(figures.MASK_COLORS) and any("label -100" in name for name in legend)
    # distinct mask colours, the trained ones none of a sequence's colour (the rows above use those)
    assert len(set(figures.MASK_COLORS.values())) == 4
    palette = {c.lower() for c in figures.SEQUENCE_COLORS}
    assert not palette & {c.lower() for c in list(figures.MASK_COLORS.values())[:3]}
    assert list(figures.MASK_COLORS.values())[-1] == figures.PAD_COLOR

    def hue(color: str) -> float:
        return colorsys.rgb_to_hls(*(int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0] * 360

    masked = hue(figures.MASK_COLORS["not trained (loss mask 0, label -100)"])
    nearest = min(min(abs(masked - hue(c)), 360 - abs(masked - hue(c))) for c in figures.SEQUENCE_COLORS)
    assert nearest > 30, nearest  # an amber masked prompt sat 10° from the orange of sequence 2


def test_block_figure_without_tokens_or_when_large_prints_nothing_in_cells() -> None:
    layout = packing.plan([300, 200, 100], 512, strategy="bfd")
    view = compute.window(layout, None, 0, 5, 0)
    fig = figures.block_figure(view.sequence_ids, view.batch.loss_mask, view.batch.position_ids, None)
    assert fig.data[0].text is None
    assert "token id" not in fig.data[0].hovertemplate


def test_grid_figure_outlines_the_highlighted_run() -> None:
    grid = np.array([[0, 0, 1, -1], [2, -1, -1, -1]])
    fig = figures.grid_figure(grid, "t", None, [(0, 2, 1)])
    assert len(fig.layout.shapes) == 1
    shape = fig.layout.shapes[0]
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (1.5, 2.5, -0.5, 0.5)
    assert np.asarray(fig.data[0].text).tolist() == [["1", "1", "2", ""], ["3", "", "", ""]]


def test_utilization_stacks_small_inputs_and_summarises_large_ones() -> None:
    layout = packing.plan([2, 3, 1], 4, strategy="split")
    pieces = (layout.piece_block(), layout.piece_sequence, layout.piece_length)
    small = figures.utilization_figure(layout.stats.block_utilization, pieces, 4)
    assert [trace.name for trace in small.data] == ["sequence 1", "sequence 2", "sequence 3"]
    assert small.layout.barmode == "stack"
    assert small.layout.shapes[0].y0 == 75.0  # the mean line
    plain = figures.utilization_figure(layout.stats.block_utilization)
    assert len(plain.data) == 1 and list(plain.data[0].y) == [100.0, 50.0]
    many = figures.utilization_figure(np.full(figures.MAX_BAR_BLOCKS + 1, 0.5))
    assert isinstance(many.data[0], go.Scatter) and many.data[0].fill == "tozeroy"
    assert small.layout.xaxis.dtick == 1  # block numbers are whole: no tick at block 1.5
    huge = figures.utilization_figure(np.r_[np.full(figures.MAX_LINE_BLOCKS, 0.5), 1.0])
    assert isinstance(huge.data[0], go.Bar) and int(np.asarray(huge.data[0].y).sum()) == figures.MAX_LINE_BLOCKS + 1
    assert list(huge.layout.xaxis.range) == [0, 101]  # fill never goes past 100 %
    assert np.asarray(huge.data[0].y)[-1] == 1  # a full block counts in the last bar


def test_line_labels_are_readable_over_bars() -> None:
    layout = packing.plan([2, 3, 1], 4, strategy="split")
    fig = figures.utilization_figure(layout.stats.block_utilization)
    assert fig.layout.annotations[0].bgcolor == figures.NOTE_BACKGROUND
    # the max_seq_length line is named in the legend under the chart, never on the bars or at the chart's edge
    lengths = figures.length_histogram(np.array([1, 2, 3]), 4)
    assert not lengths.layout.annotations and lengths.layout.shapes[0].x0 == 4
    assert [t.name for t in lengths.data if t.showlegend is not False] == ["max_seq_length = 4"]
    # each label keeps its own place however many figures were built before
    mean = figures.utilization_figure(layout.stats.block_utilization).layout.annotations[0]
    assert (mean.y, mean.yref, mean.xref) == (75.0, "y", "x domain")


def test_padding_cells_print_the_pad_token_id() -> None:
    samples = [[1, 2], [3, 4, 5], [6]]
    batch = packing.pack(samples, 4, strategy="split", pad_token_id=7)
    view = compute.window(batch.plan, packing.read_rows(samples), 0, 9, 7)
    fig = figures.block_figure(
        view.sequence_ids, view.batch.loss_mask, view.batch.position_ids, view.batch.input_ids, 0, view.batch.labels
    )
    assert np.asarray(fig.data[0].text).tolist() == [["1", "2", "3", "4"], ["5", "6", "7", "7"]]
    grid = figures.grid_figure(view.sequence_ids, "", view.batch.input_ids)
    assert np.asarray(grid.data[0].text)[1].tolist() == ["5", "6", "7", "7"]
    assert figures.position_tick(2048) == 200 and figures.position_tick(6) == 1


def test_length_histogram_marks_max_seq_length() -> None:
    fig = figures.length_histogram(np.array([1, 2, 2, 9]), 4)
    assert int(np.asarray(fig.data[0].y).sum()) == 4
    assert fig.layout.shapes[0].x0 == 4
    big = figures.length_histogram(np.random.default_rng(0).integers(1, 5000, 100_000), 2048)
    assert int(np.asarray(big.data[0].y).sum()) == 100_000 and len(big.data[0].x) == 60


def test_compare_figures_are_small_horizontal_bars_and_the_baseline_runs_off_the_scale() -> None:
    from packing.comparison import compare

    lengths = np.array([1, 2, 3] * 20)
    runs = compare(lengths, 6)
    costs = {r.label: packing.compute_cost(r.plan) for r in runs if r.plan is not None}
    charts = figures.compare_figures(tables.compare_table(runs, costs), 30)
    ran = [tables.short_label(r) for r in runs if r.plan is not None]
    blocks = charts[0].data[0]
    assert (
        list(blocks.y)
        == ran
        == [*(n for n, s in packing.strategies.STRATEGIES.items() if s.keeps_boundaries), "bfd/1,000"]
        and blocks.orientation == "h"
    )
    assert blocks.marker.color[-1] == figures.STRATEGY_COLORS["bfd"]  # TRL's windows in bfd's colour
    true_blocks = [r.stats.num_blocks for r in runs if r.stats is not None]
    assert list(blocks.customdata) == true_blocks  # hover and text keep the real numbers
    # 'none' needs 60 blocks, the others 20: its bar is clipped at the axis end, its value printed
    end = charts[0].layout.xaxis.range[1]
    assert end < 60 and blocks.x[ran.index("none")] == end and "60 (off the scale)" in blocks.text[ran.index("none")]
    assert max(v for n, v in zip(ran, blocks.x, strict=True) if n != "none") < end
    assert max(charts[1].data[0].x) <= 100
    assert charts[0].layout.shapes[0].x0 == 30  # the lower bound as given


def test_the_baseline_is_not_clipped_when_it_is_close() -> None:
    fig = figures.compare_bars(["bfd", "none"], [10.0, 12.0], "Blocks")
    assert list(fig.data[0].x) == [10.0, 12.0] and fig.layout.xaxis.range[1] > 12  # room for the printed values
    assert "off the scale" not in " ".join(fig.data[0].text)


def test_sweep_figure_stacks_efficiency_tokens_lost_and_blocks() -> None:
    rows = compute.sweep(np.array([10, 3, 3, 2]), packing.Recipe(1), [4, 8, 16], ["bfd", "ffd", "none"])
    sizes, series, lost = tables.sweep_series(rows)
    fig = figures.sweep_figure(sizes, series, lost)
    assert [t.name for t in fig.data if t.showlegend is not False] == ["bfd", "ffd", "none"]
    assert len(fig.data) == 9 and {t.yaxis for t in fig.data} == {"y", "y2", "y3"}
    lost_bfd = next(t for t in fig.data if t.yaxis == "y2" and t.name == "bfd")
    assert list(lost_bfd.y) == [6 / 18 * 100, 2 / 18 * 100, 0.0]  # the 10-token sequence truncated to 4, then 8
    # identical lines (bfd and ffd) are told apart by dash and marker
    bfd, ffd = (next(t for t in fig.data if t.yaxis == "y" and t.name == n) for n in ("bfd", "ffd"))
    assert list(bfd.y) == list(ffd.y) and (bfd.line.dash, bfd.marker.symbol) != (ffd.line.dash, ffd.marker.symbol)
    titles = [a.text for a in fig.layout.annotations]
    assert any("Tokens lost" in t for t in titles)


def test_attention_figures_mark_cross_document_pairs_and_span_exactly_the_block() -> None:
    batch = packing.pack([[1, 2], [3, 4]], 4, strategy="split")
    view = compute.attention_view(batch, 0)
    causal, document = figures.attention_figures(view.causal, view.document)
    left = np.asarray(causal.data[0].z)
    assert int((left == 2).sum()) == view.cross_pairs == 4
    assert np.array_equal(np.asarray(document.data[0].z), view.document.astype(int))
    for fig in (causal, document):
        assert list(fig.layout.xaxis.range) == [-0.5, 3.5] and list(fig.layout.yaxis.range) == [3.5, -0.5]
        assert fig.layout.xaxis.autorange is False and fig.layout.yaxis.autorange is False


def test_wide_attention_masks_are_drawn_in_tiles() -> None:
    batch = packing.pack([list(range(1, 301)), list(range(1, 201))], 1000, strategy="split")
    view = compute.attention_view(batch, 0)
    causal, _ = figures.attention_figures(view.causal, view.document, max_cells=100)
    left = np.asarray(causal.data[0].z)
    assert left.shape == (100, 100)  # tiles of 10 x 10 pairs
    assert (left == 2).any() and "10×10" in causal.layout.xaxis.title.text
    assert list(causal.layout.xaxis.range) == [-0.5, 999.5]
    assert figures.pool_max(np.eye(4, dtype=np.int64), 2).tolist() == [[1, 0], [0, 1]]


def test_block_and_grid_axes_span_exactly_the_blocks() -> None:
    view = _classic()
    fig = figures.block_figure(view.sequence_ids, view.batch.loss_mask, view.batch.position_ids, None)
    for axis in ("yaxis", "yaxis2"):
        assert list(fig.layout[axis].range) == [1.5, -0.5]
    grid = figures.grid_figure(view.sequence_ids, "t")
    assert list(grid.layout.xaxis.range) == [-0.5, 3.5] and list(grid.layout.yaxis.range) == [1.5, -0.5]


def test_positions_figure_has_both_lines() -> None:
    batch = packing.pack([[1, 2], [3, 4, 5]], 8, strategy="split")
    view = compute.attention_view(batch, 0)
    fig = figures.positions_figure(view.position_plain, view.position_restart, batch.sequence_ids[0])
    assert list(fig.data[0].y) == [0, 1, 2, 3, 4]
    assert list(fig.data[1].y) == [0, 1, 0, 1, 2]


def test_figures_keep_the_white_look_with_a_compact_template() -> None:
    """Every chart carries the white look (backgrounds, grid colour, bar outlines) of Plotly's ``plotly_white``,
    but not its styling of 24 trace types: the template is copied and validated into every figure and sent with
    it, and the full one cost 8.5 ms and 7.6 KB per chart."""
    import json

    import plotly.io as pio

    view = _classic()
    fig = figures.utilization_figure(np.array([1.0, 0.5]))
    template = fig.layout.template
    white = pio.templates["plotly_white"]
    assert template.layout.plot_bgcolor == white.layout.plot_bgcolor == "white"
    assert template.layout.xaxis.gridcolor == white.layout.xaxis.gridcolor
    assert template.data.bar[0].marker.line.color == white.data.bar[0].marker.line.color
    assert len(json.dumps(fig.to_plotly_json()["layout"]["template"], default=str)) < 2_500
    grid = figures.block_figure(view.sequence_ids, view.batch.loss_mask, view.batch.position_ids)
    assert grid.layout.template.layout.paper_bgcolor == "white"


def test_streamlit_does_not_collect_garbage_after_every_run() -> None:
    """``runner.postScriptGC`` (on by default) runs ``gc.collect(2)`` after each script run, holding the GIL for
    every session while it walks the heap: 75 ms of a 90 ms interaction when measured. The page's memory is bounded
    by its own cache (``explorer/memo.py``), so the project's config turns it off."""
    from pathlib import Path

    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
