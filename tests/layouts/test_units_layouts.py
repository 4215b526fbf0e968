"""Blocks of pairs and groups in other frameworks' layouts (the duplicated layout only: TRL's documents,
OpenRLHF's packed pairs), and the auditor, which reads both layouts and finds a completion that can see its
sibling."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import packing
from packing import SettingError
from packing.layouts.preference import openrlhf_pairs
from tests.helpers.units import completions_of, random_units


@pytest.mark.parametrize("share_prompt", [False, True])
def test_both_layouts_audit_clean(share_prompt: bool) -> None:
    rows = random_units(1, count=10)
    batch = packing.pack(rows, 64, share_prompt=share_prompt)
    report = packing.audit(batch.to_arrow())
    assert report.clean, report.findings
    assert report.num_documents == (1 if share_prompt else 0) * len(rows) + (
        0 if share_prompt else sum(len(completions_of(row)) for row in rows)
    )
    torch = pytest.importorskip("torch")
    import packing.torch as pt

    assert torch is not None and packing.audit(pt.collate(rows, share_prompt=share_prompt)).clean


@pytest.mark.parametrize("layout", ["trl", "flattening", "torchtune", "megatron", "segment_ids"])
def test_the_duplicated_layout_is_every_frameworks_documents(layout: str) -> None:
    rows = random_units(2, count=6)
    batch = packing.pack(rows, 64)
    table = packing.export(batch, layout)
    report = packing.audit(table, layout=layout)
    assert report.clean and report.num_documents == sum(len(completions_of(row)) for row in rows)
    with pytest.raises(
        SettingError, match=r"^layout: expected 'packing' \(this project's own layout\) with share_prompt"
    ):
        packing.export(packing.pack(rows, 64, share_prompt=True), layout)


def test_openrlhf_packs_the_chosen_first_then_the_rejected() -> None:
    rows = [row for row in random_units(3, count=12) if "chosen" in row]
    batch = packing.pack(rows, 64)
    table = openrlhf_pairs(batch)
    assert packing.audit(table).clean
    for block in range(batch.num_blocks):
        units = [int(u) for u in dict.fromkeys(batch.unit_ids[block].tolist()) if u >= 0]
        ids = table.column("input_ids")[block].as_py()
        expected = [t for u in units for t in rows[u]["prompt"] + rows[u]["chosen"]]
        expected += [t for u in units for t in rows[u]["prompt"] + rows[u]["rejected"]]
        assert ids == expected
        lengths = table.column("packed_seq_lens")[block].as_py()
        assert (
            np.repeat(np.arange(1, len(lengths) + 1), lengths).tolist() == table.column("attention_mask")[block].as_py()
        )
        assert table.column("prompt_id_lens")[block].as_py() == [len(rows[u]["prompt"]) for u in units]
    with pytest.raises(SettingError, match=r"^batch: expected blocks of preference pairs only"):
        openrlhf_pairs(packing.pack([{"prompt": [1], "completions": [[2]]}], 8))


def _unit_table(positions: list[int], seq_lengths: list[int]) -> pa.Table:
    """One block: a prompt of 2, a chosen of 2 and a rejected of 2, with these positions and documents."""
    return pa.table(
        {
            "input_ids": [[1, 2, 3, 4, 5, 6]],
            "labels": [[-100, -100, 3, 4, -100, 6]],
            "position_ids": [positions],
            "seq_lengths": [seq_lengths],
            "unit_ids": [[0] * 6],
            "completion_ids": [[-1, -1, 0, 0, 1, 1]],
        }
    )


def test_the_auditor_finds_a_completion_that_sees_its_sibling() -> None:
    shared = packing.audit(_unit_table([0, 1, 2, 3, 2, 3], [6]))
    assert shared.clean  # the prompt once, the rejected restarting at its end: the shared layout
    leaky = packing.audit(_unit_table([0, 1, 2, 3, 4, 5], [6]))  # the rejected follows the chosen: it sees it
    finding = leaky.finding("sibling_visible")
    assert finding is not None and finding.examples == ((0, 4),)
    assert "sees its sibling" in finding.description
    torn = packing.audit(_unit_table([0, 1, 2, 3, 0, 1], [6]))  # positions restart, but one document
    assert torn.finding("sibling_visible") is not None
    # the same tokens in TRL's layout, with the unit columns carried: one document of prompt, chosen and rejected
    trl = _unit_table([0, 1, 2, 3, 4, 5], [6]).drop_columns(["position_ids"])
    assert packing.audit(trl).finding("sibling_visible") is not None
