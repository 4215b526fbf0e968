"""Prefix trees (``packing.trees``): tokens and blocks of the tree layout against the rows unshared and padding,
the time to build blocks, masks and model inputs, and one packed block's log-probabilities against each row alone.

Two synthetic workloads, seeded, every length drawn log-uniform (no multi-turn preference or rollout set is stored
here; the shapes are chosen, not measured on a real set):

- **conversations**: 2, 3 or 4 turns (uniform); each turn a user message of 20 to 200 tokens and 1 to 4
  alternative assistant answers (uniform) of 50 to 500 tokens; the conversation goes on after the first answer,
  the others end there, so every leaf is a row: the path from the start to it, trained on its assistant turns
  (``{"input_ids", "loss_mask"}``). A row of ``k`` turns shares its first ``k - 1`` turns with its siblings.
- **GRPO groups**: a prompt of 256 to 1,024 tokens and 8 completions of 64 to 256 tokens, each completion a whole
  row with the prompt inside (``{"prompt", "completion"}``), as a GRPO trainer has them after generation.

Tree layout: one ``PrefixTree.from_rows`` per conversation or group (a conversation that stores more than ``L``
tokens is cut into groups of its rows, in order, each storing at most ``L``: ``tree_blocks`` keeps a tree whole),
``tree_blocks(trees, L)`` (first fit in input order), then ``packing.torch.tree_inputs(block, "sdpa",
dtype=torch.bfloat16)`` per block (ids, depths as positions, the ``(1, 1, T, T)`` additive mask). Unshared: every
row its full conversation (the shared turns repeated), ``packing.plan(lengths, L, strategy="bfd")`` and
``packing.torch.collate(rows, L)`` per block (``input_ids``, ``labels``, restarting ``position_ids``: the rows
flash-attention's varlen path takes, no mask). Padding: batches of 8 rows in input order padded to their longest.
Times per 1,000 rows are medians of ``--repeat`` runs, the two sides interleaved in the same run, with the load
average before and after. A sanity line: a tiny float64 Llama (``tests/helpers/tiny_models.py``) runs one packed
tree block and every row's summed and per-token log-probability is compared with the row run alone.

    python benchmarks/trees.py              # 120 conversations and 60 GRPO groups, L = 4096 and 8192, 3 runs
    python benchmarks/trees.py --quick      # 8 and 6, 1 run: checks that everything runs

Prints Markdown.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import packing  # noqa: E402
import packing.torch as pt  # noqa: E402
from benchmarks.forms import machine_lines  # noqa: E402
from packing.trees import PrefixTree, tree_arrays, tree_blocks  # noqa: E402

VOCAB = 32000
TURNS = (2, 4)
ANSWERS = (1, 4)
USER_TOKENS = (20, 200)
ASSISTANT_TOKENS = (50, 500)
PROMPT_TOKENS = (256, 1024)
COMPLETION_TOKENS = (64, 256)
GROUP = 8
PADDED_BATCH = 8
MASK_DTYPE = torch.bfloat16

Row = dict[str, Any]


def log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def conversation(rng: np.random.Generator, vocab: int, sizes: dict[str, tuple[int, int]]) -> list[Row]:
    """The rows of one branching conversation: every leaf's path, trained on its assistant turns."""
    ids: list[np.ndarray] = []
    mask: list[np.ndarray] = []
    rows = []
    turns = int(rng.integers(TURNS[0], TURNS[1] + 1))
    for turn in range(turns):
        user = rng.integers(3, vocab, log_uniform(rng, *sizes["user"]))
        answers = [rng.integers(3, vocab, log_uniform(rng, *sizes["assistant"]))
                   for _ in range(int(rng.integers(ANSWERS[0], ANSWERS[1] + 1)))]  # fmt: skip
        for number, answer in enumerate(answers):
            if number == 0 and turn < turns - 1:
                continue  # the conversation goes on after the first answer: not a leaf
            rows.append({
                "input_ids": np.concatenate([*ids, user, answer]),
                "loss_mask": np.concatenate([*mask, np.zeros(len(user), np.int8), np.ones(len(answer), np.int8)]),
            })  # fmt: skip
        ids += [user, answers[0]]
        mask += [np.zeros(len(user), np.int8), np.ones(len(answers[0]), np.int8)]
    return rows


def grpo_group(rng: np.random.Generator, vocab: int, sizes: dict[str, tuple[int, int]]) -> list[Row]:
    """A GRPO group's whole rows: one prompt, ``GROUP`` completions, the prompt inside each row."""
    prompt = rng.integers(3, vocab, log_uniform(rng, *sizes["prompt"]))
    return [{"prompt": prompt, "completion": rng.integers(3, vocab, log_uniform(rng, *sizes["completion"]))}
            for _ in range(GROUP)]  # fmt: skip


def ids_of(row: Row) -> np.ndarray:
    return row["input_ids"] if "input_ids" in row else np.concatenate([row["prompt"], row["completion"]])


def shared(a: np.ndarray, b: np.ndarray) -> int:
    common = min(len(a), len(b))
    different = np.flatnonzero(a[:common] != b[:common])
    return int(different[0]) if len(different) else common


def fitting(rows: list[Row], capacity: int) -> list[list[Row]]:
    """One tree's rows in order, cut into groups that each store at most ``capacity`` tokens (a row adds the
    tokens after its longest prefix shared with a row before it in the group)."""
    groups: list[list[Row]] = []
    stored = capacity + 1
    for row in rows:
        ids = ids_of(row)
        new = len(ids) - max((shared(ids, ids_of(other)) for other in groups[-1]), default=0) if groups else len(ids)
        if stored + new > capacity:
            groups.append([])
            stored, new = 0, len(ids)
        groups[-1].append(row)
        stored += new
    return groups


def build_trees(units: list[list[Row]], capacity: int) -> list[PrefixTree]:
    """The blocks of the tree layout: a tree per unit (cut where it stores more than ``capacity``), placed whole."""
    trees = [PrefixTree.from_rows(group) for rows in units for group in fitting(rows, capacity)]
    return tree_blocks(trees, capacity)


def tree_batches(units: list[list[Row]], capacity: int) -> list[dict[str, Any]]:
    """What the user waits for: trees, blocks, then every block's model inputs (the 4-D mask in bfloat16)."""
    return [pt.tree_inputs(block, "sdpa", dtype=MASK_DTYPE) for block in build_trees(units, capacity)]


def tree_batches_without_masks(units: list[list[Row]], capacity: int) -> list[dict[str, Any]]:
    """The same without the masks: trees, blocks, every block's ids and depths as tensors (what the mask adds)."""
    return [{name: torch.from_numpy(array) for name, array in tree_arrays(block).items()}
            for block in build_trees(units, capacity)]  # fmt: skip


def unshared_batches(rows: list[Row], capacity: int) -> list[dict[str, Any]]:
    """The rows unshared: plan whole rows with bfd, collate every block (positions restart per row)."""
    lengths = np.fromiter((len(ids_of(row)) for row in rows), np.int64, len(rows))
    layout = packing.plan(lengths, capacity, strategy="bfd")
    return [pt.collate([rows[p.sequence] for p in block], capacity) for block in layout.blocks()]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def tokens_and_blocks(name: str, units: list[list[Row]], capacity: int) -> tuple[list[list[str]], dict[str, Any]]:
    """One table row per layout: forward rows, tokens processed, fill, and tokens over the tree layout's."""
    rows = [row for unit in units for row in unit]
    lengths = [len(ids_of(row)) for row in rows]
    blocks = build_trees(units, capacity)
    stored = sum(block.size for block in blocks)
    whole = sum(PrefixTree.from_rows(unit).size for unit in units)  # each tree uncut: the trie's size
    unshared = packing.plan(lengths, capacity, strategy="bfd")
    groups = [lengths[i : i + PADDED_BATCH] for i in range(0, len(lengths), PADDED_BATCH)]
    padded = sum(len(g) * max(g) for g in groups)
    layouts = [
        ("prefix trees (`tree_blocks`)", len(blocks), stored, math.ceil(stored / capacity)),
        ("rows unshared, packed (bfd)", unshared.num_blocks, sum(lengths), math.ceil(sum(lengths) / capacity)),
        (f"rows padded to the longest of {PADDED_BATCH}", len(groups), padded, None),
    ]
    out = [
        [name, f"{capacity:,}", layout, f"{passes:,}", f"{tokens:,}",
         f"{bound:,}" if bound is not None else "—", f"{tokens / stored:.2f}×"]
        for layout, passes, tokens, bound in layouts
    ]  # fmt: skip
    facts = {"rows": len(rows), "stored": stored, "whole": whole, "unshared": sum(lengths), "padded": padded,
             "blocks": len(blocks), "largest": max(block.size for block in blocks)}  # fmt: skip
    return out, facts


def timed(
    kinds: dict[str, Callable[[], object]], warm: dict[str, Callable[[], object]], repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], tuple[float, float]]:
    for run in warm.values():
        run()  # warm up on a few trees (numba compiles on first use)
    taken: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    before = os.getloadavg()[0]
    for _ in range(repeat):
        for kind, run in kinds.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            taken[kind].append(time.perf_counter() - start)
            cpu[kind].append(time.process_time() - start_cpu)
    return taken, cpu, (before, os.getloadavg()[0])


def times(name: str, units: list[list[Row]], capacity: int, repeat: int) -> list[str]:
    """The tree layout (trees, blocks, inputs with masks) against the unshared packed rows, interleaved."""
    rows = [row for unit in units for row in unit]
    few = units[:4]
    kinds: dict[str, Callable[[list[list[Row]]], object]] = {
        "trees": lambda u: tree_batches(u, capacity),
        "no mask": lambda u: tree_batches_without_masks(u, capacity),
        "unshared": lambda u: unshared_batches([row for unit in u for row in unit], capacity),
    }
    taken, cpu, (before, after) = timed(
        {k: (lambda run=run: run(units)) for k, run in kinds.items()},
        {k: (lambda run=run: run(few)) for k, run in kinds.items()},
        repeat,
    )
    per = {kind: statistics.median(t) * 1e6 / len(rows) for kind, t in taken.items()}  # ms per 1,000 rows
    low = {kind: min(t) * 1e6 / len(rows) for kind, t in taken.items()}
    high = {kind: max(t) * 1e6 / len(rows) for kind, t in taken.items()}
    return [
        name, f"{capacity:,}",
        *(f"{per[k]:.0f} ms ({low[k]:.0f}–{high[k]:.0f})" for k in taken),
        f"{1 - per['no mask'] / per['trees']:.0%}", f"{per['trees'] / per['unshared']:.2f}×",
        f"{per['no mask'] / per['unshared']:.2f}×",
        " / ".join(f"{statistics.median(cpu[k]) * 1e6 / len(rows):.0f}" for k in taken) + " ms",
        f"{before:.2f} / {after:.2f}",
    ]  # fmt: skip


def mask_cost(capacity: int, facts: dict[str, Any]) -> str:
    per_block = capacity * capacity
    return (
        f"L = {capacity:,}: a full block's mask is T² = {per_block / 2**20:,.0f} Mi entries: "
        f"{per_block * 2 / 2**20:,.0f} MiB in bfloat16, {per_block * 4 / 2**20:,.0f} MiB in float32 (plus a "
        f"{per_block / 2**20:,.0f} MiB boolean while it is made), against {capacity * 16 / 2**10:,.0f} KiB of ids "
        f"and positions; the largest block here holds {facts['largest']:,} tokens"
    )


def sanity(seed: int) -> str:
    """One packed block of small conversation trees and a GRPO group through a tiny float64 Llama, every row's
    log-probabilities against the row alone."""
    from tests.helpers.tiny_models import VOCAB as TINY_VOCAB
    from tests.helpers.tiny_models import tiny_causal_lm

    model = tiny_causal_lm("llama", "sdpa")
    rng = np.random.default_rng(seed)
    small = {"user": (3, 12), "assistant": (4, 20), "prompt": (16, 32), "completion": (4, 10)}
    units = [conversation(rng, TINY_VOCAB, small) for _ in range(3)] + [grpo_group(rng, TINY_VOCAB, small)]
    rows = [row for unit in units for row in unit]
    blocks = tree_blocks([PrefixTree.from_rows(unit) for unit in units], 512)
    assert len(blocks) == 1, [block.size for block in blocks]
    worst_sum = worst_token = 0.0
    with torch.no_grad():
        logits = model(**pt.tree_inputs(blocks, model)).logits
        values = pt.completion_logps(logits, blocks, per_token=True)
        for number, row in enumerate(rows):
            ids = torch.from_numpy(ids_of(row))
            if "loss_mask" in row:
                trained = torch.from_numpy(row["loss_mask"]).bool()
            else:
                trained = torch.arange(len(ids)) >= len(row["prompt"])
            trained[0] = False
            alone = model(ids[None], use_cache=False).logits[0, :-1].log_softmax(-1)
            tokens = alone.gather(-1, ids[1:, None])[:, 0][trained[1:]]
            mine = values.tokens[values.rows == number]
            worst_token = max(worst_token, float((mine - tokens).abs().max()))
            worst_sum = max(worst_sum, abs(float(values.sums[number] - tokens.sum())))
    worst = max(worst_sum, worst_token)
    verdict = "equal within 1e-6" if worst <= 1e-6 else "NOT equal within 1e-6"
    return (
        f"tiny Llama (float64, 2 layers, SDPA): one packed tree block of {len(rows)} rows (3 conversations of 2–4 "
        f"turns and a GRPO group of {GROUP}; {blocks[0].size} tokens stored for {blocks[0].unshared_size} unshared); "
        f"largest |packed − alone| {worst_sum:.1e} over the rows' summed log-probabilities, {worst_token:.1e} over "
        f"their per-token ones: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="8 conversations, 6 groups, one run")
    parser.add_argument("--conversations", type=int, default=120)
    parser.add_argument("--groups", type=int, default=60, help="GRPO groups of 8 completions")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192], help="max_seq_length values")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    conversations, groups, repeat = (8, 6, 1) if args.quick else (args.conversations, args.groups, args.repeat)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    sizes = {"user": USER_TOKENS, "assistant": ASSISTANT_TOKENS, "prompt": PROMPT_TOKENS,
             "completion": COMPLETION_TOKENS}  # fmt: skip
    workloads = {
        "conversations": [conversation(rng, VOCAB, sizes) for _ in range(conversations)],
        "GRPO groups": [grpo_group(rng, VOCAB, sizes) for _ in range(groups)],
    }
    print("\n".join(machine_lines()))
    for name, units in workloads.items():
        lengths = [len(ids_of(row)) for unit in units for row in unit]
        print(
            f"- workload {name}: {len(units):,} synthetic trees (seed {args.seed}), {len(lengths):,} rows, "
            f"{sum(lengths):,} tokens unshared; row length median {int(np.median(lengths)):,}, max {max(lengths):,}"
        )
    header = ["workload", "L", "layout", "forward rows", "tokens processed", "lower bound (blocks)",
              "tokens / tree layout"]  # fmt: skip
    body, notes, costs = [], [], []
    for name, units in workloads.items():
        for capacity in args.lengths:
            lines, facts = tokens_and_blocks(name, units, capacity)
            body += lines
            notes.append(
                f"{name}, L = {capacity:,}: {facts['stored']:,} tokens stored ({facts['whole']:,} for the uncut "
                f"trees), {facts['unshared']:,} unshared, {facts['padded']:,} padded: the trees store "
                f"{facts['unshared'] / facts['stored']:.2f}× fewer tokens than the rows unshared "
                f"({1 - facts['stored'] / facts['unshared']:.0%} saved), {facts['padded'] / facts['stored']:.2f}× "
                f"fewer than padding; {facts['blocks']:,} blocks for {facts['rows']:,} rows"
            )
            if name == "conversations":
                costs.append(mask_cost(capacity, facts))
    print("\n" + table(header, body))
    print("\n" + "\n".join(f"- {note}" for note in notes))
    print("\n" + "\n".join(f"- mask memory, {cost}" for cost in costs) + "\n")
    header = ["workload", "L", "prefix trees (from_rows + tree_blocks + tree_inputs), per 1,000 rows",
              "the same without the masks (tree_arrays)", "rows unshared (plan + collate)", "share of the masks",
              "trees / unshared", "trees without masks / unshared",
              "CPU time per 1,000 rows (trees / without masks / unshared)", "load average before / after"]  # fmt: skip
    timing = [times(name, units, capacity, repeat) for name, units in workloads.items() for capacity in args.lengths]
    print(table(header, timing))
    print(f"\nmedians (min–max) of {repeat} interleaved runs; one torch thread; masks in bfloat16\n")
    print(f"- sanity: {sanity(args.seed)}")


if __name__ == "__main__":
    main()
