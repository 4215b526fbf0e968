"""The loss rules inside a chat completion: each completion of a preference pair or completion group, and the
completion of a conversational prompt/completion row, is trained exactly as the same messages of a ``{"messages":
prompt + completion}`` row are (``roles_to_train``, a message's ``weight``, ``train_on_eos``, ``loss``), the prompt
never. The two doors are compared on random chats and rules, with the byte tokenizer and a transformers tokenizer
built here (a template without and one with ``{% generation %}`` markers), through ``encode_rows``,
``packing.pack``, ``packing.torch.collate`` and the command line.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import packing
from packing.core._loss import LossRules
from packing.errors import SampleError, UnitError
from packing.text._pairs_groups_encoding import encode_units
from packing.text._text_rows import encode_rows
from packing.text._tokenizers import load_tokenizer
from tests.helpers.text_fixtures import CHATML, MARKED, save_tokenizer

pytest.importorskip("transformers")

ROLES = ("user", "assistant", "tool")


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("unit-tokenizers")
    built = {
        name: load_tokenizer(str(save_tokenizer(root / name, t)))
        for name, t in (("chatml", CHATML), ("marked", MARKED))
    }
    return {"bytes": load_tokenizer("bytes"), **built}


def message(role: str, content: str, weight: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"role": role, "content": content}
    if weight is not None:
        out["weight"] = weight
    return out


contents = st.text(alphabet="xz4 .?\n", min_size=1, max_size=6)  # mostly letters no header or footer has
messages = st.builds(message, st.sampled_from(ROLES), contents, st.sampled_from([None, None, 0, 1]))
chats = st.lists(messages, min_size=1, max_size=3)
rules = st.builds(
    LossRules,
    st.sampled_from(["completion", "last_turn", "all"]),
    st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True).map(tuple),
    st.sampled_from(["turn", "last", "all", "none", True, False]),
)


def as_chats(
    tokenizer: Any, prompt: list[dict[str, Any]], completions: list[list[dict[str, Any]]], chosen: LossRules
) -> list[tuple[Any, Any]] | SampleError:
    """The ids and mask of each ``{"messages": prompt + completion}`` row, encoded in one call as the unit's
    completions are (a template's pieces learned on the first chats lay out the next ones), or the error."""
    rows = [{"messages": [*prompt, *completion]} for completion in completions]
    try:
        tokens, mask, offsets = encode_rows(rows, tokenizer, loss_rules=chosen)
    except SampleError as error:
        return error
    return [(tokens[a:b], mask[a:b]) for a, b in itertools.pairwise(offsets.tolist())]


def own_prompt_end(
    tokenizer: Any, prompt: list[dict[str, Any]], chat_ids: Any, chat_mask: Any, chosen: LossRules
) -> int:
    """Where a chat's ids depart from the prompt's own rendering with its generation prompt (no further than its
    first trained token under rules that leave tokens out): what it shares with that rendering is context."""
    rendered = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    own = packing.text._encoding.encode_texts(tokenizer, [rendered], add_special_tokens=False).ids
    size = min(len(own), len(chat_ids))
    differs = np.flatnonzero(np.asarray(own[:size]) != np.asarray(chat_ids[:size]))
    end = int(differs[0]) if differs.size else size
    if chosen.masks_anything and np.asarray(chat_mask[:end]).any():
        end = int(np.argmax(chat_mask))
    return end


def trained_as_completion(
    tokenizer: Any, prompt: list[dict[str, Any]], chat_ids: Any, chat_mask: Any, chosen: LossRules
) -> list[int]:
    """A chat's loss mask with what it shares with the prompt's rendering (:func:`own_prompt_end`) untrained."""
    out = [int(m) for m in chat_mask]
    end = own_prompt_end(tokenizer, prompt, chat_ids, chat_mask, chosen)
    return [0] * end + out[end:]


def completions_of(unit: dict[str, Any]) -> list[tuple[Any, Any]]:
    if "completions" in unit:
        return list(zip(unit["completions"], unit["completion_masks"], strict=True))
    return [(unit["chosen"], unit["chosen_mask"]), (unit["rejected"], unit["rejected_mask"])]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["bytes", "chatml", "marked"]),
    prompt=chats,
    answers=st.lists(chats, min_size=1, max_size=3),
    pair=st.booleans(),
    chosen=rules,
)
def test_a_completion_trains_what_the_same_turns_of_a_chat_train(
    tokenizers: dict[str, Any],
    name: str,
    prompt: list[dict[str, Any]],
    answers: list[list[dict[str, Any]]],
    pair: bool,
    chosen: LossRules,
) -> None:
    tokenizer = tokenizers[name]
    if pair:
        answers = (answers * 2)[:2] if len(answers) < 2 else answers[:2]
        row: dict[str, Any] = {"prompt": prompt, "chosen": answers[0], "rejected": answers[1]}
    else:
        row = {"prompt": prompt, "completions": answers}
    chats_of = as_chats(tokenizer, prompt, answers, chosen)
    if isinstance(chats_of, SampleError):
        # a prompt turn the chat cannot locate (its content not found once): the unit never trains it
        assume(chats_of.position is None or chats_of.position >= len(prompt))
        with pytest.raises(SampleError):  # a completion's turn the template hides: refused at both doors
            encode_units([row], tokenizer, loss_rules=chosen)
        return
    # conversational prompt/completion rows (in one call, as the unit's) are the same completions, their prompt
    # untrained unless loss="all"
    rows = [{"prompt": prompt, "completion": answer} for answer in answers]
    pc_ids, pc_mask, offsets = encode_rows(rows, tokenizer, loss_rules=chosen)
    pcs = [(pc_ids[a:b], pc_mask[a:b]) for a, b in itertools.pairwise(offsets.tolist())]
    trained = [trained_as_completion(tokenizer, prompt, *pc, chosen) for pc in pcs]
    if not all(any(one) for one in trained):  # a completion that trains nothing: refused, by its field
        with pytest.raises(UnitError, match="at least one trained token"):
            encode_units([row], tokenizer, loss_rules=chosen)
        return
    [unit] = encode_units([row], tokenizer, loss_rules=chosen)
    head = unit["prompt"].tolist()
    for (ids, mask), (chat_ids, chat_mask) in zip(completions_of(unit), chats_of, strict=True):
        assert head + ids.tolist() == chat_ids.tolist()  # the same tokens: the prompt, then the completion
        # the completion's part of the chat, trained as the chat trains it
        expected = trained_as_completion(tokenizer, prompt, chat_ids, chat_mask, chosen)
        assert mask.tolist() == expected[len(head) :]
    # the unit's prompt is the prompt's own rendering (with its generation prompt), at most
    rendered = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    assert len(head) <= len(packing.text._encoding.encode_texts(tokenizer, [rendered], add_special_tokens=False).ids)
    for (ids, mask), a, b in zip(completions_of(unit), offsets[:-1], offsets[1:], strict=True):
        assert pc_ids[a:b].tolist() == head + ids.tolist()
        end = own_prompt_end(tokenizer, prompt, pc_ids[a:b], pc_mask[a:b], chosen)
        assert pc_mask[a + end : b].tolist() == mask.tolist()[end - len(head) :]
        assert pc_mask[a : a + end].tolist() == [int(chosen.loss == "all")] * end


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=chats, answers=st.lists(chats, min_size=2, max_size=2), chosen=rules, share=st.booleans())
def test_pack_and_collate_train_what_the_chats_train(
    prompt: list[dict[str, Any]], answers: list[list[dict[str, Any]]], chosen: LossRules, share: bool
) -> None:
    torch_units = pytest.importorskip("packing.torch")
    options = {"loss": chosen.loss, "roles_to_train": list(chosen.roles_to_train), "train_on_eos": chosen.train_on_eos}
    pair = {"prompt": prompt, "chosen": answers[0], "rejected": answers[1]}
    chat_masks = as_chats(packing.load_tokenizer("bytes"), prompt, answers, chosen)
    assume(not isinstance(chat_masks, SampleError))  # refusals: see the test above
    assert not isinstance(chat_masks, SampleError)
    trained = [trained_as_completion(packing.load_tokenizer("bytes"), prompt, *chat, chosen) for chat in chat_masks]
    rows = [{"prompt": prompt, "completion": answer} for answer in answers]
    pc_ids, pc_mask, offsets = encode_rows(rows, "bytes", loss_rules=chosen)
    pcs = [(pc_ids[a:b], pc_mask[a:b]) for a, b in itertools.pairwise(offsets.tolist())]
    bytes_tokenizer = packing.load_tokenizer("bytes")
    # a completion that trains nothing is refused: see the test above
    assume(all(any(trained_as_completion(bytes_tokenizer, prompt, *pc, chosen)) for pc in pcs))
    [unit] = encode_units([pair], "bytes", loss_rules=chosen)
    length = len(unit["prompt"])
    batch = packing.pack([pair], 1024, tokenizer="bytes", share_prompt=share, **options)
    expected_ids = [*chat_masks[0][0].tolist(), *chat_masks[1][0][0 if not share else length :].tolist()]
    expected_mask = [0] * length + trained[0][length:]
    expected_mask += ([] if share else [0] * length) + trained[1][length:]
    total = len(expected_ids)
    assert batch.input_ids[0][:total].tolist() == expected_ids
    assert batch.loss_mask[0][:total].tolist() == expected_mask and not batch.loss_mask[0][total:].any()
    collated = torch_units.collate([pair], tokenizer="bytes", share_prompt=share, **options)
    labels = [t if m else -100 for t, m in zip(expected_ids, expected_mask, strict=True)]
    if share:  # a shared completion's first token is predicted from the prompt's end, not by a label
        labels[len(chat_masks[0][0])] = -100
    assert collated["input_ids"][0].tolist() == expected_ids and collated["labels"][0].tolist() == labels
    # the same unit as token ids with its completions' masks: the same batch
    tokens = {key: value.tolist() for key, value in unit.items()}
    same = torch_units.collate([tokens], share_prompt=share)
    assert same["input_ids"].tolist() == collated["input_ids"].tolist()
    assert same["labels"].tolist() == collated["labels"].tolist()


def test_a_user_turn_and_a_weight_0_inside_chosen_are_not_trained() -> None:
    prompt = [{"role": "user", "content": "2+2?"}]
    chosen = [
        {"role": "assistant", "content": "hm", "weight": 0},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": "4"},
    ]
    pair = {"prompt": prompt, "chosen": chosen, "rejected": [{"role": "assistant", "content": "5"}]}
    decode = packing.text.ByteTokenizer().decode
    batch = packing.pack([pair], 256, tokenizer="bytes")
    assert decode(batch.input_ids[0][batch.loss_mask[0] == 1].tolist()) == "4<|im_end|>\n5<|im_end|>\n"
    group = {"prompt": prompt, "completions": [chosen]}
    batch = packing.pack([group], 256, tokenizer="bytes", roles_to_train=["user", "assistant"], train_on_eos="none")
    assert decode(batch.input_ids[0][batch.loss_mask[0] == 1].tolist()) == "go on4"
    batch = packing.pack([group], 256, tokenizer="bytes", loss="last_turn")
    assert decode(batch.input_ids[0][batch.loss_mask[0] == 1].tolist()) == "4<|im_end|>\n"
    # loss="all": every token of the completion, none of the prompt
    batch = packing.pack([group], 256, tokenizer="bytes", loss="all")
    [unit] = encode_units([group], "bytes")
    assert int(batch.loss_mask[0].sum()) == len(unit["completions"][0])
    assert decode(batch.input_ids[0][batch.loss_mask[0] == 1].tolist()).startswith("hm<|im_end|>\n<|im_start|>user")


def test_a_token_units_own_masks_are_kept_under_every_rule() -> None:
    unit = {
        "prompt": [1, 2],
        "chosen": [3, 4, 5],
        "rejected": [6, 7],
        "chosen_mask": [1, 0, 1],
        "rejected_mask": [0, 1],
    }
    group = {"prompt": [1], "completions": [[2, 3], [4]], "completion_masks": [[0, 1], [1]]}
    for loss in ("completion", "last_turn", "all"):
        read = packing.read_rows([unit, group], loss_rules=LossRules(loss))
        assert read.loss_mask.tolist() == [0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 1]
        batch = packing.pack([unit, group], 64, loss=loss)
        assert int(batch.loss_mask.sum()) == 5
        labels = packing.torch.collate([unit, group], loss=loss)["labels"][0].tolist()
        assert [label for label in labels if label != -100] == [3, 5, 7, 3, 4]


def test_the_command_line_trains_what_the_library_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from packing._cli import main

    prompt = [{"role": "user", "content": "2+2?"}]
    chosen = [
        {"role": "assistant", "content": "3", "weight": 0},
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "4"},
    ]
    rows = [{"prompt": prompt, "chosen": chosen, "rejected": [{"role": "assistant", "content": "5"}]}]
    source = tmp_path / "pairs.jsonl"
    source.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    output = tmp_path / "blocks.parquet"
    argv = ["pack", str(source), "--tokenizer", "bytes", "--max-seq-length", "256", "--train-on-eos", "none"]
    assert main([*argv, "--output", str(output)]) == 0, capsys.readouterr()
    [block] = pq.read_table(output).to_pylist()
    expected = packing.pack(rows, 256, tokenizer="bytes", train_on_eos="none")
    trained = np.asarray(block["input_ids"])[np.asarray(block["labels"]) != -100].tolist()
    assert packing.text.ByteTokenizer().decode(trained) == "45"
    assert trained == expected.input_ids[0][expected.loss_mask[0] == 1].tolist()


def trained_and_inputs(unit: dict[str, Any], number: int) -> tuple[list[int], list[int]]:
    """Completion ``number`` of an encoded unit: its trained ids (mask 1) and the ids its log-probability is
    computed from (the prompt, then the completion)."""
    ids, mask = completions_of(unit)[number]
    return ids[mask == 1].tolist(), unit["prompt"].tolist() + ids.tolist()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["bytes", "chatml", "marked"]),
    prompt=chats,
    answer=chats,
    siblings=st.lists(chats, min_size=1, max_size=3),
    at=st.integers(0, 3),
    loss=st.sampled_from(["completion", "last_turn", "all"]),
    roles=st.lists(st.sampled_from(ROLES), min_size=1, max_size=3, unique=True).map(tuple),
    eos=st.sampled_from(["turn", "last", "all", "none", True, False]),
)
def test_what_a_completion_trains_does_not_depend_on_its_siblings(
    tokenizers: dict[str, Any],
    name: str,
    prompt: list[dict[str, Any]],
    answer: list[dict[str, Any]],
    siblings: list[list[dict[str, Any]]],
    at: int,
    loss: str,
    roles: tuple[str, ...],
    eos: Any,
) -> None:
    tokenizer, chosen = tokenizers[name], LossRules(loss, roles, eos)
    at = min(at, len(siblings))
    group = [*siblings[:at], answer, *siblings[at:]]
    units = [
        ({"prompt": prompt, "completions": [answer]}, 0),  # alone
        ({"prompt": prompt, "chosen": answer, "rejected": answer}, 1),  # one sibling identical to itself
        ({"prompt": prompt, "completions": group}, at),  # random siblings
        ({"prompt": prompt, "chosen": answer, "rejected": siblings[0]}, 0),
        ({"prompt": prompt, "chosen": siblings[0], "rejected": answer}, 1),
    ]
    seen = []
    for row, number in units:
        try:
            [unit] = encode_units([row], tokenizer, loss_rules=chosen)
        except SampleError:
            continue  # a refused sibling (a turn the template hides, nothing trained): see the tests above
        seen.append(trained_and_inputs(unit, number))
    assert all(one == seen[0] for one in seen)
