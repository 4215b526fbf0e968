"""Preference pairs and completion groups: what storing each prompt once (``share_prompt``) saves, and the forward
time of packed batches against padded ones.

1. Tokens and blocks, from lengths alone (``Units.lengths`` and ``packing.plan``, bfd): pairs shaped like
   UltraFeedback (prompts log-normal with median 150 tokens, each answer median 250) and GRPO groups of k = 8
   (prompts median 150, answers median 250, as the issue's shapes), in blocks of 4,096 (and 2,048) tokens, each
   prompt stored once per completion (TRL's and OpenRLHF's layout) against once (``share_prompt=True``).
2. Forward time on CPU of a small transformers Llama (float32, SDPA, 4 layers of width 512) over the same pairs, a
   step of ``--pairs`` pairs at a time, three ways: TRL's padded batch (chosen and rejected rows, each prompt +
   completion, padded to the longest, a 2-D attention mask), the packed duplicated layout (one row, position ids)
   and the packed shared layout (one row, the 4-D mask). Medians of ``--repeat`` interleaved runs (the three in
   turn), with the load average before and after; beside them the query-key pairs of the causal attention each
   batch needs (what a kernel that skips masked blocks, flash-attention's varlen or FlexAttention, computes) and
   the pairs SDPA computes with a dense mask on CPU (every row whole: a packed row of T tokens costs T²).

    python benchmarks/preference.py             # 20,000 pairs and 5,000 groups; 12 timed steps
    python benchmarks/preference.py --quick     # seconds: checks that everything runs

Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import packing  # noqa: E402
from packing.core._pairs_groups import Units  # noqa: E402


def lognormal(rng: np.random.Generator, median: float, sigma: float, count: int, cap: int) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(median), sigma, count), 1, cap).astype(np.int64)


def unit_shapes(count: int, k: int, seed: int) -> Units:
    """``count`` units of ``k`` completions: prompts median 150 (sigma 0.8), answers median 250 (sigma 0.7)."""
    rng = np.random.default_rng(seed)
    prompts = lognormal(rng, 150, 0.8, count, 1024)
    answers = lognormal(rng, 250, 0.7, count * k, 1024)
    kinds = ["pair" if k == 2 else "group"] * count
    return Units.of(prompts, answers.reshape(count, k).tolist(), kinds=kinds)  # type: ignore[arg-type]


def savings(name: str, units: Units, capacity: int) -> list[str]:
    """Tokens (every unit whole), blocks (bfd over the units fitted as ``pack`` fits them: ``truncate`` cuts the
    completions of a unit over a block) and the tokens that fitting cut, in each layout."""
    row = [name, f"{capacity:,}"]
    results = {}
    for shared in (False, True):
        laid = units.relaid(shared)[1]
        fit = laid.fit_lengths(capacity)
        fitted = laid.with_completion_lengths(fit.completion_lengths).lengths()
        layout = packing.plan(fitted, capacity, strategy="bfd", overflow="drop")
        cut = int(fit.tokens_cut.sum()) + int(fitted[fitted > capacity].sum())
        results[shared] = (int(laid.lengths().sum()), layout.num_blocks, cut)
    (tokens, blocks, cut), (tokens_s, blocks_s, cut_s) = results[False], results[True]
    row += [
        f"{tokens:,}",
        f"{tokens_s:,}",
        f"{1 - tokens_s / tokens:.1%}",
        f"{blocks:,}",
        f"{blocks_s:,}",
        f"{1 - blocks_s / blocks:.1%}",
        f"{cut:,} / {cut_s:,}",
    ]
    return row


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def forward_times(pairs: int, steps: int, repeat: int, seed: int) -> tuple[list[list[str]], str]:
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(2)
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=8, max_position_embeddings=16384,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).eval()
    import packing.torch as pt

    rng = np.random.default_rng(seed)
    shapes = unit_shapes(pairs * steps, 2, seed)
    batches = []
    for step in range(steps):
        rows = []
        for unit in range(step * pairs, (step + 1) * pairs):
            prompt = int(shapes.prompt_lengths[unit])
            chosen, rejected = (int(n) for n in shapes.completion_lengths[2 * unit : 2 * unit + 2])
            rows.append(
                {
                    "prompt": rng.integers(3, 512, prompt).tolist(),
                    "chosen": rng.integers(3, 512, chosen).tolist(),
                    "rejected": rng.integers(3, 512, rejected).tolist(),
                }
            )
        sequences = [r["prompt"] + r[c] for c in ("chosen", "rejected") for r in rows]
        longest = max(map(len, sequences))
        ids = torch.zeros(len(sequences), longest, dtype=torch.long)
        mask = torch.zeros(len(sequences), longest, dtype=torch.long)
        for i, seq in enumerate(sequences):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
        batches.append(
            {"padded": (ids, mask), "duplicated": pt.collate(rows), "shared": pt.collate(rows, share_prompt=True)}
        )

    def run(kind: str, batch: dict[str, object]) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            if kind == "padded":
                ids, mask = batch["padded"]  # type: ignore[misc]
                model(input_ids=ids, attention_mask=mask, use_cache=False)
            else:
                b = batch[kind]
                extra = {"attention_mask": b["attention_mask"]} if kind == "shared" else {}  # type: ignore[index]
                model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False, **extra)  # type: ignore[index]
        return time.perf_counter() - start

    kinds = ("padded", "duplicated", "shared")
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    before = os.getloadavg()[0]
    run("padded", batches[0])  # warm up
    for _ in range(repeat):
        for batch in batches:
            for kind in kinds:  # interleaved: the three see the same load
                times[kind].append(run(kind, batch))
    after = os.getloadavg()[0]
    attention = {kind: 0 for kind in kinds}  # query-key pairs a causal kernel that skips masked blocks computes
    dense = {kind: 0 for kind in kinds}  # the pairs a dense mask makes SDPA compute: every row, whole
    for batch in batches:
        ids, mask = batch["padded"]  # type: ignore[misc]
        lengths = mask.sum(1).tolist()
        attention["padded"] += sum(n * (n + 1) // 2 for n in lengths)
        dense["padded"] += ids.shape[0] * ids.shape[1] ** 2
        for kind in ("duplicated", "shared"):
            allowed = pt.attention_mask(batch[kind]) == 0  # type: ignore[index]
            attention[kind] += int(allowed.sum())
            dense[kind] += int(allowed.shape[-1]) ** 2
    tokens = {
        "padded": sum(int(b["padded"][0].numel()) for b in batches),  # type: ignore[index]
        "duplicated": sum(int(b["duplicated"]["input_ids"].numel()) for b in batches),  # type: ignore[index]
        "shared": sum(int(b["shared"]["input_ids"].numel()) for b in batches),  # type: ignore[index]
    }
    base = statistics.median(times["padded"])
    rows = [
        [
            kind,
            f"{tokens[kind] // steps:,}",
            f"{attention[kind] // steps / 1e6:.2f} M",
            f"{dense[kind] // steps / 1e6:.2f} M",
            f"{statistics.median(times[kind]) * 1000:.0f} ms",
            f"{base / statistics.median(times[kind]):.2f}×",
        ]
        for kind in kinds
    ]
    return rows, f"load average {before:.2f} before, {after:.2f} after"


def main() -> None:
    parser = argparse.ArgumentParser(description="share_prompt: tokens, blocks and forward time")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pairs", type=int, default=4, help="pairs per timed step")
    parser.add_argument("--steps", type=int, default=12, help="timed steps (batches)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    count = 2_000 if args.quick else 20_000
    pairs, groups = unit_shapes(count, 2, 0), unit_shapes(count // 4, 8, 1)
    header = [
        "units",
        "block",
        "tokens: prompt per completion",
        "tokens: prompt once",
        "tokens saved",
        "blocks: per completion",
        "blocks: once",
        "blocks saved",
        "tokens cut to fit a block",
    ]
    rows = [
        savings(f"{count:,} pairs (UltraFeedback-shaped)", pairs, 4096),
        savings("same", pairs, 2048),
        savings(f"{count // 4:,} groups of 8 (GRPO-shaped)", groups, 4096),
        savings("same", groups, 8192),
        savings("same", groups, 16384),
    ]
    print(table(header, rows))
    print()
    steps = 2 if args.quick else args.steps
    repeat = 1 if args.quick else args.repeat
    forward, load = forward_times(args.pairs if not args.quick else 2, steps, repeat, 7)
    header = ["batch", "tokens a step", "attention pairs a step", "dense-mask pairs", "forward (median)", "speed"]
    print(table(header, forward))
    print(f"\n{load}; {steps} steps of {args.pairs if not args.quick else 2} pairs, {repeat} interleaved repeats")


if __name__ == "__main__":
    main()
