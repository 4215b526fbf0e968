"""Train a tiny Llama on packed blocks with DistributedDataParallel, checkpoint as it goes, and resume after a kill,
on the same or another number of processes, training every sample exactly once per epoch.

Each step, every rank trains one packed block of ``PackingSampler``; every ``--checkpoint-every`` steps rank 0
writes one checkpoint (atomically: a kill never leaves half a file): the model, the optimizer, the sampler's
``state_dict()`` (the epoch's global progress, the same on every rank) and the sample ids consumed so far. Started
again with ``--resume``, every rank loads it, whatever their number: the sampler continues the uninterrupted run
exactly on as many ranks, or packs the samples the epoch has not consumed anew for the new ranks. Steps trained
after the last checkpoint are lost with the kill and trained again, as their weights were.

    python examples/train_resumable.py --checkpoint /tmp/run.pt              # 2 processes (gloo, CPU)
    # kill it (Ctrl-C, SIGKILL) at any step, then go on with 3 processes, or 1:
    python examples/train_resumable.py --checkpoint /tmp/run.pt --resume --nproc 3

Rank 0 prints ``step <n> epoch <e> ranks <r> loss <x>`` per step, ``checkpoint <n>`` per checkpoint written and
``done <epochs> epochs: <samples> samples trained once each`` at the end, after checking that every epoch consumed
every sample exactly once. ``--ids FILE`` writes the consumed ids of every epoch as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ddp import VOCAB, synthetic_samples  # the same data and model shape as the DDP example

from packing.torch import PackingSampler


def save(checkpoint: Path, state: dict[str, Any]) -> None:
    """Write ``state`` atomically: a kill leaves the previous checkpoint or this one, never a part."""
    temporary = checkpoint.with_name(checkpoint.name + ".tmp")
    torch.save(state, temporary)
    os.replace(temporary, checkpoint)


def train(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=args.max_seq_length,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    samples = synthetic_samples(args.samples)
    lengths = [len(s["prompt"]) + len(s["completion"]) for s in samples]
    sampler = PackingSampler(lengths, args.max_seq_length, seed=args.seed)  # ranks from torch.distributed
    checkpoint = Path(args.checkpoint)
    consumed: dict[int, list[int]] = {}
    step = 0
    if args.resume and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state_dict(saved["sampler"])  # any number of ranks: the rest of the epoch, each sample once
        consumed, step = saved["consumed"], saved["step"]
    model = DistributedDataParallel(model)
    for epoch in range(sampler.epoch, args.epochs):
        sampler.set_epoch(epoch)  # kept as loaded for the epoch resumed; a new plan for the next ones
        for items in sampler:
            batch = sampler.collate([samples[i] for i in items])
            # the step's token mean over every rank: a rank whose step is empty (fewer samples left than ranks)
            # adds 0, where the model's own mean over no target would be NaN; DDP averages, hence × world_size
            targets = (batch["labels"] != -100).sum()
            dist.all_reduce(targets)
            loss = model(**batch, use_cache=False, num_items_in_batch=targets).loss * world_size
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            every: list[Any] = [None] * world_size
            dist.all_gather_object(every, [int(i) for i in items])
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                consumed.setdefault(epoch, []).extend(i for ids in every for i in ids)
                print(f"step {step} epoch {epoch} ranks {world_size} loss {mean.item() / world_size:.4f}", flush=True)
                if step % args.checkpoint_every == 0 or sampler.state_dict()["step"] == sampler.schedule.num_steps:
                    state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
                    save(checkpoint, {**state, "sampler": sampler.state_dict(), "consumed": consumed, "step": step})
                    print(f"checkpoint {step}", flush=True)
            dist.barrier()  # no rank runs ahead of the checkpoint
    if rank == 0:
        for epoch in range(args.epochs):
            ids = sorted(consumed.get(epoch, []))
            if ids != list(range(len(samples))):
                print(f"epoch {epoch}: {len(ids)} ids, {len(set(ids))} distinct, not every sample once", flush=True)
                os._exit(1)
        if args.ids:
            Path(args.ids).write_text(json.dumps({str(e): ids for e, ids in consumed.items()}))
        print(f"done {args.epochs} epochs: {len(samples)} samples trained once each", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    del store
    sys.stdout.flush()
    os._exit(0)  # as in train_ddp.py: skip the interpreter's teardown, where gloo's threads may abort


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="the checkpoint file (written as training goes)")
    parser.add_argument("--resume", action="store_true", help="go on from the checkpoint, if there is one")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--checkpoint-every", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--ids", help="write the ids consumed in every epoch to this JSON file at the end")
    args = parser.parse_args()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    mp.spawn(train, args=(args.nproc, store.port, args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
