"""One recipe at every door: each entry point, driven through every option, gives ``pack``'s documents and masks.

Entry points: ``pack``, ``plan``, ``read_dataset``, ``stream``, ``stream_dataset``, ``hf.pack_batch``,
``hf.pack_dataset``, ``ray.pack_dataset`` (a local Ray, started once), ``PackingSampler`` with its
``collate``, and the command line. Each is compared with ``pack`` on the same rows and options: the same
documents (sample, tokens, labels) and padding with the recipe's pad id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
import packing.errors
import packing.hf
import packing.recipe
import packing.text
import packing.torch as pt
from packing import Recipe, SettingError
from packing._cli import main
from packing.errors import NeedsTokenizer
from packing.recipe import option_fields
from tests.helpers.documents import Document, documents, sampled_documents

FIELDS = {f.name: f for f in option_fields()}
LENGTH = 8
TOKEN_ROWS: list[dict[str, Any]] = [
    {"input_ids": [1, 2, 3]},
    {"prompt": [4, 5], "completion": [6, 7, 8]},
    {"input_ids": [9] * 11},
    {"input_ids": [10, 11]},
    {"input_ids": [12, 13, 14], "loss_mask": [0, 1, 1]},
    {"input_ids": [15] * 3},
    {"input_ids": [16, 17, 18, 19, 20]},
]
TEXT_ROWS: list[dict[str, Any]] = [
    {"text": "hello world"},
    {"prompt": "why?", "completion": "because"},
    {"text": "abc"},
    {"text": "x"},
]
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "strategy": {"strategy": "ffd"},
    "seed": {"strategy": "first_fit_shuffle", "seed": 3},
    "max_sequences_per_block": {"strategy": "spfhp", "max_sequences_per_block": 2},
    "time_limit": {"strategy": "optimal", "time_limit": 2.0},
    "overflow_split": {"overflow": "split"},
    "overflow_drop": {"overflow": "drop"},
    "window": {"window": 3},
    "loss": {"loss": "all"},
    "tokenizer": {"tokenizer": "bytes"},
    "pad_token_id": {"pad_token_id": 7, "tokenizer": "bytes"},
}


def rows_for(options: Mapping[str, Any]) -> list[dict[str, Any]]:
    return TEXT_ROWS if "tokenizer" in options else TOKEN_ROWS


def expected(options: Mapping[str, Any]) -> tuple[list[Document], set[int]]:
    batch = packing.pack(rows_for(options), LENGTH, **options)
    found, pads = documents(batch.iter_blocks())
    recipe = Recipe.of(None, LENGTH, **options)
    assert pads <= {packing.text.prepare(recipe).pad_id}
    return found, {packing.text.prepare(recipe).pad_id}


def columns_to_rows(columns: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def arrow_ready(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rows as columns, None where a row has no such field (the reader reads nulls as absent)."""
    names = sorted({name for row in rows for name in row})
    return {name: [row.get(name) for row in rows] for name in names}


def check(found: tuple[list[Document], set[int]], options: Mapping[str, Any]) -> None:
    want, pad = expected(options)
    documents_found, pads = found
    assert documents_found == want
    assert pads <= pad


# ---------------------------------------------------------------- the doors


def by_pack(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    return documents(packing.pack(rows_for(options), recipe=Recipe.of(None, LENGTH, **options)).iter_blocks())


def used_by(door: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``door`` uses (the recipe's field metadata): the others it refuses."""
    return {name: value for name, value in options.items() if door in FIELDS[name].metadata["doors"]}


def by_plan(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    recipe = Recipe.of(None, LENGTH, **options)
    samples = packing.read_rows(rows_for(options), **packing.text.prepare(recipe).read_options)
    layout = packing.plan(samples.lengths, LENGTH, **used_by("plan", options))
    packed = packing.pack(rows_for(options), LENGTH, **options).plan
    for name in ("block_starts", "piece_sequence", "piece_start", "piece_length"):
        assert getattr(layout, name).tolist() == getattr(packed, name).tolist()
    return documents(
        packing.materialize(layout, samples, pad_token_id=packing.text.prepare(recipe).pad_id).iter_blocks()
    )


def by_read_dataset(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    path = tmp / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows_for(options)))
    data = packing.read_dataset(path, **used_by("read_dataset", options))
    return documents(packing.pack(data, LENGTH, **options).iter_blocks())


def by_stream(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    return documents(packing.stream(iter(rows_for(options)), LENGTH, buffer_size=3, **options))


def by_stream_dataset(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    import datasets

    rows = datasets.Dataset.from_dict(arrow_ready(rows_for(options))).to_iterable_dataset()
    return documents(packing.streaming.stream_dataset(rows, LENGTH, shuffle=False, **options))


def by_hf_pack_batch(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    return documents(columns_to_rows(packing.hf.pack_batch(arrow_ready(rows_for(options)), LENGTH, **options)))


def by_hf_pack_dataset(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    import datasets

    rows = datasets.Dataset.from_dict(arrow_ready(rows_for(options)))
    return documents(packing.hf.pack_dataset(rows, LENGTH, **options).to_list())


def by_sampler(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    rows = rows_for(options)
    recipe = Recipe.of(None, LENGTH, **options)
    return sampled_documents(
        packing.read_rows(rows, **packing.text.prepare(recipe).read_options).lengths, recipe, rows
    ), set()


def by_cli(options: dict[str, Any], tmp: Path) -> tuple[list[Document], set[int]]:
    path = tmp / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows_for(options)))
    out = tmp / "blocks.parquet"
    flags = ["pack", str(path), "--max-seq-length", str(LENGTH), "-o", str(out), "-q", "--no-shuffle"]
    for name, value in options.items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    assert main(flags) == 0
    return documents(pq.read_table(out).to_pylist())


DOORS: dict[str, Callable[[dict[str, Any], Path], tuple[list[Document], set[int]]]] = {
    "pack": by_pack,
    "plan": by_plan,
    "read_dataset": by_read_dataset,
    "stream": by_stream,
    "stream_dataset": by_stream_dataset,
    "hf.pack_batch": by_hf_pack_batch,
    "hf.pack_dataset": by_hf_pack_dataset,
    "PackingSampler+collate": by_sampler,
    "cli": by_cli,
}
REFUSED = {("stream", "window"), ("stream_dataset", "window")}
"""What a door cannot honour (it refuses it with a SettingError naming the option): the buffer is stream's window."""


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_gives_packs_documents(door: str, case: str, tmp_path: Path) -> None:
    options = dict(CASES[case])
    if (door, case) in REFUSED:
        with pytest.raises(SettingError) as caught:
            DOORS[door](options, tmp_path)
        assert caught.value.name == case
        return
    check(DOORS[door](options, tmp_path), options)


RAY_CASES: dict[str, dict[str, Any]] = {
    "seed, window, split, loss": {"strategy": "first_fit_shuffle", "seed": 3, "window": 3, "overflow": "split", "loss": "all"},
    "cap, drop, tokenizer, pad": {
        "strategy": "spfhp", "max_sequences_per_block": 2, "overflow": "drop", "tokenizer": "bytes", "pad_token_id": 7,
    },
    "time_limit, loss": {"strategy": "optimal", "time_limit": 2.0, "loss": "all"},
    "tie_break, int64, loss rules": {
        "tie_break": "oldest", "int64": True, "tokenizer": "bytes", "roles_to_train": ("assistant", "tool"),
        "train_on_eos": "none",
    },
}  # fmt: skip
"""Every option Ray uses but chat_template and num_proc (reading options, the reader's alike at every door), a few
at a time: a Ray pipeline is slow to start."""


@pytest.mark.parametrize("case", list(RAY_CASES))
def test_ray_gives_packs_documents(case: str, cluster: Any) -> None:
    import packing.ray

    options = dict(RAY_CASES[case])
    ds = cluster.data.from_items(columns_to_rows(arrow_ready(rows_for(options))))
    check(documents(packing.ray.pack_dataset(ds, LENGTH, **options).take_all()), options)


def test_ray_names_the_tokenizer_option_for_a_text_row(cluster: Any) -> None:
    import packing.ray

    with pytest.raises(NeedsTokenizer, match=r"tokenizer=\.\.\."):
        packing.ray.pack_dataset(cluster.data.from_items([{"text": "hi"}]), LENGTH)


# ---------------------------------------------------------------- refusals


def test_a_recipe_or_keywords_are_the_same() -> None:
    recipe = Recipe(LENGTH, strategy="ffd", overflow="split", loss="all")
    by_recipe = packing.pack(TOKEN_ROWS, recipe=recipe)
    by_keywords = packing.pack(TOKEN_ROWS, LENGTH, strategy="ffd", overflow="split", loss="all")
    assert by_recipe.labels.tolist() == by_keywords.labels.tolist()
    assert packing.pack(TOKEN_ROWS, recipe=recipe, strategy="bfd").plan.strategy == "bfd"  # keywords over a recipe
    with pytest.raises(
        packing.errors.PeerName, match=r"^completion_only_loss: expected loss"
    ):  # TRL's name, not an alias
        Recipe.of(recipe, completion_only_loss=False)


def test_stream_and_the_sampler_refuse_a_strategy_that_cuts_samples() -> None:
    with pytest.raises(SettingError, match=r"^strategy: expected a strategy that keeps samples whole"):
        list(packing.stream(TOKEN_ROWS, LENGTH, strategy="split"))
    with pytest.raises(SettingError, match=r"^strategy: expected a strategy that keeps samples whole"):
        pt.PackingSampler([3, 4], LENGTH, strategy="split")


TEXT_DOORS: dict[str, Callable[[], Any]] = {
    "pack": lambda: packing.pack([{"text": "hi"}], LENGTH),
    "stream": lambda: list(packing.stream([{"text": "hi"}], LENGTH)),
    "hf.pack_batch": lambda: packing.hf.pack_batch({"text": ["hi"]}, LENGTH),
    "hf.pack_dataset": lambda: packing.hf.pack_dataset({"text": ["hi"]}, LENGTH),
    "collate": lambda: pt.collate([{"text": "hi"}]),
    "collate_fixed": lambda: pt.collate_fixed(LENGTH)([{"text": "hi"}]),
}


@pytest.mark.parametrize("door", list(TEXT_DOORS))
def test_a_text_row_without_a_tokenizer_names_the_library_option(door: str) -> None:
    with pytest.raises(NeedsTokenizer) as caught:
        TEXT_DOORS[door]()
    assert "a text row needs a tokenizer: tokenizer=..." in str(caught.value)
    assert "--tokenizer" not in str(caught.value)


def test_text_rows_stream_and_collate_with_a_tokenizer() -> None:
    streamed = list(packing.stream([{"text": "hi"}], LENGTH, tokenizer="bytes", shuffle=False))
    assert (
        streamed[0]["input_ids"].tolist()[:3]
        == packing.pack([{"text": "hi"}], LENGTH, tokenizer="bytes").input_ids[0].tolist()[:3]
    )
    assert pt.collate([{"text": "hi"}], tokenizer="bytes")["input_ids"].tolist() == [[104, 105, 256]]


def test_the_command_line_names_its_own_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"text": "hi"}) + "\n")
    assert main(["pack", str(path), "--max-seq-length", "8", "-o", str(tmp_path / "o.parquet")]) == 2
    error = capsys.readouterr().err
    assert "a text row needs a tokenizer: --tokenizer)" in error and "tokenizer=" not in error
    assert main(["pack", str(path), "--max-seq-length", "8", "--window", "0", "-o", str(tmp_path / "o.parquet")]) == 2
    assert "packing: error: --window: expected an integer >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("door", ["packing pack", "packing compare"])
def test_the_command_line_options_are_the_recipes_fields(door: str) -> None:
    """Each command has a flag for every recipe option it uses (the fields' ``doors``) and none for the others."""
    from packing._cli import build_parser

    command = build_parser()._subparsers._group_actions[0].choices[door.split()[1]]  # type: ignore[union-attr]
    flags = {option for action in command._actions for option in action.option_strings}

    def flag(f: Any) -> str:  # a bool option: on by default, turned off by --no-NAME; off by default, on by --NAME
        return ("--no-" if f.metadata["parse"] is bool and f.default else "--") + f.name.replace("_", "-")

    used = {flag(f) for f in option_fields(door=door)}
    assert used <= flags
    assert not ({flag(f) for f in option_fields()} - used) & flags


def test_padding_is_the_tokenizers_own_id() -> None:
    batch = packing.pack([{"text": "hi"}], LENGTH, tokenizer="bytes")
    assert batch.input_ids[0].tolist()[3:] == [257] * (LENGTH - 3)
    assert packing.pack([{"text": "hi"}], LENGTH, tokenizer="bytes", pad_token_id=0).input_ids[0, -1] == 0
    fixed = pt.collate_fixed(LENGTH, tokenizer="bytes")([{"text": "hi"}])
    assert fixed["input_ids"][0].tolist()[3:] == [257] * (LENGTH - 3)


# ---------------------------------------------------------------- the sampler never goes over


def test_the_issues_example_is_never_longer_than_max_seq_length() -> None:
    rows = [[1] * 10, [2] * 3, [3] * 5]
    for overflow, lost in (("truncate", 2), ("drop", 10), ("split", 0)):
        sampler = pt.PackingSampler([10, 3, 5], 8, overflow=overflow)
        data = sampler.pieces(rows)
        sizes = [sampler.collate([data[i] for i in items])["input_ids"].shape[1] for items in sampler]
        assert max(sizes) <= 8 and sum(sizes) == 18 - lost
        assert sampler.stats.tokens_lost == lost


def test_collate_refuses_a_batch_longer_than_max_seq_length() -> None:
    with pytest.raises(SettingError, match=r"^rows: expected at most max_seq_length=4 tokens in all"):
        pt.collate([[1, 2, 3], [4, 5]], 4)
    with pytest.raises(SettingError, match=r"sampler\.pieces"):
        pt.collate([[1, 2, 3, 4, 5]], 4, overflow="split")
    assert pt.collate([[1, 2, 3, 4, 5], [6]], 4, overflow="drop")["input_ids"].tolist() == [[6]]


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=16),
    capacity=st.integers(min_value=1, max_value=12),
    overflow=st.sampled_from([p for p in packing.recipe.OVERFLOW_POLICIES if p != "error"]),
    replicas=st.integers(min_value=1, max_value=2),
)
def test_no_batch_over_max_seq_length_and_every_token_accounted_for(
    lengths: list[int], capacity: int, overflow: str, replicas: int
) -> None:
    rows = [[i + 1] * n for i, n in enumerate(lengths)]
    kept = [
        min(n, capacity) if overflow == "truncate" else (0 if n > capacity and overflow == "drop" else n)
        for n in lengths
    ]
    try:
        samplers = [
            pt.PackingSampler(lengths, capacity, overflow=overflow, num_replicas=replicas, rank=r)  # type: ignore[arg-type]
            for r in range(replicas)
        ]
    except SettingError as error:  # nothing to train (no sample with tokens, after the overflow policy)
        assert error.name == "lengths" and sum(kept) == 0
        return
    total = 0
    tokens_of = [0] * len(lengths)
    for sampler in samplers:
        data = sampler.pieces(rows)
        for items in sampler:
            step = [data[item] for item in items]
            batch = sampler.collate(step)
            assert batch["input_ids"].shape[1] <= capacity
            if not any(len(row["input_ids"] if isinstance(row, dict) else row) for row in step):
                # an empty step (fewer samples than ranks): padding alone, which trains nothing
                assert batch["input_ids"].shape == (1, 1) and batch["labels"].tolist() == [[-100]]
                continue
            total += batch["input_ids"].shape[1]
            for token in batch["input_ids"][0].tolist():
                tokens_of[token - 1] += 1
    assert total == sum(kept) == sum(lengths) - samplers[0].stats.tokens_lost
    assert tokens_of == kept
