"""packing.ray on a local Ray cluster: the same blocks as single-machine packing, bad rows named alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray[data]')")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]')")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import packing  # noqa: E402
import packing.errors  # noqa: E402
import packing.reading  # noqa: E402
from packing.ray import pack_dataset  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["input_ids", "labels", "loss_mask", "position_ids", "sequence_ids", "seq_lengths"]


def single_machine(rows: list[Any], max_seq_length: int, shuffle: bool, seed: int, **settings: Any) -> list[dict]:
    """``packing.pack`` on the same rows, blocks in the order single-machine shuffling gives."""
    batch = packing.pack(rows, max_seq_length, **settings)
    order = np.random.default_rng(seed).permutation(batch.num_blocks) if shuffle else np.arange(batch.num_blocks)
    return [
        {
            "input_ids": batch.input_ids[b].tolist(),
            "labels": batch.labels[b].tolist(),
            "loss_mask": batch.loss_mask[b].tolist(),
            "position_ids": batch.position_ids[b].tolist(),
            "sequence_ids": batch.sequence_ids[b].tolist(),
            "seq_lengths": batch.seq_lengths(int(b)).tolist(),
        }
        for b in order
    ]


def as_lists(rows: list[dict]) -> list[dict]:
    return [{name: [int(v) for v in row[name]] for name in COLUMNS} for row in rows]


def random_rows(n: int, seed: int, max_length: int, forms: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of the given forms, with empty and over-long ones; token ids start at 1."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        length = int(rng.integers(0, max_length + 1))
        tokens = rng.integers(1, 50_000, length).tolist()
        form = forms[i % len(forms)]
        if form == "tokens":
            rows.append({"input_ids": tokens})
        elif form == "masked":
            rows.append({"input_ids": tokens, "loss_mask": rng.integers(0, 2, length).tolist()})
        else:
            cut = int(rng.integers(0, length + 1))
            rows.append({"prompt": tokens[:cut], "completion": tokens[cut:]})
    return rows


def test_importing_packing_or_packing_ray_does_not_import_ray() -> None:
    code = "import sys, packing, packing.ray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize(
    ("forms", "max_seq_length", "settings", "shuffle"),
    [
        (("tokens", "masked", "pair"), 32, {"strategy": "bfd"}, True),
        (("pair", "tokens", "masked"), 32, {"strategy": "split"}, False),  # rows cut at block boundaries
        (("masked",), 24, {"strategy": "next_fit", "overflow": "split"}, True),
        (("pair",), 40, {"strategy": "ffd", "overflow": "drop", "pad_token_id": 7}, False),
        (("pair",), 40, {"strategy": "bfd", "loss": "all"}, True),
    ],
)
def test_same_blocks_as_single_machine(
    cluster: None, forms: tuple[str, ...], max_seq_length: int, settings: dict[str, Any], shuffle: bool
) -> None:
    rows = random_rows(230, seed=len(settings) + max_seq_length, max_length=50, forms=forms)
    ds = ray.data.from_items(rows, override_num_blocks=6)
    packed = pack_dataset(ds, max_seq_length, shuffle=shuffle, seed=11, **settings)
    got = as_lists(packed.take_all())
    assert got == single_machine(rows, max_seq_length, shuffle, 11, **settings)
    assert packed.columns() == COLUMNS


def test_optimal_and_a_capped_strategy_plan_from_the_same_lengths(cluster: None) -> None:
    rows = random_rows(30, seed=5, max_length=12, forms=("tokens",))
    ds = ray.data.from_items(rows, override_num_blocks=3)
    for options in ({"strategy": "optimal"}, {"strategy": "spfhp", "max_sequences_per_block": 2}):
        got = as_lists(pack_dataset(ds, 16, shuffle=True, seed=2, **options).take_all())
        assert got == single_machine(rows, 16, True, 2, **options)


def test_shuffled_blocks_match_the_hugging_face_adapter(cluster: None) -> None:
    """An independent single-machine path with its own shuffle: the same blocks in the same order."""
    hf = pytest.importorskip("packing.hf")
    rows = random_rows(120, seed=9, max_length=30, forms=("tokens",))
    table = pa.table({"input_ids": [row["input_ids"] for row in rows]})
    pytest.importorskip("datasets")
    expected = hf.pack_dataset(table, 32, strategy="bfd", shuffle=True, seed=4)
    got = pack_dataset(ray.data.from_arrow(table), 32, strategy="bfd", shuffle=True, seed=4).take_all()
    assert [list(row["seq_lengths"]) for row in got] == expected["seq_lengths"]
    # Ray's blocks keep their padding; the datasets adapter writes the real tokens only
    assert [list(row["input_ids"])[: sum(row["seq_lengths"])] for row in got] == expected["input_ids"]


def test_unordered_output_holds_the_same_blocks(cluster: None) -> None:
    rows = random_rows(120, seed=12, max_length=30, forms=("tokens", "pair"))
    packed = pack_dataset(ray.data.from_items(rows, override_num_blocks=4), 32, seed=5, ordered=False)
    expected = single_machine(rows, 32, True, 5, strategy="bfd")
    assert sorted(map(repr, as_lists(packed.take_all()))) == sorted(map(repr, expected))


def test_bad_row_is_named_by_its_global_row_id(cluster: None) -> None:
    rows = random_rows(90, seed=3, max_length=20, forms=("tokens",))
    rows[61] = {"input_ids": [5, -4, 6]}
    rows[77] = {"input_ids": [1, -9]}  # a later bad row, in another block of the input
    ds = ray.data.from_items(rows, override_num_blocks=5)
    with pytest.raises(packing.SampleError) as on_one_machine:
        packing.pack(rows, 16)
    with pytest.raises(packing.SampleError) as on_the_cluster:
        pack_dataset(ds, 16)
    assert str(on_the_cluster.value) == str(on_one_machine.value)
    got, expected = on_the_cluster.value, on_one_machine.value
    assert (got.sample, got.field, got.position, got.got) == (
        expected.sample,
        expected.field,
        expected.position,
        expected.got,
    )
    assert got.sample == 61


def test_a_column_of_mixed_types_is_refused_by_name(cluster: None) -> None:
    """A pair's chosen as ids in one row and text in another: Ray cannot merge the column (a pyarrow error);
    refused by name, and a pair with another form's column by the reader, as on one machine."""
    pair = {"prompt": [1, 2], "chosen": [3], "rejected": [4]}
    mixed = ray.data.from_items([pair, {**pair, "chosen": "yes"}])
    with pytest.raises(packing.SettingError, match=r"^ds: expected 'chosen' of one type in every row"):
        pack_dataset(mixed, 16)
    both = [{**pair, "completion": [5]}]
    with pytest.raises(packing.SampleError) as on_the_cluster:
        pack_dataset(ray.data.from_items(both), 16)
    with pytest.raises(packing.SampleError) as on_one_machine:
        packing.pack(both, 16)
    assert str(on_the_cluster.value) == str(on_one_machine.value)


def test_blocks_of_other_columns_are_refused_by_name(cluster: None) -> None:
    """Rows of two forms in separate blocks (token rows, then pairs): Ray's own projection fails with a KeyError
    deep in a task; refused in one line naming the missing column, and packed once every row has every column."""
    pair = {"prompt": [1, 2], "chosen": [3, 4], "rejected": [5]}
    rows: list[dict[str, Any]] = [{"input_ids": [1, 2, 3]}] * 3 + [pair] * 3
    apart = ray.data.from_items(rows, override_num_blocks=2)
    with pytest.raises(
        packing.SettingError, match=r"^ds: expected the same columns in every block .* got <a block without"
    ):
        pack_dataset(apart, 8)
    filled = [{"input_ids": None, "prompt": None, "chosen": None, "rejected": None, **row} for row in rows]
    packed = pack_dataset(ray.data.from_items(filled, override_num_blocks=2), 8).take_all()
    assert sum(sum(row["seq_lengths"]) for row in packed) == packing.pack(rows, 8).stats.packed_tokens


@pytest.mark.parametrize("override_num_blocks", [1, 4])
def test_a_length_only_row_among_token_rows_is_refused_as_on_one_machine(
    cluster: None, override_num_blocks: int
) -> None:
    rows: list[dict[str, Any]] = [*random_rows(30, seed=2, max_length=9, forms=("tokens",)), {"length": 3}]
    rows += random_rows(20, seed=4, max_length=9, forms=("pair",))
    keys = sorted(set().union(*rows))  # every row with every column, as in a table (null = absent)
    rows = [{key: row.get(key) for key in keys} for row in rows]
    with pytest.raises(packing.SampleError) as on_one_machine:
        packing.pack(rows, 8)
    with pytest.raises(packing.SampleError) as on_the_cluster:
        pack_dataset(ray.data.from_items(rows, override_num_blocks=override_num_blocks), 8)
    assert str(on_the_cluster.value) == str(on_one_machine.value)
    assert on_the_cluster.value.sample == 30


def test_ids_travel_and_arrive_at_the_recipes_width(cluster: None) -> None:
    """int32 by default (an id above 2**31 - 1 refused with its global row, as on one machine), int64 when asked."""
    rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 2**31]}, {"input_ids": [5]}]
    wide = pack_dataset(ray.data.from_items(rows), 4, int64=True).to_arrow_refs()
    table = pa.concat_tables([ray.get(ref) for ref in wide])
    assert table.schema.field("input_ids").type.value_type == pa.int64()
    assert as_lists(table.to_pylist()) == single_machine(rows, 4, True, 0, int64=True)
    with pytest.raises(packing.SampleError) as on_one_machine:
        packing.pack(rows, 4)
    with pytest.raises(packing.SampleError) as on_the_cluster:
        pack_dataset(ray.data.from_items(rows), 4).take_all()
    assert str(on_the_cluster.value) == str(on_one_machine.value)
    assert on_the_cluster.value.sample == 1
    compact = pack_dataset(ray.data.from_items([rows[0], rows[2]]), 4).to_arrow_refs()
    assert pa.concat_tables([ray.get(ref) for ref in compact]).schema.field("input_ids").type.value_type == pa.int32()


def test_settings_are_checked_before_anything_runs(cluster: None) -> None:
    ds = ray.data.from_items([{"input_ids": [1, 2]}])
    with pytest.raises(packing.SettingError, match="strategy"):
        pack_dataset(ds, 8, strategy="best")
    with pytest.raises(packing.SettingError, match="max_seq_length"):
        pack_dataset(ds, 0)
    with pytest.raises(packing.SettingError, match="shuffle"):
        pack_dataset(ds, 8, shuffle=1)  # type: ignore[arg-type]
    with pytest.raises(packing.SettingError, match="max_sequences_per_block"):
        pack_dataset(ds, 8, strategy="bfd", max_sequences_per_block=2)


def test_written_with_write_parquet(cluster: None, tmp_path: Path) -> None:
    rows = random_rows(150, seed=8, max_length=40, forms=("tokens",))
    packed = pack_dataset(ray.data.from_items(rows, override_num_blocks=4), 48, strategy="bfd", seed=1)
    packed.write_parquet(str(tmp_path / "out"))
    files = sorted((tmp_path / "out").glob("*.parquet"))
    assert files
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.column_names == COLUMNS
    assert [str(table.schema.field(c).type.value_type) for c in COLUMNS] == [  # the compact schema
        "int32",
        "int32",
        "int8",
        "int32",
        "int32",
        "int32",
    ]
    expected = single_machine(rows, 48, True, 1, strategy="bfd")
    assert as_lists(table.to_pylist()) == expected


def test_no_tokens_give_no_blocks(cluster: None) -> None:
    nothing = ray.data.from_items([{"input_ids": [1]}]).filter(lambda row: False)
    assert pack_dataset(nothing, 8).take_all() == []
    empty_rows = pack_dataset(ray.data.from_items([{"input_ids": []}, {"input_ids": []}]), 8)
    assert empty_rows.take_all() == []
    assert empty_rows.columns() == COLUMNS
    with pytest.raises(packing.SettingError, match="rows the reader reads"):
        pack_dataset(ray.data.from_items([{"notes": "no tokens"}]), 8)
    with pytest.raises(packing.errors.NeedsTokenizer, match=r"a text row needs a tokenizer: tokenizer=\.\.\."):
        pack_dataset(ray.data.from_items([{"text": "no tokens"}]), 8)


# The pipeline's steps without a cluster: any cut of the input into batches, any order of the pieces
# out of the shuffle and any cut of the blocks into batches give single-machine packing's blocks.

row_forms = st.sampled_from(("tokens", "masked", "pair"))


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, dict[str, Any], int | None, int, int, int]:
    forms = tuple(draw(st.lists(row_forms, min_size=1, max_size=3)))
    rows = random_rows(draw(st.integers(0, 40)), draw(st.integers(0, 10**6)), draw(st.integers(0, 12)), forms)
    max_seq_length = draw(st.integers(1, 10))
    strategy = draw(st.sampled_from(("split", "next_fit", "first_fit", "ffd", "bfd", "spfhp", "none")))
    overflow = draw(st.sampled_from(("truncate", "split", "drop")))
    seed = draw(st.none() | st.integers(0, 1000))
    return (
        rows,
        max_seq_length,
        {"strategy": strategy, "overflow": overflow},
        seed,
        *draw(st.tuples(st.integers(1, 7), st.integers(1, 5), st.integers(0, 2**32 - 1))),
    )


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(pipelines())
def test_the_steps_give_single_machine_blocks_whatever_the_batches_and_the_shuffle_order(
    case: tuple[list[dict[str, Any]], int, dict[str, Any], int | None, int, int, int],
) -> None:
    rows, max_seq_length, settings_, seed, input_batch, _, shuffle_seed = case
    keys = sorted(set().union(*rows)) if rows else ["input_ids"]  # every row's keys (from_pylist takes the first's)
    table = pa.table({key: pa.array([row.get(key) for row in rows], pa.list_(pa.int64())) for key in keys})
    recipe = packing.Recipe(max_seq_length, **settings_)
    got, _ = steps(with_uid(table), recipe, input_batch, seed, shuffle_seed)
    assert got == single_machine(rows, max_seq_length, seed is not None, seed or 0, **settings_)


# Rows of every form across the input's batches: a batch of plain rows does not know the dataset has pairs or
# groups, yet its over-long rows must be fitted as pack fits the plain rows among units (truncate: the first
# max_seq_length tokens kept; error: refused as a sample of a unit dataset), with the same counts.

OVERFLOWS = ("truncate", "drop", "error", "split")


def mixed_rows(forms: list[str], lengths: list[int]) -> list[dict[str, Any]]:
    """One row per form (plain ids, a preference pair, a group of three), ``length`` tokens in its completions;
    every row has every column (null where it has no value), as a table holds them."""
    rows: list[dict[str, Any]] = []
    for i, (form, length) in enumerate(zip(forms, lengths, strict=True)):
        tokens = [1 + (7 * i + j) % 97 for j in range(length)]
        if form == "tokens":
            rows.append({"input_ids": tokens})
        elif form == "pair":
            rows.append({"prompt": [101, 102], "chosen": tokens or [103], "rejected": tokens[: length // 2] or [104]})
        else:
            rows.append({"prompt": [105], "completions": [tokens or [106], [107], tokens[:2] or [108]]})
    keys = ("input_ids", "prompt", "chosen", "rejected", "completions")
    return [{key: row.get(key) for key in keys} for row in rows]


def packed_or_error(call: Any) -> tuple[Any, dict[str, Any] | None]:
    """The call's result and the statistics it warned of, or its error's type and text."""
    import warnings

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call()
    except (packing.SampleError, packing.SettingError) as error:
        return (type(error).__name__, str(error)), None
    lost = [w.message.stats for w in caught if isinstance(w.message, packing.errors.TokensLost)]
    return result, counts(lost[0]) if lost else None


def counts(stats: packing.PackingStats) -> dict[str, Any]:
    """Every count of ``stats`` but the trainable ones (the driver plans from lengths alone, without the masks)."""
    trained = ("trainable_tokens", "target_tokens", "samples_without_trainable_tokens")
    return {name: value for name, value in stats.summary().items() if name not in trained}


def steps(
    table: pa.Table, recipe: packing.Recipe, input_batch: int, seed: int | None = None, shuffle_seed: int = 0
) -> tuple[list[dict], dict[str, Any]]:
    """``pack_dataset``'s steps without a cluster, the input cut into batches of ``input_batch`` rows: the
    lengths pass, the driver's plan (shuffled with ``seed``), the rows sent to their groups of blocks (in an order
    ``shuffle_seed`` draws, as Ray's shuffle may hand them over), each group packed; the blocks, in plan order, and
    the statistics."""
    from packing import ray as steps_

    cuts = [table.slice(lo, input_batch) for lo in range(0, table.num_rows, input_batch)]
    found = steps_._collect_lengths([steps_._lengths_batch(cut, recipe) for cut in cuts], table.num_rows)
    layout, stats = found.plan(recipe)
    if not layout.num_blocks:
        return [], counts(stats)
    if seed is not None:
        layout = layout.shuffle(seed)
    broadcast = steps_._Layout.of(layout, found.ids, 2, found.completion_first())
    tagged = pa.concat_tables([steps_._tag_rows(cut, broadcast) for cut in cuts])
    tagged = tagged.take(np.random.default_rng(shuffle_seed).permutation(tagged.num_rows))
    groups = np.asarray(tagged.column(steps_._GROUP).to_numpy(), dtype=np.int64)
    packed = [steps_._pack_group(tagged.filter(pa.array(groups == g)), broadcast, recipe) for g in np.unique(groups)]
    out = pa.concat_tables(packed).sort_by(steps_._BLOCK).drop_columns([steps_._BLOCK])
    return as_lists(out.to_pylist()), counts(stats)


def pack_of(rows: list[dict[str, Any]], max_seq_length: int, overflow: str) -> tuple[Any, dict[str, Any] | None]:
    """``packing.pack``'s blocks (plan order) and statistics, or its error."""
    packed, _ = packed_or_error(lambda: packing.pack(rows, max_seq_length, overflow=overflow))
    if isinstance(packed, tuple):
        return packed, None
    return single_machine(rows, max_seq_length, False, 0, overflow=overflow), counts(packed.stats)


def with_uid(rows: list[dict[str, Any]] | pa.Table) -> pa.Table:
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    return table.append_column("__packing_uid", pa.array(np.arange(len(rows), dtype=np.int64) + (5 << 33)))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(("tokens", "pair", "group")), st.integers(0, 14)), min_size=1, max_size=9),
    st.integers(1, 10),
    st.sampled_from(OVERFLOWS),
    st.integers(1, 4),
)
def test_rows_of_every_form_across_batches_give_packs_blocks_and_counts(
    cases: list[tuple[str, int]], max_seq_length: int, overflow: str, input_batch: int
) -> None:
    rows = mixed_rows([form for form, _ in cases], [length for _, length in cases])
    expected, expected_stats = pack_of(rows, max_seq_length, overflow)
    recipe = packing.Recipe(max_seq_length, overflow=overflow)  # type: ignore[arg-type]
    got = packed_or_error(lambda: steps(with_uid(rows), recipe, input_batch))[0]
    if isinstance(expected, tuple):  # refused: the same error, naming the same row
        assert got == expected
        return
    blocks, stats = got
    assert blocks == expected
    assert stats == expected_stats


@pytest.mark.parametrize("overflow", OVERFLOWS)
def test_over_long_plain_rows_in_a_batch_apart_from_the_pairs_are_fitted_as_pack_fits_them(
    cluster: None, overflow: str
) -> None:
    """Three rows of 20 ids, then three pairs, in Ray blocks of two rows: the first block holds no pair."""
    rows = mixed_rows(["tokens"] * 3 + ["pair"] * 3, [20, 20, 20, 4, 4, 4])
    expected, expected_stats = pack_of(rows, 8, overflow)
    ds = ray.data.from_items(rows, override_num_blocks=3)
    got, stats = packed_or_error(lambda: pack_dataset(ds, 8, overflow=overflow, shuffle=False).take_all())
    if isinstance(expected, tuple):
        assert got == expected
        return
    assert as_lists(got) == expected
    assert stats == expected_stats
