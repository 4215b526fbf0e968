"""Every entry point against every option, generated from the recipe's own field metadata (``doors``): an option
a door uses is honoured there and a value no door accepts is refused naming it; an option a door does not use is
refused there, by name, with the doors that use it; another library's name for an option is answered with this
library's. The pairs come from ``packing.recipe.option_fields()``: a new option or a new door is tested here
without a line added."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import packing
import packing.hf
import packing.ray
import packing.recipe
import packing.streaming
import packing.torch as pt
from packing import Recipe, SettingError
from packing._cli import main
from packing.errors import OptionNotUsed, PeerName
from packing.recipe import DOORS, OPTION_NAMES, PEER_NAMES, option_fields
from tests.helpers.text_fixtures import CHATML, save_tokenizer

LENGTH = 8
ROWS: list[list[int]] = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [16], [17, 18, 19]]
"""Token rows, one longer than ``LENGTH`` (for the overflow policy)."""
FIELDS = {f.name: f for f in option_fields()}
TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

VISION = {"image_token_id": 9001, "video_token_id": 9002, "vision_start_token_id": 9000, "spatial_merge_size": 2}
EXAMPLES: dict[str, tuple[Any, dict[str, Any]]] = {
    "overflow": ("drop", {}),
    "strategy": ("ffd", {}),
    "window": (2, {}),
    "time_limit": (2.0, {"strategy": "optimal"}),
    "seed": (3, {"strategy": "first_fit_shuffle"}),
    "max_sequences_per_block": (2, {"strategy": "spfhp"}),
    "loss": ("all", {}),
    "tokenizer": ("bytes", {}),
    "pad_token_id": (7, {}),
    "roles_to_train": (("assistant", "tool"), {}),
    "train_on_eos": ("none", {}),
    "chat_template": (TEMPLATE, {"tokenizer": "<a transformers tokenizer>"}),
    "num_proc": (2, {}),
    "int64": (True, {}),
    "tie_break": ("oldest", {}),
    "context_parallel_size": (2, {}),
    "tensor_parallel_size": (2, {}),
    "share_prompt": (True, {}),
    "vision": (VISION, {}),
    "max_image_patches": (64, {"vision": VISION}),
}
"""Each option: a value other than its default, and the options it needs to mean something (time_limit needs a
strategy that searches)."""
BAD: dict[str, Any] = {
    "overflow": "wrap",
    "strategy": "fastest",
    "window": 0,
    "time_limit": -1.0,
    "seed": -1,
    "max_sequences_per_block": 0,
    "loss": "some",
    "tokenizer": "./no/such/tokenizer",
    "pad_token_id": -1,
    "roles_to_train": " ",
    "train_on_eos": "sometimes",
    "chat_template": "",
    "num_proc": 0,
    "int64": "yes",
    "tie_break": "middle",
    "context_parallel_size": 0,
    "tensor_parallel_size": 1.5,
    "share_prompt": "yes",
    "vision": {"image_token_id": 5},
    "max_image_patches": 0,
}
"""Each option: a value no door accepts."""


def test_the_examples_cover_every_option() -> None:
    assert set(EXAMPLES) == set(BAD) == set(OPTION_NAMES)


# ---------------------------------------------------------------- the doors, each run on ROWS


def _jsonl(folder: Path) -> Path:
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps({"input_ids": row}) + "\n" for row in ROWS))
    return path


def _sampler(options: dict[str, Any], folder: Path) -> Any:
    sampler = pt.PackingSampler([len(row) for row in ROWS], LENGTH, **options)
    data = sampler.pieces(ROWS)
    return [sampler.collate([data[item] for item in items]) for items in sampler]


def _hf_dataset(options: dict[str, Any], folder: Path) -> Any:
    import datasets

    return packing.hf.pack_dataset(datasets.Dataset.from_dict({"input_ids": ROWS}), LENGTH, **options).to_list()


class _NotRead:
    """A Ray dataset stand-in that says so when the door reaches it: the options were taken (starting Ray for every
    option would take minutes; ``tests/core/test_recipe.py`` packs through Ray with every option it uses)."""

    def with_column(self, *args: Any) -> Any:
        raise _Reached


class _Reached(Exception):
    """``ray.pack_dataset`` took its options and went on to read its dataset."""


def _ray(options: dict[str, Any], folder: Path) -> Any:
    with pytest.raises(_Reached):
        packing.ray.pack_dataset(_NotRead(), LENGTH, **options)  # type: ignore[arg-type]


LIBRARY: dict[str, Callable[[dict[str, Any], Path], Any]] = {
    "pack": lambda o, folder: packing.pack(ROWS, LENGTH, **o),
    "plan": lambda o, folder: packing.plan([len(row) for row in ROWS], LENGTH, **o),
    "read_dataset": lambda o, folder: packing.read_dataset(_jsonl(folder), **o),
    "stream": lambda o, folder: list(packing.stream(ROWS, LENGTH, buffer_size=3, **o)),
    "PackingSampler": _sampler,
    "build_schedule": lambda o, folder: pt.build_schedule([len(row) for row in ROWS], LENGTH, **o),
    "collate": lambda o, folder: pt.collate(ROWS[:2], **o),
    "collate_fixed": lambda o, folder: pt.collate_fixed(LENGTH, **o)(ROWS),
    "hf.pack_batch": lambda o, folder: packing.hf.pack_batch({"input_ids": ROWS}, LENGTH, **o),
    "hf.pack_dataset": _hf_dataset,
    "ray.pack_dataset": _ray,
}
COMMANDS = {"packing pack": "pack", "packing compare": "compare"}


def test_every_door_is_run_here() -> None:
    assert set(LIBRARY) | set(COMMANDS) == set(DOORS)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "pack": packing.pack,
    "plan": packing.plan,
    "read_dataset": packing.read_dataset,
    "stream": packing.stream,
    "PackingSampler": pt.PackingSampler,
    "build_schedule": pt.build_schedule,
    "collate": pt.collate,
    "collate_fixed": pt.collate_fixed,
    "hf.pack_batch": packing.hf.pack_batch,
    "hf.pack_dataset": packing.hf.pack_dataset,
    "ray.pack_dataset": packing.ray.pack_dataset,
}
"""Each library door's function (the command line's are flags)."""
VERBS: dict[str, Callable[..., Any]] = {
    "stream_dataset": packing.streaming.stream_dataset,
    "materialize": packing.materialize,
    "PackedBatch.of": packing.PackedBatch.of,
    "explain": packing.explain,
    "lower_bounds": packing.lower_bounds,
    "compare": packing.compare,
    "pack_sequences": packing.pack_sequences,
}
"""The other functions that take a block length or a recipe option."""


def test_every_function_is_a_door_or_a_verb_here() -> None:
    assert set(FUNCTIONS) == set(DOORS) - set(COMMANDS)


@pytest.mark.parametrize("name", [*FUNCTIONS, *VERBS])
def test_data_then_max_seq_length_then_options_by_keyword(name: str) -> None:
    """One order at every door: the data, then ``max_seq_length``, then every recipe option and ``recipe`` by
    keyword (what else is positional is no option: ``build_schedule``'s ranks, ``read_dataset``'s file format and
    name, ``compare``'s contenders). ``collate_fixed`` makes a collate for blocks and takes no data."""
    parameters = list(inspect.signature({**FUNCTIONS, **VERBS}[name]).parameters.values())
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if "max_seq_length" in positional:
        assert positional.index("max_seq_length") == (0 if name == "collate_fixed" else 1), positional
    by_position = [n for n in positional if n in {*OPTION_NAMES, "recipe"}]
    assert by_position == []


def _argv(door: str, options: dict[str, Any], folder: Path) -> list[str]:
    argv = [COMMANDS[door], str(_jsonl(folder)), "--max-seq-length", str(LENGTH)]
    if door == "packing pack":
        argv += ["-q", "-o", str(folder / "out.parquet")]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, tuple):
            argv += [flag, ",".join(value)]
        elif FIELDS[name].metadata["parse"] is bool:  # a flag takes no value: a bad one is refused as extra text
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, str(value)]
    return argv


def _run_command(door: str, options: dict[str, Any], folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr when it failed; raises when it succeeded unexpectedly (the caller says which)."""
    code = main(_argv(door, options, folder))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith(("packing: warning:", "packing: note:"))]
    if code == 0:
        assert lines == [], err
        return ""
    assert code == 2 and len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------- the pairs


def _pairs() -> list[Any]:
    return [pytest.param(door, name, id=f"{door}-{name}") for door in DOORS for name in OPTION_NAMES]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small transformers tokenizer saved to a folder (a chat template needs one)."""
    pytest.importorskip("transformers")
    return str(save_tokenizer(tmp_path_factory.mktemp("tokenizer"), CHATML))


def _needs(door: str, name: str, tokenizer: str) -> dict[str, Any]:
    """What option ``name``'s example needs, of what ``door`` uses."""
    needs = {key: value for key, value in EXAMPLES[name][1].items() if door in FIELDS[key].metadata["doors"]}
    return {key: tokenizer if key == "tokenizer" else value for key, value in needs.items()}


@pytest.mark.parametrize(("door", "name"), _pairs())
def test_every_door_uses_or_refuses_every_option_by_name(
    door: str,
    name: str,
    tokenizer: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    uses = door in FIELDS[name].metadata["doors"]
    example = {**_needs(door, name, tokenizer), name: EXAMPLES[name][0]}
    bad = {**_needs(door, name, tokenizer), name: BAD[name]}
    if door in COMMANDS:
        flag = "--" + name.replace("_", "-")
        if uses:
            assert _run_command(door, example, tmp_path, capsys) == ""
            assert flag in _run_command(door, bad, tmp_path, capsys)  # the command's own spelling of the option
        else:
            for options in (example, bad):
                assert _run_command(door, options, tmp_path, capsys).startswith(
                    f"packing: error: unrecognized option {flag}"
                )
        return
    run = LIBRARY[door]
    if uses:
        run(example, tmp_path)  # honoured: the door runs to the end
        with pytest.raises(SettingError) as refused:
            run(bad, tmp_path)
        assert refused.value.name == name
        return
    for options in (example, bad):
        with pytest.raises(OptionNotUsed) as refused:
            run(options, tmp_path)
        assert (refused.value.name, refused.value.door) == (name, door)
        assert refused.value.users == FIELDS[name].metadata["doors"]


# ---------------------------------------------------------------- a recipe passed whole


@pytest.mark.parametrize("door", [door for door in LIBRARY if door != "ray.pack_dataset"])
def test_a_recipe_passed_whole_is_applied_where_it_is_used(door: str, tmp_path: Path) -> None:
    """One recipe for the whole pipeline goes through every door (each applies the options it uses), except an
    option a door does its own way (``stream`` packs buffer by buffer: ``window`` is refused in a recipe too)."""
    recipe = Recipe(LENGTH, strategy="ffd", overflow="drop", loss="all", pad_token_id=7, int64=True, tokenizer="bytes")
    LIBRARY[door]({"recipe": recipe}, tmp_path)
    windowed = Recipe(LENGTH, window=2)
    if door in FIELDS["window"].metadata["not_in_recipe_at"]:
        with pytest.raises(OptionNotUsed, match=rf"^window: expected no value at {door}"):
            LIBRARY[door]({"recipe": windowed}, tmp_path)
    else:
        LIBRARY[door]({"recipe": windowed}, tmp_path)


# ---------------------------------------------------------------- the peers' names


@pytest.mark.parametrize("door", list(LIBRARY))
@pytest.mark.parametrize("name", list(PEER_NAMES))
def test_a_peers_name_is_answered_with_this_librarys(door: str, name: str, tmp_path: Path) -> None:
    with pytest.raises(PeerName) as answered:
        LIBRARY[door]({name: 1}, tmp_path)
    error = answered.value
    assert error.name == name and error.peer == PEER_NAMES[name].peer
    assert error.option is None or error.option in FIELDS  # this library's own option, named
    assert str(error).startswith(f"{name}: expected {error.option or ''}")


def test_the_issues_examples() -> None:
    with pytest.raises(PeerName, match=r"^max_length: expected max_seq_length \(TRL's max_length\), got 8$"):
        packing.pack(ROWS, max_length=8)  # type: ignore[call-arg]
    with pytest.raises(PeerName, match=r"^strategy: expected strategy='bfd' with overflow='split' \(TRL's bfd_split\)"):
        packing.pack(ROWS, 8, strategy="bfd_split")  # type: ignore[arg-type]
    with pytest.raises(PeerName, match=r"^completion_only_loss: expected loss: 'completion' for True, 'all' for F"):
        Recipe(1024, completion_only_loss=False)  # type: ignore[call-arg]
    with pytest.raises(OptionNotUsed, match=r"^strategy: expected no value at collate \(it does not use strategy;"):
        pt.collate(ROWS[:2], strategy="optimal", window=3)  # type: ignore[call-arg]
    with pytest.raises(OptionNotUsed, match=r"^tokenizer: expected no value at plan"):
        packing.plan([3, 2], 4, tokenizer="bytes", roles_to_train="x")
    with pytest.raises(SettingError, match=r"^lengths: expected a flat list of integers \(one length per sample\)"):
        pt.PackingSampler([[1, 2], [3]], 4)  # type: ignore[list-item]


def test_tensors_are_rows_at_every_door() -> None:
    """The one reader of rows takes tensors: ``pack`` as ``collate`` always did."""
    import torch

    rows = [torch.tensor(row) for row in ROWS[:2]]
    assert packing.pack(rows, 4).input_ids.tolist() == packing.pack(ROWS[:2], 4).input_ids.tolist()
    masked = [{"input_ids": torch.tensor([1, 2, 3]), "loss_mask": torch.tensor([0, 1, 1])}]
    assert packing.pack(masked, 4).labels.tolist() == [[-100, 2, 3, -100]]
    assert packing.hf.pack_batch({"input_ids": rows}, 4)["input_ids"] == [[1, 2, 3], [4, 5]]
    assert [b["input_ids"].tolist() for b in packing.stream(rows, 8, shuffle=False)] == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert pt.collate(rows)["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
