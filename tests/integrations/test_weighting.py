"""Loss weighting under packing: a real transformers model's packed loss and gradients equal the unpacked objective,
computed document by document, for every mode: one batch, micro-batches with accumulation, and two ranks (gloo), or
three ranks with fewer documents (a rank's empty step trains nothing)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.core
import packing.layouts
from packing.weighting import (
    LOSS_MODES,
    MODE_ARITHMETIC,
    LossTotals,
    effective_weights,
    per_token_weight,
    token_weights,
    trained_tokens,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import packing.torch  # noqa: E402
from packing.torch import PackingSampler, collate, weighted_loss  # noqa: E402

TOLERANCE = 1e-5
"""Relative to the value's magnitude when above 1 (float32 carries about 7 digits: ``sequence_sum`` is ~100)."""
VOCAB = 50
RANK_POLLS = 240
"""Seconds the two-rank test waits for its ranks before failing (they take a few seconds on an idle machine)."""


# ---------------------------------------------------------------- the arithmetic, brute force


def objective(per_doc_losses: list[list[float]], mode: str) -> float:
    """The objective from each document's per-token losses (trained tokens only), written out plainly."""
    docs = [losses for losses in per_doc_losses if losses]
    if mode == "token":
        return sum(sum(d) for d in docs) / sum(len(d) for d in docs)
    if mode == "sequence":
        return sum(sum(d) / len(d) for d in docs) / len(docs)
    if mode == "sequence_sum":
        return sum(sum(d) for d in docs) / len(docs)
    roots = sum(math.sqrt(len(d)) for d in docs)
    return sum(math.sqrt(len(d)) * sum(d) / len(d) for d in docs) / roots


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=8).filter(any),
    mode=st.sampled_from(LOSS_MODES),
    seed=st.integers(0, 100),
)
def test_token_weights_give_the_objective(counts: list[int], mode: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    losses = [rng.random(n).tolist() for n in counts]
    # tokens of the documents shuffled together, with untrained tokens in between
    docs = np.concatenate([np.full(n + 1, d) for d, n in enumerate(counts)])
    trained = np.concatenate([[0] + [1] * n for n in counts]).astype(bool)
    values = np.zeros(len(docs))
    for d in range(len(counts)):
        values[(docs == d) & trained] = losses[d]
    order = rng.permutation(len(docs))
    weights = token_weights(trained[order], docs[order] * 7 - 3, mode)  # type: ignore[arg-type]
    assert weights.dtype == np.float32 and (weights[~trained[order]] == 0).all()
    assert float((weights.astype(np.float64) * values[order]).sum()) == pytest.approx(objective(losses, mode), rel=1e-6)
    # the effective weights say the same per document
    means = [sum(x) / len(x) if x else 0.0 for x in losses]
    assert float(np.dot(effective_weights(counts, mode), means)) == pytest.approx(objective(losses, mode), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(0, 20), min_size=2, max_size=10).filter(any), mode=st.sampled_from(LOSS_MODES))
def test_parts_with_the_step_total_add_up(counts: list[int], mode: str) -> None:
    """Weights of two parts, each normalised by the whole's total, add up to the weights of the whole."""
    whole = per_token_weight(counts, mode)  # type: ignore[arg-type]
    total = LossTotals.of(counts)
    half = len(counts) // 2
    parts = np.concatenate(
        [per_token_weight(counts[:half], mode, total), per_token_weight(counts[half:], mode, total)]  # type: ignore[arg-type]
    )
    np.testing.assert_allclose(parts, whole, rtol=1e-12)


def test_effective_weights_and_words() -> None:
    assert effective_weights([20, 2000], "sequence").tolist() == [0.5, 0.5]
    assert effective_weights([0, 4], "token").tolist() == [0.0, 1.0]
    np.testing.assert_allclose(effective_weights([1, 4, 16], "sqrt"), [1 / 7, 2 / 7, 4 / 7])
    assert set(MODE_ARITHMETIC) == set(LOSS_MODES)


def test_bad_mode_and_total_are_refused() -> None:
    with pytest.raises(
        packing.SettingError, match=r"^loss_weights: expected one of token, sequence, sequence_sum, sqrt"
    ):
        per_token_weight([1], "mean")  # type: ignore[arg-type]
    with pytest.raises(packing.SettingError, match=r"^total: expected at least this batch's own normaliser \(5\)"):
        per_token_weight([2, 3], "token", total=4)
    for total in (0, float("inf"), float("nan"), -1):
        with pytest.raises(packing.SettingError, match=r"^total: expected a positive finite token normaliser"):
            per_token_weight([2, 3], "token", total=total)
    with pytest.raises(packing.SettingError, match=r"^total: expected a positive finite sqrt normaliser"):
        per_token_weight([2, 3], "sqrt", total=LossTotals(0, 0, 0.0))
    assert per_token_weight([0, 0], "token", total=0).tolist() == [0.0, 0.0]  # nothing trained: nothing to divide
    with pytest.raises(packing.SettingError, match=r"^trained_tokens: expected one integer per sample \(2\)"):
        PackingSampler([3, 4], 8, trained_tokens=[1], num_replicas=1, rank=0)
    with pytest.raises(packing.SettingError, match=r"^gradient_accumulation_steps: expected an integer >= 1"):
        PackingSampler([3, 4], 8, gradient_accumulation_steps=0, num_replicas=1, rank=0)
    with pytest.raises(packing.SettingError, match=r"^trained_tokens: expected one integer per sample.*float64"):
        PackingSampler([3, 4], 8, trained_tokens=[1.5, 2], num_replicas=1, rank=0)
    # the lengths passed again as trained tokens: a sample's first token is never a target
    with pytest.raises(
        packing.SettingError,
        match=r"^trained_tokens: expected at most the tokens kept of each sample less one \(sample 0 keeps 3; ",
    ):
        PackingSampler([3, 4], 8, trained_tokens=[3, 4], num_replicas=1, rank=0)
    # counts of whole samples where collate truncates them to 4 tokens: the weights would not sum to the objective
    with pytest.raises(packing.SettingError, match=r"\(sample 0 keeps 4; trained_tokens\(samples, max_seq_length\)\)"):
        PackingSampler([10, 3], 4, trained_tokens=[9, 2], num_replicas=1, rank=0)
    assert PackingSampler([10, 3], 4, trained_tokens=[3, 2], num_replicas=1, rank=0).trained_tokens.tolist() == [3, 2]
    dropped = PackingSampler([10, 3], 4, overflow="drop", trained_tokens=[9, 2], num_replicas=1, rank=0)
    assert dropped.trained_tokens.tolist() == [9, 2]  # a dropped sample is in no step
    assert PackingSampler([1, 4], 8, trained_tokens=[0, 3], num_replicas=1, rank=0).trained_tokens.tolist() == [0, 3]


def test_a_batch_with_nothing_trained_weighs_nothing() -> None:
    """Zero trained tokens in a batch (prompts only, one-token samples): weights 0, under any totals, no error."""
    rows = [[5], {"prompt": [1, 2], "completion": []}]
    for mode in LOSS_MODES:
        assert collate(rows, loss_weights=mode)["loss_weights"].tolist() == [[0.0, 0.0, 0.0]]  # type: ignore[arg-type]
        assert collate(rows, loss_weights=mode, totals=LossTotals(3, 9, 4.0))["loss_weights"].sum() == 0  # type: ignore[arg-type]
        assert not packing.pack([[5], [6]], 4).loss_weights(mode).any()  # type: ignore[arg-type]


def test_a_split_document_is_one_document() -> None:
    """A sample split over two blocks counts once in the sequence mean, its trained tokens over both pieces."""
    batch = packing.pack([[1, 2, 3, 4, 5, 6], [7, 8, 9]], 4, strategy="split", overflow="split")
    weights = batch.loss_weights("sequence")
    trained = batch.labels != packing.core.IGNORE_INDEX
    per_sample = {int(s): float(weights[(batch.sequence_ids == s) & trained].sum()) for s in (0, 1)}
    assert per_sample == pytest.approx({0: 0.5, 1: 0.5})
    assert trained[batch.sequence_ids == 0].sum() == 4  # 6 tokens, two pieces: each piece's first is no target


def test_trained_tokens_match_the_collated_labels() -> None:
    rows = [{"prompt": [1, 2, 3], "completion": [4, 5]}, [6], [7, 8, 9, 10], {"input_ids": [1, 2], "loss_mask": [0, 0]}]
    counts = trained_tokens(packing.read_rows(rows))
    labels = collate(rows)["labels"][0].numpy()
    assert counts.tolist() == [2, 0, 3, 0]
    assert int(counts.sum()) == int((labels != packing.core.IGNORE_INDEX).sum())


def test_exported_column_and_packed_dataset(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from packing.torch import PackedDataset

    batch = packing.pack([[1, 2, 3], {"prompt": [4, 5], "completion": [6, 7, 8]}, [9, 10]], 5)
    table = batch.to_arrow(loss_weights="sequence")
    assert table.column_names[-1] == "loss_weights"
    assert np.allclose(np.concatenate(table.column("loss_weights").to_pylist()), batch.loss_weights("sequence").ravel())
    pq.write_table(table, tmp_path / "packed.parquet")
    data = PackedDataset(tmp_path / "packed.parquet")
    item = data[0]
    assert item["loss_weights"].dtype == torch.float32
    stored = collate([data[i] for i in range(len(data))])["loss_weights"]
    computed = collate([data[i] for i in range(len(data))], loss_weights="sequence")["loss_weights"]
    torch.testing.assert_close(stored, computed)
    assert float(computed.sum()) == pytest.approx(1.0)  # each of the three documents: 1/3 spread over its targets
    from_batch = PackedDataset(batch, loss_weights="token")
    assert float(sum(from_batch[i]["loss_weights"].sum() for i in range(len(from_batch)))) == pytest.approx(1.0)


@pytest.mark.parametrize("layout", packing.layouts.LAYOUTS)
def test_every_export_layout_carries_the_weights_of_its_labels(layout: str) -> None:
    batch = packing.pack([[1, 2, 3, 4, 5, 6, 7], {"prompt": [4, 5], "completion": [6, 7, 8]}, [9, 10], [11]], 8)
    table = packing.export(batch, layout, loss_weights="sqrt")
    weights = table.column("loss_weights").to_pylist()
    assert sum(map(sum, weights)) == pytest.approx(1.0)
    trained = table.column("loss_mask" if layout == "megatron" else "labels").to_pylist()
    for row_weights, row in zip(weights, trained, strict=True):
        assert len(row_weights) == len(row)
        is_target = [m == 1 for m in row] if layout == "megatron" else [label != -100 for label in row]
        assert [w > 0 for w in row_weights] == is_target


def test_pack_command_writes_the_column(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from packing._cli import main

    source = tmp_path / "rows.jsonl"
    source.write_text("[1, 2, 3]\n[4, 5]\n[6, 7, 8, 9]\n")
    output = tmp_path / "packed.parquet"
    assert main(["pack", str(source), "--max-seq-length", "8", "-o", str(output), "-q", "--loss-weights", "token"]) == 0
    table = pq.read_table(output)
    assert sum(map(sum, table.column("loss_weights").to_pylist())) == pytest.approx(1.0)
    data = packing.torch.PackedDataset(output)  # type: ignore[attr-defined]
    assert "loss_weights" in data[0]


# ---------------------------------------------------------------- a real model: packed equals unpacked


def documents(seed: int = 0) -> list[Any]:
    """Documents of very different lengths (1 to 120 tokens), plain and prompt/completion, one without a target."""
    rng = np.random.default_rng(seed)
    rows: list[Any] = []
    for i, n in enumerate([120, 2, 33, 1, 5, 64, 9, 3, 17, 90, 4, 40]):
        tokens = rng.integers(1, VOCAB, n).tolist()
        if i % 3 == 1 and n > 2:
            rows.append({"prompt": tokens[: n // 2], "completion": tokens[n // 2 :]})
        else:
            rows.append(tokens)
    rows.append({"input_ids": rng.integers(1, VOCAB, 6).tolist(), "loss_mask": [0] * 6})  # nothing trained
    return rows


def tiny_llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def unpacked_losses(model: Any, rows: list[Any]) -> list[Any]:
    """Each document alone through the model: the cross-entropy of its trained tokens (documents with any)."""
    samples = packing.read_rows(rows)
    per_doc = []
    for i in range(len(rows)):
        lo, hi = int(samples.offsets[i]), int(samples.offsets[i + 1])
        ids = torch.tensor(samples.tokens[lo:hi])  # type: ignore[index]
        mask = torch.tensor(samples.loss_mask[lo:hi], dtype=torch.bool)  # type: ignore[index]
        if hi - lo < 2 or not mask[1:].any():
            continue
        logits = model(input_ids=ids[None], use_cache=False).logits[0]
        ce = torch.nn.functional.cross_entropy(logits[:-1].float(), ids[1:], reduction="none")
        per_doc.append(ce[mask[1:]])
    return per_doc


def unpacked_objective(per_doc: list[Any], mode: str) -> Any:
    """The objective from each document's token losses, written out plainly."""
    if mode == "token":
        return torch.cat(per_doc).sum() / sum(len(d) for d in per_doc)
    if mode == "sequence":
        return torch.stack([d.mean() for d in per_doc]).mean()
    if mode == "sequence_sum":
        return torch.stack([d.sum() for d in per_doc]).mean()
    roots = torch.tensor([math.sqrt(len(d)) for d in per_doc])
    return (roots * torch.stack([d.mean() for d in per_doc])).sum() / roots.sum()


def grad(value: Any, model: Any) -> list[Any]:
    """d value / d parameters, keeping the graph (several objectives share one forward pass)."""
    return list(torch.autograd.grad(value, list(model.parameters()), retain_graph=True))


def forward(model: Any, batch: dict[str, Any]) -> Any:
    return model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits


def packed_loss(model: Any, batch: dict[str, Any]) -> Any:
    return weighted_loss(forward(model, batch), batch["labels"], batch["loss_weights"])


def max_diff(a: list[Any], b: list[Any]) -> float:
    """The largest difference between two lists of tensors, relative to the reference when it is above 1."""
    return max(float(((x - y).abs() / y.abs().clamp(min=1.0)).max()) for x, y in zip(a, b, strict=True))


def loss_diff(value: Any, reference: Any) -> float:
    value, reference = (float(x.detach()) if isinstance(x, torch.Tensor) else float(x) for x in (value, reference))
    return abs(value - reference) / max(1.0, abs(reference))


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_llama()


@pytest.mark.slow
def test_one_packed_batch_equals_the_unpacked_objective(model: Any) -> None:
    rows = documents()
    per_doc = unpacked_losses(model, rows)
    logits = forward(model, collate(rows))
    batch = packing.pack(rows, 128)  # blocks of a fixed length, with padding: PackedBatch.loss_weights
    assert batch.num_blocks >= 3
    block_logits = forward(model, {k: torch.from_numpy(getattr(batch, k)) for k in ("input_ids", "position_ids")})
    for mode in LOSS_MODES:
        reference = unpacked_objective(per_doc, mode)
        expected = grad(reference, model)
        collated = collate(rows, loss_weights=mode)  # type: ignore[arg-type]
        loss = weighted_loss(logits, collated["labels"], collated["loss_weights"])
        assert loss_diff(loss, reference) < TOLERANCE, mode
        assert max_diff(grad(loss, model), expected) < TOLERANCE, mode
        weights = torch.from_numpy(batch.loss_weights(mode))  # type: ignore[arg-type]
        loss = weighted_loss(block_logits, torch.from_numpy(batch.labels), weights)
        assert loss_diff(loss, reference) < TOLERANCE, mode
        assert max_diff(grad(loss, model), expected) < TOLERANCE, mode


@pytest.mark.slow
def test_accumulated_micro_batches_equal_the_unpacked_objective_of_each_step(model: Any) -> None:
    rows = documents(1)
    samples = packing.read_rows(rows)
    sampler = PackingSampler(
        samples.lengths,
        128,
        num_replicas=1,
        rank=0,
        trained_tokens=trained_tokens(samples),
        gradient_accumulation_steps=2,
    )
    steps = list(sampler)
    assert len(steps) >= 3  # at least one optimizer step of two micro-batches, and a shorter last one
    loaders = {mode: list(sampler.loader(rows, mode)) for mode in LOSS_MODES}  # type: ignore[arg-type]
    for first in range(0, len(steps), 2):
        group = range(first, min(first + 2, len(steps)))
        per_doc = unpacked_losses(model, [rows[i] for s in group for i in steps[s]])
        logits = [forward(model, loaders["token"][s]) for s in group]
        for mode in LOSS_MODES:
            reference = unpacked_objective(per_doc, mode)
            shares = [weighted_loss(x, loaders[mode][s]["labels"], loaders[mode][s]["loss_weights"])
                      for x, s in zip(logits, group, strict=True)]  # fmt: skip
            # accumulation: the gradients of the micro-batches add up (as backward() on each would)
            accumulated = [sum(parts) for parts in zip(*(grad(share, model) for share in shares), strict=True)]
            assert loss_diff(sum(shares), reference) < TOLERANCE, mode
            assert max_diff(accumulated, grad(reference, model)) < TOLERANCE, mode


def _rank(rank: int, world: int, store: str, out: str, count: int | None = None) -> None:
    """One data-parallel rank: DDP averages gradients, so each rank's share is scaled by the world size. With
    ``count``, the first ``count`` documents only (fewer than ranks: some ranks take an empty step)."""
    import os
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    # loopback: gloo otherwise connects through the address the host name resolves to, which a sandbox may not route
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        rows = documents(2)[:count]
        counts = trained_tokens(packing.read_rows(rows))
        lengths = packing.read_rows(rows).lengths
        plain = tiny_llama()
        model = DistributedDataParallel(tiny_llama())
        sampler = PackingSampler(lengths, 128, trained_tokens=counts, gradient_accumulation_steps=2)
        steps = min(2, len(sampler))
        docs = [rows[i] for s in range(steps) for r in range(world) for i in sampler.schedule.block(s, r).tolist()]
        assert len(sampler) >= 2 if count is None else len(docs) < world
        per_doc = unpacked_losses(plain, docs) if rank == 0 else []  # the whole optimizer step, document by document
        results = {}
        for mode in LOSS_MODES:
            model.zero_grad()
            shares = torch.zeros(())
            for batch in list(sampler.loader(rows, mode))[:2]:  # the first optimizer step: 2 micro-batches
                loss = packed_loss(model, batch)
                (loss * world).backward()  # DDP averages the ranks' gradients: scale each share by the world size
                shares += loss.detach()
            dist.all_reduce(shares)
            if rank != 0:
                continue
            reference = unpacked_objective(per_doc, mode)
            grads = [p.grad for p in model.module.parameters()]
            results[mode] = {"loss": loss_diff(shares, reference), "grad": max_diff(grads, grad(reference, plain))}
        if rank == 0:
            Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
    # done: leave without running destructors. Freeing DDP's reducer here can deadlock in torch: its gloo
    # process group joins a worker thread that waits for the GIL to free the last collective's tensors.
    os._exit(0)


@pytest.mark.slow
@pytest.mark.parametrize(("world", "count"), [(2, None), (3, 2)], ids=["two ranks", "three ranks, two documents"])
def test_ranks_with_accumulation_equal_the_unpacked_objective(tmp_path: Path, world: int, count: int | None) -> None:
    import torch.multiprocessing as mp

    out = tmp_path / "diffs.json"
    # spawn, not fork: a forked child can deadlock in the OpenMP pool the parent's forward passes started
    ranks = mp.start_processes(
        _rank, args=(world, str(tmp_path / "store"), str(out), count), nprocs=world, join=False, start_method="spawn"
    )
    try:
        for _ in range(RANK_POLLS):  # a hang guard, not a speed check: a stuck rank fails the test, never the run
            if ranks.join(timeout=1):
                break
        else:
            pytest.fail(f"the {world} ranks did not finish within {RANK_POLLS} s")
    finally:
        for process in ranks.processes:  # never leave a child behind: the interpreter would wait for it at exit
            if process.is_alive():
                process.kill()
    results = json.loads(out.read_text())
    assert set(results) == set(LOSS_MODES)
    for mode, diffs in results.items():
        assert diffs["loss"] < TOLERANCE and diffs["grad"] < TOLERANCE, (mode, diffs)


class WeightedTrainer(transformers.Trainer):  # type: ignore[misc]
    """The recipe of docs/guides/loss-weighting.md: batches from ``sampler.loader``, loss ``weighted_loss``."""

    loss_is_scaled_for_ga = True  # the weights are normalised over the whole optimizer step: no division by k

    def __init__(self, *args: Any, sampler: PackingSampler, loss_weights: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampler, self.loss_weights = sampler, loss_weights

    def get_train_dataloader(self) -> Any:
        return self.sampler.loader(self.train_dataset, self.loss_weights)  # type: ignore[arg-type]

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        outputs = model(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"], use_cache=False)
        loss = weighted_loss(outputs.logits, inputs["labels"], inputs["loss_weights"])
        loss = loss * self.accelerator.num_processes  # DDP averages the ranks' gradients
        return (loss, outputs) if return_outputs else loss


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sequence", "sqrt"])
def test_the_trainer_recipe_takes_the_unpacked_objectives_gradient(tmp_path: Path, mode: str) -> None:
    """One optimizer step of two accumulated micro-batches with plain SGD at learning rate 1: the parameters move
    by exactly minus the gradient of the unpacked objective of that step's documents."""
    rows = documents(3)
    samples = packing.read_rows(rows)
    sampler = PackingSampler(
        samples.lengths,
        128,
        num_replicas=1,
        rank=0,
        trained_tokens=trained_tokens(samples),
        gradient_accumulation_steps=2,
    )
    model = tiny_llama()
    before = [p.detach().clone() for p in model.parameters()]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, gradient_accumulation_steps=2, per_device_train_batch_size=1,
        learning_rate=1.0, optim="sgd", lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
        report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    WeightedTrainer(model=model, args=args, train_dataset=rows, sampler=sampler, loss_weights=mode).train()
    steps = list(sampler)
    reference_model = tiny_llama()
    reference = unpacked_objective(unpacked_losses(reference_model, [rows[i] for s in (0, 1) for i in steps[s]]), mode)
    expected = grad(reference, reference_model)
    moved = [b - p.detach() for b, p in zip(before, model.parameters(), strict=True)]
    assert max_diff(moved, expected) < TOLERANCE


def test_an_empty_step_trains_nothing() -> None:
    """Fewer documents than ranks: a rank left without one still takes the step (DDP needs every rank's
    gradients); its batch is padding alone, ``weighted_loss`` is exactly 0 and every parameter's gradient is 0."""
    rows = documents()[:2]
    samples = packing.read_rows(rows)
    ranks = [
        PackingSampler(samples.lengths, 128, num_replicas=3, rank=r, trained_tokens=trained_tokens(samples))
        for r in range(3)
    ]
    blocks = [list(sampler) for sampler in ranks]
    assert [len(b) for b in blocks] == [1, 1, 1] and sorted(len(b[0]) for b in blocks) == [0, 1, 1]
    empty = next(sampler for sampler, b in zip(ranks, blocks, strict=True) if not b[0])
    (batch,) = list(empty.loader(rows, "token"))
    assert not (batch["labels"] != packing.core.IGNORE_INDEX).any() and not batch["loss_weights"].any()
    model = tiny_llama()
    loss = packed_loss(model, batch)
    assert loss.item() == 0.0
    loss.backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_the_step_totals_reach_dataloader_workers() -> None:
    rows = documents(4)
    samples = packing.read_rows(rows)
    sampler = PackingSampler(samples.lengths, 128, num_replicas=2, rank=1, trained_tokens=trained_tokens(samples))
    here = list(sampler.loader(rows, "token"))
    there = list(sampler.loader(rows, "token", num_workers=1))
    assert len(here) == len(there) == len(sampler)
    for a, b in zip(here, there, strict=True):
        torch.testing.assert_close(a["loss_weights"], b["loss_weights"])
    # each step's weights are this rank's share: less than the whole step's objective
    assert all(0 < float(batch["loss_weights"].sum()) < 1 for batch in here)
