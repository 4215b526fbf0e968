"""Train a tiny, randomly initialised Llama on packed blocks with DistributedDataParallel, on CPU.

Two processes (gloo, localhost) share one ``PackingSampler``: every step, each rank gets one packed block of
samples, the blocks of a step having similar compute cost; ``sampler.collate`` turns a block into transformers'
padding-free batch (no ``attention_mask``; ``position_ids`` restart at every document). Nothing is downloaded:
the data are synthetic prompt/completion pairs (arithmetic progressions a model can learn in a few steps).

    python examples/train_ddp.py                  # 2 processes, 3 epochs
    python examples/train_ddp.py --nproc 1 --epochs 1

Every rank prints nothing; rank 0 prints one line per step (``step 3 loss 4.1234``, the loss averaged over
ranks) and the sampler's imbalance per epoch.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from packing.torch import PackingSampler

VOCAB = 64


def synthetic_samples(count: int, seed: int = 0) -> list[dict[str, list[int]]]:
    """Prompt/completion pairs: a prompt of 3 tokens of an arithmetic progression mod VOCAB, the completion
    continues it. Lengths are skewed (log-normal), so packing has work to do."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(24), 0.7, count).astype(int), 5, 200)
    samples = []
    for length in lengths.tolist():
        start, step = int(rng.integers(VOCAB)), int(rng.integers(1, 4))
        tokens = ((start + step * np.arange(length)) % VOCAB).tolist()
        samples.append({"prompt": tokens[:3], "completion": tokens[3:]})
    return samples


def train(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    # the rendezvous store lives in the launching process (see main), so no port can be taken in between
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    from transformers import LlamaConfig, LlamaForCausalLM  # here: the launching process does not need it

    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.max_seq_length,
    )
    config._attn_implementation = "sdpa"
    model = DistributedDataParallel(LlamaForCausalLM(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    samples = synthetic_samples(args.samples)
    lengths = [len(s["prompt"]) + len(s["completion"]) for s in samples]
    sampler = PackingSampler(lengths, args.max_seq_length, seed=0)  # num_replicas and rank from torch.distributed
    loader: DataLoader[Any] = DataLoader(samples, batch_sampler=sampler, collate_fn=sampler.collate)  # type: ignore[arg-type]

    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            # the step's token mean over every rank: a rank whose step is empty (fewer samples than ranks) adds 0,
            # where the model's own mean over no target would be NaN; DDP averages gradients, hence × world_size
            targets = (batch["labels"] != -100).sum()
            dist.all_reduce(targets)
            loss = model(**batch, use_cache=False, num_items_in_batch=targets).loss * world_size
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                print(f"step {step} loss {mean.item() / world_size:.4f}", flush=True)
            step += 1
        if rank == 0:
            print(f"epoch {epoch}: {len(sampler)} steps, imbalance {sampler.imbalance:.4%}", flush=True)
    dist.barrier()  # no rank tears gloo down while the other still has work in flight
    dist.destroy_process_group()
    del store
    # training is done and reported; leave without the interpreter's teardown, where torch's gloo threads
    # sometimes abort the process ("terminate called without an active exception") after a clean run
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # localhost, a free port
    mp.spawn(train, args=(args.nproc, store.port, args), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
