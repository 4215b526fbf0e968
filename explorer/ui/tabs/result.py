"""Result: headline numbers, the blocks with their loss mask and labels, utilization, lengths, classic text, table."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import streamlit as st

import packing
import packing.batches
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.examples import DEFAULT_EXAMPLE, EXAMPLES, FOLLOW_UPS, example_of
from explorer.core.model import grammar_count
from explorer.core.parsing import InputError
from explorer.core.preference import token_roles
from explorer.core.runs import Window
from explorer.core.safety import describe, escape
from explorer.core.sources import Paste, Text
from explorer.server import cache
from explorer.ui.page import guard
from explorer.ui.tabs.common import cell_text_width, cells_chart, need_plan
from explorer.views import figures, tables

DEFAULT_WINDOW = 16
MAX_TURN_ROWS = 20
"""Most rows whose turns the Result tab tabulates (the rows of the blocks shown, in order)."""
METRIC_WIDTH = 150
"""Pixels of one headline number: its longest label ("Truncated / dropped") whole, two a row on a phone."""
METRIC_CHARACTERS = 8
"""The longest value a tile of ``METRIC_WIDTH`` shows whole ("99.9997%", "196,236": digits are about 19 px each);
a longer one (a count of tens of millions or more) sizes its tile to itself rather than end in an ellipsis."""

MAX_TEXT_WIDTH = 64
"""Widest block printed in the classic text form."""
FIRST_TEXT_WIDTH = 16
"""Blocks up to this wide (an interview question's size) print their classic form first, above the charts; wider
ones after them, where it does not push the drawing out of sight."""


def metric_width(value: str) -> int | Literal["content"]:
    """A headline tile's width: ``METRIC_WIDTH``, or its content's when ``value`` is longer than fits.

    >>> metric_width("196,236"), metric_width("803,780,476")
    (150, 'content')
    """
    return METRIC_WIDTH if len(value) <= METRIC_CHARACTERS else "content"


def _metrics(ctx: Context, plan: packing.PackingPlan) -> packing.batches.TrainableCounts:
    s = ctx.recipe
    assert ctx.source is not None
    bounds = cache.bounds(ctx.source, s)
    with st.spinner("Counting the training targets…", show_time=True):
        trained = cache.trainable(ctx.source, s)
    stats = ctx.stats or plan.stats
    numbers = tables.headline(stats, bounds, s.strategy, trained) + tables.unit_headline(stats)
    tiles = st.container(horizontal=True, wrap=True, gap="medium")  # as many a row as the width holds
    for metric in numbers:
        tiles.metric(metric.label, metric.value, help=metric.help, width=metric_width(str(metric.value)))
    return trained


def _window_controls(plan: packing.PackingPlan) -> tuple[int, int]:
    """First block (0-based) and how many to draw; the numbers elsewhere always cover every block."""
    per_drawing = compute.window_blocks(plan.max_seq_length, 200)
    total = plan.num_blocks
    if total <= min(DEFAULT_WINDOW, per_drawing):
        return 0, total
    st.session_state["result_first"] = min(int(st.session_state.get("result_first", 1)), total)
    st.session_state["result_count"] = min(
        int(st.session_state.get("result_count", min(DEFAULT_WINDOW, per_drawing))), per_drawing
    )
    left, right = st.columns(2)
    first = left.number_input(
        "First block shown", min_value=1, max_value=total, step=1, key="result_first", persist_state="session"
    )
    count = right.number_input(
        "Blocks shown", min_value=1, max_value=per_drawing, step=1, key="result_count", persist_state="session"
    )
    last = min(total, first + count - 1)
    st.caption(f"Showing blocks {first:,}–{last:,} of {total:,}. The numbers above cover all of them.")
    return int(first) - 1, int(count)


def render(ctx: Context) -> None:
    plan = need_plan(ctx, "result")
    if plan is None:
        return
    assert ctx.source is not None
    s = ctx.recipe
    example = example_of(ctx.source.text) if isinstance(ctx.source, Paste) else None
    if example is not None:  # the question first, in the page's own words (never the visitor's text)
        st.markdown(f"**{example.title}.** {example.question}")
    if ctx.samples is not None and s.max_seq_length <= FIRST_TEXT_WIDTH and compute.window_blocks(s.max_seq_length, 1):
        _answer(ctx, plan)
    _cut_note(ctx)
    if example is not None:
        _follow_ups(example.key)
    trained = _metrics(ctx, plan)
    if ctx.samples is not None and ctx.samples.units is None and trained.target_tokens != trained.trainable_tokens:
        untrained: list[int] = []
        if trained.samples_without_trainable_tokens:
            targets = cache.document_targets(ctx.source, s)
            packed = np.bincount(plan.piece_sequence, minlength=len(targets)) > 0
            untrained = np.flatnonzero(packed & (targets == 0)).tolist()
        st.markdown(tables.labels_note(trained, untrained))
    lost = tables.loss_note(ctx.stats or plan.stats, int(ctx.lengths.max()))
    if lost:
        st.warning(lost)
    certificate = getattr(plan, "certificate", None)
    if certificate is not None:
        st.caption(tables.certificate_note(certificate, plan.num_blocks))
    if compute.window_blocks(s.max_seq_length, 1) == 0:
        st.warning(
            f"A block of {s.max_seq_length:,} tokens is too large to draw (the limit is {compute.MAX_DRAW_CELLS:,} "
            "cells per drawing); the numbers above and the charts below cover everything."
        )
    else:
        _blocks(ctx, plan)
    left, right = st.columns(2)
    with st.spinner("Drawing the block fill and the lengths…", show_time=True):
        utilization, lengths = cache.summary_figures(ctx.source, s)
    left.plotly_chart(utilization, key="util")
    right.plotly_chart(lengths, key="lengths")


def _answer_count(plan: packing.PackingPlan) -> int:
    """How many blocks the answer at the top prints: the first ones, as many as a drawing shows by default."""
    return min(plan.num_blocks, DEFAULT_WINDOW, compute.window_blocks(plan.max_seq_length, 200))


def _answer(ctx: Context, plan: packing.PackingPlan) -> None:
    """The answer first: the classic form of the first blocks (``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]``)."""
    assert ctx.source is not None
    count = _answer_count(plan)
    view = cache.window(ctx.source, ctx.recipe, 0, count)
    _classic_form(view)
    if count < plan.num_blocks:
        st.caption(f"The first {count:,} of {plan.num_blocks:,} blocks; the drawing below shows any of them.")


def _cut_note(ctx: Context) -> None:
    """What ``split`` does to a response whose prompt it leaves behind: a warning when these blocks do it, one
    sentence of what it would do otherwise (only for pasted token ids with masked prompts that ``split`` would cut)."""
    assert ctx.source is not None
    if ctx.samples is None or not isinstance(ctx.source, Paste):  # token ids it can quote (text: bytes, unread)
        return
    count, cuts = cache.responses_cut(ctx.source, ctx.recipe)
    if not count:
        return
    note = tables.cut_note(count, cuts, ctx.recipe.strategy)
    (st.warning if ctx.recipe.strategy == "split" else st.caption)(note)


def _follow_ups(current: str) -> None:
    """The three follow-up questions as one-click links (each loads its example and opens the tab that shows it),
    and the classic question from any of them."""
    from explorer.ui import sidebar

    shown = [key for key in (DEFAULT_EXAMPLE, *FOLLOW_UPS) if key != current][: len(FOLLOW_UPS)]
    row = st.container(horizontal=True, wrap=True, gap="small", vertical_alignment="center")
    row.markdown("**Follow-ups:**" if current == DEFAULT_EXAMPLE else "**More questions:**", width="content")
    for key in shown:
        example = EXAMPLES[key]
        row.button(
            example.link or "The classic question",
            key=f"follow_{key}",
            type="tertiary",
            icon=":material/arrow_forward:",
            on_click=sidebar.open_example,
            args=(key,),
            help=f"{example.question} Opens the {example.look_at} tab.",
        )


@st.fragment
def _blocks(ctx: Context, plan: packing.PackingPlan) -> None:
    """The blocks shown, and everything drawn from them (the classic form, the drawing, the documents' texts, the
    turns, the Blocks table): a fragment, so that choosing other blocks reruns this part only, not the sidebar,
    the data and the numbers above."""
    with guard("Result"):
        _window(ctx, plan)


def _window(ctx: Context, plan: packing.PackingPlan) -> None:
    assert ctx.source is not None
    s = ctx.recipe
    first, count = _window_controls(plan)
    with st.spinner(f"Drawing blocks {first + 1:,} to {first + count:,}…", show_time=True):
        view = cache.window(ctx.source, s, first, count)
        figure = cache.block_figure(ctx.source, s, first, count)
    cells_chart(figure, key="blocks")
    if view.batch.units is not None:  # the roles and the loss states, each its own legend, wrapping at any width
        st.html(figures.legend_html(figures.unit_legends(token_roles(view.batch))))
    if isinstance(ctx.source, Text):
        cells = view.count * s.max_seq_length
        if cells <= figures.MAX_TEXT_CELLS and s.max_seq_length <= figures.MAX_PIECE_WIDTH:
            st.caption(
                "Each cell prints its token as text (␣ a space, ↵ a new line, · a token holding part of a "
                "character, … the end of a token longer than its cell, such as a chat template's special tokens) "
                "and the loss mask row its 0 or 1 where the chart is at least "
                f"{cell_text_width(figure):,} px wide; on a narrower screen the cells keep only their colours. "
                "Hover a cell for its text, id and label; the table under the blocks has each document's text."
            )
        elif cells <= figures.MAX_MASK_HOVER_CELLS:
            st.caption(
                f"Hover a cell for its token's text and id (cells print text in blocks of up to "
                f"{figures.MAX_PIECE_WIDTH} tokens, {figures.MAX_TEXT_CELLS} cells per drawing); the table "
                "under the blocks has each document's text."
            )
        if cells <= figures.MAX_MASK_HOVER_CELLS and ctx.dataset is not None:
            _document_texts(view, ctx.dataset.tokenizer)
    if view.has_tokens:
        st.caption(
            "The loss-mask row: dark green a training target, light green a token with mask 1 whose label is "
            "-100 (a document's first token in the block), violet mask 0 (a prompt, or a turn the loss settings "
            "leave out), grey padding."
        )
    if view.batch.units is not None:
        st.caption(
            "Pairs and groups: the top row colours each token by its role (completion_ids and unit_ids: the "
            "prompt, the chosen and the rejected answer, a group's completion k), each unit whole in one block. "
            "With a shared prompt every completion but the first starts without a label (-100) yet is a "
            "training target: prediction_positions says the prompt's last position predicts it."
        )
    if isinstance(ctx.source, Text) and view.batch.units is None:
        _turns(ctx.source, s, view)
    elif isinstance(ctx.source, Text):
        st.caption("Each pair's or group's prompt and completions, decoded, are in the table under the blocks.")
    _result_text(view, _answer_count(plan) if ctx.samples is not None else 0)


def loss_words(tokens: int, trained: int) -> str:
    """Whether a turn is trained, in words.

    >>> loss_words(5, 5), loss_words(5, 2), loss_words(5, 0)
    ('trained', 'partly trained', 'not trained')
    """
    return "trained" if trained == tokens else "partly trained" if trained else "not trained"


def _turns(source: Text, recipe: packing.Recipe, view: Window) -> None:
    """The turns of the rows in the blocks shown: role, tokens and exactly which text is trained."""
    ids = view.sequence_ids.ravel()
    seen = ids[ids >= 0]
    _, where = np.unique(seen, return_index=True)
    rows = [int(r) for r in seen[np.sort(where)]]
    shown = rows[:MAX_TURN_ROWS]
    st.subheader("Turns")
    try:
        with st.spinner(
            f"Rendering the turns of {grammar_count(len(shown), 'row')} with the chat template…", show_time=True
        ):
            lines = cache.turns(source, recipe, tuple(shown))
    except (ValueError, TypeError, InputError) as error:  # a row the per-turn view cannot follow
        st.info(f"The turns cannot be shown: {escape(describe(error))}")
        return
    table: list[dict[str, Any]] = [
        {  # what a phone shows first, before its frame scrolls: the role and the text it trains
            "role": line["role"],
            "trained text": line["trained text"],
            "loss": loss_words(line["tokens"], line["trained"]),
            "sequence": line["sequence"],
            "turn": line["turn"] + 1 if line["turn"] >= 0 else None,
            "tokens": line["tokens"],
            "loss mask 1": line["trained"],
            "text": line["text"],
        }
        for line in lines
    ]
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "sequence": st.column_config.NumberColumn(width="small", help="The row, numbered from 1."),
            "turn": st.column_config.NumberColumn(width="small", help="The message of a chat, numbered from 1."),
            "tokens": st.column_config.NumberColumn(format="localized", width="small"),
            "loss mask 1": st.column_config.NumberColumn(
                format="localized", width="small", help="Tokens of the turn whose loss mask is 1."
            ),
            "role": st.column_config.TextColumn(width="small"),
            "loss": st.column_config.TextColumn(width=100),
            "trained text": st.column_config.TextColumn(
                width=200, help="The text of the turn's tokens whose loss mask is 1 (hover a cell for all of it)."
            ),
            "text": st.column_config.TextColumn(width="medium", help="The turn's text; hover a cell for all of it."),
        },
    )
    more = f" (the first {len(shown)} of the {len(rows)} rows in these blocks)" if len(rows) > len(shown) else ""
    st.caption(
        f"Every turn of the rows in the blocks shown{more}, as tokenized before packing (its loss mask; truncation "
        "and document starts are in the blocks above), with the text each one trains on. A chat's template "
        "tokens between messages belong to the message they open, so an assistant turn's header is never "
        "trained; which turns and end-of-turn tokens are follows the loss settings in the sidebar."
    )


def _document_texts(view: Window, tokenizer: Any) -> None:
    """Each document piece of the blocks shown with its text: what the cells print, readable at any width."""
    from explorer.core.text import documents_table

    try:
        lines = documents_table(view.batch, tokenizer)
    except (ValueError, TypeError):  # a tokenizer that cannot decode these ids: the hover has the ids
        return
    table = [
        {
            "block": view.first + line["block"] + 1,
            "document": line["sample"] + 1,
            "text": line["text"],
            "tokens": line["tokens"],
            "loss mask 1": line["loss_mask"],
            "training targets": line["targets"],
        }
        for line in lines
    ]
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "block": st.column_config.NumberColumn(width="small"),
            "document": st.column_config.NumberColumn(width="small", help="The source sequence, numbered from 1."),
            "text": st.column_config.TextColumn(
                width="large", help="The document's tokens in this block, decoded; hover a cell for all of it."
            ),
            "loss mask 1": st.column_config.NumberColumn(help="Tokens whose loss mask is 1."),
            "training targets": st.column_config.NumberColumn(help="Labels that are not -100."),
        },
    )


def _classic_form(view: Window) -> None:
    batch = view.batch
    if view.has_tokens and batch.max_seq_length <= MAX_TEXT_WIDTH:
        st.markdown(tables.classic_markdown(tables.classic_text(batch.input_ids, batch.loss_mask, view.first)))


def _result_text(view: Window, answered: int = 0) -> None:
    """The classic form of the blocks shown (unless the answer at the top, its first ``answered`` blocks, has
    them) and the Blocks table."""
    batch = view.batch
    above = batch.max_seq_length <= FIRST_TEXT_WIDTH and view.first == 0 and view.count <= answered
    if view.has_tokens and batch.max_seq_length <= MAX_TEXT_WIDTH and not above:
        st.subheader("Classic form")
        _classic_form(view)
    elif view.has_tokens and batch.max_seq_length > MAX_TEXT_WIDTH:
        st.caption(f"The classic text form is printed for blocks of up to {MAX_TEXT_WIDTH} tokens; see the table.")
    st.subheader("Blocks")
    labels = batch.labels  # lengths only: every token in the loss mask, as the numbers above count it
    ids = view.has_tokens and batch.max_seq_length > MAX_TEXT_WIDTH  # else the classic form above has them
    predicted = batch.prediction_positions >= 0 if batch.units is not None else None  # pairs and groups
    table = tables.blocks_table(batch.input_ids, batch.loss_mask, view.sequence_ids, view.first, ids, labels, predicted)
    if not ids:  # a narrow table: drawn as a plain table, whose headers wrap on a phone instead of scrolling
        st.table(table, hide_index=True)
        st.caption(
            "documents: the block's documents (source sequences, numbered from 1); loss mask 1: its tokens whose loss "
            "mask is 1; training targets: its labels that are not -100 (a document's first token in a block is)"
            + (
                "; of pairs and groups, its tokens a position predicts (prediction_positions)."
                if predicted is not None
                else "."
            )
        )
        return
    number = st.column_config.NumberColumn(format="localized")
    wide = st.column_config.TextColumn(width="medium")
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "block": st.column_config.NumberColumn(width="small"),
            "documents": st.column_config.TextColumn(help="The block's documents, numbered from 1."),
            "tokens": number,
            "padding": number,
            "loss mask 1": st.column_config.NumberColumn(format="localized", help="Tokens whose loss mask is 1."),
            "training targets": st.column_config.NumberColumn(
                format="localized", help="Labels that are not -100 (each document's first token in a block is)."
            ),
            "input_ids": wide,
            "loss_mask": wide,
        },
    )
