"""PackingSampler.state_dict / load_state_dict: exact same-size resume, rescaled resume (every sample once per
epoch), foreign states refused, no replay, and the peers that save it (torchdata, accelerate)."""

from __future__ import annotations

import functools
import itertools
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import packing  # noqa: E402
import packing.errors  # noqa: E402
import packing.planning  # noqa: E402
import packing.torch._resume  # noqa: E402
import packing.torch._sampler  # noqa: E402
import packing.weighting  # noqa: E402
from packing.torch import PackingSampler, StepDataset, collate  # noqa: E402
from packing.torch._schedule import Schedule  # noqa: E402

STRATEGIES = ["bfd", "ffd", "first_fit_shuffle", "next_fit", "spfhp"]


def samplers(lengths: Any, world: int, **kwargs: Any) -> list[PackingSampler]:
    """One sampler per rank of a world of ``world`` (as on separate processes)."""
    return [PackingSampler(lengths, num_replicas=world, rank=r, **kwargs) for r in range(world)]


def run(ranks: list[PackingSampler], steps: int | None = None) -> list[list[list[Any]]]:
    """``steps`` steps (all when None) of every rank, step by step: ``out[step][rank]`` is that block."""
    iterators = [iter(s) for s in ranks]
    out = []
    while steps is None or len(out) < steps:
        step = [next(it, None) for it in iterators]
        if step[0] is None:
            assert all(block is None for block in step)  # every rank has the same number of steps
            break
        out.append([list(block) for block in step])
    return out


def consumed(steps: list[list[list[Any]]]) -> list[Any]:
    return [item for step in steps for block in step for item in block]


def lengths_of(seed: int, count: int, longest: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(longest / 6), 1.0, count).astype(np.int64), 0, 2 * longest)


# ---------------------------------------------------------------- the same number of ranks


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    world=st.sampled_from([1, 2, 3]),
    epoch=st.integers(0, 3),
    cut=st.floats(0, 1),
    strategy=st.sampled_from(STRATEGIES),
    overflow=st.sampled_from(["truncate", "split", "drop"]),
)
def test_same_world_resume_is_exact_at_any_step_of_any_epoch(
    seed: int, world: int, epoch: int, cut: float, strategy: str, overflow: str
) -> None:
    lengths = lengths_of(seed, 120, 64)
    options = {"max_seq_length": 64, "seed": seed % 7, "strategy": strategy, "overflow": overflow}
    whole = samplers(lengths, world, **options)
    for s in whole:
        s.set_epoch(epoch)
    reference = run(whole)
    k = int(cut * len(reference))
    first = samplers(lengths, world, **options)
    for s in first:
        s.set_epoch(epoch)
    assert run(first, k) == reference[:k]
    states = [s.state_dict() for s in first]
    assert all(state == states[0] for state in states)  # global progress: any rank's state restores all
    assert states[0]["step"] == k and states[0]["epoch"] == epoch
    resumed = samplers(lengths, world, **options)
    for rank, s in enumerate(resumed):
        s.load_state_dict(pickle.loads(pickle.dumps(states[(rank + 1) % world])))  # another rank's state
        s.set_epoch(epoch)  # a training loop sets the epoch again: the position is kept
    assert run(resumed) == reference[k:]
    for s in resumed:  # the next epoch is the uninterrupted run's
        s.set_epoch(epoch + 1)
    for s in whole:
        s.set_epoch(epoch + 1)
    assert run(resumed) == run(whole)


def test_a_state_applies_to_one_pass_and_a_new_pass_starts_over() -> None:
    sampler = PackingSampler(lengths_of(0, 60, 32), 32, seed=0)
    full = [list(b) for b in sampler]
    head = iter(sampler)
    next(head), next(head)
    state = sampler.state_dict()
    fresh = PackingSampler(lengths_of(0, 60, 32), 32, seed=0)
    fresh.load_state_dict(state)
    assert [list(b) for b in fresh] == full[2:]
    assert fresh.state_dict()["step"] == len(full)  # the epoch is consumed
    assert [list(b) for b in fresh] == full  # the next pass is a whole epoch again


def test_loading_replays_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths = lengths_of(1, 2_000, 128)
    sampler = PackingSampler(lengths, 128, num_replicas=2, rank=0, seed=0)
    steps = len(sampler)
    reference = [list(b) for b in sampler]
    state = {**sampler.state_dict(), "step": steps - 1}
    calls = Counter()
    original = Schedule.items

    def counted(self: Schedule, step: int, rank: int) -> list[Any]:
        calls[step] += 1
        return original(self, step, rank)

    monkeypatch.setattr(Schedule, "items", counted)
    resumed = PackingSampler(lengths, 128, num_replicas=2, rank=0, seed=0)
    resumed.load_state_dict(state)
    assert sum(calls.values()) == 0  # no step was looked at to get there
    assert [list(b) for b in resumed] == reference[-1:]
    assert dict(calls) == {steps - 1: 1}


# ---------------------------------------------------------------- another number of ranks


def check_empty_blocks(schedule: Schedule) -> None:
    """A block without tokens only when the plan has fewer documents than blocks: one such block for each missing."""
    starts = schedule.block_starts.tolist()
    tokens = [int(schedule.lengths[lo:hi].sum()) for lo, hi in itertools.pairwise(starts)]
    assert len(tokens) == schedule.num_steps * schedule.num_replicas
    assert tokens.count(0) == max(0, len(tokens) - int((schedule.lengths > 0).sum()))


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    worlds=st.sampled_from([(2, 3), (4, 2), (3, 1), (1, 4), (2, 3, 1), (4, 1, 2)]),
    cuts=st.lists(st.floats(0, 1), min_size=2, max_size=2),
    strategy=st.sampled_from(STRATEGIES),
    overflow=st.sampled_from(["truncate", "split", "drop"]),
    epoch=st.integers(0, 2),
)
@example(seed=200, worlds=(2, 3), cuts=[0.96875, 0.0], strategy="bfd", overflow="truncate", epoch=2)  # 2 left, 3 ranks
def test_rescaled_resume_trains_every_sample_exactly_once(
    seed: int, worlds: tuple[int, ...], cuts: list[float], strategy: str, overflow: str, epoch: int
) -> None:
    lengths = lengths_of(seed, 200, 64)
    lengths[seed % 200] = 0  # an empty sample: it is dealt too
    options = {"max_seq_length": 64, "seed": seed % 5, "strategy": strategy, "overflow": overflow}
    taken: list[Any] = []
    state = None
    for leg, world in enumerate(worlds):
        ranks = samplers(lengths, world, **options)
        for s in ranks:
            if state is not None:
                s.load_state_dict(state)
            s.set_epoch(epoch)
        last = leg == len(worlds) - 1
        check_empty_blocks(ranks[0].schedule)
        steps = run(ranks, None if last else int(cuts[leg] * ranks[0].schedule.num_steps))
        for step in steps:
            for block in step:
                tokens = [item.length if isinstance(item, packing.Piece) else min(lengths[item], 64) for item in block]
                assert sum(tokens) <= 64
        taken += consumed(steps)
        state = ranks[0].state_dict()
        assert all(s.state_dict() == state for s in ranks)
    whole = consumed(run(samplers(lengths, 1, **options)))  # every item of an epoch (pieces, drops as planned)
    if epoch:
        ranks = samplers(lengths, 1, **options)
        ranks[0].set_epoch(epoch)
        whole = consumed(run(ranks))
    key = lambda item: (item.sequence, item.start) if isinstance(item, packing.Piece) else (item, 0)  # noqa: E731
    assert sorted(map(key, taken)) == sorted(map(key, whole))  # every sample (or piece) exactly once


def test_the_issue_case_two_ranks_then_one_trains_every_sample_once() -> None:
    lengths = lengths_of(7, 999, 512)
    two = samplers(lengths, 2, max_seq_length=512, seed=0)
    before = consumed(run(two, len(two[0]) // 2))
    one = PackingSampler(lengths, 512, num_replicas=1, rank=0, seed=0)
    one.load_state_dict(two[1].state_dict())
    after = consumed(run([one]))
    assert sorted(before + after) == list(range(len(lengths)))
    assert one.stats.tokens_lost == two[0].stats.tokens_lost


def test_resuming_at_the_end_of_an_epoch_on_more_ranks_gives_no_steps() -> None:
    lengths = lengths_of(3, 80, 32)
    ranks = samplers(lengths, 2, max_seq_length=32)
    run(ranks)
    bigger = PackingSampler(lengths, 32, num_replicas=3, rank=2)
    bigger.load_state_dict(ranks[0].state_dict())
    assert list(bigger) == [] and bigger.schedule.num_steps == 0
    assert len(bigger) == len(ranks[0])  # the epoch's steps: all taken before the resume
    bigger.set_epoch(1)
    assert len(bigger) > 0


# ---------------------------------------------------------------- foreign states


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"lengths": [5, 3, 7, 2, 8, 1, 4, 6, 3, 2, 5, 8]}, "lengths"),
        ({"max_seq_length": 32}, "recipe"),
        ({"seed": 9}, "recipe"),
        ({"strategy": "ffd"}, "recipe"),
        ({"shuffle": False}, "sampler options"),
        ({"trained_tokens": [0] * 11 + [1]}, "trained_tokens"),
    ],
)
def test_a_foreign_state_is_refused_naming_what_differs(change: dict[str, Any], what: str) -> None:
    base = {"lengths": [5, 3, 7, 2, 8, 1, 4, 6, 3, 2, 5, 7], "max_seq_length": 16, "seed": 1}
    saved = PackingSampler(**base, trained_tokens=[0] * 12)
    next(iter(saved))
    other = PackingSampler(**{**base, "trained_tokens": [0] * 12, **change})
    with pytest.raises(packing.errors.StateMismatch) as caught:
        other.load_state_dict(saved.state_dict())
    message = str(caught.value)
    assert caught.value.what == what and "\n" not in message and len(message) < 240
    assert message.startswith(f"state: expected the same {what} (") and f"got other {what} (" in message
    assert other.state_dict()["step"] == 0  # left as it was


def test_the_recipe_difference_is_named() -> None:
    saved = PackingSampler([5, 3, 7, 2], 16, seed=1).state_dict()
    with pytest.raises(packing.errors.StateMismatch, match=r"got other recipe \(max_seq_length=16\)$"):
        PackingSampler([5, 3, 7, 2], 32, seed=1).load_state_dict(saved)
    with pytest.raises(
        packing.errors.StateMismatch,
        match=r"expected the same recipe \(seed at its default\), got other recipe \(seed=1\)$",
    ):
        PackingSampler([5, 3, 7, 2], 16).load_state_dict(saved)


@pytest.mark.parametrize(
    "broken",
    [None, {"format": "other"}, {"step": 2}, "text"],
)
def test_junk_is_refused(broken: Any) -> None:
    with pytest.raises(packing.SettingError, match=r"^state: expected "):
        PackingSampler([5, 3, 7, 2], 16).load_state_dict(broken)


def test_a_step_past_the_plan_is_refused() -> None:
    sampler = PackingSampler([5, 3, 7, 2], 8)
    state = {**sampler.state_dict(), "step": 99}
    with pytest.raises(
        packing.SettingError, match=r"state: expected a 'step' of at most the \d+ steps of the plan it resumes, got 99"
    ):
        sampler.load_state_dict(state)


# ---------------------------------------------------------------- tampered states

TAMPER_LENGTHS = lengths_of(11, 120, 32)
HUGE = [10**12, 10**18, 2**63, 2**64 + 1, 10**5000]
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([*HUGE, *(-v for v in HUGE)]),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["9" * 5000 + ":ab", "packing.PackingSampler/1", np.array([1, 2]), np.int64(3), (1, 2)]),
    st.lists(st.integers(-3, 10**13), max_size=3),
    st.lists(st.lists(st.one_of(st.integers(-2, 10**13), st.sampled_from(HUGE), st.none()), max_size=3), max_size=4),
    st.dictionaries(st.sampled_from(["shuffle", "balance", "other", 1]), st.one_of(st.booleans(), st.integers())),
)


def tamper_base() -> tuple[PackingSampler, dict[str, Any]]:
    """A state of an epoch resumed once on another number of ranks (a ``resized`` entry), two steps in."""
    two = samplers(TAMPER_LENGTHS, 2, max_seq_length=32, seed=1)
    run(two, 2)
    three = samplers(TAMPER_LENGTHS, 3, max_seq_length=32, seed=1)
    three[0].load_state_dict(two[0].state_dict())
    run(three[:1], 2)
    return three[0], three[0].state_dict()


def loaded_or_refused(sampler: PackingSampler, state: Any) -> BaseException | None:
    """Load ``state``: None when it loads (the pass then runs to its end), else the error, which must be a
    one-line ``PackingError`` that left the sampler as it was. Every plan made is on at most as many ranks as
    there are samples, whatever the state says."""
    before = sampler.state_dict()
    worlds: list[int] = []
    resume = packing.torch._sampler.resume_schedule

    def counted(previous: Schedule, step: int, num_replicas: int, *args: Any, **kwargs: Any) -> Schedule:
        worlds.append(num_replicas)
        return resume(previous, step, num_replicas, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing.torch._sampler, "resume_schedule", counted)
        try:
            sampler.load_state_dict(state)
        except packing.PackingError as error:
            message = str(error)
            assert "\n" not in message and len(message) < 320, message
            assert sampler.state_dict() == before
            return error
    assert all(world <= len(TAMPER_LENGTHS) for world in worlds)  # no state number sets an allocation
    steps = sum(1 for _ in sampler)
    assert steps <= len(sampler)
    return None


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(packing.torch._resume.KEYS), value=HOSTILE)
def test_a_tampered_field_loads_or_is_refused_in_one_typed_line(key: str, value: Any) -> None:
    sampler, state = tamper_base()
    error = loaded_or_refused(sampler, {**state, key: value})
    if key in ("format", "lengths", "trained_tokens", "recipe", "options") and not (
        type(value) is type(state[key]) and value == state[key]
    ):
        assert isinstance(error, packing.SettingError)  # other data, or no state's value: never loaded


@settings(max_examples=200, deadline=None)
@given(
    resized=st.lists(
        st.tuples(
            st.one_of(st.integers(1, 6), st.sampled_from(HUGE)), st.one_of(st.integers(1, 8), st.sampled_from(HUGE))
        ),
        max_size=5,
    ),
    step=st.one_of(st.integers(0, 12), st.sampled_from(HUGE)),
    world=st.one_of(st.integers(1, 6), st.sampled_from(HUGE)),
)
def test_a_tampered_chain_of_plans_loads_every_sample_at_most_once_or_is_refused(
    resized: list[tuple[int, int]], step: int, world: int
) -> None:
    sampler, state = tamper_base()
    state = {**state, "resized": [list(pair) for pair in resized], "step": step, "num_replicas": world}
    if loaded_or_refused(sampler, state) is None:  # a chain a run could have made: the rest of the epoch, once
        rest = [i for block in sampler for i in block]
        assert len(rest) == len(set(rest))


def test_steps_past_an_earlier_plan_are_refused_not_an_empty_epoch() -> None:
    sampler, state = tamper_base()
    ((world, _),) = state["resized"]
    with pytest.raises(
        packing.SettingError,
        match=r"^state: expected at most the \d+ steps of its plan \('resized' entry 0\), got 1000000$",
    ):
        sampler.load_state_dict({**state, "resized": [[world, 10**6]]})
    with pytest.raises(packing.SettingError, match=r"'resized': a list of at most 64 pairs\), got 5$"):
        sampler.load_state_dict({**state, "resized": 5})


def test_a_world_of_a_trillion_ranks_allocates_nothing_of_its_size() -> None:
    sampler, state = tamper_base()
    # on 10**12 ranks, one step deals every sample: the same as on as many ranks as there are samples
    huge = {**state, "resized": [[10**12, 1]], "step": 0}
    assert loaded_or_refused(sampler, huge) is None
    assert list(sampler) == [] and len(sampler) == 1  # its one step took the epoch
    with pytest.raises(packing.SettingError, match=r"at most the 1 steps of its plan \('resized' entry 0\), got 2$"):
        sampler.load_state_dict({**state, "resized": [[10**12, 2]]})


class Counted(list):  # type: ignore[type-arg]
    """A list that counts the entries read from it."""

    read = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            Counted.read += 1
            yield item


def test_loading_is_linear_in_the_resized_entries() -> None:
    lengths = lengths_of(12, 3_000, 64)
    work: dict[int, tuple[int, int]] = {}
    for count in (30, 60):
        chain = [[1 + k % 2, 1] for k in range(count)]  # a run resumed count times, one step each time
        sampler = PackingSampler(lengths, 64, num_replicas=3, rank=0, seed=0)
        state = {**sampler.state_dict(), "resized": chain, "num_replicas": 3, "step": 0}
        calls, entries = [0], [0]

        def counted(
            previous: Schedule,
            step: int,
            *args: Any,
            calls: list[int] = calls,
            entries: list[int] = entries,
            resume: Any = packing.torch._sampler.resume_schedule,
            **kwargs: Any,
        ) -> Schedule:
            calls[0] += 1
            entries[0] += len(previous.remaining(step).indices)
            return resume(previous, step, *args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(packing.torch._sampler, "resume_schedule", counted)
            sampler.load_state_dict(state)
        assert len(sampler) == count + sampler.schedule.num_steps  # every entry a plan, one step taken of each
        work[count] = (calls[0], entries[0])
    assert work[30][0] == 30 and work[60][0] == 60  # one plan per entry
    assert work[60][1] <= 2 * work[30][1]  # each plan packs at most what the one before left
    Counted.read = 0
    too_many = Counted([[1, 1]] * 1_000_000)
    with pytest.raises(packing.SettingError, match=r"a list of at most 64 pairs\), got <1,000,000 entries>$"):
        sampler.load_state_dict({**state, "resized": too_many})
    assert Counted.read == 0  # refused by its length, before reading an entry


# ---------------------------------------------------------------- len(sampler) after a resume


@pytest.mark.parametrize("worlds", [(2, 2), (2, 3), (3, 1)])
def test_len_is_the_epochs_steps_after_a_resume_too(worlds: tuple[int, int]) -> None:
    lengths = lengths_of(13, 300, 48)
    first = samplers(lengths, worlds[0], max_seq_length=48, seed=2)
    taken = len(first[0]) // 3
    run(first, taken)
    resumed = samplers(lengths, worlds[1], max_seq_length=48, seed=2)
    for s in resumed:
        s.load_state_dict(first[0].state_dict())
    rest = run(resumed)
    assert len({len(s) for s in resumed}) == 1
    assert len(rest) == len(resumed[0]) - taken  # a resumed pass yields the steps not taken
    if worlds[0] == worlds[1]:
        assert len(resumed[0]) == len(first[0])  # the uninterrupted run's epoch
    loader = torch.utils.data.DataLoader(range(len(lengths)), batch_sampler=resumed[0])
    assert len(loader) == len(resumed[0])


# ---------------------------------------------------------------- loss totals


@pytest.mark.parametrize("worlds", [(2, 2), (2, 3)])
def test_loss_totals_survive_a_resume(worlds: tuple[int, int]) -> None:
    lengths = lengths_of(5, 150, 48)
    lengths = np.maximum(lengths, 2)
    trained = np.minimum(lengths, 48) - 1
    options = {"max_seq_length": 48, "trained_tokens": trained, "gradient_accumulation_steps": 2, "seed": 3}
    first = samplers(lengths, worlds[0], **options)
    cut = len(first[0]) // 2
    head = [[next(it) for _ in range(cut)] for it in map(iter, first)]
    resumed = samplers(lengths, worlds[1], **options)
    for s in resumed:
        s.load_state_dict(first[0].state_dict())
    tail = [list(s) for s in resumed]
    if worlds[0] == worlds[1]:
        whole = [list(s) for s in samplers(lengths, worlds[0], **options)]
        for rank in range(worlds[0]):
            assert [b.totals for b in head[rank] + tail[rank]] == [b.totals for b in whole[rank]]
    else:  # the new plan's optimizer steps: each step's totals are the sum over its ranks and micro-steps
        steps = len(tail[0])
        for step in range(steps):
            group = range(step - step % 2, min(step - step % 2 + 2, steps))
            counts = [trained[i] for rank in tail for s in group for i in rank[s]]
            expected = packing.weighting.LossTotals.of(counts)
            got = tail[0][step].totals
            assert (got.documents, got.tokens) == expected[:2] and got.sqrt_sum == pytest.approx(expected.sqrt_sum)


# ---------------------------------------------------------------- the sampler's statistics


def test_stats_count_the_trained_tokens() -> None:
    lengths = np.array([5, 3, 40, 2, 0, 7])
    trained = np.array([3, 0, 20, 1, 0, 6])
    sampler = PackingSampler(lengths, 16, trained_tokens=trained, overflow="drop")
    stats = sampler.stats
    assert stats.target_tokens == stats.trainable_tokens == 3 + 1 + 6  # the dropped sample is not packed
    assert stats.samples_without_trainable_tokens == 1
    assert PackingSampler(lengths, 16, overflow="drop").stats.target_tokens != stats.target_tokens


def test_balance_per_component_with_a_model_cost() -> None:
    config = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "intermediate_size": 512}
    cost = packing.planning.ModelCost.from_config(config)
    lengths = lengths_of(11, 3_000, 4096)
    sampler = PackingSampler(lengths, 4096, num_replicas=4, rank=0, cost=cost, seed=0)
    balance = sampler.balance_stats
    assert balance.cost == pytest.approx(sampler.imbalance)
    schedule = sampler.schedule
    parts = cost.components(np.array([]))
    assert set(parts) == {"tokens", "attention"}
    # the attention component is the cost's own: the per-block sums of the documents' attention FLOPs
    for step in range(3):
        for rank in range(4):
            block = schedule.block(step, rank)
            expected = cost.components(np.minimum(lengths[block], 4096))["attention"].sum()
            assert schedule.attention[step, rank] == pytest.approx(expected)
            assert schedule.tokens[step, rank] == np.minimum(lengths[block], 4096).sum()
    for name in ("tokens", "attention"):
        grid = getattr(schedule, name)
        assert getattr(balance, name) == pytest.approx(grid.max(axis=1).sum() / grid.mean(axis=1).sum() - 1)
    # balanced by cost, the ranks' attention is far more even than a random dealing of the same blocks
    unbalanced = PackingSampler(lengths, 4096, num_replicas=4, rank=0, cost=cost, seed=0, balance=False)
    assert balance.attention < unbalanced.balance_stats.attention


# ---------------------------------------------------------------- peers: torchdata, accelerate

ROWS_LENGTHS = lengths_of(2, 90, 24) + 1


def rows() -> list[list[int]]:
    return [[1 + (i + j) % 50 for j in range(n)] for i, n in enumerate(ROWS_LENGTHS.tolist())]


def batches(loader: Any) -> list[list[list[int]]]:
    return [b["input_ids"].tolist() for b in loader]


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_stateful_dataloader_saves_and_restores_the_sampler(num_workers: int) -> None:
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    sampler = PackingSampler(ROWS_LENGTHS, 32, seed=2)
    extra = {"num_workers": num_workers, "snapshot_every_n_steps": 1} if num_workers else {}
    whole = batches(tdl.StatefulDataLoader(rows(), batch_sampler=sampler, collate_fn=sampler.collate, **extra))
    loader = tdl.StatefulDataLoader(rows(), batch_sampler=sampler, collate_fn=sampler.collate, **extra)
    it = iter(loader)
    head = [next(it)["input_ids"].tolist() for _ in range(4)]
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    del it
    fresh = PackingSampler(ROWS_LENGTHS, 32, seed=2)
    again = tdl.StatefulDataLoader(rows(), batch_sampler=fresh, collate_fn=fresh.collate, **extra)
    again.load_state_dict(state)
    assert head + batches(again) == whole
    assert fresh.state_dict()["step"] == len(whole)


def test_stateful_dataloader_keeps_each_steps_loss_weights() -> None:
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    trained = np.minimum(ROWS_LENGTHS, 32) - 1

    def loader_of(sampler: PackingSampler) -> Any:
        collate_fn = functools.partial(collate, recipe=sampler.recipe, loss_weights="sequence")
        return tdl.StatefulDataLoader(StepDataset(rows()), batch_sampler=sampler, collate_fn=collate_fn)

    options = {"trained_tokens": trained, "gradient_accumulation_steps": 3, "seed": 4}
    whole = [b["loss_weights"].tolist() for b in loader_of(PackingSampler(ROWS_LENGTHS, 32, **options))]
    loader = loader_of(PackingSampler(ROWS_LENGTHS, 32, **options))
    it = iter(loader)
    head = [next(it)["loss_weights"].tolist() for _ in range(5)]
    state = loader.state_dict()
    again = loader_of(PackingSampler(ROWS_LENGTHS, 32, **options))
    again.load_state_dict(state)
    assert head + [b["loss_weights"].tolist() for b in again] == whole
    # normalised over each optimizer step of 3 micro-steps: their weights add up to 1
    sums = [sum(map(sum, w)) for w in whole]
    assert [pytest.approx(sum(sums[i : i + 3])) for i in range(0, len(sums) - len(sums) % 3, 3)] == [1.0] * (
        len(sums) // 3
    )


def test_torchdata_nodes_keep_the_sampler_state() -> None:
    nodes = pytest.importorskip("torchdata.nodes")
    data = rows()

    def loader_of(sampler: PackingSampler) -> Any:
        batches = nodes.Mapper(nodes.SamplerWrapper(sampler), lambda items: sampler.collate([data[i] for i in items]))
        return nodes.Loader(batches)

    whole = batches(loader_of(PackingSampler(ROWS_LENGTHS, 32, seed=6)))
    loader = loader_of(PackingSampler(ROWS_LENGTHS, 32, seed=6))
    it = iter(loader)
    head = [next(it)["input_ids"].tolist() for _ in range(4)]
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    fresh = PackingSampler(ROWS_LENGTHS, 32, seed=6)
    again = loader_of(fresh)
    again.load_state_dict(state)
    assert head + batches(again) == whole
    assert fresh.state_dict()["step"] == len(whole)


@pytest.mark.slow
def test_accelerate_checkpoints_the_sampler(tmp_path: Path) -> None:
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import DataLoaderConfiguration
    from torch.utils.data import DataLoader

    def prepared(sampler: PackingSampler) -> tuple[Any, Any]:
        config = DataLoaderConfiguration(use_stateful_dataloader=True)
        accelerator = accelerate.Accelerator(cpu=True, dataloader_config=config)
        return accelerator, accelerator.prepare(DataLoader(rows(), batch_sampler=sampler, collate_fn=sampler.collate))

    whole = batches(prepared(PackingSampler(ROWS_LENGTHS, 32, seed=5))[1])
    accelerator, loader = prepared(PackingSampler(ROWS_LENGTHS, 32, seed=5))
    it = iter(loader)
    head = [next(it)["input_ids"].tolist() for _ in range(3)]
    accelerator.save_state(tmp_path / "stateful")
    accelerator, loader = prepared(PackingSampler(ROWS_LENGTHS, 32, seed=5))
    accelerator.load_state(tmp_path / "stateful")
    assert head + batches(loader) == whole

    # several processes keep their own loaders (accelerate would split each rank's blocks again): the sampler,
    # registered for checkpointing, is saved once and restores every rank
    sampler = PackingSampler(ROWS_LENGTHS, 32, seed=5)
    accelerator = accelerate.Accelerator(cpu=True)
    accelerator.register_for_checkpointing(sampler)
    it = iter(sampler)
    head_items = [next(it) for _ in range(3)]
    accelerator.save_state(tmp_path / "registered")
    fresh = PackingSampler(ROWS_LENGTHS, 32, seed=5)
    accelerator = accelerate.Accelerator(cpu=True)
    accelerator.register_for_checkpointing(fresh)
    accelerator.load_state(tmp_path / "registered")
    assert head_items + list(fresh) == list(PackingSampler(ROWS_LENGTHS, 32, seed=5))


@pytest.mark.slow
def test_resume_benchmark_quick_run() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "resume.py"), "--quick"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert len(rows) == 15  # 3 workloads × cp 1, 2, 4, 8, 16
    resume_rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(resume_rows) == 5
