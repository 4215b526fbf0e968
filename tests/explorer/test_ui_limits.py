"""What one visitor may ask of the server: a link's search time is capped, and said so on the page."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer import cache, compute
from explorer.sources import Synthetic

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_a_link_asking_for_a_ten_minute_search_gets_the_capped_one_and_is_told(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    asked = []
    real = compute.run_strategy

    def recording(lengths, max_seq_length, strategy, overflow, options=()):  # type: ignore[no-untyped-def]
        asked.append(dict(options).get("time_limit"))
        return real(lengths, max_seq_length, strategy, overflow, options)

    monkeypatch.setattr(compute, "run_strategy", recording)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(
        source="synthetic", count="200", max_length="64", max_seq_length="64", strategy="optimal", time_limit="600"
    )
    at.run()
    assert not at.exception
    notes = [str(e.value) for e in at.info]
    assert any("600 s" in n and f"at most {compute.MAX_TIME_LIMIT} s" in n for n in notes), notes
    assert asked and set(asked) == {compute.MAX_TIME_LIMIT}


def test_the_page_plans_a_long_search_in_the_long_lane_within_its_deadline() -> None:
    options = compute.capped((("time_limit", 600),))
    assert compute.search_lane("optimal", options) == "long"
    assert compute.search_deadline(options) <= compute.MAX_TIME_LIMIT + 30
    run = cache.plan(Synthetic(50, "uniform", 1, 32), True, 32, "optimal", "truncate", (("time_limit", 600),))
    assert run.layout is not None
