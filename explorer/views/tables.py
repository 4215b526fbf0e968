"""Tables and text of packing results: headline numbers, the classic text form, per-block and comparison tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import packing
import packing.batches
import packing.errors
import packing.layouts
import packing.strategies
from explorer.core.formatting import percent, plural
from explorer.core.model import grammar_count
from packing.comparison import Row
from packing.layouts.audit import LAYOUT_TITLES, AuditReport

Int64Array = npt.NDArray[np.int64]
IntArray = npt.NDArray[np.integer[Any]]


@dataclass(frozen=True)
class Metric:
    """One headline number: label, formatted value and a one-line explanation."""

    label: str
    value: str
    help: str


LOSS_MASK_LABEL = "Tokens with mask 1"
"""The page's name for tokens whose loss mask is 1 (the seed's mask: a real token the loss settings keep)."""
TARGETS_LABEL = "Training targets"
"""The page's name for labels that are not -100 (what a loss is computed on)."""


def labels_note(trainable: packing.batches.TrainableCounts, untrained: Sequence[int] = ()) -> str:
    """The page's one explanation, in words, of how training turns the loss mask into labels, with the counts
    that show it and the packed documents left with no target (``untrained``, 0-based; named from 1).

    >>> print(labels_note(packing.batches.TrainableCounts(6, 2, 1), [2]))
    **From mask to labels.** A model learns each token from the tokens before it in its own document, so training turns the mask into labels: a token with mask 1 keeps its id as its label, except the first token of each document in a block, which nothing before it may predict. That one, and every token with mask 0, gets the label -100, which the loss ignores. So of the 6 tokens with mask 1, 2 are training targets; 1 packed document (#3) has none at all (a one-token document, or one whose only trained tokens start blocks).
    """
    tokens, targets = trainable.trainable_tokens, trainable.target_tokens
    text = (
        "**From mask to labels.** A model learns each token from the tokens before it in its own document, so "
        "training turns the mask into labels: a token with mask 1 keeps its id as its label, except the first token "
        "of each document in a block, which nothing before it may predict. That one, and every token with mask 0, "
        f"gets the label -100, which the loss ignores. So of the {plural(tokens, 'token')} with mask 1, "
        f"{targets:,} {'is a training target' if targets == 1 else 'are training targets'}"
    )
    count = trainable.samples_without_trainable_tokens
    if not count:
        return text + "."
    named = ", ".join(f"#{d + 1}" for d in list(untrained)[:MAX_NAMED]) + (", …" if len(untrained) > MAX_NAMED else "")
    return (
        f"{text}; {plural(count, 'packed document')}{f' ({named})' if named else ''} "
        f"{'has' if count == 1 else 'have'} none at all (a one-token document, or one whose only trained tokens "
        "start blocks)."
    )


def cut_note(count: int, cuts: Sequence[Any], strategy: str) -> str:
    """What ``split`` does to a response whose prompt it leaves in an earlier block (``runs.responses_cut``), and
    why trainers avoid it: said of these blocks under ``split``, of what ``split`` would do under any other
    strategy. Token ids quoted up to a few; blocks and sequences numbered from 1. O(1).

    >>> from explorer.core.runs import Cut
    >>> cut = Cut(1, 1, np.array([13, 14]), np.array([10, 11]))
    >>> print(cut_note(1, [cut], "bfd"))
    With `split` (the classic answer's plan), sequence 2 would be cut: 13 14 would train in block 2 without their prompt 10 11, left in the block before. The model would learn a response from a question it cannot see, so trainers keep each response in the block of its prompt, as bfd does here.
    """
    first = cuts[0]
    trained, prompt = _ids(first.trained), _ids(first.prompt)
    more = f" ({count - 1:,} more {'is' if count == 2 else 'are'} cut so)" if count > 1 else ""
    why = "The model would learn a response from a question it cannot see, so trainers keep each response in the "
    if strategy == "split":
        return (
            f"`split` cuts sequence {first.sequence + 1}{more}: {trained} train in block {first.block + 1} without "
            f"their prompt {prompt}, left in the block before. {why.replace('would learn', 'learns')}block of its "
            "prompt: choose a strategy that keeps sequences whole (bfd, for one)."
        )
    return (
        f"With `split` (the classic answer's plan), sequence {first.sequence + 1} would be cut{more}: {trained} "
        f"would train in block {first.block + 1} without their prompt {prompt}, left in the block before. {why}"
        f"block of its prompt, as {strategy} does here."
    )


def _ids(tokens: IntArray, most: int = 6) -> str:
    """A few token ids in words: ``13 14``, or the first ``most`` and how many in all. O(most)."""
    shown = " ".join(str(t) for t in np.asarray(tokens)[:most].tolist())
    return shown if len(tokens) <= most else f"{shown} … ({len(tokens):,} tokens)"


def headline(
    stats: packing.PackingStats, bounds: packing.LowerBounds, strategy: str, trainable: packing.batches.TrainableCounts
) -> list[Metric]:
    """The numbers every packing should be judged by (they always cover the whole input)."""
    info = packing.strategies.STRATEGIES[strategy]
    simple = info.bound == "simple"
    bound = bounds.simple if simple else max(bounds.simple, bounds.l2)
    bound_help = (
        "ceil(tokens / max_seq_length): no packing can use fewer blocks."
        if simple
        else "Martello–Toth L2 bound: no packing that keeps sequences whole can use fewer blocks."
    )
    return [
        Metric("Blocks", f"{stats.num_blocks:,}", f"Blocks of {plural(stats.max_seq_length, 'token')}."),
        Metric("Lower bound", f"{bound:,}", bound_help),
        Metric("Efficiency", percent(stats.efficiency), "Real tokens / (blocks × max_seq_length)."),
        Metric("Padding", f"{stats.padding_tokens:,}", "Pad tokens added to fill the blocks."),
        Metric(
            "Truncated / dropped",
            f"{stats.tokens_truncated:,} / {stats.tokens_dropped:,}",
            f"Tokens lost to the overflow policy: {plural(stats.sequences_truncated, 'sequence')} truncated, "
            f"{stats.sequences_dropped:,} dropped.",
        ),
        Metric(
            "Sequences cut", f"{stats.sequences_split:,}", "Sequences whose tokens are spread over more than one block."
        ),
        Metric(
            LOSS_MASK_LABEL,
            f"{trainable.trainable_tokens:,}",
            "Tokens whose loss mask is 1: real tokens the loss settings keep (the mask is 0 on padding and on "
            "masked prompts or turns).",
        ),
        Metric(
            TARGETS_LABEL,
            f"{trainable.target_tokens:,}",
            "Labels that are not -100, the positions the loss is computed on: the loss-mask tokens less each "
            "document's first token in a block, which nothing before it may predict.",
        ),
    ]


def classic_text(input_ids: Int64Array, loss_mask: IntArray, first_block: int = 0) -> str:
    """The interview form: ``Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]``, one line per block.

    >>> print(classic_text(np.array([[1, 2, 3, 4], [5, 6, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 0, 0]])))
    Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]
    Block 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]
    """
    return "\n".join(
        f"Block {first_block + i + 1}: {ids.tolist()} -> mask: {mask.tolist()}"
        for i, (ids, mask) in enumerate(zip(input_ids, loss_mask, strict=True))
    )


_CLASSIC_LINE = re.compile(r"Block \d+: \[[\d, ]*\] -> mask: \[[01, ]*\]")


def classic_markdown(text: str) -> str:
    """``text`` (the classic form, numbers only) as Markdown: one code span per block, one block per line. Plain
    Markdown is drawn at once; a code block loads its own script, which on a slow machine can hold the first
    drawing of the page back behind the charts' library. Anything but the classic form is refused (no user
    text reaches Markdown). O(len(text)).

    >>> print(classic_markdown("Block 1: [1, 2] -> mask: [0, 1]\\nBlock 2: [3, 0] -> mask: [1, 0]"))
    `Block 1: [1, 2] -> mask: [0, 1]`
    `Block 2: [3, 0] -> mask: [1, 0]`
    """
    lines = text.splitlines()
    if not all(_CLASSIC_LINE.fullmatch(line) for line in lines):
        raise ValueError("not the classic form")
    return "  \n".join(f"`{line}`" for line in lines)


def blocks_table(
    input_ids: Int64Array,
    loss_mask: IntArray,
    sequence_ids: Int64Array,
    first_block: int = 0,
    with_tokens: bool = True,
    labels: IntArray | None = None,
    predicted: npt.NDArray[np.bool_] | None = None,
) -> pd.DataFrame:
    """One row per block: its documents (source sequences, 1-based), fill, padding, its tokens with loss mask 1 and its training
    targets (labels that are not -100; given ``labels``; blocks of units: the tokens a position predicts, given
    ``predicted``, ``prediction_positions >= 0``), and the token ids and mask when known."""
    rows = []
    targets = None if labels is None else (np.asarray(labels) != -100).sum(axis=1)
    if predicted is not None:
        targets = np.asarray(predicted).sum(axis=1)
    for i, (ids, mask, seqs) in enumerate(zip(input_ids, loss_mask, sequence_ids, strict=True)):
        real = seqs >= 0
        order = seqs[real][np.r_[True, seqs[real][1:] != seqs[real][:-1]]] if real.any() else seqs[:0]
        row = {
            "block": first_block + i + 1,
            "documents": ", ".join(str(s + 1) for s in order.tolist()),
            "tokens": int(real.sum()),
            "padding": int((~real).sum()),
            "loss mask 1": int(mask.sum()),
        }
        if targets is not None:
            row["training targets"] = int(targets[i])
        if with_tokens:
            row["input_ids"] = str(ids.tolist())
            row["loss_mask"] = str(mask.tolist())
        rows.append(row)
    return pd.DataFrame(rows)


def compare_table(rows: Sequence[Row], costs: dict[str, packing.ComputeCost]) -> pd.DataFrame:
    """Every contender's numbers side by side (named as in ``short_label``, with its note: ``bfd/1,000 (TRL's
    default)``), with its gap to the lower bound that applies to it; a contender that refused shows why.
    O(contenders)."""
    out = []
    for row in rows:
        note = row.contender.note
        line: dict[str, object] = {
            "strategy": short_label(row) + (f" ({note})" if note else ""),
            "short": short_label(row),
        }
        if row.stats is None:
            line["note"] = row.refusal
            out.append(line)
            continue
        stats, cost = row.stats, costs[row.label]
        line.update(
            {
                "blocks": stats.num_blocks,
                "above the bound": row.gap,
                "efficiency": stats.efficiency,
                "padding": stats.padding_tokens,
                "tokens lost": stats.tokens_lost,
                "sequences cut": stats.sequences_split,
                "time (ms)": row.seconds * 1000,
                "token slots": cost.token_slots,
                "attention (document-masked)": cost.attention_masked,
                "attention (full blocks)": cost.attention_full,
                "note": "",
            }
        )
        out.append(line)
    return pd.DataFrame(out)


def short_label(row: Row) -> str:
    """A contender's name in a chart: ``bfd``, or ``bfd/1,000`` when it packs per window of 1,000 rows.

    >>> from packing.comparison import DEFAULT_CONTENDERS
    >>> rows = [Row(c, None, 0, 0.0) for c in DEFAULT_CONTENDERS[-1:]]
    >>> short_label(rows[0])
    'bfd/1,000'
    """
    window = row.contender.window
    return row.contender.strategy if window is None else f"{row.contender.strategy}/{window:,}"


def compare_caption(rows: Sequence[Row], bounds: packing.LowerBounds, max_seq_length: int, overflow: str) -> str:
    """What the Compare tab compares, and the lower bounds its gaps are measured from: tokens / max_seq_length
    when sequences may be cut, and Martello–Toth L2, or the optimum's proven bound when it is higher, when not.

    >>> rows = packing.compare([6, 5, 3, 2], 8)
    >>> print(compare_caption(rows, packing.lower_bounds([6, 5, 3, 2], 8), 8, "truncate"))
    Every strategy at max_seq_length 8 with overflow 'truncate', and bfd per window of 1,000 rows (TRL's default; bfd/1,000 below). Lower bounds: 2 blocks if sequences may be cut, 2 if not (Martello–Toth L2). Above the bound: blocks more than the bound that applies to the strategy.
    """
    whole = max(bounds.simple, bounds.l2)
    proven = max(
        (r.bound for r in rows if not packing.strategies.STRATEGIES[r.contender.strategy].splits_sequences),
        default=whole,
    )
    kind = "proven by the optimum's certificate" if proven > whole else "Martello–Toth L2"
    extra = "".join(
        f", and {r.contender.strategy} per window of {r.contender.window:,} rows"
        + (f" ({r.contender.note}; {short_label(r)} below)" if r.contender.note else f" ({short_label(r)} below)")
        for r in rows
        if r.contender.window is not None
    )
    return (
        f"Every strategy at max_seq_length {max_seq_length:,} with overflow '{overflow}'{extra}. Lower bounds: "
        f"{grammar_count(bounds.simple, 'block')} if sequences may be cut, {proven:,} if not ({kind}). "
        "Above the bound: blocks more than the bound that applies to the strategy."
    )


def compare_display(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison table as shown: only strategies that ran (refusals are explained under it), efficiency in %."""
    shown = frame.dropna(subset=["blocks"]).drop(columns=["note", "short"]).reset_index(drop=True)
    shown["efficiency"] = shown["efficiency"] * 100
    for column in ("blocks", "above the bound", "padding", "tokens lost", "sequences cut", "token slots"):
        shown[column] = shown[column].astype("int64")
    return shown.rename(
        columns={
            "efficiency": "efficiency (%)",
            "attention (document-masked)": "attention (masked)",
            "attention (full blocks)": "attention (full)",
        }
    )


COST_COLUMNS = ("token slots", "attention (masked)", "attention (full)")
"""The compute estimate's columns, shown in a table of their own beside its explanation."""


def compare_parts(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``compare_display`` as two narrower tables, each with the strategy: the plans' numbers, and the compute
    estimate. O(contenders)."""
    shown = compare_display(frame)
    return shown.drop(columns=list(COST_COLUMNS)), shown[["strategy", *COST_COLUMNS]]


def sweep_display(rows: Sequence[dict[str, object]]) -> pd.DataFrame:
    """Sweep rows as shown: efficiency and tokens lost in %, and the note column only when some strategy did not
    run."""
    frame = pd.DataFrame(rows)
    frame["efficiency"] = frame["efficiency"].astype("float64") * 100
    frame["lost share"] = frame["lost share"].astype("float64") * 100
    if not frame["note"].astype(bool).any():
        frame = frame.drop(columns="note")
    return frame.rename(columns={"efficiency": "efficiency (%)", "lost share": "tokens lost (%)"})


def sweep_series(
    rows: Sequence[dict[str, object]],
) -> tuple[list[int], dict[str, tuple[list[float | None], list[float | None]]], dict[str, list[float | None]]]:
    """Sweep rows regrouped for ``figures.sweep_figure``: sizes, per strategy (efficiency, blocks), and per
    strategy the share of the input tokens lost."""
    frame = pd.DataFrame(rows)
    sizes = sorted({int(s) for s in frame["max_seq_length"]})
    series, lost = {}, {}
    for name, group in frame.groupby("strategy", sort=False):
        by_size = group.set_index("max_seq_length")
        series[str(name)] = (
            [_maybe(by_size.at[s, "efficiency"]) for s in sizes],
            [_maybe(by_size.at[s, "blocks"]) for s in sizes],
        )
        lost[str(name)] = [_maybe(by_size.at[s, "lost share"]) for s in sizes]
    return sizes, series, lost


def _maybe(value: object) -> float | None:
    return None if value is None or pd.isna(value) else float(value)  # type: ignore[arg-type]


def refusal(run: Row) -> str:
    """Why the page's strategy did not pack this data, in plain words from the refusal's own fields, and where
    the other strategies are."""
    info = packing.strategies.STRATEGIES[run.contender.strategy]
    if isinstance(run.error, packing.errors.TooManyDocuments):
        return (
            f"{info.title} takes at most {run.error.limit:,} documents; this data has {run.error.count:,}. "
            "The Compare tab shows every other strategy."
        )
    return f"{info.title} cannot pack this data: {run.refusal}"


MAX_NAMED = 5
"""Most documents a note names."""


CERTIFICATE_KINDS = {
    "L1": "the token-count bound",
    "L2": "the Martello–Toth L2 bound",
    "dual prices": "a linear-programming dual bound anyone can recheck",
}


def certificate_note(certificate: object, blocks: int) -> str:
    """What the proven optimum's certificate says: the lower bound it proves and the gap left (0 = optimal).

    >>> print(certificate_note(packing.plan([5, 3, 2, 4], 6, strategy="optimal").certificate, 3))
    Certified: no packing that keeps sequences whole uses fewer than 3 blocks (the token-count bound), so these 3 blocks are optimal.
    """
    bound = int(getattr(certificate, "lower_bound", 0))
    kind = str(getattr(certificate, "kind", ""))
    named = CERTIFICATE_KINDS.get(kind, f"the {kind} bound")
    gap = blocks - bound
    head = f"Certified: no packing that keeps sequences whole uses fewer than {plural(bound, 'block')} ({named})"
    if gap <= 0:
        return f"{head}, so these {plural(blocks, 'block')} are optimal."
    return f"{head}; these {plural(blocks, 'block')} are at most {plural(gap, 'block')} above the optimum."


def optimum_note(row: Row, seconds: int) -> str:
    """What the proven optimum's search found within ``seconds``: its blocks, the bound it proved and the gap
    between them, saying when the time ran out before the gap closed.

    >>> stats = packing.plan([3, 3], 4, strategy="bfd").stats
    >>> from packing.comparison import Contender
    >>> print(optimum_note(Row(Contender("optimal"), stats, 1, 5.0), 5))
    The optimum's search stopped at its 5 s limit: its best plan has 2 blocks; no plan uses fewer than 1 block (the proven bound), so it is at most 1 block above the optimum.
    """
    if row.stats is None:
        return f"The optimum's search did not run: {row.refusal}"
    blocks, gap = row.stats.num_blocks, row.gap or 0
    if gap <= 0:
        return f"The optimum's search proved its {plural(blocks, 'block')} optimal within {seconds} s."
    return (
        f"The optimum's search stopped at its {seconds} s limit: its best plan has {plural(blocks, 'block')}; no "
        f"plan uses fewer than {plural(row.bound, 'block')} (the proven bound), so it is at most "
        f"{plural(gap, 'block')} above the optimum."
    )


LOSS_WARNING = 0.1
"""Share of the input tokens lost to the overflow policy above which the Result tab warns."""


def unit_headline(stats: packing.PackingStats) -> list[Metric]:
    """The unit counts of blocks of preference pairs and completion groups (``stats.units``, the library's); none
    for plain sequences.

    >>> pair = {"prompt": [1, 2], "chosen": [3], "rejected": [4]}
    >>> [(m.label, m.value) for m in unit_headline(packing.pack([pair], 8, share_prompt=True).stats)]
    [('Pairs / groups', '1 / 0'), ('Completions', '2'), ('Tokens saved', '2')]
    """
    units = stats.units
    if units is None:
        return []
    return [
        Metric(
            "Pairs / groups",
            f"{units.pairs:,} / {units.groups:,}",
            f"Preference pairs and completion groups, each packed whole in one block: "
            f"{plural(units.units_truncated, 'unit')} truncated, {units.units_dropped:,} dropped.",
        ),
        Metric(
            "Completions",
            f"{units.completions:,}",
            f"Completions of the pairs and groups ({plural(units.completions_truncated, 'completion')} cut).",
        ),
        Metric(
            "Tokens saved",
            f"{units.prompt_tokens_shared:,}",
            "Prompt tokens stored once instead of once per completion (stats.units.prompt_tokens_shared; "
            f"share_prompt={units.share_prompt}).",
        ),
    ]


def loss_note(stats: packing.PackingStats, longest: int) -> str | None:
    """A warning when the overflow policy throws away much of the data (None when little or nothing is lost).

    >>> print(loss_note(packing.plan([10, 2], 4).stats, 10))
    50% of the tokens (6 of 12) are lost: 1 of 2 sequences is longer than max_seq_length 4 (the longest has 10 tokens). Raise max_seq_length, or choose overflow 'split' to keep every token.
    """
    if stats.input_tokens == 0 or stats.tokens_lost <= LOSS_WARNING * stats.input_tokens:
        return None
    over = stats.sequences_truncated + stats.sequences_dropped
    verb = "is" if over == 1 else "are"
    return (
        f"{stats.tokens_lost / stats.input_tokens:.0%} of the tokens ({stats.tokens_lost:,} of {stats.input_tokens:,}) "
        f"are lost: {over:,} of {plural(stats.num_sequences, 'sequence')} {verb} longer than max_seq_length "
        f"{stats.max_seq_length:,} (the longest has {longest:,} tokens). Raise max_seq_length, or choose overflow "
        "'split' to keep every token."
    )


def audit_summary_rows(report: AuditReport) -> list[tuple[str, str]]:
    """``(name, value)`` rows of the counts, as the command line prints them.

    >>> import pyarrow as pa
    >>> from packing.layouts.audit import audit
    >>> audit_summary_rows(audit(pa.table({"input_ids": [[1, 2, 3, 0]], "seq_lengths": [[3]], "labels": [[-100, 2, 3, -100]],
    ...                                    "position_ids": [[0, 1, 2, 0]]})))[:4]
    [('layout', "packing (this project's blocks)"), ('blocks', '1'), ('documents', '1'), ('tokens', '3')]
    """
    fill = report.block_fill
    documents = "unknown (no boundaries)" if report.num_documents is None else f"{report.num_documents:,}"
    rows = [
        ("layout", f"{report.layout} ({LAYOUT_TITLES[report.layout]})"),
        ("blocks", f"{report.num_blocks:,}"),
        ("documents", documents),
        ("tokens", f"{report.tokens:,}"),
        ("padding tokens", f"{report.padding_tokens:,}"),
        ("max_seq_length", f"{report.max_seq_length:,}" + ("" if report.max_seq_length_given else " (longest block)")),
        ("efficiency", f"{100 * report.efficiency:.2f} %"),
    ]
    if len(fill):
        rows.append(("block fill (min / median / max)", " / ".join(f"{100 * v:.1f} %" for v in _audit_spread(fill))))
    return rows


def _audit_spread(fill: npt.NDArray[np.float64]) -> tuple[float, float, float]:
    return float(fill.min()), float(np.median(fill)), float(fill.max())


def audit_findings_rows(report: AuditReport) -> list[dict[str, Any]]:
    """One row per finding: kind, count, first cells (blocks numbered from 1, as the page numbers them; positions
    from 0, as the position axis), what it means and what to change."""
    return [
        {
            "kind": item.kind,
            "count": item.count,
            "first cells (block, position)": ", ".join(f"({b + 1}, {p})" for b, p in item.examples),
            "meaning": item.description,
            "fix": item.fix,
        }
        for item in report.findings
    ]
