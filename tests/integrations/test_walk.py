"""The walk of one call through every door: traced with ``sys.setprofile`` (the second call, so the kernels are
compiled), each door builds its recipe once (one ``Recipe.at``), prepares it at most once (one ``prepare``: the
tokenizer and the pad id) and calls no other public verb inside it (``plan``, ``materialize``, ``read_rows``,
``count_trainable``, another door, ...): the doors are thin wrappers of the one pipeline, which never climbs back
up to a door to validate again. ``ray.pack_dataset`` runs its steps in Ray's worker processes, out of a profiler's
sight; its driver's steps are the same functions (``plan_of``, ``PackedBatch.of``), checked by its own tests."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

import packing
import packing.hf
import packing.ray
import packing.streaming
import packing.torch as pt
from packing._cli import main
from packing.recipe import Recipe
from packing.text._prepare import prepare

datasets = pytest.importorskip("datasets")

PLAIN = [[1, 2], [3, 4, 5], [6]]
PAIRS = [
    {"prompt": [1, 2], "chosen": [3, 4], "rejected": [5]},
    [6, 7],
    {"prompt": [8], "chosen": [9], "rejected": [10]},
]
LENGTHS = [2, 3, 1, 4, 2]

VERBS: dict[CodeType, str] = {
    **{getattr(packing, n).__code__: n for n in packing.__all__ if hasattr(getattr(packing, n), "__code__")},
    **{getattr(pt, n).__code__: f"torch.{n}" for n in ("build_schedule", "collate", "collate_fixed")},
    packing.hf.pack_batch.__code__: "hf.pack_batch",
    packing.hf.pack_dataset.__code__: "hf.pack_dataset",
    packing.streaming.stream_dataset.__code__: "streaming.stream_dataset",
    packing.ray.pack_dataset.__code__: "ray.pack_dataset",
}
"""Every public verb a door could climb back to, by its code object."""
COMPOSED = {("command line", "write_parquet"), ("command line", "write_jsonl"), ("command line", "lower_bounds")}
"""The library's verbs the command line composes after the pipeline (its writer and its summary's lower bound):
steps down from the top layer, taking no recipe, never a climb back."""
AT = Recipe.at.__func__.__code__
PREPARE = prepare.__code__


def traced(door: Callable[[], Any]) -> list[CodeType]:
    """The code objects ``door()`` enters, in order (a profiler sees Python calls, not the compiled kernels')."""
    entered: list[CodeType] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            entered.append(frame.f_code)

    sys.setprofile(profile)
    try:
        door()
    finally:
        sys.setprofile(None)
    return entered


def run_cli(tmp: Path, rows: list[Any]) -> None:
    """``packing pack`` of ``rows`` written as JSON lines; the command's exit status checked."""
    import json

    source, out = tmp / "rows.jsonl", tmp / f"out{len(list(tmp.glob('out*')))}.parquet"  # a new output each call
    source.write_text("".join(json.dumps({"input_ids": r} if isinstance(r, list) else r) + "\n" for r in rows))
    assert main(["pack", str(source), "--output", str(out), "--max-seq-length", "8", "--quiet"]) == 0


def doors(rows: list[Any], tmp: Path) -> dict[str, Callable[[], Any]]:
    """Every door traced, called on ``rows`` (max_seq_length 8)."""
    # a dataset holds one form (mixed forms in one dataset: tests/integrations/test_door_matrix.py)
    dataset = datasets.Dataset.from_list(
        [{"input_ids": r} if isinstance(r, list) else r for r in rows if r != PAIRS[1]]
    )

    def read() -> Any:  # the file is written when the door is walked, in the test's own folder
        source = tmp / "read.jsonl"
        source.write_text("".join(f'{{"input_ids": {r}}}\n' for r in PLAIN))
        return packing.read_dataset(source)

    return {
        "pack": lambda: packing.pack(rows, 8),
        "stream": lambda: list(packing.stream(iter(rows), 8)),
        "hf.pack_batch": lambda: packing.hf.pack_batch({"input_ids": PLAIN} if rows is PLAIN else {"r": rows}, 8),
        "hf.pack_dataset": lambda: packing.hf.pack_dataset(dataset, 8),
        "collate": lambda: pt.collate(rows[:2], 16),
        "collate_fixed": lambda: pt.collate_fixed(8)(rows),
        "stream_dataset": lambda: packing.streaming.stream_dataset(dataset, 8),
        "command line": lambda: run_cli(tmp, rows),
        "plan": lambda: packing.plan(LENGTHS, 8),
        "read_dataset": read,
        "build_schedule": lambda: pt.build_schedule(LENGTHS, 8, num_replicas=2),
        "PackingSampler": lambda: list(pt.PackingSampler(LENGTHS, 8)),
    }


@pytest.mark.parametrize("form", ["plain", "pairs and groups"])
@pytest.mark.parametrize("door", list(doors(PLAIN, Path("."))))
def test_every_door_builds_its_recipe_once_and_climbs_back_to_no_verb(
    door: str, form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = PLAIN if form == "plain" else PAIRS
    if form != "plain" and door in {"hf.pack_batch", "plan", "read_dataset", "build_schedule", "PackingSampler"}:
        pytest.skip("this door takes lengths or one plain file here: its walk does not depend on the form")
    call = doors(rows, tmp_path)[door]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call()  # the kernels compiled, the caches warm
        entered = traced(call)
    capsys.readouterr()
    verbs = [VERBS[code] for code in entered if code in VERBS and (door, VERBS[code]) not in COMPOSED]
    assert entered.count(AT) == 1, f"{door}: Recipe.at called {entered.count(AT)} times"
    assert entered.count(PREPARE) <= 1, f"{door}: prepare called {entered.count(PREPARE)} times"
    assert verbs[1:] == [], f"{door}: public verbs inside the door: {verbs}"
