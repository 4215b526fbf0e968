"""torchtune's own ``PackedDataset`` test cases (``tests/torchtune/datasets/test_packed_dataset.py`` in
pytorch/torchtune), re-stated as inputs and expected outputs and run against this project's ``torchtune`` export
(``packing.export(batch, "torchtune")``: ``tokens``, ``labels``, ``input_pos``, ``seq_lens``, the padding as one
more entry of ``seq_lens``). torchtune is not installable here, so the expected values are torchtune's tests'
own, worked out from their formulas; each case gives them, or asserts the difference and says why.

torchtune packs in input order: without ``split_across_pack`` a sample that does not fit starts the next pack
(``strategy="next_fit"``) and an over-long one raises (``overflow="error"``); with it, samples run on into the
next pack (``strategy="split", overflow="split"``). Its ``DummyDataset`` has 1,000 samples, sample ``i`` being
``[i] * sample_size``.
"""

from __future__ import annotations

from typing import Any

import pytest

import packing
import packing.errors

DATASET_SIZE = 1000


def dummy(sample_size: int) -> list[list[int]]:
    return [[i] * sample_size for i in range(DATASET_SIZE)]


def packs(rows: list[list[int]], max_seq_len: int, split_across_pack: bool, max_packs: int | None = None) -> Any:
    """torchtune's packs from this project: the ``torchtune`` export of the matching strategy, the first
    ``max_packs`` blocks (:meth:`PackingPlan.select`; see ``test_max_packs_is_a_selection``)."""
    strategy, overflow = ("split", "split") if split_across_pack else ("next_fit", "error")
    layout = packing.plan([len(r) for r in rows], max_seq_len, strategy=strategy, overflow=overflow)  # type: ignore[arg-type]
    if max_packs is not None and layout.num_blocks > max_packs:
        layout = layout.select(range(max_packs))
    batch = packing.materialize(layout, packing.read_rows(rows))
    return packing.export(batch, "torchtune").to_pydict()


# (sample_size, split_across_pack, max_packs) -> (number of packs, last token of the last pack)
PACKED_DATASET = {
    (2, False, 5): (5, 0),  # 12 samples a pack and 1 padding position: the last token is padding (0)
    (2, False, 200): (84, 0),  # ceil(1000 / 12)
    (2, True, 5): (5, 62),  # 125 tokens: token 124 is sample 62's
    (2, True, 200): (80, 999),  # 2,000 tokens in packs of 25
    (5, False, 5): (5, 24),  # 5 samples a pack exactly
    (5, False, 200): (200, 999),
    (5, True, 5): (5, 24),
    (5, True, 200): (200, 999),
}
FIRST_PACK = {  # sample_size, split_across_pack -> seq_lens, input_pos of pack 0 (max_seq_len 25)
    (2, False): ([2] * 12 + [1], [0, 1] * 12 + [2]),  # the padding continues the last sample's positions
    (2, True): ([2] * 12 + [1], [0, 1] * 12 + [0]),  # sample 12's first token ends the pack
    (5, False): ([5] * 5, [0, 1, 2, 3, 4] * 5),
    (5, True): ([5] * 5, [0, 1, 2, 3, 4] * 5),
}


@pytest.mark.parametrize("case", list(PACKED_DATASET), ids=lambda c: f"size{c[0]}-split{c[1]}-max{c[2]}")
def test_packed_dataset_is_the_same(case: tuple[int, bool, int]) -> None:
    """``test_packed_dataset`` (max_seq_len 25): the number of packs, the last token of the last pack, every field
    of a pack as long, and pack 0's ``seq_lens`` and ``input_pos``. Same."""
    sample_size, split, max_packs = case
    out = packs(dummy(sample_size), 25, split, max_packs)
    count, last = PACKED_DATASET[case]
    assert len(out["tokens"]) == count
    assert out["tokens"][-1][-1] == last
    assert all(
        len(t) == len(lab) == len(p) == 25
        for t, lab, p in zip(*(out[k] for k in ("tokens", "labels", "input_pos")), strict=True)
    )
    seq_lens, input_pos = FIRST_PACK[(sample_size, split)]
    assert (out["seq_lens"][0], out["input_pos"][0]) == (seq_lens, input_pos)


@pytest.mark.parametrize("max_packs", [5, 200, 3100])
@pytest.mark.parametrize("sample_size", [14, 27, 40])
def test_chunked_case_is_the_same(sample_size: int, max_packs: int) -> None:
    """``test_chunked_case`` (max_seq_len 13, samples longer than a pack, split across packs): ceil(1000 ×
    size / 13) packs (at most ``max_packs``), every field of a pack as long, and every pack's ``seq_lens`` summing
    to 13 (the padding is an entry of its own). Same."""
    out = packs(dummy(sample_size), 13, True, max_packs)
    assert len(out["tokens"]) == min(-(-DATASET_SIZE * sample_size // 13), max_packs)
    assert all(
        len(t) == len(lab) == len(p)
        for t, lab, p in zip(*(out[k] for k in ("tokens", "labels", "input_pos")), strict=True)
    )
    assert all(sum(lengths) == 13 for lengths in out["seq_lens"])


EOS = 99
"""torchtune's ``DummyTokenizer`` ends a sample with -1; token ids here are never negative (see the case)."""
REAL = [  # DummyTokenizer: 0, then each word's length, then the end of sample
    [0, 4, 2, 1, 7, 4, EOS],  # "This is a packing test"
    [0, 1, 9, 5, 2, 6, 4, 3, 8, EOS],  # "A fantastic test. It should pack two samples."
    [0, 4, 3, 4, 3, 2, 5, 7, EOS],  # "This one will not be fully packed."
]


def test_real_data_case() -> None:
    """``test_packed_dataset_real_data`` (max_seq_len 10, split across packs). Same: the tokens of every pack and
    its ``seq_lens``. Differences, asserted:

    - ``input_pos``: where a sample runs on into the next pack, torchtune continues its positions (``3, 4, ...``)
      while this project starts the piece as a document of its own at 0 (``seq_lens`` cut the attention there
      in both, so the piece sees nothing before it; restarting keeps positions and attention in agreement, which
      the auditor checks). The padding after it continues the positions in both, torchtune clamping at 9.
    - ``labels``: torchtune keeps each sample's labels as its dataset gives them (this case's are shifted by
      one, ``tokens[1:] + [-100]``); this project derives labels from the tokens in the Hugging Face convention
      (the model shifts them), -100 at each document's first token and in padding.
    - the end of sample is ``99`` here for torchtune's ``-1``: token ids are never negative here.
    """
    out = packs(REAL, 10, True)
    assert out["tokens"] == [
        [0, 4, 2, 1, 7, 4, EOS, 0, 1, 9],
        [5, 2, 6, 4, 3, 8, EOS, 0, 4, 3],
        [4, 3, 2, 5, 7, EOS, 0, 0, 0, 0],
    ]
    assert out["seq_lens"] == [[7, 3], [7, 3], [6, 4]]
    torchtune_input_pos = [
        [0, 1, 2, 3, 4, 5, 6, 0, 1, 2],
        [3, 4, 5, 6, 7, 8, 9, 0, 1, 2],
        [3, 4, 5, 6, 7, 8, 9, 9, 9, 9],
    ]
    assert out["input_pos"][0] == torchtune_input_pos[0]
    assert out["input_pos"][1:] == [[0, 1, 2, 3, 4, 5, 6, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert out["labels"][0] == [-100, 4, 2, 1, 7, 4, EOS, -100, 1, 9]  # torchtune: [4, 2, 1, 7, 4, -1, -100, 1, 9, 5]
    with pytest.raises(packing.SampleError, match="non-negative"):
        packing.pack([[0, 4, 2, 1, 7, 4, -1]], 10)


def test_pad_pack_case() -> None:
    """``test_pad_pack`` (max_seq_len 4): a pack of two one-token samples padded to 4 gets ``seq_lens`` ``[1, 1,
    2]`` (the padding an entry of its own), padding positions continuing the last one (``0 -> 1, 2``), labels -100
    in the padding. Same. Differences, asserted: the padding id is a token id (torchtune's case pads with -8,
    refused here), and positions and labels are derived, not given (torchtune's case hands in positions ``[8, 0]``
    and labels ``[3, 7]``; here each one-token document has position 0 and label -100)."""
    batch = packing.pack([[2], [5]], 4, strategy="next_fit", pad_token_id=7)
    out = packing.export(batch, "torchtune").to_pydict()
    assert out == {
        "tokens": [[2, 5, 7, 7]],
        "labels": [[-100] * 4],
        "input_pos": [[0, 0, 1, 2]],
        "seq_lens": [[1, 1, 2]],
    }
    with pytest.raises(packing.SettingError, match=r"^pad_token_id"):
        packing.pack([[2], [5]], 4, pad_token_id=-8)


def test_sample_too_long_case() -> None:
    """``test_pack_errors_if_sample_too_long`` (sample_size 8, max_seq_len 4, not split): torchtune raises a
    ``ValueError`` ("Dataset sample is too long"). Same with ``overflow="error"``: a ``SequenceTooLong`` (a
    ``ValueError``) naming sample 0 and its 8 tokens against 4. Difference: it is not the default here
    (``overflow="truncate"`` keeps the first 4 tokens), as TRL's default truncates too."""
    with pytest.raises(ValueError, match=r"^sample 0: expected at most max_seq_length=4 tokens .*got 8 tokens$") as e:
        packs(dummy(8), 4, False)
    assert isinstance(e.value, packing.errors.SequenceTooLong) and (e.value.sample, e.value.length) == (0, 8)
    assert packing.pack(dummy(8)[:1], 4).input_ids.tolist() == [[0, 0, 0, 0]]


def test_max_packs_is_a_selection() -> None:
    """torchtune's ``max_packs`` stops packing after that many packs. Difference: there is no such option here;
    the plan's first ``max_packs`` blocks (``plan.select(range(max_packs))``) are the same packs, since both strategies
    fill packs in input order, and the statistics then count only them."""
    full = packing.plan([2] * DATASET_SIZE, 25, strategy="next_fit")
    first = full.select(range(5))
    assert first.num_blocks == 5 and first.stats.packed_tokens == 5 * 24
    assert first.blocks() == full.blocks()[:5]
