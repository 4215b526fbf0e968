"""Downloads of a packed result and a Python snippet that reproduces it with the library."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

import packing
from explorer.core.examples import synthetic_code
from explorer.core.runs import pad_id
from packing.core._loss import LossRules

MAX_EXPORT_CELLS = 8_000_000
"""Largest packed result (blocks × max_seq_length) the page builds for download."""
MAX_INLINE_CHARS = 4_000
"""Longest sample list written literally into the snippet."""


def _written(batch: packing.PackedBatch, suffix: str) -> bytes:
    """Bytes of ``packing.write_jsonl`` / ``write_parquet`` output (they write files atomically)."""
    from packing.layouts._export import write_jsonl, write_parquet

    writer = write_jsonl if suffix == ".jsonl" else write_parquet
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / f"blocks{suffix}"
        writer(batch, target)
        return target.read_bytes()


def jsonl_bytes(batch: packing.PackedBatch) -> bytes:
    """One JSON object per block: input_ids, labels, loss_mask, position_ids, sequence_ids, seq_lengths."""
    return _written(batch, ".jsonl")


def parquet_bytes(batch: packing.PackedBatch) -> bytes:
    """One Parquet row per block with the same columns as the JSON lines."""
    return _written(batch, ".parquet")


def documents_jsonl(batch: packing.PackedBatch, tokenizer: Any) -> bytes:
    """One JSON object per packed document (``text_view.documents_table``): block, sample, tokens, loss_mask (its
    tokens with loss mask 1), targets (its labels that are not -100), text.

    >>> print(documents_jsonl(packing.pack([{"text": "hi"}], 4, tokenizer="bytes"), "bytes").decode(), end="")
    {"block": 0, "sample": 0, "tokens": 3, "loss_mask": 3, "targets": 2, "text": "hi<|endoftext|>"}
    """
    from explorer.core.text import documents_table

    lines = (json.dumps(line, ensure_ascii=False) + "\n" for line in documents_table(batch, tokenizer))
    return "".join(lines).encode("utf-8")


def plan_csv(plan: packing.PackingPlan) -> bytes:
    """The plan of lengths-only data: one row per piece (block, position, sequence, start, length), 1-based blocks."""
    frame = pd.DataFrame(
        {
            "block": plan.piece_block() + 1,
            "position": plan.piece_position(),
            "sequence": plan.piece_sequence + 1,
            "start": plan.piece_start,
            "length": plan.piece_length,
        }
    )
    text: str = frame.to_csv(index=False)
    return text.encode("utf-8")


@dataclass(frozen=True)
class DataOrigin:
    """How the snippet gets its data: exactly one of the fields is used, in this order."""

    samples: list[Any] | None = None
    upload_name: str | None = None
    synthetic: tuple[int, str, int, int] | None = None
    workload: tuple[str, int] | None = None
    """(name, sequences); 0 sequences = all of them."""
    tokenizer: str | None = None
    """What tokenizes text ``samples`` or the text rows of an uploaded file (``packing.load_tokenizer``); None for
    token data."""


def rule_options(rules: LossRules) -> str:
    """``rules`` as the library's keyword options (``Recipe`` fields): ``loss`` always, the others when they
    differ from their defaults. O(1).

    >>> rule_options(LossRules()), rule_options(LossRules("last_turn", ("assistant", "tool"), "none"))
    ("loss='completion'", "loss='last_turn', roles_to_train=('assistant', 'tool'), train_on_eos='none'")
    """
    default = LossRules()
    chosen = [f for f in fields(rules) if f.name == "loss" or getattr(rules, f.name) != getattr(default, f.name)]
    return ", ".join(f"{f.name}={getattr(rules, f.name)!r}" for f in chosen)


def _data_lines(origin: DataOrigin, rules: LossRules) -> tuple[list[str], bool]:
    """Lines that define ``samples`` (token data) or ``lengths`` (lengths only), and which one."""
    if origin.samples is not None:
        text = json.dumps(origin.samples)
        if len(text) > MAX_INLINE_CHARS:
            return ["samples = [...]  # your sequences: lists of token ids or prompt/completion dicts"], True
        if len(text) <= 80:
            return [f"samples = {text}"], True
        items = "\n".join(f"    {json.dumps(sample)}," for sample in origin.samples)
        return [f"samples = [\n{items}\n]"], True
    if origin.upload_name is not None:
        # the loss rule is applied as the file is read (pack takes the samples as they are); the tokenizer is used
        # only if the file holds text rows
        tokenizer = f", tokenizer={origin.tokenizer!r}" if origin.tokenizer is not None else ""
        return [
            f"data = packing.read_dataset({origin.upload_name!r}, {rule_options(rules)}{tokenizer})",
            "samples, lengths = data.samples, data.lengths",
        ], False
    if origin.synthetic is not None:
        return ["import numpy as np", "", synthetic_code(*origin.synthetic)], False
    if origin.workload is not None:
        name, count = origin.workload
        if count <= 0:  # every sequence, in the file's order (as ``packing compare`` reads it)
            return [
                "from packing._workloads import load_workload",
                "",
                f"lengths = load_workload({name!r}).lengths",
            ], False
        return [
            "import numpy as np",
            "from packing._workloads import load_workload",
            "",
            f"lengths = load_workload({name!r}).lengths",
            f"lengths = lengths[np.random.default_rng(0).permutation(len(lengths))[:{count}]]  # a seeded sample",
        ], False
    raise ValueError("the origin names no data")


def _writes_a_file(origin: DataOrigin) -> bool:
    """Files and long pasted lists are written to Parquet; a few pasted sequences are printed block by block."""
    if origin.samples is not None:
        return len(json.dumps(origin.samples)) > MAX_INLINE_CHARS
    return origin.upload_name is not None


def snippet(
    origin: DataOrigin,
    recipe: packing.Recipe,
    tokens: bool,
) -> str:
    """A short, runnable Python program that packs the data ``origin`` names as ``recipe`` says (its length,
    strategy, the strategy's own options, overflow, pad id and loss rules as the library's options; the pad id 0
    without one), the data's ``tokens`` or, for lengths only, their plan.

    >>> print(snippet(DataOrigin(samples=[[1, 2], [3]]), packing.Recipe(4, strategy="first_fit_shuffle", seed=3), True))
    ... # doctest: +ELLIPSIS
    import packing
    <BLANKLINE>
    samples = [[1, 2], [3]]
    <BLANKLINE>
    batch = packing.pack(
        samples,
        max_seq_length=4,
        strategy='first_fit_shuffle',
        overflow='truncate',
        seed=3,
        pad_token_id=0,
        loss='completion',
    )
    ...
    """
    lines, _ = _data_lines(origin, recipe.loss_rules)
    if tokens and _writes_a_file(origin):
        lines = ["from packing import write_parquet", *lines]
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    lines = [line for line in lines if line and line not in imports]
    max_seq_length, strategy, overflow = recipe.max_seq_length, recipe.strategy, recipe.overflow
    pad_token_id = pad_id(recipe)
    rules = recipe.loss_rules
    chosen = {name: value for name, value in recipe.strategy_options().items() if value is not None}  # a seed, a cap
    if tokens:
        body = [
            "batch = packing.pack(",
            "    samples,",
            f"    max_seq_length={max_seq_length},",
            f"    strategy={strategy!r},",
            f"    overflow={overflow!r},",
            *(f"    {name}={value!r}," for name, value in chosen.items()),
            *(["    share_prompt=True,"] if recipe.share_prompt else []),
            f"    pad_token_id={pad_token_id},",
            f"    {rule_options(rules)},",
            *([f"    tokenizer={origin.tokenizer!r},"] if origin.tokenizer is not None and origin.samples else []),
            ")",
        ]
        if _writes_a_file(origin):
            body += ['write_parquet(batch, "packed.parquet")  # one row per block', "print(batch.stats.summary())"]
        else:
            body += [
                "blocks, masks = batch.to_lists()",
                "for number, (ids, mask) in enumerate(zip(blocks, masks), start=1):",
                '    print(f"Block {number}: {ids} -> mask: {mask}")',
                "print(batch.stats.summary())",
            ]
    else:
        body = [
            f"plan = packing.plan(lengths, max_seq_length={max_seq_length}, strategy={strategy!r}, overflow={overflow!r}"
            + "".join(f", {name}={value!r}" for name, value in chosen.items())
            + ")",
            'print(plan.num_blocks, "blocks,", f"{plan.stats.efficiency:.2%} efficiency")',
        ]
    plain = [line for line in imports if line.startswith("import ")]
    names: dict[str, list[str]] = {}
    for line in imports:
        if line.startswith("from "):
            module, _, imported = line[len("from ") :].partition(" import ")
            names.setdefault(module, []).extend(imported.split(", "))
    named = [f"from {module} import {', '.join(sorted(set(items)))}" for module, items in names.items()]
    return "\n".join([*plain, "import packing", *named, "", *lines, "", *body]) + "\n"
