"""Windows of blocks, comparisons, sweeps, steps and attention views agree with the library."""

from __future__ import annotations

import numpy as np
import pytest

import packing
import packing.core
import packing.errors
import packing.strategies
from explorer.core import runs as compute

SAMPLES = [
    [1, 2],
    {"prompt": [3, 4], "completion": [5]},
    [6, 7, 8, 9, 10],
    [11],
    {"input_ids": [12, 13], "loss_mask": [0, 1]},
    [14, 15, 16],
]


@pytest.mark.parametrize("strategy", ["split", "next_fit", "first_fit", "ffd", "bfd", "spfhp", "none"])
@pytest.mark.parametrize(("first", "count"), [(0, 100), (1, 2), (2, 1)])
def test_window_equals_the_same_rows_of_a_full_pack(strategy: str, first: int, count: int) -> None:
    full = packing.pack(SAMPLES, 4, strategy=strategy, overflow="split", pad_token_id=9)
    flat = packing.read_rows(SAMPLES)
    view = compute.window(full.plan, flat, first, count, 9)
    rows = slice(view.first, view.first + view.count)
    assert view.first == min(first, full.num_blocks - 1)
    assert np.array_equal(view.batch.input_ids, full.input_ids[rows])
    assert np.array_equal(view.batch.loss_mask, full.loss_mask[rows])
    assert np.array_equal(view.batch.labels, full.labels[rows])
    assert np.array_equal(view.batch.position_ids, full.position_ids[rows])
    assert np.array_equal(view.sequence_ids, full.sequence_ids[rows])


def test_window_of_lengths_only_data_places_every_piece() -> None:
    layout = packing.plan([3, 5, 2, 7], 6, strategy="bfd")
    view = compute.window(layout, None, 0, 10, 0)
    assert not view.has_tokens
    for block in range(layout.num_blocks):
        expected = np.concatenate([np.full(p.length, p.sequence) for p in layout.block(block)])
        assert np.array_equal(view.sequence_ids[block][: len(expected)], expected)
        assert (view.sequence_ids[block][len(expected) :] == -1).all()


def test_trainable_counts_match_a_full_pack() -> None:
    full = packing.pack(SAMPLES, 4, strategy="ffd")
    counts = compute.trainable_counts(full.plan, packing.read_rows(SAMPLES))
    assert counts.trainable_tokens == full.stats.trainable_tokens == int(full.loss_mask.sum())
    assert counts.target_tokens == full.stats.target_tokens == int((full.labels != packing.core.IGNORE_INDEX).sum())
    assert compute.trainable_counts(full.plan, None).trainable_tokens == full.stats.packed_tokens


def test_window_blocks_respects_the_drawing_limit() -> None:
    assert compute.window_blocks(4, 16) == 16
    assert compute.window_blocks(2048, 200) == compute.MAX_DRAW_CELLS // 2048
    assert compute.window_blocks(compute.MAX_DRAW_CELLS + 1, 16) == 0


def test_compare_runs_every_strategy_trls_windows_and_the_optimum_within_the_page_time_limit() -> None:
    from explorer.core.sources import Paste
    from explorer.server import cache

    rows, costs = cache.compare(Paste("\n".join(["1 2 3"] * 60)), packing.Recipe(8, strategy="ffd"))
    labels = [row.label for row in rows]
    assert labels == [
        *(n for n, s in packing.strategies.STRATEGIES.items() if s.keeps_boundaries),
        "bfd, windows of 1,000 (TRL's default)",
    ]  # the library's labels
    by_label = {row.label: row for row in rows}
    optimal = by_label["optimal"]
    assert optimal.stats is not None and optimal.stats.num_blocks == 30  # two 3-token sequences per block of 8
    assert optimal.gap == 0 and by_label["none"].stats is not None and by_label["none"].stats.num_blocks == 60
    assert all(row.plan is None for row in rows)  # the cache keeps statistics, not plans
    assert set(costs) == set(labels)
    # beside the others, a search searches for the page's time, whatever the chosen strategy's options
    chosen = packing.Recipe(8, strategy="first_fit_shuffle", seed=3)
    assert compute.beside(chosen, "optimal").time_limit == compute.PAGE_TIME_LIMIT
    assert compute.beside(chosen, "bfd") == packing.Recipe(8)
    assert compute.beside(chosen, "first_fit_shuffle", 16) == packing.Recipe(16, strategy="first_fit_shuffle")


def test_the_cache_keeps_each_result_under_the_part_of_the_recipe_it_depends_on() -> None:
    from explorer.core.sources import Paste
    from explorer.server import cache

    source = Paste("1 2 3\n4 5\n6")
    chosen, other = packing.Recipe(8), packing.Recipe(8, strategy="ffd", pad_token_id=7)
    assert cache.compare(source, chosen) is cache.compare(source, other)  # every strategy runs anyway
    assert cache.bounds(source, chosen) is cache.bounds(source, other)
    assert cache.plan(source, packing.Recipe(8, pad_token_id=7)) is cache.plan(source, chosen)  # padding: no replan
    assert cache.plan(source, other).plan is not cache.plan(source, chosen).plan
    padded = cache.window(source, packing.Recipe(8, pad_token_id=7), 0, 1).batch
    assert padded.input_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 7]  # the window is padded with the recipe's id
    assert cache.window(source, chosen, 0, 1).batch.input_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 0, 0]
    longer = cache.plan(source, packing.Recipe(8, strategy="optimal", time_limit=600))
    assert longer is cache.plan(source, packing.Recipe(8, strategy="optimal", time_limit=compute.MAX_TIME_LIMIT))


def test_a_refusal_is_kept_with_its_fields(optimal_refuses: None) -> None:
    run = compute.run_strategy(np.full(60, 3), packing.Recipe(8, strategy="optimal"))
    assert run.plan is None and isinstance(run.error, packing.errors.TooManyDocuments)
    assert (run.error.limit, run.error.count) == (40, 60) and "40" in run.refusal


def test_sweep_rows() -> None:
    rows = compute.sweep(np.array([3, 5, 2]), packing.Recipe(8), [4, 8], ["split", "none"])
    assert [(r["max_seq_length"], r["strategy"], r["blocks"]) for r in rows] == [
        (4, "split", 3),
        (4, "none", 3),
        (8, "split", 2),
        (8, "none", 3),
    ]


def test_steps_end_in_the_plans_blocks() -> None:
    lengths = np.array([3, 5, 2, 7, 1])
    for strategy in ("split", "ffd", "next_fit"):
        steps = compute.explain_steps(lengths, packing.Recipe(8, strategy=strategy))
        grid = compute.step_grid(steps, len(steps) - 1, 8)
        layout = packing.plan(lengths, 8, strategy=strategy)
        view = compute.window(layout, None, 0, layout.num_blocks, 0)
        assert np.array_equal(grid, view.sequence_ids), strategy
    first = compute.step_grid(compute.explain_steps(lengths, packing.Recipe(8, strategy="split")), 0, 8)
    assert first.tolist() == [[0, 0, 0, -1, -1, -1, -1, -1]]
    longest_first = compute.step_grid(compute.explain_steps(lengths, packing.Recipe(8)), 0, 8)
    assert longest_first.tolist() == [[3] * 7 + [-1]]  # only the block opened so far


@pytest.mark.parametrize(("strategy", "overflow"), [("split", "truncate"), ("ffd", "split"), ("bfd", "truncate")])
def test_step_tokens_at_the_last_step_are_the_packed_blocks(strategy: str, overflow: str) -> None:
    flat = packing.read_rows(SAMPLES)
    steps = compute.explain_steps(flat.lengths, packing.Recipe(4, strategy=strategy, overflow=overflow))
    batch = packing.pack(SAMPLES, 4, strategy=strategy, overflow=overflow, pad_token_id=99)
    tokens = compute.step_tokens(steps, len(steps) - 1, 4, flat)
    assert np.array_equal(np.where(tokens >= 0, tokens, 99), batch.input_ids)
    first = compute.step_tokens(steps, 0, 4, flat)
    assert (first[compute.step_grid(steps, 0, 4) < 0] == -1).all()  # nothing placed yet: blank


def test_steps_refuse_large_inputs_in_plain_words() -> None:
    with pytest.raises(ValueError, match="limited to"):
        compute.explain_steps(np.ones(100_000, dtype=np.int64), packing.Recipe(8, strategy="split"))


def test_attention_view_counts_cross_document_pairs() -> None:
    batch = packing.pack([[1, 2, 3], [4, 5], [6]], 8, strategy="split")
    view = compute.attention_view(batch, 0)
    real = 6
    same_document = sum(n * (n + 1) // 2 for n in (3, 2, 1))
    assert view.real_tokens == real
    assert int(view.causal.sum()) == real * (real + 1) // 2
    assert int(view.document.sum()) == same_document
    assert view.cross_pairs == real * (real + 1) // 2 - same_document
    assert view.position_plain[:real].tolist() == [0, 1, 2, 3, 4, 5]
    assert view.position_restart[:real].tolist() == [0, 1, 2, 0, 1, 0]


def test_the_pages_own_plan_is_planned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    plan = packing.plan

    def counted(*args: object, **kwargs: object) -> packing.PackingPlan:
        calls.append(1)
        return plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(packing, "plan", counted)
    run = compute.run_strategy(np.array([3, 5, 2]), packing.Recipe(8, strategy="ffd"))
    assert len(calls) == 1 and run.plan is not None and run.seconds >= 0
