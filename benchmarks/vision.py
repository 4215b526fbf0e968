"""Documents with images (Qwen2-VL family): tokens and blocks of packing against padding, and the time to pack.

The workload is synthetic, shaped like a VLM SFT set as Qwen2-VL's processor makes it with its recommended
``min_pixels = 256·28·28`` and ``max_pixels = 1280·28·28`` (every image 256 to 1,280 tokens), seeded:

- each document has 0, 1, 2 or 3 images with probabilities 0.15, 0.65, 0.15, 0.05 (mostly single-image
  instruction data, some text-only and multi-image samples);
- an image's grid is ``[1, h, w]`` with spatial merge 2, so it takes ``h·w/4`` tokens: a token count drawn
  log-uniform in [256, 1280] and an aspect ratio log-uniform in [1/2, 2] give the merged grid ``(h/2, w/2)``
  (drawn again until ``h·w/4`` is in [256, 1280]); in the row it is ``<vision_start>``, ``h·w/4`` image tokens,
  ``<vision_end>`` (Qwen2-VL's ids);
- text 50 to 500 tokens a document, log-uniform, cut at random points around the images;
- ``pixel_values`` has one row per patch (``h·w`` rows an image) of ``--patch-dim`` float32 values (default 8;
  the real model has 1,176) so that memory stays small: the joins cost what they cost per row, not per byte.

Packed: ``packing.plan(lengths, L, strategy="bfd")`` over whole documents (a document is never split; an over-long
one takes a block alone and ``collate`` truncates it before the first image it would cut), then per block
``packing.torch.collate(rows, L, vision=config)``, every column made: ``input_ids``, ``labels``, the ``(4, 1, T)``
``position_ids``, ``mm_token_type_ids``, ``pixel_values`` joined and ``image_grid_thw``. Padding: each document
(kept as ``collate`` keeps it) padded to ``L``, or to the longest of a batch of ``--batch`` documents in input
order; the padded batch is what a padded VLM collator builds (``input_ids``, ``attention_mask``, ``labels`` with
the image placeholders -100, ``pixel_values`` joined, ``image_grid_thw``; the model computes its mRoPE positions in the
forward). Times per 1,000 documents are medians of ``--repeat`` runs, packing and the padded batches interleaved
in the same run, with the load average before and after. A sanity line: a tiny random Qwen2-VL's logits of one
packed block's documents against each document alone.

    python benchmarks/vision.py                 # 4,000 documents, L = 4096 and 8192, 5 interleaved runs
    python benchmarks/vision.py --quick         # 200 documents, 1 run: checks that everything runs

Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
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
from packing.errors import TokensLost  # noqa: E402
from packing.vision import VisionConfig  # noqa: E402

IMAGE, VIDEO, START, END = 151655, 151656, 151652, 151653  # Qwen2-VL's image, video, vision start and end ids
TEXT_IDS = 151643  # text ids are drawn below the special tokens
CONFIG = VisionConfig(IMAGE, VIDEO, START, spatial_merge_size=2)
IMAGES_PER_DOCUMENT = (0.15, 0.65, 0.15, 0.05)  # P(0), P(1), P(2), P(3 images)
IMAGE_TOKENS = (256, 1280)
TEXT_TOKENS = (50, 500)


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.exp(rng.uniform(np.log(low), np.log(high))))


def image_grid(rng: np.random.Generator) -> list[int]:
    """``[1, h, w]`` with ``h·w/4`` tokens in ``IMAGE_TOKENS``: tokens and aspect ratio log-uniform."""
    while True:
        tokens, ratio = log_uniform(rng, *IMAGE_TOKENS), log_uniform(rng, 0.5, 2.0)
        rows = max(1, round(np.sqrt(tokens * ratio)))
        cols = max(1, round(tokens / rows))
        if IMAGE_TOKENS[0] <= rows * cols <= IMAGE_TOKENS[1]:
            return [1, 2 * rows, 2 * cols]


def documents(count: int, patch_dim: int, seed: int) -> list[dict[str, Any]]:
    """``count`` documents in the processor's row form (numpy ``input_ids``, ``image_grid_thw``, ``pixel_values``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for images in rng.choice(len(IMAGES_PER_DOCUMENT), count, p=IMAGES_PER_DOCUMENT).tolist():
        text = round(log_uniform(rng, *TEXT_TOKENS))
        cuts = np.sort(rng.integers(0, text + 1, images)).tolist()
        ids = rng.integers(0, TEXT_IDS, text)
        grids = [image_grid(rng) for _ in range(images)]
        parts, at = [], 0
        for cut, (_, h, w) in zip(cuts, grids, strict=True):
            parts += [ids[at:cut], np.array([START]), np.full(h * w // 4, IMAGE), np.array([END])]
            at = cut
        row: dict[str, Any] = {"input_ids": np.concatenate([*parts, ids[at:]]).astype(np.int64)}
        if images:
            patches = sum(h * w for _, h, w in grids)
            row["image_grid_thw"] = grids
            row["pixel_values"] = rng.standard_normal((patches, patch_dim), dtype=np.float32)
        rows.append(row)
    return rows


def pack_all(rows: list[dict[str, Any]], capacity: int) -> list[dict[str, Any]]:
    """What the user waits for: plan whole documents, then collate every block with every column."""
    lengths = np.fromiter((len(row["input_ids"]) for row in rows), np.int64, len(rows))
    layout = packing.plan(lengths, capacity, strategy="bfd")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokensLost)  # the over-long documents' cuts, counted below
        return [pt.collate([rows[p.sequence] for p in block], capacity, vision=CONFIG) for block in layout.blocks()]


def kept(rows: list[dict[str, Any]], capacity: int) -> list[tuple[int, int, int]]:
    """Each document as ``collate`` keeps it in ``capacity`` tokens: (tokens, images, pixel rows)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokensLost)
        for row in rows:
            if len(row["input_ids"]) <= capacity:
                grids = row.get("image_grid_thw", [])
                out.append((len(row["input_ids"]), len(grids), sum(h * w for _, h, w in grids)))
            else:  # over long: cut before the first image it would cut
                batch = pt.collate([row], capacity, vision=CONFIG, return_tensors="np")
                images = len(batch.get("image_grid_thw", []))
                out.append((batch["input_ids"].shape[1], images, len(batch.get("pixel_values", []))))
    return out


def padded_batches(
    rows: list[dict[str, Any]], keep: list[tuple[int, int, int]], batch: int, capacity: int | None
) -> list[dict[str, torch.Tensor]]:
    """The padded baseline: batches of ``batch`` documents, each padded to ``capacity`` (or the batch's longest)."""
    out = []
    for first in range(0, len(rows), batch):
        group, sizes = rows[first : first + batch], keep[first : first + batch]
        width = capacity or max(n for n, _, _ in sizes)
        ids = np.zeros((len(group), width), dtype=np.int64)
        mask = np.zeros((len(group), width), dtype=np.int64)
        pixels, grids = [], []
        for i, (row, (n, images, patches)) in enumerate(zip(group, sizes, strict=True)):
            ids[i, :n] = row["input_ids"][:n]
            mask[i, :n] = 1
            if images:
                pixels.append(row["pixel_values"][:patches])
                grids += row["image_grid_thw"][:images]
        labels = np.where((mask == 0) | (ids == IMAGE), -100, ids)  # placeholders untrained, as collate
        columns = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if pixels:
            columns |= {"pixel_values": np.concatenate(pixels), "image_grid_thw": np.asarray(grids, dtype=np.int64)}
        out.append({name: torch.from_numpy(value) for name, value in columns.items()})
    return out


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def spread(values: list[int]) -> str:
    return f"{statistics.mean(values):,.0f} / {max(values):,}" if values else "0 / 0"


def tokens_and_blocks(rows: list[dict[str, Any]], capacity: int, batch: int) -> tuple[list[list[str]], str]:
    """One table row per way: rows of at most ``capacity`` tokens, forward passes (a packed block alone, a padded
    batch of ``batch`` rows), tokens processed, padding, vision patches a forward pass, and tokens over packing's."""
    blocks = pack_all(rows, capacity)
    keep = kept(rows, capacity)
    real = sum(n for n, _, _ in keep)
    packed = sum(int(b["input_ids"].shape[1]) for b in blocks)
    assert packed == real, (packed, real)
    for b in blocks:  # every column is there, the positions as the model takes them
        assert b["position_ids"].shape == (4, 1, b["input_ids"].shape[1]) and "mm_token_type_ids" in b
    patches = [len(b["pixel_values"]) if "pixel_values" in b else 0 for b in blocks]
    groups = [keep[i : i + batch] for i in range(0, len(keep), batch)]
    batch_patches = [sum(p for _, _, p in g) for g in groups]
    longest = sum(len(g) * max(n for n, _, _ in g) for g in groups)
    ways = [
        ("packed (bfd), rows as collate returns them", len(blocks), len(blocks), packed, patches),
        ("packed (bfd), each block padded to L", len(blocks), len(blocks), len(blocks) * capacity, patches),
        (f"padded to the longest of {batch} documents", len(rows), len(groups), longest, batch_patches),
        (f"padded to L, batches of {batch}", len(rows), len(groups), len(rows) * capacity, batch_patches),
    ]
    out = [
        [f"{capacity:,}", name, f"{count:,}", f"{passes:,}", f"{tokens:,}", f"{1 - real / tokens:.1%}", spread(p),
         f"{tokens / packed:.2f}×"]
        for name, count, passes, tokens, p in ways
    ]  # fmt: skip
    cut = sum(len(r["input_ids"]) for r in rows) - real
    over = sum(len(r["input_ids"]) > capacity for r in rows)
    images_cut = sum(len(r.get("image_grid_thw", [])) for r in rows) - sum(i for _, i, _ in keep)
    note = (
        f"L = {capacity:,}: {over:,} documents over L truncated before the first image they would cut "
        f"({cut:,} tokens and {images_cut:,} images left out, the same on every side); {real:,} tokens kept"
    )
    return out, note


def times(rows: list[dict[str, Any]], capacity: int, batch: int, repeat: int) -> list[str]:
    """Packing (plan + collate of every block) against building the padded batches, interleaved."""
    keep = kept(rows, capacity)
    kinds = {
        "pack": lambda: pack_all(rows, capacity),
        "longest": lambda: padded_batches(rows, keep, batch, None),
        "L": lambda: padded_batches(rows, keep, batch, capacity),
    }
    for run in kinds.values():
        run()  # warm up (numba compiles on first use)
    taken: dict[str, list[float]] = {kind: [] for kind in kinds}
    before = os.getloadavg()
    for _ in range(repeat):
        for kind, run in kinds.items():
            start = time.perf_counter()
            run()
            taken[kind].append(time.perf_counter() - start)
    after = os.getloadavg()
    per = {kind: statistics.median(t) * 1000 / len(rows) * 1000 for kind, t in taken.items()}  # ms a 1,000
    low = {kind: min(t) * 1e6 / len(rows) for kind, t in taken.items()}
    high = {kind: max(t) * 1e6 / len(rows) for kind, t in taken.items()}
    return [
        f"{capacity:,}",
        *(f"{per[k]:.0f} ms ({low[k]:.0f}–{high[k]:.0f})" for k in kinds),
        f"{per['pack'] / per['longest']:.2f}×",
        f"{per['pack'] / per['L']:.2f}×",
        f"{before[0]:.2f} / {after[0]:.2f}",
    ]


def sanity(seed: int) -> str:
    """One packed block of random documents through a tiny random Qwen2-VL against each document alone."""
    from tests.helpers.tiny_vlms import random_document, tiny_vlm

    model = tiny_vlm("qwen2_vl")
    rng = np.random.default_rng(seed)
    rows = [random_document(rng, int(rng.integers(0, 4)), text=(5, 40)) for _ in range(12)]
    capacity = 256
    layout = packing.plan([len(r["input_ids"]) for r in rows], capacity, strategy="bfd")
    block = [rows[p.sequence] for p in max(layout.blocks(), key=len)]
    worst = 0.0
    with torch.no_grad():
        logits = model(**pt.collate(block, capacity, vision=model.config), use_cache=False).logits[0]
        at = 0
        for row in block:
            alone = model(**pt.collate([row], capacity, vision=model.config), use_cache=False).logits[0]
            worst = max(worst, float((logits[at : at + len(alone)] - alone).abs().max()))
            at += len(alone)
    images = sum(len(r.get("image_grid_thw", [])) for r in block)
    verdict = "equal within 1e-5" if worst <= 1e-5 else "NOT equal within 1e-5"
    return (
        f"tiny random Qwen2-VL (float64, 2 layers): one packed block of {len(block)} documents ({images} images, "
        f"{at} tokens, L = {capacity}); largest |packed − alone| over their logits {worst:.1e}: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 documents, one run: checks that it runs")
    parser.add_argument("--documents", type=int, default=4000)
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192], help="max_seq_length values")
    parser.add_argument("--batch", type=int, default=8, help="documents per padded batch")
    parser.add_argument("--patch-dim", type=int, default=8, help="float32 values per pixel_values row")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    count, repeat = (200, 1) if args.quick else (args.documents, args.repeat)
    torch.set_num_threads(1)
    rows = documents(count, args.patch_dim, args.seed)
    lengths = [len(r["input_ids"]) for r in rows]
    images = [len(r.get("image_grid_thw", [])) for r in rows]
    print("\n".join(machine_lines()))
    print(
        f"- workload: {count:,} synthetic documents (seed {args.seed}), {sum(lengths):,} tokens, {sum(images):,} "
        f"images, {sum(len(r.get('pixel_values', [])) for r in rows):,} pixel rows of {args.patch_dim} float32; "
        f"document length median {int(np.median(lengths)):,}, max {max(lengths):,}\n"
    )
    header = ["L", "way", "rows", "forward passes", "tokens processed", "padding",
              "vision patches a forward (mean / max)", "tokens / packed"]  # fmt: skip
    body, notes = [], []
    for capacity in args.lengths:
        lines, note = tokens_and_blocks(rows, capacity, args.batch)
        body += lines
        notes.append(note)
    print(table(header, body))
    print("\n" + "\n".join(f"- {note}" for note in notes) + "\n")
    header = ["L", "pack (plan + collate), per 1,000 documents", f"padded batches of {args.batch}, to the longest",
              f"padded batches of {args.batch}, to L", "pack / to longest", "pack / to L",
              "load average before / after"]  # fmt: skip
    print(table(header, [times(rows, capacity, args.batch, repeat) for capacity in args.lengths]))
    print(f"\nmedians (min–max) of {repeat} interleaved runs over the {count:,} documents; one torch thread\n")
    print(f"- sanity: {sanity(args.seed)}")


if __name__ == "__main__":
    main()
