"""Training-compute estimates of a layout."""

from __future__ import annotations

import packing


def test_cost_counts_slots_and_attention_by_hand() -> None:
    # bfd into 6: [5], [4, 2], [3] -> 3 blocks of 6 slots; documents 5, 4, 2, 3
    layout = packing.plan([5, 3, 2, 4], 6, strategy="bfd")
    assert packing.compute_cost(layout) == (18, 25 + 16 + 4 + 9, 3 * 36)


def test_cost_of_long_documents_does_not_overflow() -> None:
    # one 50,000-token document: its square (2.5e9) does not fit in 32 bits
    cost = packing.compute_cost(packing.plan([50_000], 50_000))
    assert cost.attention_masked == 2_500_000_000
    assert cost.attention_full == 2_500_000_000
    many = packing.compute_cost(packing.plan([4096] * 300, 4096))
    assert many.attention_masked == 300 * 4096**2
