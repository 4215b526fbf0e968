"""The URL query string <-> page state."""

from __future__ import annotations

from explorer import state


def test_the_classic_link() -> None:
    restored = state.read_params({"sequences": "[[1,2],[3,4,5],[6]]", "max_seq_length": "4", "strategy": "split"})
    assert restored.values == {
        "sequences": "[[1,2],[3,4,5],[6]]",
        "max_seq_length": 4,
        "strategy": "split",
        "source": "paste",
    }
    assert restored.warnings == []


def test_bad_values_are_reported_and_skipped() -> None:
    restored = state.read_params(
        {"max_seq_length": "0", "strategy": "fastest", "overflow": "drop", "loss": "maybe", "count": "x"}
    )
    assert restored.values == {"overflow": "drop"}
    assert len(restored.warnings) == 4
    assert any("max_seq_length='0'" in w for w in restored.warnings)
    assert any("strategy='fastest'" in w for w in restored.warnings)


def test_lists_use_the_last_value_and_unknown_names_are_ignored() -> None:
    assert state.read_params({"max_seq_length": ["4", "8"], "colour": "red"}).values == {"max_seq_length": 8}


def test_round_trip_for_every_source() -> None:
    for source in state.SOURCES:
        page = {
            **state.DEFAULTS,
            "source": source,
            "max_seq_length": 512,
            "strategy": "bfd",
            "overflow": "split",
            "pad_token_id": 7,
            "completion_only": False,
            "syn_count": 5,
        }
        params = state.write_params(page)
        assert params["source"] == source and params["loss"] == "all" and params["pad_token_id"] == "7"
        back = state.read_params(params).values
        assert all(page[key] == value for key, value in back.items()), source
        assert ("sequences" in params) == (source == "paste")
        assert ("count" in params) == (source == "synthetic")
        assert ("workload" in params) == (source == "workload")


def test_defaults_are_left_out_and_long_text_is_not_shared() -> None:
    params = state.write_params(state.DEFAULTS)
    assert "pad_token_id" not in params and "loss" not in params
    long_text = "1 2 3\n" * 1000
    assert "sequences" not in state.write_params({**state.DEFAULTS, "sequences": long_text})
    assert not state.sequences_in_url({"sequences": long_text})
