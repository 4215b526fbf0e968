"""The page's promises of this round, each through Streamlit's AppTest: a source is read once per run (its
tokenizer resolved once), the defaults (``split`` for the classic example, ``bfd`` for data, said on the page), the
learner's sentence on mask and labels before any warning, and the optimum's time limit, bound and gap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import sources
from explorer.core.runs import PAGE_TIME_LIMIT
from explorer.server.memo import STORE
from explorer.views import tables
from packing.compare import Contender, Row

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(params)
    return at.run()


def test_a_text_source_resolves_its_tokenizer_once_per_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Result tab of text rows draws cells, the turns and the figures from one resolution of the tokenizer
    (it used to be resolved three times on one trip: reading, cell labels, turns)."""
    STORE.clear()
    calls: list[str] = []
    real = sources.choose_tokenizer

    def counting(spec: str) -> object:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(sources, "choose_tokenizer", counting)
    at = _app(source="text")
    assert not at.exception, [e.value for e in at.exception]
    assert calls == ["bytes"]
    assert any("Turns" in str(h.value) for h in at.subheader)


def test_the_classic_example_starts_with_split_and_every_data_source_with_bfd() -> None:
    at = _app()
    assert at.selectbox(key="strategy").value == "split"
    assert any("`bfd`" in str(c.value) and "`split`" in str(c.value) for c in at.sidebar.caption)  # said on the page
    for params in ({"source": "synthetic", "count": "200"}, {"source": "text"}):
        assert _app(**params).selectbox(key="strategy").value == "bfd", params
    assert all(cls.default_strategy == "bfd" for cls in sources.SOURCES.values() if cls is not sources.Paste)


def test_switching_to_a_data_source_switches_to_bfd_and_back_to_split() -> None:
    at = _app()
    at.radio(key="source").set_value("synthetic").run()
    assert at.selectbox(key="strategy").value == "bfd"
    at.radio(key="source").set_value("paste").run()
    assert at.selectbox(key="strategy").value == "split"


def test_the_first_screen_tells_the_mask_from_the_labels_before_any_warning() -> None:
    at = _app()
    main = [str(e.value) for e in at.main if e.type in ("markdown", "warning", "info", "alert")]
    mask = next(i for i, text in enumerate(main) if text.startswith("**Mask and labels.**"))
    warnings = [i for i, text in enumerate(main) if "trains nothing" in text or "lost" in text.lower()]
    assert all(mask < i for i in warnings)
    assert "-100" in main[mask] and "1 on every real token" in main[mask]


def test_the_optimum_says_when_its_time_ran_out_with_the_proven_bound_and_the_gap() -> None:
    stats = packing.plan(np.array([3, 3, 3]), 4, "bfd").stats  # 3 blocks
    ran_out = tables.optimum_note(Row(Contender("optimal"), stats, 2, float(PAGE_TIME_LIMIT)), PAGE_TIME_LIMIT)
    assert f"stopped at its {PAGE_TIME_LIMIT} s limit" in ran_out and "3 blocks" in ran_out
    assert "fewer than 2 blocks" in ran_out and "at most 1 block above" in ran_out
    proven = tables.optimum_note(Row(Contender("optimal"), stats, 3, 0.1), PAGE_TIME_LIMIT)
    assert "proved its 3 blocks optimal" in proven


def test_a_gap_on_the_compare_tab_offers_a_longer_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimum's row comes back with a gap (as when its limit runs out): the tab says so and offers a longer
    search, which plans in the long lane with the page's longest limit."""
    from explorer.server import cache

    real = cache.compare

    def with_gap(*args: object) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
        rows, costs = real(*args)  # type: ignore[arg-type]
        gapped = [
            Row(r.contender, r.stats, r.bound - 1, r.seconds) if r.contender.strategy == "optimal" else r for r in rows
        ]
        return gapped, costs

    monkeypatch.setattr(cache, "compare", with_gap)
    STORE.clear()
    at = _app(sequences="[[3, 3], [5], [2, 2, 2], [4]]", max_seq_length="6", tab="Compare")
    assert any("limit" in str(i.value) and "proven bound" in str(i.value) for i in at.info)
    longer = [b for b in at.button if b.label.startswith("Search up to")]
    assert len(longer) == 1
    longer[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("proved its" in str(s.value) for s in at.success)  # the small input: proven within the limit
